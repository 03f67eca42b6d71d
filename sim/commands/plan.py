"""`infersim sweep` (what-if grids) and `infersim plan` (SLO-constrained capacity and cost)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from sim.errors import ConfigError, Interrupted, sigterm_as_interrupt


def _split(text: str | None) -> list[str | None]:
    """"a,b" -> ["a", "b"]; None -> [None] (the simulator's default)."""
    if text is None:
        return [None]
    items = [t.strip() for t in text.split(",") if t.strip()]
    return items or [None]


def _json_safe(x: Any) -> Any:
    """NaN and infinities are not JSON: they become null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def _fmt(x: Any, spec: str = ".3g") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec) if isinstance(x, (int, float)) else str(x)


def _stdout(stderr: bool = False) -> Console:
    """The terminal's width, or 200 columns when piped to a file (tables and notes do not wrap)."""
    c = Console(stderr=stderr)
    return c if c.is_terminal else Console(stderr=stderr, width=200)


_RAY_HOST_HELP = ("address a Ray started here listens on (default 127.0.0.1: this machine only; "
                  "give one of its network addresses to let other Ray nodes join)")


def _executor(kind: str, workers: int | None, ray_address: str | None, n_items: int, ray_host: str = "127.0.0.1"):
    from sim.plan.executors import make_executor

    if workers is not None and workers < 1:
        raise ConfigError(f"must be >= 1, got {workers}", field="--workers")
    if kind == "local" and workers is None:
        workers = max(1, min(os.cpu_count() or 1, n_items))
    return make_executor(kind, workers=workers, ray_address=ray_address, ray_host=ray_host)


def sweep(
    sweep_file: Path = typer.Argument(..., help="sweep YAML: a trace and a grid (or list) of options"),
    out: Path = typer.Option(..., "-o", "--out", help="folder for results.jsonl/.csv/.parquet and report.html"),
    executor: str = typer.Option("local", "--executor", help="local (process pool) or ray"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address (default: start a local Ray)"),
    workers: Optional[int] = typer.Option(None, "--workers", help="parallel simulations (local: default = CPU cores, 1 = in this process; ray: CPUs of a Ray started here)"),
    resume: bool = typer.Option(False, "--resume", help="keep the finished combinations in OUT/results.jsonl and run only the rest"),
    ray_host: str = typer.Option("127.0.0.1", "--ray-host", help=_RAY_HOST_HELP),
) -> None:
    """Simulate every combination of a sweep file; write a table and an HTML report."""
    from sim.plan.runner import run_sweep
    from sim.plan.sweep import load_sweep

    if executor not in ("local", "ray"):
        raise ConfigError(f"unknown executor '{executor}'; choose local or ray", field="--executor")
    _check_executor_options(executor, ray_address, ray_host, workers)
    from sim.files import check_writable

    check_writable(out)  # before minutes of simulation, not after
    spec = load_sweep(sweep_file, cache_dir=out / "traces")
    err = _stdout(stderr=True)
    err.print(f"sweep {spec.name}: {len(spec.combinations)} combinations -> {out}")
    journal = out / "results.jsonl"
    if not resume and journal.is_file() and journal.stat().st_size:
        err.print(f"starting afresh: {journal} is replaced (use --resume to keep its finished combinations)")
    ex = _executor(executor, workers, ray_address, len(spec.combinations), ray_host)
    sigterm_as_interrupt()
    try:
        result = run_sweep(spec, out, ex, resume=resume, console=err)
    except KeyboardInterrupt:
        raise Interrupted(f"finished combinations are in {journal}; run the same command with --resume to go on") from None
    df = result.frame

    out_console = _stdout()
    out_console.print(_sweep_table(df, f"{spec.name}: {len(df)} combinations ({result.skipped} resumed, "
                                       f"{result.failed} failed)"))
    for _, r in df[df["status"] != "ok"].iterrows():
        out_console.print(f"#{r['index']} failed: {r['error']}", markup=False)
    for _, r in df[df["status"] == "ok"].iterrows():
        judged = [x for x in (r.get("verdict_text"), r.get("slo_misses") and f"misses SLO: {r['slo_misses']}")
                  if isinstance(x, str) and x and x != "stable"]
        if judged:
            out_console.print(f"#{r['index']}: {'; '.join(judged)}", markup=False, highlight=False)
    for name, path in result.files.items():
        out_console.print(f"{name}: {path}", markup=False)
    raise typer.Exit(outcome_exit_code(len(df), result.failed))


def _check_executor_options(executor: str, ray_address: str | None, ray_host: str, workers: int | None) -> None:
    """Ray options with the local executor would be ignored without a word: an error instead."""
    if executor != "ray" and (ray_address is not None or ray_host != "127.0.0.1"):
        raise ConfigError("--ray-address and --ray-host go with --executor ray", field="--executor")
    if ray_address is not None and workers is not None:
        raise ConfigError("--workers sets the CPUs of a Ray started here; a cluster at --ray-address has its own",
                          field="--workers")
    if ray_address is not None and ray_host != "127.0.0.1":
        raise ConfigError("--ray-host sets up a Ray started here; with --ray-address the cluster's own setup applies",
                          field="--ray-host")


def _given(x: Any) -> bool:
    return x is not None and x == x  # not None, not NaN


def _load_text(r) -> str:
    """The load of one combination as the user set it: users, req/s, or a multiple of the trace's rate."""
    if _given(r.get("concurrency")):
        n = int(r["concurrency"])
        return f"{n} user" if n == 1 else f"{n} users"
    for col in ("offered_rps", "rate_rps"):
        if _given(r.get(col)):
            return f"{_fmt(r[col], '.4g')} req/s"
    if _given(r.get("rate_scale")):
        return f"trace rate x{_fmt(r['rate_scale'], 'g')}"
    return "as recorded"


def _sweep_table(df, title: str) -> Table:
    """One row per combination: the option fields that vary, the load and the headline metrics."""
    from sim.plan.report import option_columns
    from sim.plan.results import point_status

    options = option_columns(df) or ["hw"]
    table = Table(title=title)
    for col in ["#", *options, "load", "out tok/s", "TTFT p50 s", "TTFT p90 s", "TPOT p90 ms", "KV peak",
                "preempt", "rejected", "$/M tok rent", "$/M tok own", "status"]:
        table.add_column(col, justify="left" if col in (*options, "status") else "right")
    for _, r in df.iterrows():
        load = _load_text(r)
        ok = r["status"] == "ok"
        tpot = r.get("tpot_s_p90")
        cells = [_fmt(r.get("throughput_output_tok_s"), ",.1f"), _fmt(r.get("ttft_s_p50")), _fmt(r.get("ttft_s_p90")),
                 _fmt(None if tpot is None else tpot * 1e3), _fmt(r.get("kv_peak_used_fraction"), ".0%"),
                 _fmt(r.get("kv_preemptions")), _fmt(r.get("requests_rejected")), _fmt(r.get("cost_rental_usd_per_million_output_tokens"), ",.3g"),
                 _fmt(r.get("cost_ownership_usd_per_million_output_tokens"), ",.3g")]
        table.add_row(str(r["index"]), *[_fmt(r.get(c)) for c in options], load,
                      *(cells if ok else ["-"] * len(cells)), point_status(r))
    return table


def _check_names(hw: str, engine: str | None, model: str | None, quant: str | None) -> None:
    """Unknown profiles, engines, models or quantizations fail now, with suggestions, not in a worker."""
    from sim.catalog.engine_config import load_engine
    from sim.catalog.hardware import load_profile
    from sim.catalog.lookup import get_model
    from sim.catalog.quant import get_quant

    for h in _split(hw):
        load_profile(h)
    for e in _split(engine):
        if e is not None:
            load_engine(e)
    for m in _split(model):
        if m is not None:
            get_model(m)
    for q in _split(quant):
        if q is not None:
            get_quant(q)


def plan(
    trace: Path = typer.Option(..., "--trace", help="workload: a JSONL trace, or a generator spec (.yaml); replayed at scaled rates"),
    hw: str = typer.Option(..., "--hw", help="candidate hardware profiles, comma-separated"),
    engine: Optional[str] = typer.Option(None, "--engine", help="candidate engines, comma-separated (default vllm)"),
    model: Optional[str] = typer.Option(None, "--model", help="model(s), comma-separated (default llama-3.1-8b)"),
    quant: Optional[str] = typer.Option(None, "--quant", help="quantization(s), comma-separated (default: the engine's)"),
    ttft_p90: Optional[str] = typer.Option(None, "--ttft-p90", help="SLO on TTFT p90: 2s, 500ms, 1.5 (seconds)"),
    tpot_p90: Optional[str] = typer.Option(None, "--tpot-p90", help="SLO on TPOT p90: 100ms, 0.05"),
    goodput: Optional[float] = typer.Option(None, "--goodput", help="fraction of requests that must meet both SLOs"),
    target_rps: float = typer.Option(..., "--target-rps", help="request rate the deployment must serve"),
    years: float = typer.Option(3.0, "--years", help="write-off period of a purchased device"),
    electricity: float = typer.Option(0.15, "--electricity-usd-per-kwh", help="electricity price"),
    utilization: float = typer.Option(1.0, "--utilization", help="share of the device's life spent serving (0-1]"),
    rank_by: str = typer.Option("rental", "--rank-by", help="rental or ownership cost"),
    start_rps: Optional[float] = typer.Option(None, "--start-rps", help="first rate tried (default: the trace's native rate)"),
    rel_tol: float = typer.Option(0.02, "--rel-tol", help="stop when (first fail - last pass) / first fail <= this"),
    max_iterations: int = typer.Option(12, "--max-iterations", help="most bisection midpoints per candidate"),
    seed: int = typer.Option(0, "--seed", help="seed of the resampling that extends a short trace and of the bootstrap"),
    min_requests: int = typer.Option(
        2000, "--min-requests", help="search on at least this many requests: a shorter trace is extended by "
        "resampling its own lengths and inter-arrival gaps"),
    replicates: int = typer.Option(
        5, "--replicates", help="bootstrap re-searches on resamples of the trace, for the max rate's uncertainty (0: none)"),
    executor: str = typer.Option("local", "--executor", help="local (process pool) or ray"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address (default: start a local Ray)"),
    ray_host: str = typer.Option("127.0.0.1", "--ray-host", help=_RAY_HOST_HELP),
    workers: Optional[int] = typer.Option(None, "--workers", help="candidates searched in parallel (local: 1 = in this process; ray: CPUs of a Ray started here)"),
    as_json: bool = typer.Option(False, "--json", help="print only the plan as JSON on stdout"),
    html_out: Optional[Path] = typer.Option(None, "--html", help="write the HTML report here"),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="folder for plan.json and the journal "
                                       "candidates.jsonl (each candidate written as it finishes)"),
    resume: bool = typer.Option(False, "--resume", help="keep the candidates already in OUT/candidates.jsonl "
                                "and search only the rest"),
) -> None:
    """Highest request rate each candidate sustains within the SLOs, replicas for a target rate, cost."""
    from sim.plan.costs import OwnershipAssumptions
    from sim.plan.planner import SLO, Candidate, SearchSettings, parse_duration, run_plan
    from sim.plan.workload import trace_stats

    if rank_by not in ("rental", "ownership"):
        raise ConfigError(f"'{rank_by}': choose rental or ownership", field="--rank-by")
    if executor not in ("local", "ray"):
        raise ConfigError(f"unknown executor '{executor}'; choose local or ray", field="--executor")
    _check_executor_options(executor, ray_address, ray_host, workers)
    if resume and out is None:
        raise ConfigError("--resume continues the plan journaled in --out DIR: give --out", field="--resume")
    if not trace.is_file():
        raise ConfigError("trace file not found", file=trace, field="--trace")
    slo = SLO(
        ttft_p90_s=None if ttft_p90 is None else parse_duration(ttft_p90, field="--ttft-p90"),
        tpot_p90_s=None if tpot_p90 is None else parse_duration(tpot_p90, field="--tpot-p90"),
        goodput=goodput,
    )
    try:
        assumptions = OwnershipAssumptions(years, electricity, utilization)
        settings = SearchSettings(start_rps=start_rps, rel_tol=rel_tol, max_iterations=max_iterations)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not 0 < rel_tol < 1:
        raise ConfigError(f"must be in (0, 1), got {rel_tol}", field="--rel-tol")
    if start_rps is not None and not start_rps > 0:
        raise ConfigError(f"must be > 0, got {start_rps}", field="--start-rps")
    _check_names(hw, engine, model, quant)
    candidates = [Candidate(hw=h, engine=e, model=m, quant=q)
                  for h in _split(hw) for e in _split(engine) for m in _split(model) for q in _split(quant)]
    from sim.plan.workload import materialize, plan_workload

    trace_path = str(materialize(trace.resolve()))
    stats = trace_stats(trace_path)
    workload = plan_workload(trace_path, min_requests=min_requests, replicates=replicates, seed=seed)
    err = _stdout(stderr=True)
    if not as_json:
        err.print(f"plan: {len(candidates)} candidates; trace {trace} ({stats.requests} requests, native rate "
                  f"{_fmt(stats.native_rate_rps, '.4g')} req/s); SLO {slo.describe()}; target {target_rps:g} req/s")
        err.print(f"search: {settings.describe()}", markup=False)
        err.print(f"workload: {workload.text}", markup=False)

    def progress(r: dict[str, Any]) -> None:
        if not as_json:
            what = r.get("error") or r.get("note") or f"max {_rate_text(r)} req/s"
            err.print(f"  done: {Candidate(r['hw'], r.get('engine'), r.get('model'), r.get('quant')).label()}: {what}")

    journal = None
    if out is not None:
        from sim.files import check_writable
        from sim.plan.plan_journal import PlanJournal

        check_writable(out)
        journal_file = out / "candidates.jsonl"
        if not resume and journal_file.is_file() and journal_file.stat().st_size and not as_json:
            err.print(f"starting afresh: {journal_file} is replaced (use --resume to keep its finished candidates)")
        journal = PlanJournal(out, resume=resume)
    if html_out is not None:
        from sim.files import check_writable

        check_writable(html_out.parent, field="--html")
    ex = _executor(executor, workers, ray_address, len(candidates), ray_host)
    sigterm_as_interrupt()
    try:
        result = run_plan(trace=trace_path, candidates=candidates, slo=slo, target_rps=target_rps,
                          assumptions=assumptions, settings=settings, seed=seed, executor=ex, rank_by=rank_by,
                          on_done=progress, journal=journal, workload=workload)
    except KeyboardInterrupt:
        if journal is None:
            raise Interrupted("no --out: the candidates finished so far are only in the lines printed above; "
                              "give --out DIR to journal them") from None
        raise Interrupted(f"finished candidates are in {journal.path}; run the same command with --resume "
                          "to go on") from None
    result = _json_safe(result)
    if out is not None:
        from sim.files import atomic_write_text

        atomic_write_text(out / "plan.json", json.dumps(result, indent=2) + "\n", field="--out")
    if html_out is not None:
        from sim.plan.report import plan_report

        from sim.files import atomic_write_text

        atomic_write_text(html_out, plan_report(result), field="--html")
    bands = _error_bands(result)
    status = outcome_exit_code(len(result["candidates"]),
                               sum(1 for c in result["candidates"] if c.get("error") or c.get("max_rate_rps") is None))
    if as_json:
        typer.echo(json.dumps({**result, "expected_error": bands}, indent=2))
        raise typer.Exit(status)
    table = Table(title=f"Capacity plan: {target_rps:g} req/s at {slo.describe()}")
    for col in ("rank", "hw", "engine", "model", "quant", "max req/s", "first fail", "replicas",
                "rental $/M tok", "own $/M tok", "TTFT p90 s", "TPOT p90 ms", "note"):
        table.add_column(col, justify="left" if col in ("hw", "engine", "model", "quant", "note") else "right")
    for i, c in enumerate(result["candidates"], start=1):
        at = c.get("at_max_rate") or {}
        cost = c.get("cost_per_million_output_tokens") or {}
        tpot = at.get("tpot_p90_s")
        rr = c.get("replicas_range")
        replicas = _fmt(c.get("replicas")) + (f" ({rr[0]}-{rr[1]})" if rr and rr[0] != rr[1] else "")
        note = c.get("error") or c.get("note") or ""
        if not note and at.get("verdict_state") not in (None, "", "stable"):
            note = f"at max rate: {at['verdict']}"
            if "too short" in at["verdict"]:
                note += f"; search on more requests (--min-requests {2 * result['workload']['searched_requests']})"
        table.add_row(str(i), c["hw"], _fmt(c.get("engine")), _fmt(c.get("model")), _fmt(c.get("quant")),
                      _rate_text(c), _fmt(c.get("first_failing_rate_rps"), ".4g"),
                      replicas, _fmt(cost.get("rental"), ",.3g"), _fmt(cost.get("ownership"), ",.3g"),
                      _fmt(at.get("ttft_p90_s")), _fmt(None if tpot is None else tpot * 1e3), note)
    out_console = _stdout()
    out_console.print(table)
    out_console.print(f"workload: {result['workload']['text']}", markup=False, highlight=False)
    if replicates:
        out_console.print("max req/s (low-high): the range of the last passing and first failing rates over the "
                          f"search and its {replicates} bootstrap re-searches; replicas (low-high) for that range",
                          markup=False, highlight=False)
    out_console.print(f"costs: {result['assumptions']['text']}", markup=False)
    from sim.catalog.accuracy import describe

    for key, err in bands.items():
        out_console.print(f"{key}: {describe(err)}", markup=False, highlight=False, soft_wrap=True)
    if html_out is not None:
        out_console.print(f"html: {html_out}", markup=False)
    if out is not None:
        out_console.print(f"plan: {out / 'plan.json'}; journal: {out / 'candidates.jsonl'}", markup=False)
    raise typer.Exit(status)


def outcome_exit_code(total: int, failed: int) -> int:
    """0 when every item succeeded, 1 when some failed, 3 when all failed (sim.errors exit codes)."""
    from sim.errors import EXIT_ALL_FAILED, EXIT_OK, EXIT_PARTIAL

    if failed <= 0:
        return EXIT_OK
    return EXIT_ALL_FAILED if failed >= total else EXIT_PARTIAL


def _rate_text(c: dict[str, Any]) -> str:
    """The max rate, and its uncertainty interval where there is one: '13.4 (12.1-14.9)'."""
    text = _fmt(c.get("max_rate_rps"), ".4g")
    iv = c.get("max_rate_interval_rps")
    return text + (f" ({iv[0]:.4g}-{iv[1]:.4g})" if iv else "")


def _error_bands(result: dict) -> dict[str, dict]:
    """"hw / engine" -> the expected error of that candidate's figures (sim.catalog.accuracy), once each."""
    from sim.catalog.accuracy import expected_error_for

    out: dict[str, dict] = {}
    rates: dict[str, float] = {}  # the highest rate each "hw / engine" was found to sustain (per replica)
    for c in result.get("candidates", []):
        if c.get("hw") and isinstance(c.get("max_rate_rps"), (int, float)):
            key = f"{c['hw']} / {c.get('engine')}"
            rates[key] = max(rates.get(key, 0.0), float(c["max_rate_rps"]) / max(int(c.get("replicas") or 1), 1))
    for c in result.get("candidates", []):
        hw, eng = c.get("hw"), c.get("engine")
        key = f"{hw} / {eng}"
        if hw and key not in out:
            try:
                out[key] = expected_error_for(hw, eng, rate=rates.get(key))
            except ConfigError:
                continue
    return out


def register(app: typer.Typer) -> None:
    app.command("sweep", help="Simulate a grid of options (hardware x engine x load ...) from a YAML file.")(sweep)
    app.command("plan", help="Max SLO-compliant rate per replica, replicas for a target rate, and cost.")(plan)
