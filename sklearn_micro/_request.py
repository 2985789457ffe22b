"""The request-time arguments of ``recommend`` and ``similar_items``: checked, mapped to
internal indices and held as CSRs over the request's rows.

``exclude`` and ``allow`` are each a flat list of item ids (the same for every row) or a
list of lists aligned with the rows (one per row); ``history`` is always aligned with the
rows. Item ids unknown to the model are dropped: an unknown item cannot be recommended,
and engagements with it tell the model nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np

from ._kernels import csr
from ._log import Vocabulary, as_ids, distinct, sorted_find

__all__ = ["ItemLists", "Request", "allowed_top_m", "is_aligned", "parse_request", "own_items",
           "removed_items", "single_list"]

_LIST_TYPES = (list, tuple, np.ndarray)


@dataclass(frozen=True, eq=False)
class ItemLists:
    """Item lists over a request's rows as a CSR of internal item indices.

    Row ``r``'s items are ``items[lo[r]:hi[r]]``: a flat list given for every row is held
    once, every row pointing at it. A row's items keep their order and repeats (a
    history's engagements).
    """

    lo: np.ndarray
    hi: np.ndarray
    items: np.ndarray

    @property
    def n_rows(self) -> int:
        return self.lo.shape[0]

    @property
    def is_flat(self) -> bool:
        """Whether every row holds the same list."""
        return bool((self.lo == self.lo[:1]).all() and (self.hi == self.hi[:1]).all())

    def flat_items(self) -> np.ndarray:
        """The list of a flat `ItemLists` (`is_flat`)."""
        if self.n_rows == 0:
            return np.empty(0, np.int64)
        return self.items[self.lo[0]:self.hi[0]]

    def rows(self, rows: np.ndarray) -> ItemLists:
        """The lists of ``rows`` (positions among this one's rows)."""
        return ItemLists(self.lo[rows], self.hi[rows], self.items)

    def block(self, lo: int, hi: int) -> ItemLists:
        """The lists of the rows ``lo:hi``, holding only their own items (a flat list
        stays one list): what a block of a request carries to a worker."""
        if self.is_flat:
            items = self.flat_items()
            n = hi - lo
            return ItemLists(np.zeros(n, np.int64), np.full(n, items.shape[0], np.int64),
                             items.copy())
        indptr, items = self.rows(np.arange(lo, hi)).csr()
        return ItemLists(indptr[:-1].copy(), indptr[1:].copy(), items)

    def csr(self) -> tuple[np.ndarray, np.ndarray]:
        """``(indptr, items)``: every row's items in a CSR of its own."""
        indptr = np.zeros(self.n_rows + 1, np.int64)
        np.cumsum(self.hi - self.lo, out=indptr[1:])
        positions = np.empty(indptr[-1], np.int64)
        csr.fill_ranges(self.lo, self.hi, indptr, positions)
        return indptr, self.items[positions]

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(row, item)`` of every entry of every row."""
        indptr, items = self.csr()
        return np.repeat(np.arange(self.n_rows), np.diff(indptr)), items


@dataclass(frozen=True, eq=False)
class Request:
    """``exclude``, ``allow`` and ``history`` of one call, over its rows; None where not
    given."""

    exclude: ItemLists | None = None
    allow: ItemLists | None = None
    history: ItemLists | None = None

    def rows(self, rows: np.ndarray) -> Request:
        return Request(*(None if lists is None else lists.rows(rows)
                         for lists in (self.exclude, self.allow, self.history)))

    def block(self, lo: int, hi: int) -> Request:
        """The request of the rows ``lo:hi``, with only their items (`ItemLists.block`)."""
        return Request(*(None if lists is None else lists.block(lo, hi)
                         for lists in (self.exclude, self.allow, self.history)))


def _describe(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_aligned(value) -> bool:
    """Whether ``value`` is a list of lists (one per row), not a flat list of ids."""
    if isinstance(value, np.ndarray):
        return value.ndim == 2 or (value.dtype.kind == "O" and len(value) > 0
                                   and all(_is_list(v) for v in value))
    return _is_list(value) and len(value) > 0 and all(_is_list(v) for v in value)


def _ids(values, item_ids: Vocabulary, name: str) -> np.ndarray:
    """Item ids of one list as internal indices, unknown ones dropped."""
    values = as_ids(values, name=name)
    if values.ndim != 1:
        raise ValueError(f"{name} must be a 1-D list of item ids; got shape {values.shape}.")
    if values.size == 0:
        return np.empty(0, np.int64)
    if values.dtype.kind not in "iuUO":
        raise ValueError(f"{name} must hold item ids, int64 or str; got {values.dtype} "
                         f"values such as {values[0]!r}.")
    index = item_ids.lookup(values, name=name)
    return index[index >= 0]


def _is_list(value) -> bool:
    return isinstance(value, _LIST_TYPES) and not (isinstance(value, np.ndarray)
                                                   and value.ndim == 0)


def _aligned_lists(value, item_ids: Vocabulary, name: str) -> ItemLists:
    """One list of item ids per row, as `ItemLists`: looked up all at once, or row by row
    (naming the row in the error) when they are not all ids of the model's kind."""
    sizes = np.array([len(v) for v in value], np.int64)
    row = np.repeat(np.arange(sizes.shape[0]), sizes)
    try:
        flat = np.asarray(list(chain.from_iterable(value)))
        index = item_ids.lookup(flat, name=name) if flat.size else np.empty(0, np.int64)
        if index.shape != row.shape:
            raise ValueError(name)
    except (TypeError, ValueError):
        parts = [_ids(v, item_ids, f"{name}[{r}]") for r, v in enumerate(value)]
        index = np.concatenate(parts) if parts else np.empty(0, np.int64)
        row = np.repeat(np.arange(sizes.shape[0]), [p.shape[0] for p in parts])
    known = index >= 0
    row, index = row[known], index[known].astype(np.int64)
    counts = np.bincount(row, minlength=sizes.shape[0])
    hi = np.cumsum(counts)
    return ItemLists(hi - counts, hi, index)


def _item_lists(value, n_rows: int, item_ids: Vocabulary, name: str, rows_name: str, *,
                aligned_only: bool = False) -> ItemLists | None:
    """``value``, a flat list of item ids or a list of lists aligned with the rows, as
    `ItemLists` (None stays None)."""
    if value is None:
        return None
    expected = (f"a list of item-id lists aligned with {rows_name} (one per entry of "
                f"{rows_name})" if aligned_only else
                f"a flat list of item ids (for every entry of {rows_name}) or a list of "
                f"item-id lists aligned with {rows_name}")
    if not _is_list(value):
        raise ValueError(f"{name} must be {expected}; got {type(value).__name__} "
                         f"{_describe(value)}.")
    if isinstance(value, np.ndarray) and value.ndim > 2:
        raise ValueError(f"{name} must be {expected}; got an array of shape {value.shape}.")
    if isinstance(value, np.ndarray) and value.dtype.kind != "O":
        nested = [value.ndim == 2] * len(value)
    else:
        nested = [_is_list(v) for v in value]
    if len(value) and all(nested):
        if len(value) != n_rows:
            raise ValueError(f"{name} must be {expected}; got {len(value)} lists for "
                             f"{n_rows} entries of {rows_name}.")
        return _aligned_lists(value, item_ids, name)
    if any(nested):
        j = nested.index(True) if not nested[0] else nested.index(False)
        raise ValueError(f"{name} must be {expected}, not both; got a mix (entry {j} is "
                         f"{_describe(value[j])}).")
    if aligned_only:
        if n_rows == 0 and len(value) == 0:
            return ItemLists(np.zeros(0, np.int64), np.zeros(0, np.int64),
                             np.empty(0, np.int64))
        raise ValueError(f"{name} must be {expected}; got a flat list {_describe(value)}.")
    items = _ids(value, item_ids, name)
    return ItemLists(np.zeros(n_rows, np.int64), np.full(n_rows, items.shape[0], np.int64),
                     items.astype(np.int64))


def parse_request(item_ids: Vocabulary, n_rows: int, *, exclude=None, allow=None,
                  history=None, rows_name: str = "users") -> Request:
    """Check ``exclude``, ``allow`` and ``history`` against ``n_rows`` rows (named
    ``rows_name`` in errors) and map their ids with ``item_ids``."""
    return Request(
        exclude=_item_lists(exclude, n_rows, item_ids, "exclude", rows_name),
        allow=_item_lists(allow, n_rows, item_ids, "allow", rows_name),
        history=_item_lists(history, n_rows, item_ids, "history", rows_name,
                            aligned_only=True),
    )


def single_list(item_ids: Vocabulary, value, name: str) -> ItemLists:
    """A flat list of item ids (``explain``'s history) as `ItemLists` of one row."""
    if not _is_list(value) or is_aligned(value):
        raise ValueError(f"{name} must be a flat list of item ids; got {type(value).__name__} "
                         f"{_describe(value)}.")
    items = _ids(value, item_ids, name)
    return ItemLists(np.zeros(1, np.int64), np.full(1, items.shape[0], np.int64),
                     items.astype(np.int64))


def own_items(index: np.ndarray) -> ItemLists:
    """Each row's own item (``similar_items`` leaves it out); none for -1."""
    known = index >= 0
    hi = np.cumsum(known)
    return ItemLists(hi - known, hi, index[known].astype(np.int64))


def removed_items(seen: tuple[np.ndarray, np.ndarray], *lists: ItemLists | None):
    """The CSR ``seen`` (sorted distinct items per row) with the items of ``lists`` added
    to their rows, sorted and distinct again; ``seen`` itself when there are none."""
    indptr, items = seen
    n_rows = indptr.shape[0] - 1
    extra = [lists.pairs() for lists in lists if lists is not None and lists.items.size]
    if not extra:
        return seen
    rows = [np.repeat(np.arange(n_rows), np.diff(indptr))] + [r for r, _ in extra]
    cols = [items.astype(np.int64)] + [c for _, c in extra]
    width = int(max(c.max(initial=0) for c in cols)) + 1
    key = distinct(np.concatenate(rows) * width + np.concatenate(cols))
    row, col = key // width, key % width
    out = np.zeros(n_rows + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=n_rows), out=out[1:])
    return out, col


