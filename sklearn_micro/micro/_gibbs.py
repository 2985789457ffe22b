"""The collapsed Gibbs sampler of one time chunk, as functions over arrays.

`MiCRO.partial_fit` reads as three steps, each a function here:

1. `build_layout`: the chunk's engagements, their users' supports and the (item, interest)
   entries they may touch, in one `ChunkLayout`, with the counts `ChainCounts` of the
   current assignments;
2. `run_chain`: Gibbs sweeps until the chain has converged. The chunk's users are split
   into partitions (`partition_cuts`); each sweep samples every partition against its
   own copy of the (item, interest) counts and merges the partitions' moves after the
   sweep (AD-LDA, Newman et al. 2009): on threads in one parallel kernel over whole
   copies kept for the chunk's sweeps (`sampler.sweep_copies`), or, above
   `WHOLE_COPY_ENTRIES` and inside joblib's Dask backend on a cluster's workers
   (`sklearn_micro._dask`), with the counts each partition touches (`sample_partition`);
3. committing the counts into the model, which `MiCRO` does.

The random stream of a partition's sweep is seeded by (chunk seed, pass, sweep, partition),
so a chain is deterministic for a given ``random_state`` and number of partitions, and the
same on threads and on a cluster.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numba
import numpy as np

from .._dask import on_cluster
from .._kernels import numba_threads, sampler
from .._parallel import active_client

__all__ = ["ChainCounts", "ChunkLayout", "Partition", "build_layout", "chain_threads",
           "n_partitions", "partition_cuts", "partition_layout", "partitions_for",
           "partitions_of", "run_chain", "sample_partition"]

# the chain has converged when the mean log-likelihood of the last WINDOW sweeps improves on
# the WINDOW sweeps before by less than tol, relative to its magnitude
WINDOW = 3


@dataclass(frozen=True, eq=False)
class ChunkLayout:
    """A chunk's engagements laid out for the sampler, engagements sorted by user.

    Attributes
    ----------
    engagement_user : ndarray of int32, shape (n_engagements,)
        Each engagement's user, as a row of the supports.
    engagement_item : ndarray of int32, shape (n_engagements,)
        Each engagement's item, as a position among the chunk's ``I_t`` items.
    support_ptr : ndarray of int64, shape (n_users + 1,)
        The users' supports as a CSR: user ``u``'s interests are
        ``support_interest[support_ptr[u]:support_ptr[u + 1]]``.
    support_interest : ndarray of int32
    support_prior : ndarray of float64
        ``alpha + N[u, k]`` carried from training and earlier chunks, per support entry.
    entry_ptr, entry_of : ndarray
        ``entry_of[entry_ptr[e] + j]`` is the (item, interest) entry of engagement ``e``'s
        item and the j-th interest of its user's support.
    entry_item, entry_interest : ndarray of int32, shape (n_entries,)
        The item and the interest of each entry; entries are grouped by item.
    n_interests : int
        K.
    n_items : int
        ``I_t``, the distinct items of the chunk (including any whose engagements cannot be
        assigned).
    """

    engagement_user: np.ndarray
    engagement_item: np.ndarray
    support_ptr: np.ndarray
    support_interest: np.ndarray
    support_prior: np.ndarray
    entry_ptr: np.ndarray
    entry_of: np.ndarray
    entry_item: np.ndarray
    entry_interest: np.ndarray
    n_interests: int
    n_items: int

    @property
    def n_engagements(self) -> int:
        return self.engagement_user.shape[0]

    @property
    def n_entries(self) -> int:
        return self.entry_item.shape[0]

    def sweep_layout(self) -> sampler.SweepLayout:
        """The arrays the sweep kernels read."""
        return sampler.SweepLayout(self.engagement_user, self.entry_ptr, self.entry_of,
                                   self.support_ptr, self.support_interest,
                                   self.support_prior)


@dataclass(eq=False)
class ChainCounts:
    """The counts of a chain's assignments: ``N[u, k]`` of the chunk aligned with the
    supports, ``N[i, k, t]`` aligned with the entries and ``N[k, t]``, all int32."""

    user_count: np.ndarray
    entry_count: np.ndarray
    interest_count: np.ndarray

    def sweep_counts(self, z: np.ndarray) -> sampler.SweepCounts:
        """The counts and the assignments ``z`` as the sweep kernels take them."""
        return sampler.SweepCounts(self.user_count, self.entry_count, self.interest_count, z)


@dataclass(frozen=True, eq=False)
class Partition:
    """A contiguous range of a layout's users and what their sampling touches.

    The arrays are rebased to the partition: ``engagement_user`` counts from its first user,
    ``entry_ptr`` from its first engagement, ``support_ptr`` from its first support entry,
    and ``entry_of`` indexes ``entries``, the layout's entries that the partition touches.
    Partitions sampled against whole copies of the chunk's counts (`sampler.sweep_copies`)
    need none of this: their engagements' bounds (`partition_cuts`) serve.
    """

    engagements: slice
    supports: slice
    engagement_user: np.ndarray
    entry_ptr: np.ndarray
    entry_of: np.ndarray
    support_ptr: np.ndarray
    entries: np.ndarray


def build_layout(engagement_user, engagement_item, support_ptr, support_interest,
                 support_prior, z, *, n_interests: int, n_items: int):
    """The `ChunkLayout` of engagements sorted by user, and the counts of ``z``.

    Parameters
    ----------
    engagement_user, engagement_item : ndarray
        Each engagement's user (row of the supports; sorted) and item (``0..n_items-1``).
    support_ptr, support_interest, support_prior : ndarray
        The users' supports (CSR), every user with at least one interest.
    z : ndarray of int32
        Each engagement's interest, as a position in its user's support.
    n_interests, n_items : int

    Returns
    -------
    layout : ChunkLayout
    counts : ChainCounts
    """
    engagement_user = np.asarray(engagement_user, np.int32)
    engagement_item = np.asarray(engagement_item, np.int32)
    support_ptr = np.asarray(support_ptr, np.int64)
    support_interest = np.asarray(support_interest, np.int32)
    size = support_ptr[engagement_user + 1] - support_ptr[engagement_user]
    entry_ptr = np.zeros(engagement_user.shape[0] + 1, np.int64)
    np.cumsum(size, out=entry_ptr[1:])
    entry_of, entry_item, entry_interest = sampler.entry_map(
        engagement_user, engagement_item, entry_ptr, support_ptr, support_interest,
        n_items, n_interests, numba.get_num_threads())
    layout = ChunkLayout(engagement_user, engagement_item, support_ptr, support_interest,
                         np.asarray(support_prior, np.float64), entry_ptr, entry_of,
                         entry_item, entry_interest, int(n_interests), int(n_items))
    return layout, ChainCounts(*sampler.count_assignments(
        engagement_user, entry_ptr, entry_of, support_ptr, support_interest, z,
        layout.n_entries, n_interests))


# the (item, interest) entries of the whole copies of a chunk's counts that its partitions
# on threads may hold, all together (4 bytes an entry; the first partition samples the
# chain's own counts): below it every other partition keeps a copy of every entry for the
# chain's sweeps (`sampler.sweep_copies`), which costs less than finding the entries each
# touches (`sampler.localize`) and gathering them at every sweep; above it, and on a
# cluster, only those
WHOLE_COPY_ENTRIES = 1 << 26


def partition_cuts(layout: ChunkLayout, n_partitions: int) -> list[tuple[int, ...]]:
    """Split the layout's users into up to ``n_partitions`` contiguous ranges of about equal
    sampling work (support entries visited per sweep), cut at users. Returns each range's
    ``(u_lo, u_hi, e_lo, e_hi, p_lo, p_hi)``: its users, engagements and positions in
    ``entry_of``."""
    n = layout.n_engagements
    n_users = layout.support_ptr.shape[0] - 1
    if n_partitions <= 1 or n == 0:
        return [(0, n_users, 0, n, 0, int(layout.entry_ptr[-1]))]
    # cut at users: the first engagement of the user where the cumulative work passes j/n
    work = layout.entry_ptr
    targets = work[-1] * np.arange(1, n_partitions) / n_partitions
    cuts = np.searchsorted(work[:-1], targets)
    user_cuts = np.unique(np.concatenate([
        [0], layout.engagement_user[np.minimum(cuts, n - 1)], [n_users]]))
    first_of_user = np.searchsorted(layout.engagement_user, user_cuts)
    ranges = []
    for j, (u_lo, u_hi) in enumerate(zip(user_cuts[:-1], user_cuts[1:], strict=True)):
        e_lo, e_hi = int(first_of_user[j]), int(first_of_user[j + 1])
        ranges.append((int(u_lo), int(u_hi), e_lo, e_hi, int(layout.entry_ptr[e_lo]),
                       int(layout.entry_ptr[e_hi])))
    return ranges


def partition_layout(layout: ChunkLayout, n_partitions: int) -> list[Partition]:
    """The partitions of `partition_cuts`, each with its arrays rebased to its own users
    and engagements and its engagements mapped into the entries it touches
    (``entries``)."""
    return partitions_of(layout, partition_cuts(layout, n_partitions))


def partitions_of(layout: ChunkLayout, ranges: list[tuple[int, ...]]) -> list[Partition]:
    """`partition_layout` of the ranges `partition_cuts` gave."""
    if len(ranges) == 1:
        n = layout.n_engagements
        return [Partition(slice(0, n), slice(0, int(layout.support_ptr[-1])),
                          layout.engagement_user, layout.entry_ptr, layout.entry_of,
                          layout.support_ptr, np.arange(layout.n_entries))]

    def part(u_lo, u_hi, e_lo, e_hi, p_lo, p_hi):
        # `localize` releases the GIL: the partitions' maps are made on threads at once
        entries, entry_of = sampler.localize(layout.entry_of[p_lo:p_hi], layout.n_entries)
        s_lo, s_hi = int(layout.support_ptr[u_lo]), int(layout.support_ptr[u_hi])
        return Partition(
            slice(e_lo, e_hi), slice(s_lo, s_hi),
            layout.engagement_user[e_lo:e_hi] - np.int32(u_lo),
            layout.entry_ptr[e_lo:e_hi + 1] - p_lo, entry_of,
            layout.support_ptr[u_lo:u_hi + 1] - s_lo, entries)

    with ThreadPoolExecutor(len(ranges), thread_name_prefix="micro-partition") as pool:
        return list(pool.map(lambda r: part(*r), ranges))


def sample_partition(seed, engagement_user, entry_ptr, entry_of, support_ptr,
                     support_interest, support_prior, user_count, z, entry_count,
                     interest_count, beta, i_beta, *, in_place=False):
    """One sweep of one partition against its own copy of the counts it touches.

    The arguments are the partition's arrays (see `Partition`) and the counts at the
    start of the sweep: its users' ``user_count`` and ``z``, ``entry_count`` of its
    ``entries`` and the whole ``interest_count``. None of them is modified, except with
    ``in_place``: then ``z`` and ``user_count``, which belong to the partition's users
    alone, and ``entry_count``, which must be the caller's own copy, are updated where
    they are (on threads: no copy of the chain's arrays). The changes of the (item,
    interest) counts are not returned: they are the moves of ``z``, which the caller
    merges (`_merge`).

    Returns
    -------
    z, user_count : ndarray
        The partition's new assignments and user counts.
    interest_delta : ndarray
        What the sweep added to ``interest_count``.
    changed : int
        How many assignments changed.
    """
    if not in_place:
        z = z.copy()
        user_count = user_count.copy()
        entry_count = entry_count.copy()
    interests = interest_count.copy()
    changed = sampler.sweep_partition(
        seed, sampler.SweepLayout(engagement_user, entry_ptr, entry_of, support_ptr,
                                  support_interest, support_prior),
        sampler.SweepCounts(user_count, entry_count, interests, z), beta, i_beta)
    return z, user_count, interests - interest_count, changed


def sweep_seed(chunk_seed: int, pass_: int, sweep: int, partition: int) -> int:
    """The seed of one partition's sweep: a function of its coordinates alone."""
    return int(np.random.SeedSequence([chunk_seed, pass_, sweep, partition])
               .generate_state(1)[0])


