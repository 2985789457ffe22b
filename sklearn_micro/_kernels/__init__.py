"""Numba kernels. Nothing here imports scikit-learn; every kernel compiles with cache=True."""
