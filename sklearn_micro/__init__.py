"""sklearn-micro: MiCRO, multi-interest candidate retrieval online, as scikit-learn estimators."""

from ._log import EmbeddedLog, EngagementLog, Vocabulary, check_log
from .micro import MiCRO

__all__ = [
    "EmbeddedLog",
    "EngagementLog",
    "MiCRO",
    "Vocabulary",
    "check_log",
]

__version__ = "0.1.0"
