"""MiCRO's top-m rankers: the users' mixtures over the latest chunk's ``phi``, with or
without the personal component, built on the primitives of `selection`.

The arrays that travel together travel as one named tuple: the rows ranked (`Queries`),
their recent items (`Recent`), the latest chunk (`Chunk`), the rows' seen items
(`selection.ItemRows`) and a heap (`selection.Heap`); a row's scalars are a `Row`."""

from typing import NamedTuple

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
    make_heap,
    offer,
    sampled_cut,
    select,
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


class Queries(NamedTuple):
    """The rows ranked: a CSR of each row's interests, row r's being
    ``interest[indptr[r]:indptr[r + 1]]`` with their weights in ``weight``; ``base[r]``,
    the row's score of an item outside them, and ``share_weight[r]``, its weight of an
    item's share of the chunk."""

    indptr: np.ndarray
    interest: np.ndarray
    weight: np.ndarray
    base: np.ndarray
    share_weight: np.ndarray


class Recent(NamedTuple):
    """The rows' recent items: ``lam[r]``, row r's weight of them, and a CSR of their
    global indices (distinct), ``item[indptr[r]:indptr[r + 1]]``, with their scores
    ``score`` (the paper's ``r_u(i)``)."""

    lam: np.ndarray
    indptr: np.ndarray
    item: np.ndarray
    score: np.ndarray


class Chunk(NamedTuple):
    """The latest chunk as the top-m kernels read it.

    ``phi_indptr, phi_item, phi_count``: an interest-major CSR of (local item, count);
    ``item_count``, each local item's count (its popularity, the first tie-break),
    ``share``, its share of the chunk, and ``items``, its global index; ``sorted_items``,
    the same global items sorted, ``sorted_items[pos]`` being ``items[local_of[pos]]``
    (see `group_by_interest`); ``popular_order``, the local items from the most to the
    least popular, ties to the lower index.
    """

    phi_indptr: np.ndarray
    phi_item: np.ndarray
    phi_count: np.ndarray
    item_count: np.ndarray
    share: np.ndarray
    items: np.ndarray
    sorted_items: np.ndarray
    local_of: np.ndarray
    popular_order: np.ndarray


class Row(NamedTuple):
    """One row's scalars: its index ``r``, its weight ``lam`` of its recent items, its
    ``base`` and ``share_weight`` (`Queries`), and the bounds ``lo, hi_seen`` of its seen
    items."""

    r: int
    lam: float
    base: float
    share_weight: float
    lo: int
    hi_seen: int


class Candidates(NamedTuple):
    """A block of rows' candidates (`_block_candidates`): row i's local items are
    ``item[start[i]:end[i]]``, with their interests' scores at the same places of
    ``score``."""

    start: np.ndarray
    end: np.ndarray
    item: np.ndarray
    score: np.ndarray


