"""Engagement logs from files, the real logs of the data folder, and a synthetic generator.

Readers (`sklearn_micro.datasets._readers`)
    `read_log` reads a CSV (plain, ``.gz``, ``.bz2`` or ``.zip``) or Parquet file with user,
    item and chunk (or unix-time) columns, batch by batch in bounded memory;
    `iter_log_chunks` hands out one chunk at a time from a file sorted by chunk;
    `read_twitter_fave` and `read_twitter_follow` read the paper's two published files.
Loaders (`sklearn_micro.datasets._real_logs`)
    `load_higgs` and `load_movielens` read the raw files of the data folder (`data_home`).
Generator (`sklearn_micro.datasets._generator`)
    `make_engagements` and `iter_engagements` draw logs from the paper's generative model
    (Table 2) with ephemeral items, at any scale up to the paper's.
Presets (`sklearn_micro.datasets._presets`)
    `preset_parameters`, `iter_preset` and `write_preset` draw the paper's two logs,
    ``fave`` and ``follow``, at any scale from 1/100 to the paper's own.

CSV files are parsed by pyarrow when it is installed and by numpy otherwise; Parquet files
need pyarrow, and ``as_frame=True`` needs pandas: both come with the ``data`` extra,
``pip install "sklearn-micro[data]"``.
"""

from ._generator import iter_engagements, make_engagements
from ._presets import iter_preset, preset_parameters, write_preset
from ._readers import iter_log_chunks, read_log, read_twitter_fave, read_twitter_follow
from ._real_logs import data_home, load_higgs, load_movielens

__all__ = [
    "data_home",
    "iter_engagements",
    "iter_log_chunks",
    "iter_preset",
    "load_higgs",
    "load_movielens",
    "make_engagements",
    "preset_parameters",
    "read_log",
    "read_twitter_fave",
    "read_twitter_follow",
    "write_preset",
]
