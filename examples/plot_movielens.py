"""
MiCRO on MovieLens: long-lived items and ``phi_decay``
======================================================

The paper's model ranks only the items of the latest chunk: ``phi[k, t]`` is built from
chunk t's engagements alone, which suits ephemeral items such as tweets. Movies live long,
and a month's ratings fall mostly on movies nobody rated the month before.
``MiCRO(phi_decay=d)`` carries the previous chunks' counts into retrieval with weight d
(the sampler is unchanged). This example compares the paper's model (``phi_decay=0``) with
carried counts on MovieLens ml-latest-small in 30-day chunks, beside the popularity
baseline.

This example reads the MovieLens log from the data folder (``../shared/data`` beside the
project, or the folder named by ``SKLEARN_MICRO_DATA``): the documentation runs it where
that folder is present, and shows its code alone otherwise.
"""

# %%
# The log
# -------
# 100,836 ratings of 610 users, each rating an engagement, in 30-day chunks. Fit on
# chunks 0..249, test on the last 24 (2016-10 to 2018-09). K = 25: on MovieLens the
# scores are flat in K (.114 to .122 of recall@100 from K = 10 to 200 in the grid search
# of ``examples/paper_table.py``, which takes K = 200 for the documentation's table).

import matplotlib.pyplot as plt
from sklearn.pipeline import Pipeline

from sklearn_micro import GraphEmbedder, MiCRO, PopularityRecommender, SphericalKMeans
from sklearn_micro.datasets import load_movielens
from sklearn_micro.model_selection import rolling_evaluate

log = load_movielens(chunk_days=30, as_frame=True)
train, test = log[log.chunk < 250], log[log.chunk >= 250]
print(f"{len(log):,} ratings in chunks 0..{log.chunk.max()}; fit on {len(train):,}, "
      f"test on {len(test):,}")

# %%
# The paper's model against carried counts
# ----------------------------------------
# One pipeline per value of ``phi_decay``; ``set_params`` reaches the MiCRO step.

pipe = Pipeline([
    ("embed", GraphEmbedder(n_components=64, random_state=0)),
    ("interests", SphericalKMeans(n_clusters=25, random_state=0)),
    ("micro", MiCRO(random_state=0)),
])
reports = {}
for decay in (0.0, 0.5, 0.9):
    model = pipe.set_params(micro__phi_decay=decay).fit(train)
    reports[f"MiCRO, phi_decay={decay:g}"] = rolling_evaluate(model, test, m_values=100)
reports["Popularity"] = rolling_evaluate(PopularityRecommender().fit(train), test,
                                         m_values=100)
for name, report in reports.items():
    means = report.overall()
    print(f"{name:22s} Recall@100 {means['recall@100']:.3f}  MRR@100 {means['mrr@100']:.3f}")

# %%
# Recall per test chunk
# ---------------------
# About a dozen users rate movies in each test chunk, so the curve is noisy; the overall
# means above weigh every (user, chunk) point alike.

fig, ax = plt.subplots(figsize=(6, 3.5))
for name, report in reports.items():
    per_chunk = report.per_chunk()
    ax.plot(per_chunk.index, per_chunk["recall@100"], marker="o", markersize=3, label=name)
ax.set_xlabel("test chunk (30 days)")
ax.set_ylabel("mean Recall@100")
ax.set_title("MovieLens, rolling evaluation")
ax.legend(fontsize="small")
fig.tight_layout()
plt.show()
