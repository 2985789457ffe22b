"""
MiCRO and the baselines on a generated log
==========================================

A log drawn from MiCRO's generative model (the paper's Table 2) with ephemeral items: every
item lives a few chunks, so what a user engages with next is mostly new. The pipeline of
the paper (graph embedding, spherical k-means, MiCRO) is fitted on the first 12 chunks,
then every recommender walks through the last 4 with the rolling protocol: recommend 100
items to each user of chunk t+1 with the state after chunk t, score them against the
user's items of chunk t+1, then take chunk t+1 with ``partial_fit``.
"""

# %%
# A log from the generative model
# -------------------------------
# 4,000 users with 1 to 3 of 20 planted interests, 8,000 items living 2.5 chunks on
# average, about 100,000 engagements in 16 chunks. ``make_engagements`` returns an
# `EngagementLog`; ``to_frame`` makes it a DataFrame with columns ``user``, ``item`` and
# ``chunk``.

import matplotlib.pyplot as plt
from sklearn.pipeline import Pipeline

from sklearn_micro import (
    ANNRecommender,
    GraphEmbedder,
    MiCRO,
    PopularityRecommender,
    RecentItemsRecommender,
    SphericalKMeans,
)
from sklearn_micro.datasets import make_engagements
from sklearn_micro.model_selection import rolling_evaluate

log = make_engagements(n_users=4000, n_items=8000, n_chunks=16, n_interests=20,
                       n_engagements=100_000, random_state=0).to_frame()
train, test = log[log.chunk < 12], log[log.chunk >= 12]
print(f"{len(log):,} engagements; train on chunks 0..11 ({len(train):,}), "
      f"test on 12..15 ({len(test):,})")
print(f"test items never seen in training: {(~test.item.isin(train.item)).mean():.0%}")

# %%
# The pipeline and the baselines
# ------------------------------
# MiCRO and ANN each take a graph embedding of the training log; Popularity and
# RecentItems read the log itself. All of them answer ``recommend(users, m)``.

recommenders = {
    "MiCRO": Pipeline([
        ("embed", GraphEmbedder(n_components=32, random_state=0)),
        ("interests", SphericalKMeans(n_clusters=20, random_state=0)),
        ("micro", MiCRO(random_state=0)),
    ]),
    "ANN": Pipeline([
        ("embed", GraphEmbedder(n_components=32, random_state=0)),
        ("ann", ANNRecommender(random_state=0)),
    ]),
    "Popularity": PopularityRecommender(),
    "RecentItems": RecentItemsRecommender(),
}
reports = {name: rolling_evaluate(model.fit(train), test, m_values=(20, 100))
           for name, model in recommenders.items()}

# %%
# Scores over all (user, chunk) points
# ------------------------------------
# ``RollingReport.overall`` averages over every (user, chunk) point of the test chunks.

for name, report in reports.items():
    means = report.overall()
    print(f"{name:12s} " + "  ".join(f"{metric} {means[metric]:.3f}"
                                      for metric in ("recall@20", "recall@100", "ndcg@100")))

# %%
# Recall per test chunk
# ---------------------
# ``RollingReport.per_chunk`` gives the curve over time, as the paper's figures.

fig, ax = plt.subplots(figsize=(6, 3.5))
for name, report in reports.items():
    per_chunk = report.per_chunk()
    ax.plot(per_chunk.index, per_chunk["recall@100"], marker="o", label=name)
ax.set_xlabel("test chunk")
ax.set_ylabel("mean Recall@100")
ax.set_xticks(sorted(test.chunk.unique()))
ax.set_title("Rolling evaluation on a generated log")
ax.legend()
fig.tight_layout()
plt.show()
