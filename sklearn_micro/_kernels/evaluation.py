"""Recall, MRR and NDCG at several cut-offs, one pass over each ranked row."""

import numpy as np
from numba import njit

from .selection import lower_bound


@njit(cache=True)
def ranking_metrics_kernel(recommended, rel_indptr, rel_items, ks, recall, mrr, ndcg):
    """Fill ``recall``, ``mrr`` and ``ndcg`` (n_rows x n_cutoffs) for each row.

    ``recommended`` holds item codes best first, negative where nothing is recommended;
    ``rel_items[rel_indptr[r]:rel_indptr[r + 1]]`` are the row's relevant codes, sorted and
    distinct; ``ks`` are increasing cut-offs. An item recommended twice counts once. Rows
    without relevant items get NaN.
    """
    n, m = recommended.shape
    n_k = ks.shape[0]
    k_max = ks[n_k - 1]
    discount = np.empty(k_max)
    ideal = np.empty(k_max)
    acc = 0.0
    for j in range(k_max):
        discount[j] = 1.0 / np.log2(j + 2.0)
        acc += discount[j]
        ideal[j] = acc
    longest = 0
    for r in range(n):
        longest = max(longest, rel_indptr[r + 1] - rel_indptr[r])
    hit = np.zeros(longest, np.bool_)
    depth = min(m, k_max)
    for r in range(n):
        lo = rel_indptr[r]
        hi = rel_indptr[r + 1]
        n_rel = hi - lo
        if n_rel == 0:
            for q in range(n_k):
                recall[r, q] = np.nan
                mrr[r, q] = np.nan
                ndcg[r, q] = np.nan
            continue
        hits = 0
        first = 0
        dcg = 0.0
        q = 0
        for j in range(depth + 1):
            while q < n_k and ks[q] <= j:
                recall[r, q] = hits / n_rel
                mrr[r, q] = 1.0 / first if first > 0 else 0.0
                ndcg[r, q] = dcg / ideal[min(n_rel, ks[q]) - 1]
                q += 1
            if j == depth:
                break
            it = recommended[r, j]
            if it < 0:
                continue
            a = lower_bound(rel_items, lo, hi, it)
            if a < hi and rel_items[a] == it and not hit[a - lo]:
                hit[a - lo] = True
                hits += 1
                if first == 0:
                    first = j + 1
                dcg += discount[j]
        while q < n_k:
            recall[r, q] = hits / n_rel
            mrr[r, q] = 1.0 / first if first > 0 else 0.0
            ndcg[r, q] = dcg / ideal[min(n_rel, ks[q]) - 1]
            q += 1
        for j in range(n_rel):
            hit[j] = False


@njit(cache=True)
def relevant_codes(recommended, scores, rel_indptr, rel_ids, rel_codes, out):
    """Fill ``out`` (the shape of ``recommended``) with the code of each recommended item
    that is relevant to its row, -1 elsewhere.

    ``recommended`` holds numeric item ids; a slot counts only where its score is finite
    (padding has -inf). ``rel_ids[rel_indptr[r]:rel_indptr[r + 1]]`` are row r's relevant
    ids, sorted and distinct, and ``rel_codes`` their codes. A binary search among a row's
    few relevant ids replaces a search among all the chunk's items: the metrics need only
    the relevant ones.
    """
    n, m = recommended.shape
    for r in range(n):
        lo = rel_indptr[r]
        hi = rel_indptr[r + 1]
        for j in range(m):
            out[r, j] = -1
            if lo == hi or not np.isfinite(scores[r, j]):
                continue
            it = recommended[r, j]
            a = lower_bound(rel_ids, lo, hi, it)
            if a < hi and rel_ids[a] == it:
                out[r, j] = rel_codes[a]


def metrics_of_codes(rec_codes, rel_indptr, rel_codes, ks, names) -> dict:
    """`sklearn_micro.metrics.ranking_metrics` on item codes (relevant codes sorted and
    distinct per row): ``{"<name>@<k>": ndarray of shape (n_rows,)}`` for each of
    ``names`` (among "recall", "mrr", "ndcg") and each cut-off of ``ks`` (int64, sorted)."""
    n, n_k = rec_codes.shape[0], ks.shape[0]
    out = {name: np.empty((n, n_k)) for name in ("recall", "mrr", "ndcg")}
    ranking_metrics_kernel(
        rec_codes, rel_indptr, rel_codes, ks, out["recall"], out["mrr"], out["ndcg"]
    )
    return {
        f"{name}@{k}": out[name][:, q] for name in names for q, k in enumerate(ks.tolist())
    }
