"""Engagement logs from files, the real logs of the data folder, and a synthetic generator.

Readers
    `read_log` reads a CSV (plain, ``.gz``, ``.bz2`` or ``.zip``) or Parquet file with user,
    item and chunk (or unix-time) columns, batch by batch in bounded memory;
    `iter_log_chunks` hands out one chunk at a time from a file sorted by chunk;
    `read_twitter_fave` and `read_twitter_follow` read the paper's two published files.
Loaders
    `load_higgs` and `load_movielens` read the raw files of the data folder (`data_home`).
Generator
    `make_engagements` and `iter_engagements` draw logs from the paper's generative model
    (Table 2) with ephemeral items, at any scale up to the paper's.

The readers need pyarrow, and ``as_frame=True`` needs pandas: both come with the ``data``
extra, ``pip install "sklearn-micro[data]"``.
"""

from __future__ import annotations

import bz2
import gzip
import os
import re
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path

import numpy as np
from scipy import sparse
from scipy.special import ndtr
from sklearn.utils import Bunch, check_random_state
from sklearn.utils._param_validation import Interval, validate_params

from ._log import COLUMNS, EngagementLog

__all__ = [
    "data_home",
    "iter_engagements",
    "iter_log_chunks",
    "load_higgs",
    "load_movielens",
    "make_engagements",
    "read_log",
    "read_twitter_fave",
    "read_twitter_follow",
]

_DATA_EXTRA = 'pip install "sklearn-micro[data]"'
_BATCH_ROWS = 1_000_000
_HIGGS_FILE = "higgs-twitter/higgs-activity_time.txt.gz"
_MOVIELENS_FILE = "movielens-latest-small/ratings.csv"
_HIGGS_KINDS = ("RT", "MT", "RE")
_INT_FIELD = re.compile(r"[+-]?[0-9]+")


def _import_pyarrow():
    try:
        import pyarrow  # noqa: F401
        import pyarrow.compute  # noqa: F401
        import pyarrow.csv  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"Reading engagement files needs pyarrow, which is not installed: {_DATA_EXTRA}"
        ) from exc
    return pyarrow


def _import_pandas():
    try:
        import pandas
    except ImportError as exc:
        raise ImportError(
            f"as_frame=True needs pandas, which is not installed: {_DATA_EXTRA}"
        ) from exc
    return pandas


def _as_output(user, item, chunk, as_frame: bool):
    if as_frame:
        pd = _import_pandas()
        return pd.DataFrame({"user": user, "item": item, "chunk": chunk}, columns=list(COLUMNS))
    return EngagementLog(user, item, chunk)


# --------------------------------------------------------------------------------------------
# Files: opening, batches, and where a bad row is
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    """A CSV or Parquet file and how to read it."""

    path: Path
    kind: str  # "csv" or "parquet"
    compression: str | None  # None, "gzip", "bz2" or "zip"
    sep: str = ","
    names: tuple[str, ...] | None = None  # column names of a file without a header

    @property
    def header(self) -> bool:
        return self.names is None


def _source(path, *, sep: str = ",", names=None) -> _Source:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike; got {type(path).__name__}.")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No engagement file at {str(path)!r}.")
    if not isinstance(sep, str) or len(sep) != 1:
        raise ValueError(f"sep must be a single character; got {sep!r}.")
    suffixes = [s.lower() for s in path.suffixes]
    last = suffixes[-1] if suffixes else ""
    if last in (".parquet", ".pq"):
        return _Source(path, "parquet", None)
    compression = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bz2", ".zip": "zip"}.get(last)
    return _Source(path, "csv", compression, sep, None if names is None else tuple(names))


def _zip_member(zf: zipfile.ZipFile, path: Path) -> zipfile.ZipInfo:
    members = [m for m in zf.infolist() if not m.is_dir()]
    if len(members) > 1:
        members = [m for m in members if m.filename.lower().endswith((".csv", ".txt"))]
    if len(members) != 1:
        raise ValueError(
            f"{str(path)!r} must hold exactly one CSV file; it holds "
            f"{[m.filename for m in zf.infolist()]}."
        )
    return members[0]


def _open_bytes(src: _Source):
    """The decompressed bytes of a CSV source, as a binary file object."""
    if src.compression == "gzip":
        return gzip.open(src.path, "rb")
    if src.compression == "bz2":
        return bz2.open(src.path, "rb")
    if src.compression == "zip":
        with zipfile.ZipFile(src.path) as zf:
            # the member keeps the archive's file open after the archive object closes
            return zf.open(_zip_member(zf, src.path))
    return open(src.path, "rb")


def _open_arrow(src: _Source):
    pa = _import_pyarrow()
    if src.compression == "zip":
        return _open_bytes(src)
    return pa.input_stream(str(src.path), compression=src.compression)


def _csv_names(src: _Source) -> list[str]:
    if src.names is not None:
        return list(src.names)
    with _open_bytes(src) as f:
        line = f.readline()
    if not line.strip():
        raise ValueError(f"{str(src.path)!r} is empty; a header line with column names is needed.")
    text = line.decode("utf-8-sig").rstrip("\r\n")
    return [name.strip().strip('"').strip() for name in text.split(src.sep)]


def _check_present(src: _Source, present: list[str], wanted: dict[str, str]) -> None:
    for name in wanted:
        if name not in present:
            raise ValueError(
                f"{str(src.path)!r} has no column {name!r}; its columns are {present}."
            )


