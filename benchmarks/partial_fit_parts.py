"""Where a test chunk's ``partial_fit`` spends its time, from a run's checkpoints.

Loads ``DIR/checkpoints/<method> fit.pkl`` and the log of a ``reproduce --out DIR`` and
calls ``partial_fit`` on its first ``--chunks`` test chunks, in order, with the parts of
`MiCRO._sample_chunk` timed, in wall and cpu seconds of the process: laying the chunk out
(`build_layout`, its `entry_map`), splitting it into partitions, the sweeps, the merges of
the partitions' counts, the log-likelihoods and the commit. The parts that run on the
sweeps' threads (`sample_partition` and the sweep kernel in it) are wall seconds summed
over the threads, without a cpu figure. Also prints the layout's size (support slots and
(item, interest) entries) and the sweeps the chain ran.

With ``--memory`` (Linux), each part also gets its resident peak: the process's high-water
mark (VmHWM, reset as each part starts and ends) while the part ran, above the resident
memory when ``partial_fit`` was called (the log's test chunks and the model's state), so
that the part where the call's peak lies is named. Numba's arrays are counted too (they
are not Python allocations, so tracemalloc would miss them).

To compare two checkouts, run each one's copy of this file on the same run, one after the
other (the file imports the package of its own checkout). docs/scale_history.md quotes it ("A test
chunk at full scale, today").

    python benchmarks/partial_fit_parts.py OUT_FULL --chunks 2
"""

from __future__ import annotations

import collections
import functools
import sys
import threading
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)]

from rolling_chunks import fitted_and_test, run_arguments  # noqa: E402

from sklearn_micro import _gibbs, base, micro  # noqa: E402
from sklearn_micro._log import iter_chunks  # noqa: E402
from sklearn_micro._stages import peak_bytes as _peak_bytes  # noqa: E402
from sklearn_micro._stages import reset_peak as _reset_peak  # noqa: E402

# (module or class, attribute, label), in the order the table prints them
PARTS = [
    (micro.MiCRO, "_chunk_engagements", "chunk's engagements"),
    (micro.MiCRO, "_carried_supports", "carried supports"),
    (micro._ChunkSupports, "adopt_item_interests", "supports of new users"),
    (micro, "build_layout", "layout (build_layout)"),
    (_gibbs.sampler, "entry_map", "  of which entry_map"),
    (micro, "run_chain", "chain (run_chain)"),
    (_gibbs, "partition_layout", "  partitions"),
    (_gibbs, "sample_partition", "  partitions' sweeps (threads summed)"),
    (_gibbs.sampler, "sweep_partition", "    of which the sweep kernel"),
    (_gibbs, "_merge", "  merges"),
    (_gibbs.sampler, "chunk_log_likelihood", "  log-likelihoods"),
    (micro, "_main_interests", "items' main interests"),
    (micro.MiCRO, "_commit_chunk", "commit"),
    (micro, "_grown_supports", "  of which the supports"),
    (base.SeenItems, "add", "  of which the seen items"),
    (micro.MiCRO, "_add_recent", "  of which the recent items"),
    (micro.MiCRO, "_set_chunk", "  of which phi and popularity"),
]


class Peaks:
    """The resident high-water mark of each open part (nested parts count in the parts
    around them), read and reset as a part starts and ends; off unless ``on``."""

    def __init__(self, on: bool):
        self.on = on and _reset_peak()
        self.open: list[str] = []
        self.peak: dict[str, int] = {}
        self.lock = threading.Lock()

    def _fold(self) -> None:
        peak = _peak_bytes()
        for label in self.open:
            self.peak[label] = max(self.peak.get(label, 0), peak)
        _reset_peak()

    def enter(self, label: str) -> None:
        # the sweeps' threads enter parts too: only the calling thread's parts are followed
        if self.on and threading.current_thread() is threading.main_thread():
            with self.lock:
                self._fold()
                self.open.append(label)

    def leave(self, label: str) -> None:
        if self.on and threading.current_thread() is threading.main_thread():
            with self.lock:
                self._fold()
                self.open.remove(label)


def _timed(owner, name, label, spent, peaks):
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        c0, w0 = time.process_time(), time.perf_counter()
        peaks.enter(label)
        try:
            return fn(*args, **kwargs)
        finally:
            peaks.leave(label)
            spent[label][0] += time.perf_counter() - w0
            spent[label][1] += time.process_time() - c0

    setattr(owner, name, wrapper)


def _resident_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def main(argv=None) -> int:
    args = run_arguments(__doc__.splitlines()[0], 2, argv, memory=True)

    spent: dict = collections.defaultdict(lambda: [0.0, 0.0])
    peaks = Peaks(args.memory)
    if args.memory and not peaks.on:
        print("--memory: the high-water mark cannot be reset here (Linux only); no peaks")
    for owner, name, label in PARTS:
        _timed(owner, name, label, spent, peaks)
    layouts = []
    build = micro.build_layout

    def build_layout(*a, **k):
        layout, counts = build(*a, **k)
        layouts.append((int(layout.entry_ptr[-1]), layout.n_entries))
        return layout, counts

    micro.build_layout = build_layout

    model, test = fitted_and_test(args.out, args.method, args.train_chunks)
    print(f"{args.out}, {args.method}, n_jobs={model.n_jobs}")
    for pos, (chunk, rows) in enumerate(iter_chunks(test.chunk)):
        if pos == args.chunks:
            break
        log_chunk = test.take(rows)
        spent.clear()
        layouts.clear()
        peaks.peak.clear()
        base = _resident_bytes()
        c0, w0 = time.process_time(), time.perf_counter()
        peaks.enter("partial_fit")
        model.partial_fit(log_chunk)
        peaks.leave("partial_fit")
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        slots = " and ".join(f"{s:,} slots, {e:,} entries" for s, e in layouts)
        print(f"\nchunk {chunk}: {len(rows):,} engagements, {model.n_sweeps_[chunk]} sweeps "
              f"in {len(layouts)} passes; layouts: {slots}\n")

        def peak(label, base=base):
            if not peaks.on:
                return ""
            return f" {(peaks.peak.get(label, base) - base) / 2**20:,.0f} |"

        if peaks.on:
            print(f"resident when called: {base / 2**20:,.0f} MiB; peaks above it\n")
        head = "| part | wall s | cpu s |" + (" peak MiB |" if peaks.on else "")
        print(head + "\n|---|---:|---:|" + ("---:|" if peaks.on else ""))
        print(f"| partial_fit | {wall:.1f} | {cpu:.1f} |{peak('partial_fit')}")
        for _, _, label in PARTS:
            if label in spent:
                w, c = spent[label]
                # the process's cpu time while a thread works counts the other threads too
                cpu_s = "" if "threads" in label or "kernel" in label else f"{c:.1f}"
                mib = "" if "threads" in label or "kernel" in label else peak(label)
                print(f"| {label} | {w:.1f} | {cpu_s} |{mib}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
