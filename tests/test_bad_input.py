"""Every bad input of docs/bad_input.md, tried as a user would, and what happens.

Each case has an id that the table of docs/bad_input.md names; `test_the_table_names_every
_case` keeps the two in step. Cases tested elsewhere (the readers, persistence, the shared
recommender checks, fuzzing, injected failures) are named in the table with their test.
"""

import gzip
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError

from sklearn_micro import MiCRO, check_log
from sklearn_micro.baselines import (
    ALSRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
)
from sklearn_micro.cli import main

TRAIN = np.array([[0, 10, 0], [0, 11, 0], [1, 12, 0], [1, 13, 0], [2, 10, 1]])
INTERESTS = ([10, 11, 12, 13], [0, 0, 1, 1])
STRINGS = pd.DataFrame({"user": ["a", "b", "c"], "item": ["x", "y", "x"], "chunk": [0, 0, 1]})
DOCS = Path(__file__).resolve().parents[1] / "docs" / "bad_input.md"


def micro():
    return MiCRO(random_state=0).fit(TRAIN, item_interest=INTERESTS)


def _uint64_log():
    X = TRAIN.astype(np.uint64)
    X[1, 1] = np.uint64(2**63 + 5)
    return X


# id -> (what the user does, the exception, a pattern its message matches)
API_CASES = {
    "uint64-ids-beyond-int64": (
        lambda: PopularityRecommender().fit(_uint64_log()), ValueError,
        r"row 1, column 'item' holds 9223372036854775813, beyond the int64 range"),
    "uint64-ids-beyond-int64-frame": (
        lambda: check_log(pd.DataFrame(_uint64_log(), columns=["user", "item", "chunk"])),
        ValueError, r"column 'item' must hold int64 ids; row 1 holds 9223372036854775813, "
                    r"beyond the int64 range"),
    "uint64-chunk-beyond-int64-frame": (
        lambda: check_log(pd.DataFrame({"user": [1], "item": [2],
                                        "chunk": np.array([2**63], np.uint64)})),
        ValueError, r"column 'chunk' must hold int64 chunks; row 0 holds 9223372036854775808"),
    "mixed-ids-in-a-column": (
        lambda: check_log(pd.DataFrame({"user": [1, "a"], "item": [2, 3], "chunk": [0, 0]})),
        ValueError, r"column 'user' must hold int64 or string ids only; row 0 holds 1 \(int\)"),
    "nan-in-a-log": (
        lambda: check_log(np.array([[1, np.nan, 0]])), ValueError,
        r"dtype float64; row 0 holds NaN"),
    "fractional-chunk": (
        lambda: check_log(pd.DataFrame({"user": [1], "item": [2], "chunk": [0.5]})),
        ValueError, r"column 'chunk' must hold integer chunks; row 0 holds 0.5"),
    "complex-log": (lambda: check_log(np.ones((2, 3), complex)), ValueError,
                    r"Complex data not supported: X must be an integer array"),
    "sparse-log": (lambda: check_log(sp.csr_matrix(TRAIN)), TypeError,
                   r"X is a sparse csr_matrix; an engagement log is dense"),
    "log-of-wrong-width": (lambda: check_log(TRAIN[:, :2]), ValueError,
                           r"shape \(n, 3\).*got shape \(5, 2\)"),
    "log-that-is-not-a-table": (lambda: check_log("user,item,chunk"), TypeError,
                                r"X must be a DataFrame .* got str"),
    "repeated-columns": (
        lambda: check_log(pd.DataFrame([[1, 2, 3, 4]], columns=["user", "item", "chunk",
                                                                "chunk"])),
        ValueError, r"\['chunk'\] appear more than once"),
    "missing-column": (
        lambda: check_log(pd.DataFrame({"user": [1], "item": [2]})), ValueError,
        r"missing \['chunk'\]"),
    "empty-log": (lambda: PopularityRecommender().fit(TRAIN[:0]), ValueError,
                  r"X is an empty engagement log"),
    "huge-m": (lambda: micro().recommend([0], 10**12), ValueError,
               r"m must be at most 10000, the larger of the 4 items known and 10000 .*got "
               r"1000000000000"),
    "m-not-a-positive-integer": (lambda: micro().recommend([0], 2.5), ValueError,
                                 r"m must be an integer >= 1; got 2.5"),
    "m-true": (lambda: micro().recommend([0], True), ValueError,
               r"m must be an integer >= 1; got True"),
    "mixed-user-ids-against-string-ids": (
        lambda: PopularityRecommender().fit(STRINGS).recommend([1, "a"], 2), ValueError,
        r"users must hold ids of one kind, int64 or str; position 0 holds 1 \(int\)"),
    "int-user-ids-against-string-ids": (
        lambda: PopularityRecommender().fit(STRINGS).recommend([1], 2), ValueError,
        r"users must be str ids like those seen in fit; got int64 ids"),
    "users-as-a-set": (lambda: micro().recommend({0, 1}, 2), TypeError,
                       r"users must be a list, tuple, Series or array of ids; got set"),
    "users-2-d": (lambda: micro().recommend([[0, 1]], 2), ValueError,
                  r"users must be a 1-D array of user ids; got shape \(1, 2\)"),
    "exclude-seen-not-a-bool": (lambda: micro().recommend([0], 2, exclude_seen="yes"),
                                TypeError, r"exclude_seen must be True or False; got 'yes'"),
    "recommend-before-fit": (lambda: MiCRO().recommend([0], 2), NotFittedError, r"MiCRO"),
    "micro-without-interests": (lambda: MiCRO().fit(TRAIN), ValueError,
                                r"needs item_interest=\(item_ids, interests\)"),
    "micro-negative-interest": (
        lambda: MiCRO().fit(TRAIN, item_interest=([10, 11, 12, 13], [0, -1, 1, 1])),
        ValueError, r"interests must be non-negative integers; got dtype int64, min -1"),
    "micro-item-without-interest": (
        lambda: MiCRO().fit(TRAIN, item_interest=([10, 11], [0, 1])), ValueError,
        r"every training item needs an interest; 2 have none, e.g. \[12, 13\]"),
    "parameter-out-of-range": (lambda: MiCRO(alpha=-1).fit(TRAIN, item_interest=INTERESTS),
                               ValueError, r"'alpha' parameter of MiCRO must be a float in the "
                                           r"range \(0.0, inf\). Got -1"),
}


