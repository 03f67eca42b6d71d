"""`infersim replay` (measure a real engine) and `infersim validate` (measured vs simulated).

Exit status: 0 when the replay ran (whatever the prediction error: it is a measurement), 2 on bad
input (`ConfigError`: also an unusable URL or a server whose replies are not OpenAI-compatible), 1
when the engine could not be reached or stopped answering (the reason is printed, and what was
measured before is still written with `--out`). `replay` also exits 1 when some requests failed
mid-stream (their partial records are written). SIGINT / SIGTERM stop the replay within a moment:
requests in flight are cancelled with their tokens kept, what was measured is written with `--out`,
exit 130.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.table import Table

from calibrate.replay.errors import EngineUnreachable, ReplayInterrupted
from sim.errors import ConfigError, sigterm_as_interrupt

if TYPE_CHECKING:  # pandas comes with it: loaded when a replay runs, not when `infersim` starts
    from calibrate.replay.records import ReplayResult


# ---- shared option handling -------------------------------------------------------------------------
def _load_requests(trace: Path, max_requests: int | None):
    from workloads.trace import iter_trace

    if max_requests is not None and max_requests < 1:
        raise ConfigError(f"must be >= 1, got {max_requests}", field="--max-requests")
    reqs = []
    for r in iter_trace(trace, sort=True):
        reqs.append(r)
        if max_requests is not None and len(reqs) >= max_requests:
            break
    return reqs


def _check_target(endpoint: str | None, local: Path | None) -> None:
    if (endpoint is None) == (local is None):
        raise ConfigError("give exactly one of --endpoint URL or --local MODEL.gguf", field="--endpoint/--local")


def _check_positive(value, field: str) -> None:
    if value is not None and value < 1:
        raise ConfigError(f"must be >= 1, got {value}", field=field)


def _local_config(requests, concurrency, slots, n_batch, n_ctx_per_seq, threads):
    from calibrate.replay.local import LocalConfig

    for v, f in ((slots, "--slots"), (n_batch, "--n-batch"), (n_ctx_per_seq, "--ctx-per-slot"), (threads, "--threads")):
        _check_positive(v, f)
    longest = max(r.prompt_tokens + r.output_tokens for r in requests)
    per_seq = n_ctx_per_seq or -(-(longest + 1) // 256) * 256
    return LocalConfig(n_seq_max=slots or concurrency or 4, n_ctx_per_seq=per_seq,
                       n_batch=n_batch or 512, n_threads=threads or 0)


def _replay(requests, *, endpoint, local, concurrency, timeout_s, allow_remote, local_cfg) -> ReplayResult:
    if timeout_s <= 0:
        raise ConfigError(f"must be > 0, got {timeout_s}", field="--timeout-s")
    if local is not None:
        from calibrate.replay.local import replay_local

        return replay_local(requests, local, concurrency=concurrency, cfg=local_cfg, timeout_s=timeout_s)
    from calibrate.replay.http import replay_http

    return replay_http(requests, endpoint, concurrency=concurrency, timeout_s=timeout_s, allow_remote=allow_remote)


def _interrupted(e: ReplayInterrupted, out: Path | None, where: str) -> ReplayInterrupted:
    """The one line of an interrupted replay: what was kept and that a replay starts afresh (a
    measurement cannot be continued: the engine's state would differ)."""
    p = e.partial
    n = 0 if p is None else sum(r.status == "completed" for r in p.records)
    if p is None or out is None:
        what = f"{n} requests had completed; nothing written" + ("" if out is not None else " (no --out)")
    else:
        what = f"{n} completed requests (and the tokens of the cancelled ones) written to {where}"
    return ReplayInterrupted(f"{what}; run the command again to measure afresh", partial=p)


def _fmt(x, spec=".4g") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _warn_failures(result: ReplayResult) -> None:
    """One plain line on stderr (never wrapped) when some requests did not complete, and one when the
    in-process driver ran llama.cpp without its extra weight buffers (calibrate.llama_buffers)."""
    off = result.config.get("extra_weight_buffers_off")
    if off:
        from calibrate.llama_buffers import off_warning

        typer.echo(off_warning(off), err=True)
    fails = [r for r in result.records if r.status != "completed"]
    if fails:
        typer.echo(f"warning: {len(fails)} of {len(result.records)} requests did not complete; "
                   f"first: {fails[0].id}: {fails[0].status}: {fails[0].reason}", err=True)


# ---- replay --------------------------------------------------------------------------------------------
def replay(
    trace: Path = typer.Argument(..., help="JSONL trace to replay"),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="OpenAI-compatible server, e.g. http://127.0.0.1:8080"),
    local: Optional[Path] = typer.Option(None, "--local", help="serve in process with llama.cpp continuous batching: MODEL.gguf"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="N closed-loop clients (default: open loop at the trace's times)"),
    out: Optional[Path] = typer.Option(None, "--out", help="write requests.csv, summary.json, tokens.jsonl here"),
    max_requests: Optional[int] = typer.Option(None, "--max-requests", help="replay only the first N requests"),
    timeout_s: float = typer.Option(600.0, "--timeout-s", help="stop after this many seconds, keeping what was measured"),
    json_out: bool = typer.Option(False, "--json", help="print only the summary JSON"),
    allow_remote: bool = typer.Option(False, "--allow-remote", help="allow a non-loopback --endpoint"),
    slots: Optional[int] = typer.Option(None, "--slots", help="--local: concurrent sequences (default: --concurrency or 4)"),
    n_batch: Optional[int] = typer.Option(None, "--n-batch", help="--local: tokens per iteration (default 512)"),
    ctx_per_slot: Optional[int] = typer.Option(None, "--ctx-per-slot", help="--local: KV tokens per sequence (default: longest request)"),
    threads: Optional[int] = typer.Option(None, "--threads", help="--local: llama.cpp threads (default: all available)"),
) -> None:
    """Drive a real engine with a trace (streaming) and record every token's time."""
    _check_target(endpoint, local)
    _check_positive(concurrency, "--concurrency")
    requests = _load_requests(trace, max_requests)
    cfg = _local_config(requests, concurrency, slots, n_batch, ctx_per_slot, threads) if local else None
    if out is not None:
        from sim.files import check_writable

        check_writable(out)
    sigterm_as_interrupt()
    try:
        result = _replay(requests, endpoint=endpoint, local=local, concurrency=concurrency,
                         timeout_s=timeout_s, allow_remote=allow_remote, local_cfg=cfg)
    except EngineUnreachable as e:
        if out is not None and e.partial is not None:
            e.partial.write(out)
            typer.echo(f"partial results written to {out}", err=True)
        raise
    except ReplayInterrupted as e:
        if out is not None and e.partial is not None:
            e.partial.write(out)
        raise _interrupted(e, out, str(out)) from None
    if out is not None:
        result.write(out)
    summary = result.summary
    if json_out:
        typer.echo(json.dumps(summary, indent=2))
    else:
        _print_summary(summary, Console())
    _warn_failures(result)
    if any(r.status == "failed" for r in result.records):
        raise typer.Exit(1)


