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


# ---- a workload long enough to plan on (issue 41) -------------------------------------------------

#: Requests a plan searches on at least. A p90 needs 100 completed requests (sim.engine.verdict) and
#: steady state needs arrivals spanning ~10 times the time a request spends in the system, i.e. 10 x
#: the mean number in the system (Little's law): a few hundred concurrent requests on one replica
#: near its capacity. 2,000 covers both for one GPU-sized replica; `--min-requests` raises it.
MIN_PLAN_REQUESTS = 2000
#: From this many requests on, a plan skips the bootstrap: the max rate's spread over resamples
#: shrinks as 1/sqrt(n) (the azure-h100 example's 2,867 requests gave ranges of -3% to +11% around each
#: answer; x 1/sqrt(50,000 / 2,867) = 0.24: about the search's own 2% bracket), while each re-search would
#: replay the whole trace again.
MAX_BOOTSTRAP_REQUESTS = 50_000


@dataclass(frozen=True)
class PlanWorkload:
    """The trace a plan searches on (`path`), how it was made (`text`), and the resampled traces of
    the uncertainty estimate (`replicates`: one per bootstrap re-search)."""

    source: str
    source_requests: int
    path: str
    requests: int
    extended: bool
    seed: int
    replicates: tuple[str, ...]
    text: str


def _resampled(reqs: list, gaps, n: int, rng, tag: str) -> list:
    """n requests drawn with replacement from `reqs` (each keeps its prompt, output and max_tokens
    together, and its prefix fields, so a shared prefix stays shared), with inter-arrival gaps drawn
    with replacement from `gaps`. Sessions are not kept (a resampled request is open loop)."""
    import dataclasses

    import numpy as np

    idx = rng.integers(0, len(reqs), n)
    arrivals = np.concatenate([[0.0], np.cumsum(rng.choice(gaps, n - 1))]) if n > 1 else np.zeros(1)
    return [dataclasses.replace(reqs[i], id=f"{tag}{k}", arrival_s=round(float(a), 6), session_id=None, think_s=None,
                                line=None) for k, (i, a) in enumerate(zip(idx, arrivals))]


def plan_workload(path: str, *, min_requests: int = MIN_PLAN_REQUESTS, replicates: int = 5, seed: int = 0,
                  cache_dir: str | Path | None = None) -> PlanWorkload:
    """The workload a plan searches on, and its bootstrap replicates.

    A trace with fewer than `min_requests` requests is extended to `min_requests` by resampling its
    own requests (lengths, together) and its own inter-arrival gaps with a seeded generator; a
    longer trace is searched as it is. Replicate k (1..`replicates`) is the bootstrap of the trace:
    n requests and n - 1 gaps drawn with replacement from the trace's n requests (another trace
    the same process could have produced), then extended to the same length the same way. The
    spread of the max rate over the replicates is the uncertainty that comes from the trace being
    only n requests long. Files are written once under `cache_dir` (default: the system temp
    folder's `infersim-traces/`), named by the trace's hash, the length and the seed.
    """
    import hashlib
    import tempfile

    import numpy as np

    from sim.files import file_sha256
    from workloads.trace import load_trace, write_trace

    if min_requests < 1:
        raise ConfigError(f"must be >= 1, got {min_requests}", field="--min-requests")
    if replicates < 0:
        raise ConfigError(f"must be >= 0, got {replicates}", field="--replicates")
    n = trace_stats(path).requests
    if n >= max(min_requests, MAX_BOOTSTRAP_REQUESTS):  # long enough as it is; not held in memory
        return PlanWorkload(path, n, path, n, False, seed, (), (
            f"{display_path(path)}: searched on its {n:,} requests as recorded; no bootstrap re-searches "
            f"(from {MAX_BOOTSTRAP_REQUESTS:,} requests on, the trace's sampling spread is about the search's bracket)"))
    reqs = load_trace(path, sort=True)
    arrivals = np.array([r.arrival_s for r in reqs])
    gaps = np.diff(arrivals)
    if n < 2 or not (gaps > 0).any():
        raise ConfigError("cannot plan on a request rate: all arrivals are at the same time "
                          "(a plan replays the trace at scaled rates; give it arrival times)", file=path, field="arrival_s")
    target = max(n, min_requests)
    digest = hashlib.sha256(f"{file_sha256(path)}:{target}:{seed}".encode()).hexdigest()[:12]
    folder = Path(cache_dir) if cache_dir is not None else Path(tempfile.gettempdir()) / "infersim-traces"
    folder.mkdir(parents=True, exist_ok=True)

    def write(name: str, make) -> str:
        out = folder / f"{Path(path).name.split('.')[0]}-{digest}-{name}.jsonl"
        if not out.is_file():
            write_trace(make(), out)  # written beside and renamed: never a half trace under this name
        return str(out)

    main, extended = path, target > n
    if extended:
        main = write("main", lambda: _resampled(reqs, gaps, target, np.random.default_rng([seed, 0]), "x"))
    reps = []
    for k in range(1, replicates + 1):
        def make(k=k):
            rng = np.random.default_rng([seed, k])
            boot = _resampled(reqs, gaps, n, rng, "b")  # the bootstrap trace: n requests like the original
            boot_gaps = np.diff([r.arrival_s for r in boot])
            return _resampled(boot, boot_gaps if (boot_gaps > 0).any() else gaps, target, rng, f"r{k}-")
        reps.append(write(f"boot{k}", make))
    shown = display_path(path)
    if extended:
        text = (f"{shown} has {n:,} requests, fewer than the {min_requests:,} a plan searches on: searched on "
                f"{target:,} requests resampled from its own lengths and inter-arrival gaps (seed {seed})")
    else:
        text = f"{shown}: searched on its {n:,} requests as recorded"
    if replicates:
        text += (f"; uncertainty from {replicates} bootstrap re-searches (each on a resample of the trace's "
                 f"{n:,} requests, extended the same way)")
    return PlanWorkload(path, n, main, target, extended, seed, tuple(reps), text)
