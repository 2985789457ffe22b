"""MiCRO's blended top-m read in decreasing count: each of a user's interests lists its
items from the highest count down, and a row stops reading once no item it has not read
can enter its top m (Fagin's threshold algorithm, with the item's other counts looked up
in an item-major copy of ``phi``).

On a large chunk a user's interests hold thousands of items, of which the top m are a
few: a scatter of every entry (`topm.personal_topm`) reads them all, this reads the head
of each list. The lists and scores are the scatter's, bit for bit.

The kernels take `topm`'s bundles (`topm.Queries`, `topm.Recent`, `topm.Chunk`,
`selection.ItemRows`, `selection.Heap`), the lists as `RankedLists`, a row's scalars as a
`ListRow` and a block's scratch as a `ListScratch`."""

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from .prefetch import prefetch
from .selection import ZERO, drain, is_seen, make_heap, offer
from .topm import RecentFound, Row, find_recent, mark_recent, max_row_length, recent_heap

# Relative room above a row's threshold: an item's score is a sum of at most a row's
# interests' terms, the threshold the same terms at their lists' read positions, each
# rounded; 1e-9 is far above their rounding (about 1e-16 a term) and reads almost nothing
# more.
THRESHOLD_ROOM = 1e-9
# a row asks for the item-major entries of the list entry this many ahead: they lie all
# over the chunk's entries, and a row's reads wait on memory otherwise
READ_AHEAD = 4


class RankedLists(NamedTuple):
    """The latest chunk's lists as `threshold_topm` reads them (`ranked_lists`)."""

    desc_item: np.ndarray
    desc_cnt: np.ndarray
    desc_mask: np.ndarray
    item_ptr: np.ndarray
    item_kc: np.ndarray
    bits_of: np.ndarray
    item_bits: np.ndarray


class ListRow(NamedTuple):
    """One row's scalars as `_read_lists` reads its lists: its index ``r``, its interests
    ``q0:q1`` (of `topm.Queries`), ``keep = 1 - lam``, its ``base`` and ``share_weight``,
    ``share_bound`` (``share_weight`` times the chunk's largest share), the bounds
    ``lo, hi_seen`` of its seen items and ``mask``, its interests' bits (`ranked_lists`)."""

    r: int
    q0: int
    q1: int
    keep: float
    base: float
    share_weight: float
    share_bound: float
    lo: int
    hi_seen: int
    mask: np.uint64


class ListScratch(NamedTuple):
    """A block's scratch for `_read_lists`: ``mark`` (2 for a row's recent items) and
    ``visited`` (items read) over the chunk's items, ``read`` (the items visited), ``pos``
    (each of a row's lists' read position), ``slot`` (interest k's position among the
    row's, -1 for the others) and ``tq, tv`` (an item's terms, `interest_score`)."""

    mark: np.ndarray
    visited: np.ndarray
    read: np.ndarray
    pos: np.ndarray
    slot: np.ndarray
    tq: np.ndarray
    tv: np.ndarray


def ranked_lists(phi_ptr, phi_item, phi_cnt, n_local) -> RankedLists:
    """`threshold_topm`'s views of the interest-major CSR ``phi_*`` of the latest chunk
    (``n_local`` items): each interest's entries (the same ``phi_ptr``) by decreasing
    count, ties to the lower local item, and the same entries item by item.

    Returns a `RankedLists`: ``desc_item`` and ``desc_cnt`` (an entry's local item and
    count) and ``desc_mask`` (bit ``k % 64`` set for each of the item's other interests k:
    a row none of whose interests has a bit in it holds the item in this interest alone);
    ``item_ptr`` and ``item_kc``, the entries item by item (local item ``li``'s are
    ``item_kc[item_ptr[li]:item_ptr[li + 1]]``), each item's interests increasing, as
    (interest, count) pairs (one cache line holds four); ``bits_of`` and ``item_bits``, for
    an item in so many interests that a bitmap of the K interests takes at most four
    64-bit words per interest of its own, the row of ``item_bits`` holding its bitmap (-1
    for the others).
    """
    n_k = phi_ptr.shape[0] - 1
    rows = np.repeat(np.arange(n_k, dtype=np.int64), np.diff(phi_ptr))
    order = np.lexsort((phi_item, -phi_cnt, rows))
    by_item = np.lexsort((rows, phi_item))
    item_ptr = np.zeros(n_local + 1, np.int64)
    np.cumsum(np.bincount(phi_item, minlength=n_local), out=item_ptr[1:])
    item_kc = np.empty((phi_item.shape[0], 2))
    item_kc[:, 0] = rows[by_item]
    item_kc[:, 1] = phi_cnt[by_item]
    bit = np.left_shift(np.uint64(1), (rows & 63).astype(np.uint64))
    item_mask = np.zeros(n_local, np.uint64)
    np.bitwise_or.at(item_mask, phi_item, bit)
    desc_item = phi_item[order]
    # an entry's other interests: the item's mask without its own bit, unless another of
    # its interests shares that bit (then kept: a bit set for nothing costs a look only)
    mask = item_mask[desc_item] & ~bit[order]
    shared = _shares_bit(item_ptr, item_kc, desc_item, rows[order])
    mask[shared] |= bit[order][shared]
    # items in many interests (the heads of many lists) also get a bitmap of them, where
    # it takes at most four words an interest of theirs
    n_words = (n_k + 63) // 64
    wide = np.flatnonzero(4 * np.diff(item_ptr) >= n_words) if n_k else np.empty(0, np.int64)
    bits_of = np.full(n_local, -1, np.int32)
    bits_of[wide] = np.arange(wide.shape[0])
    item_bits = np.zeros((wide.shape[0], n_words), np.uint64)
    entry = np.flatnonzero(bits_of[phi_item] >= 0)
    np.bitwise_or.at(item_bits, (bits_of[phi_item[entry]], rows[entry] >> 6), bit[entry])
    return RankedLists(desc_item, phi_cnt[order], mask, item_ptr, item_kc, bits_of, item_bits)


