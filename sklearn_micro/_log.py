"""The engagement log: validation, id vocabularies and chunk iteration.

An engagement log has one row per engagement with three fields, ``user``, ``item`` and
``chunk``. It comes in as a pandas DataFrame with those columns (ids int64 or strings) or as
an integer array of shape (n, 3), and is validated once into an :class:`EngagementLog`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ._kernels.vocabulary import present_values, table_lookup

COLUMNS = ("user", "item", "chunk")

__all__ = [
    "COLUMNS",
    "LOOKUP_ROWS",
    "EmbeddedLog",
    "EngagementLog",
    "Vocabulary",
    "as_ids",
    "check_log",
    "chunk_column",
    "compact_chunks",
    "compact_log",
    "distinct",
    "iter_chunks",
    "lookup_in_blocks",
    "split_chunks",
]


@dataclass(frozen=True, eq=False)
class EngagementLog:
    """A validated engagement log: three aligned 1-D arrays of external values.

    ``user`` and ``item`` hold external ids (int64, or str for string ids); ``chunk`` holds
    ordinal int64 time chunks. Rows keep the order they came in. `check_log` builds one from
    a DataFrame or an array; every estimator of the package accepts one as ``X``.

    Parameters
    ----------
    user : ndarray of shape (n_engagements,)
        External user id of each engagement, int64 or str.
    item : ndarray of shape (n_engagements,)
        External item id of each engagement, int64 or str.
    chunk : ndarray of shape (n_engagements,)
        Ordinal time chunk of each engagement, int64; larger is later.

    See Also
    --------
    check_log : Validates a DataFrame or an array into an `EngagementLog`.
    EmbeddedLog : A log with the user and item vectors of a `GraphEmbedder`.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro import check_log
    >>> log = check_log(np.array([[1, 10, 0], [2, 10, 0], [1, 11, 1]]))
    >>> log.shape
    (3, 3)
    >>> log.take(log.chunk == 0).item
    array([10, 10])
    """

    user: np.ndarray
    item: np.ndarray
    chunk: np.ndarray

    def __len__(self) -> int:
        return self.user.shape[0]

    @property
    def shape(self) -> tuple[int, int]:
        """Tuple ``(n_engagements, 3)``, as the array form of the log would have."""
        return (len(self), 3)

    def take(self, rows) -> EngagementLog:
        """Select rows of the log.

        Parameters
        ----------
        rows : array-like of int or bool
            Row indices, or a boolean mask of length ``n_engagements``.

        Returns
        -------
        log : EngagementLog
            The selected rows, in the order given.
        """
        return EngagementLog(self.user[rows], self.item[rows], self.chunk[rows])

    def __getitem__(self, rows) -> EngagementLog:
        return self.take(rows)

    def to_frame(self):
        """Convert the log to a pandas DataFrame.

        Returns
        -------
        frame : pandas.DataFrame
            Columns ``user``, ``item`` and ``chunk``, one row per engagement.
        """
        import pandas as pd

        return pd.DataFrame({"user": self.user, "item": self.item, "chunk": self.chunk})


@dataclass(frozen=True, eq=False)
class EmbeddedLog:
    """What `GraphEmbedder.transform` hands on: the log, vectors and their vocabularies.

    ``user_vectors[j]`` is the vector of external user ``user_ids.ids[j]``, and likewise for
    items. `SphericalKMeans` fills ``item_interest`` (the interest of each item of
    ``item_ids``) when it clusters the item vectors.

    Parameters
    ----------
    log : EngagementLog
        The engagements.
    user_ids : Vocabulary
        External ids of the embedded users, in the order of ``user_vectors``.
    item_ids : Vocabulary
        External ids of the embedded items, in the order of ``item_vectors``.
    user_vectors : ndarray of shape (n_users, n_components)
        One vector per user of ``user_ids``.
    item_vectors : ndarray of shape (n_items, n_components)
        One vector per item of ``item_ids``.
    item_interest : ndarray of shape (n_items,) or None, default=None
        The interest of each item of ``item_ids``, once clustered.

    See Also
    --------
    GraphEmbedder : Makes an `EmbeddedLog` in its ``transform``.
    SphericalKMeans : Fills ``item_interest`` in its ``transform``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro import GraphEmbedder
    >>> log = np.array([[0, 10, 0], [0, 11, 0], [1, 10, 0], [2, 12, 1], [2, 13, 1]])
    >>> embedded = GraphEmbedder(n_components=4, random_state=0).fit_transform(log)
    >>> embedded.shape, embedded.item_vectors.shape
    ((5, 3), (4, 4))
    >>> embedded.with_interests([0, 0, 1, 1]).item_interest
    array([0, 0, 1, 1])
    """

    log: EngagementLog
    user_ids: Vocabulary
    item_ids: Vocabulary
    user_vectors: np.ndarray
    item_vectors: np.ndarray
    item_interest: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.log)

    @property
    def shape(self) -> tuple[int, int]:
        """Tuple ``(n_engagements, 3)``, the shape of the log."""
        return self.log.shape

    def with_interests(self, item_interest: np.ndarray) -> EmbeddedLog:
        """Attach the interest of each item.

        Parameters
        ----------
        item_interest : array-like of shape (n_items,)
            The interest of each item of ``item_ids``, in its order.

        Returns
        -------
        embedded : EmbeddedLog
            A copy with ``item_interest`` set; ``self`` is left unchanged.
        """
        return replace(self, item_interest=np.asarray(item_interest, dtype=np.int64))


def as_ids(values, *, name: str) -> np.ndarray:
    """Ids a caller gives (a list, tuple, Series or array) as an array of one kind.

    numpy turns ``[1, "a"]`` into the strings ``["1", "a"]``; here a number beside strings is
    refused, as it is in a log.
    """
    if isinstance(values, np.ndarray):
        return values
    if isinstance(values, (set, frozenset, dict)) or (
            hasattr(values, "__next__") and not hasattr(values, "__len__")):
        raise TypeError(
            f"{name} must be a list, tuple, Series or array of ids; got "
            f"{type(values).__name__}, which has no order."
            if isinstance(values, (set, frozenset, dict)) else
            f"{name} must be a list, tuple, Series or array of ids; got "
            f"{type(values).__name__}."
        )
    arr = np.asarray(values)
    if arr.dtype.kind in "US" and arr.size:
        given = np.asarray(values, dtype=object).ravel()
        bad = [j for j, v in enumerate(given) if not isinstance(v, (str, np.str_))]
        if bad:
            j = bad[0]
            raise ValueError(
                f"{name} must hold ids of one kind, int64 or str; position {j} holds "
                f"{given[j]!r} ({type(given[j]).__name__}) beside string ids."
            )
    return arr


def _id_column(values, name: str, *, input_name: str) -> np.ndarray:
    """External ids as int64 or str, refusing NaN, floats and mixed kinds."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
            row = int(np.argmax(arr > np.iinfo(np.int64).max))
            raise ValueError(
                f"{input_name}: column {name!r} must hold int64 ids; row {row} holds "
                f"{arr[row]}, beyond the int64 range."
            )
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "U":
        return arr
    if arr.dtype.kind == "O" or str(arr.dtype).startswith("str") or arr.dtype.kind == "T":
        arr = np.asarray(values, dtype=object)
        bad = [j for j, v in enumerate(arr) if not isinstance(v, str)]
        if bad:
            j = bad[0]
            raise ValueError(
                f"{input_name}: column {name!r} must hold int64 or string ids only; "
                f"row {j} holds {arr[j]!r} ({type(arr[j]).__name__})."
            )
        return arr.astype(str)
    if arr.dtype.kind == "f":
        nan = np.flatnonzero(np.isnan(arr))
        where = f"; row {nan[0]} is NaN" if nan.size else ""
        raise ValueError(
            f"{input_name}: column {name!r} must hold int64 or string ids, got dtype "
            f"{arr.dtype}{where}."
        )
    raise ValueError(
        f"{input_name}: column {name!r} must hold int64 or string ids, got dtype {arr.dtype}."
    )


