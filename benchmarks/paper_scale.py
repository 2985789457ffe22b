"""The paper's experiment at 1/100, 1/20, 1/4 and full scale: time and memory per stage.

Generates fave-shaped logs (TwitterFaveGraph: 283M engagements, 6.7M users, 13M items,
192 chunks 1..192, user degree 1-100, item degree >= 5, the last 23 chunks tested) and
follow-shaped ones (TwitterFollowGraph: 261M edges on 15.5M vertices in 25 chunks, the last 7
tested) as Parquet files in the paper's published columns (``user_index, tweet_index,
time_chunk`` and ``user_index, author_index, time_chunk``), written chunk by chunk so memory
holds one chunk (the naive draw excepted). Three draws are offered:

- ``--draw model``: `sklearn_micro.datasets.iter_engagements`, the paper's generative model;
- ``--draw plain`` (the default): a draw of its own, independent of the package: users in
  communities with a clipped lognormal degree spread over chunks, items born in a chunk with a
  geometric life and a Pareto popularity, each taking at least five engagements in its first
  chunk, four in five engagements going to the user's community. It guards against tuning the
  package to its own generator. ``--item-life L`` sets the items' mean life (3 chunks by
  default): longer lives put more items in a chunk.
- ``--draw naive``: only the summary figures matched (a lognormal user degree clipped to
  1..100, a Zipf item popularity of exponent 0.8, each engagement's chunk uniform over all
  chunks, items of fewer than five engagements dropped): no communities and no item lives,
  so a chunk holds several times the items of the other draws. A stress test of the costs,
  not a log the model is meant for. It is drawn whole in memory (about 70 bytes an
  engagement: 1.0 GB at 1/20).

Then it runs ``python -m sklearn_micro.cli reproduce`` on each file as a subprocess (so each
run's peak memory is its own), reads the per-stage table the command writes to
``--out/stages.json``, and prints a table per run (seconds, peak memory, throughput, bytes
and microseconds per engagement) and the growth curve across scales.

    python benchmarks/paper_scale.py --scales 0.01 0.05 --k 1000 --dim 128
    python benchmarks/paper_scale.py --scales 0.01 0.05 0.25 --k 5000 --k-follows-scale
    python benchmarks/paper_scale.py --generate-only --scales 0.05 --data-dir /work/data-scale
    python benchmarks/paper_scale.py --scales 0.05 --draw naive   # or --item-life 10
    python benchmarks/paper_scale.py --from-reproduce OUT1 OUT2 ...

``--from-reproduce`` reads the stage tables of earlier ``sklearn-micro reproduce --preset``
runs (their ``--out`` directories) and prints each stage's cpu microseconds and peak bytes
per engagement of the log side by side, one column per run.

At a fixed K an interest holds more of a chunk's items as the log grows, and each user's
ranking scans them, so the rolling evaluations grow faster than the log. With
``--k-follows-scale`` K is ``--k`` times the scale (the paper's K = 5,000 at full scale is
50 at 1/100, 250 at 1/20, 1,250 at 1/4), so an interest holds about as many items at every
scale, as in the paper's experiment, whose K grows with the log.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

FAVE = dict(engagements=283_000_000, users=6_700_000, items=13_000_000, chunks=192,
            first_chunk=1, test_chunks=23, columns=("user_index", "tweet_index", "time_chunk"))
FOLLOW = dict(engagements=261_000_000, users=12_000_000, items=3_500_000, chunks=25,
              first_chunk=0, test_chunks=7, columns=("user_index", "author_index", "time_chunk"))
SHAPES = {"fave": FAVE, "follow": FOLLOW}
SCALES = {0.01: "1/100", 0.05: "1/20", 0.1: "1/10", 0.25: "1/4", 1.0: "full"}


def _writer(path: Path, columns):
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(name, pa.int64()) for name in columns])
    return pq.ParquetWriter(str(path), schema, compression="zstd"), schema


def _write_chunk(writer, schema, user, item, chunk) -> None:
    import pyarrow as pa

    writer.write_table(pa.Table.from_arrays(
        [pa.array(np.asarray(user, np.int64)), pa.array(np.asarray(item, np.int64)),
         pa.array(np.full(len(user), chunk, np.int64))], schema=schema))


def plain_users(rng, n_users, n_engagements, *, degree=(1, 100), n_communities=None):
    """The plain draw's users: ``(degree, community, n_communities)``, the first draws of
    ``rng``. ``n_communities`` defaults to one per 300 users (at least 10), so a larger log
    has more communities of the same size."""
    lo, hi = degree
    mean = n_engagements / n_users
    sigma = 1.2
    mu = np.log(mean)
    for _ in range(60):  # the lognormal's location whose clipped, rounded mean is `mean`
        draw = np.clip(np.rint(rng.lognormal(mu, sigma, 200_000)), lo, hi).mean()
        mu += np.log(mean / draw)
    user_degree = np.clip(np.rint(rng.lognormal(mu, sigma, n_users)), lo, hi).astype(np.int64)
    n_communities = n_communities or max(10, n_users // 300)
    return user_degree, rng.integers(0, n_communities, n_users), n_communities


def plain_chunks(n_users, n_items, n_chunks, n_engagements, *, degree=(1, 100),
                 min_item_degree=5, lifetime=3.0, n_communities=None, seed=0):
    """Yield ``(chunk, user, item)`` of a fave-shaped log, one chunk at a time (0-based).

    Users: a community each and a degree from a lognormal clipped to ``degree``, scaled so
    the degrees sum to about ``n_engagements``; a user's remaining engagements fall in chunk
    t with probability 1 / (chunks left), so each user keeps their degree exactly. Items: a
    community, a birth chunk spread like the engagements, a geometric life of mean
    ``lifetime`` and a Pareto popularity; the first ``min_item_degree`` engagements of an
    item are in its birth chunk. Every other engagement picks its item by popularity among
    the live items of the user's community (four in five) or of all communities.
    """
    rng = np.random.default_rng(seed)
    user_degree, user_community, n_communities = plain_users(
        rng, n_users, n_engagements, degree=degree, n_communities=n_communities)
    item_community = rng.integers(0, n_communities, n_items)
    item_birth = np.sort(rng.integers(0, n_chunks, n_items))
    item_death = np.minimum(item_birth + rng.geometric(1.0 / lifetime, n_items) - 1,
                            n_chunks - 1)
    popularity = rng.pareto(1.2, n_items) + 1.0
    remaining = user_degree.copy()
    users = np.arange(n_users)
    for t in range(n_chunks):
        count = rng.binomial(remaining, 1.0 / (n_chunks - t))
        remaining -= count
        user = np.repeat(users, count)
        born = np.flatnonzero(item_birth == t)
        live = np.flatnonzero((item_birth <= t) & (item_death >= t))
        item = np.empty(user.shape[0], np.int64)
        own = np.minimum(born.shape[0] * min_item_degree, user.shape[0])
        slots = rng.permutation(user.shape[0])
        first, rest = slots[:own], slots[own:]
        item[first] = np.repeat(born, min_item_degree)[:own]
        # the live items by community, with cumulative popularity for inverse-cdf draws
        order = live[np.argsort(item_community[live], kind="stable")]
        cum = np.cumsum(popularity[order])
        bounds = np.searchsorted(item_community[order], np.arange(n_communities + 1))
        community = user_community[user[rest]]
        empty = bounds[community + 1] == bounds[community]
        anywhere = (rng.random(rest.shape[0]) < 0.2) | empty
        start = np.where(anywhere, 0, bounds[community])
        stop = np.where(anywhere, order.shape[0], bounds[community + 1])
        low = np.where(start > 0, cum[np.maximum(start - 1, 0)], 0.0)
        high = cum[stop - 1]
        target = low + rng.random(rest.shape[0]) * (high - low)
        pick = np.minimum(np.searchsorted(cum, target, side="right"), stop - 1)
        item[rest] = order[pick]
        yield t, user, item


def naive_chunks(n_users, n_items, n_chunks, n_engagements, *, degree=(1, 100),
                 min_item_degree=5, zipf=0.8, seed=0):
    """Yield ``(chunk, user, item)`` of the naive draw, one chunk at a time (0-based).

    Users: a degree from a lognormal (mean log 3.2, sd 1) rescaled so the degrees sum to
    about ``n_engagements``, clipped to ``degree``; every engagement picks its item by a
    Zipf popularity of exponent ``zipf`` over all items and its chunk uniformly; a user
    engages an item at most once, and items of fewer than ``min_item_degree`` engagements
    are dropped with their engagements.
    """
    rng = np.random.default_rng(seed)
    lo, hi = degree
    user_degree = np.clip(np.rint(rng.lognormal(3.2, 1.0, n_users)), lo, hi)
    user_degree = np.clip(np.rint(user_degree * n_engagements / user_degree.sum()), lo, hi)
    user = np.repeat(np.arange(n_users), user_degree.astype(np.int64))
    weight = 1.0 / np.arange(1, n_items + 1) ** zipf
    item = rng.choice(n_items, size=user.shape[0], p=weight / weight.sum())
    chunk = rng.integers(0, n_chunks, user.shape[0])
    _, first = np.unique(user * n_items + item, return_index=True)
    user, item, chunk = user[first], item[first], chunk[first]
    keep = np.bincount(item, minlength=n_items)[item] >= min_item_degree
    user, item, chunk = user[keep], item[keep], chunk[keep]
    order = np.argsort(chunk, kind="stable")
    user, item, chunk = user[order], item[order], chunk[order]
    bounds = np.searchsorted(chunk, np.arange(n_chunks + 1))
    for t in range(n_chunks):
        yield t, user[bounds[t]:bounds[t + 1]], item[bounds[t]:bounds[t + 1]]


def model_chunks(n_users, n_items, n_chunks, n_engagements, *, n_interests=1000, seed=0):
    """Yield ``(chunk, user, item)`` of `iter_engagements`, the paper's generative model."""
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:  # run as a script from anywhere: the package beside it
        sys.path.insert(0, root)
    from sklearn_micro.datasets import iter_engagements

    for log in iter_engagements(n_users, n_items, n_chunks, n_interests,
                                n_engagements=n_engagements, random_state=seed):
        yield int(log.chunk[0]), log.user, log.item


