"""
Choosing the number of interests K with GridSearchCV
====================================================

K is the ``n_clusters`` of the `SphericalKMeans` step. It is searched the scikit-learn way,
with ``GridSearchCV``, given two things that respect time: `ChunkSplit` folds, which test
on later chunks than they train on, and `make_rolling_scorer`, which scores each fold's
test chunks with the rolling protocol on a copy of the fitted pipeline. The log is drawn
from the generative model with 20 planted interests, so the search can be read against the
truth.
"""

# %%
# The log and the folds
# ---------------------
# The search sees the training chunks 0..11 only; chunks 12..15 are kept for a final
# evaluation of the K it picks. Each of the three folds tests on one chunk and trains on
# every chunk before it.

import tempfile

import matplotlib.pyplot as plt
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline

from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans
from sklearn_micro.datasets import make_engagements
from sklearn_micro.model_selection import ChunkSplit, make_rolling_scorer, rolling_evaluate

log = make_engagements(n_users=4000, n_items=8000, n_chunks=16, n_interests=20,
                       n_engagements=100_000, random_state=1).to_frame()
train, test = log[log.chunk < 12], log[log.chunk >= 12]

cv = ChunkSplit(n_splits=3, test_chunks=1)
for fold, (fit_rows, score_rows) in enumerate(cv.split(train)):
    print(f"fold {fold}: fit on chunks 0..{train.chunk.iloc[fit_rows].max()}, "
          f"score on chunk {train.chunk.iloc[score_rows].min()}")

# %%
# The search
# ----------
# The pipeline caches its fitted transformers (``memory=``), so the graph embedding of a
# fold is computed once and shared by every K. ``refit`` names the score that picks K;
# the best pipeline is then refitted on all training chunks.

k_values = [5, 10, 20, 40, 80]
with tempfile.TemporaryDirectory() as cache:
    pipe = Pipeline([
        ("embed", GraphEmbedder(n_components=32, random_state=0)),
        ("interests", SphericalKMeans(random_state=0)),
        ("micro", MiCRO(random_state=0)),
    ], memory=cache)
    search = GridSearchCV(pipe, {"interests__n_clusters": k_values}, cv=cv,
                          scoring=make_rolling_scorer(m_values=100), refit="recall@100")
    search.fit(train)

results = search.cv_results_
for k, mean, std in zip(k_values, results["mean_test_recall@100"],
                        results["std_test_recall@100"], strict=True):
    print(f"K = {k:3d}: Recall@100 {mean:.3f} +- {std:.3f}")
print(f"best: {search.best_params_}")

# %%
# The scores against K
# --------------------
# The mean Recall@100 of the three folds, with their standard deviation, beside the
# number of planted interests.

mean = results["mean_test_recall@100"]
std = results["std_test_recall@100"]
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.errorbar(k_values, mean, yerr=std, marker="o", capsize=3, label="mean of 3 folds")
ax.axvline(20, color="gray", linestyle="--", label="planted interests")
ax.set_xscale("log")
ax.set_xticks(k_values, [str(k) for k in k_values])
ax.set_xlabel("K (interests__n_clusters)")
ax.set_ylabel("Recall@100")
ax.set_title("GridSearchCV over K, rolling scorer")
ax.legend()
fig.tight_layout()
plt.show()

# %%
# The chosen K on the held-out chunks
# -----------------------------------
# ``best_estimator_`` is fitted on chunks 0..11; the rolling protocol scores it on the
# chunks the search never saw.

report = rolling_evaluate(search.best_estimator_, test, m_values=100)
print(f"K = {search.best_params_['interests__n_clusters']}: Recall@100 on chunks 12..15 "
      f"{report.overall()['recall@100']:.3f}")
model = search.best_estimator_[-1]
theta = model.user_interests(train.user.unique())
print(f"{model.n_interests_} interests; a training user has {theta.getnnz(axis=1).mean():.2f} "
      f"of them on average")