def _frame_ids(column, name: str, *, input_name: str) -> np.ndarray:
    """A DataFrame column of ids; string-typed columns are converted without a row loop."""
    if type(column.dtype).__name__ == "StringDtype":
        missing = np.flatnonzero(column.isna().to_numpy())
        if missing.size:
            raise ValueError(
                f"{input_name}: column {name!r} must hold int64 or string ids; row "
                f"{missing[0]} is missing."
            )
        return column.to_numpy(dtype=str)
    return _id_column(column.to_numpy(), name, input_name=input_name)


def chunk_column(X, *, input_name: str = "X") -> np.ndarray:
    """The ``chunk`` column of a log as int64, checked, without validating its id columns
    (what a splitter over chunks reads).

    Parameters
    ----------
    X : DataFrame, array-like of shape (n_engagements, 3), EngagementLog or EmbeddedLog
        The log, in any form `check_log` takes.
    input_name : str, default="X"
        How error messages name ``X``.

    Returns
    -------
    chunk : ndarray of int64, shape (n_engagements,)
    """
    if isinstance(X, EmbeddedLog):
        X = X.log
    if isinstance(X, EngagementLog):
        return X.chunk
    if hasattr(X, "columns"):
        if "chunk" not in X.columns:
            raise ValueError(
                f"{input_name} must have a 'chunk' column; got columns {list(X.columns)}.")
        return _chunks(X["chunk"].to_numpy(), input_name=input_name)
    arr = np.asarray(X)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(
            f"{input_name} must be a DataFrame with columns user, item, chunk or an integer "
            f"array of shape (n, 3); got shape {arr.shape}."
        )
    return _chunks(arr[:, 2], input_name=input_name)