def _print_summary(s: dict, console: Console) -> None:
    cfg = s["config"]
    table = Table(title=f"replay: {cfg.get('server') or cfg.get('driver')} "
                        f"({s['requests']['completed']}/{s['requests']['total']} completed, {_fmt(s['duration_s'])} s)")
    table.add_column("metric")
    for col in ("mean", "p50", "p90", "p99"):
        table.add_column(col, justify="right")
    for key, label in (("ttft_s", "TTFT ms"), ("tpot_s", "TPOT ms"), ("itl_s", "ITL ms"), ("e2e_s", "e2e ms")):
        table.add_row(label, *(_fmt(None if s[key][c] is None else s[key][c] * 1e3) for c in ("mean", "p50", "p90", "p99")))
    console.print(table)
    t = s["throughput"]
    console.print(f"throughput: {_fmt(t['output_tok_s'])} output tok/s, {_fmt(t['total_tok_s'])} total tok/s, "
                  f"{_fmt(t['requests_per_s'])} req/s; prompt lengths: {cfg.get('prompt_tokens_source')}",
                  markup=False, highlight=False)


# ---- validate ------------------------------------------------------------------------------------------
def validate(
    trace: Optional[Path] = typer.Argument(None, help="JSONL trace (not with --measured)"),
    hw: str = typer.Option(..., "--hw", help="hardware profile (name or YAML), e.g. a calibrated profile of this machine"),
    engine: str = typer.Option(..., "--engine", help="engine preset (name or YAML) to simulate"),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="OpenAI-compatible server to measure"),
    local: Optional[Path] = typer.Option(None, "--local", help="measure the in-process llama.cpp driver on MODEL.gguf"),
    model: Optional[str] = typer.Option(None, "--model", help="model to simulate (default: the --local GGUF, or the server's model if it is a GGUF path)"),
    quant: Optional[str] = typer.Option(None, "--quant", help="quantization (default: the GGUF's own)"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="N closed-loop clients (default: open loop)"),
    html: Optional[Path] = typer.Option(None, "--html", help="write measured vs predicted CDFs (TTFT, e2e) as self-contained HTML"),
    out: Optional[Path] = typer.Option(None, "--out", help="write measured/ and predicted/ results and comparison.json here"),
    max_requests: Optional[int] = typer.Option(None, "--max-requests", help="use only the first N requests"),
    timeout_s: float = typer.Option(600.0, "--timeout-s", help="bound on the real replay, seconds"),
    json_out: bool = typer.Option(False, "--json", help="print only the comparison JSON"),
    allow_remote: bool = typer.Option(False, "--allow-remote", help="allow a non-loopback --endpoint"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="override the preset's scheduler"),
    max_seqs: Optional[int] = typer.Option(None, "--max-seqs", help="override the preset's concurrency limit"),
    max_batched_tokens: Optional[int] = typer.Option(None, "--max-batched-tokens", help="override the preset's per-iteration token budget"),
    slots: Optional[int] = typer.Option(None, "--slots", help="--local: concurrent sequences (default: --concurrency or 4)"),
    n_batch: Optional[int] = typer.Option(None, "--n-batch", help="--local: tokens per iteration (default 512)"),
    ctx_per_slot: Optional[int] = typer.Option(None, "--ctx-per-slot", help="--local: KV tokens per sequence"),
    threads: Optional[int] = typer.Option(None, "--threads", help="--local: llama.cpp threads"),
    seed: int = typer.Option(0, "--seed", help="simulation seed"),
    speed_margin: float = typer.Option(0.05, "--speed-margin", help="also predict on a machine this share faster "
                                       "and slower (0.05: every step 5 percent shorter / longer) and show each metric's "
                                       "range: how much of a miss a drifting machine could explain; 0: not"),
    measured: Optional[Path] = typer.Option(
        None, "--measured", help="a benchmark result file (vllm bench serve JSON, AIPerf / genai-perf export, "
        "GuideLLM benchmarks.json): replay its load on the simulator, no engine needed"),
) -> None:
    """Replay a trace on a real engine and simulate it; print measured vs predicted with the error.
    With --measured FILE: replay a benchmark result's load on the simulator instead (sim.bench.results)."""
    if measured is not None:
        if trace is not None or endpoint or local:
            raise ConfigError("--measured replays the file's own load: no TRACE, --endpoint or --local", field="--measured")
        return _validate_measured(measured, hw=hw, engine=engine, model=model, quant=quant, json_out=json_out,
                                  overrides={"scheduler": scheduler, "max_num_seqs": max_seqs,
                                             "max_num_batched_tokens": max_batched_tokens})
    if trace is None:
        raise ConfigError("give a TRACE to replay (or --measured FILE)", field="TRACE")
    from calibrate.replay.validate import run_validation

    _check_target(endpoint, local)
    _check_positive(concurrency, "--concurrency")
    requests = _load_requests(trace, max_requests)
    cfg = _local_config(requests, concurrency, slots, n_batch, ctx_per_slot, threads) if local else None
    if out is not None:
        from sim.files import check_writable

        check_writable(out)
    sigterm_as_interrupt()
    try:
        report = run_validation(
            requests, hw=hw, engine=engine, model=model, quant=quant, concurrency=concurrency, seed=seed,
            overrides={"scheduler": scheduler, "max_num_seqs": max_seqs, "max_num_batched_tokens": max_batched_tokens},
            replay=lambda reqs: _replay(reqs, endpoint=endpoint, local=local, concurrency=concurrency,
                                        timeout_s=timeout_s, allow_remote=allow_remote, local_cfg=cfg),
            local_model=local, log=lambda msg: typer.echo(msg, err=True),
            out=out, speed_margin=speed_margin,
        )
    except ReplayInterrupted as e:
        raise _interrupted(e, out, f"{out}/measured") from None
    if html is not None:
        report.write_html(html, title=f"{trace.name}: measured vs predicted ({report.engine.name} on {report.hw_name})")
    if json_out:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        _print_comparison(report, Console())
    _warn_failures(report.measured)


