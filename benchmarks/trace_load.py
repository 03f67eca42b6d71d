"""How long loading a large trace takes, and what it holds in memory while streaming.

    .venv/bin/python benchmarks/trace_load.py [--lines 1000000]

Writes a synthetic trace (Poisson arrivals at 50 req/s, lognormal lengths, every 4th line with a
shared prefix) to a temporary file, then times
  1. `iter_trace` — every line validated by the `TraceLine` model, then turned into a `Request`;
  2. for reference, `json.loads` of every line alone (no validation, no Request): the floor.
Prints wall-clock and CPU seconds (CPU time is less disturbed by other work on the machine).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from workloads.trace import iter_trace


def write_big(path: Path, n: int) -> None:
    rng = np.random.default_rng(1)
    t = np.round(np.cumsum(rng.exponential(1 / 50.0, n)), 6)
    p = np.maximum(rng.lognormal(6.6, 0.7, n).astype(int), 1)
    o = np.maximum(rng.lognormal(5.0, 0.8, n).astype(int), 1)
    with open(path, "w") as fh:
        for i in range(n):
            extra = ', "prefix_id": "sys", "prefix_tokens": 1' if i % 4 == 0 else ""
            fh.write(f'{{"id": "{i}", "arrival_s": {float(t[i])!r}, "prompt_tokens": {p[i]}, "output_tokens": {o[i]}{extra}}}\n')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.jsonl"
        write_big(path, args.lines)
        print(f"trace: {args.lines:,} lines, {path.stat().st_size / 1e6:.1f} MB")

        n, wall, cpu = _timed(lambda: sum(1 for _ in iter_trace(path)))
        print(f"iter_trace (validate + Request):  wall {wall:6.2f} s  cpu {cpu:6.2f} s  {n / cpu:>10,.0f} lines/cpu-s")

        tracemalloc.start()
        for _ in iter_trace(path):
            pass
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"iter_trace peak traced memory:    {peak / 1e6:6.2f} MB (streaming, nothing kept)")

        def parse_only() -> int:
            with open(path, encoding="utf-8") as fh:
                return sum(1 for line in fh if json.loads(line))

        n2, wall2, cpu2 = _timed(parse_only)
        print(f"json.loads only (the floor):      wall {wall2:6.2f} s  cpu {cpu2:6.2f} s  {n2 / cpu2:>10,.0f} lines/cpu-s")


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


if __name__ == "__main__":
    main()
