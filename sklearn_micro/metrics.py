"""Ranking metrics of candidate retrieval: Recall@M, MRR@M and NDCG@M.

Each metric is computed per query, a (user, chunk) pair: ``recommended`` holds the ranked
items of each query best first, ``relevant`` the items the user engaged with in that chunk.
Gains are binary: an item is relevant or not, and the relevant set of a query is distinct.

- Recall@M: the number of relevant items among the first M, over the number relevant.
- MRR@M: one over the rank of the first relevant item among the first M, 0 if there is none.
- NDCG@M: DCG = sum over relevant items among the first M of ``1 / log2(rank + 1)``, divided
  by the ideal DCG, that of ``min(|relevant|, M)`` relevant items ranked first.

Padding (-1 for integer ids, or anything that is not a relevant item) never counts as a hit,
and an item recommended twice counts once. Queries without relevant items get NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral

import numpy as np
import scipy.sparse as sp
from sklearn.utils._param_validation import Interval, StrOptions, validate_params

from ._kernels.evaluation import metrics_of_codes
from .base import unique_pairs

__all__ = ["METRICS", "mrr_at", "ndcg_at", "ranking_metrics", "recall_at"]

#: The names of the metrics, as they appear in keys like ``"recall@100"``.
METRICS = ("recall", "mrr", "ndcg")


def _relevant_csr(relevant, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, items)`` of the relevant items of each row, in any order."""
    if sp.issparse(relevant):
        csr = sp.csr_array(relevant)
        csr.eliminate_zeros()
        indptr, items = csr.indptr.astype(np.int64), csr.indices.astype(np.int64)
    elif (
        isinstance(relevant, tuple)
        and len(relevant) == 2
        and all(isinstance(a, np.ndarray) for a in relevant)
    ):
        indptr, items = np.asarray(relevant[0], np.int64), np.asarray(relevant[1])
        if indptr.ndim != 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            raise ValueError(
                "relevant given as (indptr, items) needs indptr to start at 0 and never "
                "decrease."
            )
        if indptr[-1] != items.shape[0]:
            raise ValueError(
                f"relevant given as (indptr, items): indptr ends at {indptr[-1]} but items "
                f"has {items.shape[0]} entries."
            )
    else:
        rows = [np.asarray(list(s) if isinstance(s, (set, frozenset)) else s) for s in relevant]
        indptr = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([r.shape[0] for r in rows], out=indptr[1:])
        nonempty = [r.ravel() for r in rows if r.size]
        items = np.concatenate(nonempty) if nonempty else np.empty(0, np.int64)
    if indptr.shape[0] - 1 != n_rows:
        raise ValueError(
            f"recommended has {n_rows} rows but relevant describes {indptr.shape[0] - 1} "
            "queries; they must match."
        )
    return indptr, items


def _encode(recommended: np.ndarray, indptr: np.ndarray, items: np.ndarray):
    """Codes of the relevant items (sorted, distinct per row) and of the recommended ones.

    Integer ids are their own codes (negative ones never hit). Other ids are coded by their
    rank among the distinct relevant items; a recommended id relevant to no query gets -1.
    """
    n_rows = indptr.shape[0] - 1
    as_ints = items.dtype.kind in "iu" and recommended.dtype.kind in "iu"
    if as_ints or items.shape[0] == 0:
        universe = None
        rel_codes = items.astype(np.int64)
    else:
        universe, rel_codes = np.unique(items, return_inverse=True)
        rel_codes = rel_codes.astype(np.int64).ravel()
    row, rel_codes = unique_pairs(np.repeat(np.arange(n_rows), np.diff(indptr)), rel_codes)
    rel_indptr = np.zeros(n_rows + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=n_rows), out=rel_indptr[1:])

    if universe is None:
        if recommended.dtype.kind in "iu":
            return recommended.astype(np.int64), rel_indptr, rel_codes
        return np.full(recommended.shape, -1, np.int64), rel_indptr, rel_codes
    rec_codes = np.full(recommended.shape, -1, np.int64)
    if recommended.size:
        try:
            pos = np.searchsorted(universe, recommended)
        except TypeError as exc:
            raise ValueError(
                f"recommended ids ({recommended.dtype}) cannot be compared with relevant ids "
                f"({universe.dtype})."
            ) from exc
        pos = np.minimum(pos, universe.shape[0] - 1)
        found = universe[pos] == recommended
        rec_codes[found] = pos[found]
    return rec_codes, rel_indptr, rel_codes