@njit(cache=True)
def _shares_bit(item_ptr, item_kc, desc_item, desc_k):
    """Whether each entry's item has another interest with the same bit (``k % 64``)."""
    out = np.zeros(desc_item.shape[0], np.bool_)
    for e in range(desc_item.shape[0]):
        li = desc_item[e]
        k = desc_k[e]
        for p in range(item_ptr[li], item_ptr[li + 1]):
            other = np.int64(item_kc[p, 0])
            if other != k and (other & 63) == (k & 63):
                out[e] = True
                break
    return out


@njit(cache=True)
def interest_score(li, row, queries, lists, scratch):
    """``sum_k weight[k] * phi_count[k, li]`` over a row's interests (``row.q0:row.q1`` of
    ``queries``, `topm.Queries`; ``scratch.slot[k]``, the position of interest k among
    them, -1 for the others) for local item ``li``, whose entries are ``lists.item_kc``
    from ``lists.item_ptr[li]`` (`RankedLists`), added in the row's order from 0 as
    `topm.scatter_row` adds them (the same bits); 0 for an item outside them.
    ``scratch.tq, scratch.tv`` are scratch for the item's terms. All IN but that scratch.

    An item of few interests is read through its own entries; an item of more through
    the row's, each looked up in the item's bitmap if it has one and found in its entries
    by bisection if there."""
    q0, q1 = row.q0, row.q1
    q_k, q_w = queries.interest, queries.weight
    item_kc = lists.item_kc
    slot, tq, tv = scratch.slot, scratch.tq, scratch.tv
    lo = lists.item_ptr[li]
    hi = lists.item_ptr[li + 1]
    x = 0.0
    if hi - lo > 2 * (q1 - q0):
        wide = lists.bits_of[li]
        item_bits = lists.item_bits
        for q in range(q0, q1):
            k = q_k[q]
            if wide >= 0 and (item_bits[wide, k >> 6] >> np.uint64(k & 63)) & 1 == 0:
                continue
            a = lo
            b = hi
            while a < b:
                mid = (a + b) // 2
                if item_kc[mid, 0] < k:
                    a = mid + 1
                else:
                    b = mid
            if a < hi and item_kc[a, 0] == k:
                x += q_w[q] * item_kc[a, 1]
        return x
    n = ZERO
    for p in range(lo, hi):
        q = slot[np.int64(item_kc[p, 0])]
        if q >= 0:
            # insert the term by its position in the row (few terms, nearly always in order)
            j = n
            while j > 0 and tq[j - 1] > q:
                tq[j] = tq[j - 1]
                tv[j] = tv[j - 1]
                j -= 1
            tq[j] = q
            tv[j] = q_w[q] * item_kc[p, 1]
            n += 1
    for j in range(n):
        x += tv[j]
    return x


