"""The paper's two logs, TwitterFaveGraph and TwitterFollowGraph, drawn at any scale.

`preset_parameters` gives the generator's parameters and the experiment's split and K for
a preset at a scale; `iter_preset` draws the log one chunk at a time and `write_preset`
streams it to a Parquet file, both in bounded memory.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from numbers import Real
from pathlib import Path

from sklearn.utils import Bunch
from sklearn.utils._param_validation import Interval, StrOptions, validate_params

from .._log import EngagementLog
from ._files import import_pyarrow
from ._generator import iter_engagements

__all__ = ["PRESETS", "iter_preset", "preset_parameters", "write_preset"]

# The paper's figures at full scale (section 4.1 for the sizes and degrees, 4.4 for the
# chunks and the split, Table 3's caption for K), and the shape of the draw: set where the
# paper is silent, and calibrated to Table 3 (docs/datasets.md gives each one's source).
PRESETS = {
    "fave": dict(
        n_users=6_700_000, n_items=13_000_000, n_engagements=283_000_000, n_chunks=192,
        test_chunks=23, n_interests=5_000, user_degree=(1, 100), min_item_degree=5,
        interests_per_user=3.5, item_lifetime=3.0, item_appeal=0.8, trending_share=0.15,
        n_trending=100, alpha=1.0, beta=0.5,
    ),
    "follow": dict(
        n_users=12_000_000, n_items=3_500_000, n_engagements=261_000_000, n_chunks=25,
        test_chunks=7, n_interests=5_000, user_degree=(5, 1_000), min_item_degree=5,
        interests_per_user=5.0, item_lifetime=6.0, item_appeal=0.6, trending_share=0.04,
        n_trending=100, alpha=1.0, beta=0.5,
    ),
}
# GraphEmbedder's negative_weight for each preset: a user's unengaged pairs weigh this much
# in total at every scale, as their degrees do (docs/scale.md measures why it matters).
_NEGATIVE_WEIGHT = {"fave": 150_000.0, "follow": 30_000.0}
# MiCRO's beta for the presets: the prior's mass over a chunk's items, I_t * beta, grows
# with the scale while an (interest, chunk)'s engagements N[k, t] do not, and it flattens
# phi[k, t] (docs/scale.md measures the table's fall); beta falls as the scale grows, so
# that I_t * beta / N[k, t] stays what it is with MiCRO's default 0.01 at 1/100, the
# calibration's scale.
_BETA_AT_MIN_SCALE = 0.01
# The trending head's share of an interest's draws, per decade of scale above 1/100: at a
# fixed share the chunk before's top 100 hold fewer of a chunk's pairs as the log grows
# (fave: .104 at 1/100, .078 at 1/4 at 0.15), since at 1/100 the top items of the 50
# interests still reach the top 100; the share grows so that the head, and Popularity,
# stay near the paper's .101 (docs/calibration.md gives the measurements).
_TRENDING_PER_DECADE = {"fave": 0.025, "follow": 0.0}
_SIZES = ("n_users", "n_items", "n_engagements", "n_interests")
_MIN_SCALE = 0.01

_PRESET_CONSTRAINTS = {
    "preset": [StrOptions(set(PRESETS))],
    "scale": [Interval(Real, _MIN_SCALE, 1, closed="both")],
}


@validate_params(_PRESET_CONSTRAINTS, prefer_skip_nested_validation=True)
def preset_parameters(preset: str, scale: float = 1.0) -> Bunch:
    """The parameters of a preset log at a scale, and its experiment's split and K.

    Users, items, engagements and interests are the paper's times `scale`; the chunks, the
    degree bounds and the shape of the draw are the same at every scale, so that an
    (interest, chunk) holds what one of the paper's does at its best K (5,000).

    Parameters
    ----------
    preset : {"fave", "follow"}
        TwitterFaveGraph (283M favorites of 6.7M users on 13M Tweets, 192 chunks, the last
        23 tested) or TwitterFollowGraph (261M follows in 25 chunks, the last 7 tested).
    scale : float, default=1.0
        The fraction of the paper's log, from 0.01 to 1.

    Returns
    -------
    parameters : Bunch
        ``generator``: the keyword arguments of `iter_engagements` and `make_engagements`
        (without ``random_state``); ``n_interests``: K, the number of interests to fit;
        ``train_chunks`` and ``test_chunks``: the paper's split; ``negative_weight``: the
        `GraphEmbedder` setting that weighs a user's unengaged pairs the same at every
        scale; ``beta``: the `MiCRO` setting whose mass over a chunk's items, ``I_t *
        beta``, weighs the same against an interest's engagements in a chunk at every
        scale (0.01 at 1/100, 0.0001 at full scale). The ``fave`` log's
        ``trending_share`` grows by 0.025 a decade of scale from 0.15 at 1/100 (0.2 at full
        scale), so that the chunk before's 100 most engaged items hold about a tenth of a
        chunk's pairs at every scale (measured in docs/calibration.md, not by the tests).

    See Also
    --------
    iter_preset : The preset's log, one chunk at a time.
    write_preset : The preset's log, streamed to a Parquet file.

    Examples
    --------
    >>> from sklearn_micro.datasets import preset_parameters
    >>> p = preset_parameters("fave", 0.01)
    >>> p.generator["n_users"], p.n_interests, p.train_chunks, p.test_chunks, p.beta
    (67000, 50, 169, 23, 0.01)
    """
    spec = dict(PRESETS[preset])
    test_chunks = spec.pop("test_chunks")
    generator = {k: (max(1, round(v * scale)) if k in _SIZES else v) for k, v in spec.items()}
    generator["trending_share"] += _TRENDING_PER_DECADE[preset] * math.log10(scale / _MIN_SCALE)
    return Bunch(generator=generator, n_interests=generator["n_interests"],
                 train_chunks=spec["n_chunks"] - test_chunks, test_chunks=test_chunks,
                 negative_weight=_NEGATIVE_WEIGHT[preset],
                 beta=_BETA_AT_MIN_SCALE * (_MIN_SCALE / scale))


@validate_params(
    {**_PRESET_CONSTRAINTS, "random_state": ["random_state"]},
    prefer_skip_nested_validation=True,
)
def iter_preset(preset: str, scale: float = 1.0, *,
                random_state=0) -> Iterator[EngagementLog]:
    """Draw a preset log one chunk at a time, in bounded memory.

    Parameters
    ----------
    preset : {"fave", "follow"}
        The paper's log to draw, as for `preset_parameters`.
    scale : float, default=1.0
        The fraction of the paper's log, from 0.01 to 1.
    random_state : int, RandomState instance or None, default=0
        Seeds the draw; an int gives the same log every time.

    Returns
    -------
    chunks : iterator of EngagementLog
        One chunk's engagements at a time, in order, as `iter_engagements` yields them.

    See Also
    --------
    write_preset : The same log, streamed to a Parquet file.

    Examples
    --------
    >>> from sklearn_micro.datasets import iter_preset
    >>> sum(len(chunk) for chunk in iter_preset("follow", 0.01)) > 2_000_000
    True
    """
    params = preset_parameters(preset, scale)
    return iter_engagements(**params.generator, random_state=random_state)


@validate_params(
    {"path": [str, os.PathLike], **_PRESET_CONSTRAINTS, "random_state": ["random_state"]},
    prefer_skip_nested_validation=True,
)
def write_preset(path, preset: str, scale: float = 1.0, *, random_state=0) -> int:
    """Draw a preset log and write it to a Parquet file, one chunk at a time.

    Memory holds the users' sparse interests, the items alive and one chunk, never the
    log. The file (columns ``user``, ``item``, ``chunk``, int32) is written beside its
    path and renamed into place when complete, so a stopped draw leaves no partial file.
    Needs pyarrow (``pip install "sklearn-micro[data]"``).

    Parameters
    ----------
    path : str or path-like
        The Parquet file to write.
    preset : {"fave", "follow"}
        The paper's log to draw, as for `preset_parameters`.
    scale : float, default=1.0
        The fraction of the paper's log, from 0.01 to 1.
    random_state : int, RandomState instance or None, default=0
        Seeds the draw, as for `iter_preset`.

    Returns
    -------
    n_engagements : int
        The rows written.

    See Also
    --------
    iter_preset : The same log, one chunk at a time.
    read_log : Reads the file back.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from sklearn_micro.datasets import read_log, write_preset
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "fave.parquet"
    >>> n = write_preset(path, "fave", 0.01)
    >>> len(read_log(path)) == n
    True
    """
    pa = import_pyarrow()
    path = Path(path)
    schema = pa.schema([(name, pa.int32()) for name in ("user", "item", "chunk")])
    tmp = path.with_name(path.name + ".tmp")
    rows = 0
    try:
        with pa.parquet.ParquetWriter(str(tmp), schema, compression="zstd") as writer:
            for chunk in iter_preset(preset, scale, random_state=random_state):
                writer.write_table(pa.Table.from_arrays(
                    [pa.array(getattr(chunk, c).astype("int32", copy=False))
                     for c in ("user", "item", "chunk")], schema=schema))
                rows += len(chunk)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    return rows
