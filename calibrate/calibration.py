"""One calibration end to end: measure, fit, build the profile with its provenance, write it.

`calibrate_model` drives llama.cpp probes on this machine (`calibrate.probes`);
`calibrate_endpoint` times a running server (`calibrate.endpoint`). Both fit the same six
cost-model parameters (`calibrate.fit`) and produce the same kind of profile (`calibrate.profile`).
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence
from urllib.parse import urlsplit

from calibrate.fit import (
    FitResult,
    Observation,
    fit_cost_params,
    int8_speedup_for,
    physical_bounds,
    unreliable_reasons,
)
from calibrate.machine import RawRates, describe_machine, measure_raw_rates_isolated
from calibrate.probe_worker import FLASH_ATTENTION
from calibrate.probes import ProbePoint, ProbeRun, build_plan, run_plan
from calibrate.profile import build_profile, write_profile_atomic
from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import HardwareProfile, user_profiles_dir
from sim.catalog.models import ModelSpec
from sim.catalog.quant import QuantFormat
from sim.cost.params import CostParams
from sim.cost.roofline import CostModel
from sim.files import file_sha256

# Any positive placeholder: the fit replaces every parameter, CostModel only needs one to exist.
_PLACEHOLDER = CostParams(1e10, 1e11, 1e11)


@dataclass(frozen=True)
class CalibrationResult:
    profile: HardwareProfile
    observations: tuple[Observation, ...]
    fit: FitResult
    raw: RawRates | None
    probe_run: ProbeRun | None
    path: Path | None
    # why the fit is unreliable (calibrate/fit.py `unreliable_reasons`); with reasons and no
    # `force`, nothing was written (`path` is None)
    unreliable: tuple[str, ...] = ()


def default_profile_path(name: str) -> Path:
    return user_profiles_dir() / f"{name}.yaml"


def _now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):  # pragma: no cover - not on Windows
        return None


def observations_from_points(points: tuple[ProbePoint, ...]) -> list[Observation]:
    """The fit's data: each probe point's median seconds."""
    return [
        Observation(p.id, p.kind, p.prefill_tokens, p.prefill_context, p.decode_batch, p.decode_context, p.median_s)
        for p in points
    ]


def _sig(x: float) -> float:
    """`x` to 5 significant digits (a stored timed run: 10 ppm, far below the runs' own noise)."""
    return float(f"{x:.5g}")


def _point_records(observations, fit: FitResult, points: Sequence[ProbePoint] | None = None) -> list[dict]:
    """Every point for the provenance block: shape, measured, spread, fitted prediction, error, split.
    `points[i]` is the probe point behind `observations[i]` (by position: an id such as decode-1@512
    can be probed in two sessions)."""
    out = []
    for i, (o, pred, held) in enumerate(zip(observations, fit.predicted_s, fit.heldout)):
        rec = {
            "id": o.id, "kind": o.kind, "prefill_tokens": o.prefill_tokens, "prefill_context": o.prefill_context,
            "decode_batch": o.decode_batch, "decode_context": round(o.decode_context, 2),
            "measured_s": o.measured_s, "predicted_s": pred, "error": pred / o.measured_s - 1.0,
            "split": "heldout" if held else "train",
        }
        p = points[i] if points else None
        if p is not None:
            # every timed run is kept (to 5 significant digits), so `calibrate --extend` can pool
            # a later round's runs with these and fit again
            rec.update({"p25_s": p.p25_s, "p75_s": p.p75_s, "min_s": p.min_s, "max_s": p.max_s, "runs": p.runs,
                        "undisturbed_runs": p.undisturbed_runs, "median_all_s": p.median_all_s,
                        "spread": p.spread, "session": p.session, "rounds": p.rounds,
                        "samples_s": [_sig(x) for x in p.samples_s], "cpu_s": [_sig(x) for x in p.cpu_s]})
        out.append(rec)
    return out


def probe_kv_padding(engine: str, hw: HardwareProfile, spec: ModelSpec) -> int:
    """The KV-view padding the probes of `spec` ran with on `engine` on `hw`, as the simulator prices that engine's
    iterations there (its hardware rules: llama.cpp 256 cells on a GPU, none on a CPU, whose flash attention skips
    masked cells). The probe worker leaves the context's flash_attn_type at llama.cpp's default, auto, which turns
    flash attention on for the CPU (probe_worker.FLASH_ATTENTION): the padding is the one with flash attention on."""
    return load_engine(engine).for_hardware(hw).with_overrides(
        flash_attention=FLASH_ATTENTION, flash_attention_architectures=["*"]).kv_padding_for(spec)


def _finish(
    *, name: str, spec: ModelSpec, quant: QuantFormat, observations: list[Observation], raw: RawRates | None,
    peaks: tuple[float, float] | None, int8_speedup: float, memory_bytes: float | None, seed: int, engine: str,
    calibration: dict, kind: str, display_name: str, vendor: str, out: Path | None, write: bool,
    points: Sequence[ProbePoint] | None = None, probe_run: ProbeRun | None = None, force: bool = False,
) -> CalibrationResult:
    kv_pad = probe_kv_padding(engine, build_profile(
        name=name, params=_PLACEHOLDER, quant=quant, raw_bandwidth_bytes_per_s=1.0, raw_matmul_flops_per_s=1.0,
        memory_bytes=memory_bytes, kind=kind, display_name=display_name, vendor=vendor, engine=engine,
        calibration=calibration), spec)
    cost = CostModel(spec, quant, _PLACEHOLDER, kv_pad=kv_pad)
    bw_peak, mm_peak = peaks if peaks else (None, None)
    bounds = physical_bounds(bw_peak, mm_peak, int8_speedup=int8_speedup)
    fit = fit_cost_params(cost, observations, bounds, seed=seed)
    unreliable = tuple(unreliable_reasons(fit))
    calibration = {**calibration, "fit": {**fit.to_dict(), "attention_kv_padding": kv_pad},
                   "probe_points": _point_records(observations, fit, points)}
    if unreliable:  # written only with --force, and marked so: `run` prints it in its error band
        calibration["unreliable"] = list(unreliable)
    profile = build_profile(
        name=name, params=fit.params, quant=quant,
        raw_bandwidth_bytes_per_s=bw_peak or fit.params.bandwidth_bytes_per_s,
        raw_matmul_flops_per_s=mm_peak or fit.params.matmul_flops_per_s,
        memory_bytes=memory_bytes, kind=kind, display_name=display_name, vendor=vendor, engine=engine,
        calibration=calibration,
    )
    path = None
    if write and (force or not unreliable):
        path = write_profile_atomic(profile, out or default_profile_path(name))
    return CalibrationResult(profile, tuple(observations), fit, raw, probe_run, path, unreliable)


def calibrate_model(
    model_path: str | Path,
    *,
    name: str,
    spec: ModelSpec,
    quant: QuantFormat,
    quick: bool = False,
    threads: int,
    gpu_layers: int = 0,
    seed: int = 0,
    engine: str = "llama.cpp",
    out: Path | None = None,
    write: bool = True,
    force: bool = False,
    on_event: Callable[[dict], None] | None = None,
    timeout_s: float = 1800.0,
) -> CalibrationResult:
    """Probe llama.cpp with `model_path` on this machine, fit, and write the profile `name`."""
    model_path = Path(model_path).resolve()
    machine = describe_machine()
    load_before = _loadavg()
    if on_event:
        on_event({"event": "phase", "name": "raw machine probes"})
    raw = measure_raw_rates_isolated(threads=threads, quick=quick)
    if on_event:
        on_event({"event": "raw", "raw": raw.to_dict()})
    plan = build_plan(model_path, n_ctx_train=spec.max_context, quick=quick, n_threads=threads,
                      n_gpu_layers=gpu_layers, seed=seed)
    run = run_plan(plan, on_event=on_event, timeout_s=timeout_s)
    observations = observations_from_points(run.points)
    calibration = {
        "method": "llama.cpp probes",
        "date": _now_utc(),
        "quick": quick,
        "threads": threads,
        "gpu_layers": gpu_layers,
        "seed": seed,
        "machine": {**machine, "loadavg_before": load_before, "loadavg_after": _loadavg()},
        "versions": {
            "infersim": _version("infersim"),
            "llama_cpp_python": _version("llama_cpp_python"),
            "llama_cpp": run.llama_cpp_version,
            "llama_system_info": run.llama_system_info,
        },
        **({"extra_weight_buffers_off": run.extra_bufts_off} if run.extra_bufts_off else {}),
        "model": {
            "file": str(model_path), "name": spec.name, "architecture": spec.architecture,
            "quantization": quant.name, "size_bytes": model_path.stat().st_size, "sha256": file_sha256(model_path),
        },
        "raw_probes": raw.to_dict(),
        "load_time_s": {"cold": run.load_cold_s, "warm": list(run.load_warm_s), "warm_median": run.load_warm_median_s},
        "contexts": [dict(c) for c in run.contexts],
        "probe_wall_s": round(run.wall_s, 1),
        "rounds": max((p.rounds for p in run.points), default=1),
        "statistic": (
            "median of the undisturbed timed runs after warm-up (CPU share >= 0.85 x the point's best, and "
            "within a round CPU seconds <= 1.25 x the point's fewest; median_all_s keeps the median of every run)"
        ),
    }
    vendor = {"AuthenticAMD": "AMD", "GenuineIntel": "Intel"}.get(machine.get("cpu_vendor", ""), machine.get("cpu_vendor", ""))
    return _finish(
        name=name, spec=spec, quant=quant, observations=observations, raw=raw,
        peaks=None if gpu_layers else (raw.memory_bandwidth_bytes_per_s, raw.matmul_fp32_flops_per_s),
        int8_speedup=int8_speedup_for(machine["simd"]), memory_bytes=machine["memory_bytes"], seed=seed, engine=engine,
        calibration=calibration, kind="cpu" if not gpu_layers else "gpu",
        display_name=f"{machine['cpu']} x{threads} threads (calibrated)", vendor=vendor, out=out, write=write, force=force,
        points=run.points, probe_run=run,
    )


def is_loopback_url(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def calibrate_endpoint(
    url: str,
    *,
    name: str,
    spec: ModelSpec,
    quant: QuantFormat,
    quick: bool = False,
    seed: int = 0,
    engine: str = "llama.cpp",
    peaks_from: HardwareProfile | None = None,
    threads: int | None = None,
    allow_remote: bool = False,
    out: Path | None = None,
    write: bool = True,
    force: bool = False,
    on_phase: Callable[[str], None] | None = None,
    timeout_s: float = 600.0,
) -> CalibrationResult:
    """Time the server at `url`, fit, and write the profile `name`.

    Peaks (for efficiencies and bounds): `peaks_from`'s datasheet figures when given; else, for a
    loopback endpoint, this machine's raw probes; else none (efficiencies 1, rates = fitted).
    """
    from calibrate.endpoint import endpoint_plan, measure_endpoint

    machine = describe_machine()
    raw = None
    peaks = None
    int8_speedup = 1.0
    kind, vendor, memory_bytes, display = "cpu", "", None, name
    if peaks_from is not None:
        peaks = (peaks_from.bandwidth_bytes_per_s, peaks_from.peak_flops(quant.compute_format))
        kind, vendor, memory_bytes = peaks_from.kind, peaks_from.vendor, peaks_from.memory_bytes
        display = f"{peaks_from.display_name or peaks_from.name} via {engine} endpoint (calibrated)"
        # A CPU datasheet peak is fp32 FMA; llama.cpp's int8 dot products may exceed it (fit.py).
        int8_speedup = 4.0 if peaks_from.kind == "cpu" else 1.0
    elif is_loopback_url(url):
        if on_phase:
            on_phase("raw machine probes")
        raw = measure_raw_rates_isolated(threads=threads or machine["threads_available"], quick=quick)
        peaks = (raw.memory_bandwidth_bytes_per_s, raw.matmul_fp32_flops_per_s)
        int8_speedup, memory_bytes = int8_speedup_for(machine["simd"]), machine["memory_bytes"]
        display = f"{machine['cpu']} via {engine} endpoint (calibrated)"
    plan = endpoint_plan(quick=quick, max_context=spec.max_context)
    load_before = _loadavg()
    observations, driven = measure_endpoint(url, plan, timeout_s=timeout_s, allow_remote=allow_remote, on_phase=on_phase)
    calibration = {
        "method": "endpoint",
        "date": _now_utc(),
        "quick": quick,
        "seed": seed,
        "endpoint": url,
        "driven": driven,
        "plan": plan.__dict__,
        "machine": {**machine, "loadavg_before": load_before, "loadavg_after": _loadavg()} if raw else None,
        "peaks_from": peaks_from.name if peaks_from is not None else ("raw probes of this machine" if raw else None),
        "versions": {"infersim": _version("infersim")},
        "model": {"name": spec.name, "quantization": quant.name},
        "raw_probes": raw.to_dict() if raw else None,
    }
    return _finish(
        name=name, spec=spec, quant=quant, observations=observations, raw=raw, peaks=peaks, int8_speedup=int8_speedup,
        memory_bytes=memory_bytes, seed=seed, engine=engine, calibration=calibration, kind=kind,
        display_name=display, vendor=vendor, out=out, write=write, force=force,
    )


def _stored_point_events(calibration: dict, origin: str) -> list[dict]:
    """A profile's stored probe points as "point" events `merge_rounds` can pool with new runs."""
    from sim.errors import ConfigError

    records = calibration.get("probe_points") or []
    if not records or any(not r.get("samples_s") or "session" not in r for r in records):
        raise ConfigError("the profile does not keep its timed runs (calibrated by an older infersim); "
                          "calibrate afresh", file=origin)
    return [{**r, "event": "point", "median_s": r["measured_s"]} for r in records]


def extension_plan(calibration: dict, model_path: str | Path, spec: ModelSpec, rounds: int) -> dict:
    """The probe plan a calibration ran (same quick/full set, threads, GPU layers, seed), `rounds` times."""
    plan = build_plan(model_path, n_ctx_train=spec.max_context, quick=bool(calibration.get("quick")),
                      n_threads=int(calibration.get("threads") or 1), n_gpu_layers=int(calibration.get("gpu_layers") or 0),
                      seed=int(calibration.get("seed") or 0))
    plan["rounds"] = int(rounds)
    return plan


def extend_calibration(
    profile: HardwareProfile,
    model_path: str | Path,
    *,
    origin: str | Path,
    rounds: int = 1,
    out: Path | None = None,
    write: bool = True,
    force: bool = False,
    on_event: Callable[[dict], None] | None = None,
    timeout_s: float = 1800.0,
) -> CalibrationResult:
    """Probe the profile's own plan `rounds` more times and fit again on every run so far.

    Why: on a shared machine the speed drifts (a virtual CPU's neighbour on the sibling hyperthread
    slowed a 128-token prompt from 243 to 300 ms within 40 s here), so runs taken at one moment fit
    that moment. Each extension pools its runs with the profile's stored ones point by point
    (`probes.merge_rounds`: the median of the undisturbed runs of all rounds), so a profile extended
    at several times describes the machine over all of them. The model file (by SHA-256), the
    machine's CPU, the threads, the plan (quick or full) and the raw peaks stay the calibration's.
    `origin` names the profile's file for error messages.
    """
    from calibrate.probes import merge_rounds
    from sim.catalog.lookup import get_model
    from sim.errors import ConfigError

    cal = dict(profile.calibration or {})
    if cal.get("method") != "llama.cpp probes":
        raise ConfigError("only a profile calibrated with llama.cpp probes can be extended "
                          f"(this one: {cal.get('method') or 'not calibrated'})", file=origin)
    prior = _stored_point_events(cal, str(origin))
    model_path = Path(model_path).resolve()
    recorded = cal.get("model") or {}
    if file_sha256(model_path) != recorded.get("sha256"):
        raise ConfigError(f"not the model file the profile was calibrated with ({recorded.get('file')}, "
                          f"sha256 {str(recorded.get('sha256'))[:12]}...)", file=model_path)
    machine = describe_machine()
    then = cal.get("machine") or {}
    for key in ("cpu", "physical_cores", "threads_available"):
        if then.get(key) != machine.get(key):
            raise ConfigError(f"the profile was calibrated on another machine ({key}: {then.get(key)!r}, "
                              f"here {machine.get(key)!r})", file=origin)
    spec = get_model(str(model_path))
    quant = spec.quant(recorded.get("quantization") or spec.default_quant)
    threads, gpu_layers, seed = int(cal["threads"]), int(cal.get("gpu_layers") or 0), int(cal.get("seed") or 0)
    plan = extension_plan(cal, model_path, spec, rounds)
    if cal.get("extra_weight_buffers_off"):
        plan["extra_bufts"] = False  # the kernels the pooled rounds ran (run_plan's fallback)
    load_before = _loadavg()
    run = run_plan(plan, on_event=on_event, timeout_s=timeout_s)
    new_events = [p.to_event() for p in run.points]
    if {(e["session"], e["id"]) for e in new_events} != {(e["session"], e["id"]) for e in prior}:
        raise ConfigError("the probe plan changed since the profile was calibrated (another infersim version); "
                          "calibrate afresh", file=origin)
    points = tuple(ProbePoint.from_event(e) for e in merge_rounds(prior + new_events, threads))
    extension = {"date": _now_utc(), "rounds": int(rounds), "probe_wall_s": round(run.wall_s, 1),
                 "loadavg_before": load_before, "loadavg_after": _loadavg()}
    calibration = {k: v for k, v in cal.items() if k not in ("fit", "probe_points", "engine")}
    calibration.update(
        date=extension["date"],
        rounds=max(p.rounds for p in points),
        extensions=[*(cal.get("extensions") or []), extension],
        probe_wall_s=round(float(cal.get("probe_wall_s") or 0.0) + run.wall_s, 1),
    )
    raw = cal.get("raw_probes") or {}
    peaks = None if gpu_layers else (raw["memory_bandwidth_bytes_per_s"], raw["matmul_fp32_flops_per_s"])
    return _finish(
        name=profile.name, spec=spec, quant=quant, observations=observations_from_points(points), raw=None,
        peaks=peaks, int8_speedup=int8_speedup_for(then.get("simd") or []), memory_bytes=then.get("memory_bytes"),
        seed=seed, engine=cal.get("engine") or "llama.cpp", calibration=calibration, kind=profile.kind,
        display_name=profile.display_name, vendor=profile.vendor, out=out, write=write, force=force, points=points,
        probe_run=run,
    )
