"""Baseline recommenders: popularity, a user's recent items, ANN on user vectors, ALS,
item-kNN and RP3beta.

All of them follow the recommender protocol of `RecommenderMixin` and share one rule for
ties and empty slots: items of equal score are ordered by the latest chunk's popularity
(engagement count in that chunk, descending, then internal index), and the slots a method
cannot fill are filled with the latest chunk's most engaged items, which score below every
item the method ranked itself. A user never seen gets that popularity ranking. The *window*
of a recommender is its last ``window`` chunks.
"""

from ._neighbours import ItemKNNRecommender, RP3betaRecommender
from ._recommenders import (
    ALSRecommender,
    ANNRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
)

__all__ = [
    "ALSRecommender",
    "ANNRecommender",
    "ItemKNNRecommender",
    "PopularityRecommender",
    "RP3betaRecommender",
    "RecentItemsRecommender",
]
