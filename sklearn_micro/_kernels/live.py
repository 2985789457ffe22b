"""The open chunk, live: each observed engagement's interest drawn once from the sampler's
conditional with the counts so far."""

import numpy as np
from numba import njit

from .selection import lower_bound as _find


@njit(cache=True)
def _position(keys, lo, hi, key):
    """Position of ``key`` among the unsorted ``keys[lo:hi]``, or -1."""
    for q in range(lo, hi):
        if keys[q] == key:
            return q
    return -1


@njit(cache=True)
def _user_rows(batch_users, batch_size, support, live_user, n_interests):
    """The candidate interests and counts ``N[u, k]`` of each distinct user of a batch,
    with room for the interests a user without a support adopts (one per engagement)."""
    indptr, interest, count = support
    keys, counts = live_user
    n_closed = indptr.shape[0] - 1
    n = batch_users.shape[0]
    ptr = np.zeros(n + 1, np.int64)
    for r in range(n):
        u = batch_users[r]
        size = batch_size[r]
        if u < n_closed:
            size += indptr[u + 1] - indptr[u]
        lo = _find(keys, 0, keys.shape[0], u * n_interests)
        hi = _find(keys, lo, keys.shape[0], (u + 1) * n_interests)
        ptr[r + 1] = ptr[r] + size + hi - lo
    k_out = np.full(ptr[-1], -1, np.int64)
    n_out = np.zeros(ptr[-1], np.float64)
    fill = ptr[:-1].copy()
    supported = np.zeros(n, np.bool_)
    for r in range(n):
        u = batch_users[r]
        if u < n_closed:
            for e in range(indptr[u], indptr[u + 1]):
                k_out[fill[r]] = interest[e]
                n_out[fill[r]] = count[e]
                fill[r] += 1
            supported[r] = indptr[u + 1] > indptr[u]
        lo = _find(keys, 0, keys.shape[0], u * n_interests)
        hi = _find(keys, lo, keys.shape[0], (u + 1) * n_interests)
        for e in range(lo, hi):
            k = keys[e] - u * n_interests
            found = _position(k_out, ptr[r], fill[r], k)
            if found < 0:
                found = fill[r]
                k_out[found] = k
                fill[r] += 1
            n_out[found] += counts[e]
    return ptr, k_out, n_out, fill, supported


@njit(cache=True)
def _item_rows(batch_items, batch_size, live_item, n_interests):
    """Each distinct item's open-chunk counts ``N[i, k]``, with room for one new interest
    per engagement of the batch."""
    keys, counts = live_item
    n = batch_items.shape[0]
    ptr = np.zeros(n + 1, np.int64)
    for r in range(n):
        i = batch_items[r]
        lo = _find(keys, 0, keys.shape[0], i * n_interests)
        hi = _find(keys, lo, keys.shape[0], (i + 1) * n_interests)
        ptr[r + 1] = ptr[r] + batch_size[r] + hi - lo
    k_out = np.full(ptr[-1], -1, np.int64)
    n_out = np.zeros(ptr[-1], np.float64)
    fill = ptr[:-1].copy()
    for r in range(n):
        i = batch_items[r]
        lo = _find(keys, 0, keys.shape[0], i * n_interests)
        hi = _find(keys, lo, keys.shape[0], (i + 1) * n_interests)
        for e in range(lo, hi):
            k_out[fill[r]] = keys[e] - i * n_interests
            n_out[fill[r]] = counts[e]
            fill[r] += 1
    return ptr, k_out, n_out, fill


@njit(cache=True)
def draw_live(batch, users, items, support, item_interest, live, prior, z, adopted):
    """Draw each engagement's interest once, in order, from the sampler's conditional
    ``p(z = k) ∝ (alpha + N[u, k]) * (beta + N[i, k]) / (I * beta + N[k])`` over the user's
    support, with the counts so far: the user's carried counts plus its open-chunk
    engagements, the item's and the interests' counts in the open chunk, ``I`` its distinct
    items (this one included).

    IN ``batch = (user_row, item_row, new_item, uniform)``: per engagement, its user's row
    in ``users``, its item's row in ``items``, whether it is the item's first engagement in
    the open chunk, and a uniform draw in [0, 1). ``users = (ids, sizes)``,
    ``items = (ids, sizes)``: the batch's distinct users and items (model indices) and
    their engagements in the batch. ``support = (indptr, interest, count)``: the carried
    supports. ``item_interest``: each known item's main interest (-1: none). ``live =
    (user_keys, user_counts, item_keys, item_counts, interest_total, n_items)``: the open
    chunk's counts so far, keys ``u * K + k`` and ``i * K + k`` sorted, ``interest_total``
    (changed in place) ``N[k]``. ``prior = (alpha, beta, K)``.
    OUT ``z``: each engagement's interest, -1 where its user has no interest to give;
    ``adopted``: the interest its user adopted at it (-1: none).

    A user without a carried support adopts, as the sampler gives it, the main interest of
    each item it engages (the carried one, else the item's interest of most open-chunk
    engagements); the support of a user with one is fixed.
    """
    user_row, item_row, new_item, uniform = batch
    user_keys, user_counts, item_keys, item_counts, interest_total, n_items = live
    alpha, beta, n_interests = prior
    u_ptr, u_k, u_n, u_fill, supported = _user_rows(users[0], users[1], support,
                                                    (user_keys, user_counts), n_interests)
    i_ptr, i_k, i_n, i_fill = _item_rows(items[0], items[1], (item_keys, item_counts),
                                         n_interests)
    n_closed_items = item_interest.shape[0]
    weights = np.empty(u_k.shape[0], np.float64)
    # the engagement's item's counts by interest, scattered for the support's reads and
    # cleared after: the cost of an engagement is its user's support plus its item's row
    item_count = np.zeros(n_interests, np.float64)
    n_distinct = n_items
    for e in range(user_row.shape[0]):
        r = user_row[e]
        c = item_row[e]
        if new_item[e]:
            n_distinct += 1
        if not supported[r]:
            i = items[0][c]
            main = item_interest[i] if i < n_closed_items else -1
            if main < 0:
                best = 0.0
                for q in range(i_ptr[c], i_fill[c]):
                    if i_n[q] > best or (i_n[q] == best and best > 0 and i_k[q] < main):
                        best = i_n[q]
                        main = i_k[q]
            if main >= 0 and _position(u_k, u_ptr[r], u_fill[r], main) < 0:
                u_k[u_fill[r]] = main
                u_fill[r] += 1
                adopted[e] = main
        lo, hi = u_ptr[r], u_fill[r]
        if hi == lo:
            z[e] = -1
            continue
        denom_base = n_distinct * beta
        for q in range(i_ptr[c], i_fill[c]):
            item_count[i_k[q]] = i_n[q]
        total = 0.0
        for q in range(lo, hi):
            k = u_k[q]
            w = (alpha + u_n[q]) * (beta + item_count[k]) / (denom_base + interest_total[k])
            total += w
            weights[q] = total
        for q in range(i_ptr[c], i_fill[c]):
            item_count[i_k[q]] = 0.0
        target = uniform[e] * total
        pick = hi - 1
        for q in range(lo, hi):
            if weights[q] > target:
                pick = q
                break
        k = u_k[pick]
        z[e] = k
        u_n[pick] += 1.0
        interest_total[k] += 1.0
        found = _position(i_k, i_ptr[c], i_fill[c], k)
        if found < 0:
            found = i_fill[c]
            i_k[found] = k
            i_fill[c] += 1
        i_n[found] += 1.0
