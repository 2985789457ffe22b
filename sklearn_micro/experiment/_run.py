"""The paper's experiment: `run_experiment` and its tables and plots (see the package's
docstring)."""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._kernels import threading_layer
from .._log import (
    EmbeddedLog,
    EngagementLog,
    Vocabulary,
    check_log,
    compact_chunks,
    compact_log,
    iter_chunks,
    split_chunks,
)
from .._parallel import active_client, resolve_n_jobs
from ..baselines import (
    ALSRecommender,
    ANNRecommender,
    ItemKNNRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
    RP3betaRecommender,
)
from ..cluster import SphericalKMeans
from ..embedding import GraphEmbedder
from ..micro import MiCRO
from ..micro._gibbs import chain_threads
from ..model_selection import RollingEvaluation, RollingReport
from ..model_selection._chunk_scores import paired_chunk_points
from ._stages import Stages, load_checkpoint

__all__ = ["BASELINES", "METHODS", "Stages", "compact_chunks", "compact_log", "comparison_table",
           "load_checkpoint", "plot_per_chunk", "prequential_table", "results_table",
           "run_experiment", "split_chunks"]

METHODS = ("MiCRO", "MiCRO (paper)", "ANN", "Popularity", "RecentItems", "ALS", "ItemKNN",
           "RP3beta")
BASELINES = ("ANN", "Popularity", "RecentItems", "ALS", "ItemKNN", "RP3beta")
# the array the embedding's and ANN's checkpoints share, saved once
_USER_VECTORS = "user vectors"

# a test chunk's state is saved when the work since the last save is at least this many
# times what the last save cost, which keeps checkpoints under 1/20 of the evaluation
_CHECKPOINT_RATIO = 20.0


# ------------------------------------------------------------------------ the experiment


@dataclass(frozen=True)
class _Row:
    """One evaluation of a run, and the names of its stages: the methods it reports (one,
    or MiCRO's two rows with one sampler), the checkpoints of its fitted model, of its
    evaluation in progress and of each method's report, and its measured stage."""

    methods: tuple[str, ...]

    @property
    def fit(self) -> str:
        return f"{self.methods[0]} fit"

    @property
    def rolling(self) -> str:
        return f"{' and '.join(self.methods)} rolling"

    @property
    def evaluation(self) -> str:
        return f"{self.rolling} evaluation"

    def report(self, method: str) -> str:
        return f"{method} report"


# MiCRO's two rows sample the same chain: one fit and one sampler serve both
_PAIR = _Row(("MiCRO", "MiCRO (paper)"))


def _plan(methods: Sequence[str], stages: Stages) -> list[_Row]:
    """The evaluations of a run, ANN's first: one per method, except that MiCRO's two rows
    share one (`_PAIR`) unless a run that evaluated them apart is resumed."""
    apart = [_Row((name,)) for name in _PAIR.methods]
    shared = (all(stages.has(_PAIR.report(name)) for name in _PAIR.methods)
              and stages.measured(_PAIR.evaluation)) or (
        set(_PAIR.methods) <= set(methods) and (stages.has(_PAIR.rolling) or not any(
            stages.has(name) for row in apart
            for name in (row.rolling, row.report(row.methods[0])))))
    lead = "MiCRO" if "MiCRO" in methods else "MiCRO (paper)"
    plan = []
    for name in sorted(methods, key=lambda name: name != "ANN"):
        if shared and name in _PAIR.methods:
            if name == lead:
                plan.append(_PAIR)
            continue
        plan.append(_Row((name,)))
    return plan


