"""Top-m selection of scored candidates with the shared tie-break.

A row's ranked list is kept best first in ``out_items[r, :out_n[r]]`` and
``out_scores[r, :out_n[r]]``; a candidate ranks before another when its score is higher or,
at equal scores, when its ``tie_key`` is lower (the latest chunk's popularity rank). Items
seen by the user (``seen_items[seen_indptr[r]:seen_indptr[r + 1]]``, sorted) are skipped.
"""

from typing import NamedTuple

import numpy as np
from numba import njit

from .selection import Heap, is_seen, sampled_cut, select, worse


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
def place_neighbours(indptr, rows, neighbours, distances, candidates, cand, cand_scores):
    """Write the ``k`` neighbours of each query ``t`` at the start of its row ``rows[t]``
    of the CSR ``indptr``: neighbour ``j`` (``neighbours[t, j]``, a position in
    ``candidates``, -1 for none) as the item ``candidates[neighbours[t, j]]`` into ``cand``
    and its similarity ``1 - distances[t, j]`` (cosine, in float32) into ``cand_scores``;
    the slots of a -1 are left as they are."""
    one = np.float32(1.0)
    for t in range(rows.shape[0]):
        base = indptr[rows[t]]
        for j in range(neighbours.shape[1]):
            nb = neighbours[t, j]
            if nb >= 0:
                cand[base + j] = candidates[nb]
                cand_scores[base + j] = one - distances[t, j]


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
            if hi > lo and is_seen(seen_items, lo, hi, it):
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


class Scored(NamedTuple):
    """What the exact search scores (IN): the rows' query vectors, the candidates' vectors
    (row ``j`` for the candidate ``candidates[j]``, a global item index) and each item's
    tie-break key (the lower ranks first at equal scores)."""

    queries: np.ndarray
    vectors: np.ndarray
    candidates: np.ndarray
    tie_key: np.ndarray


class Pending(NamedTuple):
    """Each row's candidates waiting to be scored exactly (IN/OUT): its cut (the bound
    under which a candidate cannot enter its top m), and the buffered candidates'
    positions, approximate scores and number."""

    cut: np.ndarray
    buf: np.ndarray
    buf_score: np.ndarray
    buf_n: np.ndarray


class TopM(NamedTuple):
    """Each row's ranked list so far (IN/OUT): ``items[r, :n[r]]`` and their ``scores``,
    best first."""

    items: np.ndarray
    scores: np.ndarray
    n: np.ndarray


@njit(cache=True, nogil=True)
def _raise_cut(r, pending, margin, m, scratch):
    """Raise row ``r``'s cut to the m-th best approximate score of its buffer less
    ``margin`` (when it holds m), and drop the buffered candidates below the cut."""
    cut, buf, buf_score, buf_n = pending
    n = buf_n[r]
    if n >= m:
        scratch[:n] = buf_score[r, :n]
        c = select(scratch, n, n - m) - margin
        if c > cut[r]:
            cut[r] = c
    c = cut[r]
    k = 0
    for b in range(n):
        if buf_score[r, b] >= c:
            buf[r, k] = buf[r, b]
            buf_score[r, k] = buf_score[r, b]
            k += 1
    buf_n[r] = k


@njit(cache=True, nogil=True)
def _score_buffer(r, scored, pending, top, heap):
    """Score row ``r``'s buffered candidates at or above its cut exactly, rank them with
    the row's list so far (best first, ties to the lower ``tie_key``), keep the top m and
    empty the buffer.

    IN ``scored`` (`Scored`); IN/OUT ``pending`` (`Pending`), ``top`` (`TopM`); ``heap``
    (`selection.Heap`, room for the buffer and m) is scratch. The candidates are scored in
    the buffer's order (mostly by position, so the vectors are read nearly in order) and
    sorted by score; an insertion sort in the ranking order (`selection.worse`, with
    ``-tie_key`` as the popularity) then moves only ties."""
    queries, vectors, candidates, tie_key = scored
    cut, buf, buf_score, buf_n = pending
    out_items, out_scores, out_n = top
    hs, hp, hi = heap
    m = out_items.shape[1]
    n = 0
    for t in range(out_n[r]):  # the list so far (an overfull buffer scored before)
        hs[n] = out_scores[r, t]
        hi[n] = out_items[r, t]
        n += 1
    c = cut[r]
    for b in range(buf_n[r]):
        if buf_score[r, b] >= c:
            j = buf[r, b]
            hs[n] = _exact_dot(queries, r, vectors, j)
            hi[n] = candidates[j]
            n += 1
    order = np.argsort(hs[:n])[::-1]
    scores = hs[order]
    items = hi[order]
    for t in range(n):
        s = scores[t]
        item = items[t]
        p = -tie_key[item]
        pos = t
        while pos > 0 and worse(hs[pos - 1], hp[pos - 1], hi[pos - 1], s, p, item):
            hs[pos] = hs[pos - 1]
            hp[pos] = hp[pos - 1]
            hi[pos] = hi[pos - 1]
            pos -= 1
        hs[pos] = s
        hp[pos] = p
        hi[pos] = item
    total = min(m, n)
    out_scores[r, :total] = hs[:total]
    out_items[r, :total] = hi[:total]
    out_n[r] = total
    buf_n[r] = 0