def generate(path: Path, shape: str, scale: float, draw: str, seed: int = 0,
             item_life: float = 3.0) -> dict:
    """Write a ``shape``-shaped log at ``scale`` to ``path`` (Parquet); return its sizes."""
    spec = SHAPES[shape]
    n_users = round(spec["users"] * scale)
    n_items = round(spec["items"] * scale)
    n_engagements = round(spec["engagements"] * scale)
    if draw == "model":
        chunks = model_chunks(n_users, n_items, spec["chunks"], n_engagements, seed=seed)
    elif draw == "naive":
        chunks = naive_chunks(n_users, n_items, spec["chunks"], n_engagements, seed=seed)
    else:
        chunks = plain_chunks(n_users, n_items, spec["chunks"], n_engagements, seed=seed,
                              lifetime=item_life)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    writer, schema = _writer(tmp, spec["columns"])
    rows = 0
    start = time.perf_counter()
    with writer:
        for t, user, item in chunks:
            _write_chunk(writer, schema, user, item, t + spec["first_chunk"])
            rows += len(user)
    os.replace(tmp, path)
    return dict(path=str(path), rows=rows, seconds=time.perf_counter() - start)


def _scale_name(scale: float) -> str:
    return SCALES.get(scale, f"{scale:g}")


def data_path(data_dir: Path, shape: str, scale: float, draw: str,
              item_life: float = 3.0) -> Path:
    tag = _scale_name(scale).replace("/", "-")
    if draw == "plain" and item_life != 3.0:
        draw = f"plain-life{item_life:g}"
    return data_dir / f"{shape}-{draw}-{tag}.parquet"


