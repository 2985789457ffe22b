"""The collapsed Gibbs sampler of one time chunk: numba kernels.

Layout (built by `sklearn_micro.micro._gibbs.build_layout`). Engagements are sorted by user. Each
user of the chunk has a support (the interests its prior allows) stored as a small CSR:
``support_ptr``, ``support_interest``, ``support_prior`` (alpha plus the counts carried from
training and earlier chunks) and ``user_count`` (this chunk's ``N[u, k]``). The
item-interest counts ``N[i, k, t]`` live in one flat array ``entry_count`` with an entry for
each (item, interest) pair that any engager's support allows;
``entry_of[entry_ptr[e] + j]`` is the entry of the j-th support interest of engagement
``e``'s user for ``e``'s item. So resampling one engagement touches ``|support(u)|``
entries, whatever the number of interests. An engagement's interest ``z[e]`` is a position
in its user's support.
"""

import math
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from .prefetch import prefetch

# a sweep asks for the (item, interest) counts of the engagement this many ahead: they are
# scattered over the chunk's entries, and waiting for each costs more than the draw
PREFETCH_AHEAD = 16
# the merge asks for the counts of the engagement this many ahead: few engagements move
# after the first sweeps, so its requests need a longer reach to be in flight in time
MOVES_AHEAD = 128


class SweepLayout(NamedTuple):
    """A chunk's layout as the sweeps read it (IN): each engagement's user (a row of the
    supports), ``entry_ptr`` and ``entry_of`` (its (item, interest) entries, one per
    support interest), and the supports as a CSR (``support_ptr``, ``support_interest``,
    ``support_prior``: alpha plus the carried counts)."""

    engagement_user: np.ndarray
    entry_ptr: np.ndarray
    entry_of: np.ndarray
    support_ptr: np.ndarray
    support_interest: np.ndarray
    support_prior: np.ndarray


class SweepCounts(NamedTuple):
    """A chain's state as the sweeps change it (IN and OUT, in place): ``N[u, k]`` aligned
    with the supports, ``N[i, k, t]`` aligned with the entries, ``N[k, t]``, and each
    engagement's interest ``z`` (a position in its user's support)."""

    user_count: np.ndarray
    entry_count: np.ndarray
    interest_count: np.ndarray
    z: np.ndarray


@njit(cache=True, nogil=True)
def sweep_partition(seed, layout, counts, beta, i_beta):
    """One Gibbs sweep over a partition's engagements; returns how many ``z`` changed.

    IN ``seed``, ``layout`` (`SweepLayout`), ``beta``, ``i_beta``; IN/OUT ``counts``
    (`SweepCounts`). ``p(z = k) ∝ (support_prior + N[u,k]) * (beta + N[i,k,t]) / (i_beta +
    N[k,t])`` with the engagement's own assignment taken out of all three counts. The
    random stream is seeded with ``seed`` in the calling thread, so the outcome depends on
    the arguments alone. ``entry_ptr`` has one more element than ``engagement_user`` and
    starts at 0; ``entry_of`` indexes ``counts.entry_count``, which may be the partition's
    own copy. The kernel releases the GIL, so partitions of disjoint users run on threads
    at once.
    """
    np.random.seed(seed)
    return _sweep_range(0, layout.engagement_user.shape[0], layout, counts, beta, i_beta)


