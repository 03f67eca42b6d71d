"""`infersim run TRACE`: simulate one replica serving a trace and report what serving engineers measure."""

from __future__ import annotations

import itertools
import json
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from sim.catalog.engine_options import overrides_from
from sim.commands.engine_flags import with_engine_options
from sim.errors import ConfigError

if TYPE_CHECKING:  # the simulator loads when `run` runs, not when `infersim` starts (issue 17)
    from rich.console import Console
    from rich.table import Table

    from sim.engine.build import SimResult

ITERATIONS_FILE = "iterations.csv"


@with_engine_options(after="engine_file")  # --scheduler ... --flash-attn: sim.catalog.engine_options
def run(
    trace: Path = typer.Argument(..., help="JSONL trace (see `infersim trace schema`)"),
    hw: str = typer.Option("h100-sxm", "--hw", help="hardware profile name or YAML file; A,B compares"),
    model: str = typer.Option("llama-3.1-8b", "--model", help="catalog name, *.gguf file or HF config.json; A,B compares"),
    quant: Optional[str] = typer.Option(None, "--quant", help="quantization (default: the engine's; vllm, sglang, trtllm load an FP8 or MXFP4 release as released); A,B compares"),
    engine: str = typer.Option("vllm", "--engine", help="engine preset name or YAML file; A,B compares"),
    efficiency_from: Optional[str] = typer.Option(
        None, "--efficiency-from", help="profile (e.g. calibrated) whose efficiencies replace --hw's"),
    engine_file: Optional[Path] = typer.Option(None, "--engine-file", help="YAML of engine fields to override"),
    replicas: int = typer.Option(1, "--replicas", help="replicas of the deployment behind a router"),
    router: Optional[str] = typer.Option(
        None, "--router", help="round-robin|least-outstanding|least-kv|prefix-affinity (default round-robin)"),
    disagg: Optional[str] = typer.Option(
        None, "--disagg", help="disaggregated prefill/decode pools: PREFILL_HW:N,DECODE_HW:M (e.g. h100-sxm:1,h100-sxm:3)"),
    concurrency: Optional[str] = typer.Option(
        None, "--concurrency", help="closed loop: N clients, each sends its next request when the last is done; 1,4 compares"),
    rate_scale: float = typer.Option(1.0, "--rate-scale", help="offer the trace this many times faster"),
    sort: bool = typer.Option(False, "--sort", help="sort the trace by arrival_s (reads it whole)"),
    seed: int = typer.Option(0, "--seed", help="recorded in the config; the simulation itself has no randomness"),
    as_json: bool = typer.Option(False, "--json", help="print only the summary JSON on stdout"),
    out: Optional[Path] = typer.Option(None, "--out", help="write summary.json, requests.csv, iterations.csv here"),
    step_by_step: bool = typer.Option(False, "--step-by-step", hidden=True, help="debug: no decode fast-forward"),
    engine_options: Optional[dict] = None,
) -> None:
    """Simulate one replica serving TRACE and report latency, throughput and KV usage.

    Comma-separated --hw, --model, --quant, --engine or --concurrency values simulate every
    combination and print them side by side ("Ollama vs vLLM at 4 users" is one command)."""
    from sim.api import deployment_notes, make_spec, resolve, run_spec
    from sim.catalog.lookup import get_model

    overrides = overrides_from(engine_options or {})
    _check_conflicts(concurrency=concurrency, rate_scale=rate_scale, replicas=replicas, router=router, disagg=disagg)
    choices = {
        "hw": _choices(hw, "--hw"), "model": _choices(model, "--model"),
        "quant": _choices(quant, "--quant") if quant else [None], "engine": _choices(engine, "--engine"),
        "concurrency": [_positive_int(c, "--concurrency") for c in _choices(concurrency, "--concurrency")]
        if concurrency else [None],
    }
    specs = [
        make_spec(
            trace=str(trace), hw=c["hw"], model=c["model"], quant=c["quant"], engine=c["engine"],
            engine_file=str(engine_file) if engine_file else None,
            overrides=overrides, efficiency_from=efficiency_from,
            concurrency=c["concurrency"], rate_scale=rate_scale, sort=sort, seed=seed, fast_forward=not step_by_step,
            replicas=replicas, router=router, disagg=disagg,
        )
        for c in (dict(zip(choices, combo)) for combo in itertools.product(*choices.values()))
    ]
    if out is not None:  # before the simulation: a write error after minutes of it would waste them
        from sim.files import check_writable

        check_writable(out)
    # Every deployment checked against the compatibility table (sim.catalog.compat) before any runs:
    # an impossible one is a one-line error (exit 2); a different one is said with its configuration.
    resolved = []
    for spec in specs:
        prof, eng = resolve(spec)
        resolved.append((prof, eng, deployment_notes(spec, prof, eng, get_model(spec.model),
                                                     spec.quant or eng.default_quant)))
    results = []
    for i, (spec, (prof, eng, notes)) in enumerate(zip(specs, resolved)):
        # The resolved configuration first, so nothing is assumed silently (stderr under --json).
        _print_config(_config_line(spec, eng, prof, get_model(spec.model)), err=as_json)
        for note in notes:
            _print_config(f"note: {note}", err=as_json)
        t0 = time.perf_counter()
        result = run_spec(spec)
        wall_s = time.perf_counter() - t0
        n = result.summary["requests"]["total"]
        # Wall-clock figures go to stderr only: stdout stays byte-identical between equal runs.
        typer.echo(f"simulated {n:,} requests in {wall_s:.2f} s wall ({n / max(wall_s, 1e-9):,.0f} requests/s)", err=True)
        if out is not None:
            folder = out if len(specs) == 1 else out / _run_folder(i, spec)
            _write_out(result, folder)
            typer.echo(f"wrote {folder}/summary.json, requests.csv, {ITERATIONS_FILE}", err=True)
        results.append(result)
    if len(specs) == 1:
        if as_json:
            sys.stdout.write(results[0].to_json() + "\n")
        else:
            from rich.console import Console

            Console().print(_table(results[0]))
            _print_verdict(Console(), results[0].summary)
            _print_error_band(Console(), results[0].summary)
        _report_rejections(results, as_json)
        raise typer.Exit(_exit_status(results))
    if as_json:
        sys.stdout.write(json.dumps({"runs": [r.summary for r in results]}, indent=2, sort_keys=True) + "\n")
    else:
        from rich.console import Console

        console = Console()
        if not console.is_terminal:  # piped: the table's natural width, not 80 columns (as `sweep` and `plan`)
            console = Console(width=200)
        console.print(_comparison_table(specs, results, varying=[k for k, v in choices.items() if len(v) > 1]))
        _print_verdicts(console, results)
        seen = set()
        for r in results:
            cfg = r.summary.get("config", {})
            key = (cfg.get("hw"), cfg.get("engine"))
            if key not in seen:
                seen.add(key)
                _print_error_band(console, r.summary, prefix=f"{key[0]} / {key[1]}: ")
    _report_rejections(results, as_json, labels=[_run_folder(i, s) for i, s in enumerate(specs)])
    raise typer.Exit(_exit_status(results))