def _chunks(values, *, input_name: str) -> np.ndarray:
    """A log's chunk values as int64; an error naming the first bad row otherwise."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
            row = int(np.argmax(arr > np.iinfo(np.int64).max))
            raise ValueError(
                f"{input_name}: column 'chunk' must hold int64 chunks; row {row} holds "
                f"{arr[row]}, beyond the int64 range."
            )
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(arr) | (arr != np.round(arr)))
        if bad.size:
            raise ValueError(
                f"{input_name}: column 'chunk' must hold integer chunks; row {bad[0]} holds "
                f"{arr[bad[0]].item()!r}."
            )
    raise ValueError(
        f"{input_name}: column 'chunk' must have an integer dtype, got {arr.dtype}."
    )


def check_log(X, *, input_name: str = "X", allow_empty: bool = False) -> EngagementLog:
    """Validate an engagement log and return it as an :class:`EngagementLog`.

    Parameters
    ----------
    X : DataFrame, array-like of shape (n_engagements, 3), EngagementLog or EmbeddedLog
        The engagements, one per row: a DataFrame with columns ``user``, ``item`` and
        ``chunk`` (ids int64 or str), an int array with those three columns, or a log
        already validated.
    input_name : str, default="X"
        How error messages name the input.
    allow_empty : bool, default=False
        Whether a log without rows is accepted.

    Returns
    -------
    log : EngagementLog
        The validated log: int64 (or str) ids and int64 chunks, rows in the order given.

    Raises
    ------
    ValueError
        If a column is missing, holds NaN, floats or mixed kinds of ids, or if the log is
        empty and ``allow_empty`` is False.
    TypeError
        If ``X`` is a string, a scalar or None.

    See Also
    --------
    EngagementLog : The validated log.

    Examples
    --------
    >>> import pandas as pd
    >>> from sklearn_micro import check_log
    >>> log = check_log(pd.DataFrame({"user": ["ann", "bob"], "item": [7, 8],
    ...                               "chunk": [0, 1]}))
    >>> log.user, log.chunk
    (array(['ann', 'bob'], dtype='<U3'), array([0, 1]))
    """
    if isinstance(X, EngagementLog):
        log = X
    elif isinstance(X, EmbeddedLog):
        log = X.log
    elif hasattr(X, "columns") and hasattr(X, "__getitem__"):
        missing = [c for c in COLUMNS if c not in X.columns]
        if missing:
            raise ValueError(
                f"{input_name} must have columns {list(COLUMNS)}; missing {missing}, "
                f"got {list(X.columns)}."
            )
        repeated = [c for c in COLUMNS if list(X.columns).count(c) > 1]
        if repeated:
            raise ValueError(
                f"{input_name} must have one column of each of {list(COLUMNS)}; {repeated} "
                f"appear more than once in {list(X.columns)}."
            )
        log = EngagementLog(
            _frame_ids(X["user"], "user", input_name=input_name),
            _frame_ids(X["item"], "item", input_name=input_name),
            _chunks(X["chunk"].to_numpy(), input_name=input_name),
        )
    else:
        if isinstance(X, (str, bytes)) or X is None or np.isscalar(X):
            raise TypeError(
                f"{input_name} must be a DataFrame with columns {list(COLUMNS)} or an integer "
                f"array of shape (n, 3); got {type(X).__name__}."
            )
        if hasattr(X, "tocsr") or hasattr(X, "todense"):
            raise TypeError(
                f"{input_name} is a sparse {type(X).__name__}; an engagement log is dense: a "
                f"DataFrame with columns {list(COLUMNS)} or an integer array of shape (n, 3)."
            )
        arr = np.asarray(X)
        if arr.dtype.kind == "c":
            raise ValueError(
                f"Complex data not supported: {input_name} must be an integer array of shape "
                f"(n, 3); got dtype {arr.dtype}."
            )
        if arr.ndim != 2 or arr.shape[1] != 3:
            raise ValueError(
                f"{input_name} must be an integer array of shape (n, 3) with columns "
                f"{list(COLUMNS)}; got shape {arr.shape}."
            )
        if arr.dtype.kind not in "iu":
            detail = ""
            if arr.dtype.kind == "f" and np.isnan(arr).any():
                row = int(np.flatnonzero(np.isnan(arr).any(axis=1))[0])
                detail = f"; row {row} holds NaN"
            raise ValueError(
                f"{input_name} must be an integer array of shape (n, 3); got dtype "
                f"{arr.dtype}{detail}."
            )
        if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
            row, col = np.argwhere(arr > np.iinfo(np.int64).max)[0]
            raise ValueError(
                f"{input_name} must hold int64 values; row {row}, column {COLUMNS[col]!r} "
                f"holds {arr[row, col]}, beyond the int64 range."
            )
        arr = arr.astype(np.int64, copy=False)
        log = EngagementLog(arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy())
    if len(log) == 0 and not allow_empty:
        raise ValueError(f"{input_name} is an empty engagement log; at least one row is needed.")
    return log


# integer ids spanning at most this many times their number (plus a little) are handled
# with dense tables: O(n) distinct values and lookups instead of sorts and binary searches
_TABLE_SPAN = 4


def _dense_span(values: np.ndarray, n: int) -> tuple[int, int] | None:
    """``(low, span)`` of signed integer ``values`` when a table over their range is small
    beside ``n``; None otherwise."""
    if values.dtype.kind != "i" or values.size == 0:
        return None
    low, high = int(values.min()), int(values.max())
    span = high - low + 1
    return (low, span) if span <= _TABLE_SPAN * n + 1024 else None


def index_dtype(n: int):
    """The type of indices below ``n``: int32 where they fit (half the memory, and one
    type per kernel argument, so that a kernel compiles once), else int64."""
    return np.int32 if n <= np.iinfo(np.int32).max + 1 else np.int64


# rows of a log whose ids are looked up at once (bounds the int64 temporaries of a lookup)
LOOKUP_ROWS = 1 << 20


def lookup_in_blocks(vocabulary: Vocabulary, values: np.ndarray, name: str) -> np.ndarray:
    """Internal indices of ``values`` (-1 where unknown), int32 where they fit, looked up
    `LOOKUP_ROWS` at a time."""
    out = np.empty(values.shape[0], index_dtype(len(vocabulary)))
    for start in range(0, values.shape[0], LOOKUP_ROWS):
        stop = start + LOOKUP_ROWS
        out[start:stop] = vocabulary.lookup(values[start:stop], name=name)
    return out


def sorted_find(sorted_values: np.ndarray, values: np.ndarray):
    """Where each of ``values`` (any shape) stands in the sorted array ``sorted_values``,
    and whether it is there; the position is meaningful only where it is (every value of
    an empty array is absent)."""
    if not sorted_values.shape[0]:
        return np.zeros(np.shape(values), np.int64), np.zeros(np.shape(values), bool)
    pos = np.minimum(np.searchsorted(sorted_values, values), sorted_values.shape[0] - 1)
    return pos, sorted_values[pos] == values


def distinct(values) -> np.ndarray:
    """The sorted distinct values of a 1-D array: a presence table for integers of a small
    range, otherwise a sort (``np.unique`` without its hashing path, which is many times
    slower on large int64 arrays)."""
    values = np.asarray(values).ravel()
    dense = _dense_span(values, values.shape[0])
    if dense is not None:
        return present_values(values, *dense)
    values = np.sort(values)
    if values.shape[0] < 2:
        return values
    keep = np.empty(values.shape[0], bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def _id_kind(ids: np.ndarray) -> str:
    return "str" if ids.dtype.kind == "U" else "int64"


class Vocabulary:
    """External ids mapped to contiguous internal indices ``0..n-1``.

    The internal index of an id is its position in ``ids``; `extend` appends unseen ids at
    the end, so indices already handed out never change. Integer ids whose range is at most
    a few times their number are looked up in a dense table (O(1) per id); other ids by
    binary search in a sorted copy (O(log n) per id). No Python dict is held.

    Parameters
    ----------
    ids : array-like of shape (n_ids,)
        Distinct external ids (int64 or str), in the order of their internal indices.

    Attributes
    ----------
    ids : ndarray of shape (n_ids,)
        The external ids; ``ids[j]`` has internal index ``j``.

    See Also
    --------
    EmbeddedLog : Holds the vocabularies of a graph embedding.

    Examples
    --------
    >>> from sklearn_micro import Vocabulary
    >>> vocab = Vocabulary.from_ids([30, 10, 30, 20])
    >>> vocab.ids
    array([10, 20, 30])
    >>> vocab.lookup([20, 99])
    array([ 1, -1])
    >>> bigger, index = vocab.extend([99, 10])
    >>> bigger.ids, index
    (array([10, 20, 30, 99]), array([3, 0]))
    """

    def __init__(self, ids: np.ndarray):
        ids = np.asarray(ids)
        self.ids = ids
        dense = _dense_span(ids, ids.shape[0])
        if dense is not None:
            self._low = dense[0]
            self._table = np.full(dense[1], -1, np.int64)
            self._table[ids - self._low] = np.arange(ids.shape[0])
        else:
            self._table = None
            self._order = np.argsort(ids, kind="stable")
            self._sorted = ids[self._order]

    @classmethod
    def from_ids(cls, values: np.ndarray) -> Vocabulary:
        """Make a vocabulary of the distinct values, in sorted order.

        Parameters
        ----------
        values : array-like
            External ids, repeats allowed.

        Returns
        -------
        vocab : Vocabulary
            The distinct ids, sorted.
        """
        return cls(distinct(values))

    def __len__(self) -> int:
        return self.ids.shape[0]

    def __repr__(self) -> str:
        return f"Vocabulary(n={len(self)}, kind={_id_kind(self.ids)})"

    def _check_kind(self, values: np.ndarray, name: str) -> None:
        if len(self) and values.size and _id_kind(values) != _id_kind(self.ids):
            raise ValueError(
                f"{name} must be {_id_kind(self.ids)} ids like those seen in fit; got "
                f"{_id_kind(values)} ids."
            )

    def lookup(self, values, *, name: str = "ids", dtype=np.int64) -> np.ndarray:
        """Map external ids to internal indices.

        Parameters
        ----------
        values : array-like
            External ids, of the same kind (int64 or str) as the vocabulary's.
        name : str, default="ids"
            How error messages name ``values``.
        dtype : {np.int64, np.int32}, default=np.int64
            The indices' type (int32 halves their memory for a vocabulary below 2**31 ids).

        Returns
        -------
        index : ndarray of ``dtype``, shape of ``values``
            The internal index of each id; -1 where an id is unknown.
        """
        values = as_ids(values, name=name)
        if values.dtype.kind not in "iU":
            values = _id_column(values.ravel(), name, input_name=name).reshape(values.shape)
        self._check_kind(values, name)
        if len(self) == 0:
            return np.full(values.shape, -1, dtype=dtype)
        if self._table is not None:
            out = np.empty(values.size, dtype)
            table_lookup(values.ravel(), self._low, self._table, out)
            return out.reshape(values.shape)
        pos, found = sorted_find(self._sorted, values)
        return np.where(found, self._order[pos], -1).astype(dtype)

    def extend(self, values, *, name: str = "ids") -> tuple[Vocabulary, np.ndarray]:
        """Append the unseen ``values`` to a new vocabulary, and map ``values`` into it.

        ``self`` is left unchanged, so a caller can validate everything before it commits.

        Parameters
        ----------
        values : array-like
            External ids, repeats allowed; unseen ones are appended in sorted order.
        name : str, default="ids"
            How error messages name ``values``.

        Returns
        -------
        vocab : Vocabulary
            The extended vocabulary (``self`` itself when every id is known).
        index : ndarray of int64
            The index of each of ``values`` in ``vocab``.
        """
        values = np.asarray(values)
        vocab, _ = self.extend_distinct(distinct(values), name=name)
        return vocab, vocab.lookup(values, name=name)

    def extend_distinct(self, distinct, *, name: str = "ids") -> tuple[Vocabulary, np.ndarray]:
        """`extend` for sorted distinct values.

        Parameters
        ----------
        distinct : ndarray
            Sorted distinct external ids; unseen ones are appended in their order.
        name : str, default="ids"
            How error messages name ``distinct``.

        Returns
        -------
        vocab : Vocabulary
            The extended vocabulary (``self`` itself when every id is known).
        index : ndarray of int64
            The index of each of ``distinct`` in ``vocab``.
        """
        index = self.lookup(distinct, name=name)
        unseen = index < 0
        if unseen.any():
            new_ids = distinct[unseen]
            if len(self) and self.ids.dtype.kind != "U":
                new_ids = new_ids.astype(self.ids.dtype)
            vocab = Vocabulary(np.concatenate([self.ids, new_ids]) if len(self) else new_ids)
            index[unseen] = len(self) + np.arange(new_ids.shape[0])
        else:
            vocab = self
        return vocab, index

    def __getstate__(self):
        return {"ids": self.ids}

    def __setstate__(self, state):
        self.__init__(state["ids"])


def iter_chunks(chunk: np.ndarray):
    """Yield ``(chunk_value, rows)`` for each distinct chunk, in increasing order.

    ``rows`` are the row indices of that chunk in their original order.
    """
    chunk = np.asarray(chunk)
    order = np.argsort(chunk, kind="stable")
    values, starts = np.unique(chunk[order], return_index=True)
    bounds = np.append(starts, chunk.shape[0])
    for j, value in enumerate(values):
        yield int(value), order[bounds[j] : bounds[j + 1]]


# ---------------------------------------------------------------- compaction and split


def compact_log(log) -> EngagementLog:
    """The log sorted by chunk, with ids and chunks as int32 where they fit.

    One copy is made column by column, so the peak is the log plus one column. String ids
    are kept as they are. A log already sorted by chunk (the paper's files are) keeps its
    row order.
    """
    log = check_log(log)
    chunk = log.chunk
    order = None
    if chunk.shape[0] > 1 and np.any(chunk[1:] < chunk[:-1]):
        order = np.argsort(chunk, kind="stable")

    def narrow(values):
        if values.size and _fits_int32(values):
            values = values.astype(np.int32, copy=False)
        return values if order is None else values[order]

    user = narrow(log.user)
    item = narrow(log.item)
    return EngagementLog(user, item, narrow(chunk))


def _fits_int32(values: np.ndarray) -> bool:
    return values.dtype.kind in "iu" and (not values.size or (
        values.min() >= np.iinfo(np.int32).min and values.max() <= np.iinfo(np.int32).max))


def compact_chunks(chunks, n_rows: int | None = None) -> EngagementLog:
    """A log from its chunks, ``(chunk, EngagementLog)`` in increasing order, held once.

    Columns are int32 while every value fits (a column widens to int64 when one does not).
    With ``n_rows`` (a Parquet file's metadata has it) the columns are allocated once and
    filled, so memory holds the log plus one chunk; otherwise the chunks are joined at the
    end, which holds the log twice for a moment.
    """
    columns = None
    parts: list[EngagementLog] = []
    filled = 0
    for _, part in chunks:
        part = check_log(part)
        if n_rows is None:
            parts.append(compact_log(part))
            continue
        if columns is None:
            columns = [np.empty(n_rows, np.int32) for _ in range(3)]
        end = filled + len(part)
        if end > n_rows:
            raise ValueError(f"n_rows: the chunks hold more than {n_rows} rows.")
        for j, values in enumerate((part.user, part.item, part.chunk)):
            if columns[j].dtype == np.int32 and not _fits_int32(values):
                columns[j] = columns[j].astype(np.int64)
            columns[j][filled:end] = values
        filled = end
    if n_rows is None:
        if not parts:
            return check_log(np.empty((0, 3), np.int64), allow_empty=True)
        joined = [np.concatenate([getattr(p, c) for p in parts]) for c in COLUMNS]
        return EngagementLog(*joined)
    if columns is None or filled != n_rows:
        raise ValueError(f"n_rows: the chunks hold {filled} rows, not {n_rows}.")
    return EngagementLog(*columns)


def split_chunks(log, train_chunks: int | None = None) -> tuple[EngagementLog, EngagementLog]:
    """Split a log into its first ``train_chunks`` chunks and the rest.

    Chunks are counted by number from the first one, so empty chunks count. By default the
    last quarter of the chunks (at least one) is the test part. A log sorted by chunk (as
    `compact_log` leaves it) is split into two views, without a copy.
    """
    log = check_log(log)
    first, last = int(log.chunk.min()), int(log.chunk.max())
    n_chunks = last - first + 1
    if train_chunks is None:
        train_chunks = n_chunks - max(1, n_chunks // 4)
    if not 1 <= train_chunks < n_chunks:
        raise ValueError(
            f"train_chunks must be between 1 and {n_chunks - 1} (the log has {n_chunks} "
            f"chunks, {first}..{last}); got {train_chunks}."
        )
    chunk = log.chunk
    if chunk.shape[0] < 2 or np.all(chunk[1:] >= chunk[:-1]):
        cut = int(np.searchsorted(chunk, first + train_chunks))
        return log.take(slice(0, cut)), log.take(slice(cut, None))
    train = chunk < first + train_chunks
    return log.take(train), log.take(~train)
