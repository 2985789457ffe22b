"""Readers and loaders of sklearn_micro.datasets (the generator: test_generator.py)."""

import bz2
import gzip
import sys
import zipfile

import numpy as np
import pytest

from sklearn_micro._log import EngagementLog, check_log
from sklearn_micro.datasets import (
    _files,
    data_home,
    iter_log_chunks,
    load_higgs,
    load_movielens,
    read_log,
    read_twitter_fave,
    read_twitter_follow,
)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pd = pytest.importorskip("pandas")

FAVE_HEADER = "user_index, tweet_index, time_chunk"
FOLLOW_HEADER = "user_index, author_index, time_chunk"
# 64-bit ids, as the paper's files have; sorted by chunk, as they are
USERS = np.array([3, 1, 3, 2**40, 7, 1, 3], dtype=np.int64)
ITEMS = np.array([10, 11, 2**62, 10, 12, 13, 14], dtype=np.int64)
CHUNKS = np.array([1, 1, 1, 2, 4, 4, 192], dtype=np.int64)


def _csv_text(header, users=USERS, items=ITEMS, chunks=CHUNKS):
    rows = (f"{u}, {i}, {c}" for u, i, c in zip(users, items, chunks, strict=True))
    return header + "\n" + "\n".join(rows) + "\n"


@pytest.fixture(params=["pyarrow", "numpy"])
def csv_engine(request, monkeypatch):
    """Run a CSV test with pyarrow's parser and with the numpy one used without pyarrow."""
    if request.param == "numpy":
        monkeypatch.setattr(_files, "_has_pyarrow", lambda: False)
    return request.param


def _write(path, text):
    path.write_text(text)
    return path


def _zip(path, text, member="data.csv"):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, text)
    return path


def _assert_log(log, users=USERS, items=ITEMS, chunks=CHUNKS):
    assert isinstance(log, EngagementLog)
    for got, want in ((log.user, users), (log.item, items), (log.chunk, chunks)):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------


def test_read_twitter_fave_csv_with_spaces_after_commas(csv_engine, tmp_path):
    path = _write(tmp_path / "fave.csv", _csv_text(FAVE_HEADER))
    _assert_log(read_twitter_fave(path))
    check_log(read_twitter_fave(path))


def test_read_twitter_follow_zipped_csv(csv_engine, tmp_path):
    path = _zip(tmp_path / "follow.zip", _csv_text(FOLLOW_HEADER))
    _assert_log(read_twitter_follow(path))
    _assert_log(read_twitter_follow(str(path), batch_rows=2))


def test_read_gzipped_csv_and_plain_header(csv_engine, tmp_path):
    path = tmp_path / "log.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write(_csv_text("u,i,c"))
    _assert_log(read_log(path, user="u", item="i", chunk="c"))


@pytest.mark.parametrize("reader, item", [(read_twitter_fave, "tweet_index"),
                                          (read_twitter_follow, "author_index")])
def test_read_parquet_in_batches(tmp_path, reader, item):
    path = tmp_path / "log.parquet"
    pq.write_table(
        pa.table({"user_index": USERS, item: ITEMS, "time_chunk": CHUNKS.astype(np.int32)}),
        path, row_group_size=3,
    )
    _assert_log(reader(path, batch_rows=2))


def test_read_log_as_frame(csv_engine, tmp_path):
    path = _write(tmp_path / "fave.csv", _csv_text(FAVE_HEADER))
    frame = read_twitter_fave(path, as_frame=True)
    assert list(frame.columns) == ["user", "item", "chunk"]
    assert all(str(t) == "int64" for t in frame.dtypes)
    np.testing.assert_array_equal(frame["item"].to_numpy(), ITEMS)
    _assert_log(check_log(frame))


def test_read_log_multi_batch_matches_single_batch(csv_engine, tmp_path):
    rng = np.random.default_rng(0)
    n = 3000
    users, items = rng.integers(0, 2**50, n), rng.integers(0, 100, n)
    chunks = np.sort(rng.integers(0, 30, n))
    path = _write(tmp_path / "big.csv", _csv_text("user,item,chunk", users, items, chunks))
    _assert_log(read_log(path, batch_rows=50), users, items, chunks)


@pytest.mark.parametrize(
    "bad_line, shown",
    [
        ("5, abc, 9", "'abc'"),
        ("5, NaN, 9", "'NaN'"),
        ("5, 6.5, 9", "'6.5'"),
        ("5, , 9", "missing"),
        ("5, 6", "2 fields"),
        ("5, 99999999999999999999, 9", "int64"),
    ],
)
@pytest.mark.parametrize("batch_rows", [1_000_000, 7])
def test_bad_row_names_file_line_and_value(csv_engine, tmp_path, bad_line, shown, batch_rows):
    good = "".join(f"{j}, {j + 100}, {j // 10}\n" for j in range(60))
    # header is line 1, 60 good rows, a blank line (skipped, but counted), then the bad one
    text = FAVE_HEADER + "\n" + good + "\n" + bad_line + "\n1, 2, 9\n"
    for path in (_write(tmp_path / "fave.csv", text), _zip(tmp_path / "fave.zip", text)):
        with pytest.raises(ValueError, match=r"line 63\b") as info:
            read_twitter_fave(path, batch_rows=batch_rows)
        assert path.name in str(info.value)
        assert shown in str(info.value)