def rejections_by_reason(result: SimResult) -> list[tuple[str, int]]:
    """(reason, requests) of the rejected requests of a run, most frequent first (ties by reason)."""
    from collections import Counter

    if not result.summary["requests"]["rejected"]:  # the request table costs pandas (~0.3 s): only when needed
        return []
    df = result.requests
    if df is None or "status" not in df or not len(df):
        return []
    counts = Counter(df.loc[df["status"] == "rejected", "reason"].astype(str))
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _report_rejections(results, as_json: bool, labels: list[str] | None = None) -> None:
    """One line per rejection reason under the table (stderr under --json, whose stdout is JSON only)."""
    for i, r in enumerate(results):
        reasons = rejections_by_reason(r)
        if not reasons:
            continue
        total = r.summary["requests"]["total"]
        rejected = sum(n for _, n in reasons)
        who = f"{labels[i]}: " if labels else ""
        typer.echo(f"{who}rejected {rejected:,} of {total:,} requests:", err=as_json)
        for reason, n in reasons:
            typer.echo(f"  {n:,} x {reason or 'no reason recorded'}", err=as_json)


def _exit_status(results) -> int:
    """0: every request completed or none was rejected; 1: some rejected; 3: all rejected, in every
    run (sim.errors exit codes)."""
    from sim.errors import EXIT_ALL_FAILED, EXIT_OK, EXIT_PARTIAL

    rejected = sum(r.summary["requests"]["rejected"] for r in results)
    total = sum(r.summary["requests"]["total"] for r in results)
    if rejected == 0:
        return EXIT_OK
    return EXIT_ALL_FAILED if rejected >= total else EXIT_PARTIAL


