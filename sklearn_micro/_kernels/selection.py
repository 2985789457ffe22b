"""Top-m primitives shared by every ranker: the ranking order, a heap of the m best,
selection of the m-th best score, the sampled cut, and filling the slots left.

A heap here is a `Heap`, three aligned arrays travelling as one (as pynndescent's heap
does): scores, popularities and items, with the worst kept item at the root (`worse` is
the ranking order: a higher score, then a higher popularity, then a lower index ranks
first). A CSR of sorted global items per row (a user's seen items, or relevant ones) is
an `ItemRows`.

Named tuples of arrays are passed to the kernels whole. Inside a ``prange`` loop a kernel
writes an array of a named tuple it was given through a local name or a called kernel,
never as ``bundle.field[i] = x`` (numba drops such a write there).
"""

from typing import NamedTuple

import numpy as np
from numba import njit

__all__ = ["CUT_SAMPLE", "SELECT_RATIO", "ZERO", "Heap", "ItemRows", "drain",
           "fill_remainder", "is_seen", "keep_best", "lower_bound", "make_heap", "offer",
           "sampled_cut", "select", "sift_down", "sift_up", "swap", "worse"]


class Heap(NamedTuple):
    """A heap of the best items kept, the worst at the root: each entry's score, its
    item's popularity (the first tie-break) and its global item index."""

    scores: np.ndarray
    pops: np.ndarray
    items: np.ndarray


class ItemRows(NamedTuple):
    """A CSR of sorted global item indices per row: row r's are
    ``items[indptr[r]:indptr[r + 1]]``."""

    indptr: np.ndarray
    items: np.ndarray

# A counter or bound that starts at 0 and is passed to another kernel starts at ZERO: a
# literal 0 would make numba compile that kernel (and its callees) once more for the
# constant, on top of the int64 version every other call needs.
ZERO = np.int64(0)

# Candidates per slot up to which a row finds its m-th best score by selection
# (`keep_best`): above it, offered one by one to a heap of m, most fail against its root.
SELECT_RATIO = 16
# Candidate scores a row of at least twice as many candidates samples to find its cut
# (`sampled_cut`): a score that about twice the m it needs reach, so that the candidates
# below it are passed over with one comparison and only a few hundred are offered to the
# heap (`_offer_touched` of `topm`, `prefilter_block` of `ranking`). 0 offers every
# candidate to the heap.
CUT_SAMPLE = 512


@njit(cache=True)
def make_heap(n):
    """An empty `Heap` of room for ``n`` entries."""
    return Heap(np.empty(n), np.empty(n), np.empty(n, np.int64))