def test_bad_row_in_parquet_names_row(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"user": [1, 2, None], "item": [1, 2, 3], "chunk": [0, 0, 1]}),
                   path)
    with pytest.raises(ValueError, match=r"bad.parquet'?, row 3: column 'user' is missing"):
        read_log(path)


def test_parquet_float_and_string_ids(tmp_path):
    path = tmp_path / "mixed.parquet"
    pq.write_table(pa.table({"user": [1.0, 2.0], "item": [" 7", "8"], "chunk": [0, 1]}), path)
    _assert_log(read_log(path), [1, 2], [7, 8], [0, 1])
    pq.write_table(pa.table({"user": [1.5, 2.0], "item": [7, 8], "chunk": [0, 1]}), path)
    with pytest.raises(ValueError, match=r"row 1: column 'user' is not an integer"):
        read_log(path)


def test_missing_column_lists_columns(csv_engine, tmp_path):
    path = _write(tmp_path / "log.csv", "user, product, chunk\n1, 2, 3\n")
    with pytest.raises(ValueError, match=r"no column 'item'.*\['user', 'product', 'chunk'\]"):
        read_log(path)
    parquet = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user": [1], "product": [2], "chunk": [3]}), parquet)
    with pytest.raises(ValueError, match=r"no column 'item'.*\['user', 'product', 'chunk'\]"):
        read_log(parquet)


def test_missing_file(tmp_path):
    path = tmp_path / "absent.csv"
    with pytest.raises(FileNotFoundError, match="absent.csv"):
        read_log(path)
    with pytest.raises(FileNotFoundError, match="absent.csv"):
        iter_log_chunks(path)


def test_time_to_chunks_keeps_empty_periods(csv_engine, tmp_path):
    # hours 0, 0, 3 and 5 after the first timestamp: chunks 1, 2 and 4 are empty
    t0 = 1_341_100_972
    times = [t0 + 3 * 3600 + 5, t0, t0 + 59, t0 + 5 * 3600]
    text = "who,what,when\n" + "".join(f"{j},{j},{t}\n" for j, t in enumerate(times))
    path = _write(tmp_path / "log.csv", text)
    log = read_log(path, user="who", item="what", time="when", chunk_length=3600)
    np.testing.assert_array_equal(log.chunk, [3, 0, 0, 5])
    log = read_log(path, user="who", item="what", time="when", chunk_length=1800.0,
                   origin=t0 - 1800)
    np.testing.assert_array_equal(log.chunk, [7, 1, 1, 11])
    with pytest.raises(ValueError, match=r"line 3: time 1341100972 is before origin"):
        read_log(path, user="who", item="what", time="when", chunk_length=60, origin=t0 + 1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"chunk": "c", "time": "t", "chunk_length": 1}, "not both"),
        ({"time": "t"}, "chunk_length must be a positive number"),
        ({"time": "t", "chunk_length": 0}, "got 0"),
        ({"chunk_length": 60}, "apply to time= only"),
        ({"batch_rows": 0}, "batch_rows must be a positive integer; got 0"),
        ({"sep": ";;"}, "sep must be a single character"),
    ],
)
def test_read_log_parameter_errors(tmp_path, kwargs, match):
    path = _write(tmp_path / "log.csv", "user,item,c,t\n1,2,3,4\n")
    with pytest.raises(ValueError, match=match):
        read_log(path, **kwargs)


def test_iter_log_chunks_across_batches(csv_engine, tmp_path):
    rng = np.random.default_rng(1)
    n = 500
    chunks = np.sort(rng.choice([1, 2, 3, 7, 8, 192], n))
    users, items = rng.integers(0, 40, n), rng.integers(0, 2**60, n)
    path = _zip(tmp_path / "fave.zip", _csv_text(FAVE_HEADER, users, items, chunks))
    got = list(iter_log_chunks(path, user="user_index", item="tweet_index",
                               chunk="time_chunk", batch_rows=13))
    assert [c for c, _ in got] == [1, 2, 3, 7, 8, 192]
    for chunk, log in got:
        rows = chunks == chunk
        _assert_log(log, users[rows], items[rows], chunks[rows])
    frames = list(iter_log_chunks(path, user="user_index", item="tweet_index",
                                  chunk="time_chunk", as_frame=True))
    assert sum(len(f) for _, f in frames) == n


