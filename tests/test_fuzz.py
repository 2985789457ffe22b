"""Property-based fuzzing of what a user hands the package: logs, files and chunks.

Whatever comes in, the only exceptions allowed are ValueError and TypeError with a message,
and a refused ``partial_fit`` leaves the model exactly as it was.
"""

import bz2
import gzip
import pickle
import string

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from sklearn.pipeline import Pipeline

from sklearn_micro import MiCRO
from sklearn_micro._log import EngagementLog, check_log
from sklearn_micro.baselines import (
    ALSRecommender,
    ANNRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
)
from sklearn_micro.datasets import _files, iter_log_chunks, read_log
from sklearn_micro.utils.estimator_checks import FixedEmbedder, make_log, state_differences

ALLOWED = (ValueError, TypeError)
FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


def _assert_clear(exc):
    assert isinstance(exc, ALLOWED), f"{type(exc).__name__}: {exc}"
    assert str(exc).strip(), f"{type(exc).__name__} without a message"


def _assert_valid(log):
    assert isinstance(log, EngagementLog)
    assert log.user.shape == log.item.shape == log.chunk.shape
    assert log.chunk.dtype == np.int64
    for ids in (log.user, log.item):
        assert ids.dtype == np.int64 or ids.dtype.kind == "U"


# -- check_log -------------------------------------------------------------------------------

scalars = st.one_of(
    st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4), st.none(), st.booleans(), st.binary(max_size=3),
    st.complex_numbers(max_magnitude=10), st.lists(st.integers(), max_size=2),
)
dtypes = st.one_of(hnp.integer_dtypes(), hnp.unsigned_integer_dtypes(), hnp.floating_dtypes(),
                   hnp.boolean_dtypes(), hnp.complex_number_dtypes(),
                   hnp.unicode_string_dtypes(max_len=3), hnp.byte_string_dtypes(max_len=3),
                   hnp.datetime64_dtypes())
arrays = dtypes.flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3,
                                                                   max_side=5)))


@st.composite
def frames(draw):
    n = draw(st.integers(0, 6))
    columns = draw(st.lists(st.sampled_from(["user", "item", "chunk", "time", "x"]),
                            min_size=0, max_size=4, unique=True))
    data = {}
    for name in columns:
        kind = draw(st.sampled_from(["int", "uint", "float", "str", "object", "bool",
                                     "category", "string"]))
        if kind == "int":
            values = draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n))
            data[name] = pd.Series(values, dtype="int64")
        elif kind == "uint":
            values = draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n))
            data[name] = pd.Series(np.array(values, dtype=np.uint64))
        elif kind == "float":
            data[name] = pd.Series(draw(st.lists(st.floats(), min_size=n, max_size=n)),
                                   dtype="float64")
        elif kind == "str":
            data[name] = pd.Series(draw(st.lists(st.text(max_size=3), min_size=n, max_size=n)),
                                   dtype=object)
        elif kind == "object":
            data[name] = pd.Series(draw(st.lists(scalars, min_size=n, max_size=n)), dtype=object)
        elif kind == "bool":
            data[name] = pd.Series(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        elif kind == "category":
            data[name] = pd.Series(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)),
                                   dtype="category")
        else:
            values = draw(st.lists(st.one_of(st.text(max_size=3), st.none()), min_size=n,
                                   max_size=n))
            data[name] = pd.Series(values, dtype="string")
    return pd.DataFrame(data, index=range(n))


@FUZZ
@given(st.one_of(arrays, frames(), st.lists(st.lists(scalars, max_size=4), max_size=4),
                 scalars), st.booleans())
def test_check_log_returns_a_log_or_refuses_clearly(X, allow_empty):
    try:
        log = check_log(X, allow_empty=allow_empty)
    except Exception as exc:  # noqa: BLE001 - what was raised is the point
        _assert_clear(exc)
        return
    _assert_valid(log)
    assert allow_empty or len(log) > 0


# -- readers ---------------------------------------------------------------------------------

