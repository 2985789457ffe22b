"""The event log alone (no HTTP): engagements a second, time per commit and bytes on disk
per engagement, for requests of 1, 100 and 10,000 engagements, 8 requests a commit.

    python benchmarks/event_log.py
"""

import tempfile
import time
from pathlib import Path

import numpy as np

from sklearn_micro.serving.eventlog import EventLog

GROUP = 8


def main() -> None:
    rng = np.random.default_rng(0)
    print("| engagements a request | engagements/s | ms a commit | bytes/engagement | "
          "read all, s |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for size in (1, 100, 10_000):
            log = EventLog(Path(folder) / f"events-{size}.sqlite3")
            n = 2_000 if size == 1 else 100_000
            user = rng.integers(0, 300_000, n).tolist()
            item = rng.integers(0, 500_000, n).tolist()
            start, commits = time.perf_counter(), 0
            for s in range(0, n, size * GROUP):
                log.append([(4, user[a:a + size], item[a:a + size])
                            for a in range(s, min(n, s + size * GROUP), size)])
                commits += 1
            seconds = time.perf_counter() - start
            log._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            start = time.perf_counter()
            assert log.after(0).n_engagements == n
            read = time.perf_counter() - start
            print(f"| {size:,} | {n / seconds:,.0f} | {seconds / commits * 1000:.2f} | "
                  f"{log.size_bytes() / n:.1f} | {read:.3f} |")
            log.close()


if __name__ == "__main__":
    main()
