"""How much work runs at once: ``n_jobs`` resolved the scikit-learn way, and the Dask
client of joblib's active backend.

Every estimator resolves its ``n_jobs`` here, and every piece of code that may send work to
a cluster asks here whether there is one. The module imports nothing of the package.
"""

from __future__ import annotations

import sys

from joblib import effective_n_jobs
from joblib.parallel import get_active_backend

__all__ = ["active_client", "resolve_n_jobs"]


def active_client():
    """The Dask client of joblib's active Dask backend, or None outside one."""
    module = sys.modules.get("joblib._dask")  # imported when the backend is chosen
    if module is None:
        return None
    backend, _ = get_active_backend()
    return backend.client if isinstance(backend, module.DaskDistributedBackend) else None


def resolve_n_jobs(n_jobs: int | None) -> int:
    """``n_jobs`` as a number of threads (or of a chunk's partitions), at least 1.

    Outside joblib's Dask backend, joblib's effective ``n_jobs``: None means 1 unless in a
    `joblib.parallel_config` context, -1 all processors. Inside it, ``n_jobs`` (or the
    ``n_jobs`` of ``parallel_config``) when it is a positive integer, so that a chain
    depends neither on the cluster's size nor on workers lost on the way; None or a
    negative value means the cluster's worker threads at the time of the call (joblib's
    meaning there).
    """
    if active_client() is None:
        return max(1, effective_n_jobs(n_jobs))
    if n_jobs is None:
        n_jobs = get_active_backend()[1]
    if n_jobs is not None and n_jobs > 0:
        return int(n_jobs)
    return max(1, effective_n_jobs(-1))
