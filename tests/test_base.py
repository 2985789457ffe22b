"""The helpers of sklearn_micro.base and the id handling of sklearn_micro._log."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from sklearn_micro._log import Vocabulary
from sklearn_micro.base import distinct_pairs

pairs = st.lists(st.tuples(st.integers(-5, 5), st.integers(-5, 5), st.floats(0, 10)),
                 max_size=40)


@given(pairs)
def test_distinct_pairs_are_sorted_unique_and_sum_their_weights(rows):
    first = np.array([r[0] for r in rows], np.int64)
    second = np.array([r[1] for r in rows], np.int64)
    weights = np.array([r[2] for r in rows])
    a, b = distinct_pairs(first, second)
    expected = sorted({(x, y) for x, y in zip(first.tolist(), second.tolist(), strict=True)})
    assert list(zip(a.tolist(), b.tolist(), strict=True)) == expected
    a, b, sums = distinct_pairs(first, second, weights)
    totals = {}
    for x, y, w in rows:
        totals[(x, y)] = totals.get((x, y), 0.0) + w
    assert_allclose(sums, [totals[p] for p in expected])


def test_lookup_refuses_uint64_ids_beyond_int64():
    vocab = Vocabulary(np.array([1, 2, -(2**63)]))
    with pytest.raises(ValueError, match=r"users.*row 0 holds 9223372036854775808, beyond the "
                                         r"int64 range"):
        vocab.lookup(np.array([2**63], np.uint64), name="users")
    assert_array_equal(vocab.lookup(np.array([2, 7], np.uint64)), [1, -1])
