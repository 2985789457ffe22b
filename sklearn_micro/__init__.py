"""sklearn-micro: MiCRO, multi-interest candidate retrieval online, as scikit-learn estimators."""

from ._log import EmbeddedLog, EngagementLog, Vocabulary, check_log
from ._version import __version__ as __version__
from .baselines import (
    ALSRecommender,
    ANNRecommender,
    ItemKNNRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
    RP3betaRecommender,
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
    "ItemKNNRecommender",
    "MiCRO",
    "PopularityRecommender",
    "RP3betaRecommender",
    "RecentItemsRecommender",
    "SphericalKMeans",
    "Vocabulary",
    "check_log",
]
