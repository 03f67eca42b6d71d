"""`RunSpec` + `run_spec(spec)`: one simulation described as data — the path `infersim run`, sweeps,
capacity planning and validation all take, so they cannot drift apart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim.catalog import cache  # profiles, presets and model files loaded once per process (sweeps, plans)
from sim.catalog.deployment import engine_for  # the one engine resolver of every command
from sim.catalog.engine_config import EngineConfig, line_of, read_yaml  # the preset loader's YAML helpers
from sim.catalog.hardware import HardwareProfile
from sim.cluster.simulate import simulate
from sim.engine.build import SimResult
from sim.errors import ConfigError, pydantic_error_to_config_error
from workloads.request import Request

class RunSpec(BaseModel):
    """Everything one run depends on. Defaults: `llama-3.1-8b` on `h100-sxm` under `vllm`, in the
    engine's default quantization."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: str = Field(description="JSONL trace file")
    hw: str = Field("h100-sxm", description="hardware profile name or YAML file")
    model: str = Field("llama-3.1-8b", description="catalog name, *.gguf file or HF config.json")
    quant: str | None = Field(None, description="quantization; None = the engine's default")
    engine: str = Field("vllm", description="engine preset name or YAML file")
    engine_file: str | None = Field(None, description="YAML mapping of engine fields applied over `engine`")
    overrides: dict[str, Any] = Field(default_factory=dict, description="engine fields to override")
    concurrency: int | None = Field(None, ge=1, description="closed loop with N clients; None = open loop")
    rate_scale: float = Field(1.0, gt=0, description="arrival rate multiplier: arrival_s / rate_scale")
    seed: int = 0
    efficiency_from: str | None = Field(
        None, description="profile (e.g. a calibrated one) whose efficiencies replace the hardware profile's")
    sort: bool = Field(False, description="sort the trace by arrival_s first (reads it whole)")
    record_iterations: bool = True
    fast_forward: bool = Field(True, description="jump over runs of identical decode steps (off: debug)")
    replicas: int = Field(1, ge=1, le=1024, description="replicas of the deployment behind a router")
    router: str | None = Field(None, description="routing policy (sim.cluster.router); None = round-robin")
    disagg: str | None = Field(
        None, description="disaggregated prefill/decode pools, PREFILL_HW:N,DECODE_HW:M (sim.cluster.disagg); hw is then unused")


#: deployment fields a sweep grid or `overrides` may carry next to the engine's (not EngineConfig fields)
DEPLOYMENT_FIELDS = ("replicas", "router", "disagg")


def split_deployment(spec: RunSpec) -> RunSpec:
    """A spec whose `overrides` carry deployment fields (`replicas`, `router`: a sweep grid puts
    every non-run key there) with those moved to their own fields."""
    moved = {k: spec.overrides[k] for k in DEPLOYMENT_FIELDS if k in spec.overrides}
    if not moved:
        return spec
    rest = {k: v for k, v in spec.overrides.items() if k not in moved}
    return make_spec(**{**spec.model_dump(), "overrides": rest, **moved})


def resolve_engine(spec: RunSpec, hw: HardwareProfile) -> EngineConfig:
    """The engine every command prices a deployment with (sim.catalog.deployment.engine_for: the preset, its
    defaults for this device, the checkpoint's release format, the KV dtype the engine picks for the
    quantization, the weight-format rules), then the `engine_file` fields, then the command-line
    overrides — a user's explicit value always wins."""
    engine = engine_for(spec.engine, hw, cache.model(spec.model), spec.quant, (str(spec.model),))
    if spec.engine_file:
        engine = _apply_engine_file(engine, Path(spec.engine_file))
    unknown = set(spec.overrides) - set(EngineConfig.model_fields)
    if unknown:
        raise ConfigError(f"unknown engine field(s): {', '.join(sorted(unknown))}", field="overrides")
    return engine.with_overrides(**spec.overrides)


def _apply_engine_file(engine: EngineConfig, path: Path) -> EngineConfig:
    """The engine with the fields of a YAML mapping replaced; errors name the file and line."""
    if not path.is_file():
        raise ConfigError("file not found", file=path, field="--engine-file")
    data = read_yaml(path)
    try:
        return engine.with_overrides(**data)
    except ConfigError as e:
        raise ConfigError(e.problem, file=path, line=line_of(path, e.field) if e.field else None,
                          field=e.field) from None