@njit(cache=True)
def _read_lists(row, queries, chunk, lists, seen_items, scratch, heap, paper_heap, sizes, m,
                blended, paper):
    """Row ``row.r``'s interests' items read in decreasing ``weight[k] * count`` into
    ``heap`` (with ``blended``: the blended score; recent items, marked 2, left out) and,
    with ``paper``, ``paper_heap`` (the interests' score alone), until neither can take an
    item not read yet. Returns both heaps' sizes (``sizes`` on entry) and the number of
    items listed in ``scratch.read`` and marked in ``scratch.visited`` (left for the
    caller to clear): those that may lie in more than one of the row's lists, taken at
    their first entry.

    IN: ``row`` (`ListRow`), ``queries`` (`topm.Queries`), ``chunk`` (`topm.Chunk`),
    ``lists`` (`RankedLists`), ``seen_items`` (the row's between ``row.lo`` and
    ``row.hi_seen``), ``sizes``, ``m``, ``blended``, ``paper``. IN/OUT: ``heap``,
    ``paper_heap`` (`selection.Heap`), ``scratch`` (`ListScratch`)."""
    q0, q1 = row.q0, row.q1
    q_k, q_w = queries.interest, queries.weight
    phi_ptr = chunk.phi_indptr
    item_pop, item_share, chunk_items = chunk.item_count, chunk.share, chunk.items
    desc_item, desc_cnt, desc_mask = lists.desc_item, lists.desc_cnt, lists.desc_mask
    item_ptr = lists.item_ptr
    item_flat = lists.item_kc.reshape(-1)
    mark, visited, read, pos = scratch.mark, scratch.visited, scratch.read, scratch.pos
    keep, base, share_weight = row.keep, row.base, row.share_weight
    lo, hi_seen, row_mask = row.lo, row.hi_seen, row.mask
    scores = heap.scores
    paper_scores = paper_heap.scores
    size, psize = sizes
    nq = q1 - q0
    for j in range(nq):
        pos[j] = phi_ptr[q_k[q0 + j]]
    n_read = ZERO
    room = 1.0 + THRESHOLD_ROOM
    while True:
        # the list whose next entry weighs most, the next weight after it, and the other
        # lists' part of the threshold: no item not read yet scores more than the sum of
        # every list's next entry
        best = -1
        best_w = 0.0
        second_w = 0.0
        threshold = 0.0
        for j in range(nq):
            k = q_k[q0 + j]
            if pos[j] < phi_ptr[k + 1]:
                v = q_w[q0 + j] * desc_cnt[pos[j]]
                threshold += v
                if best < 0 or v > best_w:
                    second_w = best_w
                    best = j
                    best_w = v
                elif v > second_w:
                    second_w = v
        if best < 0:
            break
        others = threshold - best_w
        w = q_w[q0 + best]
        end = phi_ptr[q_k[q0 + best] + 1]
        # a run of the best list, while its entries weigh at least the next list's
        while True:
            e = pos[best]
            v = w * desc_cnt[e]
            bound = (others + v) * room
            blended_open = blended and (
                size < m or keep * (base + row.share_bound + bound) >= scores[0])
            paper_open = paper and (psize < m or bound >= paper_scores[0])
            if not blended_open and not paper_open:
                return size, psize, n_read
            ahead = e + READ_AHEAD
            if ahead < end and desc_mask[ahead] & row_mask != 0:
                prefetch(item_flat, 2 * item_ptr[desc_item[ahead]])
            if ahead + READ_AHEAD < end and desc_mask[ahead + READ_AHEAD] & row_mask != 0:
                prefetch(item_ptr, desc_item[ahead + READ_AHEAD])
            li = desc_item[e]
            pos[best] = e + 1
            x = 0.0 + v  # an item in no other list of the row, read once
            fresh = True
            if desc_mask[e] & row_mask != 0:
                # maybe in other lists of the row: taken at its first entry only
                fresh = visited[li] == 0
                if fresh:
                    visited[li] = 1
                    read[n_read] = li
                    n_read += 1
                    x = interest_score(li, row, queries, lists, scratch)
            paper_in = fresh and paper_open and (psize < m or x >= paper_scores[0])
            blended_in = False
            if fresh and blended_open:
                if share_weight == 0.0:
                    s = keep * (base + x)  # the same bits: base + 0.0 is base
                else:
                    s = keep * (base + share_weight * item_share[li] + x)
                blended_in = (size < m or s >= scores[0]) and mark[li] != 2
            if paper_in or blended_in:
                item = chunk_items[li]
                if not (hi_seen > lo and is_seen(seen_items, lo, hi_seen, item)):
                    if paper_in:
                        psize, _ = offer(paper_heap, psize, m, x, item_pop[li], item)
                    if blended_in:
                        size, _ = offer(heap, size, m, s, item_pop[li], item)
            if pos[best] == end or w * desc_cnt[pos[best]] < second_w:
                break
    return size, psize, n_read


