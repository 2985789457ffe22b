"""Readers of engagement log files: any CSV or Parquet log, and the paper's two files.

`read_log` reads a CSV (plain, ``.gz``, ``.bz2`` or ``.zip``) or Parquet file with user,
item and chunk (or unix-time) columns, batch by batch in bounded memory; `iter_log_chunks`
hands out one chunk at a time from a file sorted by chunk; `read_twitter_fave` and
`read_twitter_follow` read the paper's two published files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from .._log import EngagementLog
from ._files import (
    _BATCH_ROWS,
    _as_output,
    _import_pandas,
    _iter_batches,
    _Source,
    _where,
    file_source,
    release_arrow_memory,
)

__all__ = ["iter_log_chunks", "read_log", "read_twitter_fave", "read_twitter_follow"]

@dataclass(frozen=True)
class _Columns:
    """Which columns of a file make the log, and how time becomes chunks."""

    user: str
    item: str
    chunk: str | None
    time: str | None
    chunk_length: float | int | None
    origin: int | None

    @property
    def kinds(self) -> dict[str, str]:
        kinds = {self.user: "int", self.item: "int"}
        kinds[self.chunk if self.time is None else self.time] = "int"
        return kinds

    @property
    def order(self) -> str:
        return self.chunk if self.time is None else self.time


def _columns(user, item, chunk, time, chunk_length, origin) -> _Columns:
    for name, value in (("user", user), ("item", item)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a column name (str); got {value!r}.")
    if chunk is not None and time is not None:
        raise ValueError(
            f"Give either chunk= (a chunk column) or time= (a timestamp column), not both; got "
            f"chunk={chunk!r} and time={time!r}."
        )
    if time is None:
        if chunk_length is not None or origin is not None:
            raise ValueError(
                f"chunk_length and origin apply to time= only; got chunk_length={chunk_length!r}"
                f" and origin={origin!r} without time=."
            )
        chunk = "chunk" if chunk is None else chunk
        if not isinstance(chunk, str):
            raise TypeError(f"chunk must be a column name (str); got {chunk!r}.")
        return _Columns(user, item, chunk, None, None, None)
    if not isinstance(time, str):
        raise TypeError(f"time must be a column name (str); got {time!r}.")
    if (
        not isinstance(chunk_length, Real)
        or isinstance(chunk_length, bool)
        or not np.isfinite(chunk_length)
        or chunk_length <= 0
    ):
        raise ValueError(
            f"chunk_length must be a positive number of seconds when time= is given; got "
            f"{chunk_length!r}."
        )
    if chunk_length == int(chunk_length):
        chunk_length = int(chunk_length)
    if origin is not None and (not isinstance(origin, Integral) or isinstance(origin, bool)):
        raise TypeError(f"origin must be an integer unix time in seconds or None; got {origin!r}.")
    return _Columns(user, item, None, time, chunk_length, None if origin is None else int(origin))


def _check_batch_rows(batch_rows) -> int:
    if not isinstance(batch_rows, Integral) or isinstance(batch_rows, bool) or batch_rows < 1:
        raise ValueError(f"batch_rows must be a positive integer; got {batch_rows!r}.")
    return int(batch_rows)


def _to_chunks(time: np.ndarray, origin: int, chunk_length) -> np.ndarray:
    """Ordinal chunks of unix times: 0 for ``[origin, origin + chunk_length)``, and so on."""
    offset = time - origin
    if isinstance(chunk_length, int):
        return offset // chunk_length
    return np.floor(offset / chunk_length).astype(np.int64)


def _check_origin(src: _Source, time: np.ndarray, origin: int, row0: int) -> None:
    early = np.flatnonzero(time < origin)
    if early.size:
        j = int(early[0])
        raise ValueError(
            f"{_where(src, row0 + j)}: time {int(time[j])} is before origin={origin}."
        )


def _read_columns(src: _Source, cols: _Columns, batch_rows: int):
    """All rows of a file as ``(user, item, chunk)`` int64 arrays."""
    users, items, orders = [], [], []
    for row0, batch in _iter_batches(src, cols.kinds, batch_rows):
        if cols.origin is not None:
            _check_origin(src, batch[cols.time], cols.origin, row0)
        users.append(batch[cols.user])
        items.append(batch[cols.item])
        orders.append(batch[cols.order])
    empty = np.empty(0, np.int64)
    user = np.concatenate(users) if users else empty
    item = np.concatenate(items) if items else empty
    chunk = np.concatenate(orders) if orders else empty
    del users, items, orders
    release_arrow_memory()
    if cols.time is not None and chunk.size:
        origin = int(chunk.min()) if cols.origin is None else cols.origin
        chunk = _to_chunks(chunk, origin, cols.chunk_length)
    return user, item, chunk


def read_log(
    path: str | os.PathLike,
    *,
    user: str = "user",
    item: str = "item",
    chunk: str | None = None,
    time: str | None = None,
    chunk_length: float | None = None,
    origin: int | None = None,
    sep: str = ",",
    as_frame: bool = False,
    batch_rows: int = _BATCH_ROWS,
):
    """Read an engagement log from a CSV or Parquet file.

    The file is read batch by batch, each batch turned into int64 arrays at once, so memory
    holds the result and one batch, never the file's text.

    Parameters
    ----------
    path : str or os.PathLike
        A CSV file with a header (plain, or compressed as ``.gz``, ``.bz2`` or a ``.zip``
        holding one CSV), or a Parquet file (``.parquet`` or ``.pq``).
    user, item : str
        The columns holding user and item ids (integers).
    chunk : str or None
        The column holding ordinal time chunks (integers). When neither `chunk` nor `time` is
        given, the column ``"chunk"``.
    time : str or None
        Instead of `chunk`: a column of unix times in seconds, turned into chunks of
        `chunk_length` seconds numbered from 0. Numbers are contiguous: a period without
        engagements keeps its number and has no rows.
    chunk_length : float or None
        The length of a chunk in seconds; required with `time`.
    origin : int or None
        The unix time where chunk 0 starts; by default the earliest time in the file. A time
        before `origin` is an error.
    sep : str
        The field separator of a CSV file. Spaces after a separator are ignored.
    as_frame : bool
        Return a pandas DataFrame with int64 columns ``user``, ``item``, ``chunk`` instead of
        an `EngagementLog`.
    batch_rows : int
        About how many rows are read and converted at a time.

    Returns
    -------
    log : EngagementLog or pandas.DataFrame
        The engagements in file order.

    Raises
    ------
    FileNotFoundError
        If there is no file at `path`.
    ValueError
        If a column is missing (the message lists those present), or a row holds something
        other than an integer in one of the columns read (the message names the file, the line,
        counting the header as line 1, and the value).

    See Also
    --------
    iter_log_chunks : The same, one chunk at a time.

    Examples
    --------
    >>> import os, tempfile
    >>> from sklearn_micro.datasets import read_log
    >>> path = os.path.join(tempfile.mkdtemp(), "log.csv")
    >>> with open(path, "w") as f:
    ...     _ = f.write("user,item,seconds\\n7,70,1000\\n8,80,1100\\n7,90,4000\\n")
    >>> log = read_log(path, time="seconds", chunk_length=1000)
    >>> log.user, log.item, log.chunk
    (array([7, 8, 7]), array([70, 80, 90]), array([0, 0, 3]))
    """
    cols = _columns(user, item, chunk, time, chunk_length, origin)
    batch_rows = _check_batch_rows(batch_rows)
    src = file_source(path, sep=sep)
    return _as_output(*_read_columns(src, cols, batch_rows), as_frame)


def iter_log_chunks(
    path: str | os.PathLike,
    *,
    user: str = "user",
    item: str = "item",
    chunk: str | None = None,
    time: str | None = None,
    chunk_length: float | None = None,
    origin: int | None = None,
    sep: str = ",",
    as_frame: bool = False,
    batch_rows: int = _BATCH_ROWS,
) -> Iterator[tuple[int, EngagementLog]]:
    """Read an engagement log sorted by chunk, one chunk at a time.

    Memory holds one chunk and one batch. With `time` and no `origin`, chunk 0 starts at the
    first row's time.

    Parameters
    ----------
    path : str or os.PathLike
        A CSV or Parquet file sorted by chunk (or time), as `read_log` reads.
    user, item : str
        The columns holding user and item ids (integers).
    chunk : str or None
        The column holding ordinal time chunks; by default ``"chunk"``.
    time : str or None
        Instead of `chunk`: a column of unix times in seconds.
    chunk_length : float or None
        The length of a chunk in seconds; required with `time`.
    origin : int or None
        The unix time where chunk 0 starts; by default the first row's time.
    sep : str
        The field separator of a CSV file.
    as_frame : bool
        Hand out pandas DataFrames instead of `EngagementLog` objects.
    batch_rows : int
        About how many rows are read and converted at a time.

    Returns
    -------
    chunks : iterator of (int, EngagementLog or pandas.DataFrame)
        Each chunk, in increasing order, with its engagements in file order. The file is
        read as the iterator is consumed; the arguments are checked at once.

    Raises
    ------
    ValueError
        If the file goes back to an earlier chunk (the message names the line), and as
        `read_log` does.

    See Also
    --------
    read_log : The whole log at once, in any order.

    Examples
    --------
    >>> import os, tempfile
    >>> from sklearn_micro.datasets import iter_log_chunks
    >>> path = os.path.join(tempfile.mkdtemp(), "log.csv")
    >>> with open(path, "w") as f:
    ...     _ = f.write("user,item,chunk\\n1,10,0\\n2,10,0\\n1,11,2\\n")
    >>> for chunk, log in iter_log_chunks(path):
    ...     print(chunk, log.user, log.item)
    0 [1 2] [10 10]
    2 [1] [11]
    """
    cols = _columns(user, item, chunk, time, chunk_length, origin)
    batch_rows = _check_batch_rows(batch_rows)
    src = file_source(path, sep=sep)
    if as_frame:
        _import_pandas()
    return _iter_log_chunks(src, cols, batch_rows, as_frame)


def _iter_log_chunks(src: _Source, cols: _Columns, batch_rows: int, as_frame: bool):
    origin = cols.origin
    current = None
    pending: list[tuple[np.ndarray, np.ndarray]] = []

    def emit():
        user = np.concatenate([p[0] for p in pending])
        item = np.concatenate([p[1] for p in pending])
        return current, _as_output(user, item, np.full(user.shape[0], current, np.int64),
                                   as_frame)

    for row0, batch in _iter_batches(src, cols.kinds, batch_rows):
        chunk = batch[cols.order]
        if not chunk.size:
            continue
        if cols.time is not None:
            if origin is None:
                origin = int(chunk[0])
            else:
                _check_origin(src, chunk, origin, row0)
            chunk = _to_chunks(chunk, origin, cols.chunk_length)
        back = np.flatnonzero(np.diff(chunk) < 0) + 1
        if current is not None and chunk[0] < current:
            back = np.array([0])
        if back.size:
            j = int(back[0])
            before = current if j == 0 else int(chunk[j - 1])
            raise ValueError(
                f"{_where(src, row0 + j)}: chunk {int(chunk[j])} comes after chunk {before}; "
                f"iter_log_chunks needs a file sorted by chunk (read_log reads any order)."
            )
        bounds = np.concatenate([[0], np.flatnonzero(np.diff(chunk)) + 1, [chunk.size]])
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            value = int(chunk[lo])
            if current is not None and value != current:
                yield emit()
                pending = []
            current = value
            pending.append((batch[cols.user][lo:hi], batch[cols.item][lo:hi]))
    if pending:
        yield emit()


def read_twitter_fave(
    path: str | os.PathLike, *, as_frame: bool = False, batch_rows: int = _BATCH_ROWS
):
    """Read the paper's TwitterFaveGraph: user to Tweet favorites in 192 time chunks.

    The published file is a zipped CSV with the header ``user_index, tweet_index,
    time_chunk`` (or a Parquet file with those columns); chunks run from 1 to 192.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.zip``, ``.csv`` or ``.parquet`` file.
    as_frame : bool
        Return a pandas DataFrame instead of an `EngagementLog`.
    batch_rows : int
        About how many rows are read and converted at a time.

    Returns
    -------
    log : EngagementLog or pandas.DataFrame
        ``user`` is ``user_index``, ``item`` is ``tweet_index``, ``chunk`` is ``time_chunk``.

    See Also
    --------
    read_twitter_follow : The paper's other file.
    read_log : Any log file with user, item and chunk columns.

    Examples
    --------
    >>> import os, tempfile
    >>> from sklearn_micro.datasets import read_twitter_fave
    >>> path = os.path.join(tempfile.mkdtemp(), "fave.csv")
    >>> with open(path, "w") as f:
    ...     _ = f.write("user_index, tweet_index, time_chunk\\n0, 5, 1\\n1, 5, 2\\n")
    >>> read_twitter_fave(path).item
    array([5, 5])
    """
    return read_log(path, user="user_index", item="tweet_index", chunk="time_chunk",
                    as_frame=as_frame, batch_rows=batch_rows)


def read_twitter_follow(
    path: str | os.PathLike, *, as_frame: bool = False, batch_rows: int = _BATCH_ROWS
):
    """Read the paper's TwitterFollowGraph: user to author follows in time chunks.

    The published file is a zipped CSV with the header ``user_index, author_index,
    time_chunk`` (or a Parquet file with those columns); chunks run from 0 to 728.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.zip``, ``.csv`` or ``.parquet`` file.
    as_frame : bool
        Return a pandas DataFrame instead of an `EngagementLog`.
    batch_rows : int
        About how many rows are read and converted at a time.

    Returns
    -------
    log : EngagementLog or pandas.DataFrame
        ``user`` is ``user_index``, ``item`` is ``author_index``, ``chunk`` is ``time_chunk``.

    See Also
    --------
    read_twitter_fave : The paper's other file.
    read_log : Any log file with user, item and chunk columns.

    Examples
    --------
    >>> import os, tempfile
    >>> from sklearn_micro.datasets import read_twitter_follow
    >>> path = os.path.join(tempfile.mkdtemp(), "follow.csv")
    >>> with open(path, "w") as f:
    ...     _ = f.write("user_index, author_index, time_chunk\\n0, 9, 0\\n1, 9, 3\\n")
    >>> read_twitter_follow(path).chunk
    array([0, 3])
    """
    return read_log(path, user="user_index", item="author_index", chunk="time_chunk",
                    as_frame=as_frame, batch_rows=batch_rows)

