"""Row surgery on compressed sparse rows."""

import numpy as np
from numba import njit


@njit(cache=True)
def append_to_rows(indptr, column, add_indptr, add_column):
    """The entries of each row ``r``, ``column[indptr[r]:indptr[r + 1]]``, followed by
    ``add_column[add_indptr[r]:add_indptr[r + 1]]``: one pass of copying."""
    out = np.empty(column.shape[0] + add_column.shape[0], column.dtype)
    p = 0
    for r in range(indptr.shape[0] - 1):
        n = indptr[r + 1] - indptr[r]
        out[p:p + n] = column[indptr[r]:indptr[r + 1]]
        p += n
        n = add_indptr[r + 1] - add_indptr[r]
        out[p:p + n] = add_column[add_indptr[r]:add_indptr[r + 1]]
        p += n
    return out