def _print_comparison(report, console: Console) -> None:
    m = report.measured.summary
    table = Table(title=f"validate: {m['config'].get('server') or m['config'].get('driver')} vs "
                        f"infersim ({report.engine.name}, {report.engine.scheduler}) on {report.hw_name}, "
                        f"{m['requests']['completed']} requests")
    band = f"if ±{report.speed_margin * 100:g} % speed" if report.speed_margin else None
    for col in ("metric", "measured", "predicted", "error %", "target", band):
        if col is not None:  # fold, never cut: a range is unreadable with its end replaced by "…"
            table.add_column(col, justify="left" if col == "metric" else "right", overflow="fold")
    for r in report.rows:
        mark = "" if r.within_target is None else (" ok" if r.within_target else " MISS")
        cells = [f"{r.metric} ({r.unit})", _fmt(r.measured), _fmt(r.predicted), _fmt(r.error_pct, "+.1f"),
                 ("±" + _fmt(r.target_pct, "g") + "%" + mark) if r.target_pct else ""]
        if band is not None:
            cells.append("-" if r.band is None else f"{_fmt(r.band[0])}–{_fmt(r.band[1])}")
        table.add_row(*cells)
    console.print(table)


def _validate_measured(path: Path, *, hw: str, engine: str, model: str | None, quant: str | None, json_out: bool,
                       overrides: dict) -> None:
    """`validate --measured FILE`: every load point of a result file, measured vs predicted."""
    from sim.bench.results import compare, read_results
    from sim.bench.serve import Deployment

    points = read_results(path)
    if model is None:
        raise ConfigError("give --model: the model the benchmark served (catalog name, GGUF or config.json)",
                          field="--model")
    dep = Deployment(hw=hw, model=model, quant=quant, engine=engine,
                     overrides={k: v for k, v in overrides.items() if v is not None})
    rows = compare(points, dep)
    if json_out:
        typer.echo(json.dumps({"file": str(path), "tool": points[0].tool, "hw": hw, "engine": engine, "model": model,
                               "rows": [{"point": r.point, "metric": r.metric, "measured": r.measured,
                                         "predicted": r.predicted, "error_pct": r.error_pct} for r in rows]}, indent=2))
        return
    table = Table(title=f"validate: {path.name} ({points[0].tool}) vs infersim ({engine} on {hw}, {model})")
    for col in ("load point", "metric", "measured", "predicted", "error %"):
        table.add_column(col, justify="left" if col in ("load point", "metric") else "right")
    for r in rows:
        table.add_row(r.point, r.metric, _fmt(r.measured), _fmt(r.predicted), _fmt(r.error_pct, "+.1f"))
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.command("replay", help="Replay a trace on a real engine (OpenAI-compatible server or in-process llama.cpp).")(replay)
    app.command("validate", help="Replay a trace on a real engine and simulate it: measured vs predicted, error %.")(validate)


__all__ = ["register", "replay", "validate"]