@njit(cache=True)
def lower_bound(values, lo, hi, value):
    """The first position in the sorted ``values[lo:hi]`` whose value is not below
    ``value`` (``hi`` if none)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def is_seen(seen_items, lo, hi, item):
    """Whether ``item`` is in the sorted ``seen_items[lo:hi]``."""
    pos = lower_bound(seen_items, lo, hi, item)
    return pos < hi and seen_items[pos] == item


@njit(cache=True)
def fill_remainder(items, scores, n_filled, pop_order, pop_score, fill_base,
                   seen_indptr, seen_items):
    """Fill each row's slots after ``n_filled[r]`` with items in ``pop_order``.

    An item already in the row, or seen by the user (``seen_items[seen_indptr[r]:
    seen_indptr[r+1]]``, sorted), is skipped. The score of a filled item is
    ``fill_base[r] + pop_score[j]`` for the j-th item of ``pop_order``. Slots left over when
    ``pop_order`` runs out keep -1 and -inf. Memory is O(m), whatever the number of items.
    """
    n, m = items.shape
    for r in range(n):
        f = n_filled[r]
        if f == m:
            continue
        kept = np.sort(items[r, :f])
        lo = seen_indptr[r]
        hi = seen_indptr[r + 1]
        j = 0
        while f < m and j < pop_order.shape[0]:
            it = pop_order[j]
            if not (f > 0 and is_seen(kept, ZERO, kept.shape[0], it)) and \
                    not (hi > lo and is_seen(seen_items, lo, hi, it)):
                items[r, f] = it
                scores[r, f] = fill_base[r] + pop_score[j]
                f += 1
            j += 1
        for j in range(f, m):
            items[r, j] = -1
            scores[r, j] = -np.inf


@njit(cache=True)
def worse(s_a, p_a, i_a, s_b, p_b, i_b):
    """Whether item ``a`` ranks after item ``b``: a higher score, then a higher popularity,
    then a lower index ranks first."""
    if s_a != s_b:
        return s_a < s_b
    if p_a != p_b:
        return p_a < p_b
    return i_a > i_b


@njit(cache=True)
def swap(heap, a, b):
    """Swap the entries ``a`` and ``b`` of ``heap`` (IN/OUT)."""
    hs, hp, hi = heap
    hs[a], hs[b] = hs[b], hs[a]
    hp[a], hp[b] = hp[b], hp[a]
    hi[a], hi[b] = hi[b], hi[a]


@njit(cache=True)
def sift_down(heap, start, size):
    """Move the entry at ``start`` down ``heap`` (IN/OUT) of ``size`` entries to its place
    (the root is the worst kept item)."""
    hs, hp, hi = heap
    pos = start
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and worse(hs[child + 1], hp[child + 1], hi[child + 1],
                                      hs[child], hp[child], hi[child]):
            child += 1
        if worse(hs[child], hp[child], hi[child], hs[pos], hp[pos], hi[pos]):
            swap(heap, pos, child)
            pos = child
        else:
            break


@njit(cache=True)
def sift_up(heap, pos):
    """Move the entry at ``pos`` up ``heap`` (IN/OUT) to its place."""
    hs, hp, hi = heap
    parent = (pos - 1) // 2
    while pos > 0 and worse(hs[pos], hp[pos], hi[pos], hs[parent], hp[parent], hi[parent]):
        swap(heap, pos, parent)
        pos = parent
        parent = (pos - 1) // 2


@njit(cache=True)
def drain(heap, size, out_items, out_scores, offset):
    """Empty ``heap`` (IN, emptied) of ``size`` entries (worst on top) into
    ``out_items[:size]`` and ``out_scores[:size]`` (OUT), best first, each score plus
    ``offset``."""
    hs, hp, hi = heap
    for j in range(size - 1, -1, -1):
        out_items[j] = hi[0]
        out_scores[j] = offset + hs[0]
        hs[0] = hs[j]
        hp[0] = hp[j]
        hi[0] = hi[j]
        sift_down(heap, ZERO, j)


@njit(cache=True)
def offer(heap, size, m, s, pop, item):
    """Offer an item (score ``s``, popularity ``pop``) to ``heap`` (IN/OUT) of the ``size``
    best kept, at most ``m``; returns the new size and whether it was kept."""
    hs, hp, hi = heap
    if size < m:
        hs[size] = s
        hp[size] = pop
        hi[size] = item
        sift_up(heap, size)
        return size + 1, True
    if worse(hs[0], hp[0], hi[0], s, pop, item):
        hs[0] = s
        hp[0] = pop
        hi[0] = item
        sift_down(heap, ZERO, size)
        return size, True
    return size, False


@njit(cache=True)
def select(a, n, k):
    """Rearrange ``a[:n]`` so that ``a[k]`` is its k-th smallest value (from 0), and return
    it (quickselect with a median of three; equal values split evenly)."""
    lo = ZERO
    hi = n - 1
    while hi > lo:
        mid = (lo + hi) // 2
        if a[mid] < a[lo]:
            a[mid], a[lo] = a[lo], a[mid]
        if a[hi] < a[lo]:
            a[hi], a[lo] = a[lo], a[hi]
        if a[hi] < a[mid]:
            a[hi], a[mid] = a[mid], a[hi]
        pivot = a[mid]
        i = lo
        j = hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            break
    return a[k]


@njit(cache=True)
def keep_best(heap, n, m, scratch):
    """Turn the ``n`` candidates in ``heap`` (IN/OUT) into a heap of their best
    ``min(n, m)`` (worst on top); returns its size.

    The m-th best score is found by selection (time linear in ``n``, ``scratch`` holds
    ``n`` scores) and the heap is built from the candidates not below it alone.
    """
    if m <= 0:
        return 0
    hs, hp, hi = heap
    cut = -np.inf
    if n > m:
        scratch[:n] = hs[:n]
        cut = select(scratch, n, n - m)
    size = ZERO
    for t in range(n):
        if hs[t] >= cut:
            hs[size] = hs[t]
            hp[size] = hp[t]
            hi[size] = hi[t]
            size += 1
    for j in range(size // 2 - 1, -1, -1):
        sift_down(heap, j, size)
    while size > m:
        # more than m at the cut's score: the worst of the ties leave
        size -= 1
        hs[0] = hs[size]
        hp[0] = hp[size]
        hi[0] = hi[size]
        sift_down(heap, ZERO, size)
    return size


@njit(cache=True)
def sampled_cut(sc, nt, m, need, sample, scratch):
    """A score that about ``2 * need`` of the row's ``nt`` candidate scores ``sc`` reach,
    read from a strided sample of about ``sample`` of them; -inf when ``nt`` is below twice
    ``sample``, when m is too small for the cut to pay, or when ``sample`` is 0."""
    if sample <= 0 or m <= 0 or nt < 2 * sample or m * (np.log(nt / m) - 1.0) < sample / 4:
        # a heap fed one by one takes about m * (1 + log(nt / m)) offers; with a small m
        # the offers the cut saves do not pay for reading the sample
        return -np.inf
    step = nt // sample
    ns = ZERO
    for t in range(0, nt, step):
        scratch[ns] = sc[t]
        ns += 1
    j = (2 * need * ns) // nt + 1 + ns // 128
    if j >= ns:
        return -np.inf
    return select(scratch, ns, ns - j)