def _data_rows(src: _Source, start_row: int) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for the data rows of a CSV from ``start_row`` on.

    Data rows are the non-empty lines after the header, as the CSV reader counts them; line
    numbers are 1-based and count the header.
    """
    with _open_bytes(src) as f:
        line_no = 0
        if src.header:
            f.readline()
            line_no = 1
        row = 0
        rest = b""
        while True:
            block = f.read(1 << 24)
            lines = (rest + block).split(b"\n")
            rest = lines.pop() if block else b""
            if not block and lines == [b""]:
                return
            n_rows = len(lines) - lines.count(b"") - lines.count(b"\r")
            if row + n_rows <= start_row:
                row += n_rows
                line_no += len(lines)
            else:
                for line in lines:
                    line_no += 1
                    line = line.rstrip(b"\r")
                    if not line:
                        continue
                    if row >= start_row:
                        yield line_no, line.decode("utf-8", errors="replace")
                    row += 1
            if not block:
                return


def _field_problem(fields: list[str], names: list[str], kinds: dict[str, str]) -> str | None:
    if len(fields) != len(names):
        return f"has {len(fields)} fields where the header has {len(names)} ({names})"
    for name, kind in kinds.items():
        value = fields[names.index(name)].strip().strip('"').strip()
        if value == "":
            return f"column {name!r} is missing (an empty field)"
        if kind == "int":
            if not _INT_FIELD.fullmatch(value):
                return f"column {name!r} holds {value!r}, which is not an integer"
            if not -(2**63) <= int(value) < 2**63:
                return f"column {name!r} holds {value!r}, which is beyond the int64 range"
        elif kind == "float":
            try:
                number = float(value)
            except ValueError:
                return f"column {name!r} holds {value!r}, which is not a number"
            if not np.isfinite(number):
                return f"column {name!r} holds {value!r}, which is not a finite number"
    return None


def _raise_bad_csv_row(src, names, kinds, start_row, cause=None):
    """Find the first bad data row from ``start_row`` on and raise a ValueError naming it."""
    for line_no, text in _data_rows(src, start_row):
        problem = _field_problem(text.split(src.sep), names, kinds)
        if problem is not None:
            raise ValueError(f"{str(src.path)!r}, line {line_no}: {problem}.") from None
    raise ValueError(
        f"{str(src.path)!r}: cannot read the rows after data row {start_row}: {cause}"
    ) from cause


def _where(src: _Source, row: int) -> str:
    """Where data row ``row`` (0-based) of a file is, for an error message."""
    if src.kind == "csv":
        for line_no, _ in _data_rows(src, row):
            return f"{str(src.path)!r}, line {line_no}"
    return f"{str(src.path)!r}, row {row + 1}"


def _iter_csv(src: _Source, kinds: dict[str, str], batch_rows: int):
    pa = _import_pyarrow()
    names = _csv_names(src)
    _check_present(src, names, kinds)
    types = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}
    read_options = pa.csv.ReadOptions(
        column_names=names,
        skip_rows=1 if src.header else 0,
        block_size=int(min(max(batch_rows * 32, 1 << 10), 1 << 30)),
    )
    parse_options = pa.csv.ParseOptions(delimiter=src.sep, ignore_empty_lines=True)
    convert_options = pa.csv.ConvertOptions(
        column_types={name: types[kind] for name, kind in kinds.items()},
        include_columns=list(kinds),
        null_values=[""],
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    row0 = 0
    with _open_arrow(src) as stream:
        try:
            reader = pa.csv.open_csv(stream, read_options, parse_options, convert_options)
        except pa.ArrowInvalid as exc:
            _raise_bad_csv_row(src, names, kinds, 0, exc)
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except pa.ArrowInvalid as exc:
                _raise_bad_csv_row(src, names, kinds, row0, exc)
            out = {}
            for name, kind in kinds.items():
                column = batch.column(name)
                values = column.to_numpy(zero_copy_only=False)
                if column.null_count or (kind == "float" and not np.isfinite(values).all()):
                    _raise_bad_csv_row(src, names, kinds, row0)
                out[name] = values
            yield row0, out
            row0 += batch.num_rows


def _parquet_values(src: _Source, column, name: str, kind: str, row0: int) -> np.ndarray:
    pa = _import_pyarrow()
    pc = pa.compute

    def bad(j, what):
        value = column[int(j)].as_py()
        raise ValueError(f"{str(src.path)!r}, row {row0 + j + 1}: column {name!r} {what} "
                         f"(holds {value!r}).")

    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if column.null_count:
        bad(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0], "is missing")
    if kind == "str":
        return column.to_numpy(zero_copy_only=False)
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("s")).cast(pa.int64())
    if kind == "float":
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise ValueError(f"{str(src.path)!r}: column {name!r} must be numeric; its type is "
                             f"{column.type}.")
        values = column.cast(pa.float64()).to_numpy(zero_copy_only=False)
        if not np.isfinite(values).all():
            bad(np.flatnonzero(~np.isfinite(values))[0], "is not a finite number")
        return values
    if pa.types.is_integer(column.type):
        if column.type == pa.uint64():
            values = column.to_numpy(zero_copy_only=False)
            over = np.flatnonzero(values > np.iinfo(np.int64).max)
            if over.size:
                bad(over[0], "is beyond the int64 range")
        return column.cast(pa.int64()).to_numpy(zero_copy_only=False)
    if pa.types.is_floating(column.type):
        values = column.to_numpy(zero_copy_only=False)
        wrong = ~np.isfinite(values) | (values != np.round(values))
        if wrong.any():
            bad(np.flatnonzero(wrong)[0], "is not an integer")
        return values.astype(np.int64)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        text = pc.utf8_trim_whitespace(column)
        ok = pc.match_substring_regex(text, r"^[+-]?[0-9]+$").to_numpy(zero_copy_only=False)
        if not ok.all():
            bad(np.flatnonzero(~ok)[0], "is not an integer")
        try:
            return text.cast(pa.int64()).to_numpy(zero_copy_only=False)
        except pa.ArrowInvalid:
            for j, value in enumerate(text.to_pylist()):
                if not -(2**63) <= int(value) < 2**63:
                    bad(j, "is beyond the int64 range")
            raise
    raise ValueError(f"{str(src.path)!r}: column {name!r} must hold integers; its type is "
                     f"{column.type}.")


def _iter_parquet(src: _Source, kinds: dict[str, str], batch_rows: int):
    pa = _import_pyarrow()
    pf = pa.parquet.ParquetFile(src.path)
    _check_present(src, pf.schema_arrow.names, kinds)
    row0 = 0
    for batch in pf.iter_batches(batch_size=batch_rows, columns=list(kinds)):
        yield row0, {
            name: _parquet_values(src, batch.column(name), name, kind, row0)
            for name, kind in kinds.items()
        }
        row0 += batch.num_rows


def _iter_batches(src: _Source, kinds: dict[str, str], batch_rows: int):
    """Yield ``(first_row, {column: ndarray})`` batch by batch; ints come as int64."""
    if src.kind == "parquet":
        return _iter_parquet(src, kinds, batch_rows)
    return _iter_csv(src, kinds, batch_rows)


# --------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------


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
    src = _source(path, sep=sep)
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

    Memory holds one chunk and one batch. The parameters are those of `read_log`; with
    `time` and no `origin`, chunk 0 starts at the first row's time.

    Yields
    ------
    chunk : int
        The chunk, in increasing order.
    log : EngagementLog or pandas.DataFrame
        That chunk's engagements, in file order.

    Raises
    ------
    ValueError
        If the file goes back to an earlier chunk (the message names the line), and as
        `read_log` does.

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
    src = _source(path, sep=sep)
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


# --------------------------------------------------------------------------------------------
# The real logs of the data folder
# --------------------------------------------------------------------------------------------


def _data_candidates() -> list[tuple[str, Path]]:
    env = os.environ.get("SKLEARN_MICRO_DATA")
    if env:
        return [("$SKLEARN_MICRO_DATA", Path(env))]
    repository = Path(__file__).resolve().parents[1]
    return [
        ("../shared/data from the current folder", Path.cwd() / ".." / "shared" / "data"),
        ("../shared/data beside the repository", repository / ".." / "shared" / "data"),
    ]


def data_home() -> Path | None:
    """The folder holding the real engagement logs, or None where there is none.

    Looked for in this order: the folder named by the environment variable
    ``SKLEARN_MICRO_DATA`` (when set, the only place looked at), ``../shared/data`` from the
    current folder, and ``../shared/data`` beside the repository holding this package.

    Returns
    -------
    folder : pathlib.Path or None

    Examples
    --------
    >>> from sklearn_micro.datasets import data_home
    >>> folder = data_home()
    >>> folder is None or folder.is_dir()
    True
    """
    for _, folder in _data_candidates():
        if folder.is_dir():
            return folder.resolve()
    return None


def _data_file(path, relative: str, loader: str) -> Path:
    if path is None:
        home = data_home()
        if home is None:
            looked = "; ".join(f"{how}: {str(folder)!r}" for how, folder in _data_candidates())
            raise FileNotFoundError(
                f"{loader} found no data folder. It looked at {looked}. Set SKLEARN_MICRO_DATA "
                f"to the folder holding {relative!r}, or pass path=."
            )
        path = home / relative
    path = Path(path)
    if path.is_dir():
        for candidate in (path / relative, path / Path(relative).name):
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(f"{loader} found no {relative!r} in the folder {str(path)!r}.")
    if not path.is_file():
        raise FileNotFoundError(f"{loader} found no file at {str(path)!r}.")
    return path


def _positive(value, name: str):
    if not isinstance(value, Real) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{name} must be a positive number; got {value!r}.")
    return int(value) if value == int(value) else float(value)


def _read_all(src: _Source, kinds: dict[str, str]) -> dict[str, np.ndarray]:
    parts: dict[str, list] = {name: [] for name in kinds}
    for _, batch in _iter_batches(src, kinds, _BATCH_ROWS):
        for name in kinds:
            parts[name].append(batch[name])
    return {name: np.concatenate(p) for name, p in parts.items()}


def load_higgs(
    path: str | os.PathLike | None = None,
    *,
    chunk_hours: float = 1,
    kinds: tuple[str, ...] = _HIGGS_KINDS,
    as_frame: bool = False,
):
    """Load the Higgs Twitter activity log: users retweeting, mentioning or replying to users.

    SNAP's ``higgs-activity_time.txt.gz`` (De Domenico et al., Scientific Reports 3, 2980,
    2013): 563,069 rows ``userA userB unix_seconds kind`` from 2012-07-01 to 2012-07-07. A
    row is the engagement of user ``userA`` with item ``userB`` (the author engaged with).

    Parameters
    ----------
    path : str, os.PathLike or None
        The file, or a folder holding it (as ``higgs-twitter/higgs-activity_time.txt.gz`` or
        directly). By default the one in `data_home`.
    chunk_hours : float
        The length of a chunk in hours. Chunk 0 starts at the earliest row of the file (of
        any kind); numbers are contiguous, one-hour chunks give 168.
    kinds : tuple of str
        Which kinds of activity count as engagements, among ``"RT"`` (retweet), ``"MT"``
        (mention) and ``"RE"`` (reply).
    as_frame : bool
        Return a pandas DataFrame instead of an `EngagementLog`.

    Returns
    -------
    log : EngagementLog or pandas.DataFrame
        The engagements in time order.

    Raises
    ------
    FileNotFoundError
        If there is no file, saying where it was looked for.

    Examples
    --------
    >>> from sklearn_micro.datasets import load_higgs
    >>> log = load_higgs(chunk_hours=6, kinds=("RT",))  # doctest: +SKIP
    >>> len(log), log.chunk.max() + 1  # doctest: +SKIP
    (354930, 28)
    """
    chunk_hours = _positive(chunk_hours, "chunk_hours")
    if isinstance(kinds, str):
        kinds = (kinds,)
    kinds = tuple(kinds)
    unknown = [k for k in kinds if k not in _HIGGS_KINDS]
    if not kinds or unknown:
        raise ValueError(
            f"kinds must be a non-empty selection of {list(_HIGGS_KINDS)}; got {list(kinds)}."
        )
    file = _data_file(path, _HIGGS_FILE, "load_higgs")
    src = _source(file, sep=" ", names=("user_a", "user_b", "time", "kind"))
    cols = _read_all(src, {"user_a": "int", "user_b": "int", "time": "int", "kind": "str"})
    chunk = _to_chunks(cols["time"], int(cols["time"].min()), _positive(chunk_hours * 3600, ""))
    keep = np.flatnonzero(np.isin(cols["kind"], np.array(kinds, dtype=object)))
    keep = keep[np.argsort(cols["time"][keep], kind="stable")]
    return _as_output(cols["user_a"][keep], cols["user_b"][keep], chunk[keep], as_frame)


def load_movielens(
    path: str | os.PathLike | None = None,
    *,
    chunk_days: float = 30,
    min_rating: float | None = None,
    as_frame: bool = False,
):
    """Load the MovieLens ``ml-latest-small`` ratings as an engagement log.

    100,836 ratings of 9,724 movies by 610 users, 1996 to 2018 (Harper and Konstan, ACM TiiS
    5(4), 2015). A rating is an engagement of the user with the movie.

    Parameters
    ----------
    path : str, os.PathLike or None
        ``ratings.csv``, or a folder holding it (as ``movielens-latest-small/ratings.csv`` or
        directly). By default the one in `data_home`.
    chunk_days : float
        The length of a chunk in days. Chunk 0 starts at the earliest rating; numbers are
        contiguous, periods without ratings have no rows.
    min_rating : float or None
        Keep only ratings at or above this; by default all of them.
    as_frame : bool
        Return a pandas DataFrame instead of an `EngagementLog`.

    Returns
    -------
    log : EngagementLog or pandas.DataFrame
        The engagements in time order.

    Raises
    ------
    FileNotFoundError
        If there is no file, saying where it was looked for.

    Examples
    --------
    >>> from sklearn_micro.datasets import load_movielens
    >>> log = load_movielens(min_rating=4)  # doctest: +SKIP
    >>> len(log)  # doctest: +SKIP
    48580
    """
    chunk_days = _positive(chunk_days, "chunk_days")
    if min_rating is not None and (
        not isinstance(min_rating, Real) or isinstance(min_rating, bool) or np.isnan(min_rating)
    ):
        raise ValueError(f"min_rating must be a number or None; got {min_rating!r}.")
    file = _data_file(path, _MOVIELENS_FILE, "load_movielens")
    src = _source(file)
    cols = _read_all(
        src, {"userId": "int", "movieId": "int", "rating": "float", "timestamp": "int"}
    )
    time = cols["timestamp"]
    chunk = _to_chunks(time, int(time.min()), _positive(chunk_days * 86400, ""))
    keep = np.arange(time.size) if min_rating is None else np.flatnonzero(
        cols["rating"] >= min_rating
    )
    keep = keep[np.argsort(time[keep], kind="stable")]
    return _as_output(cols["userId"][keep], cols["movieId"][keep], chunk[keep], as_frame)


# --------------------------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------------------------

_USER_DEGREE_SIGMA = 1.2  # spread of log user degrees


def _clipped_lognormal_mean(mu: float, sigma: float, lo: float, hi: float) -> float:
    a = (np.log(lo) - mu) / sigma
    b = (np.log(hi) - mu) / sigma
    inside = np.exp(mu + sigma**2 / 2) * (ndtr(b - sigma) - ndtr(a - sigma))
    return float(lo * ndtr(a) + inside + hi * (1 - ndtr(b)))


def _lognormal_location(mean: float, sigma: float, lo: float, hi: float) -> float:
    """``mu`` such that a lognormal clipped to [lo, hi] has the given mean."""
    left, right = np.log(lo) - 12 * sigma, np.log(hi) + 12 * sigma
    for _ in range(200):
        mid = (left + right) / 2
        if _clipped_lognormal_mean(mid, sigma, lo, hi) < mean:
            left = mid
        else:
            right = mid
    return (left + right) / 2


def _capped_shares(total: int, weights: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Split ``total`` units in proportion to ``weights``, at most ``caps[k]`` to ``k``."""
    given = np.zeros(weights.shape[0], np.int64)
    spare = caps.astype(np.int64).copy()
    while total > 0:
        open_ = (spare > 0) & (weights > 0)
        if not open_.any():
            break
        w = np.where(open_, weights, 0).astype(np.float64)
        share = total * w / w.sum()
        give = np.minimum(np.floor(share).astype(np.int64), spare)
        if give.sum() == 0:
            order = np.argsort(-(share - np.floor(share)) - open_, kind="stable")
            give[order[: min(total, int(open_.sum()))]] = 1
        given += give
        spare -= give
        total -= int(give.sum())
    return given