def run_job(path: Path, shape: str, out: Path, k: int, dim: int, extra=()) -> dict:
    """Run ``reproduce`` on ``path`` in a subprocess; its stages, wall time and peak."""
    spec = SHAPES[shape]
    train_chunks = spec["chunks"] - spec["test_chunks"]
    cmd = [sys.executable, "-m", "sklearn_micro.cli", "reproduce", "--data", str(path),
           "--k", str(k), "--train-chunks", str(train_chunks), "--dim", str(dim),
           "--out", str(out), "--quiet", *extra]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parents[1])
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with status {status}")
    stages = json.loads((out / "stages.json").read_text())
    # the command resets the high-water mark at each stage, so the run's peak is the
    # largest of its stages' (ru_maxrss reports the last stage's alone)
    peak = max([usage.ru_maxrss * 1024] + [s["peak"] for s in stages["stages"]])
    return dict(wall=wall, peak=peak, stages=stages, cpu=usage.ru_utime + usage.ru_stime)


def stage_table(run: dict, n_engagements: int) -> str:
    lines = ["| stage | seconds | cpu seconds | peak MiB | throughput | peak bytes/eng. | "
             "cpu us/eng. |", "|---|---:|---:|---:|---:|---:|---:|"]
    for stage in run["stages"]["stages"]:
        rate = (f"{stage['work'] / stage['seconds']:,.0f} {stage['unit']}/s"
                if stage["seconds"] > 0 and stage["work"] else "")
        lines.append(
            f"| {stage['name']} | {stage['seconds']:.1f} | {stage['cpu_seconds']:.1f} | "
            f"{stage['peak'] / 2**20:,.0f} | {rate} | {stage['peak'] / n_engagements:.0f} | "
            f"{1e6 * stage['cpu_seconds'] / n_engagements:.2f} |")
    lines.append(f"| whole run | {run['wall']:.1f} | {run['cpu']:.1f} | "
                 f"{run['peak'] / 2**20:,.0f} | {n_engagements / run['wall']:,.0f} "
                 f"engagements/s | {run['peak'] / n_engagements:.0f} | "
                 f"{1e6 * run['cpu'] / n_engagements:.2f} |")
    return "\n".join(lines)


