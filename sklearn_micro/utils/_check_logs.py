"""The small logs and the fixed embedder that the recommender checks run on, and the
helpers that take a log in the form it comes in (DataFrame or array)."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

from .. import EmbeddedLog, Vocabulary, check_log

__all__ = ["COLUMNS", "FixedEmbedder", "as_array", "chunks", "column", "concat", "like",
           "make_log", "rows", "with_chunk"]

COLUMNS = ("user", "item", "chunk")


def make_log(seed: int = 0, *, n_chunks: int = 6, n_train: int = 4, per_chunk: int = 40,
             as_frame: bool = False):
    """A small log with ephemeral items, repeat engagements and users arriving over time.

    Chunk ``c`` draws its items from a pool that shifts by six new items per chunk, and its
    users from a pool that grows by three per chunk. Ids are offset so that external ids
    differ from internal indices (users from 1000, items from 5000).

    Parameters
    ----------
    seed : int, default=0
        Seeds the draws.
    n_chunks : int, default=6
        Chunks in all.
    n_train : int, default=4
        The first chunks, which make up the training log; the checks need at least two
        chunks after them.
    per_chunk : int, default=40
        Engagements drawn per chunk; a fifth of them is repeated.
    as_frame : bool, default=False
        Return DataFrames with columns user, item, chunk (needs pandas) instead of int64
        arrays of shape (n, 3).

    Returns
    -------
    X_train, X_next : ndarray of shape (n, 3) or DataFrame
        The first ``n_train`` chunks and the rest.

    See Also
    --------
    check_recommender : Runs every check on such a log.

    Examples
    --------
    >>> from sklearn_micro.utils.estimator_checks import make_log
    >>> X_train, X_next = make_log()
    >>> X_train.shape[1], sorted(set(X_next[:, 2].tolist()))
    (3, [4, 5])
    """
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(n_chunks):
        pool = np.arange(6 * c, 6 * c + 12)
        weights = 1.0 / np.arange(1, pool.size + 1)
        for _ in range(per_chunk):
            user = rng.integers(0, 20 + 3 * c)
            item = rng.choice(pool, p=weights / weights.sum())
            rows.append((1000 + user, 5000 + item, c))
            if rng.random() < 0.2:
                rows.append((1000 + user, 5000 + item, c))
    X = np.array(rows, dtype=np.int64)
    train, rest = X[X[:, 2] < n_train], X[X[:, 2] >= n_train]
    if as_frame:
        import pandas as pd

        return tuple(pd.DataFrame(part, columns=list(COLUMNS)) for part in (train, rest))
    return train, rest


class FixedEmbedder(TransformerMixin, BaseEstimator):
    """A stand-in for `GraphEmbedder` in tests: fixed random vectors for the log's ids.

    ``transform`` hands on the log with the vectors as an `EmbeddedLog`, as
    `GraphEmbedder` does, without a factorization to wait for.

    Parameters
    ----------
    n_components : int, default=8
        Length of the vectors.
    random_state : int, default=0
        Seeds the vectors.

    Attributes
    ----------
    user_ids_, item_ids_ : Vocabulary
        The log's users and items.
    user_vectors_, item_vectors_ : ndarray of shape (n_ids, n_components)
        Standard normal vectors, a row per id.

    See Also
    --------
    sklearn_micro.GraphEmbedder : The embedding it stands in for.

    Examples
    --------
    >>> from sklearn_micro.utils.estimator_checks import FixedEmbedder, make_log
    >>> X_train, _ = make_log()
    >>> FixedEmbedder(n_components=4).fit_transform(X_train).item_vectors.shape[1]
    4
    """

    def __init__(self, n_components: int = 8, random_state: int = 0):
        self.n_components = n_components
        self.random_state = random_state

    def fit(self, X, y=None):
        """Draw a vector for every user and item of ``X``.

        Parameters
        ----------
        X : engagement log
            A DataFrame with columns user, item, chunk or an integer array (n, 3).
        y : None
            Ignored.

        Returns
        -------
        self : FixedEmbedder
            The fitted embedder.
        """
        log = check_log(X)
        rng = np.random.default_rng(self.random_state)
        self.user_ids_ = Vocabulary.from_ids(log.user)
        self.item_ids_ = Vocabulary.from_ids(log.item)
        self.user_vectors_ = rng.normal(size=(len(self.user_ids_), self.n_components))
        self.item_vectors_ = rng.normal(size=(len(self.item_ids_), self.n_components))
        return self

    def transform(self, X):
        """The log ``X`` with the fitted vectors.

        Parameters
        ----------
        X : engagement log
            A DataFrame with columns user, item, chunk or an integer array (n, 3).

        Returns
        -------
        embedded : EmbeddedLog
            ``X`` with the vectors and vocabularies of the fitted ids.
        """
        return EmbeddedLog(check_log(X), self.user_ids_, self.item_ids_, self.user_vectors_,
                           self.item_vectors_)


# -- logs in the form they come in (DataFrame or array) ---------------------------------------


def column(X, name: str) -> np.ndarray:
    if hasattr(X, "columns"):
        return np.asarray(X[name])
    return np.asarray(X)[:, COLUMNS.index(name)]


def rows(X, which):
    return X.iloc[which] if hasattr(X, "iloc") else np.asarray(X)[which]


def concat(*logs):
    if hasattr(logs[0], "iloc"):
        import pandas as pd

        return pd.concat(logs, ignore_index=True)
    return np.concatenate([np.asarray(X) for X in logs], axis=0)


def with_chunk(X, chunk: int):
    if hasattr(X, "assign"):
        return X.assign(chunk=chunk)
    out = np.array(X, copy=True)
    out[:, 2] = chunk
    return out


def like(X, rows):
    """``rows`` of (user, item, chunk) in the form of ``X``."""
    if hasattr(X, "iloc"):
        import pandas as pd

        return pd.DataFrame(rows, columns=list(COLUMNS)).astype(X.dtypes)
    return np.array(rows, dtype=np.asarray(X).dtype).reshape(-1, 3)


def as_array(X) -> np.ndarray:
    return np.column_stack([column(X, name).astype(np.int64) for name in COLUMNS])


def chunks(X):
    chunk = column(X, "chunk")
    return [rows(X, chunk == c) for c in np.unique(chunk)]