def test_iter_log_chunks_time_origin_is_first_row(csv_engine, tmp_path):
    text = "user,item,t\n1,1,100\n2,2,150\n3,3,400\n"
    path = _write(tmp_path / "log.csv", text)
    got = [(c, log.user.tolist()) for c, log in
           iter_log_chunks(path, time="t", chunk_length=100)]
    assert got == [(0, [1, 2]), (3, [3])]


@pytest.mark.parametrize("batch_rows", [1_000_000, 2])
def test_iter_log_chunks_refuses_going_back(csv_engine, tmp_path, batch_rows):
    path = _write(tmp_path / "log.csv", "user,item,chunk\n1,1,0\n1,2,1\n2,3,2\n4,5,1\n")
    chunks = iter_log_chunks(path, batch_rows=batch_rows)
    with pytest.raises(ValueError, match=r"line 5: chunk 1 comes after chunk 2"):
        list(chunks)


def test_missing_optional_dependency_names_the_extra(tmp_path, monkeypatch):
    path = _write(tmp_path / "log.csv", "user,item,chunk\n1,2,3\n")
    table = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user": [1], "item": [2], "chunk": [3]}), table)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    # CSV needs no pyarrow; Parquet does
    _assert_log(read_log(path), [1], [2], [3])
    with pytest.raises(ImportError, match=r'pip install "sklearn-micro\[data\]"'):
        read_log(table)
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r'pip install "sklearn-micro\[data\]"'):
        read_log(path, as_frame=True)


# --------------------------------------------------------------------------------------------
# The real logs
# --------------------------------------------------------------------------------------------

needs_data = pytest.mark.skipif(
    data_home() is None,
    reason="no data folder: set SKLEARN_MICRO_DATA or put the logs in ../shared/data",
)


@needs_data
def test_load_higgs():
    log = load_higgs()
    assert len(log) == 563_069
    assert log.chunk.min() == 0 and log.chunk.max() == 167
    assert np.all(np.diff(log.chunk) >= 0)
    assert np.unique(log.user).shape[0] == 279_379
    retweets = load_higgs(data_home(), chunk_hours=6, kinds=("RT",), as_frame=True)
    assert len(retweets) == 354_930 and retweets["chunk"].max() == 27


@needs_data
def test_load_movielens():
    log = load_movielens()
    assert len(log) == 100_836
    assert np.unique(log.user).shape[0] == 610 and np.unique(log.item).shape[0] == 9_724
    assert log.chunk.min() == 0 and np.all(np.diff(log.chunk) >= 0)
    liked = load_movielens(data_home() / "movielens-latest-small", min_rating=4, chunk_days=7)
    assert 0 < len(liked) < len(log) and liked.chunk.max() > log.chunk.max()


def test_loaders_say_where_they_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("SKLEARN_MICRO_DATA", str(tmp_path / "nowhere"))
    assert data_home() is None
    with pytest.raises(FileNotFoundError, match="SKLEARN_MICRO_DATA.*nowhere"):
        load_higgs()
    monkeypatch.setenv("SKLEARN_MICRO_DATA", str(tmp_path))
    assert data_home() == tmp_path.resolve()
    with pytest.raises(FileNotFoundError, match="ratings.csv"):
        load_movielens()
    with pytest.raises(ValueError, match="kinds must be a non-empty selection"):
        load_higgs(kinds=("LIKE",))


# --------------------------------------------------------------------------------------------
# Damaged and empty files
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix, opener",
                         [(".csv.gz", gzip.compress), (".csv.bz2", bz2.compress)])
def test_truncated_compressed_file_is_a_value_error(tmp_path, csv_engine, suffix, opener):
    text = "user,item,chunk\n" + "".join(f"{j},{7 * j},{j // 100}\n" for j in range(20000))
    packed = opener(text.encode())
    path = tmp_path / f"log{suffix}"
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(ValueError, match=r"log\.csv\.(gz|bz2)'? cannot be read to the end.*"
                                         r"truncated or corrupt"):
        read_log(path)
    # not a compressed file at all
    path.write_bytes(b"user,item,chunk\n1,2,3\n")
    with pytest.raises(ValueError, match="truncated or corrupt"):
        read_log(path)


def test_empty_raw_files_name_the_file(tmp_path, csv_engine):
    higgs = tmp_path / "higgs-activity_time.txt.gz"
    with gzip.open(higgs, "wb"):
        pass
    with pytest.raises(ValueError, match=r"load_higgs: .*higgs-activity_time.txt.gz'? holds no "
                                         r"rows"):
        load_higgs(higgs)
    ratings = _write(tmp_path / "ratings.csv", "userId,movieId,rating,timestamp\n")
    with pytest.raises(ValueError, match="load_movielens: .*ratings.csv'? holds no rows"):
        load_movielens(ratings)
