"""Saving and loading fitted models: skops files, safe for files from elsewhere, or pickle.

A fitted model is plain arrays and a few small objects of this package, so it can be saved
with `skops.io <https://skops.readthedocs.io>`_, whose files hold no code: loading one
builds only the types it is told to trust. `TRUSTED_TYPES` lists this package's types that
fitted models hold; everything else a model holds (numpy arrays, dicts, a RandomState,
scikit-learn's Pipeline) is trusted by skops itself. Pickle keeps working, and is the
choice for files of your own only: unpickling a file can run any code in it.

Every recommender stores the version of sklearn-micro that saved it (in its pickled
state, so pickle and skops files both carry it). A model saved by another minor version
(0.1.x and 0.2.x, say) may hold a different state, so loading it raises
`IncompatibleVersionError`, which names both versions; fit the model again, or load it with
the version that saved it.

skops comes with the ``persist`` extra: ``pip install "sklearn-micro[persist]"``.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

from ._version import __version__

__all__ = ["TRUSTED_TYPES", "IncompatibleVersionError", "dump", "load"]

#: This package's types that a fitted model (or a Pipeline of them) holds: what `load`
#: builds from a skops file besides the types skops trusts itself.
TRUSTED_TYPES: list[str] = [
    "sklearn_micro._log.Vocabulary",
    "sklearn_micro.base.SeenItems",
    "sklearn_micro.baselines._neighbours.ItemKNNRecommender",
    "sklearn_micro.baselines._neighbours.RP3betaRecommender",
    "sklearn_micro.baselines._recommenders.ALSRecommender",
    "sklearn_micro.baselines._recommenders.ANNRecommender",
    "sklearn_micro.baselines._recommenders.PopularityRecommender",
    "sklearn_micro.baselines._recommenders.RecentItemsRecommender",
    "sklearn_micro.cluster.SphericalKMeans",
    "sklearn_micro.embedding.GraphEmbedder",
    "sklearn_micro.micro._estimator.MiCRO",
    "sklearn_micro.micro._live.LiveLayer",
]

_FORMATS = {".skops": "skops", ".pkl": "pickle", ".pickle": "pickle"}
_VERSION_KEY = "_sklearn_micro_version"


class IncompatibleVersionError(ValueError):
    """A saved model comes from a version of sklearn-micro whose state this one can't read.

    Raised when a recommender is unpickled, or loaded from a skops file, and the version of
    sklearn-micro that saved it differs from this one in its major or minor number, or was
    not recorded. The message names both versions.

    See Also
    --------
    load : Load a saved model.

    Examples
    --------
    >>> import pickle
    >>> import numpy as np
    >>> import sklearn_micro
    >>> from sklearn_micro.baselines import PopularityRecommender
    >>> from sklearn_micro.persistence import IncompatibleVersionError
    >>> rec = PopularityRecommender().fit(np.array([[1, 10, 0]]))
    >>> state = rec.__getstate__() | {"_sklearn_micro_version": "9.0.0"}
    >>> try:
    ...     PopularityRecommender.__new__(PopularityRecommender).__setstate__(state)
    ... except IncompatibleVersionError as exc:
    ...     print(str(exc).split(";")[0])
    This PopularityRecommender was saved by sklearn-micro 9.0.0
    """


def _package_version() -> str:
    return __version__


def _minor(version: str) -> tuple[str, ...]:
    return tuple(version.split(".")[:2])


def versioned_state(state: dict) -> dict:
    """``state`` with the version of sklearn-micro that saves it."""
    return {**state, _VERSION_KEY: _package_version()}


def unversioned_state(state: dict, name: str) -> dict:
    """``state`` without its version, after checking that this version can load it.

    Raises
    ------
    IncompatibleVersionError
        If the state was saved by another minor version of sklearn-micro, or records none.
    """
    state = dict(state)
    saved = state.pop(_VERSION_KEY, None)
    current = _package_version()
    if saved is None or _minor(str(saved)) != _minor(current):
        by = ("a version of sklearn-micro that recorded none"
              if saved is None else f"sklearn-micro {saved}")
        raise IncompatibleVersionError(
            f"This {name} was saved by {by}; this is sklearn-micro {current}, which loads "
            f"models saved by {'.'.join(_minor(current))}.x only. Load it with the version "
            f"that saved it, or fit it again."
        )
    return state


def _import_skops():
    try:
        import skops.io
    except ImportError as exc:
        raise ImportError(
            'Saving and loading skops files needs skops, which is not installed: pip install '
            '"sklearn-micro[persist]"'
        ) from exc
    return skops.io


def _format(path: Path, format: str | None) -> str:
    if format is not None:
        if format not in ("skops", "pickle"):
            raise ValueError(f"format must be 'skops', 'pickle' or None; got {format!r}.")
        return format
    suffix = path.suffix.lower()
    if suffix not in _FORMATS:
        raise ValueError(
            f"cannot tell the format of {str(path)!r} from its suffix {suffix!r}: use one of "
            f"{sorted(_FORMATS)}, or pass format='skops' or format='pickle'."
        )
    return _FORMATS[suffix]


def _path(path) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike; got {type(path).__name__}.")
    return Path(path)


def dump(model, path: str | os.PathLike, *, format: str | None = None) -> Path:
    """Save a fitted model (or a Pipeline) to a file.

    Parameters
    ----------
    model : estimator
        A recommender of this package, or a Pipeline ending in one.
    path : str or os.PathLike
        The file to write. Its suffix chooses the format unless `format` is given:
        ``.skops`` for skops, ``.pkl`` or ``.pickle`` for pickle.
    format : {"skops", "pickle"} or None, default=None
        The format, overriding the suffix.

    Returns
    -------
    path : pathlib.Path
        The file written.

    See Also
    --------
    load : Load the file again.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from sklearn_micro.baselines import PopularityRecommender
    >>> from sklearn_micro.persistence import dump, load
    >>> rec = PopularityRecommender().fit(np.array([[1, 10, 0], [2, 11, 0], [3, 11, 0]]))
    >>> path = dump(rec, os.path.join(tempfile.mkdtemp(), "popularity.skops"))
    >>> load(path).recommend([1], m=2)[0]
    array([[11, 10]])
    """
    path = _path(path)
    kind = _format(path, format)
    if kind == "skops":
        _import_skops().dump(model, path)
    else:
        with open(path, "wb") as f:
            pickle.dump(model, f, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def load(path: str | os.PathLike, *, trusted: list[str] | None = None,
         format: str | None = None):
    """Load a model saved by `dump`.

    A skops file builds only the types skops trusts and `TRUSTED_TYPES` (plus `trusted`),
    so it is safe for files from elsewhere. A pickle file can run any code it holds: load
    only pickle files you made.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    trusted : list of str, optional
        More types to trust in a skops file, as ``"module.Name"``, beyond `TRUSTED_TYPES`.
    format : {"skops", "pickle"} or None, default=None
        The format, overriding the suffix.

    Returns
    -------
    model : estimator
        The model as it was saved: it recommends as it did and carries on with
        ``partial_fit``.

    Raises
    ------
    ValueError
        If a skops file holds types that are not trusted (the message lists them).
    IncompatibleVersionError
        If the model was saved by another minor version of sklearn-micro.

    See Also
    --------
    dump : Save a model.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from sklearn_micro.baselines import RecentItemsRecommender
    >>> from sklearn_micro.persistence import dump, load
    >>> rec = RecentItemsRecommender().fit(np.array([[1, 10, 0], [1, 11, 1], [2, 11, 1]]))
    >>> path = dump(rec, os.path.join(tempfile.mkdtemp(), "recent.skops"))
    >>> load(path).recommend([1], m=2)[0]
    array([[11, 10]])
    """
    path = _path(path)
    kind = _format(path, format)
    if not path.is_file():
        raise FileNotFoundError(f"No saved model at {str(path)!r}.")
    if kind == "pickle":
        with open(path, "rb") as f:
            return pickle.load(f)
    sio = _import_skops()
    allowed = [*TRUSTED_TYPES, *(trusted or [])]
    try:
        untrusted = sorted(set(sio.get_untrusted_types(file=path)) - set(allowed))
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise ValueError(f"{str(path)!r} is not a readable skops file ({exc}).") from exc
    if untrusted:
        raise ValueError(
            f"{str(path)!r} holds types that are not trusted: {untrusted}. Pass "
            f"trusted=[...] with those you trust, after checking where the file comes from."
        )
    return sio.load(path, trusted=allowed)
