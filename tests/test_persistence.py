"""Saving and loading fitted models: skops with trusted types, pickle, and the version check."""

import pickle
import re
import zipfile

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from sklearn.pipeline import Pipeline

import sklearn_micro
from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans
from sklearn_micro.baselines import (
    ALSRecommender,
    ANNRecommender,
    ItemKNNRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
    RP3betaRecommender,
)
from sklearn_micro.model_selection._rolling import _final_recommender, _partial_fit
from sklearn_micro.persistence import TRUSTED_TYPES, IncompatibleVersionError, dump, load
from sklearn_micro.utils.estimator_checks import FixedEmbedder, make_log

sio = pytest.importorskip("skops.io")

X_TRAIN, X_NEXT = make_log(3, as_frame=True)
FIRST, REST = X_NEXT[X_NEXT.chunk == X_NEXT.chunk.min()], X_NEXT[X_NEXT.chunk > X_NEXT.chunk.min()]
USERS = np.concatenate([X_TRAIN.user.unique()[:10], X_NEXT.user.unique()[-3:], [-1]])


def _micro():
    items = np.unique(X_TRAIN.item)
    return MiCRO(random_state=0).fit(X_TRAIN, item_interest=(items, items % 4))


FACTORIES = {
    "micro": _micro,
    "micro-pipeline": lambda: Pipeline([
        ("embed", GraphEmbedder(n_components=8, random_state=0)),
        ("interests", SphericalKMeans(n_clusters=4, random_state=0)),
        ("micro", MiCRO(random_state=0)),
    ]).fit(X_TRAIN),
    "popularity": lambda: PopularityRecommender(window=2).fit(X_TRAIN),
    "recent-items": lambda: RecentItemsRecommender(window=3).fit(X_TRAIN),
    "ann-pipeline": lambda: Pipeline([
        ("embed", GraphEmbedder(n_components=8, random_state=0)),
        ("ann", ANNRecommender(method="exact", random_state=0)),
    ]).fit(X_TRAIN),
    "als": lambda: ALSRecommender(n_components=4, iterations=3, random_state=0).fit(X_TRAIN),
    "item-knn": lambda: ItemKNNRecommender(window=2).fit(X_TRAIN),
    "rp3beta": lambda: RP3betaRecommender(window=2).fit(X_TRAIN),
}


@pytest.fixture(scope="module", params=list(FACTORIES))
def fitted(request):
    model = FACTORIES[request.param]()
    _partial_fit(model, FIRST)
    return model


def _answers(model):
    rec = _final_recommender(model)
    return rec.recommend(USERS, 12), rec.recommend(USERS, 12, exclude_seen=True)


def _assert_same_answers(a, b):
    for (items_a, scores_a), (items_b, scores_b) in zip(a, b, strict=True):
        assert_array_equal(items_a, items_b)
        assert_array_equal(scores_a, scores_b)


@pytest.mark.parametrize("suffix", [".skops", ".pkl"])
def test_round_trip_gives_the_same_recommendations_and_carries_on(fitted, tmp_path, suffix):
    path = dump(fitted, tmp_path / f"model{suffix}")
    restored = load(path)
    assert type(restored) is type(fitted)
    _assert_same_answers(_answers(restored), _answers(fitted))
    # both carry on alike; the original is copied so the module's fixture stays as it was
    original = pickle.loads(pickle.dumps(fitted))
    _partial_fit(original, REST)
    _partial_fit(restored, REST)
    _assert_same_answers(_answers(restored), _answers(original))


def test_trusted_types_cover_every_fitted_model(fitted, tmp_path):
    path = dump(fitted, tmp_path / "model.skops")
    untrusted = set(sio.get_untrusted_types(file=path))
    assert untrusted <= set(TRUSTED_TYPES), untrusted - set(TRUSTED_TYPES)


