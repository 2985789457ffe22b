"""One test chunk of the rolling protocol, scored: each user's top-m against the items the
user engaged with in the chunk, ranked by blocks of users (inside joblib's Dask backend, on
the workers, `sklearn_micro._dask`). `sklearn_micro.model_selection.RollingEvaluation`
scores a recommender with `chunk_points`; the shared sampler of
`sklearn_micro.experiment` scores a `MiCRO` and its paper's model with
`paired_chunk_points`.
"""

from __future__ import annotations

import numpy as np

from .._dask import score_chunk_on_cluster
from .._kernels.evaluation import metrics_of_codes, relevant_codes
from .._log import EngagementLog, sorted_find
from .._parallel import active_client
from ..base import unique_pairs
from ..metrics import METRICS

__all__ = ["USER_BLOCK", "block_scores", "check_m_values", "chunk_points", "chunk_relevant",
           "is_warm", "list_scores", "paired_chunk_points", "scores_by_blocks"]

# users per recommend call during the rolling evaluation
USER_BLOCK = 1 << 14


def check_m_values(m_values) -> np.ndarray:
    """The cut-offs M of an evaluation, sorted and distinct, checked to be integers >= 1."""
    values = np.unique(np.atleast_1d(np.asarray(m_values)))
    if values.size == 0 or values.dtype.kind not in "iu" or values[0] < 1:
        raise ValueError(f"m_values must be integers >= 1; got {m_values!r}.")
    return values.astype(np.int64)


def is_warm(recommender, users: np.ndarray) -> np.ndarray:
    """Whether each user has engagements the recommender has taken."""
    index = recommender.user_ids_.lookup(users, name="users")
    return recommender.seen_items_.has_user(index)


def chunk_points(recommender, log: EngagementLog, ks: np.ndarray, exclude_seen: bool):
    """Users, warmth, relevant counts and metrics of one test chunk; the users are scored
    by blocks on the workers inside joblib's Dask backend (`sklearn_micro._dask`)."""
    users, items, n_relevant, indptr, i = chunk_relevant(log)
    warm = is_warm(recommender, users)
    client = active_client()
    if client is not None:
        scores = score_chunk_on_cluster(client, recommender, users, items, indptr, i, ks,
                                        exclude_seen, block_scores, chunk=int(log.chunk[0]),
                                        max_users=USER_BLOCK)
        return users, warm, n_relevant, scores
    (scores,) = scores_by_blocks(
        users, items, indptr, i, ks,
        lambda block: (recommender.recommend(block, int(ks[-1]), exclude_seen=exclude_seen),))
    return users, warm, n_relevant, scores


def chunk_relevant(log: EngagementLog):
    """A chunk's users and items (sorted), each user's number of relevant items, and the
    CSR (``indptr``, ``i``) of their positions among the items."""
    users, user_code = np.unique(log.user, return_inverse=True)
    items, item_code = np.unique(log.item, return_inverse=True)
    u, i = unique_pairs(user_code.ravel(), item_code.ravel())
    n_relevant = np.bincount(u, minlength=users.shape[0])
    indptr = np.zeros(users.shape[0] + 1, np.int64)
    np.cumsum(n_relevant, out=indptr[1:])
    return users, items, n_relevant, indptr, i


def paired_chunk_points(model, log: EngagementLog, ks: np.ndarray, exclude_seen: bool):
    """`chunk_points` of a `MiCRO` and of its `MiCRO.paper_model` together: each block of
    users ranked for both by `MiCRO.recommend_with_paper` (inside joblib's Dask backend,
    each model's users by blocks on the workers). Returns the model's points, then the
    paper's model's (the same users and warmth: the two share their state)."""
    if active_client() is not None:
        paper_points = chunk_points(model.paper_model(), log, ks, exclude_seen)
        return chunk_points(model, log, ks, exclude_seen), paper_points
    users, items, n_relevant, indptr, i = chunk_relevant(log)
    warm = is_warm(model, users)
    both = scores_by_blocks(
        users, items, indptr, i, ks,
        lambda block: model.recommend_with_paper(block, int(ks[-1]),
                                                 exclude_seen=exclude_seen))
    return tuple((users, warm, n_relevant, scores) for scores in both)


def scores_by_blocks(users, items, indptr, i, ks, rank) -> tuple[dict, ...]:
    """The metrics of each of the lists ``rank(block)`` gives for the ``users`` (a tuple
    of ``(items, scores)``, one per recommender), ranked `USER_BLOCK` users at a time
    against their relevant items (`chunk_relevant`); one dict of metric arrays per list."""
    parts: list[dict[str, list]] = []
    for lo in range(0, users.shape[0], USER_BLOCK):
        hi = min(users.shape[0], lo + USER_BLOCK)
        lists = rank(users[lo:hi])
        parts = parts or [{} for _ in lists]
        for part, (rec_items, rec_scores) in zip(parts, lists, strict=True):
            block = list_scores(rec_items, rec_scores, items, indptr[lo : hi + 1] - indptr[lo],
                                 i[indptr[lo] : indptr[hi]].astype(np.int64), ks)
            for name, value in block.items():
                part.setdefault(name, []).append(value)
    return tuple({name: np.concatenate(values) for name, values in part.items()}
                 for part in parts)


def block_scores(recommender, users, items, relevant_indptr, relevant, ks, exclude_seen):
    """The metrics of a block of users: their top ``max(ks)`` against their relevant items,
    given as positions in the sorted ``items``."""
    rec_items, rec_scores = recommender.recommend(users, int(ks[-1]), exclude_seen=exclude_seen)
    return list_scores(rec_items, rec_scores, items, relevant_indptr, relevant, ks)


def list_scores(rec_items, rec_scores, items, relevant_indptr, relevant, ks):
    """The metrics of top-m lists against the users' relevant items (`block_scores`)."""
    if rec_items.dtype.kind in "iu" and items.dtype.kind in "iu":
        # numeric ids: each recommended item is looked up among its user's few relevant ones
        codes = np.empty(rec_items.shape, np.int64)
        relevant_codes(rec_items.astype(np.int64, copy=False), rec_scores, relevant_indptr,
                       items[relevant].astype(np.int64, copy=False), relevant, codes)
    else:
        pos, found = sorted_find(items, rec_items)
        found &= np.isfinite(rec_scores)
        codes = np.where(found, pos, -1).astype(np.int64)
    return metrics_of_codes(codes, relevant_indptr, relevant, ks, METRICS)
