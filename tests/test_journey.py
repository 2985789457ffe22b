"""``sklearn-micro fit``, ``update`` and ``recommend``, and ``reproduce --save-model``: from a
log file to a saved model, later chunks and batch candidates."""

import numpy as np
import pytest

from sklearn_micro.base import final_step
from sklearn_micro.cli import main
from sklearn_micro.datasets import data_home, make_engagements, read_log
from sklearn_micro.experiment._commands import CHUNKING_ATTRIBUTE, Chunking
from sklearn_micro.persistence import load

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("skops")

START = 1_600_000_000
HOUR = 3600


def write_timed_log(path, log, start=START, seed=0):
    """``log`` as a CSV of (user, item, timestamp), chunk c spread over hour c after
    ``start``, in time order."""
    rng = np.random.default_rng(seed)
    times = start + log.chunk * HOUR + rng.integers(0, HOUR, len(log))
    order = np.argsort(times, kind="stable")
    rows = np.column_stack([log.user[order], log.item[order], times[order]])
    np.savetxt(path, rows, fmt="%d", delimiter=",", header="user,item,timestamp",
               comments="")
    return times[order]


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    """A generated log of 8 hourly chunks as three CSV files: the whole, its first 6 hours
    and the last 2, and the time where the first engagement happened."""
    folder = tmp_path_factory.mktemp("timed")
    log = make_engagements(n_users=300, n_items=400, n_chunks=8, n_interests=5,
                           n_engagements=6000, random_state=0)
    times = write_timed_log(folder / "log.csv", log)
    lines = (folder / "log.csv").read_text().splitlines()
    header, rows = lines[0], lines[1:]
    cut = int(np.searchsorted(times, times[0] + 6 * HOUR))
    (folder / "train.csv").write_text("\n".join([header, *rows[:cut]]) + "\n")
    (folder / "later.csv").write_text("\n".join([header, *rows[cut:]]) + "\n")
    return folder, int(times[0])


def fit_args(folder, out, *more):
    return ["fit", str(folder / "train.csv"), "--time", "timestamp", "--chunk-length",
            str(HOUR), "--k", "5", "--dim", "8", "--out", str(out), "--quiet", *more]


@pytest.fixture(scope="module")
def fitted(timed, tmp_path_factory):
    folder, _ = timed
    out = tmp_path_factory.mktemp("fitted") / "model.skops"
    assert main(fit_args(folder, out)) == 0
    return out


def candidates(path):
    return pq.read_table(path).to_pandas()


def test_fit_prints_the_model_and_records_its_chunking(timed, fitted, capsys, tmp_path):
    folder, first = timed
    model = load(fitted)
    rec = final_step(model)
    assert [name for name, _ in model.steps] == ["embed", "interests", "micro"]
    assert rec.n_interests_ == 5
    # the chunks are those read_log makes of the whole file, origin its first time
    whole = read_log(folder / "log.csv", time="timestamp", chunk_length=HOUR)
    assert rec.latest_chunk_ == 5 == whole.chunk[whole.chunk < 6].max()
    assert getattr(rec, CHUNKING_ATTRIBUTE) == {"time": "timestamp", "chunk_length": HOUR,
                                                "origin": first}
    assert np.array_equal(Chunking.of(model).chunks(first + np.array([0, HOUR - 1, HOUR])),
                          [0, 0, 1])
    out = tmp_path / "again.skops"
    assert main(fit_args(folder, out)) == 0
    printed = capsys.readouterr().out
    n_users = len(np.unique(read_log(folder / "train.csv", time="timestamp",
                                     chunk_length=HOUR).user))
    assert f"{n_users:,} users" in printed and "5 interests" in printed
    assert "weights chosen on held-out training chunks: personal" in printed
    assert f"from unix time {first}" in printed
    # a fit is reproducible: the same seed gives the same model
    users = rec.user_ids_.ids[:50]
    again = final_step(load(out))
    for a, b in zip(rec.recommend(users, 10), again.recommend(users, 10), strict=True):
        np.testing.assert_array_equal(a, b)


