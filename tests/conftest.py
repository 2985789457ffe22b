"""Test-wide settings."""

import pytest

from sklearn_micro import _gibbs


@pytest.fixture(scope="session", autouse=True)
def partitions_on_small_chunks():
    """The tests' chunks are small: sample them in ``n_jobs`` partitions anyway, so that the
    partitioned sampler is what they test (`test_micro` checks the threshold itself)."""
    threshold = _gibbs.MIN_PARTITION_WORK
    _gibbs.MIN_PARTITION_WORK = 0
    yield
    _gibbs.MIN_PARTITION_WORK = threshold
