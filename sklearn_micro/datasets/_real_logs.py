"""Loaders of the real logs of the data folder: Higgs Twitter activity and MovieLens."""

from __future__ import annotations

import os
from numbers import Real
from pathlib import Path

import numpy as np

from ._files import _BATCH_ROWS, _as_output, _iter_batches, _Source, file_source
from ._readers import _to_chunks

__all__ = ["data_home", "load_higgs", "load_movielens"]

_HIGGS_FILE = "higgs-twitter/higgs-activity_time.txt.gz"
_MOVIELENS_FILE = "movielens-latest-small/ratings.csv"
_HIGGS_KINDS = ("RT", "MT", "RE")

def _data_candidates() -> list[tuple[str, Path]]:
    env = os.environ.get("SKLEARN_MICRO_DATA")
    if env:
        return [("$SKLEARN_MICRO_DATA", Path(env))]
    repository = Path(__file__).resolve().parents[2]
    return [
        ("../shared/data from the current folder", Path.cwd() / ".." / "shared" / "data"),
        ("../shared/data beside the repository", repository / ".." / "shared" / "data"),
    ]


def data_home() -> Path | None:
    """The folder holding the real engagement logs, or None where there is none.

    Looked for in this order: the folder named by the environment variable
    ``SKLEARN_MICRO_DATA`` (when set, the only place looked at), ``../shared/data`` from the
    current folder, and ``../shared/data`` beside the repository holding this package.

    Returns
    -------
    folder : pathlib.Path or None
        The first of those folders that exists, resolved; None if none does.

    See Also
    --------
    load_higgs : The Higgs Twitter activity log of this folder.
    load_movielens : The MovieLens ratings of this folder.

    Examples
    --------
    >>> from sklearn_micro.datasets import data_home
    >>> folder = data_home()
    >>> folder is None or folder.is_dir()
    True
    """
    for _, folder in _data_candidates():
        if folder.is_dir():
            return folder.resolve()
    return None


def _data_file(path, relative: str, loader: str) -> Path:
    if path is None:
        home = data_home()
        if home is None:
            looked = "; ".join(f"{how}: {str(folder)!r}" for how, folder in _data_candidates())
            raise FileNotFoundError(
                f"{loader} found no data folder. It looked at {looked}. Set SKLEARN_MICRO_DATA "
                f"to the folder holding {relative!r}, or pass path=."
            )
        path = home / relative
    path = Path(path)
    if path.is_dir():
        for candidate in (path / relative, path / Path(relative).name):
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(f"{loader} found no {relative!r} in the folder {str(path)!r}.")
    if not path.is_file():
        raise FileNotFoundError(f"{loader} found no file at {str(path)!r}.")
    return path


def _positive(value, name: str):
    if not isinstance(value, Real) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{name} must be a positive number; got {value!r}.")
    return int(value) if value == int(value) else float(value)


def _read_all(src: _Source, kinds: dict[str, str], loader: str) -> dict[str, np.ndarray]:
    """Every row of the file; a file without rows is an error that names it."""
    parts: dict[str, list] = {name: [] for name in kinds}
    for _, batch in _iter_batches(src, kinds, _BATCH_ROWS):
        for name in kinds:
            parts[name].append(batch[name])
    if not any(p.shape[0] for p in parts[next(iter(kinds))]):
        raise ValueError(
            f"{loader}: {str(src.path)!r} holds no rows; expected one engagement per line "
            f"with the columns {list(kinds)}."
        )
    return {name: np.concatenate(p) for name, p in parts.items()}