@njit(cache=True, inline="always")
def _sweep_range(lo, hi, layout, counts, beta, i_beta):
    """`sweep_partition` over the engagements ``lo..hi-1``, on the calling thread's random
    stream as it stands."""
    engagement_user, entry_ptr, entry_of = (layout.engagement_user, layout.entry_ptr,
                                            layout.entry_of)
    support_ptr, support_interest, support_prior = (layout.support_ptr,
                                                    layout.support_interest,
                                                    layout.support_prior)
    # written through local names: inside a parallel loop numba drops a write through a
    # tuple's field
    user_count, entry_count, interest_count, z = counts
    max_s = 1
    for e in range(lo, hi):
        max_s = max(max_s, entry_ptr[e + 1] - entry_ptr[e])
    cum = np.empty(max_s, np.float64)
    changed = 0
    for e in range(lo, hi):
        if e + PREFETCH_AHEAD < hi:
            for p in range(entry_ptr[e + PREFETCH_AHEAD], entry_ptr[e + PREFETCH_AHEAD + 1]):
                prefetch(entry_count, entry_of[p])
        u = engagement_user[e]
        s0 = support_ptr[u]
        s = support_ptr[u + 1] - s0
        if s == 1:
            continue
        off = entry_ptr[e]
        old = z[e]
        user_count[s0 + old] -= 1
        entry_count[entry_of[off + old]] -= 1
        interest_count[support_interest[s0 + old]] -= 1
        total = 0.0
        for j in range(s):
            total += ((support_prior[s0 + j] + user_count[s0 + j])
                      * (beta + entry_count[entry_of[off + j]])
                      / (i_beta + interest_count[support_interest[s0 + j]]))
            cum[j] = total
        r = np.random.random() * total
        lo_j = 0
        hi_j = s - 1
        while lo_j < hi_j:
            mid = (lo_j + hi_j) // 2
            if cum[mid] > r:
                hi_j = mid
            else:
                lo_j = mid + 1
        user_count[s0 + lo_j] += 1
        entry_count[entry_of[off + lo_j]] += 1
        interest_count[support_interest[s0 + lo_j]] += 1
        if lo_j != old:
            changed += 1
            z[e] = lo_j
    return changed


@njit(cache=True, parallel=True)
def sweep_copies(seeds, bounds, layout, counts, copies, before, beta, i_beta):
    """One sweep of a chunk in partitions at once, each against its own copy of the
    (item, interest) counts, then the merge; in one parallel region.

    IN ``seeds``, ``bounds``, ``layout`` (`SweepLayout`), ``beta``, ``i_beta``; IN/OUT
    ``counts`` (`SweepCounts`) and ``copies``; ``before`` is scratch. Partition ``p`` is
    the engagements ``bounds[p]..bounds[p + 1]-1`` (of disjoint users) and samples with
    the random stream of ``seeds[p]`` against its own ``N[i, k, t]``
    (``counts.entry_count`` for the first partition, ``copies[p - 1]``, a whole copy, for
    the others) and its own copy of ``interest_count``: the draws are those of
    `sweep_partition` on the partition's arrays. Then each partition's counts take the
    moves of the other partitions' engagements (``before`` to ``z``), so that they all hold
    the chain's counts again, and ``interest_count`` the partitions' changes. Returns how
    many assignments changed.
    """
    user_count, entry_count, interest_count, z = counts
    entry_ptr, entry_of = layout.entry_ptr, layout.entry_of
    n_parts = seeds.shape[0]
    interests = np.empty((n_parts, interest_count.shape[0]), interest_count.dtype)
    changed = np.zeros(n_parts, np.int64)
    for p in prange(n_parts):
        lo, hi = bounds[p], bounds[p + 1]
        before[lo:hi] = z[lo:hi]
        interests[p] = interest_count
        np.random.seed(seeds[p])
        own = entry_count if p == 0 else copies[p - 1]
        changed[p] = _sweep_range(lo, hi, layout,
                                  SweepCounts(user_count, own, interests[p], z), beta, i_beta)
    for p in prange(n_parts):
        own = entry_count if p == 0 else copies[p - 1]
        for q in range(n_parts):
            if q != p:
                _add_moves_range(own, entry_ptr, entry_of, before, z, bounds[q],
                                 bounds[q + 1])
    start = interest_count.copy()
    for p in range(n_parts):
        interest_count += interests[p] - start
    return changed.sum()


@njit(cache=True, inline="always")
def _lgamma_ratio(a, c):
    """``lgamma(a + c) - lgamma(a)`` for a count ``c >= 0``: exactly 0 for no count (most
    of a chunk's entries and support slots), one log of a product for small counts, and two
    lgammas otherwise."""
    if c == 0:
        return 0.0
    if c > 16:
        return math.lgamma(a + c) - math.lgamma(a)
    product = 1.0
    for j in range(c):
        product *= a + j
    return math.log(product)


