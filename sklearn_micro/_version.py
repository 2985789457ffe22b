"""The version of sklearn-micro, which a saved model carries and `persistence` checks."""

__version__ = "0.2.0"
