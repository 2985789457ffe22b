"""The helpers of sklearn_micro.base and the id handling of sklearn_micro._log."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from sklearn_micro._log import Vocabulary
from sklearn_micro.base import append_to_rows, csr_rows, ranges_csr, unique_pairs

small = st.integers(-5, 5)
wide = st.integers(-(2**63), 2**63 - 1)


@settings(deadline=None)
@given(st.one_of(st.lists(st.tuples(small, small), max_size=40),
                 st.lists(st.tuples(wide, small), max_size=20),
                 st.lists(st.tuples(small, wide), max_size=20)))
def test_unique_pairs_are_sorted_and_distinct(rows):
    first = np.array([r[0] for r in rows], np.int64)
    second = np.array([r[1] for r in rows], np.int64)
    a, b = unique_pairs(first, second)
    assert a.dtype == b.dtype == np.int64
    assert list(zip(a.tolist(), b.tolist(), strict=True)) == sorted(set(rows))


def test_lookup_refuses_uint64_ids_beyond_int64():
    vocab = Vocabulary(np.array([1, 2, -(2**63)]))
    with pytest.raises(ValueError, match=r"users.*row 0 holds 9223372036854775808, beyond the "
                                         r"int64 range"):
        vocab.lookup(np.array([2**63], np.uint64), name="users")
    assert_array_equal(vocab.lookup(np.array([2, 7], np.uint64)), [1, -1])


@settings(deadline=None)
@given(st.lists(st.integers(0, 300), max_size=200), st.lists(st.integers(-5, 305), max_size=60))
def test_sorted_contains_answers_like_isin(sorted_values, values):
    """The galloping walk finds each sorted value among sorted distinct values, from
    either side of the range and with long gaps between hits."""
    from sklearn_micro._kernels.csr import sorted_contains

    a = np.unique(np.array(sorted_values, np.int64))
    b = np.unique(np.array(values, np.int64))
    assert_array_equal(sorted_contains(a, b), np.isin(b, a))


@settings(deadline=None)
@given(st.lists(st.integers(-50, 50), max_size=80), st.lists(st.integers(-50, 50), max_size=80))
def test_merge_distinct_is_the_sorted_union(old, new):
    """Sorted arrays with repeats, shared values or none (the size left exact, or cut)."""
    from sklearn_micro._kernels.csr import merge_distinct

    a, b = np.sort(np.array(old, np.int64)), np.sort(np.array(new, np.int64))
    got = merge_distinct(a, b)
    assert_array_equal(got, np.union1d(a, b))
    assert got.dtype == np.int64


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 2**32 - 1)),
                         max_size=20), min_size=1, max_size=5))
def test_seen_items_add_merges_distinct_pairs(batches):
    from sklearn_micro.base import SeenItems

    seen, expected = SeenItems(), set()
    for batch in batches:
        user = np.array([u for u, _ in batch], np.int64)
        item = np.array([i for _, i in batch], np.int64)
        before = seen.keys.copy()
        grown = seen.add(user, item)
        np.testing.assert_array_equal(seen.keys, before)  # add leaves the old object alone
        seen = grown
        expected |= set(batch)
        assert list(zip(seen.user.tolist(), seen.item.tolist(), strict=True)) == sorted(expected)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 40)), max_size=40),
                min_size=1, max_size=12),
       st.lists(st.integers(-1, 14), max_size=20))
def test_seen_items_runs_answer_like_one_sorted_set(batches, users):
    """Pairs added batch by batch are held in sorted runs of distinct pairs, each smaller
    than half the one before it; every query answers as one set of pairs would, and an
    object that was added to keeps its own answers."""
    from sklearn_micro.base import SeenItems

    seen, expected, history = SeenItems(), set(), []
    for batch in batches:
        seen = seen.add(np.array([u for u, _ in batch], np.int64),
                        np.array([i for _, i in batch], np.int64))
        expected |= set(batch)
        history.append((seen, set(expected)))
        sizes = [run.shape[0] for run in seen.runs]
        assert all(2 * b < a for a, b in zip(sizes, sizes[1:], strict=False)), sizes
        assert len(seen) == len(expected)
    query = np.array(users, np.int64)
    for held, pairs in history:
        indptr, items = held.csr(query)
        for row, user in enumerate(users):
            want = sorted(i for u, i in pairs if u == user and user >= 0)
            assert items[indptr[row]:indptr[row + 1]].tolist() == want
        assert held.has_user(query).tolist() == [
            user >= 0 and any(u == user for u, _ in pairs) for user in users]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(small, wide), min_size=1, max_size=30),
       st.lists(st.one_of(small, wide), max_size=30))
def test_vocabulary_lookups_agree_for_dense_and_sparse_ids(ids, queries):
    """Ids of a small range are looked up in a dense table, others by binary search: both
    give every id its position, -1 for unknown ones, and the same distinct values."""
    from sklearn_micro._log import distinct

    vocab = Vocabulary.from_ids(np.array(ids, np.int64))
    assert vocab.ids.tolist() == sorted(set(ids))
    assert_array_equal(distinct(np.array(ids, np.int64)), vocab.ids)
    position = {v: j for j, v in enumerate(vocab.ids.tolist())}
    got = vocab.lookup(np.array(queries, np.int64))
    assert got.tolist() == [position.get(q, -1) for q in queries]
    grown, index = vocab.extend(np.array(queries + ids, np.int64))
    assert grown.ids[index].tolist() == queries + ids
    assert grown.ids[: len(vocab)].tolist() == vocab.ids.tolist()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=8), st.integers(0, 3), st.integers(0, 12),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_append_to_rows_puts_each_rows_new_entries_after_its_old_ones(
        sizes, n_more, n_new, anywhere, seed):
    # rows past every old entry are appended in one copy, others by the row-by-row kernel:
    # both give each row its old entries, then its new ones in their given order
    rng = np.random.default_rng(seed)
    sizes = np.array(sizes + [0] * n_more, np.int64)
    indptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    old = rng.integers(0, 100, indptr[-1]).astype(np.int32)
    kept = old.copy()
    tail = int(np.searchsorted(indptr, indptr[-1]))  # the first row past every old entry
    lo = 0 if anywhere else tail
    if lo >= sizes.shape[0]:
        n_new = 0
    rows = rng.integers(lo, sizes.shape[0], n_new) if n_new else np.empty(0, np.int64)
    new = rng.integers(100, 200, n_new)
    got_ptr, (got,) = append_to_rows(indptr, (old,), rows, (new,))
    np.testing.assert_array_equal(old, kept)
    assert got.dtype == old.dtype and got is not old
    for r in range(sizes.shape[0]):
        np.testing.assert_array_equal(
            got[got_ptr[r]:got_ptr[r + 1]],
            np.concatenate([old[indptr[r]:indptr[r + 1]], new[rows == r]]))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 6)), max_size=30),
       st.lists(st.integers(-1, 29), max_size=20))
@example(ranges=[], rows=[-1])  # a CSR of no rows, asked for an unknown one
def test_ranges_csr_and_csr_rows_list_each_rows_positions(ranges, rows):
    lo = np.array([a for a, _ in ranges], np.int64)
    hi = lo + np.array([n for _, n in ranges], np.int64)
    indptr, positions = ranges_csr(lo, hi)
    assert positions.dtype == np.int64
    assert_array_equal(indptr, np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.int64))
    for r in range(lo.shape[0]):
        assert_array_equal(positions[indptr[r]:indptr[r + 1]], np.arange(lo[r], hi[r]))
    # a CSR's rows, -1 giving an empty one
    csr_indptr = np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.int64)
    rows = np.array([r for r in rows if r < lo.shape[0]], np.int64)
    got_ptr, got = csr_rows(csr_indptr, rows)
    want = [np.arange(csr_indptr[r], csr_indptr[r + 1]) if r >= 0 else np.zeros(0, np.int64)
            for r in rows]
    assert_array_equal(np.diff(got_ptr), [w.size for w in want])
    assert_array_equal(got, np.concatenate([np.zeros(0, np.int64), *want]))
