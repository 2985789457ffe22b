import json
import re
import subprocess
import sys

import numpy as np
import pytest

from sklearn_micro import MiCRO
from sklearn_micro.cli import main
from sklearn_micro.datasets import make_engagements


def run(*args):
    return subprocess.run([sys.executable, "-m", "sklearn_micro.cli", *args],
                          capture_output=True, text=True, timeout=300)


def test_help_names_the_command_and_its_options():
    out = run("--help")
    assert out.returncode == 0 and "reproduce" in out.stdout
    out = run("reproduce", "--help")
    assert out.returncode == 0
    for option in ("--data", "--k", "--train-chunks", "-m", "--out", "TwitterFaveGraph"):
        assert option in out.stdout


def test_bad_path_and_bad_column_give_one_line(tmp_path):
    out = run("reproduce", "--data", str(tmp_path / "missing.csv"))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "missing.csv" in out.stderr
    assert "Traceback" not in out.stderr
    path = tmp_path / "log.csv"
    path.write_text("who,what,chunk\n1,2,0\n")
    out = run("reproduce", "--data", str(path))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "user" in out.stderr
    assert "Traceback" not in out.stderr


def test_reproduce_runs_the_neighbour_baselines(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    pytest.importorskip("pyarrow")
    log = make_engagements(n_users=300, n_items=400, n_chunks=5, n_interests=4,
                           n_engagements=5000, random_state=1)
    path = tmp_path / "fave.csv"
    np.savetxt(path, np.column_stack([log.user, log.item, log.chunk]), fmt="%d",
               delimiter=", ", header="user_index, tweet_index, time_chunk", comments="")
    assert main(["reproduce", "--data", str(path), "--k", "4", "--dim", "8",
                 "--train-chunks", "3", "--out", str(tmp_path / "out"), "--quiet",
                 "--baselines", "ItemKNN,RP3beta"]) == 0
    printed = capsys.readouterr().out
    for method in ("ItemKNN", "RP3beta"):
        assert re.search(rf"\| {method} \| \d\.\d{{3}} ± \d\.\d{{4}} \|", printed)
        assert f"| {method} rolling evaluation |" in printed


def test_reproduce_on_a_small_file(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    pytest.importorskip("pyarrow")
    log = make_engagements(n_users=400, n_items=600, n_chunks=6, n_interests=5,
                           n_engagements=8000, random_state=0)
    path = tmp_path / "fave.csv"
    np.savetxt(path, np.column_stack([log.user, log.item, log.chunk]), fmt="%d",
               delimiter=", ", header="user_index, tweet_index, time_chunk", comments="")
    code = main(["reproduce", "--data", str(path), "--k", "5", "--dim", "8",
                 "--train-chunks", "4", "--out", str(tmp_path / "out"), "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "TwitterFaveGraph" in printed
    for method in ("MiCRO", "ANN", "Popularity"):
        assert f"| {method} |" in printed
    assert "recall@100" in printed and "ndcg@50" in printed
    # means with their intervals, and MiCRO against each method, paired by user
    assert re.search(r"\| ANN \| \d\.\d{3} ± \d\.\d{4} \|", printed)
    against = re.search(r"\| Popularity \| ([+-]\d+\.\d)% \[([+-]\d+\.\d)%, "
                        r"([+-]\d+\.\d)%\] \|", printed)
    assert against and float(against[2]) <= float(against[1]) <= float(against[3])
    assert "| MiCRO against | recall@100 | mrr@100 |" in printed
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["checkpoints", "mrr_at_100_per_chunk.png", "ndcg_at_100_per_chunk.png",
                       "recall_at_100_per_chunk.png", "results.md", "stages.json"]
    # the per-stage summary: every stage with its time, peak memory and throughput
    assert "| stage | seconds | cpu seconds | peak MiB | throughput |" in printed
    for stage in ("load", "graph embedding", "clustering", "MiCRO fit",
                  "MiCRO and MiCRO (paper) rolling evaluation", "ANN rolling evaluation",
                  "Popularity rolling evaluation"):
        assert f"| {stage} |" in printed
    stages = json.loads((tmp_path / "out" / "stages.json").read_text())["stages"]
    assert [s["name"] for s in stages][:3] == ["load", "graph embedding", "clustering"]
    assert all(s["peak"] > 0 and s["seconds"] >= 0 for s in stages)
    # without checkpoints nothing is saved
    out = tmp_path / "bare"
    assert main(["reproduce", "--data", str(path), "--k", "5", "--dim", "8",
                 "--train-chunks", "4", "--out", str(out), "--quiet",
                 "--no-checkpoints", "--baselines", "Popularity"]) == 0
    assert not (out / "checkpoints").exists()


def test_resume_errors_are_one_line(tmp_path):
    out = run("reproduce", "--resume", "--out", str(tmp_path / "none"))
    assert out.returncode == 2 and "no checkpoints" in out.stderr
    out = run("reproduce", "--resume", "--no-checkpoints")
    assert out.returncode == 2 and "--no-checkpoints" in out.stderr


def _small_run(tmp_path) -> list[str]:
    """``reproduce`` arguments of a small run on a CSV log written in ``tmp_path``, its
    ``--out`` last."""
    log = make_engagements(n_users=300, n_items=400, n_chunks=5, n_interests=4,
                           n_engagements=5000, random_state=0)
    path = tmp_path / "log.csv"
    np.savetxt(path, np.column_stack([log.user, log.item, log.chunk]), fmt="%d",
               delimiter=",", header="user,item,chunk", comments="")
    args = ["reproduce", "--data", str(path), "--k", "4", "--dim", "8", "--train-chunks", "3",
            "--baselines", "Popularity", "--quiet", "--out", str(tmp_path / "out")]
    return args


@pytest.mark.parametrize("flag, given, other, expected, bad, refusal", [
    ("--phi-min-count", "2", "3", 2.0, ["-1", "inf", "nan"],
     "--phi-min-count must be a finite count of at least 0; got {}"),
    ("--beta", "0.25", "0.5", 0.25, ["0", "-1", "inf", "nan"],
     "--beta must be a positive number; got {}"),
])
def test_micro_options_reach_both_rows_and_belong_to_the_run(
        flag, given, other, expected, bad, refusal, tmp_path, capsys):
    import pickle

    setting = flag[2:].replace("-", "_")  # MiCRO's parameter and the run's config key

    def fitted(out):
        with open(out / "checkpoints" / "MiCRO fit.pkl", "rb") as f:
            return pickle.load(f)

    args = _small_run(tmp_path)
    assert main([*args, flag, given]) == 0
    capsys.readouterr()
    # the two rows share one fitted model: the paper's row is its paper_model
    model = fitted(tmp_path / "out")
    assert getattr(model, setting) == expected
    assert getattr(model.paper_model(), setting) == expected
    # the checkpoints belong to a run with that setting
    assert main([*args, flag, other, "--resume"]) == 2
    assert f"{setting}={expected!r}" in capsys.readouterr().err
    # a --data run without it: MiCRO's default
    assert main([*args[:-1], str(tmp_path / "default")]) == 0
    assert getattr(fitted(tmp_path / "default"), setting) == getattr(MiCRO(), setting)
    for value in bad:
        assert main([*args, flag, value]) == 2
        assert refusal.format(value) in capsys.readouterr().err
    out = run(*args, flag, bad[0])  # one line, no traceback
    assert out.returncode == 2 and refusal.format(bad[0]) in out.stderr
    assert out.stderr.strip().count("\n") == 0


def test_compact_log_is_sorted_narrow_and_split_without_a_copy():
    from sklearn_micro._log import EngagementLog
    from sklearn_micro.experiment import compact_chunks, compact_log, split_chunks

    rng = np.random.default_rng(0)
    raw = np.column_stack([rng.integers(0, 50, 300), rng.integers(0, 80, 300),
                           rng.integers(3, 9, 300)])
    log = compact_log(raw)
    assert log.user.dtype == log.item.dtype == log.chunk.dtype == np.int32
    assert np.all(np.diff(log.chunk) >= 0)
    order = np.argsort(raw[:, 2], kind="stable")
    np.testing.assert_array_equal(log.user, raw[order, 0])
    train, test = split_chunks(log, 4)
    assert np.shares_memory(train.user, log.user) and np.shares_memory(test.item, log.item)
    assert train.chunk.max() == 6 and test.chunk.min() == 7
    assert len(train) + len(test) == len(log)

    chunks = [(c, EngagementLog(raw[raw[:, 2] == c, 0], raw[raw[:, 2] == c, 1],
                                raw[raw[:, 2] == c, 2])) for c in range(3, 9)]
    for n_rows in (None, 300):
        joined = compact_chunks(iter(chunks), n_rows=n_rows)
        np.testing.assert_array_equal(joined.user, log.user)
        np.testing.assert_array_equal(joined.chunk, log.chunk)
        assert joined.item.dtype == np.int32
    with pytest.raises(ValueError, match="n_rows"):
        compact_chunks(iter(chunks), n_rows=299)
    wide = [(0, EngagementLog(np.array([1, 2]), np.array([2**40, 5]), np.array([0, 0])))]
    for n_rows in (None, 2):
        joined = compact_chunks(iter(wide), n_rows=n_rows)
        assert joined.item.dtype == np.int64 and joined.item[0] == 2**40
        assert joined.user.dtype == np.int32


def test_reproduce_reads_an_unsorted_file(tmp_path, capsys):
    log = make_engagements(n_users=300, n_items=400, n_chunks=5, n_interests=4,
                           n_engagements=5000, random_state=2)
    rows = np.column_stack([log.user, log.item, log.chunk])[::-1]
    path = tmp_path / "log.csv"
    np.savetxt(path, rows, fmt="%d", delimiter=",", header="user,item,chunk", comments="")
    assert main(["reproduce", "--data", str(path), "--k", "4", "--dim", "8", "--out",
                 str(tmp_path / "out"), "--quiet", "--baselines", "Popularity"]) == 0
    assert f"{len(log):,} engagements" in capsys.readouterr().out


def test_a_failed_run_leaves_no_checkpoints(tmp_path):
    out = run("reproduce", "--data", str(tmp_path / "missing.csv"), "--out",
              str(tmp_path / "out"))
    assert out.returncode == 2
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag, given, other, expected, bad, refusal", [
    ("--epochs", "3", "4", 3, ["0"], "--epochs must be a positive integer; got {}"),
    ("--negative-weight", "500", "400", 500.0, ["0", "-3", "inf", "nan", "heavy"],
     "--negative-weight must be a positive number or none; got {}"),
])
def test_embedding_options_reach_the_embedding_and_belong_to_the_run(
        flag, given, other, expected, bad, refusal, tmp_path, capsys, monkeypatch):
    from sklearn_micro.embedding import GraphEmbedder

    setting = flag[2:].replace("-", "_")  # the run's config key
    attribute = {"epochs": "iterations"}.get(setting, setting)
    args = _small_run(tmp_path)
    fitted = []
    fit = GraphEmbedder.fit

    def recording_fit(self, X, y=None):
        fitted.append(getattr(self, attribute))
        return fit(self, X, y)

    monkeypatch.setattr(GraphEmbedder, "fit", recording_fit)
    assert main([*args, flag, given]) == 0
    assert fitted == [expected]
    capsys.readouterr()
    # the checkpoints belong to a run with that setting
    assert main([*args, flag, other, "--resume"]) == 2
    assert f"{setting}={given}" in capsys.readouterr().err
    # a --data run without it: GraphEmbedder's default
    assert main([*args[:-1], str(tmp_path / "default")]) == 0
    assert fitted == [expected, getattr(GraphEmbedder(), attribute)]
    for value in bad:
        assert main([*args, flag, value]) == 2
        assert refusal.format(value) in capsys.readouterr().err


def test_reproduce_live_replays_from_the_fitted_models(tmp_path, capsys):
    log = make_engagements(n_users=300, n_items=400, n_chunks=6, n_interests=5,
                           n_engagements=6000, random_state=1)
    path = tmp_path / "log.csv"
    np.savetxt(path, np.column_stack([log.user, log.item, log.chunk]), fmt="%d",
               delimiter=",", header="user,item,chunk", comments="")
    args = ["reproduce", "--data", str(path), "--k", "5", "--dim", "8", "--train-chunks",
            "4", "--quiet", "--no-checkpoints", "--baselines", "Popularity"]
    assert main([*args, "--out", str(tmp_path / "plain")]) == 0
    plain = capsys.readouterr().out
    assert main([*args, "--out", str(tmp_path / "live"), "--live"]) == 0
    live = capsys.readouterr().out
    # the rolling tables are those of a run without --live: the replay starts from copies
    def tables(out):
        return out.split("Mean over all")[1].split("plots:")[0].split("\nLive (")[0].strip()

    assert tables(plain) == tables(live)
    rows = {name: cells for name, *cells in (
        [c.strip() for c in line.strip("|").split("|")]
        for line in live.split("Live (the prequential")[1].split("Per stage")[0].splitlines()
        if line.startswith("| ") and not line.startswith("| method"))}
    assert list(rows) == ["MiCRO chunk-only", "MiCRO users' own live", "MiCRO live",
                          "Popularity live"]
    # columns: recall, mrr, ratio, recall on new items, warm, cold
    assert rows["MiCRO chunk-only"][2] == ""
    assert re.fullmatch(r"\d\.\d\dx \[\d\.\d\d, \d\.\d\d\]", rows["MiCRO live"][2])
    # chunk-only MiCRO cannot retrieve an item first engaged in the open chunk; live can
    assert float(rows["MiCRO chunk-only"][3]) == 0.0
    assert float(rows["MiCRO live"][3]) > 0.0
    assert "Live (the prequential" in (tmp_path / "live" / "results.md").read_text()