@dataclass
class _Embedding:
    """What the embedding stage saves: the vocabularies and the vectors."""

    user_ids: Vocabulary
    item_ids: Vocabulary
    user_vectors: np.ndarray
    item_vectors: np.ndarray


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
    n_jobs: int | None = -1,
    stages: Stages | None = None,
    keep_points: bool = False,
    micro_params: dict | None = None,
    embedding_params: dict | None = None,
) -> dict[str, RollingReport]:
    """Fit each method on ``train`` and evaluate it on ``test`` with the rolling protocol.

    One `GraphEmbedder` is fitted on ``train`` and shared: MiCRO clusters its item vectors
    with `SphericalKMeans(n_interests)`, ANN queries with its user vectors. Methods run one
    after the other, and each is dropped once evaluated, so memory holds one at a time; ANN
    runs first, and the vectors are dropped after it (the item vectors after the
    clustering). "MiCRO" and "MiCRO (paper)" sample the same chain, so together they are
    fitted and sampled once, each test chunk scored by both (`MiCRO.paper_model`): the
    stages "MiCRO fit" and "MiCRO and MiCRO (paper) rolling evaluation", with the reports
    of evaluating them apart.

    Parameters
    ----------
    train, test : engagement logs
        Test chunks must come after every training chunk.
    n_interests : int, default=100
        K, the number of interests of MiCRO.
    methods : sequence of str, default=("MiCRO", "ANN", "Popularity")
        Any of ``METHODS``. "MiCRO" is `MiCRO` with its defaults; "MiCRO (paper)" is the
        paper's exact model (``personal=0, popularity=0, phi_decay=0``), on the same
        interests.
    n_components : int, default=64
        Dimensions of the graph embedding.
    m_values : sequence of int
        Cut-offs of the metrics.
    random_state : int or None, default=0
    progress : bool, default=False
        Progress bars and messages of the embedding, the clustering and the test chunks.
    log : callable, default=print
        Receives one line per step with its time; None for silence.
    n_jobs : int or None, default=-1
        Threads of every estimator (-1: all cores).
    stages : Stages, optional
        Records each stage's time and peak memory, and saves and resumes checkpoints.
        By default the stages are recorded without checkpoints.
    keep_points : bool, default=False
        Keep every (user, chunk) point in the reports (memory grows with the points).
    micro_params : dict, optional
        More parameters of both MiCRO rows, for example ``{"phi_min_count": 2}``; the
        paper's row keeps ``personal=0, popularity=0, phi_decay=0``, and
        ``random_state``, ``n_jobs`` and ``verbose`` are the ones above. Checked before any
        stage runs.
    embedding_params : dict, optional
        More parameters of the shared `GraphEmbedder`, for example ``{"iterations": 20}``
        (the paper's epochs); ``n_components``, ``random_state``, ``n_jobs`` and
        ``verbose`` are the ones above. Checked before any stage runs.

    Returns
    -------
    reports : dict of str to RollingReport
        In the order of ``methods``.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"methods must be among {list(METHODS)}; got {unknown}.")
    if stages is None:
        stages = Stages(say=log)
    micro_settings = dict(micro_params or {})
    # a wrong name or value fails now, not after the embedding
    MiCRO(**micro_settings)._validate_params()
    embedding_settings = dict(embedding_params or {})
    GraphEmbedder(**embedding_settings)._validate_params()
    train, test = check_log(train, input_name="train"), check_log(test, input_name="test")
    verbose = int(bool(progress))
    embedded = None
    plan = _plan(methods, stages)
    # the embedding and the clusters serve only the evaluations still to be fitted
    to_fit = [row for row in plan if row.methods[0] in (*_PAIR.methods, "ANN")
              and not any(stages.has(name) for name in (
                  row.report(row.methods[0]), row.rolling, row.fit))]
    micro = any(row.methods[0] in _PAIR.methods for row in to_fit)
    if micro or any(row.methods[0] == "ANN" for row in to_fit):
        def embed():
            embedder = GraphEmbedder(n_components, **{
                **embedding_settings, "random_state": random_state, "n_jobs": n_jobs,
                "verbose": verbose}).fit(train)
            # saved once: ANN's checkpoints hold the same array
            stages.share(_USER_VECTORS, embedder.user_vectors_)
            return _Embedding(embedder.user_ids_, embedder.item_ids_,
                              embedder.user_vectors_, embedder.item_vectors_)

        found = stages.run("graph embedding", embed, work=len(train))
        stages.share(_USER_VECTORS, found.user_vectors)  # from a checkpoint without it
        embedded = EmbeddedLog(train, found.user_ids, found.item_ids, found.user_vectors,
                               found.item_vectors)
        del found
    if micro:
        def cluster():
            clusters = SphericalKMeans(n_interests, random_state=random_state,
                                       n_jobs=n_jobs, verbose=verbose)
            return clusters.fit_transform(embedded).item_interest

        labels = stages.run("clustering", cluster, work=len(embedded.item_ids), unit="items")
        embedded = embedded.with_interests(labels)
    if embedded is not None:
        # the item vectors are only clustered: the rest of the run reads the user vectors
        embedded = EmbeddedLog(embedded.log, embedded.user_ids, embedded.item_ids,
                               embedded.user_vectors,
                               np.empty((0, embedded.user_vectors.shape[1]), np.float32),
                               embedded.item_interest)
    reports = {}
    for row in plan:  # ANN first: the only method that reads the user vectors
        if row.methods[0] != "ANN" and embedded is not None and \
                embedded.user_vectors.shape[0]:
            embedded = EmbeddedLog(embedded.log, embedded.user_ids, embedded.item_ids,
                                   # a new empty array: a view would keep them alive
                                   np.empty((0, embedded.user_vectors.shape[1]), np.float32),
                                   embedded.item_vectors,
                                   embedded.item_interest)
        if all(stages.has(row.report(name)) for name in row.methods) and (
                len(row.methods) == 1 or stages.measured(row.evaluation)):
            with stages.measure(row.evaluation, work=len(test)) as stage:
                stage.resumed = True
                reports.update({name: stages.load(row.report(name)) for name in row.methods})
            continue
        evaluation = None
        if stages.has(row.rolling):
            evaluation = stages.load(row.rolling)
        else:
            def fit(name=row.methods[0], embedded=embedded):
                if name == "MiCRO":
                    return MiCRO(**{**micro_settings, "random_state": random_state,
                                    "n_jobs": n_jobs, "verbose": verbose}).fit(embedded)
                if name == "MiCRO (paper)":
                    return MiCRO(**{**micro_settings, "personal": 0, "popularity": 0,
                                    "phi_decay": 0, "random_state": random_state,
                                    "n_jobs": n_jobs, "verbose": verbose}).fit(embedded)
                if name == "ANN":
                    return ANNRecommender(random_state=random_state,
                                          n_jobs=n_jobs).fit(embedded)
                if name == "Popularity":
                    return PopularityRecommender().fit(train)
                if name == "RecentItems":
                    return RecentItemsRecommender().fit(train)
                if name == "ItemKNN":
                    return ItemKNNRecommender(n_jobs=n_jobs).fit(train)
                if name == "RP3beta":
                    return RP3betaRecommender(n_jobs=n_jobs).fit(train)
                return ALSRecommender(n_components, random_state=random_state,
                                      n_jobs=n_jobs).fit(train)

            model = stages.run(row.fit, fit, work=len(train))
            fit = None  # its default argument holds the vectors, which ANN alone reads
            kind = _SharedSampler if row is _PAIR else RollingEvaluation
            evaluation = kind(model, m_values=m_values, keep_points=keep_points)
            del model
        _evaluate(evaluation, test, row, stages, progress)
        found = (evaluation.reports() if row is _PAIR
                 else {row.methods[0]: evaluation.report()})
        del evaluation
        saved = True
        for name, report in found.items():
            reports[name] = report
            saved = stages.save(row.report(name), report) and saved
        if saved:  # else the evaluation's last state stays, for --resume
            stages.drop(row.rolling)
    return {name: reports[name] for name in methods}


class _SharedSampler:
    """The rolling evaluations of a `MiCRO` and of its paper's model, with one sampler.

    ``personal``, ``popularity`` and ``phi_decay`` act on retrieval alone, so ``MiCRO()``
    and ``MiCRO(personal=0, popularity=0, phi_decay=0)`` with the same other parameters and
    seed sample the same chain. Each test chunk is scored by the model's
    `MiCRO.paper_model` and by the model itself, then the model alone takes the chunk: both
    reports are those of evaluating the two models apart, for the cost of one sampler.

    Parameters
    ----------
    estimator : MiCRO
        Fitted; evaluated in place, as by `RollingEvaluation`.
    **kwargs
        `RollingEvaluation`'s (``m_values``, ``exclude_seen``, ``keep_points``).

    Attributes
    ----------
    micro, paper : RollingEvaluation
        The model's evaluation and its paper's model's (whose ``estimator`` is None
        between steps: the paper's model is made from the model's state at each step).
    """

    def __init__(self, estimator, **kwargs):
        self.micro = RollingEvaluation(estimator, **kwargs)
        self.paper = RollingEvaluation(estimator.paper_model(), **kwargs)
        self.paper.estimator = None  # made from the model's state at each step

    @property
    def chunks_done(self) -> list[int]:
        return self.micro.chunks_done

    def step(self, log: EngagementLog, X=None, *, learn: bool = True) -> int:
        """Score both models on one chunk, then let the model take it (as
        `RollingEvaluation.step`).

        Each block of users is ranked for both by `MiCRO.recommend_with_paper`. When the
        chunk is sampled as one chain, the model samples it while both are scored
        (`_learning_beside`). The reports are those of evaluating the two apart.
        """
        model = self.micro.estimator
        self.micro.check_chunk(int(log.chunk[0]))
        X = log if X is None else X
        with _learning_beside(model, log, X, learn) as before:
            points, paper_points = paired_chunk_points(before, log, self.micro.ks,
                                                       self.micro.exclude_seen)
        self.paper.record(log, paper_points, learn=False)
        return self.micro.record(log, points, learn=False)

    def reports(self) -> dict[str, RollingReport]:
        """The paper's model's report and the model's, as "MiCRO (paper)" and "MiCRO"."""
        return {"MiCRO (paper)": self.paper.report(), "MiCRO": self.micro.report()}


