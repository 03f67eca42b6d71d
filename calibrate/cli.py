"""`infersim calibrate`: fit a hardware profile from real llama.cpp runs (or a running server).

    infersim calibrate --model MODEL.gguf --name my-box [--quick] [--threads N] [--gpu-layers N]
    infersim calibrate --endpoint http://127.0.0.1:8080 --model MODEL --name my-box-llamaserver

Progress and tables go to stderr; `--json` prints the fit summary as JSON on stdout.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sim.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_GGUF_MAGIC = b"GGUF"


def _check_name(name: str) -> str:
    if not _NAME.match(name) or name.endswith((".yaml", ".yml")):
        raise ConfigError(
            f"'{name}' is not a profile name: use letters, digits, '.', '_' and '-' (it becomes NAME.yaml)",
            field="--name",
        )
    return name


def _check_gguf(path: Path) -> None:
    if not path.is_file():
        raise ConfigError("file not found", file=path, field="--model")
    with open(path, "rb") as f:
        if f.read(4) != _GGUF_MAGIC:
            raise ConfigError("not a GGUF file (no 'GGUF' magic at the start)", file=path, field="--model")


def _require_llama_cpp() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        raise ConfigError("llama-cpp-python is not installed: pip install 'infersim[calibrate]'", field="--model")


def _ms(x: float) -> str:
    return f"{x * 1e3:,.3f}" if x < 0.01 else f"{x * 1e3:,.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def render_summary(console: Console, result) -> None:
    """Measured vs fitted for every point, then the fitted parameters against the raw peaks."""
    fit = result.fit
    table = Table(title="Probe points: measured vs fitted", box=box.SIMPLE_HEAD, pad_edge=False)
    for header, justify in [("point", "left"), ("measured ms", "right"), ("spread", "right"),
                            ("fitted ms", "right"), ("error", "right"), ("", "left")]:
        table.add_column(header, justify=justify, no_wrap=True)
    points = {r["id"]: r for r in (result.profile.calibration or {}).get("probe_points", [])}
    for o, pred, held in zip(result.observations, fit.predicted_s, fit.heldout):
        spread = points.get(o.id, {}).get("spread")
        table.add_row(o.id, _ms(o.measured_s), "-" if spread is None else f"{spread * 100:.0f}%",
                      _ms(pred), _pct(pred / o.measured_s - 1), "held out" if held else "")
    console.print(table)

    p = fit.params
    prof = result.profile
    eff = prof.efficiency
    params = Table(title="Fitted cost-model parameters", box=box.SIMPLE_HEAD, pad_edge=False)
    for header, justify in [("parameter", "left"), ("fitted", "right"), ("peak (raw probe)", "right"),
                            ("efficiency", "right")]:
        params.add_column(header, justify=justify, no_wrap=True)
    params.add_row("memory bandwidth", f"{p.bandwidth_bytes_per_s / 1e9:.2f} GB/s",
                   f"{prof.memory_bandwidth_gb_per_s:.2f} GB/s", f"{eff.bandwidth:.3f}")
    params.add_row("matmul", f"{p.matmul_flops_per_s / 1e9:.2f} GFLOP/s",
                   f"{prof.peak_tflops.get('fp32', 0) * 1e3:.2f} GFLOP/s fp32", f"{eff.compute:.3f}")
    params.add_row("attention", f"{p.attention_flops_per_s / 1e9:.2f} GFLOP/s", "", f"{eff.attention:.3f}")
    params.add_row("iteration overhead", f"{p.iteration_overhead_s * 1e3:.3f} ms", "", "")
    params.add_row("per-sequence overhead", f"{p.per_sequence_overhead_s * 1e3:.3f} ms", "", "")
    params.add_row("matmul n_1/2 (GEMM start-up)", f"{p.matmul_half_rows:.2f} rows", "", "")
    params.add_row("decode attention slowdown", f"{p.decode_attention_slowdown:.2f}x",
                   f"{p.attention_flops_per_s / p.decode_attention_slowdown / 1e9:.2f} GFLOP/s", "")
    console.print(params)
    by_kind = ", ".join(f"{k} {v * 100:.1f}%" for k, v in fit.heldout_median_abs_error_by_kind.items())
    console.print(
        f"held-out median |error|: {_pct(fit.heldout_median_abs_error).lstrip('+')} ({by_kind or 'none held out'}); "
        f"train {fit.train_median_abs_error * 100:.1f}%; R² of log time: all {fit.r2_log_all:.3f}"
        + (f", held-out {fit.r2_log_heldout:.3f}" if fit.r2_log_heldout is not None else "")
    )
    for note in fit.notes + list((prof.calibration or {}).get("peaks_raised", [])):
        console.print(f"note: {note}")
    from sim.cost.llamacpp import DecodeCorrection

    if (prof.calibration or {}).get("method") == "llama.cpp probes":
        corr = DecodeCorrection.from_points((prof.calibration or {}).get("probe_points", []))
        if corr is not None:
            console.print("decode steps of this model under this engine are also corrected by the measured / fitted "
                          "ratio per batch size (sim.cost.llamacpp.DecodeCorrection): "
                          + ", ".join(f"{b}: {math.exp(r):.3f}" for b, r in zip(corr.batches, corr.log_ratios)))
    off = (prof.calibration or {}).get("extra_weight_buffers_off")
    if off:
        from calibrate.llama_buffers import off_warning

        console.print(off_warning(off), highlight=False)
    busy = machine_busy_warning(prof.calibration or {})
    if busy:
        console.print(f"warning: {busy}")


def machine_busy_warning(calibration: dict) -> str | None:
    """A warning when other work competed for the CPU during the probes (load or disturbed runs)."""
    machine = calibration.get("machine") or {}
    threads = machine.get("threads_available") or 1
    loads = [x for key in ("loadavg_before", "loadavg_after") for x in (machine.get(key) or [])[:1]]
    points = calibration.get("probe_points", [])
    runs = sum(p.get("runs") or 0 for p in points)
    kept = sum(p.get("undisturbed_runs") or 0 for p in points)
    reasons = []
    if loads and max(loads) > 0.5 * threads:
        reasons.append(f"load average up to {max(loads):.1f} on {threads} hardware threads")
    if runs and kept < 0.8 * runs:
        reasons.append(f"{runs - kept} of {runs} timed runs lost CPU time to other processes")
    if not reasons:
        return None
    return "the machine was busy (" + "; ".join(reasons) + "): timings are noisy, calibrate again when it is idle"


#: Exit status of a calibration whose fit was refused (nothing written): the measurement ran, its
#: result is not usable (2 stays for bad input, as everywhere in infersim).
EXIT_UNRELIABLE = 1


def refuse_or_warn(console: Console, result, *, retry: str, as_json: bool = False) -> None:
    """A fit that failed `calibrate.fit.unreliable_reasons` was not written: say why and how to
    retry, exit EXIT_UNRELIABLE. Written anyway (--force): say it is marked unreliable."""
    if not result.unreliable:
        return
    why = "; ".join(result.unreliable)
    if result.path is None:
        if as_json:  # the fit summary still goes to stdout (path null, `unreliable` says why)
            sys.stdout.write(json.dumps(summary_json(result), indent=2) + "\n")
        console.print(f"error: calibration not saved: {why}. Retry on a quieter machine (stop other work; "
                      f"`uptime` load below the core count), with more probes ({retry}), or give --force to save "
                      "it marked unreliable", markup=False, highlight=False,
                      soft_wrap=True)
        raise typer.Exit(EXIT_UNRELIABLE)
    console.print(f"warning: saved with --force and marked unreliable: {why}", markup=False, highlight=False,
                  soft_wrap=True)


def summary_json(result) -> dict:
    fit = result.fit
    return {
        "profile": result.profile.name,
        "path": str(result.path) if result.path else None,
        "fit": fit.to_dict(),
        "efficiency": result.profile.efficiency.model_dump(),
        "peaks": {"memory_bandwidth_gb_per_s": result.profile.memory_bandwidth_gb_per_s,
                  "peak_tflops": result.profile.peak_tflops},
        "points": (result.profile.calibration or {}).get("probe_points", []),
        "unreliable": list(result.unreliable),
    }


def calibrate_command(
    model: str = typer.Option(None, "--model", "-m", help="GGUF file to probe (with --endpoint: the served model: GGUF, HF config.json or catalog name)"),
    name: str = typer.Option(None, "--name", help="profile name; use it later as --hw NAME"),
    quick: bool = typer.Option(False, "--quick", help="fewer, shorter probes (under 2 minutes with Gemma 3 270M)"),
    threads: int = typer.Option(None, "--threads", min=1, help="llama.cpp threads (default: physical cores)"),
    gpu_layers: int = typer.Option(0, "--gpu-layers", min=0, help="layers offloaded to a GPU (raw CPU peaks then unused)"),
    out: Path = typer.Option(None, "--out", help="where to write the profile YAML (default: the user profile folder)"),
    endpoint: str = typer.Option(None, "--endpoint", help="calibrate a running OpenAI-compatible / llama-server endpoint instead"),
    quant: str = typer.Option(None, "--quant", help="quantization of the served model (endpoint mode; default: the model's)"),
    engine: str = typer.Option("llama.cpp", "--engine", help="engine preset these measurements describe"),
    peaks_from: str = typer.Option(None, "--peaks-from", help="endpoint mode: hardware profile with the server's datasheet peaks"),
    allow_remote: bool = typer.Option(False, "--allow-remote", help="endpoint mode: allow a non-loopback host"),
    seed: int = typer.Option(0, "--seed", help="seed of the held-out split and of the probe prompts"),
    timeout_s: float = typer.Option(1800.0, "--timeout", min=1, help="give up after this many seconds of probing"),
    as_json: bool = typer.Option(False, "--json", help="print the fit summary as JSON on stdout"),
    check: str = typer.Option(None, "--check", help="no fit: re-time a few probe shapes with --model and say whether "
                              "this profile still describes the machine (exit 1 when the median shape drifted past 8%)"),
    extend: str = typer.Option(None, "--extend", help="probe again with this profile's plan and fit on its runs and the "
                               "new ones together: a profile extended at several times describes a drifting machine "
                               "over all of them (writes back to the profile unless --out)"),
    rounds: int = typer.Option(1, "--rounds", min=1, max=10, help="with --extend: rounds of the probe plan to add"),
    public: bool = typer.Option(False, "--public", help="no probing: fit every shipped profile's efficiencies per "
                                "kernel family to the public-measurement corpus, cross-validate, and write the "
                                "profiles' fitted blocks and the fidelity report"),
    corpus: Path = typer.Option(None, "--corpus", help="with --public: folder of corpus CSVs (default: "
                                "benchmarks/public of this checkout)"),
    report: Path = typer.Option(None, "--report", help="with --public: write the fidelity report (Markdown, "
                                "and JSON beside it) here"),
    dry_run: bool = typer.Option(False, "--dry-run", help="with --public: fit and report, write no profile"),
    profiles_only: bool = typer.Option(False, "--profiles-only", help="with --public: no refit; write every shipped "
                                       "profile's block from the last full fit (benchmarks/public_fit_state.json), "
                                       "e.g. for a newly added profile; the corpus must be unchanged since that fit"),
    from_bench: list[str] = typer.Option(None, "--from-bench", help="no probing: fit --hw's efficiencies and the "
                                         "engine's overheads to benchmark result files (vllm bench serve JSON, AIPerf / "
                                         "genai-perf export, GuideLLM benchmarks.json); repeat it or separate files with commas"),
    hw: str = typer.Option(None, "--hw", help="with --from-bench: the profile the benchmarks ran on (its peaks)"),
    holdout: float = typer.Option(0.25, "--holdout", min=0.0, max=0.5,
                                  help="with --from-bench: share of load points held out of the fit"),
    force: bool = typer.Option(False, "--force", help="write the profile even when the fit is unreliable (held-out "
                               "error too high, parameters at their bounds); it is marked so and `run` says it"),
) -> None:
    """Measure this machine (or a running server), fit the cost model, write a hardware profile."""
    if from_bench:
        files = [f.strip() for item in from_bench for f in item.split(",") if f.strip()]
        return from_bench_command(files, hw=hw, model=model, quant=quant, engine=engine, name=name, out=out,
                                  seed=seed, holdout_fraction=holdout, as_json=as_json)
    if public:
        if model or endpoint or name or check or extend:
            raise ConfigError("--public fits the shipped profiles to the corpus: no --model, --endpoint, --name, "
                              "--check or --extend", field="--public")
        if profiles_only:
            if report or dry_run:
                raise ConfigError("--profiles-only writes the profiles from the saved fit: no --report or --dry-run",
                                  field="--profiles-only")
            return profiles_only_command(corpus)
        return public_command(corpus, report, not dry_run, as_json)
    if corpus or report or dry_run or profiles_only:
        raise ConfigError("--corpus, --report, --dry-run and --profiles-only go with --public", field="--public")
    if check is not None:
        return check_command(check, model, threads, gpu_layers, engine, timeout_s, as_json)
    if extend is not None:
        if endpoint or name:
            raise ConfigError("--extend adds probe rounds to an existing profile: no --name or --endpoint",
                              field="--extend")
        return extend_command(extend, model, rounds, out, timeout_s, as_json, force)
    if not name:
        raise ConfigError("give --name for the new profile (or --check PROFILE to test an existing one)", field="--name")
    from calibrate.calibration import calibrate_endpoint, calibrate_model
    from calibrate.machine import physical_cores
    from calibrate.probes import ProbeError
    from sim.catalog.engine_config import load_engine
    from sim.catalog.hardware import load_profile
    from sim.catalog.lookup import get_model

    _check_name(name)
    load_engine(engine)  # an unknown engine is a one-line error before minutes of probing
    from calibrate.calibration import default_profile_path
    from sim.files import check_writable

    check_writable((out or default_profile_path(name)).parent, field="--out")  # ... and so is an unwritable folder
    console = Console(stderr=True)
    if endpoint is None:
        if not model:
            raise ConfigError("give --model MODEL.gguf to probe, or --endpoint URL", field="--model")
        if quant:
            raise ConfigError("--quant is for --endpoint; probes measure the GGUF file's own quantization",
                              field="--quant")
        path = Path(model)
        _check_gguf(path)
        _require_llama_cpp()
        spec = get_model(str(path))
        q = spec.quant(spec.quant_override or spec.default_quant)
        n_threads = threads or physical_cores()
        from calibrate.probes import build_plan, count_probes

        total = count_probes(build_plan(path, n_ctx_train=spec.max_context, quick=quick, n_threads=n_threads)) + 2
        with Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as progress:
            task = progress.add_task("raw machine probes", total=total)

            def on_event(e: dict) -> None:
                kind = e.get("event")
                if kind in ("raw", "load", "point"):
                    progress.advance(task)
                if kind == "start":
                    progress.update(task, description=e["id"])
                elif kind == "raw":
                    progress.update(task, description="model load (cold, warm)")

            try:
                result = calibrate_model(
                    path, name=name, spec=spec, quant=q, quick=quick, threads=n_threads, gpu_layers=gpu_layers,
                    seed=seed, engine=engine, out=out, on_event=on_event, timeout_s=timeout_s, force=force,
                )
            except ProbeError as e:
                raise ConfigError(str(e), file=path) from None
    else:
        if not model:
            raise ConfigError("endpoint mode needs --model: the served model (GGUF, config.json or catalog name)",
                              field="--model")
        from calibrate.replay.http import check_endpoint

        check_endpoint(endpoint, allow_remote=allow_remote)
        spec = get_model(model)
        q = spec.quant(quant or spec.quant_override or spec.default_quant)
        peaks = load_profile(peaks_from) if peaks_from else None
        from calibrate.replay.errors import EngineUnreachable

        with console.status("calibrating endpoint") as status:
            try:
                result = calibrate_endpoint(
                    endpoint, name=name, spec=spec, quant=q, quick=quick, seed=seed, engine=engine,
                    peaks_from=peaks, threads=threads, allow_remote=allow_remote, out=out,
                    on_phase=lambda s: status.update(f"endpoint: {s}"), timeout_s=timeout_s, force=force,
                )
            except EngineUnreachable as e:
                raise ConfigError(str(e), field="--endpoint") from None
            except ValueError as e:  # too few usable points (requests failed or ended early)
                raise ConfigError(f"{e} (from {endpoint})", field="--endpoint") from None
    render_summary(console, result)
    refuse_or_warn(console, result, retry="drop --quick for more probe points", as_json=as_json)
    console.print(f"wrote {result.path}; use it with --hw {name}")
    if as_json:
        sys.stdout.write(json.dumps(summary_json(result), indent=2) + "\n")


def from_bench_command(files: list[str], *, hw: str | None, model: str | None, quant: str | None, engine: str,
                       name: str | None, out: Path | None, seed: int, holdout_fraction: float, as_json: bool) -> None:
    """`calibrate --from-bench FILE...`: fit a profile to benchmark results (calibrate/from_bench.py)."""
    from calibrate.from_bench import calibrate_from_bench
    from sim.bench.serve import Deployment

    if not hw:
        raise ConfigError("--from-bench needs --hw: the hardware profile the benchmarks ran on", field="--hw")
    if not model:
        raise ConfigError("--from-bench needs --model: the model the benchmarks served", field="--model")
    if not name:
        raise ConfigError("give --name for the new profile", field="--name")
    _check_name(name)
    console = Console(stderr=True)
    with console.status("replaying the benchmarks and fitting"):
        fit, prof, path = calibrate_from_bench(files, Deployment(hw=hw, model=model, quant=quant, engine=engine),
                                               name=name, out=out, seed=seed, holdout_fraction=holdout_fraction)
    table = Table(title=f"calibrate --from-bench: {len(fit.points)} load point(s), {engine} on {hw}", box=box.SIMPLE_HEAD)
    for col in ("file", "point", "metric", "measured", "predicted", "error %", "set"):
        table.add_column(col, justify="left" if col in ("file", "point", "metric", "set") else "right")
    for r in fit.rows:
        table.add_row(Path(r["file"]).name, r["point"], r["metric"], f"{r['measured']:.4g}",
                      "-" if r["predicted"] is None else f"{r['predicted']:.4g}",
                      "-" if r["error_pct"] is None else f"{r['error_pct']:+.1f}",
                      "held out" if r["heldout"] else ("fit" if r["fitted"] else "shown"))
    console.print(table)
    pct = lambda x: "-" if x is None else f"{x:.1f}%"  # noqa: E731
    console.print(f"bandwidth x{fit.scale_bandwidth:.3f}, compute x{fit.scale_compute:.3f} of {hw}'s {engine} figures; "
                  f"iteration {fit.floor_ms:.3f} ms, per sequence {fit.per_sequence_ms:.4f} ms, front end "
                  f"{fit.request_overhead_ms:.1f} ms{'' if fit.front_end_fitted else ' (kept)'}; median |error| "
                  f"fit {pct(fit.train_median_abs_error_pct)}, held out {pct(fit.heldout_median_abs_error_pct)}",
                  highlight=False)
    for note in fit.notes:
        console.print(f"note: {note}", highlight=False)
    from calibrate.calibration import default_profile_path

    # by name only from the user profile folder; a profile written elsewhere (--out) is given by its path
    use = name if Path(path).resolve() == default_profile_path(name).resolve() else str(path)
    console.print(f"wrote {path}; use it with --hw {use} --engine {engine}", highlight=False)
    if as_json:
        sys.stdout.write(json.dumps({"path": str(path), "fit": fit.summary(), "rows": fit.rows}, indent=2) + "\n")


def profiles_only_command(corpus: Path | None) -> None:
    """`calibrate --public --profiles-only`: the profiles' generated blocks from the saved fit."""
    from calibrate.public_report import write_profiles_from_saved_fit

    changed = write_profiles_from_saved_fit(corpus)
    Console(stderr=True).print(f"profiles written: {', '.join(changed) or 'none changed'}", highlight=False)


