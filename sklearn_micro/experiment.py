"""The paper's experiment: MiCRO and baselines under the rolling protocol, side by side.

`run_experiment` fits each method on the training chunks (sharing one graph embedding),
evaluates it chunk by chunk on the test chunks, and returns one `RollingReport` per method;
`results_table` and `plot_per_chunk` turn those into the paper's table and figures.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ._log import EngagementLog, check_log
from .baselines import (
    ALSRecommender,
    ANNRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
)
from .cluster import SphericalKMeans
from .embedding import GraphEmbedder
from .micro import MiCRO
from .model_selection import RollingReport, rolling_evaluate

__all__ = ["METHODS", "plot_per_chunk", "results_table", "run_experiment", "split_chunks"]

METHODS = ("MiCRO", "ANN", "Popularity", "RecentItems", "ALS")


def split_chunks(log, train_chunks: int | None = None) -> tuple[EngagementLog, EngagementLog]:
    """Split a log into its first ``train_chunks`` chunks and the rest.

    Chunks are counted by number from the first one, so empty chunks count. By default the
    last quarter of the chunks (at least one) is the test part.
    """
    log = check_log(log)
    first, last = int(log.chunk.min()), int(log.chunk.max())
    n_chunks = last - first + 1
    if train_chunks is None:
        train_chunks = n_chunks - max(1, n_chunks // 4)
    if not 1 <= train_chunks < n_chunks:
        raise ValueError(
            f"train_chunks must be between 1 and {n_chunks - 1} (the log has {n_chunks} "
            f"chunks, {first}..{last}); got {train_chunks}."
        )
    train = log.chunk < first + train_chunks
    return log.take(train), log.take(~train)


def run_experiment(
    train,
    test,
    *,
    n_interests: int = 100,
    methods: Sequence[str] = ("MiCRO", "ANN", "Popularity"),
    n_components: int = 64,
    m_values: Sequence[int] = (10, 25, 50, 100),
    random_state: int | None = 0,
    progress: bool = False,
    log=print,
) -> dict[str, RollingReport]:
    """Fit each method on ``train`` and evaluate it on ``test`` with the rolling protocol.

    One `GraphEmbedder` is fitted on ``train`` and shared: MiCRO clusters its item vectors
    with `SphericalKMeans(n_interests)`, ANN queries with its user vectors.

    Parameters
    ----------
    train, test : engagement logs
        Test chunks must come after every training chunk.
    n_interests : int, default=100
        K, the number of interests of MiCRO.
    methods : sequence of str, default=("MiCRO", "ANN", "Popularity")
        Any of ``METHODS``.
    n_components : int, default=64
        Dimensions of the graph embedding.
    m_values : sequence of int
        Cut-offs of the metrics.
    random_state : int or None, default=0
    progress : bool, default=False
        Progress bars over the test chunks.
    log : callable, default=print
        Receives one line per step with its time; None for silence.

    Returns
    -------
    reports : dict of str to RollingReport
        In the order of ``methods``.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"methods must be among {list(METHODS)}; got {unknown}.")
    say = log or (lambda *_: None)
    train, test = check_log(train, input_name="train"), check_log(test, input_name="test")
    embedded = None
    if {"MiCRO", "ANN"} & set(methods):
        start = time.perf_counter()
        embedded = GraphEmbedder(n_components, random_state=random_state).fit_transform(train)
        say(f"graph embedding of {len(embedded.user_ids)} users and {len(embedded.item_ids)} "
            f"items: {time.perf_counter() - start:.1f} s")
    reports = {}
    for name in methods:
        start = time.perf_counter()
        if name == "MiCRO":
            clusters = SphericalKMeans(n_interests, random_state=random_state)
            model = MiCRO(random_state=random_state).fit(clusters.fit_transform(embedded))
        elif name == "ANN":
            model = ANNRecommender(random_state=random_state).fit(embedded)
        elif name == "Popularity":
            model = PopularityRecommender().fit(train)
        elif name == "RecentItems":
            model = RecentItemsRecommender().fit(train)
        else:
            model = ALSRecommender(n_components, random_state=random_state).fit(train)
        fitted = time.perf_counter() - start
        reports[name] = rolling_evaluate(model, test, m_values=m_values, copy=False,
                                         progress=progress)
        say(f"{name}: fit {fitted:.1f} s, rolling evaluation "
            f"{time.perf_counter() - start - fitted:.1f} s")
    return reports


def results_table(reports: dict[str, RollingReport], m_values: Sequence[int] = (50, 100), *,
                  aggregate: str = "overall", digits: int = 3) -> str:
    """The paper's table as markdown: Recall, MRR and NDCG at each M, one row per method.

    ``aggregate="overall"`` averages over all (user, chunk) points; ``"per_user"`` first
    averages each user's points, then over users (the paper's Table 3).
    """
    if aggregate not in ("overall", "per_user"):
        raise ValueError(f"aggregate must be 'overall' or 'per_user'; got {aggregate!r}.")
    columns = [f"{metric}@{m}" for m in m_values for metric in ("recall", "mrr", "ndcg")]
    lines = ["| method | " + " | ".join(columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for name, report in reports.items():
        row = report.overall() if aggregate == "overall" else report.per_user()
        lines.append(f"| {name} | " + " | ".join(
            f"{float(row[c]):.{digits}f}" for c in columns) + " |")
    return "\n".join(lines)


def plot_per_chunk(reports: dict[str, RollingReport], out_dir, m: int = 100,
                   prefix: str = "", *, dpi: int = 100) -> list[Path]:
    """One PNG per metric (recall, MRR, NDCG at ``m``): its mean per test chunk per method.

    Needs matplotlib (``pip install "sklearn-micro[plot]"``). Returns the paths written.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise ImportError(
            'plots need matplotlib: pip install "sklearn-micro[plot]"') from exc
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for metric, title in (("recall", "Recall"), ("mrr", "MRR"), ("ndcg", "NDCG")):
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for name, report in reports.items():
            table = report.per_chunk()
            chunks = np.asarray(table.index if hasattr(table, "index") else table["chunk"])
            ax.plot(chunks, np.asarray(table[f"{metric}@{m}"]), marker="o", markersize=3,
                    label=name)
        ax.set_xlabel("time chunk")
        ax.set_ylabel(f"mean {title}@{m}")
        ax.set_title(f"{title}@{m} per test chunk")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        path = out_dir / f"{prefix}{metric}_at_{m}_per_chunk.png"
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
        paths.append(path)
    return paths
