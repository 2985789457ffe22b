"""MiCRO's top-m rankers: the users' mixtures over the latest chunk's ``phi``, with or
without the personal component, built on the primitives of `selection`."""

import numpy as np
from numba import njit, prange

from .csr import keep_entries
from .selection import (
    CUT_SAMPLE,
    SELECT_RATIO,
    ZERO,
    drain,
    is_seen,
    keep_best,
    lower_bound,
    offer,
    sampled_cut,
    worse,
)

# Items of the latest chunk that a range of a row's scratch of scores covers in
# `personal_topm`: 32,768 float64 scores, 256 KB, stay in a core's L2 cache while a block
# of `RANGE_ROWS` rows is scattered into them (the block's candidate lists, about 12 bytes
# an entry, are read back by the selections). A chunk of more items is scattered range by
# range, each block of rows in turn; a chunk of fewer, one row at a time (the scratch
# itself stays in the cache).
RANGE_ITEMS = 1 << 15
RANGE_ROWS = 8


@njit(cache=True)
def scatter_row(r, q_ptr, q_k, q_w, starts, ends, phi_item, phi_cnt, acc, touched):
    """Add row r's ``q_w[k] * phi_cnt[k, li]`` into ``acc`` (zero on entry) and list the
    local items it touched, once each, in ``touched``; returns their number. The entries of
    interest k read are ``starts[k]`` to ``ends[k]`` (rows of `_range_pointers`).

    Every entry writes its item at the list's end, which moves on only where the item's
    score was still 0 (every weight and count is positive): no branch on the item, whose
    outcome the processor could not guess. ``touched`` needs a slot more than the items
    (an entry of an item already listed writes past the last one).
    """
    nt = ZERO
    for q in range(q_ptr[r], q_ptr[r + 1]):
        k = q_k[q]
        w = q_w[q]
        for p in range(starts[k], ends[k]):
            li = phi_item[p]
            a = acc[li]
            touched[nt] = li
            nt += a == 0.0
            acc[li] = a + w * phi_cnt[p]
    return nt


