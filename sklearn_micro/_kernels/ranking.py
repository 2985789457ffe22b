"""Top-m selection of scored candidates with the shared tie-break.

A row's ranked list is kept best first in ``out_items[r, :out_n[r]]`` and
``out_scores[r, :out_n[r]]``; a candidate ranks before another when its score is higher or,
at equal scores, when its ``tie_key`` is lower (the latest chunk's popularity rank). Items
seen by the user (``seen_items[seen_indptr[r]:seen_indptr[r + 1]]``, sorted) are skipped.
"""

import numpy as np
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
def _exact_dot(queries, r, vectors, j):
    """``queries[r] @ vectors[j]`` summed in float64 in a fixed order, rounded to float32:
    the same for a pair whatever else is scored with it. Dimension ``d`` goes to lane
    ``d % 4``; the lanes are summed in order, then added as ``(l0 + l1) + (l2 + l3)``."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    n = queries.shape[1]
    d = 0
    while d + 4 <= n:
        s0 += np.float64(queries[r, d]) * np.float64(vectors[j, d])
        s1 += np.float64(queries[r, d + 1]) * np.float64(vectors[j, d + 1])
        s2 += np.float64(queries[r, d + 2]) * np.float64(vectors[j, d + 2])
        s3 += np.float64(queries[r, d + 3]) * np.float64(vectors[j, d + 3])
        d += 4
    if d < n:
        s0 += np.float64(queries[r, d]) * np.float64(vectors[j, d])
    if d + 1 < n:
        s1 += np.float64(queries[r, d + 1]) * np.float64(vectors[j, d + 1])
    if d + 2 < n:
        s2 += np.float64(queries[r, d + 2]) * np.float64(vectors[j, d + 2])
    return np.float32((s0 + s1) + (s2 + s3))


@njit(cache=True, nogil=True)
def _heap_offer(heap, r, n, s):
    """Offer ``s`` to row ``r``'s min-heap of the best approximate scores (``n`` held, at
    most ``heap.shape[1]``); return the new count."""
    m = heap.shape[1]
    if n < m:
        pos = n
        heap[r, pos] = s
        while pos > 0:
            parent = (pos - 1) // 2
            if heap[r, parent] <= s:
                break
            heap[r, pos] = heap[r, parent]
            pos = parent
        heap[r, pos] = s
        return n + 1
    if s <= heap[r, 0]:
        return n
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= m:
            break
        if child + 1 < m and heap[r, child + 1] < heap[r, child]:
            child += 1
        if heap[r, child] >= s:
            break
        heap[r, pos] = heap[r, child]
        pos = child
    heap[r, pos] = s
    return n


@njit(cache=True, nogil=True)
def _flush(r, cut, queries, vectors, candidates, tie_key, buf, buf_score, buf_n,
           out_items, out_scores, out_n):
    """Score row ``r``'s buffered candidates at or above ``cut`` exactly into its top-m."""
    n = out_n[r]
    for b in range(buf_n[r]):
        if buf_score[r, b] >= cut:
            j = buf[r, b]
            n = _push(out_items, out_scores, r, n, candidates[j],
                      _exact_dot(queries, r, vectors, j), tie_key)
    out_n[r] = n
    buf_n[r] = 0


@njit(cache=True, nogil=True)
def prefilter_block(block_scores, first, queries, vectors, candidates, margin, tie_key,
                    seen_indptr, seen_items, heap, heap_n, buf, buf_score, buf_n,
                    out_items, out_scores, out_n):
    """Take a block of approximate scores (rows x candidates ``first:first + width``):
    keep, for each row, the candidates that may still be in its exact top-m.

    ``block_scores`` are float32 products, each within ``margin / 2`` of the exact score.
    A row keeps the m best approximate scores in ``heap``; a candidate whose approximate
    score is below the m-th best minus ``margin`` is strictly worse, exactly, than m
    candidates, so it is dropped. The others wait in ``buf`` (candidate positions and
    approximate scores); a full buffer is scored exactly into the top-m. `prefilter_finish`
    scores what is left once every block is taken.
    """
    m = heap.shape[1]
    cap = buf.shape[1]
    for r in range(block_scores.shape[0]):
        lo = seen_indptr[r]
        hi = seen_indptr[r + 1]
        n = heap_n[r]
        cut = heap[r, 0] - margin if n == m else -np.inf
        for jj in range(block_scores.shape[1]):
            s = block_scores[r, jj]
            if not s >= cut:
                continue
            j = first + jj
            if hi > lo and _is_seen(seen_items, lo, hi, candidates[j]):
                continue
            n = _heap_offer(heap, r, n, s)
            if n == m:
                cut = heap[r, 0] - margin
            if buf_n[r] == cap:
                _flush(r, cut, queries, vectors, candidates, tie_key, buf, buf_score, buf_n,
                       out_items, out_scores, out_n)
            b = buf_n[r]
            buf[r, b] = j
            buf_score[r, b] = s
            buf_n[r] = b + 1
        heap_n[r] = n


@njit(cache=True, nogil=True)
def prefilter_finish(queries, vectors, candidates, margin, tie_key, heap, heap_n, buf,
                     buf_score, buf_n, out_items, out_scores, out_n):
    """Score the candidates `prefilter_block` kept exactly into each row's top-m."""
    m = heap.shape[1]
    for r in range(heap.shape[0]):
        cut = heap[r, 0] - margin if heap_n[r] == m else -np.inf
        _flush(r, cut, queries, vectors, candidates, tie_key, buf, buf_score, buf_n,
               out_items, out_scores, out_n)
