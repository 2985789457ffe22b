"""Row surgery on compressed sparse rows."""

import numpy as np
from numba import njit

from .selection import lower_bound


def keep_entries(indptr, keep):
    """The ``indptr`` of a CSR with only its entries where ``keep`` is True (every row
    kept, the entries in their order)."""
    return np.concatenate(([0], np.cumsum(keep, dtype=np.int64)))[indptr]


@njit(cache=True)
def fill_ranges(lo, hi, indptr, out):
    """``out[indptr[r]:indptr[r + 1]] = lo[r]:hi[r]`` for every row r: one pass of
    writing (numpy's repeat-and-add makes three arrays of the output's size)."""
    for r in range(lo.shape[0]):
        shift = indptr[r] - lo[r]
        for p in range(lo[r], hi[r]):
            out[shift + p] = p


@njit(cache=True)
def append_to_rows(indptr, column, add_indptr, add_column):
    """The entries of each row ``r``, ``column[indptr[r]:indptr[r + 1]]``, followed by
    ``add_column[add_indptr[r]:add_indptr[r + 1]]``: one pass of copying."""
    out = np.empty(column.shape[0] + add_column.shape[0], column.dtype)
    p = 0
    for r in range(indptr.shape[0] - 1):
        n = indptr[r + 1] - indptr[r]
        out[p:p + n] = column[indptr[r]:indptr[r + 1]]
        p += n
        n = add_indptr[r + 1] - add_indptr[r]
        out[p:p + n] = add_column[add_indptr[r]:add_indptr[r + 1]]
        p += n
    return out


@njit(cache=True)
def _merge_pass(old, new, out):
    """The distinct values of the sorted ``old`` and ``new``, written to ``out`` in order;
    returns how many."""
    n = 0
    i = 0
    j = 0
    last = 0
    while i < old.shape[0] or j < new.shape[0]:
        if j == new.shape[0] or (i < old.shape[0] and old[i] <= new[j]):
            value = old[i]
            i += 1
        else:
            value = new[j]
            j += 1
        if n == 0 or value != last:
            out[n] = value
            last = value
            n += 1
    return n


@njit(cache=True)
def merge_distinct(old, new):
    """The sorted distinct values of the sorted arrays ``old`` and ``new``: one merge pass
    into room for both (exactly their size when they share no value, as `SeenItems`'
    runs never do; else copied down to the values written)."""
    out = np.empty(old.shape[0] + new.shape[0], old.dtype)
    n = _merge_pass(old, new, out)
    return out if n == out.shape[0] else out[:n].copy()


@njit(cache=True)
def sorted_contains(sorted_values, values):
    """Whether each of ``values`` (sorted) is in ``sorted_values`` (sorted): one forward
    walk that gallops over ``sorted_values``, O(m log(n / m)) for m values among n."""
    n = sorted_values.shape[0]
    found = np.zeros(values.shape[0], np.bool_)
    lo = 0
    for i in range(values.shape[0]):
        value = values[i]
        # every sorted_values[:lo] is below value; gallop to an hi that is not
        step = 1
        hi = lo
        while hi < n and sorted_values[hi] < value:
            lo = hi + 1
            hi = lo + step
            step *= 2
        lo = lower_bound(sorted_values, lo, min(hi, n), value)
        found[i] = lo < n and sorted_values[lo] == value
    return found
