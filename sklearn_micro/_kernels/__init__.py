"""Numba kernels. Nothing here imports scikit-learn; every kernel compiles with cache=True."""

from contextlib import contextmanager

import numba


@contextmanager
def numba_threads(n: int):
    """numba's parallel kernels held to ``n`` threads (at least 1, at most numba's pool)
    inside the block, as they were after it. Yields the number set."""
    before = numba.get_num_threads()
    numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))
    try:
        yield numba.get_num_threads()
    finally:
        numba.set_num_threads(before)