@njit(cache=True)
def _range_pointers(phi_ptr, phi_item, n_local, range_items):
    """``ranges[j, k]``: interest k's first entry of a local item from ``j * range_items``
    on (the last row, its end), for ``ceil(n_local / range_items)`` ranges (at least 1).

    With more than one range, each interest's entries must be in increasing local item,
    as `group_by_interest` orders them; rows ``j`` and ``j + 1`` are then the entries of
    range j, `scatter_row`'s ``starts`` and ``ends``.
    """
    n_k = phi_ptr.shape[0] - 1
    n_ranges = max(1, (n_local + range_items - 1) // range_items)
    ranges = np.empty((n_ranges + 1, n_k), np.int64)
    for k in range(n_k):
        ranges[0, k] = phi_ptr[k]
        ranges[n_ranges, k] = phi_ptr[k + 1]
        for j in range(1, n_ranges):
            ranges[j, k] = lower_bound(phi_item, ranges[j - 1, k], phi_ptr[k + 1],
                                       j * range_items)
    return ranges


@njit(cache=True)
def _scale_scores(touched, nt, keep, base, share, item_share, sc):
    """``sc[t] = keep * (base + share * item_share[li] + sc[t])`` for each touched item
    ``li = touched[t]``, from its interests' score ``sc[t]`` (`_block_candidates`): a
    ranking's scores made in order from the row's candidate list."""
    if share == 0.0:
        for t in range(nt):
            sc[t] = keep * (base + sc[t])
    else:
        for t in range(nt):
            sc[t] = keep * (base + share * item_share[touched[t]] + sc[t])


@njit(cache=True)
def _offer_touched(touched, sc, nt, mark, item_pop, chunk_items, seen_items, lo, hi_seen, m,
                   need, sample, hs, hp, hi, size, scratch):
    """Offer the row's touched candidates ``touched[t]``, each with its score ``sc[t]``
    (`_block_candidates`, `_scale_scores`), to the heap of the ``size`` best kept in
    ``hs, hp, hi``; returns its new size.

    Items marked 2 in ``mark`` (when it is not empty) and seen items are left out. Up to
    `SELECT_RATIO` candidates a slot join the heap's own and the best m of them all are
    found by selection (`keep_best`). More are offered one by one: a candidate below the
    heap's root once it holds m is passed over after one comparison, and, with at least
    twice ``sample`` candidates, so is a candidate below a cut (`sampled_cut`; ``need``:
    m and the candidates that may be left out) that about ``2 * need`` candidates reach:
    with the candidates in any order, many of them would otherwise enter a heap that is
    not yet full or whose root is still low, and sift. Unless the heap then holds m
    candidates, none below the cut, the candidates below the cut are offered in a second
    pass (an unlucky sample, or a heap of recent items below the cut): either way the top
    m is the same, since a candidate below the cut cannot enter a full heap whose root is
    not below it.
    """
    marked = mark.shape[0] > 0
    if sample > 0 and nt <= SELECT_RATIO * m:
        # few candidates a slot: the m-th best score is found by selection (`keep_best`)
        n = size
        for t in range(nt):
            li = touched[t]
            if marked and mark[li] == 2:
                continue
            item = chunk_items[li]
            if hi_seen > lo and is_seen(seen_items, lo, hi_seen, item):
                continue
            hs[n] = sc[t]
            hp[n] = item_pop[li]
            hi[n] = item
            n += 1
        return keep_best(hs, hp, hi, n, m, scratch)
    cut = sampled_cut(sc, nt, m, need, sample, scratch)
    for below in (False, True):
        if below and (cut == -np.inf or (size == m and hs[0] >= cut)):
            break
        for t in range(nt):
            s = sc[t]
            if (s < cut) != below:
                continue
            if size == m and s < hs[0]:
                continue
            li = touched[t]
            if marked and mark[li] == 2:
                continue
            item = chunk_items[li]
            if hi_seen > lo and is_seen(seen_items, lo, hi_seen, item):
                continue
            size, _ = offer(hs, hp, hi, size, m, s, item_pop[li], item)
    return size


@njit(cache=True, parallel=True)
def mixture_topm(q_ptr, q_k, q_w, q_base, phi_ptr, phi_item, phi_cnt, item_pop, chunk_items,
                 seen_indptr, seen_items, m, n_threads, sample=CUT_SAMPLE,
                 range_items=RANGE_ITEMS, range_rows=RANGE_ROWS):
    """Exact top-m of ``q_base[r] + sum_k q_w[k] * phi_cnt[k, i]`` for each query row r.

    ``q_*`` is a CSR of each query's interests and weights; ``phi_*`` a CSR from interest to
    (local item, count) of the latest chunk, local items being positions in ``chunk_items``
    (global indices, in any order: numbering the items interest by interest keeps a row's
    scratch close together, see `group_by_interest`). Only items with a count in one
    of the query's interests are scored. Ties go to the more popular item (``item_pop``),
    then the lower global index. Returns global item indices, scores and how many slots
    each row filled.

    A row of up to `SELECT_RATIO` candidates a slot finds its m-th best score by
    selection; a row of more offers them to a heap of m, and from ``2 * sample``
    candidates on only those above a cut read from about ``sample`` of their scores
    (`_offer_touched`). Any ``sample`` gives the same lists; 0 offers every candidate to
    the heap. A chunk of more than ``range_items`` items is scattered range by range, as
    in `personal_topm` (whose condition on ``phi_item`` holds then); the lists are the
    same for any ``range_items`` and ``range_rows``.
    """
    n = q_ptr.shape[0] - 1
    n_local = chunk_items.shape[0]
    items = np.full((n, m), -1, np.int64)
    scores = np.full((n, m), -np.inf)
    n_filled = np.zeros(n, np.int64)
    no_mark = np.zeros(0, np.uint8)
    no_recent_ptr = np.zeros(n + 1, np.int64)
    no_recent = np.empty(0, np.int64)
    ranges = _range_pointers(phi_ptr, phi_item, n_local, range_items)
    n_rows = max(1, range_rows) if ranges.shape[0] > 2 else 1
    # one block of rows per thread: each holds item-sized scratch, allocated once per call
    n_blocks = max(1, min(n, n_threads))
    for b in prange(n_blocks):
        first = b * n // n_blocks
        last = (b + 1) * n // n_blocks
        acc = np.zeros(n_local)
        touched = np.empty(n_local + 1, np.int32)
        capacity = _block_capacity(first, last, n_rows, q_ptr, q_k, ranges, n_local)
        cand_item = np.empty(capacity, np.int32)
        cand_score = np.empty(capacity)
        cand_start = np.empty(n_rows + 1, np.int64)
        cand_end = np.empty(n_rows, np.int64)
        no_local = np.empty((n_rows, 0), np.int64)
        no_acc = np.empty((n_rows, 0))
        hs = np.empty(n_local)
        hp = np.empty(n_local)
        hi = np.empty(n_local, np.int64)
        scratch = np.empty(n_local)
        for r0 in range(first, last, n_rows):
            r1 = min(last, r0 + n_rows)
            _block_candidates(r0, r1, q_ptr, q_k, q_w, ranges, phi_item, phi_cnt,
                              no_recent_ptr, no_recent, no_recent, no_recent, acc, touched,
                              cand_start, cand_end, cand_item, cand_score, no_local, no_acc)
            for r in range(r0, r1):
                i = r - r0
                n_filled[r] = _mixture_select(
                    r, cand_item[cand_start[i]:cand_end[i]],
                    cand_score[cand_start[i]:cand_end[i]], cand_end[i] - cand_start[i],
                    q_base, item_pop, chunk_items, seen_indptr, seen_items, m, sample, no_mark,
                    hs, hp, hi, scratch, items[r], scores[r])
    return items, scores, n_filled


@njit(cache=True)
def _mixture_select(r, touched, sc, nt, q_base, item_pop, chunk_items, seen_indptr,
                    seen_items, m, sample, no_mark, hs, hp, hi, scratch, out_items,
                    out_scores):
    """`mixture_topm`'s row r from its ``nt`` candidates ``touched`` and their interests'
    scores ``sc`` (`_block_candidates`) into ``out_items`` and ``out_scores``, best first;
    returns how many slots it filled. ``no_mark`` is empty."""
    lo = seen_indptr[r]
    hi_seen = seen_indptr[r + 1]
    size = _offer_touched(touched, sc, nt, no_mark, item_pop, chunk_items, seen_items, lo,
                          hi_seen, m, m + hi_seen - lo, sample, hs, hp, hi, ZERO, scratch)
    drain(hs, hp, hi, size, out_items, out_scores, q_base[r])
    return size


def retrieval_phi(phi_ptr, phi_item, phi_cnt, min_count):
    """The interest-major CSR ``phi_*`` as retrieval reads it: the entries whose count is
    at least ``min_count`` (the same arrays when every entry is)."""
    if phi_cnt.shape[0] == 0 or phi_cnt.min() >= min_count:
        return phi_ptr, phi_item, phi_cnt
    keep = phi_cnt >= min_count
    return keep_entries(phi_ptr, keep), phi_item[keep], phi_cnt[keep]


def group_by_interest(phi_ptr, phi_item, phi_cnt, n_local):
    """A numbering of the latest chunk's items interest by interest, for the top-m kernels.

    Local items are numbered in the order they first appear in the interest-major CSR
    ``phi_*`` (items without an entry last), and each interest's entries are sorted by the
    new number: a query then reads and writes its per-item scratch in runs, not all over an
    array of the chunk's items (on a chunk of 188,000 items and K = 5,000 that scratch is
    1.5 MB a thread). The kernels give the same answer in either numbering.

    Returns
    -------
    order : ndarray
        The old local index of each new one (``chunk_items[order]`` are the items in the
        new numbering).
    local_of : ndarray
        The new local index of each old one.
    phi_item, phi_cnt : ndarray
        The CSR's entries in the new numbering.
    """
    present, first = np.unique(phi_item, return_index=True)
    order = np.concatenate([present[np.argsort(first, kind="stable")],
                            np.setdiff1d(np.arange(n_local), present, assume_unique=True)])
    # int32 where the chunk's items fit: the kernels read one per candidate entry
    local_of = np.empty(n_local, np.int32 if n_local < 2**31 else np.int64)
    local_of[order] = np.arange(n_local)
    renumbered = local_of[phi_item]
    rows = np.repeat(np.arange(phi_ptr.shape[0] - 1, dtype=np.int64), np.diff(phi_ptr))
    entries = np.argsort(rows * n_local + renumbered, kind="stable")
    return order, local_of, renumbered[entries], phi_cnt[entries]


@njit(cache=True)
def _find_recent(r, r_ptr, r_item, sorted_items, local_of, recent_local):
    """Row r's recent items' local indices into ``recent_local`` (-1 for one outside the
    chunk): each is looked up in ``sorted_items``, the chunk's global items sorted, whose
    position ``pos`` is the local index ``local_of[pos]``."""
    n_local = sorted_items.shape[0]
    for p in range(r_ptr[r], r_ptr[r + 1]):
        item = r_item[p]
        pos = lower_bound(sorted_items, ZERO, n_local, item)
        if pos < n_local and sorted_items[pos] == item:
            recent_local[p - r_ptr[r]] = local_of[pos]
        else:
            recent_local[p - r_ptr[r]] = -1


@njit(cache=True)
def _mark_recent(r, r_ptr, recent_local, mark, value):
    """``mark[li] = value`` for row r's recent items of the chunk (`_find_recent`)."""
    for p in range(r_ptr[r + 1] - r_ptr[r]):
        li = recent_local[p]
        if li >= 0:
            mark[li] = value


@njit(cache=True)
def _block_candidates(r0, r1, q_ptr, q_k, q_w, ranges, phi_item, phi_cnt, r_ptr, r_item,
                      sorted_items, local_of, acc, touched, cand_start, cand_end, cand_item,
                      cand_score, recent_local, recent_acc):
    """The candidates of rows ``r0`` to ``r1`` with their interests' scores, and their
    recent items, for `personal_topm` and `personal_ranks`.

    Row ``r`` (``i = r - r0``) gets its candidates (the local items with a count in one of
    its interests) in ``cand_item[cand_start[i]:cand_end[i]]`` and their scores ``sum_k
    q_w[k] * phi_cnt[k, li]`` at the same places of ``cand_score``; its recent items' local
    indices in ``recent_local[i]`` (`_find_recent`) and their scores in ``recent_acc[i]``
    (0 for an item outside the chunk or without a count in the row's interests). Each
    range of ``ranges`` (`_range_pointers`) is scattered into ``acc`` by every row of the
    block in turn, gathered and cleared, so that the part of ``acc`` written stays in the
    cache from row to row. Each item's sum adds its counts in the same order as a whole
    `scatter_row` (an item's entries all lie in its range): the same scores bit for bit.
    """
    n_local = acc.shape[0]
    cand_start[0] = 0
    for r in range(r0, r1):
        i = r - r0
        cand_start[i + 1] = cand_start[i] + min(_row_entries(r, q_ptr, q_k, ranges), n_local)
        cand_end[i] = cand_start[i]
        _find_recent(r, r_ptr, r_item, sorted_items, local_of, recent_local[i])
        for p in range(r_ptr[r + 1] - r_ptr[r]):
            recent_acc[i, p] = 0.0
    for j in range(ranges.shape[0] - 1):
        for r in range(r0, r1):
            i = r - r0
            nt = scatter_row(r, q_ptr, q_k, q_w, ranges[j], ranges[j + 1], phi_item, phi_cnt,
                          acc, touched)
            for p in range(r_ptr[r + 1] - r_ptr[r]):
                li = recent_local[i, p]
                if li >= 0 and acc[li] != 0.0:
                    recent_acc[i, p] = acc[li]
            f = cand_end[i]
            for t in range(nt):
                li = touched[t]
                cand_item[f + t] = li
                cand_score[f + t] = acc[li]
                acc[li] = 0.0
            cand_end[i] = f + nt


@njit(cache=True)
def _row_entries(r, q_ptr, q_k, ranges):
    """The entries row r's interests hold (``ranges``: `_range_pointers`)."""
    entries = ZERO
    last = ranges.shape[0] - 1
    for q in range(q_ptr[r], q_ptr[r + 1]):
        k = q_k[q]
        entries += ranges[last, k] - ranges[0, k]
    return entries


@njit(cache=True)
def _block_capacity(first, last, n_rows, q_ptr, q_k, ranges, n_local):
    """The most candidate slots `_block_candidates` needs for a block of ``n_rows`` of the
    rows ``first`` to ``last``: a row's entries, or the chunk's items if fewer."""
    most = ZERO
    for r0 in range(first, last, n_rows):
        total = ZERO
        for r in range(r0, min(last, r0 + n_rows)):
            total += min(_row_entries(r, q_ptr, q_k, ranges), n_local)
        most = max(most, total)
    return most


@njit(cache=True)
def recent_heap(r, lam, base, share_weight, r_ptr, r_item, r_w, recent_local, recent_x,
                item_pop, item_share, chunk_items, seen_items, lo, hi_seen, hs, hp, hi, m,
                scratch):
    """The best m of row r's recent items into the heap ``hs, hp, hi`` (`keep_best`);
    returns its size. A recent item of the chunk (``recent_local``, `_find_recent`)
    scores ``(1 - lam) * (base + share_weight * item_share[li] + recent_x) + lam * r_w``
    (``recent_x``: its interests' score), one outside it ``lam * r_w``; seen items
    (``seen_items[lo:hi_seen]``) are left out."""
    keep = 1.0 - lam
    size = ZERO
    for p in range(r_ptr[r], r_ptr[r + 1]):
        li = recent_local[p - r_ptr[r]]
        if li >= 0:
            item = chunk_items[li]
            s = (keep * (base + share_weight * item_share[li] + recent_x[p - r_ptr[r]])
                 + lam * r_w[p])
            pop = item_pop[li]
        else:
            item = r_item[p]
            s = lam * r_w[p]
            pop = 0.0
        if hi_seen > lo and is_seen(seen_items, lo, hi_seen, item):
            continue
        hs[size] = s
        hp[size] = pop
        hi[size] = item
        size += 1
    return keep_best(hs, hp, hi, size, m, scratch)


@njit(cache=True)
def _personal_select(r, lam, base, share_weight, r_ptr, r_item, r_w, recent_acc, mark,
                     touched, nt, candidates, n_candidates, recent_local, item_pop,
                     item_share, chunk_items, pop_order, seen_indptr, seen_items, hs, hp, hi,
                     sc, scratch, m, sample):
    """The top-m of ``s(i)`` for row r into the heap ``hs, hp, hi``, after
    `_block_candidates`; returns its size.

    ``s(i) = (1 - lam) * (base + share_weight * item_share[li] + x(li)) + lam * r_w(i)``
    for an item of the chunk, ``lam * r_w(i)`` for a recent item outside it, ``x`` being
    the interests' score (the sum it scatters): ``sc[t]`` holds it for the
    ``nt`` items ``touched[t]`` offered, and becomes their ``s``; ``recent_acc`` holds it
    for the recent items. The heap and ``scratch`` hold the row's recent items (their best
    m by `keep_best`), then the ``nt`` items are offered (`_offer_touched`, whose
    ``sample`` it is), then the chunk's other items: neither a recent item (``mark`` 2)
    nor one of the ``n_candidates`` items of ``candidates``, all the items with an
    interests' score (``touched`` or more). These differ by ``item_share`` alone, so they
    are taken in ``pop_order`` until one cannot enter; the candidates are marked (3) for
    that only when one can. The order of the items offered does not change the top m (the
    order of ranking is total).
    """
    lo = seen_indptr[r]
    hi_seen = seen_indptr[r + 1]
    keep = 1.0 - lam
    size = recent_heap(r, lam, base, share_weight, r_ptr, r_item, r_w, recent_local,
                       recent_acc, item_pop, item_share, chunk_items, seen_items, lo,
                       hi_seen, hs, hp, hi, m, scratch)
    n_recent = r_ptr[r + 1] - r_ptr[r]
    _scale_scores(touched, nt, keep, base, share_weight, item_share, sc)
    size = _offer_touched(touched, sc, nt, mark, item_pop, chunk_items, seen_items, lo,
                          hi_seen, m, m + hi_seen - lo + n_recent, sample, hs, hp, hi, size,
                          scratch)
    if pop_order.shape[0] == 0:
        return size
    if size == m and keep * (base + share_weight * item_share[pop_order[0]]) < hs[0]:
        return size  # not even the most popular of the other items can enter
    # the other items of the chunk, in popularity order, while they can enter
    _mark_unmarked(candidates, n_candidates, mark, np.uint8(0), np.uint8(3))
    for j in range(pop_order.shape[0]):
        li = pop_order[j]
        s = keep * (base + share_weight * item_share[li])
        if size == m and s < hs[0]:
            break  # nor can any item after it
        if mark[li] != 0:
            continue
        item = chunk_items[li]
        if hi_seen > lo and is_seen(seen_items, lo, hi_seen, item):
            continue
        size, kept = offer(hs, hp, hi, size, m, s, item_pop[li], item)
        if not kept:
            break
    _mark_unmarked(candidates, n_candidates, mark, np.uint8(3), np.uint8(0))
    return size


@njit(cache=True)
def _mark_unmarked(items, n, mark, old, new):
    """``mark[li] = new`` for the first ``n`` of ``items`` whose mark is ``old``."""
    for t in range(n):
        li = items[t]
        if mark[li] == old:
            mark[li] = new


@njit(cache=True)
def max_row_length(indptr):
    """The number of entries of the longest row of a CSR ``indptr``."""
    out = 0
    for r in range(indptr.shape[0] - 1):
        out = max(out, indptr[r + 1] - indptr[r])
    return out


@njit(cache=True, parallel=True)
def personal_topm(q_ptr, q_k, q_w, q_base, q_share, lam, r_ptr, r_item, r_w,
                  phi_ptr, phi_item, phi_cnt, item_pop, item_share, chunk_items, sorted_items,
                  local_of, pop_order, seen_indptr, seen_items, m, n_threads,
                  sample=CUT_SAMPLE, range_items=RANGE_ITEMS, range_rows=RANGE_ROWS):
    """Exact top-m of ``s(i) = (1 - lam[r]) * p(i) + lam[r] * r_w(i)`` for each query row r,
    from a scatter of every entry of the row's interests.

    ``p(i) = q_base[r] + q_share[r] * item_share[li] + sum_k q_w[k] * phi_cnt[k, li]`` for
    an item of the latest chunk (local index ``li``, global ``chunk_items[li]``; the same
    items sorted are ``sorted_items``, and ``sorted_items[pos]`` is
    ``chunk_items[local_of[pos]]``: see `group_by_interest`) and 0 for any other item;
    ``q_*`` is a CSR of each query's interests and weights, ``phi_*`` a CSR from interest
    to (local item, count). ``r_*`` is a CSR of each query's recent
    items (global indices, distinct) with their weights ``r_w``. Every item of the latest
    chunk and every recent item of the row is ranked: the candidates of the row's
    interests and its recent items are scored one by one, the other items of the chunk,
    which differ only by ``item_share``, are taken in ``pop_order`` (positions from the most
    to the least popular, ties to the lower index) as long as they can enter the top m.
    Seen items (``seen_items[seen_indptr[r]:seen_indptr[r+1]]``, sorted global indices) are
    left out. Ties go to the more popular item (``item_pop``; 0 outside the chunk), then the
    lower index. Returns global item indices and scores, padded with -1 and -inf.
    ``sample`` is `mixture_topm`'s. `threshold.threshold_topm` gives the same lists and
    scores reading the head of each interest's list only; this scatter serves a chunk
    narrowed to some items (`MiCRO.recommend`'s ``allow``), for which no lists are kept.

    A chunk of more than ``range_items`` items is scattered range by range of items, a
    block of ``range_rows`` rows at a time (`_block_candidates`); each interest's entries
    must then be in increasing local item, as `group_by_interest` orders them. The lists
    and scores are the same for any ``range_items`` and ``range_rows``.

    Returns
    -------
    items, scores : ndarray of shape (n, m)
    """
    n = q_ptr.shape[0] - 1
    n_local = chunk_items.shape[0]
    items = np.full((n, m), -1, np.int64)
    scores = np.full((n, m), -np.inf)
    ranges = _range_pointers(phi_ptr, phi_item, n_local, range_items)
    n_rows = max(1, range_rows) if ranges.shape[0] > 2 else 1
    n_blocks = max(1, min(n, n_threads))
    max_recent = max_row_length(r_ptr)
    for b in prange(n_blocks):
        first = b * n // n_blocks
        last = (b + 1) * n // n_blocks
        acc = np.zeros(n_local)
        mark = np.zeros(n_local, np.uint8)
        touched = np.empty(n_local + 1, np.int32)
        capacity = _block_capacity(first, last, n_rows, q_ptr, q_k, ranges, n_local)
        cand_item = np.empty(capacity, np.int32)
        cand_score = np.empty(capacity)
        cand_start = np.empty(n_rows + 1, np.int64)
        cand_end = np.empty(n_rows, np.int64)
        recent_local = np.empty((n_rows, max_recent), np.int64)
        recent_acc = np.empty((n_rows, max_recent))
        hs = np.empty(n_local + max_recent)
        hp = np.empty(n_local + max_recent)
        hi = np.empty(n_local + max_recent, np.int64)
        scratch = np.empty(n_local + max_recent)
        for r0 in range(first, last, n_rows):
            r1 = min(last, r0 + n_rows)
            # the block's candidates and their interests' scores, read once from ``acc``
            # (set back to 0 on the way)
            _block_candidates(r0, r1, q_ptr, q_k, q_w, ranges, phi_item, phi_cnt, r_ptr,
                              r_item, sorted_items, local_of, acc, touched, cand_start,
                              cand_end, cand_item, cand_score, recent_local, recent_acc)
            for r in range(r0, r1):
                i = r - r0
                nt = cand_end[i] - cand_start[i]
                cand = cand_item[cand_start[i]:cand_end[i]]
                sc = cand_score[cand_start[i]:cand_end[i]]
                _mark_recent(r, r_ptr, recent_local[i], mark, np.uint8(2))
                size = _personal_select(r, lam[r], q_base[r], q_share[r], r_ptr, r_item, r_w,
                                        recent_acc[i], mark, cand, nt, cand, nt,
                                        recent_local[i], item_pop, item_share, chunk_items,
                                        pop_order, seen_indptr, seen_items, hs, hp, hi, sc,
                                        scratch, m, sample)
                _mark_recent(r, r_ptr, recent_local[i], mark, np.uint8(0))
                drain(hs, hp, hi, size, items[r], scores[r], 0.0)
    return items, scores


@njit(cache=True, parallel=True)
def personal_ranks(q_ptr, q_k, q_w, q_base, q_share, lams, r_ptr, r_item, r_w, rel_ptr,
                   rel_item, phi_ptr, phi_item, phi_cnt, item_pop, item_share, chunk_items,
                   pop_order, m, n_threads, sample=CUT_SAMPLE):
    """Where each row's relevant items land in `personal_topm`'s top m, for every weight.

    The rows, interests, recent items and chunk are `personal_topm`'s (nothing is seen);
    ``rel_item[rel_ptr[r]:rel_ptr[r+1]]`` are row r's relevant items (sorted global
    indices). For each weight ``lams[g]`` below 1 (the row's ``lam``), returns ``hits[r,
    g]``, the relevant items among the top m, and ``rank[r, g]``, the rank (from 1) of the
    first of them, 0 if none: what the top m of ``personal_topm`` with that weight gives.

    A row's interests are scored once. The items of its interests that are not recent are
    ranked the same by every weight (their score is ``(1 - lam)`` times a score ``x``
    without it), so only those whose ``x`` is within rounding of the m-th best ``x`` or
    above can enter a top m: each weight ranks those, the recent items and the chunk's
    other items, as `personal_topm` does.
    """
    n = q_ptr.shape[0] - 1
    n_local = chunk_items.shape[0]
    n_lams = lams.shape[0]
    hits = np.zeros((n, n_lams), np.int64)
    rank = np.zeros((n, n_lams), np.int64)
    no_seen_ptr = np.zeros(n + 1, np.int64)
    no_seen = np.empty(0, np.int64)
    # int32, as `personal_topm`'s local items and candidates: the helpers compile once
    identity = np.empty(n_local, np.int32)
    for li in range(n_local):
        identity[li] = li
    whole = _range_pointers(phi_ptr, phi_item, n_local, max(n_local, 1))
    n_blocks = max(1, min(n, n_threads))
    max_recent = max_row_length(r_ptr)
    for b in prange(n_blocks):
        acc = np.zeros(n_local)
        mark = np.zeros(n_local, np.uint8)
        touched = np.empty(n_local + 1, np.int32)
        cand_item = np.empty(n_local, np.int32)
        cand_score = np.empty(n_local)
        cand_start = np.empty(2, np.int64)
        cand_end = np.empty(1, np.int64)
        leading = np.empty(n_local, np.int32)
        recent_local = np.empty((1, max_recent), np.int64)
        recent_acc = np.empty((1, max_recent))
        leading_x = np.empty(n_local)
        hs = np.empty(n_local + max_recent)
        hp = np.empty(n_local + max_recent)
        hi = np.empty(n_local + max_recent, np.int64)
        sc = np.empty(n_local)
        scratch = np.empty(n_local + max_recent)
        for r in range(b * n // n_blocks, (b + 1) * n // n_blocks):
            _block_candidates(r, r + 1, q_ptr, q_k, q_w, whole, phi_item, phi_cnt, r_ptr,
                              r_item, chunk_items, identity, acc, touched, cand_start,
                              cand_end, cand_item, cand_score, recent_local, recent_acc)
            nt = cand_end[0]
            _mark_recent(r, r_ptr, recent_local[0], mark, np.uint8(2))
            # the m-th best x of the interests' items that are not recent
            size = ZERO
            for t in range(nt):
                li = cand_item[t]
                if mark[li] == 2:
                    continue
                x = q_base[r] + q_share[r] * item_share[li] + cand_score[t]
                if size == m and x < hs[0]:
                    continue
                size, _ = offer(hs, hp, hi, size, m, x, item_pop[li], chunk_items[li])
            bound = hs[0] * (1.0 - 1e-12) if size == m else -np.inf
            n_leading = ZERO
            for t in range(nt):
                li = cand_item[t]
                x = q_base[r] + q_share[r] * item_share[li] + cand_score[t]
                if mark[li] != 2 and x >= bound:
                    leading[n_leading] = li
                    leading_x[n_leading] = cand_score[t]
                    n_leading += 1
            lo = rel_ptr[r]
            hi_rel = rel_ptr[r + 1]
            for g in range(n_lams):
                sc[:n_leading] = leading_x[:n_leading]
                size = _personal_select(r, lams[g], q_base[r], q_share[r], r_ptr, r_item,
                                        r_w, recent_acc[0], mark, leading, n_leading,
                                        cand_item, nt, recent_local[0], item_pop, item_share,
                                        chunk_items, pop_order, no_seen_ptr, no_seen, hs, hp,
                                        hi, sc, scratch, m, sample)
                best = -1
                for e in range(size):
                    if hi_rel > lo and is_seen(rel_item, lo, hi_rel, hi[e]):
                        hits[r, g] += 1
                        if best < 0 or worse(hs[best], hp[best], hi[best],
                                             hs[e], hp[e], hi[e]):
                            best = e
                if best >= 0:
                    ahead = 0
                    for e in range(size):
                        if worse(hs[best], hp[best], hi[best], hs[e], hp[e], hi[e]):
                            ahead += 1
                    rank[r, g] = ahead + 1
            _mark_recent(r, r_ptr, recent_local[0], mark, np.uint8(0))
    return hits, rank
