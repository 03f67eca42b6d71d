"""The few numbers of a trace that capacity planning needs: its native rate and output lengths."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from sim.errors import ConfigError


@dataclass(frozen=True)
class TraceStats:
    """Summary of a trace file.

    `native_rate_rps` = (n - 1) / (last arrival - first arrival): the number of inter-arrival gaps
    over the span they cover. Replaying the trace with every arrival time divided by `s` (a
    `rate_scale` of s) multiplies it by exactly s, so rate_scale = target_rps / native_rate_rps.
    """

    path: str
    requests: int
    first_arrival_s: float
    last_arrival_s: float
    mean_prompt_tokens: float
    mean_output_tokens: float

    @property
    def span_s(self) -> float:
        return self.last_arrival_s - self.first_arrival_s

    @property
    def native_rate_rps(self) -> float | None:
        if self.requests < 2 or not self.span_s > 0:
            return None
        return (self.requests - 1) / self.span_s

    def rate_scale_for(self, rate_rps: float) -> float:
        """The `rate_scale` that replays this trace at `rate_rps` requests per second."""
        native = self.native_rate_rps
        if native is None:
            raise ConfigError(
                "cannot replay at a request rate: all arrivals are at the same time "
                "(use concurrency, or a trace with arrival times)", file=self.path, field="arrival_s")
        return rate_rps / native


@lru_cache(maxsize=32)
def trace_stats(path: str) -> TraceStats:
    """Stream a trace once (validating it) and keep the figures above."""
    from workloads.trace import iter_trace

    n = 0
    first = last = 0.0
    prompt_sum = output_sum = 0
    for req in iter_trace(path):
        if n == 0:
            first = last = req.arrival_s
        first = min(first, req.arrival_s)
        last = max(last, req.arrival_s)
        prompt_sum += req.prompt_tokens
        output_sum += req.output_tokens
        n += 1
    if n == 0:
        raise ConfigError("trace has no requests", file=path)
    return TraceStats(path, n, first, last, prompt_sum / n, output_sum / n)


def display_path(path: str | Path) -> str:
    """A path as people read it in tables: relative to the current folder, unless that climbs more
    than three folders (or crosses drives) — then absolute."""
    import os

    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return str(path)
    return rel if rel.split(os.sep)[:4].count("..") < 4 else str(Path(path).resolve())


GENERATOR_SUFFIXES = (".yaml", ".yml")


def materialize(path: str | Path, cache_dir: str | Path | None = None) -> Path:
    """A workload file as a JSONL trace path.

    A `.jsonl` (or `.jsonl.gz`) trace is returned as is. A `.yaml` file is a generator spec (the
    `infersim trace gen --spec` format, `workloads.generate.GenSpec`): its requests are generated
    (seeded, so always the same ones) and written once to `cache_dir/<name>-<sha of the spec>.jsonl`
    (default: the system temp folder's `infersim-traces/`), which is then replayed like any trace.
    """
    path = Path(path)
    if path.suffix not in GENERATOR_SUFFIXES:
        return path
    import hashlib
    import tempfile

    from workloads.generate import build_spec, generate, load_spec
    from workloads.trace import write_trace

    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    folder = Path(cache_dir) if cache_dir is not None else Path(tempfile.gettempdir()) / "infersim-traces"
    out = folder / f"{path.stem}-{digest}.jsonl"
    if not out.is_file():
        spec = build_spec(load_spec(path), file=path)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".jsonl.part")
        write_trace(generate(spec), tmp)
        tmp.replace(out)  # never leave a half-written trace under the final name
    return out