@dataclass
class _Users:
    """The planted user side: degrees and sparse interest distributions (CSR rows)."""

    degree: np.ndarray
    indptr: np.ndarray
    interest: np.ndarray
    theta: np.ndarray
    cum: np.ndarray  # cumulative theta within the row, for inverse-CDF draws
    max_size: int


def _draw_supports(rng, sizes: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """For each user, ``sizes[u]`` distinct interests drawn in proportion to ``weights``."""
    n_interests = weights.shape[0]
    rows = np.repeat(np.arange(sizes.shape[0]), sizes)
    cum = np.cumsum(weights) / weights.sum()

    def draw(n):
        return np.minimum(np.searchsorted(cum, rng.random(n), side="right"), n_interests - 1)

    interest = draw(rows.shape[0])
    for attempt in range(101):
        order = np.lexsort((interest, rows))
        a, r = interest[order], rows[order]
        same = (a[1:] == a[:-1]) & (r[1:] == r[:-1])
        if not same.any():
            break
        redo = order[1:][same]
        if attempt < 100:
            interest[redo] = draw(redo.shape[0])
        else:
            indptr = np.concatenate([[0], np.cumsum(sizes)])
            for u in np.unique(rows[redo]):
                interest[indptr[u] : indptr[u + 1]] = rng.choice(
                    n_interests, size=sizes[u], replace=False, p=weights / weights.sum()
                )
    return interest[np.lexsort((interest, rows))]


def _draw_users(rng, n_users, n_interests, interests_per_user, alpha, user_degree, mean_degree):
    lo, hi = user_degree
    if lo == hi:
        degree = np.full(n_users, lo, np.int64)
    else:
        mu = _lognormal_location(mean_degree, _USER_DEGREE_SIGMA, lo, hi)
        draws = np.floor(rng.lognormal(mu, _USER_DEGREE_SIGMA, n_users) + 0.5)
        degree = np.clip(draws, lo, hi).astype(np.int64)
    if isinstance(interests_per_user, tuple):
        a, b = interests_per_user
        sizes = rng.integers(a, min(b, n_interests) + 1, size=n_users)
    else:
        sizes = 1 + rng.poisson(interests_per_user - 1, size=n_users)
    sizes = np.minimum(sizes, n_interests).astype(np.int64)
    weights = rng.gamma(1.0, size=n_interests)
    interest = _draw_supports(rng, sizes, weights)
    indptr = np.concatenate([[0], np.cumsum(sizes)])
    rows = np.repeat(np.arange(n_users), sizes)
    g = rng.gamma(alpha, size=rows.shape[0])
    total = np.add.reduceat(g, indptr[:-1])
    flat = total[rows] <= 0
    g[flat] = 1.0
    total = np.add.reduceat(g, indptr[:-1])
    theta = g / total[rows]
    start = np.cumsum(theta) - theta
    cum = np.cumsum(theta) - start[indptr[:-1]][rows]
    cum[indptr[1:] - 1] = 1.0
    return _Users(degree, indptr, interest, theta, cum, int(sizes.max()))


def _draw_interests(rng, users: _Users, who: np.ndarray) -> np.ndarray:
    """One interest per engagement of the users ``who``, from their theta."""
    lo = users.indptr[who]
    last = users.indptr[who + 1] - 1
    u = rng.random(who.shape[0])
    if users.max_size > 8:
        key = np.repeat(np.arange(users.degree.shape[0]), np.diff(users.indptr)) + users.cum
        pos = np.clip(np.searchsorted(key, who + u, side="right"), lo, last)
        return users.interest[pos]
    pos = lo.copy()
    for j in range(users.max_size - 1):
        pos += (lo + j < last) & (users.cum[np.minimum(lo + j, last)] <= u)
    return users.interest[pos]


def _rehome(users: _Users, who, served, demand) -> np.ndarray:
    """For engagements whose interest has no live item: the user's likeliest served interest,
    else the most engaged served interest."""
    lo, hi = users.indptr[who], users.indptr[who + 1]
    sizes = hi - lo
    group = np.repeat(np.arange(who.shape[0]), sizes)
    entry = np.repeat(lo - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes) + np.arange(
        group.shape[0]
    )
    score = np.where(served[users.interest[entry]], users.theta[entry], -1.0)
    order = np.lexsort((-score, group))
    first = order[np.concatenate([[0], np.cumsum(sizes)[:-1]])]
    fallback = int(np.argmax(np.where(served, demand, -1)))
    return np.where(score[first] >= 0, users.interest[entry[first]], fallback)


class _Items:
    """The items alive at the current chunk: id, interest, birth, planted lifetime, peak age."""

    def __init__(self):
        empty = np.empty(0, np.int64)
        self.id, self.interest, self.birth, self.life, self.peak = (empty,) * 5

    def keep(self, rows):
        for name in ("id", "interest", "birth", "life", "peak"):
            setattr(self, name, getattr(self, name)[rows])

    def add(self, **columns):
        for name, values in columns.items():
            setattr(self, name, np.concatenate([getattr(self, name), values]))


def _generate(
    n_users, n_items, n_chunks, n_interests, interests_per_user, item_lifetime, alpha, beta,
    user_degree, n_engagements, min_item_degree, random_state,
):
    """Draw the log chunk by chunk.

    Yields first the planted `_Users` (after checking the parameters), then for each chunk
    ``(chunk, user, item, new, lived_on)``: the chunk's engagements sorted by user, the
    columns of the items born in it, and the ids of items whose life was stretched to it.
    """
    if isinstance(interests_per_user, (tuple, list)):
        if (
            len(interests_per_user) != 2
            or not all(isinstance(v, Integral) for v in interests_per_user)
            or not 1 <= interests_per_user[0] <= interests_per_user[1]
        ):
            raise ValueError(
                f"interests_per_user must be a range (low, high) of integers with "
                f"1 <= low <= high, or a mean >= 1; got {interests_per_user!r}."
            )
        if interests_per_user[0] > n_interests:
            raise ValueError(
                f"interests_per_user low bound must be at most n_interests={n_interests}; "
                f"got {interests_per_user!r}."
            )
        interests_per_user = (int(interests_per_user[0]), int(interests_per_user[1]))
    if (
        len(user_degree) != 2
        or not all(isinstance(v, Integral) for v in user_degree)
        or not 1 <= user_degree[0] <= user_degree[1]
    ):
        raise ValueError(
            f"user_degree must be a range (low, high) of integers with 1 <= low <= high; got "
            f"{user_degree!r}."
        )
    lo, hi = int(user_degree[0]), int(user_degree[1])
    mean_degree = np.sqrt(lo * hi) if n_engagements is None else n_engagements / n_users
    if lo < hi and not lo < mean_degree < hi:
        raise ValueError(
            f"n_engagements / n_users must lie strictly within user_degree=({lo}, {hi}); got "
            f"n_engagements={n_engagements} for n_users={n_users}."
        )
    if isinstance(random_state, np.random.Generator):
        rng = random_state
    else:
        seed = check_random_state(random_state).randint(0, 2**31 - 1, size=4)
        rng = np.random.default_rng(seed)

    users = _draw_users(
        rng, n_users, n_interests, interests_per_user, alpha, (lo, hi), mean_degree
    )
    total = int(users.degree.sum())
    m = int(min_item_degree)
    if n_items * m > total:
        raise ValueError(
            f"n_items * min_item_degree = {n_items * m} engagements are needed, but the users "
            f"drawn make {total}; lower n_items or min_item_degree, or raise n_users or "
            f"n_engagements."
        )
    yield users

    remaining = users.degree.copy()
    alive = _Items()
    latest = _Items()  # the item born last in each interest; id -1 where none was
    latest.add(id=np.full(n_interests, -1), interest=np.arange(n_interests),
               birth=np.zeros(n_interests, np.int64), life=np.ones(n_interests, np.int64),
               peak=np.zeros(n_interests, np.int64))
    born = served = 0
    for t in range(n_chunks):
        last = t == n_chunks - 1
        counts = remaining if last else rng.binomial(remaining, 1.0 / (n_chunks - t))
        remaining = remaining - counts
        active = np.flatnonzero(counts)
        who = np.repeat(active, counts[active])
        z = _draw_interests(rng, users, who)
        demand = np.bincount(z, minlength=n_interests)

        alive.keep(np.flatnonzero(alive.birth + alive.life > t))
        n_alive = np.bincount(alive.interest, minlength=n_interests)
        caps = demand // m
        if last:
            target = n_items - born
        else:
            target = int(np.ceil(n_items * (served + who.shape[0]) / total)) - born
            target = min(max(target, 0), n_items - born)
        births = np.zeros(n_interests, np.int64)
        needy = np.flatnonzero((demand > 0) & (n_alive == 0) & (caps > 0))
        needy = needy[np.argsort(-demand[needy], kind="stable")][: n_items - born]
        births[needy] = 1
        births += _capped_shares(max(target - int(births.sum()), 0), demand, caps - births)
        n_born = int(births.sum())
        if last and born + n_born < n_items:
            raise ValueError(
                f"Only {born + n_born} of n_items={n_items} items could be given "
                f"min_item_degree={m} engagements in a chunk: the chunks have too few "
                f"engagements per interest. Lower n_items, min_item_degree, n_interests or "
                f"n_chunks, or raise n_users or n_engagements."
            )
        new_interest = np.repeat(np.arange(n_interests), births)
        new_life = rng.geometric(1.0 / item_lifetime, size=n_born).astype(np.int64)
        new = dict(
            id=born + np.arange(n_born, dtype=np.int64),
            interest=new_interest,
            birth=np.full(n_born, t, np.int64),
            life=new_life,
            peak=np.floor(rng.random(n_born) * new_life).astype(np.int64),
        )
        alive.add(**new)
        born += n_born
        ends = np.cumsum(births)[births > 0] - 1
        for name in ("id", "birth", "life", "peak"):
            getattr(latest, name)[births > 0] = new[name][ends]

        served_interest = np.bincount(alive.interest, minlength=n_interests) > 0
        orphan = ~served_interest[z]
        revived = np.empty(0, np.int64)
        if orphan.any():
            if last:
                # no later chunk to move to: the interest's last item lives on to this chunk,
                # else the engagement goes to another interest
                lost = np.unique(z[orphan])
                lost = lost[latest.id[lost] >= 0]
                revived = latest.id[lost]
                alive.add(id=revived, interest=lost, birth=latest.birth[lost],
                          life=t - latest.birth[lost] + 1, peak=latest.peak[lost])
                served_interest[lost] = True
                orphan = ~served_interest[z]
                if orphan.any():
                    z[orphan] = _rehome(users, who[orphan], served_interest, demand)
                    moved = int(np.count_nonzero(orphan))
                    if moved > 0.01 * total:
                        warnings.warn(
                            f"{moved} of {total} engagements went to an interest outside "
                            f"their user's support: their interests never had an item. Raise "
                            f"n_items or lower n_interests for a log closer to the model.",
                            UserWarning,
                            stacklevel=3,
                        )
            else:
                remaining += np.bincount(who[orphan], minlength=n_users)
                who, z = who[~orphan], z[~orphan]
            demand = np.bincount(z, minlength=n_interests)

        # phi[k, t] ~ Dir(beta * trend): each live item's weight rises to its peak age and
        # decays to the end of its life
        order = np.argsort(alive.interest, kind="stable")
        alive.keep(order)
        age = t - alive.birth
        trend = np.where(
            age <= alive.peak,
            (age + 1) / (alive.peak + 1),
            (alive.life - age) / np.maximum(alive.life - alive.peak, 1),
        )
        weight = rng.gamma(beta * trend)
        mass = np.bincount(alive.interest, weights=weight, minlength=n_interests)
        flat = mass[alive.interest] <= 0
        weight[flat] = 1.0
        mass = np.bincount(alive.interest, weights=weight, minlength=n_interests)
        start = np.concatenate([[0], np.cumsum(np.bincount(alive.interest,
                                                           minlength=n_interests))])
        cum = np.cumsum(weight)
        cum = (cum - (cum - weight)[start[alive.interest]]) / mass[alive.interest]
        cum[start[1:][start[1:] > start[:-1]] - 1] = 1.0
        key = alive.interest + cum

        drawn_interest = np.repeat(np.arange(n_interests), demand - m * births)
        pos = np.searchsorted(key, drawn_interest + rng.random(drawn_interest.shape[0]),
                              side="right")
        pos = np.clip(pos, start[drawn_interest], start[drawn_interest + 1] - 1)
        slot_interest = np.concatenate([np.repeat(new_interest, m), drawn_interest])
        slot_item = np.concatenate([np.repeat(new["id"], m), alive.id[pos]])
        # slots go to the interest's engagements in random order (int16 keys sort by radix)
        small = np.int16 if n_interests < 2**15 else np.int64
        shuffle = rng.permutation(who.shape[0])
        item = np.empty(who.shape[0], np.int64)
        item[shuffle[np.argsort(z[shuffle].astype(small), kind="stable")]] = slot_item[
            np.argsort(slot_interest.astype(small), kind="stable")
        ]
        served += who.shape[0]
        yield t, who, item, new, revived


_GENERATOR_CONSTRAINTS = {
    "n_users": [Interval(Integral, 1, None, closed="left")],
    "n_items": [Interval(Integral, 1, None, closed="left")],
    "n_chunks": [Interval(Integral, 1, None, closed="left")],
    "n_interests": [Interval(Integral, 1, None, closed="left")],
    "interests_per_user": [tuple, list, Interval(Real, 1, None, closed="left")],
    "item_lifetime": [Interval(Real, 1, None, closed="left")],
    "alpha": [Interval(Real, 0, None, closed="neither")],
    "beta": [Interval(Real, 0, None, closed="neither")],
    "user_degree": [tuple, list],
    "n_engagements": [Interval(Integral, 1, None, closed="left"), None],
    "min_item_degree": [Interval(Integral, 1, None, closed="left")],
    "random_state": ["random_state", np.random.Generator],
}


@validate_params(
    {**_GENERATOR_CONSTRAINTS, "return_truth": ["boolean"]},
    prefer_skip_nested_validation=True,
)
def make_engagements(
    n_users: int = 1000,
    n_items: int = 1000,
    n_chunks: int = 20,
    n_interests: int = 10,
    *,
    interests_per_user: tuple[int, int] | float = (1, 3),
    item_lifetime: float = 2.5,
    alpha: float = 1.0,
    beta: float = 0.5,
    user_degree: tuple[int, int] = (1, 100),
    n_engagements: int | None = None,
    min_item_degree: int = 5,
    random_state=None,
    return_truth: bool = False,
):
    """Draw an engagement log from MiCRO's generative model with ephemeral items.

    The paper's model (its Table 2): each user has a distribution theta_u over a few of the
    `n_interests` interests; in chunk t each interest k has a distribution phi[k, t] over
    the items alive at t; a user's engagement draws an interest z from theta_u, then an item
    from phi[z, t].

    - Users: a total degree between the bounds of `user_degree`, heavy-tailed (a lognormal
      rounded and clipped to the bounds, so the upper bound collects the tail, as a cap
      does); a support of a few interests, drawn by interest popularity (itself drawn
      Dir(1)); ``theta_u ~ Dir(alpha)`` on the support. Each engagement falls in a chunk
      drawn uniformly, so a user is active in several chunks.
    - Items: each belongs to one interest, is born at a chunk and lives a geometric number
      of chunks (mean `item_lifetime`). Items are born where users engage: the births of a
      chunk follow the chunk's engagements, spread over interests by their demand.
    - ``phi[k, t] ~ Dir(beta * trend)`` over the items of interest k alive at t, the paper's
      item-specific prior: an item's trend rises linearly to a peak age drawn uniformly over
      its life, then decays. A small `beta` concentrates engagements on few items.
    - Item degrees: an item takes `min_item_degree` of its interest's engagements in the
      chunk it is born, the rest of the interest's engagements are drawn from phi. So every
      item 0..n_items-1 has at least `min_item_degree` engagements, and every user
      0..n_users-1 has exactly their degree.

    Engagements whose interest has no live item in their chunk (rare: an interest with too
    few engagements to give a new item its minimum) move to a later chunk. In the last
    chunk, the interest's latest item lives on to take them (its death is moved), and where
    the interest never had an item they go to the user's likeliest interest that has one,
    else to the busiest interest. A user may engage the same item more than once, as the
    model draws with replacement.

    Parameters
    ----------
    n_users : int
        Users, with ids ``0..n_users-1``.
    n_items : int
        Items, with ids ``0..n_items-1`` in order of birth.
    n_chunks : int
        Time chunks ``0..n_chunks-1``.
    n_interests : int
        Interests K.
    interests_per_user : (int, int) or float
        The size of a user's support: drawn uniformly from a range ``(low, high)``, or, given
        a number, ``1 + Poisson(mean - 1)``; at most `n_interests`.
    item_lifetime : float
        The mean number of chunks an item lives (at least 1).
    alpha : float
        The concentration of ``theta_u ~ Dir(alpha)`` on the user's support.
    beta : float
        The concentration of ``phi[k, t]``.
    user_degree : (int, int)
        The smallest and largest number of engagements of a user.
    n_engagements : int or None
        The expected number of engagements; it sets the mean user degree, which must lie
        within `user_degree`. By default the mean degree is the geometric mean of the
        bounds of `user_degree` (10 for (1, 100)).
    min_item_degree : int
        The least number of engagements of an item. ``n_items * min_item_degree`` must not
        exceed the number of engagements; keeping it under half of them leaves room.
    random_state : int, RandomState instance, Generator or None
        Seeds the draws; an int gives the same log every time.
    return_truth : bool
        Also return what was planted.

    Returns
    -------
    log : EngagementLog
        The engagements, sorted by chunk, then by user.
    truth : Bunch
        Only with ``return_truth=True``:

        - ``user_interests``: sparse CSR matrix (n_users, n_interests) of theta,
        - ``user_degree``: (n_users,) the planted degrees,
        - ``item_interest``: (n_items,) each item's interest,
        - ``item_birth``, ``item_death``: (n_items,) the first and the last chunk an item
          is alive (its death is cut at the last chunk).

    See Also
    --------
    iter_engagements : The same log, one chunk at a time.

    Examples
    --------
    >>> from sklearn_micro.datasets import make_engagements
    >>> log, truth = make_engagements(200, 100, 10, 5, random_state=0, return_truth=True)
    >>> log.shape[0] >= 100 * 5
    True
    >>> bool((truth.item_birth[log.item] <= log.chunk).all())
    True
    >>> truth.user_interests.shape
    (200, 5)
    """
    generator = _generate(
        n_users, n_items, n_chunks, n_interests, interests_per_user, item_lifetime, alpha,
        beta, user_degree, n_engagements, min_item_degree, random_state,
    )
    users = next(generator)
    parts = {"user": [], "item": [], "chunk": []}
    interest, birth, life, revived = [], [], [], []
    for t, who, item, new, lived_on in generator:
        parts["user"].append(who)
        parts["item"].append(item)
        parts["chunk"].append(np.full(who.shape[0], t, np.int64))
        interest.append(new["interest"])
        birth.append(new["birth"])
        life.append(new["life"])
        revived.append((t, lived_on))
    log = EngagementLog(*(np.concatenate(parts[c]) for c in COLUMNS))
    if not return_truth:
        return log
    birth = np.concatenate(birth)
    death = np.minimum(birth + np.concatenate(life) - 1, n_chunks - 1)
    for t, ids in revived:
        death[ids] = t
    truth = Bunch(
        user_interests=sparse.csr_matrix(
            (users.theta, users.interest, users.indptr), shape=(n_users, n_interests)
        ),
        user_degree=users.degree,
        item_interest=np.concatenate(interest),
        item_birth=birth,
        item_death=death,
    )
    return log, truth


@validate_params(_GENERATOR_CONSTRAINTS, prefer_skip_nested_validation=True)
def iter_engagements(
    n_users: int = 1000,
    n_items: int = 1000,
    n_chunks: int = 20,
    n_interests: int = 10,
    *,
    interests_per_user: tuple[int, int] | float = (1, 3),
    item_lifetime: float = 2.5,
    alpha: float = 1.0,
    beta: float = 0.5,
    user_degree: tuple[int, int] = (1, 100),
    n_engagements: int | None = None,
    min_item_degree: int = 5,
    random_state=None,
) -> Iterator[EngagementLog]:
    """Draw an engagement log as `make_engagements` does, one chunk at a time.

    Memory holds the users (their degrees and sparse interests), the items alive and one
    chunk's engagements, so it does not grow with `n_chunks`: the paper's scale (6.7M users,
    13M items, 283M engagements in 192 chunks) streams through. With the same parameters,
    the chunks concatenated are `make_engagements`' log. Parameters are those of
    `make_engagements`.

    Yields
    ------
    log : EngagementLog
        One chunk's engagements, sorted by user; chunks come in order, and a chunk without
        engagements is left out.

    Examples
    --------
    >>> from sklearn_micro.datasets import iter_engagements
    >>> for log in iter_engagements(100, 40, 3, 4, random_state=0):
    ...     print(log.chunk[0], len(log) > 0)
    0 True
    1 True
    2 True
    """
    generator = _generate(
        n_users, n_items, n_chunks, n_interests, interests_per_user, item_lifetime, alpha,
        beta, user_degree, n_engagements, min_item_degree, random_state,
    )
    next(generator)  # validates the parameters before the first chunk is asked for
    return (
        EngagementLog(who, item, np.full(who.shape[0], t, np.int64))
        for t, who, item, _, _ in generator
        if who.shape[0]
    )
