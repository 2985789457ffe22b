"""The paper's two logs as presets: parameters, the streamed draw and the command line."""

import argparse

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from sklearn_micro import MiCRO, cli
from sklearn_micro.datasets import iter_preset, preset_parameters, read_log, write_preset
from sklearn_micro.datasets._presets import PRESETS
from sklearn_micro.experiment import Stages


@pytest.mark.parametrize("preset, chunks, test_chunks", [("fave", 192, 23), ("follow", 25, 7)])
def test_parameters_scale_the_sizes_and_keep_the_chunks(preset, chunks, test_chunks):
    full = preset_parameters(preset)
    small = preset_parameters(preset, 0.01)
    assert full.n_interests == 5_000 and small.n_interests == 50
    assert small.train_chunks == full.train_chunks == chunks - test_chunks
    assert small.test_chunks == test_chunks
    for name in ("n_users", "n_items", "n_engagements"):
        assert small.generator[name] == round(PRESETS[preset][name] * 0.01)
    for name in ("n_chunks", "user_degree", "min_item_degree"):
        assert small.generator[name] == full.generator[name]
    # an (interest, chunk) holds the same engagements at every scale
    per = [p.generator["n_engagements"] / p.generator["n_chunks"] / p.n_interests
           for p in (full, small)]
    assert per[0] == pytest.approx(per[1], rel=1e-3)


