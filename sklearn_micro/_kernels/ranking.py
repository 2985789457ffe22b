"""Top-m selection of scored candidates with the shared tie-break.

A row's ranked list is kept best first in ``out_items[r, :out_n[r]]`` and
``out_scores[r, :out_n[r]]``; a candidate ranks before another when its score is higher or,
at equal scores, when its ``tie_key`` is lower (the latest chunk's popularity rank). Items
seen by the user (``seen_items[seen_indptr[r]:seen_indptr[r + 1]]``, sorted) are skipped.
"""

from numba import njit

from .topm import _is_seen


@njit(cache=True, nogil=True)
def _push(out_items, out_scores, r, n, item, score, tie_key):
    """Insert ``item`` into row ``r`` holding ``n`` ranked items; return the new count."""
    m = out_items.shape[1]
    if n == m:
        worst = out_scores[r, m - 1]
        if score < worst or (score == worst and tie_key[item] > tie_key[out_items[r, m - 1]]):
            return n
        pos = m - 1
    else:
        pos = n
        n += 1
    while pos > 0:
        prev = out_scores[r, pos - 1]
        if prev > score or (prev == score and tie_key[out_items[r, pos - 1]] < tie_key[item]):
            break
        out_scores[r, pos] = prev
        out_items[r, pos] = out_items[r, pos - 1]
        pos -= 1
    out_scores[r, pos] = score
    out_items[r, pos] = item
    return n


@njit(cache=True, nogil=True)
def top_m_sparse(indptr, items, scores, tie_key, seen_indptr, seen_items,
                 out_items, out_scores, out_n):
    """Rank each row's candidates ``items[indptr[r]:indptr[r + 1]]`` into the output.

    Candidates with a negative index or a NaN score are skipped; a row's candidates must be
    distinct.
    """
    for r in range(indptr.shape[0] - 1):
        lo = seen_indptr[r]
        hi = seen_indptr[r + 1]
        n = out_n[r]
        for j in range(indptr[r], indptr[r + 1]):
            it = items[j]
            s = scores[j]
            if it < 0 or s != s:
                continue
            if hi > lo and _is_seen(seen_items, lo, hi, it):
                continue
            n = _push(out_items, out_scores, r, n, it, s, tie_key)
        out_n[r] = n


@njit(cache=True, nogil=True)
def top_m_dense(block_scores, block_items, tie_key, seen_indptr, seen_items,
                out_items, out_scores, out_n):
    """Merge a dense block of scores (rows x ``block_items``) into the running top-m.

    Called once per block of items, so a row's top-m over many items never needs all its
    scores at once.
    """
    for r in range(block_scores.shape[0]):
        lo = seen_indptr[r]
        hi = seen_indptr[r + 1]
        n = out_n[r]
        for j in range(block_items.shape[0]):
            s = block_scores[r, j]
            if s != s:
                continue
            it = block_items[j]
            if n == out_items.shape[1]:
                worst = out_scores[r, n - 1]
                if s < worst or (s == worst and tie_key[it] > tie_key[out_items[r, n - 1]]):
                    continue
            if hi > lo and _is_seen(seen_items, lo, hi, it):
                continue
            n = _push(out_items, out_scores, r, n, it, s, tie_key)
        out_n[r] = n