def test_untrusted_types_are_refused_by_name(tmp_path):
    model = Pipeline([("embed", FixedEmbedder()), ("pop", PopularityRecommender())])
    path = dump(model.fit(X_TRAIN), tmp_path / "model.skops")
    name = f"{FixedEmbedder.__module__}.{FixedEmbedder.__qualname__}"
    with pytest.raises(ValueError, match=rf"not trusted: \['{re.escape(name)}'\]"):
        load(path)
    restored = load(path, trusted=[name])
    _assert_same_answers(_answers(restored), _answers(model))


@pytest.mark.parametrize("saved", ["0.1.0", "1.1.0", "0.0.9"])
@pytest.mark.parametrize("suffix", [".skops", ".pkl"])
def test_another_minor_version_is_refused_clearly(tmp_path, monkeypatch, saved, suffix):
    model = PopularityRecommender().fit(X_TRAIN)
    monkeypatch.setattr(sklearn_micro.persistence, "__version__", saved)
    path = dump(model, tmp_path / f"model{suffix}")
    monkeypatch.undo()
    current = sklearn_micro.__version__
    with pytest.raises(IncompatibleVersionError,
                       match=rf"PopularityRecommender was saved by sklearn-micro {saved}; this "
                             rf"is sklearn-micro {current}"):
        load(path)
    with pytest.raises(IncompatibleVersionError):
        pickle.loads(path.read_bytes()) if suffix == ".pkl" else sio.load(
            path, trusted=TRUSTED_TYPES)


def test_same_minor_version_loads_and_the_version_is_stored(tmp_path, monkeypatch):
    model = MiCRO(random_state=0)
    state = model.__getstate__()
    assert state["_sklearn_micro_version"] == sklearn_micro.__version__
    major, minor, *_ = sklearn_micro.__version__.split(".")
    monkeypatch.setattr(sklearn_micro.persistence, "__version__", f"{major}.{minor}.99")
    path = dump(_micro(), tmp_path / "model.skops")
    monkeypatch.undo()
    restored = load(path)
    assert "_sklearn_micro_version" not in vars(restored)
    _assert_same_answers(_answers(restored), _answers(_micro()))


def test_a_state_without_a_version_is_refused():
    state = PopularityRecommender().fit(X_TRAIN).__dict__.copy()
    blank = PopularityRecommender.__new__(PopularityRecommender)
    with pytest.raises(IncompatibleVersionError, match="recorded none"):
        blank.__setstate__(state)


def test_bad_paths_and_files(tmp_path):
    model = PopularityRecommender().fit(X_TRAIN)
    with pytest.raises(ValueError, match=r"suffix '.bin'.*\.pickle.*\.pkl.*\.skops"):
        dump(model, tmp_path / "model.bin")
    with pytest.raises(ValueError, match="format must be"):
        dump(model, tmp_path / "model.skops", format="json")
    with pytest.raises(TypeError, match="path must be a str or os.PathLike; got int"):
        dump(model, 3)
    with pytest.raises(FileNotFoundError, match="No saved model"):
        load(tmp_path / "missing.skops")
    broken = tmp_path / "broken.skops"
    broken.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="not a readable skops file"):
        load(broken)
    # a skops file without its schema
    with zipfile.ZipFile(tmp_path / "empty.skops", "w") as zf:
        zf.writestr("other.txt", "x")
    with pytest.raises(ValueError, match="not a readable skops file"):
        load(tmp_path / "empty.skops")
    # an explicit format overrides the suffix
    path = dump(model, tmp_path / "model.bin", format="skops")
    _assert_same_answers(_answers(load(path, format="skops")), _answers(model))


@pytest.mark.parametrize("suffix", [".skops", ".pkl"])
def test_a_restored_micro_gives_its_paper_model(tmp_path, suffix):
    items = np.unique(X_TRAIN.item)
    model = MiCRO(personal=0.3, phi_decay=0.5, random_state=0).fit(
        X_TRAIN, item_interest=(items, items % 4)).partial_fit(FIRST)
    assert model.chunk_alone_ is not None
    restored = load(dump(model, tmp_path / f"model{suffix}"))
    _assert_same_answers(_answers(restored.paper_model()), _answers(model.paper_model()))
