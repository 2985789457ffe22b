"""
MiCRO at request time: history, filters, similar items and explanations
=======================================================================

MiCRO learns chunk by chunk, but requests come in between: a user who just engaged with
three items, a page that must not show what it showed before, a "more like this" button.
``recommend`` takes a user's ``history`` since the latest chunk and ``exclude`` and
``allow`` lists without changing the model; ``similar_items`` ranks from an item's own
interests, even an item first engaged in the latest chunk; ``explain`` splits a score
into the interests it comes from.
"""

# %%
# A model of a generated log
# --------------------------
# A small log from MiCRO's generative model, items living 2.5 chunks on average. The
# pipeline is fitted on the first 7 chunks and takes the 8th with ``partial_fit``.

import matplotlib.pyplot as plt
import numpy as np
from sklearn.pipeline import Pipeline

from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans
from sklearn_micro.datasets import make_engagements

log = make_engagements(n_users=2000, n_items=3000, n_chunks=8, n_interests=15,
                       n_engagements=40_000, item_appeal=1.7, random_state=0).to_frame()
pipe = Pipeline([
    ("embed", GraphEmbedder(n_components=16, random_state=0)),
    ("interests", SphericalKMeans(n_clusters=15, random_state=0)),
    ("micro", MiCRO(random_state=0)),
]).fit(log[log.chunk < 7])
model = pipe[-1].partial_fit(log[log.chunk == 7])
print(f"latest chunk {model.latest_chunk_}: {model.chunk_items_.shape[0]} items, "
      f"personal weight {model.personal_weight_}")

# %%
# A new user with a history
# -------------------------
# A user the model has never seen gets the latest chunk's most popular items. With the
# three items they just engaged with as ``history``, the answer comes from those items'
# interests (and, with the personal component, the items themselves), and the model stays
# as it was.

latest = log[log.chunk == 7]
first_items = latest.item.value_counts().index[[5, 40, 41]].tolist()
new_user = -1
cold, _ = model.recommend([new_user], m=8)
warm, _ = model.recommend([new_user], m=8, history=[first_items])
print("without history:", cold[0])
print("with history:   ", warm[0])
why = model.explain(new_user, warm[0][:1], history=first_items)
print("the history's interests and their weights:",
      dict(zip(why.interests.tolist(), why.weights.round(2).tolist(), strict=True)))

# %%
# Filters, with exactly m answers
# -------------------------------
# ``exclude`` leaves items out (here: what the page showed already) and ``allow`` keeps
# the candidates within a set (here: a "category", the items of one interest). Each is a
# flat list for every user or one list per user. The rows still hold ``m`` items wherever
# that many are eligible.

users = latest.user.unique()[:3]
shown, _ = model.recommend(users, m=5)
category = model.item_ids_.ids[model.item_interest_ == model.item_interest_[
    model.item_ids_.lookup([shown[0][0]])[0]]].tolist()
more, _ = model.recommend(users, m=5, exclude=[row.tolist() for row in shown],
                          allow=category)
print("shown:\n", shown, "\nnext, within the category:\n", more)

# %%
# Similar items, even for a new item
# ----------------------------------
# An item first engaged in the latest chunk has no vector of its own, but it has a
# distribution over interests there: MiCRO ranks the items most likely engaged next by
# someone who engaged with it.

new_items = np.setdiff1d(latest.item, log[log.chunk < 7].item)
busiest_new = latest[latest.item.isin(new_items)].item.value_counts().index[0]
similar, scores = model.similar_items([busiest_new], m=5)
print(f"like item {busiest_new}:", similar[0], scores[0].round(4))

# %%
# Why these items
# ---------------
# ``explain`` gives each item's score as a sum: one term per interest of the user's
# mixture, a popularity term for users without interests, the personal term (the user's
# own recent items) and the co-engagement term (the items engaged with them). The terms
# sum to the score ``recommend`` gives.

user = latest.user.value_counts().index[0]
items, scores = model.recommend([user], m=6)
why = model.explain(user, items[0])
assert np.allclose(why.contributions.sum(axis=1) + why.popularity + why.personal
                   + why.coengagement, why.scores)
fig, ax = plt.subplots(figsize=(7, 3.5))
bottom = np.zeros(len(why.items))
for q, k in enumerate(why.interests):
    if why.contributions[:, q].max() > 0.02 * why.scores.max():
        ax.bar(range(len(why.items)), why.contributions[:, q], bottom=bottom,
               label=f"interest {k} (weight {why.weights[q]:.2f})")
        bottom += why.contributions[:, q]
rest = why.contributions.sum(axis=1) + why.popularity - bottom
ax.bar(range(len(why.items)), rest, bottom=bottom, color="0.8", label="other interests")
ax.bar(range(len(why.items)), why.personal, bottom=bottom + rest, color="k",
       label="personal")
ax.bar(range(len(why.items)), why.coengagement, bottom=bottom + rest + why.personal,
       color="0.4", label="co-engagement")
ax.set_xticks(range(len(why.items)), [str(i) for i in why.items])
ax.set_xlabel(f"user {user}'s top items")
ax.set_ylabel("score")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
