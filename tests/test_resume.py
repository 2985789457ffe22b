"""A run killed in the middle carries on with --resume and prints the same tables."""

import copy
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from sklearn_micro._kernels import threading_layer
from sklearn_micro._parallel import resolve_n_jobs
from sklearn_micro.datasets import make_engagements
from sklearn_micro.experiment import Stages, load_checkpoint

ROOT = Path(__file__).resolve().parents[1]

# Runs the command line in a child process that kills itself with SIGKILL (no clean-up of
# any kind, as the out-of-memory killer would) right after the checkpoint it is told.
KILLED_RUN = textwrap.dedent("""
    import os, signal, sys
    import sklearn_micro.experiment._run as experiment
    from sklearn_micro.cli import main

    stop_after = sys.argv[1]
    save = experiment.Stages.save

    def save_then_die(self, name, obj, stage=None):
        save(self, name, obj, stage)
        if name == stop_after:
            os.kill(os.getpid(), signal.SIGKILL)

    experiment.Stages.save = save_then_die
    sys.exit(main(sys.argv[2:]))
""")


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    log = make_engagements(n_users=600, n_items=900, n_chunks=8, n_interests=6,
                           n_engagements=12000, random_state=1)
    path = tmp_path_factory.mktemp("data") / "log.csv"
    np.savetxt(path, np.column_stack([log.user, log.item, log.chunk]), fmt="%d",
               delimiter=",", header="user,item,chunk", comments="")
    return path


def _args(data_file, out):
    return ["reproduce", "--data", str(data_file), "--k", "6", "--dim", "8",
            "--train-chunks", "5", "--out", str(out), "--quiet", "--baselines",
            "ANN,Popularity,RecentItems"]