@pytest.mark.parametrize("case", list(API_CASES))
def test_bad_input_of_the_public_api(case):
    call, error, message = API_CASES[case]
    with pytest.raises(error, match=message):
        call()


RECOMMENDERS = {
    "MiCRO": micro,
    "PopularityRecommender": lambda: PopularityRecommender().fit(TRAIN),
    "RecentItemsRecommender": lambda: RecentItemsRecommender().fit(TRAIN),
    "ALSRecommender": lambda: ALSRecommender(n_components=2, iterations=2,
                                             random_state=0).fit(TRAIN),
}


@pytest.mark.parametrize("name", list(RECOMMENDERS))
def test_one_protocol_chunk_equal_to_the_latest_and_partial_fit_before_fit(name):
    """Case ids: latest-chunk-again, partial-fit-before-fit."""
    model = RECOMMENDERS[name]()
    with pytest.raises(ValueError, match=r"newer than the latest chunk 1.* chunk 1\b"):
        model.partial_fit(np.array([[5, 10, 1]]))
    assert model.latest_chunk_ == 1
    unfitted = type(model)()
    with pytest.raises(NotFittedError, match=rf"{name}.partial_fit needs a fitted"):
        unfitted.partial_fit(TRAIN)


def test_uint64_ids_leave_a_fitted_model_as_it_was():
    """Case id: uint64-ids-beyond-int64 (partial_fit)."""
    model = micro()
    before = model.recommend([0, 1], 3)
    chunk = np.array([[0, 10, 2]], np.uint64)
    chunk[0, 0] = np.uint64(2**63)
    with pytest.raises(ValueError, match="beyond the int64 range"):
        model.partial_fit(chunk)
    assert model.latest_chunk_ == 1 and len(model.user_ids_) == 3
    np.testing.assert_array_equal(model.recommend([0, 1], 3)[0], before[0])