@njit(cache=True, parallel=True)
def chunk_log_likelihood(support_prior, user_count, entry_count, interest_count, beta,
                         i_beta):
    """Collapsed log p(z_t, e_t), up to terms that do not depend on z_t."""
    ll = 0.0
    for j in prange(user_count.shape[0]):
        ll += _lgamma_ratio(support_prior[j], user_count[j])
    for c in prange(entry_count.shape[0]):
        ll += _lgamma_ratio(beta, entry_count[c])
    for k in range(interest_count.shape[0]):
        ll -= _lgamma_ratio(i_beta, interest_count[k])
    return ll


@njit(cache=True, inline="always")
def _prefetch_engagement(q, order, engagement_user, entry_ptr, entry_of, support_ptr,
                         support_interest):
    """Prefetch, in three stages, what the engagements ``order[q + ...]`` ahead of the
    ``q``-th will read: their user and slots, then their user's support and their map,
    then the support's interests (each stage reads what the one before brought in)."""
    n = order.shape[0]
    if q + 2 * PREFETCH_AHEAD < n:
        e = order[q + 2 * PREFETCH_AHEAD]
        prefetch(engagement_user, e)
        prefetch(entry_ptr, e)
    if q + PREFETCH_AHEAD < n:
        e = order[q + PREFETCH_AHEAD]
        prefetch(support_ptr, engagement_user[e])
        prefetch(entry_of, entry_ptr[e])
    if q + PREFETCH_AHEAD // 2 < n:
        prefetch(support_interest, support_ptr[engagement_user[order[q + PREFETCH_AHEAD // 2]]])


@njit(cache=True, parallel=True)
def entry_map(engagement_user, engagement_item, entry_ptr, support_ptr, support_interest,
              n_items, n_interests, n_ranges):
    """The (item, interest) entries of a chunk and each engagement's map into them.

    Engagement ``e`` of local item ``engagement_item[e]`` has one entry per interest of its
    user's support; ``entry_of[entry_ptr[e] + j]`` is the entry of its j-th interest.
    Entries are grouped by item, each (item, interest) pair once, numbered in the order of
    the item's engagements and their support's interests, in O(entries + items + K): the
    engagements are grouped by item (a counting sort), so each engagement's slots and its
    user's support are read in one run. The items are cut into ``n_ranges`` ranges of
    about equal slots (one per thread), each numbered from 0 and then moved past the
    ranges before it: the numbering is the same for any ``n_ranges``. Returns
    ``entry_of``, and each entry's item and interest.
    """
    n = engagement_user.shape[0]
    total = entry_ptr[n]
    start = np.zeros(n_items + 1, np.int64)
    slots = np.zeros(n_items + 1, np.int64)
    for e in range(n):
        start[engagement_item[e] + 1] += 1
        slots[engagement_item[e] + 1] += entry_ptr[e + 1] - entry_ptr[e]
    for it in range(n_items):
        start[it + 1] += start[it]
        slots[it + 1] += slots[it]
    fill = start[:-1].copy()
    by_item = np.empty(n, np.int64)
    for e in range(n):
        it = engagement_item[e]
        by_item[fill[it]] = e
        fill[it] += 1
    n_ranges = max(1, min(n_ranges, n_items))
    cut = np.empty(n_ranges + 1, np.int64)
    for r in range(n_ranges):
        cut[r] = np.searchsorted(slots[:-1], total * r / n_ranges)
    cut[0] = 0
    cut[n_ranges] = n_items
    entry_of = np.empty(total, np.int32)
    # a range writes its entries from the position of its first slot on: never past the
    # next range's, since an item has at most as many entries as slots
    entry_item = np.empty(total, np.int32)
    entry_interest = np.empty(total, np.int32)
    found = np.zeros(n_ranges + 1, np.int64)
    for r in prange(n_ranges):
        mark = np.full(n_interests, -1, np.int64)
        base = slots[cut[r]]
        count = 0
        for it in range(cut[r], cut[r + 1]):
            first = count
            for q in range(start[it], start[it + 1]):
                _prefetch_engagement(q, by_item, engagement_user, entry_ptr, entry_of,
                                     support_ptr, support_interest)
                e = by_item[q]
                s0 = support_ptr[engagement_user[e]]
                p0 = entry_ptr[e]
                for j in range(entry_ptr[e + 1] - p0):
                    k = support_interest[s0 + j]
                    if mark[k] < 0:
                        mark[k] = count
                        entry_item[base + count] = it
                        entry_interest[base + count] = k
                        count += 1
                    entry_of[p0 + j] = mark[k]
            for c in range(first, count):
                mark[entry_interest[base + c]] = -1
        found[r + 1] = count
    for r in range(n_ranges):
        found[r + 1] += found[r]
    if n_ranges > 1:
        range_of = np.empty(n_items, np.int32)
        for r in range(n_ranges):
            range_of[cut[r]:cut[r + 1]] = r
        for e in prange(n):
            shift = found[range_of[engagement_item[e]]]
            if shift:
                for p in range(entry_ptr[e], entry_ptr[e + 1]):
                    entry_of[p] += shift
    out_item = np.empty(found[n_ranges], np.int32)
    out_interest = np.empty(found[n_ranges], np.int32)
    for r in range(n_ranges):
        base = slots[cut[r]]
        for c in range(found[r + 1] - found[r]):
            out_item[found[r] + c] = entry_item[base + c]
            out_interest[found[r] + c] = entry_interest[base + c]
    return entry_of, out_item, out_interest


@njit(cache=True)
def count_assignments(engagement_user, entry_ptr, entry_of, support_ptr, support_interest,
                      z, n_entries, n_interests):
    """``N[u, k]`` (aligned with the supports), ``N[i, k, t]`` (aligned with the entries)
    and ``N[k, t]`` of the assignments ``z``, as int32."""
    user_count = np.zeros(support_interest.shape[0], np.int32)
    entry_count = np.zeros(n_entries, np.int32)
    interest_count = np.zeros(n_interests, np.int32)
    n = engagement_user.shape[0]
    for e in range(n):
        if e + PREFETCH_AHEAD < n:
            ahead = e + PREFETCH_AHEAD
            prefetch(entry_count, entry_of[entry_ptr[ahead] + z[ahead]])
        s = support_ptr[engagement_user[e]] + z[e]
        user_count[s] += 1
        entry_count[entry_of[entry_ptr[e] + z[e]]] += 1
        interest_count[support_interest[s]] += 1
    return user_count, entry_count, interest_count


@njit(cache=True, nogil=True)
def localize(entry_of, n_entries):
    """The sorted distinct entries that ``entry_of`` touches, and ``entry_of`` rewritten as
    positions among them (a partition's map into its own copy of the counts)."""
    rank = np.zeros(n_entries, np.int32)
    n = entry_of.shape[0]
    ahead = 4 * PREFETCH_AHEAD
    for p in range(n):
        if p + ahead < n:
            prefetch(rank, entry_of[p + ahead])
        rank[entry_of[p]] = 1
    n_touched = 0
    for c in range(n_entries):
        if rank[c]:
            rank[c] = n_touched
            n_touched += 1
        else:
            rank[c] = -1
    entries = np.empty(n_touched, np.int64)
    for c in range(n_entries):
        if rank[c] >= 0:
            entries[rank[c]] = c
    local = np.empty(n, np.int32)
    for p in range(n):
        if p + ahead < n:
            prefetch(rank, entry_of[p + ahead])
        local[p] = rank[entry_of[p]]
    return entries, local


@njit(cache=True, nogil=True)
def gather(values, positions):
    """``values[positions]``, without holding the GIL (a partition's copy of its counts,
    taken on its own thread)."""
    out = np.empty(positions.shape[0], values.dtype)
    for j in range(positions.shape[0]):
        out[j] = values[positions[j]]
    return out


@njit(cache=True, nogil=True)
def add_moves(entry_count, entry_ptr, entry_of, before, z):
    """Move the (item, interest) counts of the engagements whose assignment changed from
    ``before`` to ``z``."""
    _add_moves_range(entry_count, entry_ptr, entry_of, before, z, 0, z.shape[0])


@njit(cache=True, inline="always")
def _add_moves_range(entry_count, entry_ptr, entry_of, before, z, lo, hi):
    """`add_moves` over the engagements ``lo..hi-1``."""
    for e in range(lo, hi):
        if e + MOVES_AHEAD < hi:
            ahead = e + MOVES_AHEAD
            if before[ahead] != z[ahead]:
                prefetch(entry_count, entry_of[entry_ptr[ahead] + before[ahead]])
                prefetch(entry_count, entry_of[entry_ptr[ahead] + z[ahead]])
        a = before[e]
        b = z[e]
        if a != b:
            entry_count[entry_of[entry_ptr[e] + a]] -= 1
            entry_count[entry_of[entry_ptr[e] + b]] += 1


@njit(cache=True)
def main_interests(entry_item, entry_interest, entry_count, n_items):
    """Each item's interest holding most of its assigned engagements, ties going to the
    lower interest; -1 for an item without any."""
    best = np.full(n_items, -1, np.int32)
    most = np.zeros(n_items, np.int32)
    for c in range(entry_item.shape[0]):
        n = entry_count[c]
        if n == 0:
            continue
        it = entry_item[c]
        k = entry_interest[c]
        if n > most[it] or (n == most[it] and k < best[it]):
            most[it] = n
            best[it] = k
    return best


@njit(cache=True)
def group_order(group, n_groups):
    """The stable order that sorts ``group`` (values ``0..n_groups-1``): a counting sort."""
    start = np.zeros(n_groups + 1, np.int64)
    for g in group:
        start[g + 1] += 1
    for g in range(n_groups):
        start[g + 1] += start[g]
    order = np.empty(group.shape[0], np.int64)
    for e in range(group.shape[0]):
        order[start[group[e]]] = e
        start[group[e]] += 1
    return order


@njit(cache=True)
def pair_counts(rows, cols, weights, n_rows, n_cols):
    """The distinct (row, col) pairs with their summed weights (1 each when ``weights`` is
    empty), as a CSR ``(indptr, cols, sums)`` with columns sorted within each row.

    A counting sort by row, then a dense accumulator over the columns of one row at a
    time: O(pairs + n_rows + n_cols) time and 4 bytes per pair of scratch (12 with weights).
    """
    n = rows.shape[0]
    weighted = weights.shape[0] > 0
    start = np.zeros(n_rows + 1, np.int64)
    for r in rows:
        start[r + 1] += 1
    for r in range(n_rows):
        start[r + 1] += start[r]
    fill = start[:-1].copy()
    grouped = np.empty(n, np.int32)
    grouped_w = np.empty(n if weighted else 0, np.float64)
    for e in range(n):
        p = fill[rows[e]]
        grouped[p] = cols[e]
        if weighted:
            grouped_w[p] = weights[e]
        fill[rows[e]] += 1
    seen = np.zeros(n_cols, np.bool_)
    indptr = np.zeros(n_rows + 1, np.int64)
    for r in range(n_rows):
        d = 0
        for p in range(start[r], start[r + 1]):
            if not seen[grouped[p]]:
                seen[grouped[p]] = True
                d += 1
        for p in range(start[r], start[r + 1]):
            seen[grouped[p]] = False
        indptr[r + 1] = indptr[r] + d
    out_col = np.empty(indptr[n_rows], np.int32)
    out_sum = np.empty(indptr[n_rows], np.float64)
    acc = np.zeros(n_cols, np.float64)
    for r in range(n_rows):
        m = indptr[r]
        for p in range(start[r], start[r + 1]):
            c = grouped[p]
            if not seen[c]:
                seen[c] = True
                out_col[m] = c
                m += 1
            acc[c] += grouped_w[p] if weighted else 1.0
        out_col[indptr[r]:m].sort()
        for q in range(indptr[r], m):
            out_sum[q] = acc[out_col[q]]
            acc[out_col[q]] = 0.0
            seen[out_col[q]] = False
    return indptr, out_col, out_sum
