"""Engagement files: opening them, reading them batch by batch, and naming a bad row.

CSV files (plain, ``.gz``, ``.bz2`` or a ``.zip`` holding one CSV) are parsed by pyarrow when
it is installed and by numpy otherwise; Parquet files need pyarrow. A bad row is located
by a second, line-by-line pass, so the error names the file, the line and the value.
"""

from __future__ import annotations

import bz2
import gzip
import os
import re
import sys
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._log import COLUMNS, EngagementLog

_DATA_EXTRA = 'pip install "sklearn-micro[data]"'
_BATCH_ROWS = 1_000_000
_INT_FIELD = re.compile(r"[+-]?[0-9]+")


def _has_pyarrow() -> bool:
    try:
        import_pyarrow()
    except ImportError:
        return False
    return True


def import_pyarrow():
    try:
        import pyarrow  # noqa: F401
        import pyarrow.compute  # noqa: F401
        import pyarrow.csv  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"Reading Parquet files needs pyarrow, which is not installed: {_DATA_EXTRA}"
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


def file_source(path, *, sep: str = ",", names=None) -> _Source:
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
    pa = import_pyarrow()
    if src.compression == "zip":
        return _open_bytes(src)
    return pa.input_stream(str(src.path), compression=src.compression)


_READ_ERRORS = (OSError, EOFError, zlib.error, zipfile.BadZipFile)


@contextmanager
def _reading(src: _Source):
    """Turn what a truncated or corrupt file raises while it is read into a ValueError."""
    try:
        yield
    except _READ_ERRORS as exc:
        what = {"gzip": "gzip", "bz2": "bz2", "zip": "zip"}.get(src.compression, "")
        raise ValueError(
            f"{str(src.path)!r} cannot be read to the end: the {what} file is truncated or "
            f"corrupt ({type(exc).__name__}: {exc})." if what else
            f"{str(src.path)!r} cannot be read to the end ({type(exc).__name__}: {exc})."
        ) from exc


def _csv_names(src: _Source) -> list[str]:
    if src.names is not None:
        return list(src.names)
    with _reading(src), _open_bytes(src) as f:
        line = f.readline()
    if not line.strip():
        raise ValueError(f"{str(src.path)!r} is empty; a header line with column names is needed.")
    try:
        text = line.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{str(src.path)!r} does not start with a header line of UTF-8 text ({exc}); is "
            f"it a CSV file?"
        ) from None
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
    with _reading(src), _open_bytes(src) as f:
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
    names = _csv_names(src)
    _check_present(src, names, kinds)
    read = _iter_csv_arrow if _has_pyarrow() else _iter_csv_numpy
    with _reading(src):
        yield from read(src, names, kinds, batch_rows)


def _iter_csv_arrow(src: _Source, names: list[str], kinds: dict[str, str], batch_rows: int):
    pa = import_pyarrow()
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
            if next(_data_rows(src, 0), None) is None:
                return  # no data rows: pyarrow calls the file empty
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


def _iter_csv_numpy(src: _Source, names: list[str], kinds: dict[str, str], batch_rows: int):
    """The CSV reader without pyarrow: ``batch_rows`` data rows at a time through
    ``np.loadtxt``, with the same checks and error messages as the pyarrow reader."""
    dtypes = {"int": np.int64, "float": np.float64, "str": str}
    n_sep = len(names) - 1
    row0 = 0
    with _open_bytes(src) as f:
        if src.header:
            f.readline()
        while True:
            lines = []
            for raw in f:
                line = raw.rstrip(b"\r\n")
                if line:
                    lines.append(line.decode("utf-8", errors="replace"))
                    if len(lines) == batch_rows:
                        break
            if not lines:
                return
            if any(line.count(src.sep) != n_sep for line in lines):
                _raise_bad_csv_row(src, names, kinds, row0)
            out = {}
            for kind in dict.fromkeys(kinds.values()):
                wanted = [name for name, k in kinds.items() if k == kind]
                try:
                    # no comment character: a '#' is data to pyarrow's reader too
                    values = np.loadtxt(lines, delimiter=src.sep, quotechar='"',
                                        comments=None, dtype=dtypes[kind], ndmin=2,
                                        usecols=[names.index(name) for name in wanted])
                except ValueError as exc:
                    _raise_bad_csv_row(src, names, kinds, row0, exc)
                if kind == "str":
                    values = np.char.strip(values).astype(object)
                elif kind == "float" and not np.isfinite(values).all():
                    _raise_bad_csv_row(src, names, kinds, row0)
                for j, name in enumerate(wanted):
                    out[name] = np.ascontiguousarray(values[:, j])
            yield row0, out
            row0 += len(lines)


def _parquet_values(src: _Source, column, name: str, kind: str, row0: int) -> np.ndarray:
    pa = import_pyarrow()
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


def _parquet_file(src: _Source):
    pa = import_pyarrow()
    try:
        return pa.parquet.ParquetFile(src.path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"{str(src.path)!r} is not a readable Parquet file ({exc}).") from exc


def column_names(src: _Source) -> list[str]:
    """The column names of a CSV or Parquet source."""
    if src.kind == "parquet":
        return list(_parquet_file(src).schema_arrow.names)
    return _csv_names(src)


def _iter_parquet(src: _Source, kinds: dict[str, str], batch_rows: int):
    pf = _parquet_file(src)
    _check_present(src, pf.schema_arrow.names, kinds)
    row0 = 0
    for batch in pf.iter_batches(batch_size=batch_rows, columns=list(kinds)):
        yield row0, {
            name: _parquet_values(src, batch.column(name), name, kind, row0)
            for name, kind in kinds.items()
        }
        row0 += batch.num_rows


def _iter_batches(src: _Source, kinds: dict[str, str], batch_rows: int):
    """Yield ``(first_row, {column: ndarray})`` batch by batch; ints come as int64.

    When the batches end (or the reading stops), the memory pyarrow's pool still holds is
    handed back to the system: its allocator otherwise keeps what the batches used (about
    30 bytes per engagement read) for the rest of the process.
    """
    if src.kind == "parquet":
        return _released(_iter_parquet(src, kinds, batch_rows))
    return _released(_iter_csv(src, kinds, batch_rows))


def _released(batches):
    try:
        yield from batches
    finally:
        release_arrow_memory()


def release_arrow_memory() -> None:
    """Hand the memory pyarrow's pool keeps but no longer uses back to the system."""
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()