def _check_conflicts(*, concurrency, rate_scale, replicas, router, disagg) -> None:
    """Options that another option makes meaningless would be ignored without a word: errors instead."""
    if concurrency and rate_scale != 1.0:
        raise ConfigError("--rate-scale divides the trace's arrival times, which a closed loop (--concurrency: "
                          "each client sends when answered) ignores; give one of them", field="--rate-scale")
    if router and replicas <= 1 and not disagg:
        raise ConfigError("--router picks a replica for each request: give --replicas N > 1 (or --disagg)",
                          field="--router")


# What rich would change in a line printed without highlighting: markup (`[`), emoji codes
# (`:name:`, rich's own pattern), tabs and control characters (`isprintable`).
_RICH_EMOJI = re.compile(r"(:(\S*?)(?:(?:\-)(emoji|text))?:)")


def _plain(line: str) -> bool:
    """Whether rich prints `line` (no highlighting, soft wrap) as the text itself and a newline."""
    return line.isprintable() and "[" not in line and _RICH_EMOJI.search(line) is None


def _print_config(line: str, *, err: bool) -> None:
    """`Console(stderr=err).print(line, highlight=False, soft_wrap=True)`. Under --json (`err`)
    nothing else is printed with rich, so a plain line (`_plain`) is written directly and rich
    (~15 ms of imports, issue 17) is not loaded; otherwise rich prints it."""
    if err and _plain(line):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        return
    from rich.console import Console

    Console(stderr=err).print(line, highlight=False, soft_wrap=True)


def _print_verdict(console: Console, summary: dict) -> None:
    """Whether the figures above are steady-state figures (sim.engine.verdict), under the table."""
    v = summary.get("verdict")
    if v:
        console.print(f"verdict: {v['text']}", highlight=False, markup=False, soft_wrap=True)


def _print_verdicts(console: Console, results) -> None:
    """The compared runs' verdicts under their table: once when they all agree, else one line per
    run (numbered in table order)."""
    texts = [(r.summary.get("verdict") or {}).get("text") for r in results]
    if len(set(texts)) == 1:
        if texts[0]:
            console.print(f"verdict (every run): {texts[0]}", highlight=False, markup=False, soft_wrap=True)
        return
    for i, text in enumerate(texts, start=1):
        console.print(f"verdict of row {i}: {text}", highlight=False, markup=False, soft_wrap=True)


def _print_error_band(console: Console, summary: dict, prefix: str = "") -> None:
    """The expected error of the headline figures (sim.catalog.accuracy), under the table."""
    from sim.catalog.accuracy import describe

    err = (summary.get("config") or {}).get("expected_error")
    if err:
        console.print(prefix + describe(err), highlight=False, markup=False, soft_wrap=True)


def _choices(value: str | None, option: str) -> list[str]:
    """`a,b` -> ["a", "b"]; an empty item is an error naming the option."""
    items = [v.strip() for v in (value or "").split(",")]
    if not all(items):
        raise ConfigError(f"empty item in '{value}'", field=option)
    return items


