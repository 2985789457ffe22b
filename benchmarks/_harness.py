"""What the benchmark scripts share: the machine's description, timing, peak memory,
markdown tables, and the planted stream that the sampler and Dask benchmarks sample.

Every script prints markdown to stdout (the tables quoted in docs/benchmarks.md and the
user guide) and its progress to stderr.
"""

from __future__ import annotations

import copy
import os
import platform
import resource
import sys
import time
from contextlib import contextmanager

import numpy as np


def log(message: str) -> None:
    """Progress, to stderr."""
    print(message, file=sys.stderr, flush=True)


def fmt(x: float) -> str:
    """A figure with about three significant digits."""
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def table(header: list[str], rows: list[list]) -> str:
    """A markdown table, the first column left-aligned and the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if j == 0 else "---:" for j in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def machine(*modules) -> list[str]:
    """Markdown lines describing the run: the package, the cores, the versions of numpy,
    numba, the BLAS and of ``modules`` (imported modules), and the load average."""
    import numba
    from threadpoolctl import threadpool_info

    import sklearn_micro

    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    blas = ", ".join(f"{i['internal_api']} {i['version']}" for i in threadpool_info()
                     if i["user_api"] == "blas") or "none found"
    others = "".join(f", {m.__name__} {getattr(m, '__version__', '?')}" for m in modules)
    return [f"- sklearn-micro {sklearn_micro.__version__}",
            f"- machine: {os.cpu_count()} cores (nproc), {cpu}",
            f"- python {platform.python_version()}, numpy {np.__version__}, numba "
            f"{numba.__version__}{others}, BLAS: {blas}",
            f"- load average at start (1, 5, 15 min): {load_average()}"]


def header(title: str, script: str, argv=None, *modules) -> None:
    """Print the title, the command that makes the output, and the machine."""
    args = " ".join(sys.argv[1:] if argv is None else argv)
    command = f"python benchmarks/{script}" + (f" {args}" if args else "")
    print(f"# {title}\n\n`{command}`\n")
    print("\n".join(machine(*modules)) + "\n")


class Timer:
    """Wall and cpu seconds (all threads of the process) of a block."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
        return False


def best_of(function, repeat: int) -> tuple[float, object]:
    """The least cpu seconds of ``repeat`` calls, and the last call's result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        with Timer() as t:
            out = function()
        best = min(best, t.cpu)
    return best, out


def reset_peak() -> bool:
    """Reset the process's resident high-water mark (Linux); False where it cannot be."""
    if not os.access("/proc/self/clear_refs", os.W_OK):
        return False
    with open("/proc/self/clear_refs", "w") as f:  # "5" resets VmHWM to VmRSS
        f.write("5")
    return True


def resident_bytes(field: str = "VmHWM") -> int:
    """The process's resident peak (VmHWM, since the last `reset_peak`) or its resident
    memory now (``field="VmRSS"``); ``ru_maxrss`` where /proc is not there."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (
        1 if sys.platform == "darwin" else 1024)


@contextmanager
def peak_above():
    """The resident peak of a block above the memory at its start, in bytes: read
    ``.bytes`` after the block. Counts numba's and numpy's arrays alike."""
    class Peak:
        bytes = 0

    peak = Peak()
    base = resident_bytes("VmRSS")
    reset_peak()
    try:
        yield peak
    finally:
        peak.bytes = max(0, resident_bytes() - base)


def planted_stream(n_users: int, n_interests: int, n_train: int, n_test: int,
                   items_per_chunk: int, *, min_support: int = 1, max_support: int = 10,
                   seed: int = 0):
    """Draw a training chunk (0) and a test chunk (1) from MiCRO's generative model.

    Interests have power-law sizes. Each user has ``min_support`` to ``max_support``
    interests (``P(s) ∝ s^-1.5``), picked by interest size, and ``theta_u ~ Dir(1)`` over them;
    users' activity is log-normal. Each chunk has its own items (all new in the test
    chunk); an item belongs to one interest and ``phi[k, t]`` is skewed towards a few
    items of interest ``k``. Every user engages at least once in training.

    Returns the training log, the training items' interests, the test log (all int64
    arrays of shape (n, 3)) and the users' support sizes.
    """
    rng = np.random.default_rng(seed)
    K = n_interests
    size = rng.permutation(np.arange(1, K + 1) ** -0.8)
    size /= size.sum()

    s_values = np.arange(min_support, max_support + 1)
    p_s = s_values ** -1.5
    s = rng.choice(s_values, n_users, p=p_s / p_s.sum())
    owner = np.repeat(np.arange(n_users), s)
    k = np.minimum(np.searchsorted(np.cumsum(size), rng.random(owner.shape[0])), K - 1)
    key = np.unique(owner * K + k)
    owner, k = key // K, key % K
    ptr = np.zeros(n_users + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=n_users), out=ptr[1:])
    theta = rng.gamma(1.0, size=k.shape[0])
    theta /= np.bincount(owner, weights=theta, minlength=n_users)[owner]
    theta_cum = np.cumsum(theta)  # user u's entries end at u + 1

    activity = rng.lognormal(0.0, 1.0, n_users)
    activity_cum = np.cumsum(activity / activity.sum())
    items_of = np.maximum(1, np.round(items_per_chunk * size)).astype(np.int64)
    first_item = np.zeros(K + 1, np.int64)
    np.cumsum(items_of, out=first_item[1:])

    def engagements(users, chunk, item_base):
        pos = np.searchsorted(theta_cum, users + rng.random(users.shape[0]), side="right")
        z = k[np.clip(pos, ptr[users], ptr[users + 1] - 1)]
        item = item_base + first_item[z] + (items_of[z] * rng.random(z.shape[0]) ** 3).astype(
            np.int64)
        return np.column_stack([users, item, np.full(users.shape[0], chunk)])

    def draw_users(n):
        return np.minimum(np.searchsorted(activity_cum, rng.random(n)), n_users - 1)

    train_users = np.concatenate([np.arange(n_users), draw_users(max(n_train - n_users, 0))])
    train = engagements(train_users, 0, 0)
    test = engagements(np.sort(draw_users(n_test)), 1, first_item[-1])
    interests = (np.arange(first_item[-1]), np.repeat(np.arange(K), items_of))
    return train, interests, test, np.diff(ptr)


def warm_up() -> float:
    """Compile (or load from numba's cache) MiCRO's kernels on a tiny model; seconds."""
    from sklearn_micro import MiCRO

    start = time.perf_counter()
    train, interests, test, _ = planted_stream(200, 8, 2000, 2000, 100, seed=1)
    model = MiCRO(random_state=0, max_sweeps=2).fit(train, item_interest=interests)
    # the chunk in partitions on threads, then as one chain: both sweep kernels
    copy.deepcopy(model).set_params(n_jobs=2, min_partition_work=0).partial_fit(test)
    model.partial_fit(test)
    model.recommend(np.arange(50), m=10)
    return time.perf_counter() - start
