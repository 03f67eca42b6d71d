"""How long loading a large trace takes: the streaming loader vs one pydantic model per line.

    .venv/bin/python benchmarks/trace_load.py [--lines 1000000]

Writes a synthetic trace (Poisson arrivals at 50 req/s, lognormal lengths, every 4th line with a
shared prefix) to a temporary file, then times
  1. `iter_trace`: pydantic-core's JSON parser + plain-Python checks, pydantic only for bad lines;
  2. for comparison, `TraceLine.model_validate_json` on every line, then the same `Request`.
Wall-clock figures: they vary with the machine and its load.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from workloads.request import Request
from workloads.trace import TraceLine, iter_trace


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

        t0 = time.perf_counter()
        n = sum(1 for _ in iter_trace(path))
        dt = time.perf_counter() - t0
        print(f"iter_trace (fast path):                {dt:6.2f} s  {n / dt:>10,.0f} lines/s")

        tracemalloc.start()
        for _ in iter_trace(path):
            pass
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"iter_trace peak traced memory:         {peak / 1e6:6.2f} MB (streaming, nothing kept)")

        t0 = time.perf_counter()
        with open(path, encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                m = TraceLine.model_validate_json(line)
                Request(str(m.id), m.arrival_s, m.prompt_tokens, m.output_tokens, m.max_tokens or m.output_tokens,
                        m.session_id, m.prefix_id, m.prefix_tokens, None, i)
        dt2 = time.perf_counter() - t0
        print(f"pydantic model per line, then Request: {dt2:6.2f} s  {n / dt2:>10,.0f} lines/s")


if __name__ == "__main__":
    main()