@pytest.mark.parametrize("kwargs, match", [
    (dict(preset="fav"), "preset"),
    (dict(preset="fave", scale=0.005), "scale"),
    (dict(preset="fave", scale=1.5), "scale"),
])
def test_bad_preset_or_scale_is_refused_by_name(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        preset_parameters(**kwargs)
    with pytest.raises(InvalidParameterError, match=match):
        iter_preset(**kwargs)


def test_write_preset_streams_the_draw_to_parquet(tmp_path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "follow.parquet"
    n = write_preset(path, "follow", 0.01, random_state=3)
    log = read_log(path)
    chunks = list(iter_preset("follow", 0.01, random_state=3))
    assert n == len(log) == sum(len(c) for c in chunks)
    assert np.array_equal(log.item, np.concatenate([c.item for c in chunks]))
    assert log.chunk.min() == 0 and log.chunk.max() == 24
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("preset", ["follow", "fave"])
def test_iter_preset_draws_by_its_random_state(preset):
    """The same seed draws the same log, another seed another one (the first chunk of
    each is compared, the draw being lazy); `write_preset` writes what `iter_preset`
    draws with its seed (`test_write_preset_streams_the_draw_to_parquet`)."""
    def first(seed):
        return next(iter(iter_preset(preset, 0.01, random_state=seed)))

    a, again, b = first(3), first(3), first(4)
    for column in ("user", "item", "chunk"):
        assert np.array_equal(getattr(a, column), getattr(again, column))
    assert not (len(a) == len(b) and np.array_equal(a.user, b.user)
                and np.array_equal(a.item, b.item))


def test_write_preset_writes_the_draw_of_its_random_state(tmp_path, monkeypatch):
    """On a tiny preset: the file of a seed holds every column of `iter_preset`'s chunks
    for that seed, the same seed writes the same file, another seed another one."""
    pytest.importorskip("pyarrow")
    monkeypatch.setitem(PRESETS, "follow", dict(
        PRESETS["follow"], n_users=20_000, n_items=30_000, n_engagements=300_000,
        n_interests=500, n_chunks=4, test_chunks=1, user_degree=(1, 40)))

    def written(seed, name):
        path = tmp_path / f"{name}.parquet"
        assert write_preset(path, "follow", 0.01, random_state=seed) > 0
        return read_log(path)

    def drawn(seed):
        chunks = list(iter_preset("follow", 0.01, random_state=seed))
        return {c: np.concatenate([getattr(chunk, c) for chunk in chunks])
                for c in ("user", "item", "chunk")}

    a, again, b = written(3, "a"), written(3, "again"), written(4, "b")
    for column, values in drawn(3).items():
        assert np.array_equal(getattr(a, column), values)
        assert np.array_equal(getattr(again, column), values)
    assert not (len(a) == len(b) and np.array_equal(a.user, b.user)
                and np.array_equal(a.item, b.item))


def _args(out, **given):
    args = cli._parser().parse_args(["reproduce", "--out", str(out), *given.pop("argv", [])])
    return argparse.Namespace(**{**vars(args), **given})


def test_the_draw_is_cached_by_preset_scale_seed_and_version(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr("sklearn_micro.datasets.write_preset",
                        lambda path, *a, **k: drawn.append(path) or
                        write_preset(path, "follow", 0.01, random_state=0))
    stages = Stages(None, say=None)
    args = _args(tmp_path, preset="follow", scale=0.01)
    first = cli._draw(args, stages)
    again = cli._draw(args, stages)
    assert first == again and drawn == [first]
    assert [s.name for s in stages.stages] == ["drawing", "drawing"]
    assert stages.stages[0].work == stages.stages[1].work > 0
    assert "cached" in stages.stages[1].note
    other = cli._draw(_args(tmp_path, preset="follow", scale=0.01, seed=1), stages)
    assert other != first and len(drawn) == 2
    assert cli.__version__ in first.name and "follow" in first.name


@pytest.mark.parametrize("argv, match", [
    (["--scale", "0.05"], "--scale applies to --preset only"),
    (["--preset", "fave", "--scale", "2"], "from 0.01 to 1; got 2"),
    (["--preset", "fave", "--scale", "0.001"], "from 0.01 to 1; got 0.001"),
    (["--preset", "fave", "--data", "x.csv"], "not both"),
    (["--preset", "fave", "--user", "uid"], "--data only"),
])
def test_reproduce_refuses_bad_preset_options(argv, match, capsys, tmp_path):
    assert cli.main(["reproduce", "--out", str(tmp_path), *argv]) == 2
    assert match in capsys.readouterr().err


def test_reproduce_takes_the_preset_k_and_split_unless_given(tmp_path, monkeypatch):
    seen = {}

    def stop(args, stages):
        seen.update(k=args.k, train_chunks=args.train_chunks, weight=args.negative_weight,
                    beta=args.beta)
        raise cli.CommandError("stop")

    monkeypatch.setattr(cli, "_draw", stop)
    fave, follow = (preset_parameters(p).negative_weight for p in ("fave", "follow"))
    cli.main(["reproduce", "--preset", "fave", "--scale", "0.05", "--out", str(tmp_path)])
    assert seen == dict(k=250, train_chunks=169, weight=fave,
                        beta=preset_parameters("fave", 0.05).beta)
    cli.main(["reproduce", "--preset", "follow", "--out", str(tmp_path), "--k", "7",
              "--train-chunks", "20", "--negative-weight", "none", "--beta", "0.3"])
    assert seen == dict(k=7, train_chunks=20, weight=None, beta=0.3)
    cli.main(["reproduce", "--preset", "follow", "--out", str(tmp_path)])
    # the default scale, 0.01
    assert seen == dict(k=50, train_chunks=18, weight=follow, beta=0.01)
    cli.main(["reproduce", "--preset", "follow", "--out", str(tmp_path),
              "--negative-weight", "2e5"])
    assert seen["weight"] == 2e5


def test_preset_negative_weight_is_the_same_at_every_scale():
    # a user's unengaged pairs weigh the same in total at every scale, as their degrees do
    for preset in ("fave", "follow"):
        weights = {preset_parameters(preset, s).negative_weight for s in (0.01, 0.25, 1)}
        assert len(weights) == 1 and next(iter(weights)) > 0


def test_preset_beta_holds_its_mass_against_an_interests_chunk_at_every_scale():
    # I_t grows with the scale and N[k, t] does not: I_t * beta must not grow either
    for preset in ("fave", "follow"):
        spec = {s: preset_parameters(preset, s) for s in (0.01, 0.05, 0.25, 1)}
        # I_t * beta against N[k, t] = a chunk's engagements / K, both chunks alike
        mass = {s: p.generator["n_items"] * p.beta * p.generator["n_interests"]
                / p.generator["n_engagements"] for s, p in spec.items()}
        assert spec[0.01].beta == MiCRO().beta  # the calibration's scale: the default
        assert np.allclose(list(mass.values()), mass[0.01], rtol=0.01)
        assert spec[1].beta < spec[0.25].beta < spec[0.05].beta < spec[0.01].beta


def test_fave_trending_share_grows_with_the_scale_from_the_calibrated_one():
    # the top 100's share of a chunk falls with the scale at a fixed trending share: fave's
    # grows from its calibration at 1/100 to 0.2 at full scale; follow's head holds as is
    share = {p: [preset_parameters(p, s).generator["trending_share"]
                 for s in (0.01, 0.05, 0.25, 1)] for p in ("fave", "follow")}
    assert share["fave"][0] == PRESETS["fave"]["trending_share"]
    assert share["fave"] == sorted(share["fave"]) and share["fave"][-1] == pytest.approx(0.2)
    assert share["follow"] == [PRESETS["follow"]["trending_share"]] * 4


def test_no_trending_share_draws_the_log_as_before():
    from sklearn_micro.datasets import make_engagements

    plain = make_engagements(500, 300, 6, 5, random_state=0)
    same = make_engagements(500, 300, 6, 5, random_state=0, trending_share=0.0,
                            n_trending=3)
    assert np.array_equal(plain.item, same.item) and np.array_equal(plain.user, same.user)


def test_trending_items_take_engagements_of_every_interest():
    from sklearn_micro.datasets import make_engagements

    params = dict(n_users=2000, n_items=1500, n_chunks=8, n_interests=20,
                  random_state=0, return_truth=True)
    plain, truth = make_engagements(**params)
    log, head_truth = make_engagements(**params, trending_share=0.3, n_trending=5)
    # the users' degrees and the items' least degree hold
    assert np.array_equal(np.bincount(log.user, minlength=2000), head_truth.user_degree)
    assert np.bincount(log.item, minlength=1500).min() >= 5

    def outside_support(log, truth):
        support = truth.user_interests.tocsr()
        interest = truth.item_interest[log.item]
        return np.mean(np.asarray(support[log.user, interest]).ravel() == 0)

    assert outside_support(plain, truth) < 0.01
    assert outside_support(log, head_truth) > 0.1
    # a few items of each chunk hold a large share of it
    for t in range(8):
        counts = np.sort(np.bincount(log.item[log.chunk == t]))[::-1]
        assert counts[:5].sum() > 0.1 * counts.sum()


def test_the_cache_follows_the_generator_parameters(tmp_path, monkeypatch):
    args = _args(tmp_path, preset="follow", scale=0.01)
    before = cli._preset_path(args)
    monkeypatch.setitem(PRESETS["follow"], "item_appeal", 9.0)
    assert cli._preset_path(args) != before