def growth_tables(growth) -> str:
    """Whole runs across scales, and each stage's peak and cpu time per engagement as the
    slope between consecutive scales (what one more engagement costs)."""
    lines = ["| shape | scale | K | engagements | seconds | cpu seconds | peak MiB | "
             "cpu us/eng. | peak bytes/eng. |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for shape, scale, n, run in growth:
        lines.append(f"| {shape} | {_scale_name(scale)} | {run.get('k', '')} | {n:,} | "
                     f"{run['wall']:.0f} | "
                     f"{run['cpu']:.0f} | {run['peak'] / 2**20:,.0f} | "
                     f"{1e6 * run['cpu'] / n:.2f} | {run['peak'] / n:.0f} |")
    lines += ["", "| shape | scales | stage | peak: bytes per added engagement | "
              "cpu: us per added engagement |", "|---|---|---|---:|---:|"]
    for (shape, s0, n0, r0), (shape1, s1, n1, r1) in zip(growth, growth[1:], strict=False):
        if shape1 != shape:
            continue
        before = {s["name"]: s for s in r0["stages"]["stages"]}
        for stage in r1["stages"]["stages"]:
            old = before.get(stage["name"])
            if old is None:
                continue
            lines.append(
                f"| {shape} | {_scale_name(s0)} to {_scale_name(s1)} | {stage['name']} | "
                f"{(stage['peak'] - old['peak']) / (n1 - n0):.0f} | "
                f"{1e6 * (stage['cpu_seconds'] - old['cpu_seconds']) / (n1 - n0):.2f} |")
    return "\n".join(lines)


def reproduce_costs(outs) -> str:
    """Each stage's cpu microseconds and peak bytes per engagement of the log, one column
    per `reproduce` output directory (its ``checkpoints/stages.json`` and ``config.json``)."""
    runs = []
    for out in map(Path, outs):
        stages = json.loads((out / "checkpoints" / "stages.json").read_text())["stages"]
        config = json.loads((out / "checkpoints" / "config.json").read_text())
        n = next((s["work"] for s in stages if s["name"] == "drawing"), None)
        if not n:
            raise SystemExit(f"{out}: no drawing stage in its stage table; --from-reproduce "
                             f"reads runs of `reproduce --preset`, whose drawing counts the "
                             f"log's engagements")
        name = f"{config.get('preset', out.name)} {_scale_name(config.get('scale', 1.0))}"
        runs.append((name, n, {s["name"]: s for s in stages}))
    names = list(dict.fromkeys(name for _, _, stages in runs for name in stages))
    head = " | ".join(f"{name}, cpu us" for name, _, _ in runs)
    peaks = " | ".join(f"{name}, bytes" for name, _, _ in runs)
    lines = [f"| stage | {head} | {peaks} |", "|---|" + "---:|" * (2 * len(runs))]
    for stage in names:
        cpu = [f"{1e6 * st[stage]['cpu_seconds'] / n:.2f}" if stage in st else ""
               for _, n, st in runs]
        peak = [f"{st[stage]['peak'] / n:.0f}" if stage in st else "" for _, n, st in runs]
        lines.append(f"| {stage} | {' | '.join(cpu)} | {' | '.join(peak)} |")
    cpu = [f"**{1e6 * sum(s['cpu_seconds'] for s in st.values()) / n:.2f}**"
           for _, n, st in runs]
    peak = [f"**{max(s['peak'] for s in st.values()) / n:.0f}**" for _, n, st in runs]
    lines.append(f"| **whole run** | {' | '.join(cpu)} | {' | '.join(peak)} |")
    lines.append("")
    for name, n, st in runs:
        wall = sum(s["seconds"] for s in st.values())
        cpu = sum(s["cpu_seconds"] for s in st.values())
        peak = max(s["peak"] for s in st.values())
        lines.append(f"- {name}: {n:,} engagements, {wall:,.0f} s of stages, {cpu:,.0f} cpu "
                     f"seconds, peak {peak / 2**20:,.0f} MiB")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[0.01, 0.05])
    parser.add_argument("--shapes", nargs="+", default=["fave"], choices=list(SHAPES))
    parser.add_argument("--draw", default="plain", choices=["plain", "model", "naive"],
                        help="naive is drawn whole in memory (about 70 bytes an engagement: "
                        "1 GB at 1/20, 20 GB at full scale)")
    parser.add_argument("--item-life", type=float, default=3.0,
                        help="the plain draw's mean item life in chunks")
    parser.add_argument("--data-dir", default="/work/data-scale" if Path("/work").is_dir()
                        else "paper-scale-data")
    parser.add_argument("--out", default="paper-scale-results")
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--k-follows-scale", action="store_true",
                        help="K = --k times the scale (--k is then full scale's K)")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generate-only", action="store_true")
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--from-json", metavar="FILE", nargs="+",
                        help="print the tables of earlier runs (their growth.json) again")
    parser.add_argument("--from-reproduce", metavar="OUT", nargs="+",
                        help="the cost per engagement of earlier `reproduce` runs' stages")
    args = parser.parse_args(argv)
    if args.from_reproduce:
        print(reproduce_costs(args.from_reproduce))
        return 0
    data_dir, out_dir = Path(args.data_dir), Path(args.out)
    growth = []
    if args.from_json:
        for path in args.from_json:
            for g in json.loads(Path(path).read_text()):
                growth.append((g["shape"], g["scale"], g["engagements"], g["run"]))
        growth.sort(key=lambda g: (g[0], g[1]))
        for shape, scale, n, run in growth:
            print(f"\n### {shape}, {_scale_name(scale)} ({n:,} engagements)\n")
            print(stage_table(run, n))
        print("\n### Growth across scales\n")
        print(growth_tables(growth))
        return 0
    for shape in args.shapes:
        for scale in sorted(args.scales):
            path = data_path(data_dir, shape, scale, args.draw, args.item_life)
            if args.regenerate or not path.is_file():
                made = generate(path, shape, scale, args.draw, args.seed, args.item_life)
                print(f"wrote {made['rows']:,} rows to {path} in {made['seconds']:.0f} s",
                      flush=True)
            if args.generate_only:
                continue
            import pyarrow.parquet as pq

            n = pq.ParquetFile(path).metadata.num_rows
            k = max(2, round(args.k * scale)) if args.k_follows_scale else args.k
            run = run_job(path, shape, out_dir / f"{path.stem}-k{k}", k, args.dim)
            run["k"] = k
            print(f"\n### {shape}, {_scale_name(scale)} ({n:,} engagements), K = {k:,}, "
                  f"{args.dim} dimensions\n")
            print(stage_table(run, n), flush=True)
            growth.append((shape, scale, n, run))
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / f"{path.stem}-k{k}.json").write_text(json.dumps(
                [dict(shape=shape, scale=scale, engagements=n, run=run)]))
    if len(growth) > 1:
        print("\n### Growth across scales\n")
        print(growth_tables(growth))
    if growth:
        (out_dir / "growth.json").write_text(json.dumps(
            [dict(shape=g[0], scale=g[1], engagements=g[2], run=g[3]) for g in growth]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