@contextmanager
def _learning_beside(model: MiCRO, log: EngagementLog, X, learn: bool):
    """Yield the model as it stands before the chunk ``log`` (``X`` in the form
    ``partial_fit`` takes), to be scored; then, if ``learn``, the model has taken the chunk.

    `MiCRO.partial_fit` replaces the model's attributes and never changes them in place, so
    a shallow copy made before it is the state before the chunk. When the chunk is sampled
    as one chain (`sklearn_micro.micro._gibbs.chain_threads`) and the model may use two threads
    or more, ``partial_fit`` runs on a thread of its own while the copy is scored, so the
    core the chain leaves idle ranks users. That needs numba's ``omp`` or ``tbb``
    threading layer (its ``workqueue`` layer runs one parallel kernel at a time) and no
    Dask client; otherwise the chunk is taken after the block. If scoring
    or sampling fails, or an interrupt comes while either runs, the sampler is let finish
    and the model is put back as it was before the chunk, and the error raised.
    """
    if not learn:
        yield model
        return
    if not _can_learn_beside(model, log):
        yield model
        model.partial_fit(X)
        return
    before = object.__new__(type(model))
    before.__dict__.update(model.__dict__)
    # the sampler draws from the model's random state: the copy keeps its own
    before.random_state_ = copy.deepcopy(model.random_state_)
    with ThreadPoolExecutor(1, thread_name_prefix="micro-partial-fit") as pool:
        learning = pool.submit(model.partial_fit, X)
        try:
            yield before
            learning.result()
        except BaseException:  # scoring or sampling failed, or an interrupt
            try:
                futures_wait([learning])  # a thread cannot be stopped: let it finish
            finally:
                model.__dict__ = dict(before.__dict__)
            raise