@njit(cache=True, nogil=True)
def _collect(r, row, first, low, high, margin, seen, scored, pending, top, heap, scratch):
    """Buffer row ``r``'s candidates of a block (``row``: their approximate scores, the
    candidates ``first:first + row.shape[0]``) whose approximate score is at least ``low``
    and the row's cut, and below ``high`` (NaN: no upper bound, so that a product that
    overflows to +inf is kept), seen items (``seen``, `selection.ItemRows`) left out. A
    full buffer raises the cut (`_raise_cut`); one that stays over half full (scores
    within the margin of each other) is scored into the top-m (`_score_buffer`).
    IN/OUT ``pending``, ``top``; ``heap`` and ``scratch`` are scratch."""
    candidates = scored.candidates
    cut, buf, buf_score, buf_n = pending
    seen_indptr, seen_items = seen
    lo, hi_seen = seen_indptr[r], seen_indptr[r + 1]
    m = top.items.shape[1]
    cap = buf.shape[1]
    c = max(low, cut[r])
    for jj in range(row.shape[0]):
        s = row[jj]
        if not s >= c or s >= high:
            continue
        j = first + jj
        if hi_seen > lo and is_seen(seen_items, lo, hi_seen, candidates[j]):
            continue
        if buf_n[r] == cap:
            _raise_cut(r, pending, margin, m, scratch)
            if 2 * buf_n[r] > cap:
                _score_buffer(r, scored, pending, top, heap)
            c = max(low, cut[r])
            if not s >= c:
                continue
        b = buf_n[r]
        buf[r, b] = j
        buf_score[r, b] = s
        buf_n[r] = b + 1


@njit(cache=True, nogil=True)
def prefilter_block(block_scores, first, scored, margin, seen, sample, pending, top):
    """Take a block of approximate scores (rows x candidates ``first:first + width``):
    keep, for each row, the candidates that may still be in its exact top-m.

    IN ``block_scores``, ``first``, ``scored`` (`Scored`), ``margin``, ``seen``
    (`selection.ItemRows`, each row's seen items), ``sample``; IN/OUT ``pending``
    (`Pending`) and ``top`` (`TopM`). ``block_scores`` are float32 products, each within
    ``margin / 2`` of the exact score. A candidate whose approximate score is below the
    m-th best of m candidates less ``margin`` is strictly worse, exactly, than those m: it
    is dropped. A row's ``cut`` holds that bound (-inf until it has m candidates); the
    candidates at or above it wait in ``buf`` (positions and approximate scores), raising
    it when the buffer fills.

    A row's first block is first read at about ``sample`` even strides for a guess of the
    score about twice the m (and the user's seen items) reach (`sampled_cut`): only the
    candidates above the guess less ``margin`` are buffered, and the others are taken in a
    second pass unless the cut rises to that bound, so the guess saves work without
    changing the answer. `prefilter_finish` scores what is left once every block is taken.
    """
    cut, buf, buf_score, buf_n = pending
    seen_indptr = seen.indptr
    m = top.items.shape[1]
    cap = buf.shape[1]
    heap = Heap(np.empty(cap + m, np.float32), np.empty(cap + m, np.int64),
                np.empty(cap + m, np.int64))
    scratch = np.empty(max(cap + m, 2 * sample + 2), np.float32)
    for r in range(block_scores.shape[0]):
        n_seen = seen_indptr[r + 1] - seen_indptr[r]
        row = block_scores[r]
        start = -np.inf
        if cut[r] == -np.inf and buf_n[r] == 0 and top.n[r] == 0:
            guess = sampled_cut(row, row.shape[0], m, m + n_seen, sample, scratch)
            start = guess - margin
        _collect(r, row, first, start, np.nan, margin, seen, scored, pending, top, heap,
                 scratch)
        _raise_cut(r, pending, margin, m, scratch)
        if start > cut[r]:  # the guess kept too few: the candidates below it too
            _collect(r, row, first, -np.inf, start, margin, seen, scored, pending, top,
                     heap, scratch)
            _raise_cut(r, pending, margin, m, scratch)


@njit(cache=True, nogil=True)
def prefilter_finish(scored, pending, top):
    """Score the candidates `prefilter_block` kept exactly into each row's top-m: IN
    ``scored`` (`Scored`), IN/OUT ``pending`` (`Pending`) and ``top`` (`TopM`)."""
    m = top.items.shape[1]
    cap = pending.buf.shape[1]
    heap = Heap(np.empty(cap + m, np.float32), np.empty(cap + m, np.int64),
                np.empty(cap + m, np.int64))
    for r in range(pending.buf.shape[0]):
        _score_buffer(r, scored, pending, top, heap)
