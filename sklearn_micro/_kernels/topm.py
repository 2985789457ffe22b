"""Top-m selection and filling of the remaining slots, shared by every recommender."""

import numpy as np
from numba import njit


@njit(cache=True)
def _is_seen(seen_items, lo, hi, item):
    # seen_items[lo:hi] is sorted: binary search
    while lo < hi:
        mid = (lo + hi) // 2
        if seen_items[mid] < item:
            lo = mid + 1
        else:
            hi = mid
    return lo < seen_items.shape[0] and seen_items[lo] == item and hi >= lo


@njit(cache=True)
def fill_remainder(items, scores, n_filled, pop_order, pop_score, fill_base,
                   seen_indptr, seen_items, n_items):
    """Fill each row's slots after ``n_filled[r]`` with items in ``pop_order``.

    An item already in the row, or seen by the user (``seen_items[seen_indptr[r]:
    seen_indptr[r+1]]``, sorted), is skipped. The score of a filled item is
    ``fill_base[r] + pop_score[j]`` for the j-th item of ``pop_order``. Slots left over when
    ``pop_order`` runs out keep -1 and -inf.
    """
    n, m = items.shape
    mark = np.zeros(n_items, np.bool_)
    for r in range(n):
        f = n_filled[r]
        for j in range(f):
            mark[items[r, j]] = True
        lo = seen_indptr[r]
        hi = seen_indptr[r + 1]
        j = 0
        while f < m and j < pop_order.shape[0]:
            it = pop_order[j]
            if not mark[it] and not (hi > lo and _is_seen(seen_items, lo, hi, it)):
                items[r, f] = it
                scores[r, f] = fill_base[r] + pop_score[j]
                f += 1
            j += 1
        for j in range(f, m):
            items[r, j] = -1
            scores[r, j] = -np.inf
        for j in range(n_filled[r]):
            mark[items[r, j]] = False