def _can_learn_beside(model: MiCRO, log: EngagementLog) -> bool:
    """Whether `_learning_beside` samples the chunk while it is scored."""
    if active_client() is not None or not isinstance(model, MiCRO):
        return False
    n_jobs = resolve_n_jobs(model.n_jobs)
    if n_jobs < 2:
        return False
    user = model.user_ids_.lookup(log.user, name="users")
    if chain_threads(model.support_indptr_, user, n_jobs, model.min_partition_work) > 1:
        return False
    return threading_layer() in ("omp", "tbb")


def _evaluate(evaluation, test: EngagementLog, row: _Row, stages: Stages,
              progress: bool) -> None:
    """Carry ``evaluation`` (a `RollingEvaluation` or a `_SharedSampler`) of ``row`` over
    the test chunks it has not done, saving its state after a chunk when the work since the
    last save outweighs the save's cost."""
    done = set(evaluation.chunks_done)
    chunks = [(c, rows) for c, rows in iter_chunks(test.chunk) if c not in done]
    with stages.measure(row.evaluation, work=sum(r.shape[0] for _, r in chunks)) as stage:
        if done:
            stage.note = f"resumed after chunk {max(done)}"
            stage.continued = True
        steps = chunks
        if progress:
            from tqdm.auto import tqdm

            steps = tqdm(chunks, desc=row.rolling, unit="chunk")
        cost = 0.0
        since = time.perf_counter()
        for pos, (_, rows) in enumerate(steps):
            last = pos == len(chunks) - 1
            evaluation.step(test.take(rows), learn=not last)
            if not last and time.perf_counter() - since >= _CHECKPOINT_RATIO * cost:
                start = time.perf_counter()
                stages.save(row.rolling, evaluation, stage)
                cost = time.perf_counter() - start
                since = time.perf_counter()


