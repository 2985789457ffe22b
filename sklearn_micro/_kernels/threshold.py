"""MiCRO's blended top-m read in decreasing count: each of a user's interests lists its
items from the highest count down, and a row stops reading once no item it has not read
can enter its top m (Fagin's threshold algorithm, with the item's other counts looked up
in an item-major copy of ``phi``).

On a large chunk a user's interests hold thousands of items, of which the top m are a
few: a scatter of every entry (`topm.personal_topm`) reads them all, this reads the head
of each list. The lists and scores are the scatter's, bit for bit."""

import numpy as np
from numba import njit, prange

from .prefetch import prefetch
from .selection import ZERO, drain, is_seen, offer
from .topm import _find_recent, _mark_recent, max_row_length, recent_heap

# Relative room above a row's threshold: an item's score is a sum of at most a row's
# interests' terms, the threshold the same terms at their lists' read positions, each
# rounded; 1e-9 is far above their rounding (about 1e-16 a term) and reads almost nothing
# more.
THRESHOLD_ROOM = 1e-9
# a row asks for the item-major entries of the list entry this many ahead: they lie all
# over the chunk's entries, and a row's reads wait on memory otherwise
READ_AHEAD = 4
# `ranked_lists`' arrays in `threshold_topm`'s order of arguments
RANKED_KEYS = ("desc_item", "desc_cnt", "desc_mask", "item_ptr", "item_kc", "bits_of",
               "item_bits")


def ranked_lists(phi_ptr, phi_item, phi_cnt, n_local) -> dict:
    """`threshold_topm`'s views of the interest-major CSR ``phi_*`` of the latest chunk
    (``n_local`` items): each interest's entries (the same ``phi_ptr``) by decreasing
    count, ties to the lower local item, and the same entries item by item.

    Returns a dict of arrays: ``desc_item`` and ``desc_cnt`` (an entry's local item and
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
    return {"desc_item": desc_item, "desc_cnt": phi_cnt[order], "desc_mask": mask,
            "item_ptr": item_ptr, "item_kc": item_kc, "bits_of": bits_of,
            "item_bits": item_bits}


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
def interest_score(li, lo, hi, q0, q1, q_k, q_w, slot, item_kc, bits_of, item_bits, tq, tv):
    """``sum_k q_w[k] * phi_cnt[k, li]`` over a row's interests (``q_k[q0:q1]``;
    ``slot[k]``, the position of interest k among them, -1 for the others) for local item
    ``li``, whose entries are ``item_kc[lo:hi]`` (`ranked_lists`), added in the row's order
    from 0 as `topm.scatter_row` adds them (the same bits); 0 for an item outside them.
    ``tq, tv`` are scratch for the item's terms.

    An item of few interests is read through its own entries; an item of more through
    the row's, each looked up in the item's bitmap if it has one and found in its entries
    by bisection if there."""
    x = 0.0
    if hi - lo > 2 * (q1 - q0):
        wide = bits_of[li]
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
def _read_lists(r, q_ptr, q_k, q_w, phi_ptr, desc_item, desc_cnt, desc_mask,
                item_ptr, item_kc, bits_of, item_bits, item_flat, keep, base, share_weight,
                share_max, mark, visited, read, item_pop, item_share, chunk_items, seen_items,
                lo, hi_seen, m, pos, slot, row_mask, tq, tv, hs, hp, hi, size, blended, paper,
                ps, pp, pi, psize):
    """Row r's interests' items read in decreasing ``q_w[k] * count`` into the heaps
    ``hs, hp, hi`` (with ``blended``: the blended score; recent items, marked 2, left out)
    and, with
    ``paper``, ``ps, pp, pi`` (the interests' score alone), until neither can take an item
    not read yet. Returns both sizes and the number of items listed in ``read`` and marked
    in ``visited`` (left for the caller to clear): those that may lie in more than one of
    the row's lists, taken at their first entry. ``slot`` and ``row_mask`` are the row's
    interests' positions (`interest_score`) and bits (`ranked_lists`)."""
    q0 = q_ptr[r]
    q1 = q_ptr[r + 1]
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
                size < m or keep * (base + share_weight * share_max + bound) >= hs[0])
            paper_open = paper and (psize < m or bound >= ps[0])
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
                    x = interest_score(li, item_ptr[li], item_ptr[li + 1], q0, q1, q_k, q_w,
                                       slot, item_kc, bits_of, item_bits, tq, tv)
            paper_in = fresh and paper_open and (psize < m or x >= ps[0])
            blended_in = False
            if fresh and blended_open:
                if share_weight == 0.0:
                    s = keep * (base + x)  # the same bits: base + 0.0 is base
                else:
                    s = keep * (base + share_weight * item_share[li] + x)
                blended_in = (size < m or s >= hs[0]) and mark[li] != 2
            if paper_in or blended_in:
                item = chunk_items[li]
                if not (hi_seen > lo and is_seen(seen_items, lo, hi_seen, item)):
                    if paper_in:
                        psize, _ = offer(ps, pp, pi, psize, m, x, item_pop[li], item)
                    if blended_in:
                        size, _ = offer(hs, hp, hi, size, m, s, item_pop[li], item)
            if pos[best] == end or w * desc_cnt[pos[best]] < second_w:
                break
    return size, psize, n_read


