"""The exact top-m search of the vector baselines: the items of highest ``query @ vector``
among candidates, in blocks of bounded size, exact to the float32 rounding of a float64 sum.

`ANNRecommender` (below NNDescent's scale) and `ALSRecommender` rank with it. Arrays in,
arrays out; the ranking kernels are `sklearn_micro._kernels.ranking`'s.
"""

from __future__ import annotations

import numpy as np

from .._kernels.ranking import Pending, Scored, TopM, prefilter_block, prefilter_finish
from .._kernels.selection import CUT_SAMPLE, ItemRows
from ..base import csr_rows

__all__ = ["BLOCK_SCORES", "BUFFERED", "ITEM_BLOCK", "exact_top_m", "exact_top_m_of_rows",
           "nonzero_rows", "product_error", "seen_of_rows"]

# scores held at once by the exact blocked search
BLOCK_SCORES = 1 << 21
ITEM_BLOCK = 8192
# candidates a user may keep waiting for exact scores, in multiples of m
BUFFERED = 8


def seen_of_rows(seen_indptr: np.ndarray, seen_items: np.ndarray, rows: np.ndarray):
    """The seen-items CSR restricted to ``rows``."""
    indptr, positions = csr_rows(seen_indptr, rows)
    return indptr, seen_items[positions]


def nonzero_rows(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Whether each of ``a[rows]`` has a nonzero entry, without a copy of all of them."""
    out = np.empty(rows.shape[0], bool)
    step = 1 << 16
    for lo in range(0, rows.shape[0], step):
        out[lo : lo + step] = np.any(a[rows[lo : lo + step]] != 0, axis=1)
    return out


def exact_top_m(queries, vectors, candidates, tie_key, seen_indptr, seen_items,
                 out_items, out_scores, out_n, n_threads=1):
    """Exact top-m of ``queries @ vectors.T`` over ``candidates``, in bounded blocks.

    A score is the float64 sum of the products in a fixed order, rounded to float32, so a
    user's scores do not depend on which other users share the block. The products of a
    block of users and items are taken in float32 (half the cost of float64); only the
    items whose float32 score is within twice its error bound of a user's m-th best are
    scored exactly (`prefilter_block`). With ``n_threads > 1`` blocks of users are ranked
    on that many threads (the products and the ranking kernels release the GIL).
    """
    n_q, n_c = queries.shape[0], vectors.shape[0]
    if n_q == 0 or n_c == 0:
        return
    queries = np.ascontiguousarray(queries, np.float32)
    vectors = np.ascontiguousarray(vectors, np.float32)
    margin = product_error(queries, vectors)
    m = out_items.shape[1]
    item_block = min(n_c, ITEM_BLOCK)
    user_block = max(1, BLOCK_SCORES // item_block)

    def rank(u0):
        u1 = min(n_q, u0 + user_block)
        rows, seen = queries[u0:u1], (seen_indptr[u0 : u1 + 1], seen_items)
        cut = np.full(u1 - u0, -np.inf)
        buf = np.empty((u1 - u0, BUFFERED * m), np.int64)
        buf_score = np.empty(buf.shape, np.float32)
        buf_n = np.zeros(u1 - u0, np.int64)
        top = TopM(out_items[u0:u1], out_scores[u0:u1], out_n[u0:u1])
        scored = Scored(rows, vectors, candidates, tie_key)
        pending = Pending(cut, buf, buf_score, buf_n)
        for i0 in range(0, n_c, item_block):
            i1 = min(n_c, i0 + item_block)
            prefilter_block(rows @ vectors[i0:i1].T, i0, scored, margin, ItemRows(*seen),
                            CUT_SAMPLE, pending, top)
        prefilter_finish(scored, pending, top)

    starts = range(0, n_q, user_block)
    if n_threads <= 1 or n_q <= user_block:
        for u0 in starts:
            rank(u0)
        return
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(n_threads) as pool:
        list(pool.map(rank, starts))


def product_error(queries: np.ndarray, vectors: np.ndarray) -> float:
    """Twice the largest error of a float32 product of a query and a vector, against the
    exact score rounded to float32, with room to spare: products of ``d`` terms summed in
    float32 in any order are within ``d u / (1 - d u) |q| |v|`` of the exact sum (``u`` the
    unit roundoff, 2**-24), and rounding the exact sum adds ``u |q| |v|``."""
    d = queries.shape[1]
    u = 2.0**-24
    bound = float(np.sqrt(np.max(np.einsum("ij,ij->i", queries, queries, dtype=np.float64)))
                  * np.sqrt(np.max(np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64))))
    return 2.0 * bound * ((d + 2) * u / (1 - (d + 2) * u) + 2 * u)


def exact_top_m_of_rows(queries, rows, vectors, candidates, tie_key, items, scores, n_filled,
                        seen_indptr, seen_items, n_threads=1):
    """`exact_top_m` of ``queries`` (one per row of ``rows``) into the slots of ``rows`` of
    ``items``, ``scores`` and ``n_filled``, each row's seen items left out."""
    if rows.size == 0 or candidates.size == 0:
        return
    sub_indptr, sub_seen = seen_of_rows(seen_indptr, seen_items, rows)
    out_items, out_scores, out_n = items[rows], scores[rows], n_filled[rows]
    exact_top_m(queries, vectors, candidates, tie_key, sub_indptr, sub_seen, out_items,
                out_scores, out_n, n_threads)
    items[rows], scores[rows], n_filled[rows] = out_items, out_scores, out_n
