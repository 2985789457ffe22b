"""The helpers of sklearn_micro.base and the id handling of sklearn_micro._log."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from sklearn_micro._log import Vocabulary
from sklearn_micro.base import unique_pairs

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