def test_update_numbers_the_later_file_by_the_models_chunking(timed, fitted, tmp_path):
    folder, _ = timed
    out = tmp_path / "updated.skops"
    assert main(["update", str(fitted), str(folder / "later.csv"), "--out", str(out),
                 "--quiet"]) == 0
    updated = final_step(load(out))
    # the oracle: the fitted model, given the whole file's chunks 6 and 7 by partial_fit
    whole = read_log(folder / "log.csv", time="timestamp", chunk_length=HOUR)
    oracle = load(fitted)
    for chunk in (6, 7):
        oracle[-1].partial_fit(whole.take(whole.chunk == chunk))
    assert updated.latest_chunk_ == 7
    users = np.unique(whole.user)
    for a, b in zip(updated.recommend(users, 20), oracle[-1].recommend(users, 20),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    assert updated.chunking_ == final_step(load(fitted)).chunking_
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_a_refused_update_leaves_the_model_as_it_was(timed, fitted, tmp_path, capsys):
    folder, _ = timed
    model = tmp_path / "model.skops"
    model.write_bytes(fitted.read_bytes())
    # the training file again: its chunks are not later than the model's
    assert main(["update", str(model), str(folder / "train.csv"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "CHUNKS_FILE holds chunk 0" in err and "up to 5" in err
    assert model.read_bytes() == fitted.read_bytes()
    assert main(["update", str(model), str(folder / "later.csv"), "--chunk-length", "60"]) == 2
    assert "--chunk-length 60" in capsys.readouterr().err
    assert model.read_bytes() == fitted.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["model.skops"]


def test_recommend_writes_every_users_candidates_in_blocks(timed, fitted, tmp_path,
                                                             capsys):
    rec = final_step(load(fitted))
    users = rec.user_ids_.ids
    out = tmp_path / "candidates.parquet"
    assert main(["recommend", str(fitted), "--all", "-m", "15", "--block", "64",
                 "--out", str(out), "--exclude-seen", "--quiet"]) == 0
    assert f"{len(users):,} users" in capsys.readouterr().out
    table = candidates(out)
    assert list(table.columns) == ["user", "rank", "item", "score"]
    items, scores = rec.recommend(users, 15, exclude_seen=True)
    kept = np.isfinite(scores)
    assert len(table) == kept.sum()
    np.testing.assert_array_equal(table.user, np.repeat(users, kept.sum(axis=1)))
    np.testing.assert_array_equal(table.item, items[kept])
    np.testing.assert_allclose(table.score, scores[kept])
    assert (table.groupby("user")["rank"].apply(
        lambda r: list(r) == list(range(1, len(r) + 1)))).all()
    # no candidate the user has engaged with in the training file
    train = read_log(timed[0] / "train.csv", time="timestamp", chunk_length=HOUR)
    engaged = set(zip(train.user.tolist(), train.item.tolist(), strict=True))
    assert not engaged & set(zip(table.user.tolist(), table.item.tolist(), strict=True))
    assert len(engaged & set(zip(np.repeat(users, 15).tolist(),
                                 rec.recommend(users, 15)[0].ravel().tolist(),
                                 strict=True)))  # without it, some are
    # --users: a CSV with a user column, unknown users included, as CSV output
    some = tmp_path / "users.csv"
    some.write_text("user,segment\n" + "".join(f"{u},a\n" for u in [users[3], 10**9]))
    csv = tmp_path / "some.csv"
    assert main(["recommend", str(fitted), "--users", str(some), "-m", "5", "--out",
                 str(csv), "--quiet"]) == 0
    lines = csv.read_text().splitlines()
    assert lines[0] == "user,rank,item,score" and len(lines) == 11
    expected, _ = rec.recommend([users[3], 10**9], 5)
    assert [int(line.split(",")[2]) for line in lines[1:]] == expected.ravel().tolist()


@pytest.mark.parametrize("argv, named", [
    (["fit", "{log}", "--k", "0", "--out", "{tmp}/m.skops"], "--k"),
    (["fit", "{log}", "--k", "many", "--out", "{tmp}/m.skops"], "--k"),
    (["fit", "{log}", "--out", "{tmp}/m.zip"], "--out"),
    (["fit", "{log}", "--time", "timestamp", "--out", "{tmp}/m.skops"], "--chunk-length"),
    (["fit", "{log}", "--method", "LDA", "--out", "{tmp}/m.skops"], "--method"),
    (["fit", "{tmp}/missing.csv", "--out", "{tmp}/m.skops"], "LOG"),
    (["fit", "{log}", "--time", "timestamp", "--chunk-length", "3600", "--origin",
      "1900000000", "--out", "{tmp}/m.skops"], "--origin"),
    (["fit", "{log}", "--time", "timestamp", "--chunk-length", "3600", "--train-chunks",
      "99", "--out", "{tmp}/m.skops"], "--train-chunks"),
    (["recommend", "{tmp}/m.skops", "--all", "--out", "{tmp}/c.parquet"], "MODEL"),
    (["recommend", "{model}", "--out", "{tmp}/c.parquet"], "--users FILE or --all"),
    (["recommend", "{model}", "--all", "-m", "0", "--out", "{tmp}/c.parquet"], "-m"),
    (["recommend", "{model}", "--all", "--out", "{tmp}/c.json"], "--out"),
    (["update", "{model}", "{tmp}/missing.csv"], "CHUNKS_FILE"),
])
def test_bad_input_is_refused_naming_the_option(argv, named, timed, fitted, tmp_path, capsys):
    folder, _ = timed
    argv = [a.format(log=folder / "train.csv", tmp=tmp_path, model=fitted) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("sklearn-micro: error: ") and named in err
    assert err.count("\n") == 1
    assert not [p for p in tmp_path.iterdir() if p.suffix != ".csv"]


def test_users_file_of_the_wrong_kind_is_refused(fitted, tmp_path, capsys):
    users = tmp_path / "users.txt"
    users.write_text("12\nalice\n")
    assert main(["recommend", str(fitted), "--users", str(users), "--out",
                 str(tmp_path / "c.parquet")]) == 2
    err = capsys.readouterr().err
    assert "--users" in err and "'alice'" in err
    assert not (tmp_path / "c.parquet").exists()


def test_fit_a_baseline_and_the_later_chunks_with_partial_fit(timed, tmp_path, capsys):
    folder, _ = timed
    out = tmp_path / "popularity.pkl"
    assert main(["fit", str(folder / "log.csv"), "--time", "timestamp", "--chunk-length",
                 str(HOUR), "--method", "Popularity", "--train-chunks", "6", "--out",
                 str(out), "--quiet"]) == 0
    assert "then took 2 later chunks with partial_fit (6..7)" in capsys.readouterr().out
    model = load(out)
    assert model.latest_chunk_ == 7
    # the oracle: the most engaged items of the latest chunk, by count
    whole = read_log(folder / "log.csv", time="timestamp", chunk_length=HOUR)
    items, counts = np.unique(whole.item[whole.chunk == 7], return_counts=True)
    got, _ = model.recommend([whole.user[0]], 5)
    assert counts[np.searchsorted(items, got[0])].tolist() == sorted(counts,
                                                                     reverse=True)[:5]


def test_reproduce_saves_its_models_at_the_latest_chunk(tmp_path, capsys):
    log = make_engagements(n_users=300, n_items=400, n_chunks=6, n_interests=5,
                           n_engagements=5000, random_state=1)
    path = tmp_path / "log.csv"
    write_timed_log(path, log)
    models = tmp_path / "models"
    assert main(["reproduce", "--data", str(path), "--time", "timestamp", "--chunk-length",
                 str(HOUR), "--k", "5", "--dim", "8", "--train-chunks", "4", "--baselines",
                 "Popularity", "--out", str(tmp_path / "out"), "--save-model", str(models),
                 "--quiet", "--no-checkpoints"]) == 0
    assert "models: " in capsys.readouterr().out
    assert sorted(p.name for p in models.iterdir()) == [
        "MiCRO-paper.skops", "MiCRO.skops", "Popularity.skops"]
    micro, paper = load(models / "MiCRO.skops"), load(models / "MiCRO-paper.skops")
    whole = read_log(path, time="timestamp", chunk_length=HOUR)
    for model in (micro, paper, load(models / "Popularity.skops")):
        assert model.latest_chunk_ == whole.chunk.max()
        assert model.chunking_["origin"] == int(np.loadtxt(
            path, delimiter=",", skiprows=1, usecols=2, dtype=np.int64).min())
    assert (paper.personal, paper.popularity, paper.phi_decay) == (0, 0, 0)
    # the paper's model is MiCRO's state read without its blend
    users = micro.user_ids_.ids[:40]
    np.testing.assert_array_equal(paper.recommend(users, 10)[0],
                                  micro.paper_model().recommend(users, 10)[0])


HIGGS = None if data_home() is None else data_home() / "higgs-twitter" / \
    "higgs-activity_time.txt.gz"


@pytest.mark.skipif(HIGGS is None or not HIGGS.is_file(),
                    reason="the Higgs log is not in the data folder (../shared/data or "
                           "$SKLEARN_MICRO_DATA)")
def test_the_higgs_log_to_candidates(tmp_path, capsys):
    model = tmp_path / "higgs.skops"
    assert main(["fit", str(HIGGS), "--k", "50", "--dim", "16", "--train-chunks", "26",
                 "--out", str(model), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "(Higgs)" in printed and "then took 2 later chunks with partial_fit (26..27)" \
        in printed
    rec = load(model)[-1]
    assert rec.latest_chunk_ == 27 and rec.n_interests_ == 50
    out = tmp_path / "higgs.parquet"
    assert main(["recommend", str(model), "--all", "-m", "100", "--out", str(out),
                 "--quiet"]) == 0
    table = candidates(out)
    assert table.user.nunique() == len(rec.user_ids_)
    sample = rec.user_ids_.ids[::997]
    items, _ = rec.recommend(sample, 100)
    got = table[table.user.isin(sample)].sort_values(["user", "rank"])
    order = np.argsort(sample, kind="stable")
    np.testing.assert_array_equal(got.item.to_numpy().reshape(len(sample), 100),
                                  items[order])
