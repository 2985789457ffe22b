"""Request-time kernels: MiCRO's scores of given items, ranked (allow lists, explanations)."""

import numpy as np
from numba import njit, prange

from .selection import ZERO, drain, is_seen, lower_bound, make_heap, offer
from .topm import max_row_length, scatter_row


@njit(cache=True)
def _find(values, lo, hi, value):
    """The position of ``value`` in the sorted ``values[lo:hi]``, -1 if absent."""
    pos = lower_bound(values, lo, hi, value)
    if pos < hi and values[pos] == value:
        return pos
    return -1


@njit(cache=True)
def _interest_sum(r, li, q_ptr, q_k, q_w, phi_ptr, phi_item, phi_cnt):
    """Row r's ``sum_k q_w[k] * phi_cnt[k, li]`` over its interests, in their order, each
    count found by a binary search in its interest's entries."""
    x = 0.0
    for q in range(q_ptr[r], q_ptr[r + 1]):
        k = q_k[q]
        e = _find(phi_item, phi_ptr[k], phi_ptr[k + 1], li)
        if e >= 0:
            x = x + q_w[q] * phi_cnt[e]
    return x


@njit(cache=True)
def _row_entries(r, q_ptr, q_k, phi_ptr):
    entries = ZERO
    for q in range(q_ptr[r], q_ptr[r + 1]):
        entries += phi_ptr[q_k[q] + 1] - phi_ptr[q_k[q]]
    return entries


@njit(cache=True, parallel=True)
def candidate_topm(queries, recent, chunk, cand_lo, cand_hi, cand_items, item_local, seen, m,
                   n_threads):
    """Exact top-m of each row's candidates ``cand_items[cand_lo[r]:cand_hi[r]]`` (global
    item indices, repeats taken once), by MiCRO's score, best first. ``item_local`` maps a
    global item to its local index in the latest chunk (-1 outside it).

    IN: ``queries`` (`topm.Queries`), ``recent`` (`topm.Recent`, each row's items sorted),
    ``chunk`` (`topm.Chunk`, ``phi_item`` sorted within each interest, as
    `group_by_interest` leaves it; ``items``, ``sorted_items``, ``local_of`` and
    ``popular_order`` are not read), ``cand_lo``, ``cand_hi``, ``cand_items``,
    ``item_local``, ``seen`` (`selection.ItemRows`), ``m``, ``n_threads``: `personal_topm`'s
    rows, interests, recent items and chunk. A candidate's score is ``keep * (base +
    share_weight * share + x) + lam * r_u`` (``keep = 1 - lam``; the last term for a recent
    item; ``x`` the interests' sum of ``weight * phi_count``, added in the row's order of
    interests), and ``lam * r_u`` for a recent item outside the chunk:
    `personal_topm`'s arithmetic, and with ``lam`` 0 `mixture_topm`'s and
    `fill_remainder`'s, so the scores are those `recommend` gives. A row's ``x`` come from
    its interests scattered into a scratch of the chunk's items (`scatter_row`), or, where
    its candidates are few beside its interests' entries, from binary searches. A
    candidate the row does not rank (outside the chunk and not recent) or seen
    (``seen_items[seen_indptr[r]:seen_indptr[r+1]]``, sorted) is left out. Ties go to the
    more popular item, then the lower index. Returns (OUT) global item indices and scores
    of shape (n, m), padded with -1 and -inf.
    """
    q_ptr, q_k, q_w = queries.indptr, queries.interest, queries.weight
    q_base, q_share = queries.base, queries.share_weight
    lam, r_ptr, r_item, r_w = recent
    phi_ptr, phi_item, phi_cnt = chunk.phi_indptr, chunk.phi_item, chunk.phi_count
    item_pop, item_share = chunk.item_count, chunk.share
    seen_indptr, seen_items = seen
    n = q_ptr.shape[0] - 1
    n_local = item_pop.shape[0]
    items = np.full((n, m), -1, np.int64)
    scores = np.full((n, m), -np.inf)
    n_blocks = max(1, min(n, n_threads))
    starts = phi_ptr[:-1]
    ends = phi_ptr[1:]
    for b in prange(n_blocks):
        heap = make_heap(m)
        acc = np.zeros(n_local)
        touched = np.empty(n_local + 1, np.int32)
        # candidates already offered: local items of the chunk, and recent items outside it
        offered = np.zeros(n_local, np.uint8)
        offered_recent = np.zeros(max_row_length(r_ptr), np.uint8)
        for r in range(b * n // n_blocks, (b + 1) * n // n_blocks):
            keep = 1.0 - lam[r]
            lo = seen_indptr[r]
            hi_seen = seen_indptr[r + 1]
            n_q = q_ptr[r + 1] - q_ptr[r]
            scatter = _row_entries(r, q_ptr, q_k, phi_ptr) < 4 * n_q * (cand_hi[r] - cand_lo[r])
            nt = ZERO
            if scatter:
                nt = scatter_row(r, q_ptr, q_k, q_w, starts, ends, phi_item, phi_cnt, acc,
                              touched)
            size = ZERO
            for c in range(cand_lo[r], cand_hi[r]):
                item = cand_items[c]
                li = item_local[item]
                rp = -1
                if r_ptr[r + 1] > r_ptr[r]:
                    rp = _find(r_item, r_ptr[r], r_ptr[r + 1], item)
                if li >= 0:
                    if offered[li]:
                        continue
                    offered[li] = 1
                elif rp >= 0:
                    if offered_recent[rp - r_ptr[r]]:
                        continue
                    offered_recent[rp - r_ptr[r]] = 1
                else:
                    continue
                if hi_seen > lo and is_seen(seen_items, lo, hi_seen, item):
                    continue
                if li >= 0:
                    if scatter:
                        x = acc[li]
                    else:
                        x = _interest_sum(r, li, q_ptr, q_k, q_w, phi_ptr, phi_item, phi_cnt)
                    s = keep * (q_base[r] + q_share[r] * item_share[li] + x)
                    if rp >= 0:
                        s = s + lam[r] * r_w[rp]
                    size, _ = offer(heap, size, m, s, item_pop[li], item)
                elif rp >= 0:
                    size, _ = offer(heap, size, m, lam[r] * r_w[rp], 0.0, item)
            for t in range(nt):
                acc[touched[t]] = 0.0
            for c in range(cand_lo[r], cand_hi[r]):
                li = item_local[cand_items[c]]
                if li >= 0:
                    offered[li] = 0
            offered_recent[:r_ptr[r + 1] - r_ptr[r]] = 0
            drain(heap, size, items[r], scores[r], 0.0)
    return items, scores