def load_higgs(
    path: str | os.PathLike | None = None,
    *,
    chunk_hours: float = 1,
    kinds: tuple[str, ...] = _HIGGS_KINDS,
    as_frame: bool = False,
):
    """Load the Higgs Twitter activity log: users retweeting, mentioning or replying to users.

    SNAP's ``higgs-activity_time.txt.gz`` (De Domenico et al., Scientific Reports 3, 2980,
    2013): 563,069 rows ``userA userB unix_seconds kind`` from 2012-07-01 to 2012-07-07. A
    row is the engagement of user ``userA`` with item ``userB`` (the author engaged with).

    Parameters
    ----------
    path : str, os.PathLike or None
        The file, or a folder holding it (as ``higgs-twitter/higgs-activity_time.txt.gz`` or
        directly). By default the one in `data_home`.
    chunk_hours : float
        The length of a chunk in hours. Chunk 0 starts at the earliest row of the file (of
        any kind); numbers are contiguous, one-hour chunks give 168.
    kinds : tuple of str
        Which kinds of activity count as engagements, among ``"RT"`` (retweet), ``"MT"``
        (mention) and ``"RE"`` (reply).
    as_frame : bool
        Return a pandas DataFrame instead of an `EngagementLog`.

    Returns
    -------
    log : EngagementLog or pandas.DataFrame
        The engagements in time order.

    Raises
    ------
    FileNotFoundError
        If there is no file, saying where it was looked for.
    ValueError
        If the file holds no rows, or a row that is not ``user user seconds kind``.

    See Also
    --------
    data_home : Where the file is looked for.
    load_movielens : The other real log of the data folder.

    Examples
    --------
    >>> from sklearn_micro.datasets import load_higgs
    >>> log = load_higgs(chunk_hours=6, kinds=("RT",))  # doctest: +SKIP
    >>> len(log), log.chunk.max() + 1  # doctest: +SKIP
    (354930, 28)
    """
    chunk_hours = _positive(chunk_hours, "chunk_hours")
    if isinstance(kinds, str):
        kinds = (kinds,)
    kinds = tuple(kinds)
    unknown = [k for k in kinds if k not in _HIGGS_KINDS]
    if not kinds or unknown:
        raise ValueError(
            f"kinds must be a non-empty selection of {list(_HIGGS_KINDS)}; got {list(kinds)}."
        )
    file = _data_file(path, _HIGGS_FILE, "load_higgs")
    src = file_source(file, sep=" ", names=("user_a", "user_b", "time", "kind"))
    cols = _read_all(src, {"user_a": "int", "user_b": "int", "time": "int", "kind": "str"},
                     "load_higgs")
    chunk = _to_chunks(cols["time"], int(cols["time"].min()), _positive(chunk_hours * 3600, ""))
    keep = np.flatnonzero(np.isin(cols["kind"], np.array(kinds, dtype=object)))
    keep = keep[np.argsort(cols["time"][keep], kind="stable")]
    return _as_output(cols["user_a"][keep], cols["user_b"][keep], chunk[keep], as_frame)


def load_movielens(
    path: str | os.PathLike | None = None,
    *,
    chunk_days: float = 30,
    min_rating: float | None = None,
    as_frame: bool = False,
):
    """Load the MovieLens ``ml-latest-small`` ratings as an engagement log.

    100,836 ratings of 9,724 movies by 610 users, 1996 to 2018 (Harper and Konstan, ACM TiiS
    5(4), 2015). A rating is an engagement of the user with the movie.

    Parameters
    ----------
    path : str, os.PathLike or None
        ``ratings.csv``, or a folder holding it (as ``movielens-latest-small/ratings.csv`` or
        directly). By default the one in `data_home`.
    chunk_days : float
        The length of a chunk in days. Chunk 0 starts at the earliest rating; numbers are
        contiguous, periods without ratings have no rows.
    min_rating : float or None
        Keep only ratings at or above this; by default all of them.
    as_frame : bool
        Return a pandas DataFrame instead of an `EngagementLog`.

    Returns
    -------
    log : EngagementLog or pandas.DataFrame
        The engagements in time order.

    Raises
    ------
    FileNotFoundError
        If there is no file, saying where it was looked for.
    ValueError
        If the file holds no rows, or a row without integer ids and times.

    See Also
    --------
    data_home : Where the file is looked for.
    load_higgs : The other real log of the data folder.

    Examples
    --------
    >>> from sklearn_micro.datasets import load_movielens
    >>> log = load_movielens(min_rating=4)  # doctest: +SKIP
    >>> len(log)  # doctest: +SKIP
    48580
    """
    chunk_days = _positive(chunk_days, "chunk_days")
    if min_rating is not None and (
        not isinstance(min_rating, Real) or isinstance(min_rating, bool) or np.isnan(min_rating)
    ):
        raise ValueError(f"min_rating must be a number or None; got {min_rating!r}.")
    file = _data_file(path, _MOVIELENS_FILE, "load_movielens")
    src = file_source(file)
    cols = _read_all(
        src, {"userId": "int", "movieId": "int", "rating": "float", "timestamp": "int"},
        "load_movielens",
    )
    time = cols["timestamp"]
    chunk = _to_chunks(time, int(time.min()), _positive(chunk_days * 86400, ""))
    keep = np.arange(time.size) if min_rating is None else np.flatnonzero(
        cols["rating"] >= min_rating
    )
    keep = keep[np.argsort(time[keep], kind="stable")]
    return _as_output(cols["userId"][keep], cols["movieId"][keep], chunk[keep], as_frame)

