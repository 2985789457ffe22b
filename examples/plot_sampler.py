"""
Inside MiCRO: the sampler's chains and what it learns
=====================================================

MiCRO's ``partial_fit`` runs a collapsed Gibbs sampler on each new chunk until the chain
has converged. This example looks inside, on a log drawn from the generative model with
the truth kept (``return_truth=True``): how each chunk's chain converges, how many
interests a user keeps, and whether items never seen in training land in the interest
they were drawn from.
"""

# %%
# Fit on the first chunks, then take the others one by one
# --------------------------------------------------------
# ``MiCRO.fit`` takes each training item's cluster as its interest; here the clusters of
# the pipeline's spherical k-means, with as many interests as were planted.

import matplotlib.pyplot as plt
import numpy as np
from sklearn.metrics import adjusted_rand_score
from sklearn.pipeline import Pipeline

from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans
from sklearn_micro.datasets import make_engagements

log, truth = make_engagements(n_users=4000, n_items=8000, n_chunks=16, n_interests=20,
                              n_engagements=100_000, random_state=2, return_truth=True)
log = log.to_frame()
train = log[log.chunk < 10]
pipe = Pipeline([
    ("embed", GraphEmbedder(n_components=32, random_state=0)),
    ("interests", SphericalKMeans(n_clusters=20, random_state=0)),
    ("micro", MiCRO(random_state=0)),
]).fit(train)
model = pipe[-1]
for t in range(10, 16):
    model.partial_fit(log[log.chunk == t])
print("sweeps per chunk:", model.n_sweeps_)

# %%
# Convergence of each chunk's chain
# ---------------------------------
# After every sweep the chunk's collapsed log-likelihood is computed
# (``log_likelihood_``). The chain stops when the mean of its last 3 sweeps rises by less
# than ``tol`` (relative) over the 3 before. Where a chunk has users whose items were all
# new, a second pass follows once their items have interests: its log-likelihood starts
# a new segment of the trace.

fig, ax = plt.subplots(figsize=(6, 3.5))
for t, trace in model.log_likelihood_.items():
    ax.plot(np.arange(1, len(trace) + 1), trace / abs(trace[-1]), marker=".", label=f"{t}")
ax.set_xlabel("sweep")
ax.set_ylabel("log-likelihood / |final|")
ax.set_title("Gibbs chains, one per chunk")
ax.legend(title="chunk", ncols=2, fontsize="small")
fig.tight_layout()
plt.show()

# %%
# How many interests a user keeps
# -------------------------------
# A user's mixture ``theta_u`` lives on a sparse support: the interests of the items they
# engaged with in training, plus what later chunks gave them. ``user_interests`` returns
# the mixtures as a sparse matrix; the planted mixtures are in ``truth.user_interests``.

users = np.unique(train.user)
learnt = model.user_interests(users).getnnz(axis=1)
planted = truth.user_interests[users].getnnz(axis=1)
sizes = np.arange(1, max(learnt.max(), planted.max()) + 1)
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.bar(sizes - 0.2, np.bincount(planted, minlength=sizes[-1] + 1)[1:], width=0.4,
       label="planted")
ax.bar(sizes + 0.2, np.bincount(learnt, minlength=sizes[-1] + 1)[1:], width=0.4,
       label="MiCRO's support")
ax.set_xlabel("interests per user")
ax.set_ylabel("users")
ax.set_title("Interests per training user")
ax.legend()
fig.tight_layout()
plt.show()

# %%
# New items find their interest
# -----------------------------
# Items first engaged with after training have no vector and no cluster; the sampler
# gives their engagements interests, and ``item_interest_`` keeps each item's main one.
# Interest numbers are arbitrary, so the agreement with the planted interests is measured
# by the adjusted Rand index (1 is perfect, 0 is chance), for training items (from the
# clustering) and for new items (from the sampler).

ids = model.item_ids_.ids
assigned = model.item_interest_ >= 0
is_new = ~np.isin(ids, train.item)
for name, rows in (("training items", assigned & ~is_new), ("new items", assigned & is_new)):
    score = adjusted_rand_score(truth.item_interest[ids[rows]], model.item_interest_[rows])
    print(f"{name}: {rows.sum():,}, adjusted Rand index {score:.2f}")
