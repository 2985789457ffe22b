"""sklearn-micro: MiCRO, multi-interest candidate retrieval online, as scikit-learn estimators."""

from ._log import EmbeddedLog, EngagementLog, Vocabulary, check_log
from ._version import __version__ as __version__
from .baselines import (
    ALSRecommender,
    ANNRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
)
from .cluster import SphericalKMeans
from .embedding import GraphEmbedder
from .micro import MiCRO
from .micro._online import Explanation

__all__ = [
    "ALSRecommender",
    "ANNRecommender",
    "EmbeddedLog",
    "EngagementLog",
    "Explanation",
    "GraphEmbedder",
    "MiCRO",
    "PopularityRecommender",
    "RecentItemsRecommender",
    "SphericalKMeans",
    "Vocabulary",
    "check_log",
]