def _run(args, stop_after=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if stop_after is None:
        cmd = [sys.executable, "-m", "sklearn_micro.cli", *args]
    else:
        cmd = [sys.executable, "-c", KILLED_RUN, stop_after, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env=env)


def _tables(stdout: str) -> str:
    start = stdout.index("Mean over all (user, chunk) points")
    return stdout[start : stdout.index("plots:")]


@pytest.fixture(scope="module")
def whole_run(data_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("whole")
    done = _run(_args(data_file, out))
    assert done.returncode == 0, done.stderr
    return done, out


@pytest.fixture(scope="module")
def uninterrupted(whole_run):
    return _tables(whole_run[0].stdout)


def _stages(path):
    return {s["name"]: s for s in json.loads(path.read_text())["stages"]}


@pytest.mark.parametrize("stop_after", ["graph embedding", "ANN rolling",
                                        "MiCRO and MiCRO (paper) rolling",
                                        "ANN report", "MiCRO (paper) report",
                                        "RecentItems rolling"])
def test_resume_after_a_kill_prints_the_same_tables(data_file, uninterrupted, tmp_path,
                                                    stop_after):
    args = _args(data_file, tmp_path / "out")
    killed = _run(args, stop_after=stop_after)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert "Mean over all" not in killed.stdout
    checkpoints = tmp_path / "out" / "checkpoints"
    assert (checkpoints / f"{stop_after}.pkl").is_file()
    assert not list(checkpoints.glob("*.tmp"))
    resumed = _run([*args, "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert _tables(resumed.stdout) == uninterrupted
    if stop_after.endswith("rolling") or stop_after == "MiCRO (paper) report":
        # killed between the shared evaluation's two reports, it carries on from its last
        # checkpoint as well
        assert "rolling evaluation (resumed after chunk" in resumed.stdout
    elif stop_after.endswith("report"):
        method = stop_after.removesuffix(" report")
        assert f"{method} rolling evaluation (from its checkpoint)" in resumed.stdout
    else:
        assert f"{stop_after} (from its checkpoint)" in resumed.stdout
    assert "from checkpoint" in resumed.stdout
    log = resumed.stdout.split("Per stage")[0]
    if stop_after in ("MiCRO and MiCRO (paper) rolling", "MiCRO (paper) report",
                      "RecentItems rolling"):
        # every method still to evaluate has its fitted state in a checkpoint: neither the
        # embedding nor the clusters are loaded
        assert "graph embedding" not in log and "clustering" not in log
    else:
        assert "graph embedding (from its checkpoint)" in log


def test_a_resumed_run_reports_the_whole_jobs_stages(data_file, whole_run, tmp_path):
    args = _args(data_file, tmp_path / "out")
    shared = "MiCRO and MiCRO (paper) rolling"
    assert _run(args, stop_after=shared).returncode == -signal.SIGKILL
    before = _stages(tmp_path / "out" / "checkpoints" / "stages.json")
    assert before[f"{shared} evaluation"]["partial"]
    resumed = _run([*args, "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    after = _stages(tmp_path / "out" / "stages.json")
    whole = _stages(whole_run[1] / "stages.json")
    # the uninterrupted run's stages, in its order, each with the whole of its work
    assert list(after) == list(whole)
    assert all(after[name]["work"] == whole[name]["work"] for name in whole)
    # a stage taken from its checkpoint keeps the figures of the run that computed it
    for name in ("load", "ANN rolling evaluation"):
        assert after[name]["resumed"]
        assert after[name]["seconds"] == before[name]["seconds"]
        assert after[name]["cpu_seconds"] == before[name]["cpu_seconds"]
    # the stages the resumed run did not need keep their rows: the fit it did not redo,
    # and the embedding and clusters, which only that fit read
    for name in ("graph embedding", "clustering", "MiCRO fit"):
        assert after[name] == before[name]
    # the evaluation carried on counts its time up to the kill's last checkpoint too
    rolling = after[f"{shared} evaluation"]
    assert not rolling["resumed"] and rolling["continued"]
    assert rolling["cpu_seconds"] > before[f"{shared} evaluation"]["cpu_seconds"]
    assert rolling["n_checkpoints"] >= before[f"{shared} evaluation"]["n_checkpoints"]
    assert "resumed after chunk" in resumed.stdout.split("Per stage")[1]


def test_resuming_a_finished_run_reads_only_the_reports(whole_run, data_file, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(whole_run[1], out)
    resumed = _run([*_args(data_file, out), "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert _tables(resumed.stdout) == _tables(whole_run[0].stdout)
    # the embedding and the clusters are not loaded, but the job's table keeps their rows
    log = resumed.stdout.split("Per stage")[0]
    assert "graph embedding" not in log and "clustering" not in log
    assert "ANN rolling evaluation (from its checkpoint)" in log
    # the two MiCRO rows' reports are read back as the one stage that made them
    assert "MiCRO and MiCRO (paper) rolling evaluation (from its checkpoint)" in log
    assert list(_stages(out / "stages.json")) == list(_stages(whole_run[1] / "stages.json"))


def test_resume_refuses_checkpoints_of_another_run(data_file, tmp_path):
    args = _args(data_file, tmp_path / "out")
    assert _run(args, stop_after="load").returncode == -signal.SIGKILL
    other = [a if a != "6" else "7" for a in args]
    refused = _run([*other, "--resume"])
    assert refused.returncode == 2
    assert "k=6" in refused.stderr and "k=7" in refused.stderr
    assert refused.stderr.strip().count("\n") == 0


def test_resume_may_add_baselines_to_a_run(data_file, whole_run, tmp_path):
    args = _args(data_file, tmp_path / "out")
    fewer = [*args[:-1], "Popularity"]
    done = _run(fewer)
    assert done.returncode == 0, done.stderr
    more = _run([*args, "--resume"])
    assert more.returncode == 0, more.stderr
    # the same tables as a run with every baseline from the start
    assert _tables(more.stdout) == _tables(whole_run[0].stdout)
    log = more.stdout.split("Per stage")[0]
    assert "MiCRO and MiCRO (paper) rolling evaluation (from its checkpoint)" in log
    assert "Popularity rolling evaluation (from its checkpoint)" in log
    # only the new baselines ran: ANN from the embedding's checkpoint, no clustering
    assert "graph embedding (from its checkpoint)" in log and "clustering" not in log
    assert "ANN fit:" in log and "RecentItems fit:" in log
    config = json.loads((tmp_path / "out" / "checkpoints" / "config.json").read_text())
    assert config["baselines"] == "ANN,Popularity,RecentItems"
    # another setting is still refused, with the baselines changed too
    other = [a if a != "6" else "7" for a in fewer]
    refused = _run([*other, "--resume"])
    assert refused.returncode == 2 and "k=6" in refused.stderr
    # and leaves the folder's record as it was
    assert json.loads((tmp_path / "out" / "checkpoints" / "config.json").read_text()) == config


def test_stages_save_atomically_and_start_over_without_resume(tmp_path):
    stages = Stages(tmp_path, config={"k": 1}, say=None)
    assert stages.run("a", lambda: {"x": np.arange(3)})["x"].tolist() == [0, 1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pkl", "config.json",
                                                          "stages.json"]
    resumed = Stages(tmp_path, resume=True, config={"k": 1}, say=None)
    assert resumed.run("a", lambda: 1 / 0)["x"].tolist() == [0, 1, 2]
    assert resumed.stages[0].resumed
    assert resumed.to_dict()["stages"][0]["seconds"] == stages.stages[0].seconds
    fresh = Stages(tmp_path, config={"k": 2}, say=None)
    assert not fresh.has("a")
    fresh.run("b", lambda: 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.pkl", "config.json",
                                                          "stages.json"]
    assert [s["name"] for s in fresh.to_dict()["stages"]] == ["b"]
    assert '"k": 2' in (tmp_path / "config.json").read_text()
    assert "| a |" in stages.table() and stages.to_dict()["stages"][0]["name"] == "a"


def test_a_shared_array_is_saved_once_and_loaded_as_one(tmp_path):
    import gc
    import pickle

    vectors = np.arange(60_000, dtype=np.float32).reshape(-1, 6)
    stages = Stages(tmp_path, config={"k": 1}, say=None)
    stages.share("user vectors", vectors)
    stages.share("user vectors", vectors)  # the same array again: nothing written
    stages.save("a", {"vectors": vectors, "again": vectors.view(), "view": vectors[:3]})
    stages.save("b", [vectors, "other"])
    stages.save("labels", np.arange(5))  # an array checkpoint of its own stays a pickle
    assert (tmp_path / "user vectors.npy").is_file()
    # the checkpoints refer to the array: neither holds its bytes (a view is copied)
    assert (tmp_path / "a.pkl").stat().st_size < vectors.nbytes / 10
    assert (tmp_path / "b.pkl").stat().st_size < vectors.nbytes / 10
    resumed = Stages(tmp_path, resume=True, config={"k": 1}, say=None)
    a, b = resumed.load("a"), resumed.load("b")
    assert a["vectors"] is a["again"] is b[0]
    np.testing.assert_array_equal(a["vectors"], vectors)
    np.testing.assert_array_equal(a["view"], vectors[:3])
    assert resumed.load("labels").tolist() == [0, 1, 2, 3, 4]
    # the loaded array is the shared one: sharing it again writes nothing
    before = (tmp_path / "user vectors.npy").stat().st_mtime_ns
    resumed.share("user vectors", a["vectors"])
    assert (tmp_path / "user vectors.npy").stat().st_mtime_ns == before
    # a script reads a checkpoint alone
    alone = load_checkpoint(tmp_path / "a.pkl")
    assert alone["vectors"] is alone["again"]
    np.testing.assert_array_equal(alone["vectors"], vectors)
    with pytest.raises(pickle.UnpicklingError):  # plain pickle does not know the reference
        pickle.loads((tmp_path / "a.pkl").read_bytes())
    # the stages hold no reference of their own: a dropped array is freed, then read again
    del a, b, alone
    gc.collect()
    assert resumed._shared["user vectors"]() is None
    np.testing.assert_array_equal(resumed.load("b")[0], vectors)
    # without its file the reference cannot be resolved, and the error says so
    (tmp_path / "user vectors.npy").unlink()
    with pytest.raises(FileNotFoundError, match="'user vectors'.*run again without --resume"):
        Stages(tmp_path, resume=True, config={"k": 1}, say=None).load("a")
    # a new run clears the old run's shared arrays and temporary files with its checkpoints
    stages.share("user vectors", vectors.copy())
    (tmp_path / "left.pkl.tmp").write_bytes(b"half")
    assert (tmp_path / "user vectors.npy").is_file()
    Stages(tmp_path, config={"k": 2}, say=None).run("c", lambda: 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pkl", "config.json",
                                                          "stages.json"]


def test_a_shared_arrays_file_is_never_overwritten_under_earlier_checkpoints(tmp_path):
    import gc

    vectors = np.arange(600, dtype=np.float32).reshape(-1, 6)
    stages = Stages(tmp_path, config={"k": 1}, say=None)
    stages.share("user vectors", vectors)
    stages.save("ann", {"queries": vectors})
    file = tmp_path / "user vectors.npy"
    before = file.stat().st_mtime_ns
    # the same values in another array (a resumed checkpoint that held its own copy):
    # the file is taken as it is, and later checkpoints refer to it
    resumed = Stages(tmp_path, resume=True, config={"k": 1}, say=None)
    copy = vectors.copy()
    resumed.share("user vectors", copy)
    resumed.save("fit", [copy])
    assert file.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.glob("*.npy")) == ["user vectors.npy"]
    assert (tmp_path / "fit.pkl").stat().st_size < vectors.nbytes / 2
    # other values under the name (an embedding computed again): a file of their own,
    # and each checkpoint reads what it was saved with
    other = vectors + 1
    resumed.share("user vectors", other)
    resumed.save("micro", {"queries": other})
    assert file.stat().st_mtime_ns == before
    assert (tmp_path / "user vectors (2).npy").is_file()
    del copy, other
    gc.collect()
    again = Stages(tmp_path, resume=True, config={"k": 1}, say=None)
    np.testing.assert_array_equal(again.load("ann")["queries"], vectors)
    np.testing.assert_array_equal(again.load("fit")[0], vectors)
    np.testing.assert_array_equal(again.load("micro")["queries"], vectors + 1)
    # sharing the second values again finds their file; a third gets the next one
    again.share("user vectors", vectors + 1)
    again.share("user vectors", vectors + 2)
    assert sorted(p.name for p in tmp_path.glob("*.npy")) == [
        "user vectors (2).npy", "user vectors (3).npy", "user vectors.npy"]


def test_a_checkpoint_that_cannot_be_written_warns_and_the_run_goes_on(tmp_path,
                                                                       monkeypatch):
    import errno

    stages = Stages(tmp_path, config={"k": 1}, say=None)
    stages.save("a", 1)

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.warns(RuntimeWarning, match="checkpoint 'a' could not be saved.*No space"):
        stages.save("a", 2)
    with pytest.warns(RuntimeWarning, match="could not be saved") as caught:
        assert stages.run("b", lambda: 3) == 3
    # the checkpoint and then the stage's figures
    assert [str(w.message).split(" could")[0] for w in caught] == [
        "checkpoint 'b'", "the stages' figures (stages.json)"]
    v = np.ones(3)
    with pytest.warns(RuntimeWarning, match="shared array 'v' could not be saved"):
        stages.share("v", v)
    monkeypatch.undo()
    assert not list(tmp_path.glob("*.tmp")) and not (tmp_path / "v.npy").exists()
    # the array that could not be saved is not referred to: a checkpoint holds it
    stages.save("c", {"v": v})
    resumed = Stages(tmp_path, resume=True, config={"k": 1}, say=None)
    assert resumed.load("a") == 1 and not resumed.has("b")
    assert resumed.load("c")["v"].tolist() == [1, 1, 1]


def test_the_runs_checkpoints_hold_the_user_vectors_once(whole_run, tmp_path):
    import pickle

    from sklearn_micro import ANNRecommender
    from sklearn_micro._log import EmbeddedLog

    checkpoints = whole_run[1] / "checkpoints"
    assert (checkpoints / "user vectors.npy").is_file()
    config = json.loads((checkpoints / "config.json").read_text())
    stages = Stages(checkpoints, resume=True, config=config, say=None)
    embedding = stages.load("graph embedding")
    ann = stages.load("ANN fit")
    assert ann.user_vectors_ is embedding.user_vectors
    assert embedding.user_vectors.shape[0] == len(embedding.user_ids)
    # ANN fitted on vectors read from a checkpoint (np.asarray of an unpickled array is a
    # view of it, not the array) still refers to them
    mine = Stages(tmp_path, config={"k": 1}, say=None)
    mine.share("user vectors", embedding.user_vectors)
    refit = ANNRecommender(random_state=0).fit(EmbeddedLog(
        stages.load("load")[0], embedding.user_ids, embedding.item_ids,
        embedding.user_vectors, embedding.item_vectors))
    mine.save("ANN", refit)
    held = len(pickle.dumps(refit, protocol=pickle.HIGHEST_PROTOCOL))
    assert held - (tmp_path / "ANN.pkl").stat().st_size >= 0.9 * refit.user_vectors_.nbytes
    # ANN's checkpoint is smaller than it would be with the vectors in it by their bytes
    held = len(pickle.dumps(ann, protocol=pickle.HIGHEST_PROTOCOL))
    size = (checkpoints / "ANN fit.pkl").stat().st_size
    assert held - size >= 0.9 * ann.user_vectors_.nbytes


def test_the_vectors_are_freed_once_ann_is_evaluated(monkeypatch):
    import gc
    import weakref

    import sklearn_micro.experiment._run as experiment
    from sklearn_micro import ANNRecommender, MiCRO

    log = make_engagements(n_users=300, n_items=400, n_chunks=5, n_interests=4,
                           n_engagements=4000, random_state=2)
    train, test = experiment.split_chunks(log, 3)
    held = {}
    ann_fit, micro_fit = ANNRecommender.fit, MiCRO.fit

    def fit_ann(self, X, y=None):
        vectors = X.user_vectors
        while vectors.base is not None:  # the array that owns the memory
            vectors = vectors.base
        held["user vectors"] = weakref.ref(vectors)
        return ann_fit(self, X, y)

    def fit_micro(self, X, y=None, **params):
        gc.collect()
        held["alive at MiCRO's fit"] = held["user vectors"]() is not None
        return micro_fit(self, X, y, **params)

    monkeypatch.setattr(ANNRecommender, "fit", fit_ann)
    monkeypatch.setattr(MiCRO, "fit", fit_micro)
    experiment.run_experiment(train, test, n_interests=4, n_components=8,
                              methods=("MiCRO (paper)", "ANN"), m_values=(10,), log=None)
    assert held["alive at MiCRO's fit"] is False


def test_the_ledger_keeps_a_stage_measured_before_the_first_checkpoint(tmp_path):
    (tmp_path / "stages.json").write_text('{"stages": [{"name": "old"}]}')
    stages = Stages(tmp_path, config={"k": 1}, say=None)
    with stages.measure("no checkpoint"):
        pass
    stages.run("a", lambda: 1)
    saved = json.loads((tmp_path / "stages.json").read_text())["stages"]
    assert [s["name"] for s in saved] == ["no checkpoint", "a"]
    assert [s["name"] for s in stages.to_dict()["stages"]] == ["no checkpoint", "a"]


@pytest.mark.parametrize("params, error", [({"phi_min_cont": 2}, TypeError),
                                           ({"phi_min_count": -1}, ValueError)])
def test_micro_params_are_checked_before_any_stage(params, error):
    import sklearn_micro.experiment._run as experiment

    log = make_engagements(n_users=60, n_items=80, n_chunks=4, n_interests=3,
                           n_engagements=600, random_state=0)
    train, test = experiment.split_chunks(log, 3)
    stages = Stages(say=None)
    with pytest.raises(error, match="phi_min_c"):
        experiment.run_experiment(train, test, n_interests=3, n_components=4,
                                  methods=("MiCRO",), stages=stages, log=None,
                                  micro_params=params)
    assert stages.stages == []


@pytest.mark.parametrize("one_chain", [True, False])
@pytest.mark.parametrize("phi_decay", [0.5, 0])
def test_micro_rows_share_one_sampler_and_report_as_if_evaluated_apart(monkeypatch, phi_decay,
                                                                       one_chain):
    """With phi_decay 0 each block of users is also ranked for both rows from one scatter
    (`MiCRO._recommend_with_paper`); a chunk sampled as one chain is sampled while it is
    scored (`_learning_beside`), one sampled in partitions after; the reports are still
    those of evaluating apart."""
    import sklearn_micro.experiment._run as experiment
    from sklearn_micro import MiCRO

    log = make_engagements(n_users=300, n_items=400, n_chunks=7, n_interests=4,
                           n_engagements=6000, random_state=2)
    train, test = experiment.split_chunks(log, 3)
    settings = dict(n_interests=4, n_components=8, m_values=(10, 50), log=None,
                    micro_params={"personal": 0.3, "phi_decay": phi_decay,
                                  # the default threshold makes these chunks one chain each
                                  **({} if one_chain else {"min_partition_work": 0})})
    sampled, paired, threads = [], [], []
    partial_fit = MiCRO.partial_fit
    with_paper = MiCRO._recommend_with_paper

    def counted(self, X, y=None):
        sampled.append(self.phi_decay)
        threads.append(threading.current_thread().name)
        return partial_fit(self, X, y)

    def counted_pairs(self, users, m, **kwargs):
        paired.append(len(users))
        return with_paper(self, users, m, **kwargs)

    monkeypatch.setattr(MiCRO, "partial_fit", counted)
    monkeypatch.setattr(MiCRO, "_recommend_with_paper", counted_pairs)
    stages = Stages(say=None)
    both = experiment.run_experiment(train, test, methods=("MiCRO (paper)", "MiCRO"),
                                     stages=stages, **settings)
    # one sampler for both rows: the last of the 4 test chunks is scored, not sampled
    assert sampled == [phi_decay] * 3
    # a chunk of one chain sampled on a thread of its own while it is scored, where two
    # cores and numba's threading layer allow it
    beside = one_chain and resolve_n_jobs(-1) >= 2 and threading_layer() in ("omp", "tbb")
    assert [name.startswith("micro-partial-fit") for name in threads] == [beside] * 3
    # one scatter for both rows on each test chunk when the two share phi
    assert len(paired) == (4 if phi_decay == 0 else 0)
    assert sum(paired) == (len(np.unique(np.column_stack([test.user, test.chunk]), axis=0))
                           if phi_decay == 0 else 0)
    assert [s.name for s in stages.stages] == [
        "graph embedding", "clustering", "MiCRO fit",
        "MiCRO and MiCRO (paper) rolling evaluation"]
    for name in ("MiCRO (paper)", "MiCRO"):
        apart = experiment.run_experiment(train, test, methods=(name,), **settings)[name]
        np.testing.assert_array_equal(np.asarray(both[name].overall()),
                                      np.asarray(apart.overall()))
        np.testing.assert_array_equal(np.asarray(both[name].per_chunk()),
                                      np.asarray(apart.per_chunk()))
    assert not np.array_equal(np.asarray(both["MiCRO"].overall()),
                              np.asarray(both["MiCRO (paper)"].overall()))


def _beside_case():
    """A MiCRO whose first test chunk is sampled beside its scoring, that chunk, and the
    shared evaluation of the chunk by a copy of the model, for reference."""
    import sklearn_micro.experiment._run as experiment
    from sklearn_micro import MiCRO

    log = make_engagements(n_users=200, n_items=300, n_chunks=5, n_interests=4,
                           n_engagements=3000, random_state=3)
    train, test = experiment.split_chunks(log, 3)
    items = np.unique(train.item)
    model = MiCRO(personal=0.3, phi_decay=0.5, random_state=0, n_jobs=2).fit(
        train, item_interest=(items, items % 4))
    chunk = test.take(test.chunk == test.chunk.min())
    if not experiment._can_learn_beside(model, chunk):
        return model, chunk, None
    reference = experiment._SharedSampler(copy.deepcopy(model), m_values=(10,))
    reference.step(chunk)
    return model, chunk, reference


def _assert_kept_and_carries_on(shared, model, before, rng_state, chunk, reference):
    """No point kept, the model as it was before the chunk; then the chunk evaluates as
    if nothing had happened."""
    assert shared.chunks_done == shared.paper.chunks_done == []
    assert shared.micro.sums.chunk.size == shared.paper.sums.chunk.size == 0
    # the same attributes (the scored state may have added its chunk's cache, `_grouped`)
    assert set(model.__dict__) - {"_grouped"} == set(before) - {"_grouped"}
    assert all(model.__dict__[name] is value for name, value in before.items()
               if name not in ("random_state_", "_grouped"))
    np.testing.assert_equal(model.random_state_.get_state(), rng_state)
    shared.step(chunk)
    for name in ("micro", "paper"):
        np.testing.assert_array_equal(
            np.asarray(getattr(shared, name).report().overall()),
            np.asarray(getattr(reference, name).report().overall()))
    np.testing.assert_array_equal(model.support_count_, reference.micro.estimator.support_count_)


@pytest.mark.parametrize("fails", ["scoring", "partial_fit"])
def test_a_chunk_that_fails_beside_its_sampling_leaves_the_evaluation_as_it_was(
        monkeypatch, fails):
    """Scoring fails while the chunk is sampled on another thread, or the sampling does:
    the error is raised, no point is kept, and the model is as it was before the chunk
    (then the chunk evaluates as if nothing had happened)."""
    import sklearn_micro.experiment._run as experiment
    from sklearn_micro import MiCRO

    model, chunk, reference = _beside_case()
    if reference is None:
        pytest.skip("one core, or numba's workqueue threading layer: no sampling beside")
    shared = experiment._SharedSampler(model, m_values=(10,))
    before = dict(model.__dict__)
    rng_state = model.random_state_.get_state()
    sampled = threading.Event()
    partial_fit = MiCRO.partial_fit

    def failing_fit(self, X, y=None):
        if fails == "partial_fit":
            raise RuntimeError("partial_fit failed")
        partial_fit(self, X, y)
        sampled.set()
        return self

    def failing_points(*args):
        sampled.wait(60)  # fail once the model has moved on
        raise RuntimeError("scoring failed")

    with monkeypatch.context() as patch:
        patch.setattr(MiCRO, "partial_fit", failing_fit)
        if fails == "scoring":
            patch.setattr(experiment, "paired_chunk_points", failing_points)
        with pytest.raises(RuntimeError, match=f"{fails} failed"):
            shared.step(chunk)
    _assert_kept_and_carries_on(shared, model, before, rng_state, chunk, reference)


# The child of the Ctrl-C test: once both rows of the chunk are scored, its sampler thread
# says "scored" and waits for the SIGINT that the test then sends, which the main thread,
# waiting for the sampler, takes as a KeyboardInterrupt; then the sampler goes on.
INTERRUPTED_RUN = textwrap.dedent("""
    import signal, sys, threading
    from sklearn_micro import MiCRO
    import sklearn_micro.experiment._run as experiment
    import test_resume

    model, chunk, reference = test_resume._beside_case()
    if reference is None:
        print("no sampling beside", flush=True)
        sys.exit(0)
    shared = experiment._SharedSampler(model, m_values=(10,))
    before = dict(model.__dict__)
    rng_state = model.random_state_.get_state()
    scored, signalled = threading.Event(), threading.Event()

    def on_sigint(signum, frame):
        signalled.set()
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, on_sigint)
    partial_fit = MiCRO.partial_fit
    chunk_points = experiment.paired_chunk_points

    def waiting_fit(self, X, y=None):
        if not scored.wait(120):
            sys.exit("the rows were not scored")
        print("scored", flush=True)
        if not signalled.wait(120):
            sys.exit("no SIGINT came")
        return partial_fit(self, X, y)

    def counted_points(*args):
        points = chunk_points(*args)
        scored.set()  # both rows
        return points

    MiCRO.partial_fit = waiting_fit
    experiment.paired_chunk_points = counted_points
    try:
        shared.step(chunk)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    else:
        sys.exit("shared.step was not interrupted")
    MiCRO.partial_fit = partial_fit
    experiment.paired_chunk_points = chunk_points
    test_resume._assert_kept_and_carries_on(shared, model, before, rng_state, chunk,
                                            reference)
    print("kept and carried on", flush=True)
""")


def test_ctrl_c_while_the_scored_chunk_waits_for_its_sampler_leaves_the_evaluation_as_it_was():
    """Ctrl-C (a SIGINT from another process) comes while the scored chunk waits for its
    sampler: the KeyboardInterrupt is raised, no point is kept, and the model is as it
    was before the chunk; then the chunk evaluates as if nothing had happened. Run in a
    child process, which the test interrupts."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", INTERRUPTED_RUN], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 300)
        first = child.stdout.readline().strip() if ready else ""
        if first == "scored":
            child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=300)
    finally:
        child.kill()
    if first == "no sampling beside":
        pytest.skip("one core, or numba's workqueue threading layer: no sampling beside")
    assert first == "scored", err
    assert child.returncode == 0, err
    assert out.split() == ["interrupted", "kept", "and", "carried", "on"], (out, err)


def test_the_shared_evaluation_keeps_no_state_of_the_paper_model_between_chunks():
    import sklearn_micro.experiment._run as experiment
    from sklearn_micro import MiCRO

    log = make_engagements(n_users=200, n_items=300, n_chunks=5, n_interests=4,
                           n_engagements=3000, random_state=3)
    train, test = experiment.split_chunks(log, 3)
    items = np.unique(train.item)
    model = MiCRO(personal=0.3, phi_decay=0.5, random_state=0).fit(
        train, item_interest=(items, items % 4))
    shared = experiment._SharedSampler(model, m_values=(10,))
    chunk = test.take(test.chunk == test.chunk.min())
    before = model.support_count_
    shared.step(chunk)
    # the paper's model of the state before the chunk would hold the replaced arrays alive
    # and in every checkpoint
    assert shared.paper.estimator is None and model.support_count_ is not before
    assert shared.chunks_done == shared.paper.chunks_done == [int(chunk.chunk[0])]