fields = st.one_of(
    st.integers(-(2**64), 2**64).map(str), st.sampled_from(["", " ", '"7"', "1e3", "NaN", "-",
                                                            "0x1f", "١٢", "\x00", "7 8"]),
    st.text(alphabet=string.printable, max_size=4),
)


@st.composite
def csv_texts(draw):
    header = draw(st.sampled_from(["user,item,chunk", "user, item, chunk", "chunk,item,user",
                                   "user,item", "user,item,chunk,extra", "", '"user","item",'
                                   '"chunk"', "\ufeffuser,item,chunk"]))
    lines = [header]
    for _ in range(draw(st.integers(0, 8))):
        n = draw(st.integers(0, 5))
        lines.append(",".join(draw(st.lists(fields, min_size=n, max_size=n))))
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    return ending.join(lines) + draw(st.sampled_from(["", ending]))


@FUZZ
@given(st.one_of(csv_texts(), st.binary(max_size=60).map(lambda b: b.decode("latin-1"))),
       st.sampled_from(["", ".gz", ".bz2", ".gz-cut"]), st.sampled_from(["pyarrow", "numpy"]),
       st.sampled_from([1, 3, 1000]))
def test_readers_return_a_log_or_refuse_clearly(tmp_path_factory, monkeypatch, text, packing,
                                                engine, batch_rows):
    if engine == "numpy":
        monkeypatch.setattr(_files, "_has_pyarrow", lambda: False)
    else:
        monkeypatch.setattr(_files, "_has_pyarrow", lambda: True)
    raw = text.encode("utf-8")
    path = tmp_path_factory.mktemp("fuzz") / f"log.csv{packing.replace('-cut', '')}"
    if packing == ".gz":
        raw = gzip.compress(raw)
    elif packing == ".bz2":
        raw = bz2.compress(raw)
    elif packing == ".gz-cut":
        raw = gzip.compress(raw)[: max(1, len(raw) // 2)]
    path.write_bytes(raw)
    for read in (lambda: read_log(path, batch_rows=batch_rows),
                 lambda: [log for _, log in iter_log_chunks(path, batch_rows=batch_rows)]):
        try:
            out = read()
        except Exception as exc:  # noqa: BLE001
            _assert_clear(exc)
            continue
        for log in out if isinstance(out, list) else [out]:
            _assert_valid(log)


def test_both_csv_engines_agree_on_fuzzed_files(tmp_path, monkeypatch):
    """The numpy reader gives what the pyarrow reader gives, or refuses what it refuses.

    One known difference: pyarrow reads a hexadecimal field such as ``0x1f`` as an integer
    (31), where the numpy reader refuses it (docs/bad_input.md says so).
    """

    @FUZZ
    @given(csv_texts())
    def check(text):
        assume("0x" not in text)
        path = tmp_path / "log.csv"
        path.write_text(text, encoding="utf-8")
        answers = []
        for has_pyarrow in (True, False):
            monkeypatch.setattr(_files, "_has_pyarrow", lambda v=has_pyarrow: v)
            try:
                log = read_log(path)
                answers.append(("log", log.user.tolist(), log.item.tolist(),
                                log.chunk.tolist()))
            except ALLOWED as exc:
                answers.append(("refused", type(exc).__name__))
        assert answers[0] == answers[1]

    check()


@pytest.mark.parametrize("row", ["#,0,0", "1,2,0 # a note", "# 1,2,0"])
def test_both_csv_engines_refuse_a_hash_alike(row, tmp_path, monkeypatch):
    """A '#' is data, not the start of a comment, to both readers (numpy's loadtxt would
    drop the row or its end): the same refusal, naming the row."""
    path = tmp_path / "log.csv"
    path.write_text(f"user,item,chunk\n{row}\n", encoding="utf-8")
    messages = []
    for has_pyarrow in (True, False):
        monkeypatch.setattr(_files, "_has_pyarrow", lambda v=has_pyarrow: v)
        with pytest.raises(ValueError, match="line 2") as info:
            read_log(path)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


# -- partial_fit -----------------------------------------------------------------------------

X_TRAIN, X_NEXT = make_log(7, as_frame=True)
FIRST = X_NEXT[X_NEXT.chunk == X_NEXT.chunk.min()].reset_index(drop=True)
SECOND = X_NEXT[X_NEXT.chunk > X_NEXT.chunk.min()].reset_index(drop=True)


def _micro():
    items = np.unique(X_TRAIN.item)
    return MiCRO(random_state=0).fit(X_TRAIN, item_interest=(items, items % 3))


FITTED = {
    "MiCRO": _micro().partial_fit(FIRST),
    "Popularity": PopularityRecommender(window=2).fit(X_TRAIN).partial_fit(FIRST),
    "RecentItems": RecentItemsRecommender(window=2).fit(X_TRAIN).partial_fit(FIRST),
    "ANN": Pipeline([("embed", FixedEmbedder()), ("ann", ANNRecommender(method="exact"))]),
    "ALS": ALSRecommender(n_components=3, iterations=2, random_state=0).fit(X_TRAIN)
    .partial_fit(FIRST),
}
FITTED["ANN"].fit(X_TRAIN)
FITTED["ANN"][-1].partial_fit(FITTED["ANN"][0].transform(FIRST))


@st.composite
def bad_chunks(draw):
    """A valid later chunk with one corruption that makes it a bad log."""
    X = SECOND.copy()
    row = draw(st.integers(0, len(X) - 1))
    column = draw(st.sampled_from(["user", "item", "chunk"]))
    latest = int(FIRST.chunk.max())
    how = draw(st.sampled_from([
        "older chunk", "latest chunk", "string id", "float", "NaN", "None", "bool column",
        "uint64 beyond int64", "missing column", "empty", "fraction chunk", "string log",
        "array of floats", "array of 2 columns", "mixed object",
    ]))
    if how == "older chunk":
        X.loc[row, "chunk"] = draw(st.integers(-(2**63), latest - 1))
    elif how == "latest chunk":
        X.loc[row, "chunk"] = latest
    elif how == "string id":
        X[column] = X[column].astype(object)
        X.loc[row, column] = draw(st.text(max_size=3))
    elif how == "float":
        X[column] = X[column].astype(float) + draw(st.sampled_from([0.5, 0.25]))
    elif how == "NaN":
        X[column] = X[column].astype(float)
        X.loc[row, column] = np.nan
    elif how == "None":
        X[column] = X[column].astype(object)
        X.loc[row, column] = None
    elif how == "bool column":
        X[column] = X[column] % 2 == 0
    elif how == "uint64 beyond int64":
        values = X[column].to_numpy().astype(np.uint64)
        values[row] = np.uint64(2**63 + draw(st.integers(0, 2**62)))
        X[column] = values
    elif how == "missing column":
        X = X.drop(columns=column)
    elif how == "empty":
        X = X.iloc[:0]
    elif how == "fraction chunk":
        X["chunk"] = X["chunk"].astype(float)
        X.loc[row, "chunk"] = latest + 1.5
    elif how == "string log":
        X = X.assign(user="u" + X.user.astype(str), item="i" + X.item.astype(str))
    elif how == "array of floats":
        X = X.to_numpy(dtype=float) + 0.5
    elif how == "array of 2 columns":
        X = X.to_numpy()[:, :2]
    elif how == "mixed object":
        X[column] = X[column].astype(object)
        X.loc[row, column] = draw(st.sampled_from([b"7", 7.0, [7], 1j]))
    return how, X


@pytest.mark.parametrize("name", list(FITTED))
def test_partial_fit_refuses_bad_logs_and_keeps_its_state(name):
    model = FITTED[name]
    before = pickle.loads(pickle.dumps(model))

    @FUZZ
    @given(bad_chunks())
    def check(case):
        how, X = case
        with pytest.raises(ALLOWED) as info:
            (model[-1] if hasattr(model, "steps") else model).partial_fit(X)
        _assert_clear(info.value)
        assert state_differences(model, before) == [], how

    check()