@validate_params(
    {
        "recommended": ["array-like"],
        "relevant": ["array-like", "sparse matrix", tuple],
        "ks": [Interval(Integral, 1, None, closed="left"), "array-like"],
        "metrics": [StrOptions(set(METRICS)), list, tuple],
    },
    prefer_skip_nested_validation=True,
)
def ranking_metrics(
    recommended,
    relevant,
    *,
    ks: int | Sequence[int] = (10, 25, 50, 100),
    metrics: str | Sequence[str] = METRICS,
) -> dict[str, np.ndarray]:
    """Recall, MRR and NDCG at each cut-off, for each query.

    Parameters
    ----------
    recommended : array-like of shape (n_queries, m)
        Recommended item ids of each query, best first. Ids are integers or strings; -1
        (or any id relevant to no query) marks an empty slot.
    relevant : sequence of sets or arrays, sparse matrix or tuple (indptr, items)
        The relevant items of each query: one collection of ids per query; or a sparse
        matrix whose row ``q`` has its nonzero entries at the relevant item indices; or CSR
        arrays, query ``q`` relevant to ``items[indptr[q]:indptr[q + 1]]``. Duplicates are
        counted once.
    ks : int or sequence of int, default=(10, 25, 50, 100)
        Cut-offs M. A cut-off beyond ``m`` counts the ``m`` recommended items only, while
        the ideal DCG still uses ``min(|relevant|, M)``.
    metrics : str or sequence of {"recall", "mrr", "ndcg"}, default=all three
        Which metrics to return.

    Returns
    -------
    scores : dict of str to ndarray of shape (n_queries,)
        Keys like ``"recall@10"``; NaN for queries without relevant items.

    See Also
    --------
    recall_at, mrr_at, ndcg_at : One metric at one cut-off.
    sklearn_micro.model_selection.rolling_evaluate : The metrics of a recommender over the
        test chunks.

    Examples
    --------
    >>> from sklearn_micro.metrics import ranking_metrics
    >>> scores = ranking_metrics([[3, 1, 7], [5, 4, -1]], [{1, 2}, {9}], ks=(1, 3))
    >>> scores["recall@3"], scores["mrr@3"]
    (array([0.5, 0. ]), array([0.5, 0. ]))
    """
    recommended = np.asarray(recommended)
    if recommended.ndim != 2:
        raise ValueError(
            f"recommended must be a 2-D array (n_queries, m); got shape {recommended.shape}."
        )
    ks_arr = np.unique(np.atleast_1d(np.asarray(ks)))
    if ks_arr.dtype.kind not in "iu" or ks_arr.size == 0 or ks_arr[0] < 1:
        raise ValueError(f"ks must be integers >= 1; got {ks!r}.")
    ks_arr = ks_arr.astype(np.int64)
    names = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    unknown = [name for name in names if name not in METRICS]
    if unknown or not names:
        raise ValueError(f"metrics must be among {list(METRICS)}; got {list(names)}.")

    indptr, items = _relevant_csr(relevant, recommended.shape[0])
    rec_codes, rel_indptr, rel_codes = _encode(recommended, indptr, items)
    return metrics_of_codes(rec_codes, rel_indptr, rel_codes, ks_arr, names)


