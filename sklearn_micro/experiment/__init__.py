"""The paper's experiment: MiCRO and baselines under the rolling protocol, side by side.

`run_experiment` fits each method on the training chunks (sharing one graph embedding),
evaluates it chunk by chunk on the test chunks, and returns one `RollingReport` per method;
`results_table` and `plot_per_chunk` turn those into the paper's table and figures.

A long run is a sequence of named stages (`Stages`): each is timed, its peak memory read,
and, given a checkpoint folder, its result saved atomically, so a run killed in the middle
carries on from the last finished stage, or the last saved test chunk, with the same result.
"""

from ._run import (
    BASELINES,
    METHODS,
    Stages,
    compact_chunks,
    compact_log,
    comparison_table,
    load_checkpoint,
    plot_per_chunk,
    prequential_table,
    results_table,
    run_experiment,
    split_chunks,
)

__all__ = [
    "BASELINES",
    "METHODS",
    "Stages",
    "compact_chunks",
    "compact_log",
    "comparison_table",
    "load_checkpoint",
    "plot_per_chunk",
    "prequential_table",
    "results_table",
    "run_experiment",
    "split_chunks",
]