# the default of MiCRO's min_partition_work: a partition is given at least this many support
# entries to visit a sweep; below it the sweep's dispatch, copies and merge cost more than a
# second thread saves
MIN_PARTITION_WORK = 1 << 22


def n_partitions(layout: ChunkLayout, n_jobs: int,
                 min_work: int = MIN_PARTITION_WORK) -> int:
    """How many partitions a chunk is sampled in: ``n_jobs``, or fewer so that each visits
    at least ``min_work`` support entries a sweep (at least one; ``min_work=0``:
    ``n_jobs``)."""
    return partitions_for(int(layout.entry_ptr[-1]), n_jobs, min_work)


def partitions_for(work: int, n_jobs: int, min_work: int = MIN_PARTITION_WORK) -> int:
    """`n_partitions` of a chunk whose sweep visits ``work`` support entries."""
    return max(1, min(n_jobs, work // min_work)) if min_work else n_jobs


def chain_threads(support_indptr: np.ndarray, user_index: np.ndarray, n_jobs: int,
                  min_work: int = MIN_PARTITION_WORK) -> int:
    """About how many threads a chunk is sampled on: `partitions_for` the support entries a
    sweep visits, counted from the supports (``support_indptr``, a CSR over users) that the
    chunk's engagements' users carry (``user_index``: model indices; a user new to the
    model, -1 or beyond the CSR, whose support the chunk makes, counts none)."""
    size = np.diff(support_indptr)
    known = user_index[(user_index >= 0) & (user_index < size.shape[0])]
    return partitions_for(int(size[known].sum()), n_jobs, min_work)


def run_chain(layout: ChunkLayout, counts: ChainCounts, z: np.ndarray, *, beta: float,
              max_sweeps: int, tol: float, chunk_seed: int, pass_: int = 0,
              n_jobs: int = 1, min_partition_work: int = MIN_PARTITION_WORK) -> list[float]:
    """Gibbs sweeps until converged or ``max_sweeps``; ``counts`` and ``z`` are updated in
    place. Returns the log-likelihood after each sweep.

    The chunk is split into `n_partitions` partitions (of ``n_jobs`` and
    ``min_partition_work``). With one partition the sweep runs in place; with more, each
    partition samples against its own copy of the counts and the assignments that moved
    are merged after the sweep: on numba's threads in one parallel kernel where the
    partitions' whole copies fit `WHOLE_COPY_ENTRIES` (`sampler.sweep_copies`), else on a
    pool's threads with the counts each partition touches, or inside joblib's Dask
    backend on the workers of a cluster (`sklearn_micro._dask`). All draw the same chain.
    """
    i_beta = layout.n_items * beta
    n = n_partitions(layout, n_jobs, min_partition_work)
    client = active_client() if n > 1 else None
    whole = client is None and (n - 1) * layout.n_entries <= WHOLE_COPY_ENTRIES
    cuts = partition_cuts(layout, n)
    trace: list[float] = []
    # the log-likelihood's parallel sum takes as many threads as there are partitions: a
    # chunk sampled as one chain gives the n_jobs=1 chain to the last bit
    with numba_threads(min(numba.get_num_threads(), len(cuts))), \
            _sweeps(layout, cuts, whole, counts, z, client, beta, i_beta) as sweep:
        for s in range(max_sweeps):
            sweep([sweep_seed(chunk_seed, pass_, s, p) for p in range(len(cuts))])
            trace.append(sampler.chunk_log_likelihood(
                layout.support_prior, counts.user_count, counts.entry_count,
                counts.interest_count, beta, i_beta))
            if _converged(trace, tol):
                break
    return trace


@contextmanager
def _sweeps(layout: ChunkLayout, cuts: list[tuple[int, ...]], whole: bool,
            counts: ChainCounts, z: np.ndarray, client, beta: float, i_beta: float):
    """Yields ``sweep(seeds)``, one sweep of the chain in the partitions of ``cuts``
    (`partition_cuts`), a seed each, which updates ``counts`` and ``z`` in place (see
    `run_chain`): one partition samples the layout in place, several against ``whole``
    copies of the counts or the partitions' own (`partitions_of`)."""
    if len(cuts) == 1:
        yield lambda seeds: sampler.sweep_partition(
            seeds[0], layout.sweep_layout(), counts.sweep_counts(z), beta, i_beta)
        return
    if whole:
        bounds = np.array([0] + [cut[3] for cut in cuts], np.int64)
        # the first partition samples the chain's own counts, the others whole copies of
        # them, which stay equal to the chain's after each sweep's merge
        copies = np.empty((len(cuts) - 1, layout.n_entries), np.int32)
        copies[:] = counts.entry_count
        before = np.empty_like(z)
        yield lambda seeds: sampler.sweep_copies(
            np.array(seeds, np.int64), bounds, layout.sweep_layout(), counts.sweep_counts(z),
            copies, before, beta, i_beta)
        return
    partitions = partitions_of(layout, cuts)
    with _partition_sweeps(layout, partitions, client) as sweep_partitions:
        def sweep(seeds):
            before = z.copy()
            _merge(layout, partitions, counts, z, before,
                   sweep_partitions(seeds, counts, z, beta, i_beta))
        yield sweep


@contextmanager
def _partition_sweeps(layout: ChunkLayout, partitions: list[Partition], client=None):
    """Where the partitions are sampled: on the Dask cluster of ``client`` (joblib's Dask
    backend, `sklearn_micro._dask`), else on the threads of a pool kept for the chunk's
    sweeps. Yields ``sweep(seeds, counts, z, beta, i_beta)``, which returns
    `sample_partition`'s result for each partition, in order."""
    if client is not None:
        with on_cluster(client, layout, partitions, sample_partition) as sweep:
            yield sweep
        return
    # a pool of its own for the chunk: a sweep is a few milliseconds, and joblib's dispatch
    # of each sweep's tasks cost about as much
    with ThreadPoolExecutor(len(partitions), thread_name_prefix="micro-sweep") as pool:
        def sweep(seeds, counts, z, beta, i_beta):
            # each thread takes its partition's copy of the counts itself: nothing writes
            # them until every sweep is done and merged
            def one(seed, part):
                entry_count = sampler.gather(counts.entry_count, part.entries)
                return sample_partition(
                    seed, part.engagement_user, part.entry_ptr, part.entry_of,
                    part.support_ptr, layout.support_interest[part.supports],
                    layout.support_prior[part.supports], counts.user_count[part.supports],
                    z[part.engagements], entry_count, counts.interest_count, beta, i_beta,
                    in_place=True)

            tasks = [pool.submit(one, seed, part)
                     for seed, part in zip(seeds, partitions, strict=True)]
            return [task.result() for task in tasks]
        yield sweep


def _merge(layout: ChunkLayout, partitions, counts: ChainCounts, z: np.ndarray,
           before: np.ndarray, results) -> None:
    """Fold each partition's sweep into the chain: its users' assignments and counts (unless
    the sweep wrote them in place), the (item, interest) counts of the engagements whose
    assignment moved from ``before`` (``z`` at the sweep's start), and its change of the
    interest counts. A move changes two counts, so the merge reads the chunk's engagements,
    not the many more entries they touch."""
    for part, (z_p, user_p, interest_delta, _) in zip(partitions, results, strict=True):
        if not np.may_share_memory(z_p, z):
            z[part.engagements] = z_p
        if not np.may_share_memory(user_p, counts.user_count):
            counts.user_count[part.supports] = user_p
        counts.interest_count += interest_delta
    # the partitions cover the chunk's engagements: one pass moves them all
    sampler.add_moves(counts.entry_count, layout.entry_ptr, layout.entry_of, before, z)


def _converged(trace: list[float], tol: float) -> bool:
    """Whether the mean log-likelihood of the last WINDOW sweeps improves on the WINDOW
    before by less than ``tol`` relative to its magnitude (``tol=0``: never)."""
    if tol <= 0 or len(trace) < 2 * WINDOW:
        return False
    recent = np.mean(trace[-WINDOW:])
    before = np.mean(trace[-2 * WINDOW:-WINDOW])
    return bool(recent - before < tol * abs(recent))
