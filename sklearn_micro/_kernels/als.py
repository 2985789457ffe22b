"""Alternating least squares for implicit feedback: one side's rows solved by conjugate
gradient, blocks of rows at a time.

The updates are those of `implicit`'s ``least_squares_cg`` (Hu, Koren and Volinsky, 2008;
Takacs, Pilaszy and Tikk, 2011): each row ``x`` of ``X`` starts from its current value and
takes ``cg_steps`` steps of conjugate gradient on

    (YtY + Y' (C_u - I) Y) x = Y' C_u p_u

where ``YtY`` (with the regularization on its diagonal) is shared by every row and the
sparse part runs over the row's nonzeros ``c`` (``c > 0``: engaged with confidence ``c``;
``c <= 0``: not engaged, confidence ``-c``). A row without nonzeros is set to zero.

`implicit` multiplies ``YtY`` by one row's vector at a time (a matrix-vector product per
row and step). Here the rows are taken in blocks of `BLOCK`: the block's products with
``YtY`` are one matrix product each (BLAS level 3), and the sparse part is read once per
row for the residual; a nonzero of confidence 1 (a single engagement at ``alpha=1``) adds
nothing to the conjugate gradient's products, so only the others are read again. The sums
run in another order than `implicit`'s, so the vectors agree with its to float32 rounding,
not bit for bit (about as far as `implicit` in float32 is from `implicit` in float64). Blocks
are fixed by the rows, not by the threads: any number of threads gives the same vectors.
"""

import numba
import numpy as np

# 32 rows: a block's residuals, directions and products (16 KiB each at 128 dimensions)
# stay in the core's cache across the conjugate-gradient steps, with the other side's
# vectors of the block's nonzeros; 256 rows took twice the time at 1/20 of fave's scale
BLOCK = 32

# reassociation lets LLVM vectorize the dot products (their order is not implicit's anyway)
_FAST = {"reassoc", "contract", "nsz", "arcp"}


@numba.njit(cache=True, fastmath=_FAST)
def _solve_block(lo, hi, indptr, indices, data, X, Y, YtY, cg_steps):
    """Rows ``lo:hi`` of ``X`` moved ``cg_steps`` conjugate-gradient steps (in place)."""
    d = X.shape[1]
    n = hi - lo
    r = np.dot(X[lo:hi], YtY)  # YtY is symmetric: x YtY = (YtY x)'
    for b in range(n):
        u = lo + b
        for f in range(d):
            r[b, f] = -r[b, f]
        for j in range(indptr[u], indptr[u + 1]):
            i = indices[j]
            c = data[j]
            if c == 1.0:
                for f in range(d):
                    r[b, f] += Y[i, f]
                continue
            if c > 0:
                w = c
            else:
                w = np.float32(0.0)
                c = -c
            xy = np.float32(0.0)
            for f in range(d):
                xy += Y[i, f] * X[u, f]
            w -= (c - 1) * xy
            for f in range(d):
                r[b, f] += w * Y[i, f]
    p = r.copy()
    rs_old = np.zeros(n, np.float32)
    active = np.zeros(n, np.bool_)
    for b in range(n):
        u = lo + b
        if indptr[u] == indptr[u + 1]:
            X[u, :] = 0
            continue
        rs = np.float32(0.0)
        for f in range(d):
            rs += r[b, f] * r[b, f]
        rs_old[b] = rs
        active[b] = rs >= 1e-20
    for _ in range(cg_steps):
        ap = np.dot(p, YtY)
        for b in range(n):
            if not active[b]:
                continue
            u = lo + b
            for j in range(indptr[u], indptr[u + 1]):
                c = abs(data[j])
                if c == 1.0:
                    continue
                i = indices[j]
                yp = np.float32(0.0)
                for f in range(d):
                    yp += Y[i, f] * p[b, f]
                w = (c - 1) * yp
                for f in range(d):
                    ap[b, f] += w * Y[i, f]
            pap = np.float32(0.0)
            for f in range(d):
                pap += p[b, f] * ap[b, f]
            alpha = rs_old[b] / pap
            rs_new = np.float32(0.0)
            for f in range(d):
                X[u, f] += alpha * p[b, f]
                r[b, f] -= alpha * ap[b, f]
                rs_new += r[b, f] * r[b, f]
            if rs_new < 1e-20:
                active[b] = False
                continue
            beta = rs_new / rs_old[b]
            for f in range(d):
                p[b, f] = r[b, f] + beta * p[b, f]
            rs_old[b] = rs_new


@numba.njit(cache=True, parallel=True)
def solve_rows(indptr, indices, data, X, Y, YtY, cg_steps):
    """Every row of ``X`` (float32, C order) moved ``cg_steps`` conjugate-gradient steps
    towards its least-squares solution given ``Y`` and ``YtY = Y'Y + regularization * I``
    (float32), the rows' nonzeros a CSR (``indptr`` int64, ``indices``, ``data`` float32).
    Blocks of `BLOCK` rows run on numba's threads; BLAS should run one thread meanwhile
    (each block's products call it)."""
    n = X.shape[0]
    n_blocks = (n + BLOCK - 1) // BLOCK
    for k in numba.prange(n_blocks):
        lo = k * BLOCK
        _solve_block(lo, min(lo + BLOCK, n), indptr, indices, data, X, Y, YtY, cg_steps)
