"""MiCRO's chunk steps: a chunk sampled, its counts committed and published as the
latest chunk, and the users' recent items grown."""

from __future__ import annotations

import time

import numpy as np
from sklearn.base import clone

from .._kernels.neighbours import Neighbours
from .._log import (
    EngagementLog,
)
from .._parallel import resolve_n_jobs
from ._gibbs import build_layout, run_chain
from ._held_out import (
    COENGAGEMENT_GRID,
    LIVE_WEIGHT_FALLBACK,
    LIVE_WEIGHT_GRID,
    PERSONAL_GRID,
    POPULARITY_GRID,
    TrainingLog,
    live_weight_points,
    paired_choice,
    select_blend_weights,
    select_phi_decay,
)
from ._retrieval import _numba_threads
from ._state import (
    ChunkEngagements,
    ChunkSupports,
    LatestChunk,
    coengaged_neighbours,
    grown_supports,
    latest_chunk,
    main_interests,
    merge_recent,
    recent_items,
)

__all__ = ["MiCROSampling"]


class MiCROSampling:
    """`MiCRO`'s private chunk steps (mixed into `MiCRO`): `fit` and `partial_fit` call them
    on the copy of the state they publish."""

    def _choose_settings(self, log: TrainingLog) -> None:
        """`fit`'s settings chosen from the training log: ``phi_decay_`` for "auto", and
        ``personal_weight_`` and ``popularity_weight_`` for "learned" (held-out ranking)."""
        if self.phi_decay == "auto":
            start = time.perf_counter()
            self.phi_decay_ = select_phi_decay(log.user, log.item, log.chunk, log.n_items)
            self._print_fit_step(f"phi_decay {self.phi_decay_} chosen", start)
        else:
            self.phi_decay_ = float(self.phi_decay)
        learned = (self.personal == "learned", self.popularity == "learned",
                   self.coengagement == "learned")
        if any(learned):
            start = time.perf_counter()
            self.personal_weight_, self.popularity_weight_, self.coengagement_ = (
                select_blend_weights(
                    log, PERSONAL_GRID if learned[0] else (float(self.personal),),
                    POPULARITY_GRID if learned[1] else (float(self.popularity),),
                    COENGAGEMENT_GRID if learned[2] else (float(self.coengagement),),
                    alpha=float(self.alpha), beta=float(self.beta),
                    phi_decay=self.phi_decay_, window=self.personal_window,
                    decay=self.personal_decay, min_count=float(self.phi_min_count),
                    metric=self.learned_by, n_jobs=self.n_jobs)[0])
            self._print_fit_step(f"personal weight {self.personal_weight_}, popularity "
                                 f"weight {self.popularity_weight_}, co-engagement "
                                 f"{self.coengagement_} chosen", start)
        else:
            self.personal_weight_ = float(self.personal)
            self.popularity_weight_ = float(self.popularity)
            self.coengagement_ = float(self.coengagement)
        if self.live_weight == "auto":
            start = time.perf_counter()
            self.live_weight_ = self._held_out_live_weight(log)
            self._print_fit_step(f"live weight {self.live_weight_} chosen", start)
        else:
            self.live_weight_ = float(self.live_weight)

    def _held_out_live_weight(self, log: TrainingLog) -> float:
        """``live_weight="auto"``: the weight of `LIVE_WEIGHT_GRID` that the held-out
        replay backs (`paired_choice`): the last training chunk observed batch by batch
        into a model fitted, with this one's settings, on the chunks before it, each
        batch's users scored by ``learned_by``@100 before it is observed
        (`live_weight_points`). A log of one chunk has nothing to hold out:
        `LIVE_WEIGHT_FALLBACK`."""
        chunks = np.unique(log.chunk)
        if chunks.shape[0] < 2:
            return LIVE_WEIGHT_FALLBACK
        last = log.chunk == chunks[-1]
        before = ~last
        items = np.unique(log.item[before])
        interest = np.full(log.n_items, -1, np.int64)
        interest[log.item] = log.z
        held_out = clone(self).set_params(
            personal=self.personal_weight_, popularity=self.popularity_weight_,
            coengagement=self.coengagement_, phi_decay=self.phi_decay_, live_weight=0.0,
            random_state=0, verbose=0)
        held_out.fit(np.column_stack([log.user[before], log.item[before],
                                      log.chunk[before]]),
                     item_interest=(items, interest[items]))
        users, values = live_weight_points(held_out, log.user[last], log.item[last],
                                           int(chunks[-1]), LIVE_WEIGHT_GRID,
                                           metric=self.learned_by)
        return paired_choice(users, values, LIVE_WEIGHT_GRID)

    def _print_fit_step(self, what, start):
        """With ``verbose``, one line: what `fit` has done and the seconds since ``start``."""
        if self.verbose:
            print(f"[MiCRO] fit: {what} in {time.perf_counter() - start:.1f} s", flush=True)

    def _set_chunk(self, chunk, items, phi_items, phi_k, phi_w, *, carry=False):
        """Make ``chunk`` the latest: popularity from its engagements' ``items``, ``phi``
        from the counts ``phi_w`` of (``phi_items``, ``phi_k``) pairs, plus, with ``carry``
        and ``phi_decay_ > 0``, the decayed counts of the previous chunk."""
        alone = latest_chunk(chunk, items, phi_items, phi_k, phi_w, self.n_interests_, 0.0)
        if carry and self.phi_decay_ > 0:
            latest_chunk(chunk, items, phi_items, phi_k, phi_w, self.n_interests_,
                         self.phi_decay_, LatestChunk.of(self)).set_on(self)
            # what the paper's model (phi_decay=0) ranks from, for `paper_model`
            self.chunk_alone_ = alone.as_dict()
        else:
            alone.set_on(self)
            self.chunk_alone_ = None

    def _sample_chunk(self, chunk: int, log: EngagementLog) -> None:
        """Sample one chunk and move the model's state to it: lay the chunk out, run the
        chain, commit the counts. Attributes are replaced, never modified in place, so a
        snapshot of ``__dict__`` restores the previous state."""
        engagements = ChunkEngagements.of(log, self.user_ids_, self.item_ids_)
        supports = ChunkSupports.from_model(engagements, self.support_indptr_,
                                            self.support_interest_, self.support_count_)
        item_interest = np.concatenate([
            self.item_interest_,
            np.full(len(engagements.item_ids) - len(self.item_ids_), -1, np.int32)])
        z = np.full(engagements.n_engagements, -1, np.int32)
        rng = self.random_state_
        chunk_seed = int(rng.randint(np.iinfo(np.int32).max))
        n_jobs = resolve_n_jobs(self.n_jobs)
        trace: list[float] = []
        # Pass 1 gives users without a support the interests of their items; pass 2 does the
        # same, with the interests pass 1 gave new items, for users still without one.
        for pass_ in range(2):
            supports, added = supports.adopt_item_interests(engagements, item_interest)
            if pass_ > 0 and not added:
                break
            size = np.diff(supports.ptr)[engagements.local_user]
            assignable = size > 0
            start = assignable & (z < 0)
            z[start] = (rng.random_sample(int(start.sum())) * size[start]).astype(np.int32)
            with _numba_threads(self.n_jobs):
                layout, counts = build_layout(
                    engagements.local_user[assignable], engagements.local_item[assignable],
                    supports.ptr, supports.interest, self.alpha + supports.carried,
                    z[assignable], n_interests=self.n_interests_, n_items=engagements.n_items)
            z_assignable = z[assignable]
            if not assignable.any():
                break
            with _numba_threads(self.n_jobs):
                trace += run_chain(layout, counts, z_assignable, beta=float(self.beta),
                                   max_sweeps=self.max_sweeps, tol=self.tol,
                                   chunk_seed=chunk_seed, pass_=pass_, n_jobs=n_jobs,
                                   min_partition_work=self.min_partition_work)
            z[assignable] = z_assignable
            item_interest = main_interests(item_interest, engagements.items, layout,
                                           counts.entry_count)
        if self.verbose:
            print(f"[MiCRO] chunk {chunk}: {int(assignable.sum())} engagements, {len(trace)} "
                  "sweeps" + (f", log-likelihood {trace[-1]:.6g}" if trace else ""))
        self._commit_chunk(chunk, engagements, supports, layout, counts, item_interest)
        self.n_sweeps_ = {**self.n_sweeps_, chunk: len(trace)}
        self.log_likelihood_ = {**self.log_likelihood_, chunk: np.array(trace)}
        self.n_unassigned_ = {**self.n_unassigned_, chunk: int((~assignable).sum())}

    def _commit_chunk(self, chunk, engagements, supports, layout, counts, item_interest):
        """Move the model to ``chunk``: users' counts, the supports of users that had none,
        item interests, seen items, users' recent items and ``phi``."""
        carried = supports.model_position >= 0
        # users without a support take the interests their engagements were given
        new = ~carried & (counts.user_count > 0)
        local = np.repeat(np.arange(engagements.users.shape[0]), np.diff(supports.ptr))[new]
        self.support_indptr_, self.support_interest_, self.support_count_ = grown_supports(
            self.support_indptr_, self.support_interest_, self.support_count_,
            len(engagements.user_ids), supports.model_position[carried],
            counts.user_count[carried], engagements.users[local], supports.interest[new],
            counts.user_count[new])
        self.user_ids_ = engagements.user_ids
        self.item_ids_ = engagements.item_ids
        self.item_interest_ = item_interest
        self.seen_items_ = self.seen_items_.add(engagements.user, engagements.item)
        self._add_recent(chunk, engagements.user, engagements.item, len(engagements.user_ids))
        hit = counts.entry_count > 0
        self._set_chunk(chunk, engagements.item, engagements.items[layout.entry_item[hit]],
                        layout.entry_interest[hit], counts.entry_count[hit].astype(np.float64),
                        carry=True)

    def _set_coengaged(self):
        """The items' co-engaged items (``coengaged_*``) from the users' recent items
        (`coengaged_neighbours`), or none without the co-engagement term."""
        if self.coengagement_ > 0 and self.personal_weight_ > 0:
            found = coengaged_neighbours(self.recent_indptr_, self.recent_item_,
                                         self.recent_weight_, len(self.item_ids_),
                                         resolve_n_jobs(self.n_jobs))
        else:
            found = Neighbours(np.zeros(1, np.int64), np.empty(0, np.int64), np.empty(0))
        self.coengaged_indptr_, self.coengaged_item_, self.coengaged_score_ = found

    def _add_recent(self, chunk, user, item, n_users):
        """Move the users' recent items to ``chunk``: weights times ``personal_decay`` per
        chunk of age, entries older than ``personal_window`` chunks dropped, the chunk's
        engagements (``user``, ``item``: model indices) added with weight 1; then the
        co-engaged items from them (`_set_coengaged`)."""
        if self.personal_weight_ <= 0:
            self.recent_indptr_ = np.zeros(n_users + 1, np.int64)
            self._set_coengaged()
            return
        keep = self.recent_chunk_ > chunk - self.personal_window
        old_user = np.repeat(np.arange(self.recent_indptr_.shape[0] - 1),
                             np.diff(self.recent_indptr_))[keep]
        age = chunk - self.latest_chunk_
        new = recent_items(user, item, np.full(user.shape[0], chunk),
                           np.ones(user.shape[0], np.float32), n_users)
        self.recent_indptr_, self.recent_item_, self.recent_chunk_, self.recent_weight_ = (
            merge_recent(old_user, self.recent_item_[keep], self.recent_chunk_[keep],
                         self.recent_weight_[keep] * np.float32(self.personal_decay ** age),
                         new))
        self._set_coengaged()
