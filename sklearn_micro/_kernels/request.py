"""Request-time kernels: MiCRO's scores of given items, ranked (allow lists, explanations)."""

import numpy as np
from numba import njit, prange

from .topm import ZERO, _drain, _is_seen, _offer, lower_bound


@njit(cache=True)
def _find(values, lo, hi, value):
    """The position of ``value`` in the sorted ``values[lo:hi]``, -1 if absent."""
    pos = lower_bound(values, lo, hi, value)
    if pos < hi and values[pos] == value:
        return pos
    return -1


@njit(cache=True)
def _candidate_score(r, item, keep, lam, q_ptr, q_k, q_w, q_base, q_share, r_ptr, r_item,
                     r_w, phi_ptr, phi_item, phi_cnt, item_pop, item_share, sorted_items,
                     local_of, out):
    """Row r's score of ``item`` (a global index) into ``out[0]`` and its popularity into
    ``out[1]``; returns False where the row does not rank the item (neither in the latest
    chunk nor among the row's recent items).

    The arithmetic is `personal_topm`'s (and, with ``lam`` 0 and no recent items,
    `mixture_topm`'s and `fill_remainder`'s): the interests' sum ``x`` adds
    ``q_w * phi_cnt`` over the row's interests in their order, and the score is
    ``keep * (q_base + q_share * item_share + x)``, plus ``lam * r_w`` for a recent item.
    """
    pos = _find(sorted_items, ZERO, sorted_items.shape[0], item)
    rp = -1
    if r_ptr[r + 1] > r_ptr[r]:
        rp = _find(r_item, r_ptr[r], r_ptr[r + 1], item)
    if pos < 0 and rp < 0:
        return False
    if pos >= 0:
        li = local_of[pos]
        x = 0.0
        for q in range(q_ptr[r], q_ptr[r + 1]):
            k = q_k[q]
            e = _find(phi_item, phi_ptr[k], phi_ptr[k + 1], li)
            if e >= 0:
                x = x + q_w[q] * phi_cnt[e]
        s = keep * (q_base[r] + q_share[r] * item_share[li] + x)
        if rp >= 0:
            s = s + lam * r_w[rp]
        out[0] = s
        out[1] = item_pop[li]
    else:
        out[0] = lam * r_w[rp]
        out[1] = 0.0
    return True


@njit(cache=True, parallel=True)
def candidate_topm(q_ptr, q_k, q_w, q_base, q_share, lam, r_ptr, r_item, r_w, phi_ptr,
                   phi_item, phi_cnt, item_pop, item_share, sorted_items, local_of, cand_lo,
                   cand_hi, cand_items, seen_indptr, seen_items, m, n_threads):
    """Exact top-m of each row's candidates ``cand_items[cand_lo[r]:cand_hi[r]]`` (global
    item indices, distinct), by MiCRO's score, best first.

    The rows, interests, recent items and chunk are `personal_topm`'s: ``phi_item`` are
    local items numbered as `group_by_interest` does, sorted within each interest, and
    ``sorted_items[pos]`` is the global item of local ``local_of[pos]``. A candidate the
    row does not rank (outside the latest chunk and the row's recent items) or seen
    (``seen_items[seen_indptr[r]:seen_indptr[r+1]]``, sorted) is left out. Ties go to the
    more popular item, then the lower index, as in every top-m kernel. Returns global item
    indices and scores of shape (n, m), padded with -1 and -inf.
    """
    n = q_ptr.shape[0] - 1
    items = np.full((n, m), -1, np.int64)
    scores = np.full((n, m), -np.inf)
    n_blocks = max(1, min(n, n_threads))
    for b in prange(n_blocks):
        hs = np.empty(m)
        hp = np.empty(m)
        hi = np.empty(m, np.int64)
        out = np.empty(2)
        for r in range(b * n // n_blocks, (b + 1) * n // n_blocks):
            keep = 1.0 - lam[r]
            lo = seen_indptr[r]
            hi_seen = seen_indptr[r + 1]
            size = ZERO
            for c in range(cand_lo[r], cand_hi[r]):
                item = cand_items[c]
                if hi_seen > lo and _is_seen(seen_items, lo, hi_seen, item):
                    continue
                if _candidate_score(r, item, keep, lam[r], q_ptr, q_k, q_w, q_base, q_share,
                                    r_ptr, r_item, r_w, phi_ptr, phi_item, phi_cnt,
                                    item_pop, item_share, sorted_items, local_of, out):
                    size, _ = _offer(hs, hp, hi, size, m, out[0], out[1], item)
            _drain(hs, hp, hi, size, items[r], scores[r], 0.0)
    return items, scores