def resolve(spec: RunSpec) -> tuple[HardwareProfile, EngineConfig]:
    """The hardware profile and the engine configuration a spec names. With `efficiency_from`,
    the hardware keeps its own peaks but takes the other profile's efficiencies for this engine
    (e.g. a profile calibrated on one machine applied to another's datasheet)."""
    spec = split_deployment(spec)
    hw = cache.profile(spec.hw)
    engine = resolve_engine(spec, hw)
    if spec.efficiency_from:
        # The target keeps its datasheet peaks; the achieved/peak ratios (and, between machines of
        # the same kind, the overheads) come from the source — provenance in calibration.efficiency_from.
        from sim.catalog.hardware import apply_efficiencies

        hw = apply_efficiencies(hw, cache.profile(spec.efficiency_from))
    return hw, engine


def _scaled(requests: Iterator[Request], rate_scale: float, file: str | None = None) -> Iterator[Request]:
    """The same trace offered `rate_scale` times faster (arrival times divided by it)."""
    if rate_scale == 1.0:
        yield from requests
        return
    from dataclasses import replace

    from workloads.request import MAX_TIME_S

    for r in requests:
        arrival_s = r.arrival_s / rate_scale
        if not arrival_s <= MAX_TIME_S:  # the trace's own times were checked; a tiny scale can push them out
            raise ConfigError(f"{r.arrival_s:g} s / --rate-scale {rate_scale:g} = {arrival_s:g} s is past the "
                              f"trace horizon of {MAX_TIME_S:g} s", file=file, line=r.line, field="arrival_s")
        yield replace(r, arrival_s=arrival_s)


def run_spec(spec: RunSpec) -> SimResult:
    """Resolve names, stream the trace and simulate."""
    from workloads.trace import iter_trace

    spec = split_deployment(spec)
    hw, engine = resolve(spec)
    model = cache.model(spec.model)
    quant = spec.quant or engine.default_quant
    model.quant(quant)  # unknown names fail before the trace is read
    notes = deployment_notes(spec, hw, engine, model, quant)  # impossible deployments fail here (exit 2)
    requests = _scaled(iter_trace(spec.trace, sort=spec.sort), spec.rate_scale, spec.trace)
    extra = {"trace": spec.trace, "rate_scale": spec.rate_scale, "efficiency_from": spec.efficiency_from}
    if notes:
        extra["deployment_notes"] = notes
    if spec.disagg:
        from sim.cluster.disagg import parse_disagg, simulate_disagg

        if spec.replicas > 1:
            raise ConfigError("give pool sizes in --disagg instead of --replicas", field="--replicas")
        pre, dec = parse_disagg(spec.disagg)
        profiles = {}
        for name in (pre.hw, dec.hw):
            profiles[name] = resolve(spec.model_copy(update={"hw": name, "disagg": None}))[0]
        return simulate_disagg(
            requests, prefill_hw=profiles[pre.hw], decode_hw=profiles[dec.hw], prefill_replicas=pre.replicas,
            decode_replicas=dec.replicas, model=model, quant=quant, engine_for=lambda hw: resolve_engine(spec, hw),
            router=spec.router or "least-outstanding", concurrency=spec.concurrency, seed=spec.seed,
            record_iterations=spec.record_iterations, fast_forward=spec.fast_forward, config_extra=extra)
    return simulate(
        requests, hw=hw, model=model, quant=quant, engine=engine, concurrency=spec.concurrency, seed=spec.seed,
        record_iterations=spec.record_iterations, fast_forward=spec.fast_forward,
        replicas=spec.replicas, router=spec.router, config_extra=extra,
    )


def deployment_notes(spec: RunSpec, hw: HardwareProfile, engine: EngineConfig, model, quant: str) -> list[str]:
    """The engine x quantization x hardware x parallelism table (sim.catalog.compat) applied to a
    spec: raises ConfigError for an impossible deployment (each pool's hardware under --disagg);
    returns what runs differently from what was asked."""
    from sim.catalog.compat import check_deployment

    if not spec.disagg:
        return check_deployment(hw, engine, model, quant)
    from sim.cluster.disagg import parse_disagg

    notes: list[str] = []
    for pool in parse_disagg(spec.disagg):
        pool_hw = resolve(spec.model_copy(update={"hw": pool.hw, "disagg": None}))[0]
        notes += [n for n in check_deployment(pool_hw, resolve_engine(spec, pool_hw), model, quant) if n not in notes]
    return notes


def make_spec(**fields: Any) -> RunSpec:
    """A RunSpec from keyword fields, bad values reported as a one-line `ConfigError`."""
    try:
        return RunSpec(**fields)
    except ValidationError as e:
        raise pydantic_error_to_config_error(e) from None