@njit(cache=True)
def _other_items(row, queries, chunk, lists, seen_items, scratch, heap, size, m, out_items,
                 out_scores):
    """Complete row ``row.r``'s blended ``heap`` (IN, emptied) of ``size`` with the chunk's
    items outside its interests, in popularity order while they can enter (the items of
    its interests were all offered, or cannot enter: the lists stopped), and drain it
    into ``out_items`` and ``out_scores`` (OUT). The other arguments are `_read_lists`'
    (IN; ``scratch`` read)."""
    keep, base, share_weight = row.keep, row.base, row.share_weight
    lo, hi_seen = row.lo, row.hi_seen
    pop_order = chunk.popular_order
    item_pop, item_share, chunk_items = chunk.item_count, chunk.share, chunk.items
    mark = scratch.mark
    for j in range(pop_order.shape[0]):
        li = pop_order[j]
        s = keep * (base + share_weight * item_share[li])
        if size == m and s < heap.scores[0]:
            break  # nor can any item after it
        if mark[li] != 0:
            continue
        if interest_score(li, row, queries, lists, scratch) != 0.0:
            continue
        item = chunk_items[li]
        if hi_seen > lo and is_seen(seen_items, lo, hi_seen, item):
            continue
        size, kept = offer(heap, size, m, s, item_pop[li], item)
        if not kept:
            break
    drain(heap, size, out_items, out_scores, 0.0)


def threshold_topm(queries, recent, chunk, lists, seen, m, n_threads, paper=False,
                   blended=True):
    """`topm.personal_topm`'s lists and scores, each row reading its interests' items in
    decreasing count (``lists``: `ranked_lists` of ``chunk``'s ``phi``; each row's
    interests distinct, else ValueError).

    IN: ``queries`` (`topm.Queries`), ``recent`` (`topm.Recent`), ``chunk``
    (`topm.Chunk`), ``lists`` (`RankedLists`), ``seen`` (`selection.ItemRows`), ``m``,
    ``n_threads``, ``paper``, ``blended``.

    ``s(i) = (1 - lam[r]) * p(i) + lam[r] * r_u(i)`` with ``p(i) = base[r] +
    share_weight[r] * share[li] + x(i)``, ``x(i) = sum_k weight[k] * phi_count[k, li]``
    over the row's interests; with ``paper``, also the top m of ``base[r] + x(i)`` over
    the items with a count in the row's interests (no recent items, no share), which is
    `topm.mixture_topm`'s. Recent items (global indices, distinct) are scored first; then
    the interests' lists are read, the entry of highest ``weight[k] * count`` first, each
    item's ``x`` looked up in ``lists.item_*``, until the sum of every list's next entry
    (with `THRESHOLD_ROOM`), the most an item not read yet can score, cannot enter either
    top m; then the chunk's other items, which differ by ``share`` alone, in
    ``chunk.popular_order`` as long as they can enter. Seen items (row r of ``seen``) are
    left out. Ties go to the more popular item (``chunk.item_count``; 0 outside the
    chunk), then the lower index. Without ``blended`` (and with ``paper``) only the second
    ranking is made, from the lists alone.

    Returns
    -------
    items, scores : ndarray of shape (n, m), or (0, m) without ``blended``
        Global item indices and scores, padded with -1 and -inf.
    paper_items, paper_scores : ndarray of shape (n, m), or (0, m) without ``paper``
    paper_filled : ndarray of shape (n,), or (0,) without ``paper``
        The second ranking's slots filled, for `fill_remainder`.
    """
    order = rows_by_main_interest(queries.indptr, queries.interest, queries.weight,
                                  chunk.phi_indptr.shape[0] - 1)
    *out, repeated = _threshold_rows(order, queries, recent, chunk, lists, seen, m, n_threads,
                                     paper, blended, ROW_RUN)
    if repeated >= 0:
        raise ValueError(f"threshold_topm: row {repeated} names an interest twice; each "
                         "row's interests must be distinct")
    return tuple(out)


@njit(cache=True)
def rows_by_main_interest(q_ptr, q_k, q_w, n_k):
    """The rows in the order of their interest of highest weight (the first of them in
    the row on a tie; rows without interests first), each interest's rows in their own
    order: consecutive rows then read the heads of the same lists, which stay in cache."""
    n = q_ptr.shape[0] - 1
    main = np.full(n, -1, np.int64)
    for r in range(n):
        best = 0.0
        for q in range(q_ptr[r], q_ptr[r + 1]):
            if main[r] < 0 or q_w[q] > best:
                main[r] = q_k[q]
                best = q_w[q]
    start = np.zeros(n_k + 2, np.int64)
    for r in range(n):
        start[main[r] + 2] += 1
    for k in range(1, n_k + 2):
        start[k] += start[k - 1]
    order = np.empty(n, np.int64)
    for r in range(n):
        order[start[main[r] + 1]] = r
        start[main[r] + 1] += 1
    return order