@njit(cache=True)
def _other_items(r, keep, base, share_weight, q0, q1, q_k, q_w, slot, item_ptr, item_kc,
                 bits_of, item_bits, tq, tv, mark, item_pop, item_share, chunk_items,
                 pop_order, seen_items, lo, hi_seen, m, hs, hp, hi, size, out_items,
                 out_scores):
    """Complete row r's blended heap of ``size`` with the chunk's items outside its
    interests, in popularity order while they can enter (the items of its interests were
    all offered, or cannot enter: the lists stopped), and drain it into ``out_items`` and
    ``out_scores``."""
    for j in range(pop_order.shape[0]):
        li = pop_order[j]
        s = keep * (base + share_weight * item_share[li])
        if size == m and s < hs[0]:
            break  # nor can any item after it
        if mark[li] != 0:
            continue
        if interest_score(li, item_ptr[li], item_ptr[li + 1], q0, q1, q_k, q_w, slot,
                          item_kc, bits_of, item_bits, tq, tv) != 0.0:
            continue
        item = chunk_items[li]
        if hi_seen > lo and is_seen(seen_items, lo, hi_seen, item):
            continue
        size, kept = offer(hs, hp, hi, size, m, s, item_pop[li], item)
        if not kept:
            break
    drain(hs, hp, hi, size, out_items, out_scores, 0.0)