# -- pipelines, and MiCRO's chunks and interests ---------------------------------------------


def test_pandas_transform_output_keeps_the_pipeline_working():
    """Case id: pandas-transform-output."""
    from sklearn import config_context
    from sklearn.pipeline import Pipeline

    from sklearn_micro import GraphEmbedder, SphericalKMeans

    X = pd.DataFrame(np.tile(TRAIN, (3, 1)), columns=["user", "item", "chunk"])

    def pipeline():
        return Pipeline([("embed", GraphEmbedder(n_components=2, random_state=0)),
                         ("interests", SphericalKMeans(n_clusters=2, random_state=0)),
                         ("micro", MiCRO(random_state=0))])

    with config_context(transform_output="pandas"):
        pipe = pipeline().fit(X)
    # the same model as without pandas output
    items, scores = pipe[-1].recommend([0, 1, 2], 3)
    expected = pipeline().fit(X)[-1].recommend([0, 1, 2], 3)
    np.testing.assert_array_equal(items, expected[0])
    np.testing.assert_array_equal(scores, expected[1])
    # on a plain array SphericalKMeans still follows set_output
    vectors = np.random.default_rng(0).normal(size=(20, 3))
    km = SphericalKMeans(n_clusters=2, random_state=0).set_output(transform="pandas")
    assert list(km.fit_transform(vectors).columns) == ["sphericalkmeans0", "sphericalkmeans1"]
    assert km.transform(vectors).shape == (20, 2)


def test_a_chunk_with_nothing_to_assign_runs_no_sweeps():
    """Case id: nothing-to-assign."""
    model = MiCRO(max_sweeps=50, random_state=0).fit(TRAIN, item_interest=INTERESTS)
    # a new user engaging new items only: no interest can be given to anything
    model.partial_fit(np.array([[9, 99, 2], [9, 98, 2]]))
    assert model.n_unassigned_[2] == 2
    assert model.n_sweeps_[2] == 0


def test_a_huge_interest_label_is_refused():
    """Case id: huge-interest-label."""
    with pytest.raises(ValueError, match="item_interest"):
        MiCRO().fit(TRAIN, item_interest=([10, 11, 12, 13], [0, 1, 1, 10**12]))


# -- the command line ------------------------------------------------------------------------


def _cli(capsys, *args):
    code = main(["reproduce", "--quiet", *args])
    err = capsys.readouterr().err.strip()
    return code, err


def _csv(path, rows=TRAIN):
    path.write_text("user,item,chunk\n" + "".join(f"{u},{i},{c}\n" for u, i, c in rows))
    return path


