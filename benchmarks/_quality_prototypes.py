"""Prototypes of retrieval-quality extensions of MiCRO, built on its public fitted state.

Nothing here changes `sklearn_micro.micro.MiCRO`: the extensions are measured in
``benchmarks/quality.py`` before they become estimator parameters. Each has a setting that
gives back the paper's model exactly.

- `MixtureSetting` scores a user's candidates with

      p(i|u) = (1 - lam_u) * sum_k theta_u[k] * phi~[k, t][i]  +  lam_u * r_u(i)

  where ``phi~[k, t][i] = (beta_i + N[i, k, t]) / (sum_j beta_j + N[k, t])``:

  * ``personal`` (lam): the weight of ``r_u``, the user's own items of the last
    ``personal_window`` chunks, each engagement weighted ``personal_decay ** age`` and
    normalized per user; a float, or ``"learned"``: the share of the training log's
    (user, item) pairs of warm users that repeat an item of the user's window (an
    estimate of the mixture weight that needs no model fit). Users with no item in the
    window keep lam_u = 0. 0 is the paper.
  * ``beta_shape``: ``"symmetric"`` is the paper's ``beta_i = beta``; ``"popularity"`` is
    ``beta_i = beta * I_t * pi_i`` with ``pi_i`` the item's share of the latest chunk's
    engagements (same total prior mass ``beta * I_t``), the paper's item-specific
    ``beta[t, i]`` shaped by popularity.
  * ``affinity`` (gamma): the interest part's count term of each item is multiplied by
    ``exp(gamma * cos(x_u, x_i))`` (user and item vectors of the graph embedding; a new
    item's vector is the mean of the vectors of its engagers in the latest chunk), then
    rescaled so the user's total stays the same: items are re-ranked inside the user's
    interests by the user's affinity. 0 is the paper.

- `select_phi_decay` and `select_affinity` choose ``phi_decay`` and gamma from the
  training log alone (docs/quality.md says how).

- `SupportGrowthMiCRO(support_growth=True)`: before each chunk is sampled, a user's support
  takes, with count 0 (prior alpha), the interests of the known items they engage with in
  the chunk; after sampling, entries the chain left empty are dropped again, so
  ``alpha_u[k] = alpha * 1(N[u, k] > 0)`` still holds. False is the paper.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sklearn_micro import MiCRO
from sklearn_micro._kernels.ranking import top_m_sparse
from sklearn_micro._kernels.selection import fill_remainder
from sklearn_micro._log import check_log

__all__ = ["MiCRORun", "MixtureSetting", "SupportGrowthMiCRO", "select_affinity",
           "select_phi_decay", "support_size", "training_repeat_rate"]


@dataclass(frozen=True)
class MixtureSetting:
    """Recommend-side settings; the defaults are the paper's model."""

    personal: float | str = 0.0
    beta_shape: str = "symmetric"
    affinity: float = 0.0

    @property
    def is_paper(self) -> bool:
        return self.personal == 0.0 and self.beta_shape == "symmetric" and self.affinity == 0


