"""Utilities for those who build on sklearn-micro: `estimator_checks`, the recommender
protocol's checks."""
