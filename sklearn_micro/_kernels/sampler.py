"""The collapsed Gibbs sampler of one time chunk.

Layout. Engagements are sorted by user. Each user of the chunk has a support (the interests
its prior allows) stored as a small CSR: ``sup_ptr``, ``sup_k`` (interest), ``sup_prior``
(alpha plus the counts carried from training and earlier chunks) and ``sup_cnt`` (this
chunk's counts). Item-interest counts ``N[i,k,t]`` live in one flat array ``cand_cnt`` with an
entry for each (item, interest) pair that any engager's support allows; ``emap[e_off[e] + j]``
is the entry of the j-th support interest of engagement ``e``'s user for ``e``'s item. So
resampling one engagement touches ``|support(u)|`` entries, whatever the number of interests.
"""

import math

import numpy as np
from numba import njit


@njit(cache=True)
def seed(value):
    np.random.seed(value)


@njit(cache=True)
def gibbs_sweep(e_user, e_off, emap, sup_ptr, sup_k, sup_prior, sup_cnt, cand_cnt,
                interest_cnt, zpos, beta, i_beta):
    """One sweep over the chunk's engagements; returns how many assignments changed.

    ``p(z = k) ∝ (sup_prior + sup_cnt) * (beta + N[i,k,t]) / (i_beta + N[k,t])`` with the
    engagement's own assignment taken out of all three counts.
    """
    n = e_user.shape[0]
    max_s = 1
    for u in range(sup_ptr.shape[0] - 1):
        max_s = max(max_s, sup_ptr[u + 1] - sup_ptr[u])
    cum = np.empty(max_s, np.float64)
    changed = 0
    for e in range(n):
        u = e_user[e]
        s0 = sup_ptr[u]
        s = sup_ptr[u + 1] - s0
        if s == 1:
            continue
        off = e_off[e]
        old = zpos[e]
        sup_cnt[s0 + old] -= 1
        cand_cnt[emap[off + old]] -= 1
        interest_cnt[sup_k[s0 + old]] -= 1
        total = 0.0
        for j in range(s):
            total += ((sup_prior[s0 + j] + sup_cnt[s0 + j])
                      * (beta + cand_cnt[emap[off + j]])
                      / (i_beta + interest_cnt[sup_k[s0 + j]]))
            cum[j] = total
        r = np.random.random() * total
        lo = 0
        hi = s - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if cum[mid] > r:
                hi = mid
            else:
                lo = mid + 1
        sup_cnt[s0 + lo] += 1
        cand_cnt[emap[off + lo]] += 1
        interest_cnt[sup_k[s0 + lo]] += 1
        if lo != old:
            changed += 1
            zpos[e] = lo
    return changed


@njit(cache=True)
def chunk_log_likelihood(sup_prior, sup_cnt, cand_cnt, interest_cnt, beta, i_beta):
    """Collapsed log p(z_t, e_t), up to terms that do not depend on z_t."""
    ll = 0.0
    for j in range(sup_cnt.shape[0]):
        if sup_cnt[j] > 0:
            ll += math.lgamma(sup_prior[j] + sup_cnt[j]) - math.lgamma(sup_prior[j])
    lg_beta = math.lgamma(beta)
    for c in range(cand_cnt.shape[0]):
        if cand_cnt[c] > 0:
            ll += math.lgamma(beta + cand_cnt[c]) - lg_beta
    lg_ibeta = math.lgamma(i_beta)
    for k in range(interest_cnt.shape[0]):
        if interest_cnt[k] > 0:
            ll -= math.lgamma(i_beta + interest_cnt[k]) - lg_ibeta
    return ll


@njit(cache=True)
def entry_map(e_user, e_item, e_off, sup_ptr, sup_k, n_items, n_interests):
    """The (item, interest) entries of a chunk and each engagement's map into them.

    Engagement ``e`` of local item ``e_item[e]`` has one entry per interest of its user's
    support; ``emap[e_off[e] + j]`` is the entry of its j-th interest. Entries are grouped
    by item (a counting sort), each (item, interest) pair once, in O(entries + items + K).
    Returns ``emap``, and each entry's item and interest.
    """
    n = e_user.shape[0]
    total = e_off[n]
    start = np.zeros(n_items + 1, np.int64)
    for e in range(n):
        start[e_item[e] + 1] += e_off[e + 1] - e_off[e]
    for it in range(n_items):
        start[it + 1] += start[it]
    fill = start[:-1].copy()
    by_item = np.empty(total, np.int64)
    for e in range(n):
        it = e_item[e]
        for p in range(e_off[e], e_off[e + 1]):
            by_item[fill[it]] = p
            fill[it] += 1
    entry_k = np.empty(total, np.int64)
    for e in range(n):
        s0 = sup_ptr[e_user[e]]
        for j in range(e_off[e + 1] - e_off[e]):
            entry_k[e_off[e] + j] = sup_k[s0 + j]
    mark = np.full(n_interests, -1, np.int64)
    emap = np.empty(total, np.int32)
    cand_item = np.empty(total, np.int64)
    cand_k = np.empty(total, np.int64)
    n_cand = 0
    for it in range(n_items):
        first = n_cand
        for q in range(start[it], start[it + 1]):
            p = by_item[q]
            k = entry_k[p]
            if mark[k] < 0:
                mark[k] = n_cand
                cand_item[n_cand] = it
                cand_k[n_cand] = k
                n_cand += 1
            emap[p] = mark[k]
        for c in range(first, n_cand):
            mark[cand_k[c]] = -1
    return emap, cand_item[:n_cand].copy(), cand_k[:n_cand].copy()