def results_table(reports: dict[str, RollingReport], m_values: Sequence[int] = (50, 100), *,
                  aggregate: str = "overall", digits: int = 3,
                  intervals: bool = False, level: float = 0.95) -> str:
    """The paper's table as markdown: Recall, MRR and NDCG at each M, one row per method.

    ``aggregate="overall"`` averages over all (user, chunk) points; ``"per_user"`` first
    averages each user's points, then over users (the paper's Table 3). With
    ``intervals``, each cell gives the half width of its confidence interval at ``level``
    (`RollingReport.intervals`, users as the unit) after the mean.
    """
    if aggregate not in ("overall", "per_user"):
        raise ValueError(f"aggregate must be 'overall' or 'per_user'; got {aggregate!r}.")
    columns = [f"{metric}@{m}" for m in m_values for metric in ("recall", "mrr", "ndcg")]
    lines = ["| method | " + " | ".join(columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for name, report in reports.items():
        row = report.overall() if aggregate == "overall" else report.per_user()
        cells = [f"{float(row[c]):.{digits}f}" for c in columns]
        if intervals:
            table = report.intervals(aggregate=aggregate, level=level)
            high, mean = _by_metric(table, "high"), _by_metric(table, "mean")
            cells = [f"{cell} ± {high[c] - mean[c]:.{digits + 1}f}"
                     for cell, c in zip(cells, columns, strict=True)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _by_metric(table, column: str) -> dict[str, float]:
    """A column of `RollingReport.intervals` or `compare` by metric, with or without pandas."""
    if isinstance(table, dict):
        return dict(zip(table["metric"].tolist(), np.asarray(table[column], float).tolist(),
                        strict=True))
    return {name: float(value) for name, value in table[column].items()}


def comparison_table(reports: dict[str, RollingReport], reference: str,
                     metrics: Sequence[str] = ("recall@100", "mrr@100"), *,
                     level: float = 0.95) -> str:
    """``reference`` against every other method as markdown: the relative difference of
    each metric's mean over all points, with its confidence interval paired by user
    (`RollingReport.compare`)."""
    if reference not in reports:
        raise ValueError(f"reference must be one of {list(reports)}; got {reference!r}.")
    metrics = list(metrics)
    lines = [f"| {reference} against | " + " | ".join(metrics) + " |",
             "|---|" + "---:|" * len(metrics)]
    for name, report in reports.items():
        if name == reference:
            continue
        table = reports[reference].compare(report, level=level)
        relative, low, high = (_by_metric(table, c)
                               for c in ("relative", "relative_low", "relative_high"))
        cells = [f"{relative[m]:+.1%} [{low[m]:+.1%}, {high[m]:+.1%}]"
                 if np.isfinite(relative[m]) else "n/a (a mean of 0)" for m in metrics]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def prequential_table(reports: dict, reference: str, m: int = 100, *,
                      level: float = 0.95) -> str:
    """Prequential reports (`prequential_evaluate`, one per method) as markdown.

    A row per method: recall@m and MRR@m over all (user, batch) points with the half width
    of their interval, recall@m relative to ``reference`` with its interval paired by user,
    and recall@m against new items only (first engaged in the test chunk) and for warm and
    cold users (users with engagements before the chunk, or not).
    """
    if reference not in reports:
        raise ValueError(f"reference must be one of {list(reports)}; got {reference!r}.")
    recall, mrr = f"recall@{m}", f"mrr@{m}"
    lines = [f"| method | {recall} | {mrr} | {recall} / {reference} | {recall}, new items "
             f"| warm users | cold users |", "|---|" + "---:|" * 6]
    for name, report in reports.items():
        table = report.all.intervals(level=level)
        mean, high = _by_metric(table, "mean"), _by_metric(table, "high")
        ratio = ""
        if name != reference:
            against = report.all.compare(reports[reference].all, level=level)
            rel, low, up = (_by_metric(against, c)[recall]
                            for c in ("relative", "relative_low", "relative_high"))
            ratio = (f"{1 + rel:.2f}x [{1 + low:.2f}, {1 + up:.2f}]" if np.isfinite(rel)
                     else "n/a (a mean of 0)")
        new = float(report.new_items.overall()[recall]) if len(report.new_items) else np.nan
        by_warm = report.all.overall(by_warm=True)
        warm, cold = (float(np.asarray(by_warm[recall])[i]) for i in (1, 2))
        lines.append(f"| {name} | {mean[recall]:.3f} ± {high[recall] - mean[recall]:.3f} | "
                     f"{mean[mrr]:.3f} ± {high[mrr] - mean[mrr]:.3f} | {ratio} | {new:.3f} | "
                     f"{warm:.3f} | {cold:.3f} |")
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