def test_cli_truncated_gz_is_one_line_and_exit_2(tmp_path):
    """Case id: cli-truncated-gz (a new process, to see the whole stderr)."""
    import subprocess
    import sys

    text = "user,item,chunk\n" + "".join(f"{j % 50},{j % 70},{j // 500}\n" for j in range(5000))
    packed = gzip.compress(text.encode())
    path = tmp_path / "log.csv.gz"
    path.write_bytes(packed[: len(packed) // 2])
    out = subprocess.run([sys.executable, "-m", "sklearn_micro.cli", "reproduce", "--data",
                          str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr
    assert re.search(r"log\.csv\.gz'? cannot be read to the end: the gzip file is truncated",
                     out.stderr)


CLI_CASES = {
    "cli-chunk-length-zero": (["--chunk-length", "0"], r"--chunk-length must be a positive "
                                                       r"number of seconds; got 0"),
    "cli-chunk-length-nan": (["--chunk-length", "nan"], r"--chunk-length must be .* got nan"),
    "cli-k-beyond-items": (["--k", "50"], r"--k must be at most the 4 distinct items of the "
                                          r"training chunks; got 50"),
    "cli-empty-higgs": ([], r"load_higgs: .* holds no rows"),
    "cli-header-only": ([], r"holds no engagements"),
    "cli-unknown-baseline": (["--baselines", "ANN,Foo"],
                             r"--baselines must be among ANN, Popularity, RecentItems, ALS, "
                             r"ItemKNN, RP3beta; got Foo"),
    "cli-missing-file": ([], r"no file at .*missing.csv"),
    "cli-not-a-csv": ([], r"log.csv'? does not start with a header line of UTF-8 text"),
    "cli-not-a-parquet": ([], r"log.parquet'? is not a readable Parquet file"),
    "cli-one-chunk": ([], r"holds one chunk \(0\); the experiment needs at least two"),
    "cli-train-chunks-out-of-range": (["--train-chunks", "9"], r"train_chunks must be between 1 "
                                                               r"and 1"),
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_bad_input_is_one_line_and_exit_2(case, tmp_path, capsys, monkeypatch):
    import sklearn_micro.experiment as experiment

    def no_work(*args, **kwargs):
        raise AssertionError("the experiment ran before the input was checked")

    monkeypatch.setattr(experiment, "run_experiment", no_work)
    args, message = CLI_CASES[case]
    if case == "cli-empty-higgs":
        data = tmp_path / "higgs-activity_time.txt.gz"
        data.write_bytes(gzip.compress(b""))
    elif case == "cli-header-only":
        data = _csv(tmp_path / "log.csv", rows=[])
    elif case == "cli-missing-file":
        data = tmp_path / "missing.csv"
    elif case == "cli-not-a-csv":
        data = tmp_path / "log.csv"
        data.write_bytes(bytes(range(128, 256)))
    elif case == "cli-not-a-parquet":
        pytest.importorskip("pyarrow")
        data = tmp_path / "log.parquet"
        data.write_bytes(b"PAR1 not really")
    elif case == "cli-one-chunk":
        data = _csv(tmp_path / "log.csv", rows=TRAIN[TRAIN[:, 2] == 0])
    else:
        data = _csv(tmp_path / "log.csv")
    code, err = _cli(capsys, "--data", str(data), "--out", str(tmp_path / "out"), *args)
    assert code == 2
    assert err.count("\n") == 0 and err.startswith("sklearn-micro: error: ")
    assert re.search(message, err), err


def test_cli_options_of_data_without_data(capsys, monkeypatch):
    """Case id: cli-options-without-data."""
    from sklearn_micro import datasets

    def no_log(*args, **kwargs):
        raise AssertionError("the log was generated before the options were checked")

    monkeypatch.setattr(datasets, "make_engagements", no_log)
    code, err = _cli(capsys, "--time", "t", "--chunk-length", "60")
    assert code == 2
    assert err == ("sklearn-micro: error: --time, --chunk-length apply to --data only; the "
                   "generated log has no columns to choose")


def test_cli_does_not_hide_a_type_error(tmp_path, monkeypatch):
    """Case id: cli-type-error: a TypeError is a bug, shown with its traceback."""
    import sklearn_micro.experiment as experiment

    def broken(*args, **kwargs):
        raise TypeError("a bug inside")

    monkeypatch.setattr(experiment, "run_experiment", broken)
    data = _csv(tmp_path / "log.csv", rows=np.vstack([TRAIN, [[5, 14, 2], [6, 15, 3]]]))
    with pytest.raises(TypeError, match="a bug inside"):
        main(["reproduce", "--quiet", "--data", str(data), "--k", "2", "--out",
              str(tmp_path / "out")])


# -- the table -------------------------------------------------------------------------------


def test_the_table_names_every_case():
    text = DOCS.read_text()
    ids = [*API_CASES, *CLI_CASES, "latest-chunk-again", "partial-fit-before-fit",
           "pandas-transform-output", "nothing-to-assign", "huge-interest-label",
           "cli-truncated-gz", "cli-options-without-data", "cli-type-error"]
    missing = [case for case in ids if f"`{case}`" not in text]
    assert not missing, f"docs/bad_input.md does not name {missing}"


def test_mixtures_refuse_ids_of_mixed_kinds():
    """Case id: mixed-kind-ids-in-mixtures."""
    model = MiCRO(random_state=0).fit(TRAIN, item_interest=INTERESTS)
    for method in (model.user_interests, model.item_interests):
        with pytest.raises(ValueError, match="one kind"):
            method([1, "a"])