# rows a block takes at a time (of `rows_by_main_interest`'s order): consecutive rows
# share their lists' heads, and blocks taking turns share the heavy interests' rows out
ROW_RUN = 256


@njit(cache=True, parallel=True)
def _threshold_rows(order, queries, recent, chunk, lists, seen, m, n_threads, paper, blended,
                    row_run):
    """`threshold_topm`'s rows, in runs of ``row_run`` (`ROW_RUN`) of ``order`` dealt to
    the blocks in turn; also returns a row that names an interest twice, or -1. The
    other arguments are `threshold_topm`'s (IN)."""
    q_ptr, q_k = queries.indptr, queries.interest
    q_base, q_share = queries.base, queries.share_weight
    lam, r_ptr = recent.lam, recent.indptr
    seen_indptr, seen_items = seen
    n = q_ptr.shape[0] - 1
    n_local = chunk.items.shape[0]
    n_blended = n if blended else 0
    items = np.full((n_blended, m), -1, np.int64)
    scores = np.full((n_blended, m), -np.inf)
    n_paper = n if paper else 0
    paper_items = np.full((n_paper, m), -1, np.int64)
    paper_scores = np.full((n_paper, m), -np.inf)
    paper_filled = np.zeros(n_paper, np.int64)
    share_max = chunk.share.max() if n_local > 0 else 0.0
    max_recent = max_row_length(r_ptr)
    max_q = max_row_length(q_ptr)
    n_k = chunk.phi_indptr.shape[0] - 1
    n_blocks = max(1, min(n, n_threads))
    repeated = np.full(n_blocks, -1, np.int64)
    for b in prange(n_blocks):
        mark = np.zeros(n_local, np.uint8)
        visited = np.zeros(n_local, np.uint8)
        read = np.empty(n_local, np.int32)
        slot = np.full(n_k, -1, np.int64)
        scratch = ListScratch(mark, visited, read, np.empty(max_q, np.int64), slot,
                              np.empty(max_q, np.int64), np.empty(max_q))
        recent_local = np.empty(max_recent, np.int64)
        recent_x = np.empty(max_recent)
        heap = make_heap(m + max_recent)
        heap_scratch = np.empty(m + max_recent)
        paper_heap = make_heap(m)
        for j in range(n):
            # block b's j-th row: of the block's run j // row_run, runs dealt in turn
            t = (j // row_run * n_blocks + b) * row_run + j % row_run
            if t >= n:
                break
            r = order[t]
            lo = seen_indptr[r]
            hi_seen = seen_indptr[r + 1]
            base = q_base[r]
            share_weight = q_share[r]
            q0 = q_ptr[r]
            q1 = q_ptr[r + 1]
            row_mask = np.uint64(0)
            for q in range(q0, q1):
                if slot[q_k[q]] >= 0:
                    repeated[b] = r
                slot[q_k[q]] = q
                row_mask |= np.uint64(1) << np.uint64(q_k[q] & 63)
            row = ListRow(r, q0, q1, 1.0 - lam[r], base, share_weight,
                          share_weight * share_max, lo, hi_seen, row_mask)
            size = ZERO
            if blended:
                # the recent items, scored first and marked so the lists pass them over
                find_recent(r, recent, chunk, recent_local)
                for p in range(r_ptr[r + 1] - r_ptr[r]):
                    li = recent_local[p]
                    recent_x[p] = 0.0 if li < 0 else interest_score(li, row, queries, lists,
                                                                    scratch)
                size = recent_heap(Row(r, lam[r], base, share_weight, lo, hi_seen), recent,
                                   RecentFound(recent_local, recent_x), chunk, seen_items,
                                   heap, m, heap_scratch)
                mark_recent(r, recent, recent_local, mark, np.uint8(2))
            size, psize, n_read = _read_lists(row, queries, chunk, lists, seen_items, scratch,
                                              heap, paper_heap, (size, ZERO), m, blended,
                                              paper)
            for t in range(n_read):
                visited[read[t]] = 0
            if blended:
                _other_items(row, queries, chunk, lists, seen_items, scratch, heap, size, m,
                             items[r], scores[r])
                mark_recent(r, recent, recent_local, mark, np.uint8(0))
            for q in range(q0, q1):
                slot[q_k[q]] = -1
            if paper:
                paper_filled[r] = psize
                drain(paper_heap, psize, paper_items[r], paper_scores[r], base)
    return items, scores, paper_items, paper_scores, paper_filled, repeated.max()