def threshold_topm(q_ptr, q_k, q_w, q_base, q_share, lam, r_ptr, r_item, r_w, phi_ptr,
                   desc_item, desc_cnt, desc_mask, item_ptr, item_kc,
                   bits_of, item_bits, item_pop, item_share, chunk_items, sorted_items,
                   local_of, pop_order, seen_indptr, seen_items, m, n_threads, paper=False,
                   blended=True):
    """`topm.personal_topm`'s lists and scores, each row reading its interests' items in
    decreasing count (``desc_*``, ``item_*``: `ranked_lists` of its ``phi_*``; each row's
    interests distinct, else ValueError).

    ``s(i) = (1 - lam[r]) * p(i) + lam[r] * r_w(i)`` with ``p(i) = q_base[r] + q_share[r] *
    item_share[li] + x(i)``, ``x(i) = sum_k q_w[k] * phi_cnt[k, li]`` over the row's
    interests; with ``paper``, also the top m of ``q_base[r] + x(i)`` over the items with a
    count in the row's interests (no recent items, no share), which is
    `topm.mixture_topm`'s. Recent items (``r_*``, global indices, distinct) are scored
    first; then the interests' lists are read, the entry of highest ``q_w[k] * count``
    first, each item's ``x`` looked up in ``item_*``, until the sum of every list's next
    entry (with `THRESHOLD_ROOM`), the most an item not read yet can score, cannot enter
    either top m; then the chunk's other items, which differ by ``item_share`` alone, in
    ``pop_order`` as long as they can enter. Seen items (``seen_items[seen_indptr[r]:
    seen_indptr[r+1]]``, sorted global indices) are left out. Ties go to the more popular
    item (``item_pop``; 0 outside the chunk), then the lower index. Without ``blended``
    (and with ``paper``) only the second ranking is made, from the lists alone.

    Returns
    -------
    items, scores : ndarray of shape (n, m), or (0, m) without ``blended``
        Global item indices and scores, padded with -1 and -inf.
    paper_items, paper_scores : ndarray of shape (n, m), or (0, m) without ``paper``
    paper_filled : ndarray of shape (n,), or (0,) without ``paper``
        The second ranking's slots filled, for `fill_remainder`.
    """
    order = rows_by_main_interest(q_ptr, q_k, q_w, phi_ptr.shape[0] - 1)
    *out, repeated = _threshold_rows(
        order, q_ptr, q_k, q_w, q_base, q_share, lam, r_ptr, r_item, r_w, phi_ptr,
        desc_item, desc_cnt, desc_mask, item_ptr, item_kc, bits_of, item_bits, item_pop,
        item_share, chunk_items, sorted_items, local_of, pop_order, seen_indptr,
        seen_items, m, n_threads, paper, blended, ROW_RUN)
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
def _threshold_rows(order, q_ptr, q_k, q_w, q_base, q_share, lam, r_ptr, r_item, r_w,
                    phi_ptr, desc_item, desc_cnt, desc_mask, item_ptr, item_kc, bits_of,
                    item_bits, item_pop, item_share, chunk_items, sorted_items, local_of,
                    pop_order, seen_indptr, seen_items, m, n_threads, paper, blended,
                    row_run):
    """`threshold_topm`'s rows, in runs of ``row_run`` (`ROW_RUN`) of ``order`` dealt to
    the blocks in turn; also returns a row that names an interest twice, or -1."""
    n = q_ptr.shape[0] - 1
    n_local = chunk_items.shape[0]
    n_blended = n if blended else 0
    items = np.full((n_blended, m), -1, np.int64)
    scores = np.full((n_blended, m), -np.inf)
    n_paper = n if paper else 0
    paper_items = np.full((n_paper, m), -1, np.int64)
    paper_scores = np.full((n_paper, m), -np.inf)
    paper_filled = np.zeros(n_paper, np.int64)
    share_max = item_share.max() if n_local > 0 else 0.0
    max_recent = max_row_length(r_ptr)
    max_q = max_row_length(q_ptr)
    n_k = phi_ptr.shape[0] - 1
    item_flat = item_kc.reshape(-1)
    n_blocks = max(1, min(n, n_threads))
    repeated = np.full(n_blocks, -1, np.int64)
    for b in prange(n_blocks):
        mark = np.zeros(n_local, np.uint8)
        visited = np.zeros(n_local, np.uint8)
        read = np.empty(n_local, np.int32)
        pos = np.empty(max_q, np.int64)
        slot = np.full(n_k, -1, np.int64)
        tq = np.empty(max_q, np.int64)
        tv = np.empty(max_q)
        recent_local = np.empty(max_recent, np.int64)
        recent_x = np.empty(max_recent)
        hs = np.empty(m + max_recent)
        hp = np.empty(m + max_recent)
        hi = np.empty(m + max_recent, np.int64)
        scratch = np.empty(m + max_recent)
        ps = np.empty(m)
        pp = np.empty(m)
        pi = np.empty(m, np.int64)
        for j in range(n):
            # block b's j-th row: of the block's run j // row_run, runs dealt in turn
            t = (j // row_run * n_blocks + b) * row_run + j % row_run
            if t >= n:
                break
            r = order[t]
            lo = seen_indptr[r]
            hi_seen = seen_indptr[r + 1]
            keep = 1.0 - lam[r]
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
            size = ZERO
            if blended:
                # the recent items, scored first and marked so the lists pass them over
                _find_recent(r, r_ptr, r_item, sorted_items, local_of, recent_local)
                for p in range(r_ptr[r + 1] - r_ptr[r]):
                    li = recent_local[p]
                    recent_x[p] = 0.0 if li < 0 else interest_score(
                        li, item_ptr[li], item_ptr[li + 1], q0, q1, q_k, q_w, slot, item_kc,
                        bits_of, item_bits, tq, tv)
                size = recent_heap(r, lam[r], base, share_weight, r_ptr, r_item, r_w,
                                   recent_local, recent_x, item_pop, item_share, chunk_items,
                                   seen_items, lo, hi_seen, hs, hp, hi, m, scratch)
                _mark_recent(r, r_ptr, recent_local, mark, np.uint8(2))
            size, psize, n_read = _read_lists(
                r, q_ptr, q_k, q_w, phi_ptr, desc_item, desc_cnt, desc_mask,
                item_ptr, item_kc, bits_of, item_bits, item_flat, keep, base, share_weight,
                share_max, mark, visited, read, item_pop, item_share, chunk_items, seen_items,
                lo, hi_seen, m, pos, slot, row_mask, tq, tv, hs, hp, hi, size, blended,
                paper, ps, pp, pi, ZERO)
            for t in range(n_read):
                visited[read[t]] = 0
            if blended:
                _other_items(r, keep, base, share_weight, q0, q1, q_k, q_w, slot, item_ptr,
                             item_kc, bits_of, item_bits, tq, tv, mark, item_pop, item_share,
                             chunk_items, pop_order, seen_items, lo, hi_seen, m, hs, hp, hi,
                             size, items[r], scores[r])
                _mark_recent(r, r_ptr, recent_local, mark, np.uint8(0))
            for q in range(q0, q1):
                slot[q_k[q]] = -1
            if paper:
                paper_filled[r] = psize
                drain(ps, pp, pi, psize, paper_items[r], paper_scores[r], base)
    return items, scores, paper_items, paper_scores, paper_filled, repeated.max()