def public_command(corpus: Path | None, report: Path | None, write: bool, as_json: bool) -> None:
    """`calibrate --public`: the public-measurement fit (calibrate/public_report.py)."""
    from calibrate.public_report import run_public_fit, summary_lines

    console = Console(stderr=True)
    with console.status("fitting every device and kernel family to the public corpus, then cross-validating"):
        s = run_public_fit(corpus, write_profiles=write, report=report, console=console)
    for line in summary_lines(s):
        console.print(line, highlight=False)
    if write:
        console.print(f"profiles written: {', '.join(s.get('profiles_written', [])) or 'none changed'}", highlight=False)
    if report:
        console.print(f"wrote {report} and {report.with_suffix('.json')}", highlight=False)
    if as_json:
        from calibrate.public_report import _json_safe

        sys.stdout.write(json.dumps(_json_safe({k: s[k] for k in ("rows", "replayed", "in_sample", "lodo", "loso",
                                                                  "lomo", "targets")}), indent=2) + "\n")


def render_check(console: Console, result) -> None:
    table = Table(title="Profile check: the machine now vs when it was calibrated", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    for header in ("shape", "now ms", "at calibration ms", "drift", "profile ms", "profile error"):
        table.add_column(header, justify="left" if header == "shape" else "right", no_wrap=True)
    for p in result.points:
        table.add_row(p.id, _ms(p.measured_s), "-" if p.calibrated_s is None else _ms(p.calibrated_s),
                      _pct(p.drift), _ms(p.predicted_s), _pct(p.profile_error))
    console.print(table)
    console.print(result.summary())


def check_command(profile_name: str, model: str | None, threads: int | None, gpu_layers: int, engine: str,
                  timeout_s: float, as_json: bool) -> None:
    """`calibrate --check PROFILE --model GGUF`: time the check shapes, compare, exit 1 if drifted."""
    from calibrate.check import check_profile
    from calibrate.probes import ProbeError
    from sim.catalog.engine_config import load_engine
    from sim.catalog.hardware import load_profile

    prof = load_profile(profile_name)
    eng = load_engine(engine)
    if not model:
        raise ConfigError("--check needs --model: the GGUF file to time (the one the profile was calibrated with)",
                          field="--model")
    path = Path(model)
    _check_gguf(path)
    _require_llama_cpp()
    from calibrate.machine import physical_cores

    n_threads = threads or (prof.calibration or {}).get("threads") or physical_cores()
    console = Console(stderr=True)
    with console.status("timing the check shapes"):
        try:
            result = check_profile(prof, path, threads=n_threads, engine=eng, n_gpu_layers=gpu_layers,
                                   timeout_s=timeout_s)
        except ProbeError as e:
            raise ConfigError(str(e), file=path) from None
    render_check(console, result)
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    if not result.matches:
        raise typer.Exit(1)


def extend_command(profile_name: str, model: str | None, rounds: int, out: Path | None, timeout_s: float,
                   as_json: bool, force: bool = False) -> None:
    """`calibrate --extend PROFILE`: more rounds of the profile's probe plan, pooled, fitted again."""
    from calibrate.calibration import extend_calibration, extension_plan
    from calibrate.probes import ProbeError, count_probes
    from sim.catalog.hardware import available_profiles, load_profile, shipped_profiles_dir
    from sim.catalog.lookup import get_model

    prof = load_profile(profile_name)
    origin = Path(profile_name) if profile_name.endswith((".yaml", ".yml")) or "/" in profile_name \
        else available_profiles()[profile_name]
    if origin.parent.resolve() == shipped_profiles_dir().resolve() and out is None:
        raise ConfigError("a shipped profile is not rewritten in place; give --out", field="--out")
    recorded = ((prof.calibration or {}).get("model") or {}).get("file")
    path = Path(model or recorded or "")
    if not model and not path.is_file():
        raise ConfigError(f"give --model: the GGUF file the profile was calibrated with ({recorded} is not there)",
                          field="--model")
    _check_gguf(path)
    _require_llama_cpp()
    console = Console(stderr=True)
    plan = extension_plan(prof.calibration or {}, path, get_model(str(path)), rounds)
    with Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task("model load", total=count_probes(plan) + 1)

        def on_event(e: dict) -> None:
            if e.get("event") in ("load", "point"):
                progress.advance(task)
            if e.get("event") == "start":
                progress.update(task, description=e["id"])

        try:
            result = extend_calibration(prof, path, origin=origin, rounds=rounds, out=out or origin,
                                        on_event=on_event, timeout_s=timeout_s, force=force)
        except ProbeError as e:
            raise ConfigError(str(e), file=path) from None
    render_summary(console, result)
    refuse_or_warn(console, result, retry="add --rounds", as_json=as_json)
    console.print(f"wrote {result.path}: {result.profile.calibration['rounds']} rounds pooled")
    if as_json:
        sys.stdout.write(json.dumps(summary_json(result), indent=2) + "\n")


def register(app: typer.Typer) -> None:
    """Attach `calibrate` to the infersim CLI."""
    from sim.errors import interruptible

    # A profile needs every probe: an interrupted calibration writes none (the old one stays whole).
    stop = interruptible("no profile written (a fit needs every probe; an existing profile is unchanged); "
                         "run the same command again to calibrate afresh")
    app.command("calibrate", help="Measure this machine with llama.cpp (or a running server) and write a calibrated hardware profile.")(stop(calibrate_command))