def _positive_int(text: str, option: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise ConfigError(f"'{text}' is not an integer", field=option) from None
    if n < 1:
        raise ConfigError(f"must be >= 1, got {n}", field=option)
    return n


def _engine_label(engine: str) -> str:
    """A preset name as given (`vllm@0.7` keeps its release), a YAML file by its stem."""
    return Path(engine).stem if engine.endswith((".yaml", ".yml")) or "/" in engine else engine


def _run_folder(i: int, spec) -> str:
    """One folder per compared run: index + what names it (safe characters only)."""
    name = f"{i:02d}-{Path(spec.hw).stem}-{_engine_label(spec.engine)}-{spec.quant or 'default'}"
    if spec.concurrency:
        name += f"-c{spec.concurrency}"
    return "".join(ch if ch.isalnum() or ch in "-._" else "_" for ch in name)


def _comparison_table(specs, results, varying: list[str]) -> Table:
    """Compared runs side by side: the options that differ between them, then what users measure
    (only the differing options are columns, so the table fits 80 columns)."""
    from rich.table import Table

    rows = [_comparison_names(spec, res.summary) for spec, res in zip(specs, results)]
    # every column whose resolved value differs between the runs (an engine's default quantization
    # differs with the engine: `--engine ollama,vllm` compares q4_k_m with bf16, and says so)
    shown = [k for k in COMPARISON_COLUMNS if k in varying or len({r[k] for r in rows}) > 1] or ["engine"]
    t = Table(title="infersim run: comparison", caption="TTFT and TPOT in ms, E2E in s; users = closed-loop clients")
    for label in shown:  # what tells the rows apart is never cut: the figures' columns give way first
        t.add_column({"concurrency": "users", "kv_dtype": "kv"}.get(label, label), no_wrap=True,
                     min_width=max(len(r[label]) for r in rows))
    for label in ("out tok/s", "TTFT p50", "TTFT p90", "TPOT p50", "TPOT p90", "E2E p50", "rej."):
        t.add_column(label, justify="right")
    for res, names in zip(results, rows):
        s = res.summary
        t.add_row(
            *(names[k] for k in shown),
            _fmt(s["throughput"]["output_tok_s"]), _fmt(s["ttft_s"]["p50"], 1e3, 0), _fmt(s["ttft_s"]["p90"], 1e3, 0),
            _fmt(s["tpot_s"]["p50"], 1e3, 1), _fmt(s["tpot_s"]["p90"], 1e3, 1), _fmt(s["e2e_s"]["p50"], 1, 1),
            f"{s['requests']['rejected']:,}",
        )
    return t


#: The configuration columns a comparison table may show, in this order.
COMPARISON_COLUMNS = ("hw", "engine", "model", "quant", "kv_dtype", "concurrency")


def _comparison_names(spec, summary: dict) -> dict[str, str]:
    """What one compared run resolved to, as table cells (`COMPARISON_COLUMNS`)."""
    cfg = summary.get("config") or {}
    return {"hw": Path(spec.hw).stem, "engine": _engine_label(spec.engine), "model": Path(spec.model).stem,
            "quant": str(cfg.get("quant") or spec.quant), "kv_dtype": str(cfg.get("kv_dtype") or "-"),
            "concurrency": str(spec.concurrency) if spec.concurrency else "open"}


def _config_line(spec, eng, prof, model) -> str:
    from sim.engine.kv import ALLOCATORS

    model_name = model.name
    hw_name = prof.name
    quant = spec.quant or eng.default_quant
    limits = f"max_num_seqs={eng.max_num_seqs} max_num_batched_tokens={eng.max_num_batched_tokens}"
    if eng.ubatch_tokens and eng.ubatch_tokens < (eng.max_num_batched_tokens or float("inf")):
        limits += f" ubatch={eng.ubatch_tokens}"  # only where it splits an iteration
    if ALLOCATORS[eng.kv_allocator].block_granular:
        limits += f" block_size={eng.block_size}"
    if eng.per_slot_context:
        limits += f" context_size={eng.context_size or 'model max'} ({eng.context_mode})"
    if eng.tp * eng.pp > 1:
        limits += f" tp={eng.tp} pp={eng.pp}"
    if eng.gpu_layers is not None:
        limits += f" gpu_layers={eng.gpu_layers} (host {eng.offload_host})"
    if eng.speculative is not None:
        sp = eng.speculative
        limits += f" speculative={sp.method} k={sp.k} acceptance={sp.acceptance_rate:g}"
    limits += f" prefix_caching={'on' if eng.prefix_caching else 'off'} memory_fraction={eng.memory_fraction:g}"
    if not eng.flash_attention_for(model):
        limits += " flash_attention=off"
    if spec.disagg:
        limits += f" | disaggregated prefill,decode = {spec.disagg}, decode router={spec.router or 'least-outstanding'}"
    elif spec.replicas > 1 or spec.router:
        limits += f" | {spec.replicas} replicas, router={spec.router or 'round-robin'}"
    load = (f"closed loop, {spec.concurrency} client{'s' if spec.concurrency > 1 else ''}") if spec.concurrency else "open loop (trace arrival times)"
    if spec.rate_scale != 1.0:
        load += f", rate x{spec.rate_scale:g}"
    eff = prof.efficiency_for(eng.name, eng.efficiency_family(prof))
    if spec.efficiency_from:
        load += (f" | efficiencies from {spec.efficiency_from}: compute={eff.compute:.3g} "
                 f"bandwidth={eff.bandwidth:.3g} attention={eff.attention:.3g}, peaks from {hw_name}")
    return (f"config: hw={hw_name} model={model_name} quant={quant} kv_dtype={eng.kv_dtype} "
            f"engine={eng.name}{'@' + eng.release if eng.release else ''} {eng.version} scheduler={eng.scheduler} kv={eng.kv_allocator} {limits} "
            f"| {load} | trace={spec.trace}")


def _write_out(result: SimResult, out: Path) -> None:
    """Each file written whole or not at all (sim.files); the summary last, so a summary.json on
    disk means its requests.csv and iterations.csv are complete."""
    from sim.files import atomic_write_text, atomic_write_with, check_writable

    check_writable(out)
    atomic_write_with(out / "requests.csv", lambda p: result.requests.to_csv(p, index=False), field="--out")
    atomic_write_with(out / ITERATIONS_FILE, lambda p: result.iterations.to_csv(p, index=False), field="--out")
    atomic_write_text(out / "summary.json", result.to_json() + "\n", field="--out")


def _fmt(x, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if x is None else f"{x * scale:,.{digits}f}"


def _table(result: SimResult) -> Table:
    from rich.table import Table

    s = result.summary
    t = Table(title="infersim run", show_header=True)
    t.add_column("metric")
    for col in ("mean", "p50", "p90", "p99"):
        t.add_column(col, justify="right")
    for key, label in (("ttft_s", "TTFT (ms)"), ("tpot_s", "TPOT (ms)"), ("itl_s", "ITL (ms)"), ("e2e_s", "E2E (s)")):
        scale = 1.0 if key == "e2e_s" else 1e3
        d = s[key]
        t.add_row(label, *(_fmt(d[c], scale, 2) for c in ("mean", "p50", "p90", "p99")))
    r = s["requests"]
    th = s["throughput"]
    kv = s["kv"]
    dec = s["decode_tok_s_per_request"]
    t.add_section()
    t.add_row("requests", f"{r['total']:,} total", f"{r['completed']:,} done", f"{r['rejected']:,} rejected", "")
    t.add_row("duration (s)", _fmt(s["duration_s"], 1, 2), "", "", "")
    t.add_row("throughput", f"{_fmt(th['output_tok_s'])} out tok/s", f"{_fmt(th['total_tok_s'])} tok/s",
              f"{_fmt(th['requests_per_s'], 1, 2)} req/s", "")
    t.add_row("decode tok/s per request", _fmt(dec["mean"]), _fmt(dec["p50"]), "", "")
    t.add_row("KV cache", f"{kv['capacity_tokens']:,} tokens", f"peak used {kv['peak_used_fraction']:.1%}",
              f"peak reserved {kv['peak_reserved_fraction']:.1%}", f"{kv['preemptions']:,} preempted")
    t.add_row("batch size (per iteration)", _fmt(s["batch_size"]["mean"]), f"max {s['batch_size']['max']}", "", "")
    if s.get("verdict"):
        from sim.engine.verdict import short_text

        t.add_row("verdict", short_text(s["verdict"]), "", "", "")
    pc = s.get("prefix_cache") or {}
    if pc.get("enabled"):
        t.add_row("prefix cache", f"hit rate {pc['hit_rate']:.1%}", f"{pc['hit_tokens']:,} tokens hit",
                  f"{pc['hit_lookups']:,}/{pc['lookups']:,} lookups", f"{pc['evicted_blocks']:,} evicted")
    for rep in s.get("replicas") or []:
        t.add_row(f"{rep.get('pool', 'replica')} {rep['replica']}", f"{rep['routed']:,} routed",
                  f"TTFT p50 {_fmt(rep['ttft_s']['p50'], 1e3, 1)} ms", f"{_fmt(rep['throughput']['output_tok_s'])} out tok/s",
                  f"KV peak {rep['kv']['peak_reserved_fraction']:.0%}")
    return t


def register(app: typer.Typer) -> None:
    """Attach `infersim run`."""
    app.command("run", help="Simulate one replica serving a trace: latency, throughput, KV usage.")(run)
