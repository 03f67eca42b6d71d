"""Measure a trace on a real engine, simulate the same trace and configuration, compare.

Order matters for the user: every input that can be wrong (hardware profile, engine preset and
overrides, model, quantization) is resolved before the replay starts, so a typo costs nothing.
The model to simulate is read from the GGUF that was served (`sim.catalog.lookup.get_model(path)`); with
an HTTP endpoint it is `--model`, or the server's model id when that is a GGUF path.

The simulation gets the engine's real limits where the replay knows them: for the in-process
driver, its sequence slots, batch size and context (`max_num_seqs`, `max_num_batched_tokens`,
`context_size`); explicit user overrides win.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from calibrate.replay.compare import Row, at_speed, cdf_html, compare, on_clock, simulated_trace
from calibrate.replay.errors import EngineUnreachable, ReplayInterrupted
from calibrate.replay.records import ReplayResult
from sim.errors import ConfigError
from sim.files import atomic_write_text, atomic_write_with


@dataclass(frozen=True)
class ValidationReport:
    """A replay, the simulation of the same trace, and their metric-by-metric comparison."""

    measured: ReplayResult
    predicted: object  # sim.engine.build.SimResult
    rows: tuple[Row, ...]
    engine: object  # sim.catalog.engine_config.EngineConfig actually simulated
    hw_name: str
    model_name: str
    quant: str
    speed_margin: float = 0.0  # the rows' `band`: predicted on a machine this share faster / slower

    def as_dict(self) -> dict:
        return {
            "speed_margin": self.speed_margin,
            "hw": self.hw_name, "engine": self.engine.name, "scheduler": self.engine.scheduler,
            "model": self.model_name, "quant": self.quant,
            "engine_overrides": {"max_num_seqs": self.engine.max_num_seqs,
                                 "max_num_batched_tokens": self.engine.max_num_batched_tokens,
                                 "context_size": self.engine.context_size},
            "metrics": [r.as_dict() for r in self.rows],
            "measured": self.measured.summary,
            "predicted": self.predicted.summary,
        }

    def write(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        self.measured.write(out / "measured")
        pred = out / "predicted"
        atomic_write_with(pred / "requests.csv", lambda p: self.predicted.requests.to_csv(p, index=False))
        atomic_write_text(pred / "summary.json", json.dumps(self.predicted.summary, indent=2) + "\n")
        atomic_write_text(out / "comparison.json", json.dumps(self.as_dict(), indent=2) + "\n")
        return out

    def write_html(self, path: str | Path, *, title: str) -> Path:
        return cdf_html(self.measured.requests, self.predicted.requests, path, title)


def _resolve_model(model: str | None, local_model: Path | None):
    from sim.catalog.lookup import get_model

    name = model or (str(local_model) if local_model is not None else None)
    return None if name is None else get_model(name)


def run_validation(
    requests,
    *,
    hw: str,
    engine: str,
    replay: Callable[[list], ReplayResult],
    model: str | None = None,
    quant: str | None = None,
    concurrency: int | None = None,
    overrides: dict | None = None,
    local_model: Path | None = None,
    seed: int = 0,
    log: Callable[[str], None] = lambda msg: None,
    out: Path | None = None,
    speed_margin: float = 0.05,
) -> ValidationReport:
    """Replay `requests` with `replay`, simulate them on `hw` under `engine`, and compare.

    `speed_margin`: also simulate the trace on a machine that much faster and slower (every step
    × 1 ∓ margin) and give each metric's range (`Row.band`). A calibrated profile describes the
    machine at the moment it was probed; a shared or thermally limited machine drifts by a few %
    within minutes (5 % is common on the 2-core VM this was built on: benchmarks/fidelity.md), and
    an open-loop trace near capacity turns a few % of speed into much larger latency changes. The
    band says how much of a miss such a drift could explain. 0: not simulated."""
    from sim.catalog.engine_config import load_engine
    from sim.catalog.hardware import load_profile

    if not 0 <= speed_margin < 0.5:
        raise ConfigError(f"must be in [0, 0.5), got {speed_margin}", field="--speed-margin")
    profile = load_profile(hw)
    base_engine = load_engine(engine)
    user_overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    base_engine.with_overrides(**user_overrides)  # a bad override fails here, before the replay
    spec = _resolve_model(model, local_model)
    if spec is not None:
        q = quant or spec.quant_override or base_engine.default_quant
        spec.weight_bytes(q)  # unknown quantization fails now

    log(f"measuring {len(requests)} requests "
        + (f"with {concurrency} closed-loop clients" if concurrency else "open loop at the trace's times"))
    try:
        measured = replay(requests)
    except (EngineUnreachable, ReplayInterrupted) as e:
        if out is not None and e.partial is not None:
            e.partial.write(Path(out) / "measured")
        raise
    try:
        return _predict_and_compare(measured, requests, spec=spec, quant=quant, base_engine=base_engine,
                                    user_overrides=user_overrides, profile=profile, concurrency=concurrency,
                                    seed=seed, log=log, out=out, speed_margin=speed_margin, names=(model or "",))
    except KeyboardInterrupt:  # the measurement is what took the time: keep it
        if out is not None:
            measured.write(Path(out) / "measured")
        raise ReplayInterrupted("stopped while simulating", partial=measured) from None


def _predict_and_compare(measured, requests, *, spec, quant, base_engine, user_overrides, profile, concurrency,
                         seed, log, out, speed_margin, names=()) -> ValidationReport:
    """Simulate what `measured` replayed and compare (the second half of `run_validation`). The engine is
    the one `run` resolves for this device and checkpoint (sim.catalog.deployment.engine_for), then the
    limits a local target ran with, then the user's overrides."""
    from sim.catalog.deployment import engine_for

    if spec is None:  # endpoint without --model: the server's model id may be the GGUF it serves
        served = measured.config.get("model") or ""
        if not served.endswith(".gguf") or not Path(served).is_file():
            raise ConfigError(f"cannot tell which model the server runs (it says {served!r}); pass --model",
                              field="--model")
        spec = _resolve_model(served, None)
    asked = quant or spec.quant_override
    resolved = engine_for(base_engine, profile, spec, asked, names)
    q = asked or resolved.default_quant

    engine_limits = {}
    if measured.config.get("target") == "local":  # the simulated engine gets the driver's real limits
        engine_limits = {"max_num_seqs": measured.config["n_seq_max"],
                         "max_num_batched_tokens": measured.config["n_batch"],
                         "ubatch_tokens": measured.config["n_batch"],  # the driver sets n_ubatch = n_batch
                         "context_size": measured.config["n_ctx"],
                         "context_mode": "split",  # one KV stream per sequence: n_ctx / n_seq_max each
                         # ... so llama.cpp cuts a mixed batch into several passes (sim.cost.llamacpp)
                         "per_sequence_kv_streams": True}
    eng = resolved.with_overrides(**{**engine_limits, **user_overrides})

    sim_requests = simulated_trace(measured, list(requests))
    if not sim_requests:
        raise EngineUnreachable(f"no request completed on the engine ({measured.error or 'see the records'})",
                                partial=measured)
    log(f"simulating {len(sim_requests)} completed requests: {spec.name} {q} on {profile.name}, "
        f"engine {eng.name} (scheduler {eng.scheduler}, max_num_seqs {eng.max_num_seqs}, "
        f"max_num_batched_tokens {eng.max_num_batched_tokens}, context {eng.context_size})")
    from sim.cluster.simulate import simulate

    predicted = simulate(sim_requests, hw=profile, model=spec, quant=q, engine=eng,
                         concurrency=concurrency, seed=seed)
    rows = compare(measured.summary, predicted.summary)
    if speed_margin:
        ends = []
        for speed in (1 - speed_margin, 1 + speed_margin):  # every step `speed` times as long
            again = simulate(on_clock(sim_requests, speed), hw=profile,
                             model=spec, quant=q, engine=eng, concurrency=concurrency, seed=seed,
                             record_iterations=False)
            ends.append([at_speed(r.predicted, r.unit, speed) for r in compare(measured.summary, again.summary)])
        rows = [replace(r, band=None if None in (a, b) else (min(a, b), max(a, b)))
                for r, a, b in zip(rows, *ends)]
    report = ValidationReport(measured, predicted, tuple(rows), eng, profile.name, spec.name, q, speed_margin)
    if out is not None:
        report.write(out)
    return report
