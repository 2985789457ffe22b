"""Evaluation over time: a chunk splitter, the rolling protocol and its scorers.

The rolling protocol (paper 4.2): a recommender fitted on the chunks up to t retrieves for
each user of chunk t+1, is scored against that user's engagements in t+1, then takes chunk
t+1 with ``partial_fit``, and so on to the end of the test log.
"""

from ._prequential import (
    PrequentialReport,
    PrequentialScorer,
    make_prequential_scorer,
    prequential_evaluate,
)
from ._rolling import (
    ChunkSplit,
    RollingEvaluation,
    RollingScorer,
    make_rolling_scorer,
    rolling_evaluate,
)
from ._rolling_report import RollingReport

__all__ = [
    "ChunkSplit",
    "PrequentialReport",
    "PrequentialScorer",
    "RollingEvaluation",
    "RollingReport",
    "RollingScorer",
    "make_prequential_scorer",
    "make_rolling_scorer",
    "prequential_evaluate",
    "rolling_evaluate",
]