class SupportGrowthMiCRO(MiCRO):
    """MiCRO whose users adopt the interests of the items they engage with after training."""

    def __init__(self, alpha=1.0, *, beta=0.01, personal=0.0, phi_decay=0.0, max_sweeps=100,
                 tol=1e-3, random_state=None, n_jobs=None, verbose=0, support_growth=True):
        # the prototypes score the personal component themselves: the model's is off
        super().__init__(alpha, beta=beta, personal=personal, phi_decay=phi_decay,
                         max_sweeps=max_sweeps, tol=tol, random_state=random_state,
                         n_jobs=n_jobs, verbose=verbose)
        self.support_growth = support_growth

    _parameter_constraints = {**MiCRO._parameter_constraints, "support_growth": ["boolean"]}

    def partial_fit(self, X, y=None):
        if not self.support_growth:
            return super().partial_fit(X, y)
        log = check_log(X)
        for chunk in np.unique(log.chunk):
            part = log.take(np.flatnonzero(log.chunk == chunk))
            self._grow_supports(part)
            super().partial_fit(part)
            self._drop_empty_support()
        return self

    def _set_support(self, user, interest, count):
        n_users = len(self.user_ids_)
        order = np.lexsort((interest, user))
        user, interest, count = user[order], interest[order], count[order]
        indptr = np.zeros(n_users + 1, np.int64)
        np.cumsum(np.bincount(user, minlength=n_users), out=indptr[1:])
        self.support_indptr_ = indptr
        self.support_interest_ = interest.astype(np.int32)
        self.support_count_ = count.astype(np.int32)

    def _support_triplets(self):
        user = np.repeat(np.arange(len(self.user_ids_)), np.diff(self.support_indptr_))
        return user, self.support_interest_.astype(np.int64), self.support_count_

    def _grow_supports(self, part):
        u = self.user_ids_.lookup(part.user)
        i = self.item_ids_.lookup(part.item)
        ok = (u >= 0) & (i >= 0)
        u, k = u[ok], self.item_interest_[i[ok]].astype(np.int64)
        ok = k >= 0
        u, k = u[ok], k[ok]
        # only users that already have a support grow; the others get one from the sampler
        has = np.diff(self.support_indptr_)[u] > 0
        u, k = u[has], k[has]
        if u.size == 0:
            return
        K = self.n_interests_
        su, sk, sc = self._support_triplets()
        old = su * K + sk
        new = np.unique(u * K + k)
        new = new[~np.isin(new, old)]
        if new.size == 0:
            return
        self._set_support(np.concatenate([su, new // K]), np.concatenate([sk, new % K]),
                          np.concatenate([sc, np.zeros(new.size, sc.dtype)]))

    def _drop_empty_support(self):
        su, sk, sc = self._support_triplets()
        keep = sc > 0
        if keep.all():
            return
        self._set_support(su[keep], sk[keep], sc[keep])


def support_size(model, users) -> np.ndarray:
    """Number of interests in each user's support in a fitted MiCRO (0 for unknown users)."""
    idx = model.user_ids_.lookup(np.asarray(users))
    size = np.diff(model.support_indptr_)
    return np.where(idx >= 0, size[np.maximum(idx, 0)], 0)


def training_repeat_rate(train, *, window: int, last_chunks: int = 4) -> float:
    """Share of the (user, item) pairs of warm users in the last ``last_chunks`` training
    chunks whose item is among the user's items of the ``window`` chunks before."""
    log = check_log(train)
    user = np.unique(log.user, return_inverse=True)[1].ravel().astype(np.int64)
    item = np.unique(log.item, return_inverse=True)[1].ravel().astype(np.int64)
    chunk = log.chunk.astype(np.int64)
    n_items = int(item.max()) + 1
    key = user * n_items + item
    last = int(chunk.max())
    repeats = pairs = 0
    for c in range(last - last_chunks + 1, last + 1):
        now = np.unique(key[chunk == c])
        before = np.unique(key[(chunk < c) & (chunk >= c - window)])
        has_window = np.isin(now // n_items, np.unique(before // n_items))
        now = now[has_window]
        pairs += now.size
        repeats += int(np.isin(now, before).sum())
    return repeats / pairs if pairs else 0.0


class MiCRORun:
    """A MiCRO model walking through the test chunks, with what the settings need.

    Parameters
    ----------
    model : MiCRO
        Fitted.
    train : EngagementLog
        The training log (for the personal window).
    embedded : EmbeddedLog or None
        The graph embedding, for ``affinity``.
    personal_window, personal_decay : int, float
        The window of ``r_u`` and the weight ``personal_decay ** age`` of an engagement.
    learned_personal : float
        The value ``personal="learned"`` takes.
    """

    def __init__(self, model, train, embedded=None, *, personal_window=8, personal_decay=0.5,
                 learned_personal=0.0):
        self.model = model
        self.personal_window = personal_window
        self.personal_decay = personal_decay
        self.learned_personal = learned_personal
        log = check_log(train)
        keep = log.chunk > int(log.chunk.max()) - personal_window
        self._window = (log.user[keep], log.item[keep], log.chunk[keep].astype(np.int64))
        self._last = (log.user[log.chunk == log.chunk.max()],
                      log.item[log.chunk == log.chunk.max()])
        self.embedded = embedded
        if embedded is not None:
            uv = np.asarray(embedded.user_vectors, np.float32)
            iv = np.asarray(embedded.item_vectors, np.float32)
            self._uvec = uv / np.maximum(np.linalg.norm(uv, axis=1, keepdims=True), 1e-12)
            self._ivec = iv / np.maximum(np.linalg.norm(iv, axis=1, keepdims=True), 1e-12)
        self._refresh()

    # ------------------------------------------------------------------ state

    def partial_fit(self, chunk_log):
        self.model.partial_fit(chunk_log)
        log = check_log(chunk_log)
        u, i, c = self._window
        c_new = int(log.chunk.max())
        keep = c > c_new - self.personal_window
        self._window = (np.concatenate([u[keep], log.user]), np.concatenate([i[keep], log.item]),
                        np.concatenate([c[keep], log.chunk.astype(np.int64)]))
        self._last = (log.user, log.item)
        self._refresh()
        return self

    def _refresh(self):
        m = self.model
        n_users, n_items = len(m.user_ids_), len(m.item_ids_)
        u_ext, i_ext, c = self._window
        u, i = m.user_ids_.lookup(u_ext), m.item_ids_.lookup(i_ext)
        w = self.personal_decay ** (m.latest_chunk_ - c).astype(np.float64)
        r = sp.csr_matrix((w, (u, i)), shape=(n_users, n_items))
        r.sum_duplicates()
        sums = np.asarray(r.sum(axis=1)).ravel()
        r = sp.csr_matrix(sp.diags(np.divide(1.0, sums, out=np.zeros_like(sums),
                                             where=sums > 0)) @ r)
        self._recent = r
        tie = np.full(n_items, n_items + 1, np.int64)
        tie[m.chunk_items_[m.popular_order_]] = np.arange(m.popular_order_.shape[0])
        self._tie = tie
        if self.embedded is not None:
            self._item_vectors()

    def _item_vectors(self):
        """Unit vectors of the latest chunk's items: the embedding's for training items,
        else the mean of the vectors of their engagers in the latest chunk."""
        m, emb = self.model, self.embedded
        items = m.item_ids_.ids[m.chunk_items_]
        vec = np.zeros((items.shape[0], self._ivec.shape[1]), np.float32)
        pos = emb.item_ids.lookup(items)
        known = pos >= 0
        vec[known] = self._ivec[pos[known]]
        lu, li = self._last
        upos = emb.user_ids.lookup(lu)
        local = np.searchsorted(items, li)
        local = np.minimum(local, items.shape[0] - 1)
        ok = (upos >= 0) & (items[local] == li) & ~known[local]
        if ok.any():
            sums = np.zeros_like(vec)
            np.add.at(sums, local[ok], self._uvec[upos[ok]])
            norm = np.linalg.norm(sums, axis=1)
            fill = ~known & (norm > 0)
            vec[fill] = sums[fill] / norm[fill, None]
        self._chunk_vec = vec
        # the model's users -> rows of the embedding's user vectors
        self._user_row = emb.user_ids.lookup(m.user_ids_.ids)

    # ------------------------------------------------------------------ scoring

    def support_size(self, users) -> np.ndarray:
        """Number of interests in each user's support (0 for unknown users)."""
        return support_size(self.model, users)

    def recommend(self, users, m_top: int, setting: MixtureSetting, block: int = 1024):
        m = self.model
        idx = m.user_ids_.lookup(np.asarray(users))
        out = np.full((idx.shape[0], m_top), -1, np.int64)
        for lo in range(0, idx.shape[0], block):
            out[lo:lo + block] = self._recommend_block(idx[lo:lo + block], m_top, setting)
        ids = m.item_ids_.ids
        ext = np.full(out.shape, -1, np.int64)
        ext[out >= 0] = ids[out[out >= 0]]
        return ext

    def _recommend_block(self, idx, m_top, s: MixtureSetting):
        m = self.model
        n = idx.shape[0]
        K = m.n_interests_
        n_t = m.chunk_items_.shape[0]
        n_items = len(m.item_ids_)
        beta = float(m.beta)
        count = m.chunk_item_count_
        share = count / count.sum()
        beta_i = beta * n_t * share if s.beta_shape == "popularity" else np.full(n_t, beta)
        denom = beta * n_t + m.interest_count_
        k_row = np.repeat(np.arange(K), np.diff(m.phi_indptr_))
        phi = sp.csr_matrix((m.phi_count_ / denom[k_row], m.phi_item_, m.phi_indptr_),
                            shape=(K, n_t))
        # theta of the block's users
        rows = np.where(idx >= 0, idx, 0)
        lo, hi = m.support_indptr_[rows], m.support_indptr_[rows + 1]
        hi = np.where(idx >= 0, hi, lo)
        t_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(hi - lo, out=t_ptr[1:])
        pos = np.repeat(lo - t_ptr[:-1], hi - lo) + np.arange(t_ptr[-1])
        w = m.alpha + m.support_count_[pos]
        r_of = np.repeat(np.arange(n), hi - lo)
        w = w / np.bincount(r_of, weights=w, minlength=n)[r_of]
        theta = sp.csr_matrix((w, m.support_interest_[pos], t_ptr), shape=(n, K))
        base = theta @ (1.0 / denom)                      # sum_k theta_k / D_k
        S = (theta @ phi).tocsr()                        # count part, chunk-local columns
        S.sort_indices()
        if s.affinity and self.embedded is not None:
            S = self._affinity(S, idx, s.affinity)
        # union of candidates: the count part, the top popular items, the user's own items
        n_pop = min(m_top, n_t)
        top = m.popular_order_[:n_pop]
        lam = self.learned_personal if s.personal == "learned" else float(s.personal)
        s_rows = np.repeat(np.arange(n), np.diff(S.indptr))
        interest_part = sp.coo_matrix(
            (np.concatenate([S.data, np.zeros(n * n_pop)]),
             (np.concatenate([s_rows, np.repeat(np.arange(n), n_pop)]),
              np.concatenate([S.indices, np.tile(top, n)]))), shape=(n, n_t)).tocsr()
        interest_part.sum_duplicates()
        ir = np.repeat(np.arange(n), np.diff(interest_part.indptr))
        interest_part.data = interest_part.data + base[ir] * beta_i[interest_part.indices]
        # to the model's item space
        g = sp.csr_matrix((interest_part.data, m.chunk_items_[interest_part.indices],
                           interest_part.indptr), shape=(n, n_items))
        if lam > 0:
            R = self._recent[rows]
            R = sp.csr_matrix(sp.diags((idx >= 0).astype(float)) @ R)
            has = np.diff(R.indptr) > 0
            lam_u = np.where(has, lam, 0.0)
            g = sp.csr_matrix(sp.diags(1.0 - lam_u) @ g) + sp.csr_matrix(sp.diags(lam_u) @ R)
            g = g.tocsr()
        g.sum_duplicates()
        items = np.full((n, m_top), -1, np.int64)
        scores = np.full((n, m_top), -np.inf)
        n_filled = np.zeros(n, np.int64)
        empty = np.zeros(n + 1, np.int64), np.empty(0, np.int64)
        top_m_sparse(g.indptr.astype(np.int64), g.indices.astype(np.int64),
                     g.data.astype(np.float64), self._tie, empty[0], empty[1], items, scores,
                     n_filled)
        pop_items = m.chunk_items_[m.popular_order_]
        fill_remainder(items, scores, n_filled, pop_items, np.zeros(pop_items.shape[0]),
                       np.full(n, -1.0), empty[0], empty[1])
        return items

    def _affinity(self, S, idx, gamma):
        rows = np.where(idx >= 0, self._user_row[np.maximum(idx, 0)], -1)
        n = S.shape[0]
        r = np.repeat(np.arange(n), np.diff(S.indptr))
        cos = np.zeros(S.data.shape[0], np.float32)
        users = np.flatnonzero(rows >= 0)
        for lo in range(0, users.shape[0], 256):
            sub = users[lo:lo + 256]
            dense = self._uvec[rows[sub]] @ self._chunk_vec.T
            for j, u in enumerate(sub):
                a, b = S.indptr[u], S.indptr[u + 1]
                cos[a:b] = dense[j, S.indices[a:b]]
        new = S.data * np.exp(gamma * cos.astype(np.float64))
        before = np.bincount(r, weights=S.data, minlength=n)
        after = np.bincount(r, weights=new, minlength=n)
        scale = np.divide(before, after, out=np.ones(n), where=after > 0)
        out = S.copy()
        out.data = new * scale[r]
        return out


def select_phi_decay(train, grid=(0.0, 0.25, 0.5, 0.75, 0.9), *, last_chunks: int = 8,
                     m: int = 100, min_mass: float = 0.01) -> tuple[float, dict]:
    """The ``phi_decay`` whose decayed popularity best predicts the next chunk's items.

    For each of the last ``last_chunks`` training chunks ``c``, items are ranked by
    ``sum_j decay ** (c - 1 - j) * n_j(i)`` over the chunks ``j < c`` (counts below
    ``min_mass`` dropped, as MiCRO drops carried mass); the score of a decay is the mean
    recall@m of that ranking over the (user, chunk) points of those chunks. It measures
    how long items stay engaged on the log, from training data only, in a fraction of a
    MiCRO fit. Returns the best decay and the score of each.
    """
    log = check_log(train)
    item = np.unique(log.item, return_inverse=True)[1].ravel().astype(np.int64)
    user = np.unique(log.user, return_inverse=True)[1].ravel().astype(np.int64)
    chunk = log.chunk.astype(np.int64)
    n_items = int(item.max()) + 1
    last = int(chunk.max())
    chunks = [c for c in range(last - last_chunks + 1, last + 1) if (chunk == c - 1).any()]
    scores = {}
    for decay in grid:
        back = 0 if decay <= 0 else int(np.floor(np.log(min_mass) / np.log(decay)))
        recalls = []
        for c in chunks:
            before = (chunk < c) & (chunk >= c - 1 - back)
            weight = float(decay) ** (c - 1 - chunk[before]).astype(np.float64)
            count = np.bincount(item[before], weights=weight, minlength=n_items)
            top = np.argsort(-count, kind="stable")[:m]
            top = top[count[top] > 0]
            now = chunk == c
            pair = np.unique(user[now] * n_items + item[now])
            hit = np.isin(pair % n_items, top)
            u = np.unique(pair // n_items, return_inverse=True)[1].ravel()
            recalls.append(np.bincount(u, weights=hit) / np.bincount(u))
        scores[float(decay)] = float(np.concatenate(recalls).mean())
    best = max(scores, key=scores.get)
    return best, scores


def select_affinity(train, n_interests, grid=(0.0, 1.0, 2.0, 4.0), *, phi_decay=0.0,
                    min_points: int = 1000, max_chunks: int = 24, random_state=0,
                    m: int = 100) -> tuple[float, dict]:
    """The ``affinity`` gamma with the best MRR@m on the last training chunks, held out.

    The validation chunks are the fewest last training chunks with at least
    ``min_points`` (user, chunk) points (at most ``max_chunks``). The embedding, the
    interests and MiCRO are fitted on the chunks before them only, then the rolling
    protocol runs over them with the personal component (learned) and ``phi_decay``. The
    chosen gamma has the best MRR@m among those whose recall@m is at least that of
    gamma = 0 (a re-ranking of the top of the list that costs no recall); 0 if none beats
    gamma = 0. Returns the chosen gamma and the (recall@m, MRR@m) of each.
    """
    from sklearn_micro import GraphEmbedder, SphericalKMeans

    log = check_log(train)
    chunks = np.unique(log.chunk)[::-1]
    n_points, n_val = 0, 0
    for c in chunks[:max_chunks]:
        n_points += np.unique(log.user[log.chunk == c]).shape[0]
        n_val += 1
        if n_points >= min_points:
            break
    first_val = chunks[n_val - 1]
    fit, val = log.take(log.chunk < first_val), log.take(log.chunk >= first_val)
    embedded = GraphEmbedder(64, random_state=random_state, n_jobs=-1).fit_transform(fit)
    clustered = SphericalKMeans(n_interests, random_state=random_state).fit_transform(embedded)
    model = MiCRO(random_state=random_state, n_jobs=-1, phi_decay=phi_decay).fit(clustered)
    run = MiCRORun(model, fit, embedded,
                   learned_personal=training_repeat_rate(fit, window=8))
    hits = {g: [[], []] for g in grid}
    for c in np.unique(val.chunk):
        part = val.take(val.chunk == c)
        users = np.unique(part.user)
        for g in grid:
            items = run.recommend(users, m, MixtureSetting(personal="learned", affinity=g))
            for row, u in enumerate(users):
                rel = np.unique(part.item[part.user == u])
                found = np.isin(items[row], rel)
                hits[g][0].append(found.sum() / rel.shape[0])
                hits[g][1].append(1.0 / (np.argmax(found) + 1) if found.any() else 0.0)
        run.partial_fit(part)
    scores = {float(g): (float(np.mean(r)), float(np.mean(q))) for g, (r, q) in hits.items()}
    allowed = [g for g in scores if scores[g][0] >= scores[0.0][0]]
    best = max(allowed, key=lambda g: (scores[g][1], -g))
    return best, scores
