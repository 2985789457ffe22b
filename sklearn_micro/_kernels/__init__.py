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


@numba.njit(cache=True, parallel=True)
def _count_up(n):
    total = 0
    for i in numba.prange(n):
        total += i
    return total


def threading_layer() -> str:
    """The threading layer numba's parallel kernels run on (``"omp"``, ``"tbb"`` or
    ``"workqueue"``), chosen by running a small parallel kernel if none has run yet."""
    try:
        return numba.threading_layer()
    except ValueError:  # chosen at the first launch of a parallel kernel
        _count_up(4)
        return numba.threading_layer()