# entries a block of rows may hold at once while `allowed_top_m` ranks deeper
_ALLOW_BLOCK = 1 << 22


def allowed_top_m(rank, n_rows: int, m: int, seen, allow: ItemLists, n_items: int):
    """Each row's top m among its allowed items, from a ranking of all of them.

    ``rank(rows, depth, seen)`` returns the top ``depth`` of ``rows`` (positions among the
    rows) with ``seen`` (a CSR over those rows) left out, padded with -1 and -inf. Rows
    are ranked deeper (four times each round) until ``m`` of their items are allowed, the
    ranking has run out, or it holds every item: the allowed items of the full ranking,
    in its order, the first ``m`` of them.
    """
    items = np.full((n_rows, m), -1, np.int64)
    scores = np.full((n_rows, m), -np.inf)
    seen_lists = ItemLists(seen[0][:-1], seen[0][1:], seen[1])
    allow_row, allow_item = allow.pairs()
    allow_key = np.sort(allow_row * max(n_items, 1) + allow_item)
    pending = np.arange(n_rows)
    depth = min(max(4 * m, 64), max(n_items, 1))
    while pending.size:
        block = max(1, _ALLOW_BLOCK // depth)
        unfinished = []
        for lo in range(0, pending.shape[0], block):
            rows = pending[lo:lo + block]
            got, got_scores = rank(rows, depth, seen_lists.rows(rows).csr())
            key = rows[:, None] * max(n_items, 1) + np.maximum(got, 0)
            ok = (got >= 0) & sorted_find(allow_key, key)[1]
            place = np.cumsum(ok, axis=1)
            take = ok & (place <= m)
            r, c = np.nonzero(take)
            items[rows[r], place[r, c] - 1] = got[r, c]
            scores[rows[r], place[r, c] - 1] = got_scores[r, c]
            done = (place[:, -1] >= m) | (got[:, -1] < 0) | (depth >= n_items)
            unfinished.append(rows[~done])
        pending = np.concatenate(unfinished)
        depth = min(4 * depth, max(n_items, 1))
    return items, scores