@validate_params(
    {"recommended": ["array-like"], "relevant": ["array-like", "sparse matrix", tuple],
     "M": [Interval(Integral, 1, None, closed="left")]},
    prefer_skip_nested_validation=True,
)
def recall_at(recommended, relevant, M: int) -> np.ndarray:
    """Recall@M of each query: relevant items among the first M over the number relevant.

    Parameters
    ----------
    recommended : array-like of shape (n_queries, m)
        Recommended item ids of each query, best first; -1 (or any id relevant to no
        query) marks an empty slot.
    relevant : sequence of sets or arrays, sparse matrix or tuple (indptr, items)
        The relevant items of each query, in any of the forms `ranking_metrics` takes.
    M : int
        The cut-off: the first ``M`` recommended items count.

    Returns
    -------
    scores : ndarray of shape (n_queries,)
        Recall@M of each query; NaN for queries without relevant items.

    See Also
    --------
    ranking_metrics : Recall, MRR and NDCG at several cut-offs in one pass.

    Examples
    --------
    >>> from sklearn_micro.metrics import recall_at
    >>> recall_at([[3, 1, 2]], [{1, 2, 8, 9}], 2)
    array([0.25])
    """
    return ranking_metrics(recommended, relevant, ks=M, metrics="recall")[f"recall@{M}"]


@validate_params(
    {"recommended": ["array-like"], "relevant": ["array-like", "sparse matrix", tuple],
     "M": [Interval(Integral, 1, None, closed="left")]},
    prefer_skip_nested_validation=True,
)
def mrr_at(recommended, relevant, M: int) -> np.ndarray:
    """MRR@M of each query: one over the rank of the first relevant item, 0 if none in M.

    Parameters
    ----------
    recommended : array-like of shape (n_queries, m)
        Recommended item ids of each query, best first; -1 (or any id relevant to no
        query) marks an empty slot.
    relevant : sequence of sets or arrays, sparse matrix or tuple (indptr, items)
        The relevant items of each query, in any of the forms `ranking_metrics` takes.
    M : int
        The cut-off: the first ``M`` recommended items count.

    Returns
    -------
    scores : ndarray of shape (n_queries,)
        MRR@M of each query; NaN for queries without relevant items.

    See Also
    --------
    ranking_metrics : Recall, MRR and NDCG at several cut-offs in one pass.

    Examples
    --------
    >>> from sklearn_micro.metrics import mrr_at
    >>> mrr_at([[3, 1, 2], [4, 5, 6]], [{1, 2}, {6}], 2)
    array([0.5, 0. ])
    """
    return ranking_metrics(recommended, relevant, ks=M, metrics="mrr")[f"mrr@{M}"]


@validate_params(
    {"recommended": ["array-like"], "relevant": ["array-like", "sparse matrix", tuple],
     "M": [Interval(Integral, 1, None, closed="left")]},
    prefer_skip_nested_validation=True,
)
def ndcg_at(recommended, relevant, M: int) -> np.ndarray:
    """NDCG@M of each query with binary gains; ideal DCG over ``min(|relevant|, M)`` items.

    Parameters
    ----------
    recommended : array-like of shape (n_queries, m)
        Recommended item ids of each query, best first; -1 (or any id relevant to no
        query) marks an empty slot.
    relevant : sequence of sets or arrays, sparse matrix or tuple (indptr, items)
        The relevant items of each query, in any of the forms `ranking_metrics` takes.
    M : int
        The cut-off: the first ``M`` recommended items count.

    Returns
    -------
    scores : ndarray of shape (n_queries,)
        NDCG@M of each query; NaN for queries without relevant items.

    See Also
    --------
    ranking_metrics : Recall, MRR and NDCG at several cut-offs in one pass.

    Examples
    --------
    >>> from sklearn_micro.metrics import ndcg_at
    >>> ndcg_at([[1, 3], [3, 1]], [{1}, {1}], 2).round(4)
    array([1.    , 0.6309])
    """
    return ranking_metrics(recommended, relevant, ks=M, metrics="ndcg")[f"ndcg@{M}"]