class RecentFound(NamedTuple):
    """Rows' recent items found in the chunk (`find_recent`): each one's local index
    (-1 outside the chunk) and its interests' score, one row of each per row (or one
    row's alone)."""

    local: np.ndarray
    score: np.ndarray


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
def _offer_touched(touched, sc, mark, chunk, seen_items, row, heap, size, m, need, sample,
                   scratch):
    """Offer the row's touched candidates ``touched[t]``, each with its score ``sc[t]``
    (`_block_candidates`, `_scale_scores`), to ``heap`` of the ``size`` best kept;
    returns its new size.

    IN: ``touched``, ``sc``, ``mark``, ``chunk`` (`Chunk`), ``seen_items`` (the row's
    between ``row.lo`` and ``row.hi_seen``), ``row`` (`Row`), ``size``, ``m``, ``need``,
    ``sample``. IN/OUT: ``heap``. Scratch: ``scratch``.

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
    nt = touched.shape[0]
    item_pop, chunk_items = chunk.item_count, chunk.items
    lo, hi_seen = row.lo, row.hi_seen
    hs, hp, hi = heap
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
        return keep_best(heap, n, m, scratch)
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
            size, _ = offer(heap, size, m, s, item_pop[li], item)
    return size


@njit(cache=True, parallel=True)
def mixture_topm(queries, chunk, seen, m, n_threads, sample=CUT_SAMPLE,
                 range_items=RANGE_ITEMS, range_rows=RANGE_ROWS):
    """Exact top-m of ``base[r] + sum_k weight[k] * phi_count[k, i]`` for each query row r.

    IN: ``queries`` (`Queries`, each row's interests and weights; ``share_weight`` is not
    read), ``chunk`` (`Chunk`, local items being positions in ``chunk.items``, global
    indices in any order: numbering the items interest by interest keeps a row's scratch
    close together, see `group_by_interest`; ``sorted_items``, ``local_of``, ``share`` and
    ``popular_order`` are not read), ``seen`` (`selection.ItemRows`, left out), ``m``,
    ``n_threads``, ``sample``, ``range_items``, ``range_rows``. Only items with a count in
    one of the query's interests are scored. Ties go to the more popular item
    (``chunk.item_count``), then the lower global index. Returns (OUT) global item
    indices, scores and how many slots each row filled.

    A row of up to `SELECT_RATIO` candidates a slot finds its m-th best score by
    selection; a row of more offers them to a heap of m, and from ``2 * sample``
    candidates on only those above a cut read from about ``sample`` of their scores
    (`_offer_touched`). Any ``sample`` gives the same lists; 0 offers every candidate to
    the heap. A chunk of more than ``range_items`` items is scattered range by range, as
    in `personal_topm` (whose condition on ``phi_item`` holds then); the lists are the
    same for any ``range_items`` and ``range_rows``.
    """
    q_ptr, q_k = queries.indptr, queries.interest
    q_base = queries.base
    seen_indptr, seen_items = seen
    n = q_ptr.shape[0] - 1
    n_local = chunk.items.shape[0]
    items = np.full((n, m), -1, np.int64)
    scores = np.full((n, m), -np.inf)
    n_filled = np.zeros(n, np.int64)
    no_mark = np.zeros(0, np.uint8)
    no_recent = Recent(np.zeros(n), np.zeros(n + 1, np.int64), np.empty(0, np.int64),
                       np.empty(0))
    ranges = _range_pointers(chunk.phi_indptr, chunk.phi_item, n_local, range_items)
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
        cands = Candidates(cand_start, cand_end, cand_item, cand_score)
        no_found = RecentFound(np.empty((n_rows, 0), np.int64), np.empty((n_rows, 0)))
        heap = make_heap(n_local)
        scratch = np.empty(n_local)
        for r0 in range(first, last, n_rows):
            r1 = min(last, r0 + n_rows)
            _block_candidates(r0, r1, queries, ranges, chunk, no_recent, acc, touched, cands,
                              no_found)
            for r in range(r0, r1):
                i = r - r0
                row = Row(r, 0.0, q_base[r], 0.0, seen_indptr[r], seen_indptr[r + 1])
                size = _offer_touched(
                    cand_item[cand_start[i]:cand_end[i]],
                    cand_score[cand_start[i]:cand_end[i]], no_mark, chunk, seen_items, row,
                    heap, ZERO, m, m + row.hi_seen - row.lo, sample, scratch)
                drain(heap, size, items[r], scores[r], q_base[r])
                n_filled[r] = size
    return items, scores, n_filled


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
def find_recent(r, recent, chunk, recent_local):
    """Row r's recent items' local indices into ``recent_local`` (OUT; -1 for one outside
    the chunk): each item of ``recent`` (`Recent`, IN) is looked up in
    ``chunk.sorted_items`` (`Chunk`, IN), whose position ``pos`` is the local index
    ``chunk.local_of[pos]``."""
    r_ptr, r_item = recent.indptr, recent.item
    sorted_items, local_of = chunk.sorted_items, chunk.local_of
    n_local = sorted_items.shape[0]
    for p in range(r_ptr[r], r_ptr[r + 1]):
        item = r_item[p]
        pos = lower_bound(sorted_items, ZERO, n_local, item)
        if pos < n_local and sorted_items[pos] == item:
            recent_local[p - r_ptr[r]] = local_of[pos]
        else:
            recent_local[p - r_ptr[r]] = -1


@njit(cache=True)
def mark_recent(r, recent, recent_local, mark, value):
    """``mark[li] = value`` (``mark`` IN/OUT) for row r's recent items of the chunk
    (``recent_local``, `find_recent`; ``recent``, `Recent`)."""
    r_ptr = recent.indptr
    for p in range(r_ptr[r + 1] - r_ptr[r]):
        li = recent_local[p]
        if li >= 0:
            mark[li] = value


@njit(cache=True)
def _block_candidates(r0, r1, queries, ranges, chunk, recent, acc, touched, cands, found):
    """The candidates of rows ``r0`` to ``r1`` with their interests' scores, and their
    recent items, for `personal_topm` and `personal_ranks`.

    IN: ``queries`` (`Queries`), ``ranges`` (`_range_pointers`), ``chunk`` (`Chunk`),
    ``recent`` (`Recent`). OUT: ``cands`` (`Candidates`) and ``found`` (`RecentFound`).
    Scratch: ``acc`` (zero on entry and exit) and ``touched``.

    Row ``r`` (``i = r - r0``) gets its candidates (the local items with a count in one of
    its interests) in ``cands.item[cands.start[i]:cands.end[i]]`` and their scores
    ``sum_k weight[k] * phi_count[k, li]`` at the same places of ``cands.score``; its recent
    items' local indices in ``found.local[i]`` (`find_recent`) and their scores in
    ``found.score[i]`` (0 for an item outside the chunk or without a count in the row's
    interests). Each range of ``ranges`` is scattered into ``acc`` by every row of the
    block in turn, gathered and cleared, so that the part of ``acc`` written stays in the
    cache from row to row. Each item's sum adds its counts in the same order as a whole
    `scatter_row` (an item's entries all lie in its range): the same scores bit for bit.
    """
    q_ptr, q_k, q_w = queries.indptr, queries.interest, queries.weight
    phi_item, phi_cnt = chunk.phi_item, chunk.phi_count
    r_ptr = recent.indptr
    cand_start, cand_end, cand_item, cand_score = cands
    recent_local, recent_acc = found
    n_local = acc.shape[0]
    cand_start[0] = 0
    for r in range(r0, r1):
        i = r - r0
        cand_start[i + 1] = cand_start[i] + min(_row_entries(r, q_ptr, q_k, ranges), n_local)
        cand_end[i] = cand_start[i]
        find_recent(r, recent, chunk, recent_local[i])
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
def recent_heap(row, recent, found, chunk, seen_items, heap, m, scratch):
    """The best m of row ``row.r``'s recent items into ``heap`` (OUT; `keep_best`);
    returns its size.

    IN: ``row`` (`Row`), ``recent`` (`Recent`), ``found`` (`RecentFound` of the row: its
    recent items' local indices, `find_recent`, and interests' scores), ``chunk``
    (`Chunk`), ``seen_items`` (the row's between ``row.lo`` and ``row.hi_seen``, left
    out), ``m``. Scratch: ``scratch``. A recent item of the chunk scores ``(1 - lam) *
    (base + share_weight * share[li] + x) + lam * r_u``, one outside it ``lam * r_u``.
    """
    r = row.r
    lam = row.lam
    r_ptr, r_item, r_w = recent.indptr, recent.item, recent.score
    recent_local, recent_x = found
    item_pop, item_share, chunk_items = chunk.item_count, chunk.share, chunk.items
    hs, hp, hi = heap
    keep = 1.0 - lam
    size = ZERO
    for p in range(r_ptr[r], r_ptr[r + 1]):
        li = recent_local[p - r_ptr[r]]
        if li >= 0:
            item = chunk_items[li]
            s = (keep * (row.base + row.share_weight * item_share[li]
                         + recent_x[p - r_ptr[r]]) + lam * r_w[p])
            pop = item_pop[li]
        else:
            item = r_item[p]
            s = lam * r_w[p]
            pop = 0.0
        if row.hi_seen > row.lo and is_seen(seen_items, row.lo, row.hi_seen, item):
            continue
        hs[size] = s
        hp[size] = pop
        hi[size] = item
        size += 1
    return keep_best(heap, size, m, scratch)


@njit(cache=True)
def _personal_select(row, recent, found, chunk, seen_items, mark, touched, sc, heap, m,
                     sample, scratch):
    """The top-m of ``s(i)`` over row ``row.r``'s recent items and candidates ``touched``
    into ``heap`` (OUT), after `_block_candidates`; returns its size. `_offer_popular`
    then offers the chunk's other items.

    ``s(i) = (1 - lam) * (base + share_weight * share[li] + x(li)) + lam * r_u(i)`` for an
    item of the chunk, ``lam * r_u(i)`` for a recent item outside it, ``x`` being the
    interests' score (the sum it scatters). IN: ``row`` (`Row`), ``recent`` (`Recent`),
    ``found`` (`RecentFound` of the row; ``found.score``, the recent items' ``x``),
    ``chunk`` (`Chunk`), ``seen_items`` (the row's between ``row.lo`` and ``row.hi_seen``),
    ``mark`` (recent items marked 2, left out of ``touched``), ``touched``, ``m``,
    ``sample``. IN/OUT: ``sc``, the ``x`` of ``touched``, which become their ``s``.
    Scratch: ``scratch``. The heap holds the row's recent items (their best m by
    `keep_best`), then the candidates are offered (`_offer_touched`, whose ``sample`` it
    is). The order of the items offered does not change the top m (the order of ranking
    is total).
    """
    size = recent_heap(row, recent, found, chunk, seen_items, heap, m, scratch)
    n_recent = recent.indptr[row.r + 1] - recent.indptr[row.r]
    _scale_scores(touched, touched.shape[0], 1.0 - row.lam, row.base, row.share_weight,
                  chunk.share, sc)
    return _offer_touched(touched, sc, mark, chunk, seen_items, row, heap, size, m,
                          m + row.hi_seen - row.lo + n_recent, sample, scratch)


@njit(cache=True)
def _offer_popular(row, chunk, seen_items, mark, candidates, heap, size, m):
    """Offer the chunk's items that are neither recent (``mark`` 2) nor ``candidates``
    (all the items with an interests' score) to ``heap`` (IN/OUT) of ``size``, after
    `_personal_select`; returns its new size.

    IN: ``row`` (`Row`), ``chunk`` (`Chunk`), ``seen_items`` (the row's between ``row.lo``
    and ``row.hi_seen``), ``candidates``, ``m``. IN/OUT: ``mark``, left as it was. These
    items differ by ``share`` alone, so they are taken in ``chunk.popular_order`` until one
    cannot enter; the candidates are marked (3) for that only when one can.
    """
    pop_order = chunk.popular_order
    item_pop, item_share, chunk_items = chunk.item_count, chunk.share, chunk.items
    lo, hi_seen = row.lo, row.hi_seen
    keep = 1.0 - row.lam
    base = row.base
    share_weight = row.share_weight
    if pop_order.shape[0] == 0:
        return size
    if size == m and keep * (base + share_weight * item_share[pop_order[0]]) < heap.scores[0]:
        return size  # not even the most popular of the other items can enter
    # the other items of the chunk, in popularity order, while they can enter
    n_candidates = candidates.shape[0]
    _mark_unmarked(candidates, n_candidates, mark, np.uint8(0), np.uint8(3))
    for j in range(pop_order.shape[0]):
        li = pop_order[j]
        s = keep * (base + share_weight * item_share[li])
        if size == m and s < heap.scores[0]:
            break  # nor can any item after it
        if mark[li] != 0:
            continue
        item = chunk_items[li]
        if hi_seen > lo and is_seen(seen_items, lo, hi_seen, item):
            continue
        size, kept = offer(heap, size, m, s, item_pop[li], item)
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
def personal_topm(queries, recent, chunk, seen, m, n_threads, sample=CUT_SAMPLE,
                  range_items=RANGE_ITEMS, range_rows=RANGE_ROWS):
    """Exact top-m of ``s(i) = (1 - lam[r]) * p(i) + lam[r] * r_u(i)`` for each query row r,
    from a scatter of every entry of the row's interests.

    IN: ``queries`` (`Queries`), ``recent`` (`Recent`), ``chunk`` (`Chunk`), ``seen``
    (`selection.ItemRows`), ``m``, ``n_threads``, ``sample``, ``range_items``,
    ``range_rows``. OUT (returned): ``items, scores`` of shape (n, m), global item indices
    and scores, padded with -1 and -inf.

    ``p(i) = base[r] + share_weight[r] * share[li] + sum_k weight[k] * phi_count[k, li]``
    for an item of the latest chunk (local index ``li``, global ``chunk.items[li]``) and 0
    for any other item; ``r_u`` are the row's recent items' scores (``recent.score``).
    Every item of the latest chunk and every recent item of the row is ranked: the
    candidates of the row's interests and its recent items are scored one by one, the
    other items of the chunk, which differ only by ``share``, are taken in
    ``chunk.popular_order`` as long as they can enter the top m. Seen items (row r of
    ``seen``) are left out. Ties go to the more popular item (``chunk.item_count``; 0
    outside the chunk), then the lower index. ``sample`` is `mixture_topm`'s.
    `threshold.threshold_topm` gives the same lists and scores reading the head of each
    interest's list only; this scatter ranks the rows whose interests hold few entries
    (`MiCRO` chooses by `micro._retrieval.SCATTER_ENTRIES`) and a chunk narrowed to some
    items (`MiCRO.recommend`'s ``allow``), for which no lists are kept.

    A chunk of more than ``range_items`` items is scattered range by range of items, a
    block of ``range_rows`` rows at a time (`_block_candidates`); each interest's entries
    must then be in increasing local item, as `group_by_interest` orders them. The lists
    and scores are the same for any ``range_items`` and ``range_rows``.
    """
    q_ptr, q_k = queries.indptr, queries.interest
    q_base, q_share = queries.base, queries.share_weight
    lam = recent.lam
    seen_indptr, seen_items = seen
    n = q_ptr.shape[0] - 1
    n_local = chunk.items.shape[0]
    items = np.full((n, m), -1, np.int64)
    scores = np.full((n, m), -np.inf)
    ranges = _range_pointers(chunk.phi_indptr, chunk.phi_item, n_local, range_items)
    n_rows = max(1, range_rows) if ranges.shape[0] > 2 else 1
    n_blocks = max(1, min(n, n_threads))
    max_recent = max_row_length(recent.indptr)
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
        cands = Candidates(cand_start, cand_end, cand_item, cand_score)
        recent_local = np.empty((n_rows, max_recent), np.int64)
        recent_acc = np.empty((n_rows, max_recent))
        found = RecentFound(recent_local, recent_acc)
        heap = make_heap(n_local + max_recent)
        scratch = np.empty(n_local + max_recent)
        for r0 in range(first, last, n_rows):
            r1 = min(last, r0 + n_rows)
            # the block's candidates and their interests' scores, read once from ``acc``
            # (set back to 0 on the way)
            _block_candidates(r0, r1, queries, ranges, chunk, recent, acc, touched, cands,
                              found)
            for r in range(r0, r1):
                i = r - r0
                cand = cand_item[cand_start[i]:cand_end[i]]
                sc = cand_score[cand_start[i]:cand_end[i]]
                row = Row(r, lam[r], q_base[r], q_share[r], seen_indptr[r],
                          seen_indptr[r + 1])
                mark_recent(r, recent, recent_local[i], mark, np.uint8(2))
                size = _personal_select(row, recent,
                                        RecentFound(recent_local[i], recent_acc[i]), chunk,
                                        seen_items, mark, cand, sc, heap, m, sample, scratch)
                size = _offer_popular(row, chunk, seen_items, mark, cand, heap, size, m)
                mark_recent(r, recent, recent_local[i], mark, np.uint8(0))
                drain(heap, size, items[r], scores[r], 0.0)
    return items, scores


@njit(cache=True, parallel=True)
def personal_ranks(queries, lams, recent, relevant, chunk, m, n_threads, sample=CUT_SAMPLE):
    """Where each row's relevant items land in `personal_topm`'s top m, for every weight.

    IN: ``queries`` (`Queries`), ``lams``, ``recent`` (`Recent`; ``recent.lam`` is not
    read), ``relevant`` (`selection.ItemRows`, row r's relevant items), ``chunk``
    (`Chunk`, its items in their own numbering: ``sorted_items`` are ``items``, sorted,
    and ``local_of`` is the identity), ``m``, ``n_threads``, ``sample``. Nothing is seen.
    For each weight ``lams[g]`` below 1 (the row's ``lam``), returns (OUT) ``hits[r, g]``,
    the relevant items among the top m, and ``rank[r, g]``, the rank (from 1) of the
    first of them, 0 if none: what the top m of ``personal_topm`` with that weight gives.

    A row's interests are scored once. The items of its interests that are not recent are
    ranked the same by every weight (their score is ``(1 - lam)`` times a score ``x``
    without it), so only those whose ``x`` is within rounding of the m-th best ``x`` or
    above can enter a top m: each weight ranks those, the recent items and the chunk's
    other items, as `personal_topm` does.
    """
    q_ptr = queries.indptr
    q_base, q_share = queries.base, queries.share_weight
    rel_ptr, rel_item = relevant
    item_pop, item_share, chunk_items = chunk.item_count, chunk.share, chunk.items
    n = q_ptr.shape[0] - 1
    n_local = chunk_items.shape[0]
    n_lams = lams.shape[0]
    hits = np.zeros((n, n_lams), np.int64)
    rank = np.zeros((n, n_lams), np.int64)
    no_seen = np.empty(0, np.int64)
    whole = _range_pointers(chunk.phi_indptr, chunk.phi_item, n_local, max(n_local, 1))
    n_blocks = max(1, min(n, n_threads))
    max_recent = max_row_length(recent.indptr)
    for b in prange(n_blocks):
        acc = np.zeros(n_local)
        mark = np.zeros(n_local, np.uint8)
        touched = np.empty(n_local + 1, np.int32)
        cand_item = np.empty(n_local, np.int32)
        cand_score = np.empty(n_local)
        cand_start = np.empty(2, np.int64)
        cand_end = np.empty(1, np.int64)
        cands = Candidates(cand_start, cand_end, cand_item, cand_score)
        leading = np.empty(n_local, np.int32)
        recent_local = np.empty((1, max_recent), np.int64)
        recent_acc = np.empty((1, max_recent))
        found = RecentFound(recent_local, recent_acc)
        leading_x = np.empty(n_local)
        heap = make_heap(n_local + max_recent)
        hs, hp, hi = heap
        sc = np.empty(n_local)
        scratch = np.empty(n_local + max_recent)
        for r in range(b * n // n_blocks, (b + 1) * n // n_blocks):
            _block_candidates(r, r + 1, queries, whole, chunk, recent, acc, touched, cands,
                              found)
            nt = cand_end[0]
            mark_recent(r, recent, recent_local[0], mark, np.uint8(2))
            # the m-th best x of the interests' items that are not recent
            size = ZERO
            for t in range(nt):
                li = cand_item[t]
                if mark[li] == 2:
                    continue
                x = q_base[r] + q_share[r] * item_share[li] + cand_score[t]
                if size == m and x < hs[0]:
                    continue
                size, _ = offer(heap, size, m, x, item_pop[li], chunk_items[li])
            bound = hs[0] * (1.0 - TIE_MARGIN) if size == m else -np.inf
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
                row = Row(r, lams[g], q_base[r], q_share[r], ZERO, ZERO)
                size = _personal_select(row, recent,
                                        RecentFound(recent_local[0], recent_acc[0]), chunk,
                                        no_seen, mark, leading[:n_leading], sc[:n_leading],
                                        heap, m, sample, scratch)
                size = _offer_popular(row, chunk, no_seen, mark, cand_item[:nt], heap, size,
                                      m)
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
            mark_recent(r, recent, recent_local[0], mark, np.uint8(0))
    return hits, rank




class Ranked(NamedTuple):
    """Items of one row as `blend_ranks` ranks them: each one's score, popularity (the
    first tie-break), global index (the second) and whether it is relevant (1) or not
    (0)."""

    score: np.ndarray
    pop: np.ndarray
    item: np.ndarray
    relevant: np.ndarray


class BlendRow(NamedTuple):
    """`blend_ranks`' scratch for one row at a time (one per thread).

    ``acc``, ``mark``, ``touched``, ``cands``, ``found``: as `personal_ranks` holds them;
    ``nc_item, nc_x``: the row's candidates that are not recent, with their interests'
    score ``x``; ``qual``: positions in them (`_qualifiers`); ``others``: the chunk's
    first other items (`_first_others`); ``y_of`` and ``scratch``: scores; ``pool``: the
    leading items (`_leading`); ``rec`` and ``rec_y``: the recent items (`_recent_ranked`).
    """

    acc: np.ndarray
    mark: np.ndarray
    touched: np.ndarray
    cands: Candidates
    found: RecentFound
    nc_item: np.ndarray
    nc_x: np.ndarray
    qual: np.ndarray
    others: np.ndarray
    y_of: np.ndarray
    scratch: np.ndarray
    pool: Ranked
    rec: Ranked
    rec_y: np.ndarray


# the relative margin below a row's m-th best score within which `personal_ranks` and
# `blend_ranks` keep an item of its interests: scaled by ``1 - lam`` it may tie that score
# (rounding) and then win on popularity
TIE_MARGIN = 1e-12


@njit(cache=True)
def _empty_ranked(n):
    """A `Ranked` of room for ``n`` items."""
    return Ranked(np.empty(n), np.empty(n), np.empty(n, np.int64), np.empty(n, np.uint8))


@njit(cache=True)
def _blend_row_work(n_local, m, max_recent):
    """A `BlendRow` for a chunk of ``n_local`` items, ``m`` slots and rows of up to
    ``max_recent`` recent items."""
    n_pool = n_local + m
    return BlendRow(
        np.zeros(n_local), np.zeros(n_local, np.uint8), np.empty(n_local + 1, np.int32),
        Candidates(np.empty(2, np.int64), np.empty(1, np.int64),
                   np.empty(n_local, np.int32), np.empty(n_local)),
        RecentFound(np.empty((1, max_recent), np.int64), np.empty((1, max_recent))),
        np.empty(n_local, np.int32), np.empty(n_local), np.empty(n_local, np.int64),
        np.empty(max(m, 0), np.int64), np.empty(n_pool), np.empty(n_pool),
        _empty_ranked(n_pool), _empty_ranked(max_recent), np.empty(max_recent))


@njit(cache=True)
def _is_relevant(relevant, r, item):
    """1 if ``item`` is among row r's relevant items (`selection.ItemRows`), else 0."""
    lo, hi = relevant.indptr[r], relevant.indptr[r + 1]
    if hi > lo and is_seen(relevant.items, lo, hi, item):
        return np.uint8(1)
    return np.uint8(0)


@njit(cache=True)
def _any_relevant(ranked, n):
    """Whether one of ``ranked[:n]`` (`Ranked`) is relevant."""
    for t in range(n):
        if ranked.relevant[t]:
            return True
    return False


@njit(cache=True)
def _mth_best(values, n, m, scratch):
    """The m-th largest of ``values[:n]`` (-inf when there are fewer than m)."""
    if n < m or m <= 0:
        return -np.inf
    scratch[:n] = values[:n]
    return select(scratch, n, n - m)


@njit(cache=True)
def _rank_of(s, p, i, lead, n_lead, keep, rec, n_rec):
    """The rank (from 1) of an item of score ``s``, popularity ``p`` and index ``i``
    among a row's leading items ``lead[:n_lead]`` (`Ranked`, scores ``y`` scaled here by
    ``keep``) and its recent items ``rec[:n_rec]`` (`Ranked`, scored): one more than the
    number of them that rank before it (`selection.worse`), itself aside."""
    ahead = ZERO
    for t in range(n_lead):
        if worse(s, p, i, keep * lead.score[t], lead.pop[t], lead.item[t]):
            ahead += 1
    for t in range(n_rec):
        if worse(s, p, i, rec.score[t], rec.pop[t], rec.item[t]):
            ahead += 1
    return ahead + 1


@njit(cache=True)
def _rank_pairs(lead, n_lead, rec, rec_y, own, lams, m, hits, rank):
    """``hits[g]`` and ``rank[g]`` (OUT) of one row under one popularity weight and each
    personal weight ``lams[g]``: its leading items ``lead[:n_lead]`` (`_leading`, scores
    ``y``) scored ``(1 - lam) * y``, and its recent items (``rec``, `Ranked` whose scores
    are set here; ``rec_y``, each one's ``y``, NaN outside the chunk; ``own``, its
    ``r_u``) scored ``(1 - lam) * y + lam * r_u``.

    No list is sorted: each relevant item among them takes its rank by counting the items
    ahead of it (`_rank_of`), one pass over both lists per personal weight, so a row costs
    its relevant items times its leading and recent items (a held-out row of Higgs holds
    1.3 relevant items on average, of the generated log 3.3). The ranks are those of a
    sort of both lists (the order of `selection.worse` is total)."""
    n_rec = own.shape[0]
    for g in range(lams.shape[0]):
        keep = 1.0 - lams[g]
        for p in range(n_rec):
            mine = lams[g] * own[p]
            rec.score[p] = mine if np.isnan(rec_y[p]) else keep * rec_y[p] + mine
        n_hits = ZERO
        first = ZERO
        for t in range(n_lead + n_rec):
            if t < n_lead:
                if not lead.relevant[t]:
                    continue
                at = _rank_of(keep * lead.score[t], lead.pop[t], lead.item[t], lead, n_lead,
                              keep, rec, n_rec)
            else:
                u = t - n_lead
                if not rec.relevant[u]:
                    continue
                at = _rank_of(rec.score[u], rec.pop[u], rec.item[u], lead, n_lead, keep, rec,
                              n_rec)
            if at <= m:
                n_hits += 1
                if first == 0 or at < first:
                    first = at
        hits[g] = n_hits
        rank[g] = first


@njit(cache=True)
def _non_recent(nt, work):
    """Mark (3) the row's candidates (`_block_candidates`, ``work.cands``) that are not
    recent (marked 2) and list them with their ``x`` in ``work.nc_item, work.nc_x``;
    returns their number."""
    cand_item, cand_score = work.cands.item, work.cands.score
    mark = work.mark
    nc = ZERO
    for t in range(nt):
        li = cand_item[t]
        if mark[li] == 0:
            mark[li] = 3
            work.nc_item[nc] = li
            work.nc_x[nc] = cand_score[t]
            nc += 1
    return nc


@njit(cache=True)
def _first_others(chunk, mark, m, others):
    """The first (up to) m items of ``chunk.popular_order`` unmarked in ``mark`` (neither
    recent nor a candidate) into ``others`` (OUT); returns their number. Every other item
    of the chunk ranks after each of them under every pair of weights."""
    n = ZERO
    pop_order = chunk.popular_order
    for j in range(pop_order.shape[0]):
        if n == m:
            break
        li = pop_order[j]
        if mark[li] == 0:
            others[n] = li
            n += 1
    return n


@njit(cache=True)
def _recent_ranked(rr, r, recent, relevant, chunk, work):
    """Row ``rr``'s recent items (`Recent`) into ``work.rec`` (popularity, 0 outside the
    chunk; global index; relevant to row r or not); returns whether one is relevant."""
    recent_local = work.found.local[0]
    rec = work.rec
    any_relevant = False
    for p in range(recent.indptr[rr + 1] - recent.indptr[rr]):
        li = recent_local[p]
        if li >= 0:
            item = chunk.items[li]
            rec.pop[p] = chunk.item_count[li]
        else:
            item = recent.item[recent.indptr[rr] + p]
            rec.pop[p] = 0.0
        rec.item[p] = item
        rec.relevant[p] = _is_relevant(relevant, r, item)
        if rec.relevant[p]:
            any_relevant = True
    return any_relevant


@njit(cache=True)
def _qualifiers(work, nc, n_others, base, share_weights, r, chunk, m):
    """The positions (into ``work.qual``) of a row's ``nc`` candidates that are not recent
    (``work.nc_item, work.nc_x``) whose ``y`` (`_leading`) under some popularity weight is
    within `TIE_MARGIN` of a lower bound of its m-th best; returns their number. The bound
    is the m-th best ``y`` of the candidates of the m best ``x`` and the first others
    (``work.others``): m items of the row, so it is at most the m-th best of all."""
    nc_item, nc_x, qual, others = work.nc_item, work.nc_x, work.qual, work.others
    y_of, scratch = work.y_of, work.scratch
    item_share = chunk.share
    n_share = share_weights.shape[0]
    x_cut = _mth_best(nc_x, nc, m, scratch)
    n_top = ZERO
    for q in range(nc):
        if nc_x[q] >= x_cut:
            qual[n_top] = q
            n_top += 1
    bounds = np.empty(n_share)
    for j in range(n_share):
        w = share_weights[j, r]
        for t in range(n_top):
            q = qual[t]
            y_of[t] = base + w * item_share[nc_item[q]] + nc_x[q]
        for t in range(n_others):
            y_of[n_top + t] = base + w * item_share[others[t]]
        bounds[j] = _mth_best(y_of, n_top + n_others, m, scratch) * (1.0 - TIE_MARGIN)
    n_qual = ZERO
    for q in range(nc):
        share = item_share[nc_item[q]]
        for j in range(n_share):
            if base + share_weights[j, r] * share + nc_x[q] >= bounds[j]:
                qual[n_qual] = q
                n_qual += 1
                break
    return n_qual


@njit(cache=True)
def _leading(work, n_qual, n_others, base, share_weight, chunk, relevant, r, m):
    """A row's items that are not recent and may enter its top m under one popularity
    weight (its ``share_weight``) and any personal weight, into ``work.pool`` (`Ranked`,
    unsorted); returns their number.

    The candidates ``work.qual[:n_qual]`` (`_qualifiers`) and the first others score
    ``y = base + share_weight * share + x`` (``x`` 0 for the others); kept are those
    within `TIE_MARGIN` of the m-th best ``y`` or above: any other has m items ahead of it
    under every personal weight.
    """
    nc_item, nc_x, qual, others = work.nc_item, work.nc_x, work.qual, work.others
    y_of, pool = work.y_of, work.pool
    item_share = chunk.share
    n = n_qual + n_others
    for t in range(n_qual):
        q = qual[t]
        y_of[t] = base + share_weight * item_share[nc_item[q]] + nc_x[q]
    for t in range(n_others):
        y_of[n_qual + t] = base + share_weight * item_share[others[t]]
    bound = _mth_best(y_of, n, m, work.scratch) * (1.0 - TIE_MARGIN)
    size = ZERO
    for t in range(n):
        if y_of[t] < bound:
            continue
        li = nc_item[qual[t]] if t < n_qual else others[t - n_qual]
        item = chunk.items[li]
        pool.score[size] = y_of[t]
        pool.pop[size] = chunk.item_count[li]
        pool.item[size] = item
        pool.relevant[size] = _is_relevant(relevant, r, item)
        size += 1
    return size


@njit(cache=True)
def _blend_row(r, n_variants, queries, no_recent, recent, relevant, chunk, whole, weights,
               m, work, out):
    """Row r's ``hits[s, j, g]`` and ``rank[s, j, g]`` (OUT, ``out = (hits, rank)``) for
    `blend_ranks`, each variant ``s`` of its recent items the row ``r * n_variants + s``
    of ``recent``, under ``weights = (lams, share_weights)`` (``whole``: the chunk's
    `_range_pointers` as one range; ``no_recent``: a `Recent` of empty rows; ``work``:
    `BlendRow`). The row's interests are scattered once: each candidate's ``x`` is kept in
    ``work.acc`` while the variants are ranked."""
    lams, share_weights = weights
    hits, rank = out
    _block_candidates(r, r + 1, queries, whole, chunk, no_recent, work.acc, work.touched,
                      work.cands, work.found)
    n_cands = work.cands.end[0]
    for t in range(n_cands):
        work.acc[work.cands.item[t]] = work.cands.score[t]
    recent_local = work.found.local[0]
    base = queries.base[r]
    for s in range(n_variants):
        rr = r * n_variants + s
        find_recent(rr, recent, chunk, recent_local)
        for p in range(recent.indptr[rr + 1] - recent.indptr[rr]):
            li = recent_local[p]
            work.found.score[0, p] = work.acc[li] if li >= 0 else 0.0
        mark_recent(rr, recent, recent_local, work.mark, np.uint8(2))
        nc = _non_recent(n_cands, work)
        n_others = _first_others(chunk, work.mark, m, work.others)
        rec_relevant = _recent_ranked(rr, r, recent, relevant, chunk, work)
        n_qual = _qualifiers(work, nc, n_others, base, share_weights, r, chunk, m)
        own = recent.score[recent.indptr[rr]:recent.indptr[rr + 1]]
        for j in range(share_weights.shape[0]):
            w = share_weights[j, r]
            n_lead = _leading(work, n_qual, n_others, base, w, chunk, relevant, r, m)
            if not (rec_relevant or _any_relevant(work.pool, n_lead)):
                continue  # no hit under this popularity weight
            for p in range(own.shape[0]):
                li = recent_local[p]
                work.rec_y[p] = (base + w * chunk.share[li] + work.found.score[0, p]
                                 if li >= 0 else np.nan)
            _rank_pairs(work.pool, n_lead, work.rec, work.rec_y, own, lams, m, hits[s, j],
                        rank[s, j])
        for q in range(nc):
            work.mark[work.nc_item[q]] = 0
        mark_recent(rr, recent, recent_local, work.mark, np.uint8(0))
    for t in range(n_cands):
        work.acc[work.cands.item[t]] = 0.0


@njit(cache=True, parallel=True)
def blend_ranks(queries, lams, share_weights, recent, relevant, chunk, m, n_threads,
                n_variants=1):
    """Where each row's relevant items land in `personal_topm`'s top m, for every pair of
    a personal weight and a popularity weight and every variant of its recent items, in
    one pass over the row's candidates.

    IN: ``queries`` (`Queries`; ``share_weight`` is not read), ``lams`` (the personal
    weights, each below 1), ``share_weights`` (shape (popularity weights, rows): row r's
    ``share_weight`` under each), ``recent`` (`Recent`; ``recent.lam`` is not read),
    ``relevant`` (`selection.ItemRows`), ``chunk`` (`Chunk`, as `personal_ranks` takes
    it), ``m``, ``n_threads``, ``n_variants``: row r's variant ``s`` of recent items is
    ``recent``'s row ``r * n_variants + s``. Nothing is seen. Returns (OUT)
    ``hits[r, s, j, g]`` and ``rank[r, s, j, g]``: `personal_ranks`' hits and ranks with
    variant ``s`` as the rows' recent items, ``share_weights[j]`` as their
    ``share_weight`` and the weight ``lams[g]``.

    A row's interests are scattered once, for every variant. Under one popularity weight,
    the items that are not recent are ranked alike by every personal weight (each score
    is ``(1 - lam)`` times one without it), so only those near its m-th best or above can
    enter a top m
    (`_leading`, found among the candidates of `_qualifiers` and the chunk's first other
    items). Under each personal weight, a relevant item among them or the recent items
    takes its rank by counting the items of both lists ahead of it (`_rank_pairs`); under
    a popularity weight that leaves none of a row's relevant items in either list, the
    row has no hit.
    """
    n = queries.indptr.shape[0] - 1
    n_local = chunk.items.shape[0]
    shape = (n, n_variants, share_weights.shape[0], lams.shape[0])
    hits = np.zeros(shape, np.int64)
    rank = np.zeros(shape, np.int64)
    whole = _range_pointers(chunk.phi_indptr, chunk.phi_item, n_local, max(n_local, 1))
    n_blocks = max(1, min(n, n_threads))
    max_recent = max_row_length(recent.indptr)
    no_recent = Recent(np.zeros(n), np.zeros(n + 1, np.int64), np.empty(0, np.int64),
                       np.empty(0))
    for b in prange(n_blocks):
        work = _blend_row_work(n_local, m, max_recent)
        for r in range(b * n // n_blocks, (b + 1) * n // n_blocks):
            _blend_row(r, n_variants, queries, no_recent, recent, relevant, chunk, whole,
                       (lams, share_weights), m, work, (hits[r], rank[r]))
    return hits, rank
