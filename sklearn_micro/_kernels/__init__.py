"""Numba kernels. Nothing here imports scikit-learn; every kernel compiles with cache=True."""

import threading
from contextlib import contextmanager, nullcontext

import numba

# Held around parallel kernels when numba's threading layer cannot run two of them at
# once ("workqueue": a second launch from another thread aborts the process); "omp" and
# "tbb" can, and take no lock.
_SERIAL = threading.RLock()
_LAYER = []


def _launch_guard():
    if not _LAYER:
        with _SERIAL:  # the layer is chosen by the first launch: one thread launches it
            if not _LAYER:
                _LAYER.append(threading_layer())
    return _SERIAL if _LAYER[0] == "workqueue" else nullcontext()


@contextmanager
def numba_threads(n: int):
    """numba's parallel kernels held to ``n`` threads (at least 1, at most numba's pool)
    inside the block, as they were after it. Yields the number set.

    Every parallel kernel of the package runs inside this block, so that threads calling
    the package at once are safe: under numba's "workqueue" threading layer, which cannot
    run parallel kernels launched from two threads at once, the blocks of different
    threads take turns; under "omp" and "tbb" they run at once.
    """
    with _launch_guard():
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
