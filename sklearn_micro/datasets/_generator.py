"""A synthetic generator of engagement logs from the paper's generative model.

`make_engagements` and `iter_engagements` draw logs from MiCRO's generative model (the
paper's Table 2) with ephemeral items, at any scale up to the paper's.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from scipy import sparse
from scipy.special import ndtr
from sklearn.utils import Bunch, check_random_state
from sklearn.utils._param_validation import Interval, validate_params

from .._log import COLUMNS, EngagementLog

__all__ = ["iter_engagements", "make_engagements"]

_USER_DEGREE_SIGMA = 1.2  # spread of log user degrees


def _clipped_lognormal_mean(mu: float, sigma: float, lo: float, hi: float) -> float:
    a = (np.log(lo) - mu) / sigma
    b = (np.log(hi) - mu) / sigma
    inside = np.exp(mu + sigma**2 / 2) * (ndtr(b - sigma) - ndtr(a - sigma))
    return float(lo * ndtr(a) + inside + hi * (1 - ndtr(b)))


def _lognormal_location(mean: float, sigma: float, lo: float, hi: float) -> float:
    """``mu`` such that a lognormal clipped to [lo, hi] has the given mean."""
    left, right = np.log(lo) - 12 * sigma, np.log(hi) + 12 * sigma
    for _ in range(200):
        mid = (left + right) / 2
        if _clipped_lognormal_mean(mid, sigma, lo, hi) < mean:
            left = mid
        else:
            right = mid
    return (left + right) / 2


def _capped_shares(total: int, weights: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Split ``total`` units in proportion to ``weights``, at most ``caps[k]`` to ``k``."""
    given = np.zeros(weights.shape[0], np.int64)
    spare = caps.astype(np.int64).copy()
    while total > 0:
        open_ = (spare > 0) & (weights > 0)
        if not open_.any():
            break
        w = np.where(open_, weights, 0).astype(np.float64)
        share = total * w / w.sum()
        give = np.minimum(np.floor(share).astype(np.int64), spare)
        if give.sum() == 0:
            order = np.argsort(-(share - np.floor(share)) - open_, kind="stable")
            give[order[: min(total, int(open_.sum()))]] = 1
        given += give
        spare -= give
        total -= int(give.sum())
    return given


@dataclass
class _Users:
    """The planted user side: degrees and sparse interest distributions (CSR rows)."""

    degree: np.ndarray
    indptr: np.ndarray
    interest: np.ndarray
    theta: np.ndarray
    cum: np.ndarray  # cumulative theta within the row, for inverse-CDF draws
    max_size: int
    key: np.ndarray | None = None  # row + cum, sorted: one search draws for many users


