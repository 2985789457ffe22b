"""Id lookups in a dense table, for integer ids that span a range not much larger than
their number (as the paper's files' indices do)."""

import numpy as np
from numba import njit


@njit(cache=True)
def table_lookup(values, low, table, out):
    """``out[j] = table[values[j] - low]``, -1 where a value falls outside the table."""
    span = table.shape[0]
    for j in range(values.shape[0]):
        pos = values[j] - low
        out[j] = table[pos] if 0 <= pos < span else -1
    return out


@njit(cache=True)
def present_values(values, low, span):
    """The sorted distinct values of ``values``, all within ``low .. low + span - 1``."""
    present = np.zeros(span, np.bool_)
    for v in values:
        present[v - low] = True
    n = 0
    for p in range(span):
        n += present[p]
    out = np.empty(n, values.dtype)
    n = 0
    for p in range(span):
        if present[p]:
            out[n] = low + p
            n += 1
    return out