def _draw_supports(rng, sizes: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """For each user, ``sizes[u]`` distinct interests drawn in proportion to ``weights``."""
    n_interests = weights.shape[0]
    rows = np.repeat(np.arange(sizes.shape[0]), sizes)
    cum = np.cumsum(weights) / weights.sum()

    def draw(n):
        return np.minimum(np.searchsorted(cum, rng.random(n), side="right"), n_interests - 1)

    interest = draw(rows.shape[0])
    indptr = np.concatenate([[0], np.cumsum(sizes)])
    check = np.arange(rows.shape[0])
    for attempt in range(101):
        order = check[np.lexsort((interest[check], rows[check]))]
        a, r = interest[order], rows[order]
        same = (a[1:] == a[:-1]) & (r[1:] == r[:-1])
        if not same.any():
            break
        redo = order[1:][same]
        if attempt < 100:
            interest[redo] = draw(redo.shape[0])
            again = np.unique(rows[redo])  # check only these rows' entries next time
            first = np.repeat(indptr[again], sizes[again])
            ends = np.cumsum(sizes[again])
            check = first + np.arange(ends[-1]) - np.repeat(ends - sizes[again], sizes[again])
        else:
            for u in np.unique(rows[redo]):
                interest[indptr[u] : indptr[u + 1]] = rng.choice(
                    n_interests, size=sizes[u], replace=False, p=weights / weights.sum()
                )
    return interest[np.lexsort((interest, rows))]


def _draw_users(rng, n_users, n_interests, interests_per_user, alpha, user_degree, mean_degree):
    lo, hi = user_degree
    if lo == hi:
        degree = np.full(n_users, lo, np.int64)
    else:
        mu = _lognormal_location(mean_degree, _USER_DEGREE_SIGMA, lo, hi)
        draws = np.floor(rng.lognormal(mu, _USER_DEGREE_SIGMA, n_users) + 0.5)
        degree = np.clip(draws, lo, hi).astype(np.int64)
    if isinstance(interests_per_user, tuple):
        a, b = interests_per_user
        sizes = rng.integers(a, min(b, n_interests) + 1, size=n_users)
    else:
        sizes = 1 + rng.poisson(interests_per_user - 1, size=n_users)
    sizes = np.minimum(np.minimum(sizes, n_interests), degree).astype(np.int64)
    weights = rng.gamma(1.0, size=n_interests)
    interest = _draw_supports(rng, sizes, weights)
    indptr = np.concatenate([[0], np.cumsum(sizes)])
    rows = np.repeat(np.arange(n_users), sizes)
    g = rng.gamma(alpha, size=rows.shape[0])
    total = np.add.reduceat(g, indptr[:-1])
    flat = total[rows] <= 0
    g[flat] = 1.0
    total = np.add.reduceat(g, indptr[:-1])
    theta = g / total[rows]
    start = np.cumsum(theta) - theta
    cum = np.cumsum(theta) - start[indptr[:-1]][rows]
    cum[indptr[1:] - 1] = 1.0
    return _Users(degree, indptr, interest, theta, cum, int(sizes.max()))


def _draw_interests(rng, users: _Users, who: np.ndarray) -> np.ndarray:
    """One interest per engagement of the users ``who``, from their theta."""
    lo = users.indptr[who]
    last = users.indptr[who + 1] - 1
    u = rng.random(who.shape[0])
    if users.max_size > 8:
        if users.key is None:
            users.key = np.repeat(np.arange(users.degree.shape[0]),
                                  np.diff(users.indptr)) + users.cum
        pos = np.clip(np.searchsorted(users.key, who + u, side="right"), lo, last)
        return users.interest[pos]
    pos = lo.copy()
    for j in range(users.max_size - 1):
        pos += (lo + j < last) & (users.cum[np.minimum(lo + j, last)] <= u)
    return users.interest[pos]


def _rehome(users: _Users, who, served, demand) -> np.ndarray:
    """For engagements whose interest has no live item: the user's likeliest served interest,
    else the most engaged served interest."""
    lo, hi = users.indptr[who], users.indptr[who + 1]
    sizes = hi - lo
    group = np.repeat(np.arange(who.shape[0]), sizes)
    entry = np.repeat(lo - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes) + np.arange(
        group.shape[0]
    )
    score = np.where(served[users.interest[entry]], users.theta[entry], -1.0)
    order = np.lexsort((-score, group))
    first = order[np.concatenate([[0], np.cumsum(sizes)[:-1]])]
    fallback = int(np.argmax(np.where(served, demand, -1)))
    return np.where(score[first] >= 0, users.interest[entry[first]], fallback)


_ITEM_COLUMNS = ("id", "interest", "birth", "life", "peak", "appeal")


class _Items:
    """The items alive at the current chunk: id, interest, birth, planted lifetime, peak age
    and appeal."""

    def __init__(self):
        empty = np.empty(0, np.int64)
        self.id, self.interest, self.birth, self.life, self.peak = (empty,) * 5
        self.appeal = np.empty(0, np.float64)

    def keep(self, rows):
        for name in _ITEM_COLUMNS:
            setattr(self, name, getattr(self, name)[rows])

    def add(self, **columns):
        for name, values in columns.items():
            setattr(self, name, np.concatenate([getattr(self, name), values]))


def _generate(
    n_users, n_items, n_chunks, n_interests, interests_per_user, item_lifetime, item_appeal,
    alpha, beta, user_degree, n_engagements, min_item_degree, random_state,
    trending_share=0.0, n_trending=100,
):
    """Draw the log chunk by chunk.

    Yields first the planted `_Users` (after checking the parameters), then for each chunk
    ``(chunk, user, item, new, lived_on)``: the chunk's engagements sorted by user, the
    columns of the items born in it, and the ids of items whose life was stretched to it.
    """
    if isinstance(interests_per_user, (tuple, list)):
        if (
            len(interests_per_user) != 2
            or not all(isinstance(v, Integral) for v in interests_per_user)
            or not 1 <= interests_per_user[0] <= interests_per_user[1]
        ):
            raise ValueError(
                f"interests_per_user must be a range (low, high) of integers with "
                f"1 <= low <= high, or a mean >= 1; got {interests_per_user!r}."
            )
        if interests_per_user[0] > n_interests:
            raise ValueError(
                f"interests_per_user low bound must be at most n_interests={n_interests}; "
                f"got {interests_per_user!r}."
            )
        interests_per_user = (int(interests_per_user[0]), int(interests_per_user[1]))
    if (
        len(user_degree) != 2
        or not all(isinstance(v, Integral) for v in user_degree)
        or not 1 <= user_degree[0] <= user_degree[1]
    ):
        raise ValueError(
            f"user_degree must be a range (low, high) of integers with 1 <= low <= high; got "
            f"{user_degree!r}."
        )
    lo, hi = int(user_degree[0]), int(user_degree[1])
    mean_degree = np.sqrt(lo * hi) if n_engagements is None else n_engagements / n_users
    if lo < hi and not lo < mean_degree < hi:
        raise ValueError(
            f"n_engagements / n_users must lie strictly within user_degree=({lo}, {hi}); got "
            f"n_engagements={n_engagements} for n_users={n_users}."
        )
    if isinstance(random_state, np.random.Generator):
        rng = random_state
    else:
        seed = check_random_state(random_state).randint(0, 2**31 - 1, size=4)
        rng = np.random.default_rng(seed)

    users = _draw_users(
        rng, n_users, n_interests, interests_per_user, alpha, (lo, hi), mean_degree
    )
    total = int(users.degree.sum())
    m = int(min_item_degree)
    if n_items * m > total:
        raise ValueError(
            f"n_items * min_item_degree = {n_items * m} engagements are needed, but the users "
            f"drawn make {total}; lower n_items or min_item_degree, or raise n_users or "
            f"n_engagements."
        )
    yield users

    remaining = users.degree.copy()
    alive = _Items()
    latest = _Items()  # the item born last in each interest; id -1 where none was
    latest.add(id=np.full(n_interests, -1), interest=np.arange(n_interests),
               birth=np.zeros(n_interests, np.int64), life=np.ones(n_interests, np.int64),
               peak=np.zeros(n_interests, np.int64), appeal=np.ones(n_interests))
    born = served = 0
    for t in range(n_chunks):
        last = t == n_chunks - 1
        counts = remaining if last else rng.binomial(remaining, 1.0 / (n_chunks - t))
        remaining = remaining - counts
        active = np.flatnonzero(counts)
        who = np.repeat(active, counts[active])
        z = _draw_interests(rng, users, who)
        demand = np.bincount(z, minlength=n_interests)

        alive.keep(np.flatnonzero(alive.birth + alive.life > t))
        n_alive = np.bincount(alive.interest, minlength=n_interests)
        caps = demand // m
        if last:
            target = n_items - born
        else:
            target = int(np.ceil(n_items * (served + who.shape[0]) / total)) - born
            target = min(max(target, 0), n_items - born)
        births = np.zeros(n_interests, np.int64)
        # interests with engagements but no live item get one first, the most engaged first
        unserved = np.flatnonzero((demand > 0) & (n_alive == 0) & (caps > 0))
        unserved = unserved[np.argsort(-demand[unserved], kind="stable")][: n_items - born]
        births[unserved] = 1
        births += _capped_shares(max(target - int(births.sum()), 0), demand, caps - births)
        n_born = int(births.sum())
        if last and born + n_born < n_items:
            raise ValueError(
                f"Only {born + n_born} of n_items={n_items} items could be given "
                f"min_item_degree={m} engagements in a chunk: the chunks have too few "
                f"engagements per interest. Lower n_items, min_item_degree, n_interests or "
                f"n_chunks, or raise n_users or n_engagements."
            )
        new_interest = np.repeat(np.arange(n_interests), births)
        new_life = rng.geometric(1.0 / item_lifetime, size=n_born).astype(np.int64)
        new = dict(
            id=born + np.arange(n_born, dtype=np.int64),
            interest=new_interest,
            birth=np.full(n_born, t, np.int64),
            life=new_life,
            peak=np.floor(rng.random(n_born) * new_life).astype(np.int64),
            appeal=(rng.lognormal(0.0, item_appeal, size=n_born) if item_appeal > 0
                    else np.ones(n_born)),
        )
        alive.add(**new)
        born += n_born
        ends = np.cumsum(births)[births > 0] - 1
        for name in ("id", "birth", "life", "peak", "appeal"):
            getattr(latest, name)[births > 0] = new[name][ends]

        served_interest = np.bincount(alive.interest, minlength=n_interests) > 0
        orphan = ~served_interest[z]
        revived = np.empty(0, np.int64)
        if orphan.any():
            if last:
                # no later chunk to move to: the interest's last item lives on to this chunk,
                # else the engagement goes to another interest
                lost = np.unique(z[orphan])
                lost = lost[latest.id[lost] >= 0]
                revived = latest.id[lost]
                alive.add(id=revived, interest=lost, birth=latest.birth[lost],
                          life=t - latest.birth[lost] + 1, peak=latest.peak[lost],
                          appeal=latest.appeal[lost])
                served_interest[lost] = True
                orphan = ~served_interest[z]
                if orphan.any():
                    z[orphan] = _rehome(users, who[orphan], served_interest, demand)
                    moved = int(np.count_nonzero(orphan))
                    if moved > 0.01 * total:
                        warnings.warn(
                            f"{moved} of {total} engagements went to an interest outside "
                            f"their user's support: their interests never had an item. Raise "
                            f"n_items or lower n_interests for a log closer to the model.",
                            UserWarning,
                            stacklevel=3,
                        )
            else:
                remaining += np.bincount(who[orphan], minlength=n_users)
                who, z = who[~orphan], z[~orphan]
            demand = np.bincount(z, minlength=n_interests)

        # phi[k, t] ~ Dir(beta * appeal * trend): each live item's weight is its own appeal,
        # rising to its peak age and decaying to the end of its life
        order = np.argsort(alive.interest, kind="stable")
        alive.keep(order)
        age = t - alive.birth
        trend = np.where(
            age <= alive.peak,
            (age + 1) / (alive.peak + 1),
            (alive.life - age) / np.maximum(alive.life - alive.peak, 1),
        )
        weight = rng.gamma(beta * alive.appeal * trend)
        mass = np.bincount(alive.interest, weights=weight, minlength=n_interests)
        flat = mass[alive.interest] <= 0
        weight[flat] = 1.0
        mass = np.bincount(alive.interest, weights=weight, minlength=n_interests)
        start = np.concatenate([[0], np.cumsum(np.bincount(alive.interest,
                                                           minlength=n_interests))])
        cum = np.cumsum(weight)
        cum = (cum - (cum - weight)[start[alive.interest]]) / mass[alive.interest]
        cum[start[1:][start[1:] > start[:-1]] - 1] = 1.0
        key = alive.interest + cum

        drawn_interest = np.repeat(np.arange(n_interests), demand - m * births)
        pos = np.searchsorted(key, drawn_interest + rng.random(drawn_interest.shape[0]),
                              side="right")
        pos = np.clip(pos, start[drawn_interest], start[drawn_interest + 1] - 1)
        drawn_item = alive.id[pos]
        if trending_share > 0 and drawn_item.shape[0]:
            # phi[k, t] gives `trending_share` of its mass to the chunk's trending items,
            # the same for every interest: the n_trending live items of the largest
            # appeal, in proportion to appeal * trend
            n_top = min(int(n_trending), alive.id.shape[0])
            top = np.argpartition(-alive.appeal, n_top - 1)[:n_top]
            top_weight = alive.appeal[top] * trend[top]
            top_weight = top_weight if top_weight.sum() > 0 else np.ones(n_top)
            top_cum = np.cumsum(top_weight) / top_weight.sum()
            pick = np.flatnonzero(rng.random(drawn_item.shape[0]) < trending_share)
            drawn_item[pick] = alive.id[top[np.minimum(
                np.searchsorted(top_cum, rng.random(pick.shape[0]), side="right"),
                n_top - 1)]]
        slot_interest = np.concatenate([np.repeat(new_interest, m), drawn_interest])
        slot_item = np.concatenate([np.repeat(new["id"], m), drawn_item])
        # slots go to the interest's engagements in random order (int16 keys sort by radix)
        small = np.int16 if n_interests < 2**15 else np.int64
        shuffle = rng.permutation(who.shape[0])
        item = np.empty(who.shape[0], np.int64)
        item[shuffle[np.argsort(z[shuffle].astype(small), kind="stable")]] = slot_item[
            np.argsort(slot_interest.astype(small), kind="stable")
        ]
        served += who.shape[0]
        yield t, who, item, new, revived


_GENERATOR_CONSTRAINTS = {
    "n_users": [Interval(Integral, 1, None, closed="left")],
    "n_items": [Interval(Integral, 1, None, closed="left")],
    "n_chunks": [Interval(Integral, 1, None, closed="left")],
    "n_interests": [Interval(Integral, 1, None, closed="left")],
    "interests_per_user": [tuple, list, Interval(Real, 1, None, closed="left")],
    "item_lifetime": [Interval(Real, 1, None, closed="left")],
    "item_appeal": [Interval(Real, 0, None, closed="left")],
    "alpha": [Interval(Real, 0, None, closed="neither")],
    "beta": [Interval(Real, 0, None, closed="neither")],
    "user_degree": [tuple, list],
    "n_engagements": [Interval(Integral, 1, None, closed="left"), None],
    "min_item_degree": [Interval(Integral, 1, None, closed="left")],
    "random_state": ["random_state", np.random.Generator],
    "trending_share": [Interval(Real, 0, 1, closed="both")],
    "n_trending": [Interval(Integral, 1, None, closed="left")],
}


@validate_params(
    {**_GENERATOR_CONSTRAINTS, "return_truth": ["boolean"]},
    prefer_skip_nested_validation=True,
)
def make_engagements(
    n_users: int = 1000,
    n_items: int = 1000,
    n_chunks: int = 20,
    n_interests: int = 10,
    *,
    interests_per_user: tuple[int, int] | float = (1, 3),
    item_lifetime: float = 2.5,
    item_appeal: float = 0.0,
    alpha: float = 1.0,
    beta: float = 0.5,
    user_degree: tuple[int, int] = (1, 100),
    n_engagements: int | None = None,
    min_item_degree: int = 5,
    random_state=None,
    trending_share: float = 0.0,
    n_trending: int = 100,
    return_truth: bool = False,
):
    """Draw an engagement log from MiCRO's generative model with ephemeral items.

    The paper's model (its Table 2): each user has a distribution theta_u over a few of the
    `n_interests` interests; in chunk t each interest k has a distribution phi[k, t] over
    the items alive at t; a user's engagement draws an interest z from theta_u, then an item
    from phi[z, t].

    - Users: a total degree between the bounds of `user_degree`, heavy-tailed (a lognormal
      rounded and clipped to the bounds, so the upper bound collects the tail, as a cap
      does); a support of `interests_per_user` interests (no more than the degree), drawn
      by interest popularity (itself drawn Dir(1)); ``theta_u ~ Dir(alpha)`` on the
      support. Each engagement falls in a chunk drawn uniformly, so a user is active in
      several chunks.
    - Items: each belongs to one interest, is born at a chunk and lives a geometric number
      of chunks (mean `item_lifetime`). Items are born where users engage: the births of a
      chunk follow the chunk's engagements, spread over interests by their demand.
    - ``phi[k, t] ~ Dir(beta * appeal * trend)`` over the items of interest k alive at t,
      the paper's item-specific prior ``beta[t, i]``: an item's appeal is drawn once at its
      birth (lognormal, median 1, spread `item_appeal`) and holds over its life, so an
      interest's popular items stay popular from one chunk to the next; its trend rises
      linearly to a peak age drawn uniformly over its life, then decays. A small `beta`
      concentrates engagements on few items, afresh in each chunk; a large `item_appeal`
      on the same few items over their lives.
    - Trending items: with ``trending_share > 0``, every ``phi[k, t]`` gives that share of
      its mass to the chunk's `n_trending` live items of the largest appeal, whatever their
      interest, so a few items take engagements from users of every
      interest (the head of the paper's logs, where a chunk's most engaged items are a
      baseline of their own at any size of the log).
    - Item degrees: an item takes `min_item_degree` of its interest's engagements in the
      chunk it is born, the rest of the interest's engagements are drawn from phi. So every
      item 0..n_items-1 has at least `min_item_degree` engagements, and every user
      0..n_users-1 has exactly their degree.

    Engagements whose interest has no live item in their chunk (rare: an interest with too
    few engagements to give a new item its minimum) move to a later chunk. In the last
    chunk, the interest's latest item lives on to take them (its death is moved), and where
    the interest never had an item they go to the user's likeliest interest that has one,
    else to the busiest interest. A user may engage the same item more than once, as the
    model draws with replacement.

    Parameters
    ----------
    n_users : int
        Users, with ids ``0..n_users-1``.
    n_items : int
        Items, with ids ``0..n_items-1`` in order of birth.
    n_chunks : int
        Time chunks ``0..n_chunks-1``.
    n_interests : int
        Interests K.
    interests_per_user : (int, int) or float
        The size of a user's support: drawn uniformly from a range ``(low, high)``, or, given
        a number, ``1 + Poisson(mean - 1)``; at most `n_interests` and at most the user's
        degree.
    item_lifetime : float
        The mean number of chunks an item lives (at least 1).
    item_appeal : float
        The spread (sigma of the log) of items' appeal, a lognormal of median 1 drawn at an
        item's birth that weighs its share of its interest in every chunk of its life. 0
        gives every item the same appeal. The log of ``sklearn-micro reproduce`` takes 1.7,
        set from the paper's figures (the datasets guide says how).
    alpha : float
        The concentration of ``theta_u ~ Dir(alpha)`` on the user's support.
    beta : float
        The concentration of ``phi[k, t]``.
    user_degree : (int, int)
        The smallest and largest number of engagements of a user.
    n_engagements : int or None
        The expected number of engagements; it sets the mean user degree, which must lie
        within `user_degree`. By default the mean degree is the geometric mean of the
        bounds of `user_degree` (10 for (1, 100)).
    min_item_degree : int
        The least number of engagements of an item. ``n_items * min_item_degree`` must not
        exceed the number of engagements; keeping it under half of them leaves room.
    random_state : int, RandomState instance, Generator or None
        Seeds the draws; an int gives the same log every time.
    trending_share : float
        The share of every interest's ``phi[k, t]`` on the chunk's trending items, the same
        for all interests: items engaged by users of every interest, as a chunk's most
        popular posts are. 0 (the default) keeps each interest to its own items.
    n_trending : int
        The number of trending items of a chunk: the live items of the largest appeal,
        weighted among themselves by appeal times trend. A count, not a share, so that the
        head of a chunk keeps its size at every scale of the log.
    return_truth : bool
        Also return what was planted.

    Returns
    -------
    log : EngagementLog
        The engagements, sorted by chunk, then by user.
    truth : Bunch
        Only with ``return_truth=True``:

        - ``user_interests``: sparse CSR matrix (n_users, n_interests) of theta,
        - ``user_degree``: (n_users,) the planted degrees,
        - ``item_interest``: (n_items,) each item's interest,
        - ``item_birth``, ``item_death``: (n_items,) the first and the last chunk an item
          is alive (its death is cut at the last chunk),
        - ``item_appeal``: (n_items,) each item's appeal.

    See Also
    --------
    iter_engagements : The same log, one chunk at a time.

    Examples
    --------
    >>> from sklearn_micro.datasets import make_engagements
    >>> log, truth = make_engagements(200, 100, 10, 5, random_state=0, return_truth=True)
    >>> log.shape[0] >= 100 * 5
    True
    >>> bool((truth.item_birth[log.item] <= log.chunk).all())
    True
    >>> truth.user_interests.shape
    (200, 5)
    """
    generator = _generate(
        n_users, n_items, n_chunks, n_interests, interests_per_user, item_lifetime,
        item_appeal, alpha, beta, user_degree, n_engagements, min_item_degree, random_state,
        trending_share, n_trending,
    )
    users = next(generator)
    parts = {"user": [], "item": [], "chunk": []}
    interest, birth, life, appeal, revived = [], [], [], [], []
    for t, who, item, new, lived_on in generator:
        parts["user"].append(who)
        parts["item"].append(item)
        parts["chunk"].append(np.full(who.shape[0], t, np.int64))
        interest.append(new["interest"])
        birth.append(new["birth"])
        life.append(new["life"])
        appeal.append(new["appeal"])
        revived.append((t, lived_on))
    log = EngagementLog(*(np.concatenate(parts[c]) for c in COLUMNS))
    if not return_truth:
        return log
    birth = np.concatenate(birth)
    death = np.minimum(birth + np.concatenate(life) - 1, n_chunks - 1)
    for t, ids in revived:
        death[ids] = t
    truth = Bunch(
        user_interests=sparse.csr_matrix(
            (users.theta, users.interest, users.indptr), shape=(n_users, n_interests)
        ),
        user_degree=users.degree,
        item_interest=np.concatenate(interest),
        item_birth=birth,
        item_death=death,
        item_appeal=np.concatenate(appeal),
    )
    return log, truth


@validate_params(_GENERATOR_CONSTRAINTS, prefer_skip_nested_validation=True)
def iter_engagements(
    n_users: int = 1000,
    n_items: int = 1000,
    n_chunks: int = 20,
    n_interests: int = 10,
    *,
    interests_per_user: tuple[int, int] | float = (1, 3),
    item_lifetime: float = 2.5,
    item_appeal: float = 0.0,
    alpha: float = 1.0,
    beta: float = 0.5,
    user_degree: tuple[int, int] = (1, 100),
    n_engagements: int | None = None,
    min_item_degree: int = 5,
    random_state=None,
    trending_share: float = 0.0,
    n_trending: int = 100,
) -> Iterator[EngagementLog]:
    """Draw an engagement log as `make_engagements` does, one chunk at a time.

    Memory holds the users (their degrees and sparse interests), the items alive and one
    chunk's engagements, so it does not grow with `n_chunks`: the paper's scale (6.7M users,
    13M items, 283M engagements in 192 chunks) streams through. With the same parameters,
    the chunks concatenated are `make_engagements`' log.

    Parameters
    ----------
    n_users : int
        Users, with ids ``0..n_users-1``.
    n_items : int
        Items, with ids ``0..n_items-1`` in order of birth.
    n_chunks : int
        Time chunks ``0..n_chunks-1``.
    n_interests : int
        Interests K.
    interests_per_user : (int, int) or float
        The size of a user's support, as for `make_engagements`.
    item_lifetime : float
        The mean number of chunks an item lives (at least 1).
    item_appeal : float
        The spread of items' appeal, as for `make_engagements`.
    alpha : float
        The concentration of ``theta_u ~ Dir(alpha)`` on the user's support.
    beta : float
        The concentration of ``phi[k, t]``.
    user_degree : (int, int)
        The smallest and largest number of engagements of a user.
    n_engagements : int or None
        The expected number of engagements.
    min_item_degree : int
        The least number of engagements of an item.
    random_state : int, RandomState instance, Generator or None
        Seeds the draws; an int gives the same log every time.
    trending_share : float
        The share of every interest's ``phi[k, t]`` on the chunk's trending items, as for
        `make_engagements`.
    n_trending : int
        The number of trending items of a chunk, as for `make_engagements`.

    Returns
    -------
    chunks : iterator of EngagementLog
        One chunk's engagements at a time, sorted by user; chunks come in order, and a chunk
        without engagements is left out. The parameters are checked at once, the chunks
        drawn as the iterator is consumed.

    See Also
    --------
    make_engagements : The whole log at once, and what was planted.

    Examples
    --------
    >>> from sklearn_micro.datasets import iter_engagements
    >>> for log in iter_engagements(100, 40, 3, 4, random_state=0):
    ...     print(log.chunk[0], len(log) > 0)
    0 True
    1 True
    2 True
    """
    generator = _generate(
        n_users, n_items, n_chunks, n_interests, interests_per_user, item_lifetime,
        item_appeal, alpha, beta, user_degree, n_engagements, min_item_degree, random_state,
        trending_share, n_trending,
    )
    next(generator)  # validates the parameters before the first chunk is asked for
    return (
        EngagementLog(who, item, np.full(who.shape[0], t, np.int64))
        for t, who, item, _, _ in generator
        if who.shape[0]
    )

