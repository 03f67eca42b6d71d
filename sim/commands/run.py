"""`infersim run TRACE`: simulate one replica serving a trace and report what serving engineers measure."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from sim.api import make_spec, resolve, run_spec
from sim.errors import ConfigError
from sim.models import get_model
from sim.simulate import SimResult

ITERATIONS_FILE = "iterations.csv"


def run(
    trace: Path = typer.Argument(..., help="JSONL trace (see `infersim trace schema`)"),
    hw: str = typer.Option("h100-sxm", "--hw", help="hardware profile name or YAML file"),
    model: str = typer.Option("llama-3.1-8b", "--model", help="catalog name, *.gguf file or HF config.json"),
    quant: Optional[str] = typer.Option(None, "--quant", help="quantization (default: the engine's)"),
    engine: str = typer.Option("vllm", "--engine", help="engine preset name or YAML file"),
    engine_file: Optional[Path] = typer.Option(None, "--engine-file", help="YAML of engine fields to override"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="static|continuous|chunked|sequential|slots"),
    kv: Optional[str] = typer.Option(None, "--kv", help="KV allocator: contiguous|paged"),
    max_seqs: Optional[int] = typer.Option(
        None, "--max-seqs", help="concurrency limit (vLLM max_num_seqs, llama-server slots, OLLAMA_NUM_PARALLEL)"),
    max_batched_tokens: Optional[int] = typer.Option(None, "--max-batched-tokens", help="tokens per iteration"),
    block_size: Optional[int] = typer.Option(None, "--block-size", help="tokens per KV block (paged)"),
    mem_fraction: Optional[float] = typer.Option(None, "--mem-fraction", help="share of device memory the engine takes"),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help="KV-cache element type: fp16|bf16|fp8|q8_0|q4_0"),
    tp: Optional[int] = typer.Option(None, "--tp", help="tensor-parallel degree (devices per layer)"),
    pp: Optional[int] = typer.Option(None, "--pp", help="pipeline-parallel degree (stages)"),
    gpu_layers: Optional[str] = typer.Option(
        None, "--gpu-layers", help="llama.cpp -ngl: layers on the GPU, N or 'auto' (the rest run from host memory)"),
    spec_method: Optional[str] = typer.Option(None, "--spec-method", help="speculative decoding: draft|eagle"),
    spec_k: Optional[int] = typer.Option(None, "--spec-k", help="tokens drafted per verify step"),
    spec_acceptance: Optional[float] = typer.Option(
        None, "--spec-acceptance", help="per-token acceptance probability of drafted tokens"),
    spec_draft_model: Optional[str] = typer.Option(None, "--spec-draft-model", help="draft model (method draft)"),
    spec_draft_fraction: Optional[float] = typer.Option(
        None, "--spec-draft-fraction", help="EAGLE head step as a fraction of a target decode step (method eagle)"),
    prefix_caching: Optional[bool] = typer.Option(
        None, "--prefix-caching/--no-prefix-caching", help="reuse cached KV of shared prompt prefixes (default: the engine's)"),
    replicas: int = typer.Option(1, "--replicas", help="replicas of the deployment behind a router"),
    router: Optional[str] = typer.Option(
        None, "--router", help="round-robin|least-outstanding|least-kv|prefix-affinity (default round-robin)"),
    disagg: Optional[str] = typer.Option(
        None, "--disagg", help="disaggregated prefill/decode pools: PREFILL_HW:N,DECODE_HW:M (e.g. h100-sxm:1,h100-sxm:3)"),
    concurrency: Optional[int] = typer.Option(
        None, "--concurrency", help="closed loop: N clients, each sends its next request when the last is done"),
    rate_scale: float = typer.Option(1.0, "--rate-scale", help="offer the trace this many times faster"),
    sort: bool = typer.Option(False, "--sort", help="sort the trace by arrival_s (reads it whole)"),
    seed: int = typer.Option(0, "--seed", help="recorded in the config; the simulation itself has no randomness"),
    as_json: bool = typer.Option(False, "--json", help="print only the summary JSON on stdout"),
    out: Optional[Path] = typer.Option(None, "--out", help="write summary.json, requests.csv, iterations.csv here"),
    step_by_step: bool = typer.Option(False, "--step-by-step", hidden=True, help="debug: no decode fast-forward"),
) -> None:
    """Simulate one replica serving TRACE and report latency, throughput and KV usage."""
    overrides = {
        "scheduler": scheduler, "kv_allocator": kv, "max_num_seqs": max_seqs,
        "max_num_batched_tokens": max_batched_tokens, "block_size": block_size,
        "memory_fraction": mem_fraction, "kv_dtype": kv_dtype, "tp": tp, "pp": pp, "gpu_layers": gpu_layers,
        "speculative": _speculative(spec_method, spec_k, spec_acceptance, spec_draft_model, spec_draft_fraction),
        "prefix_caching": prefix_caching,
    }
    spec = make_spec(
        trace=str(trace), hw=hw, model=model, quant=quant, engine=engine,
        engine_file=str(engine_file) if engine_file else None,
        overrides={k: v for k, v in overrides.items() if v is not None},
        concurrency=concurrency, rate_scale=rate_scale, sort=sort, seed=seed, fast_forward=not step_by_step,
        replicas=replicas, router=router, disagg=disagg,
    )
    # The resolved configuration first, so nothing is assumed silently (stderr under --json).
    prof, eng = resolve(spec)
    spec_model = get_model(spec.model)
    err = Console(stderr=True) if as_json else Console()
    err.print(_config_line(spec, eng, prof.name, spec_model.name), highlight=False, soft_wrap=True)
    t0 = time.perf_counter()
    result = run_spec(spec)
    wall_s = time.perf_counter() - t0
    n = result.summary["requests"]["total"]
    # Wall-clock figures go to stderr only: stdout stays byte-identical between equal runs.
    typer.echo(f"simulated {n:,} requests in {wall_s:.2f} s wall ({n / max(wall_s, 1e-9):,.0f} requests/s)", err=True)
    if out is not None:
        _write_out(result, out)
        typer.echo(f"wrote {out}/summary.json, requests.csv, {ITERATIONS_FILE}", err=True)
    if as_json:
        sys.stdout.write(result.to_json() + "\n")
    else:
        Console().print(_table(result))


def _speculative(method, k, acceptance, draft_model, draft_fraction) -> dict | None:
    """The `speculative` engine field from the --spec-* options (None when none is given); a
    draft model alone implies method draft, a draft fraction alone method eagle."""
    given = {"method": method, "k": k, "acceptance_rate": acceptance, "draft_model": draft_model,
             "draft_cost_fraction": draft_fraction}
    given = {f: v for f, v in given.items() if v is not None}
    if not given:
        return None
    if "method" not in given:
        given["method"] = "eagle" if "draft_cost_fraction" in given else "draft"
    return given


def _config_line(spec, eng, hw_name: str, model_name: str) -> str:
    quant = spec.quant or eng.default_quant
    limits = f"max_num_seqs={eng.max_num_seqs} max_num_batched_tokens={eng.max_num_batched_tokens}"
    if eng.kv_allocator == "paged":
        limits += f" block_size={eng.block_size}"
    if eng.scheduler == "slots":
        limits += f" context_size={eng.context_size or 'model max'} ({eng.context_mode})"
    if eng.tp * eng.pp > 1:
        limits += f" tp={eng.tp} pp={eng.pp}"
    if eng.gpu_layers is not None:
        limits += f" gpu_layers={eng.gpu_layers} (host {eng.offload_host})"
    if eng.speculative is not None:
        sp = eng.speculative
        limits += f" speculative={sp.method} k={sp.k} acceptance={sp.acceptance_rate:g}"
    limits += f" prefix_caching={'on' if eng.prefix_caching else 'off'} memory_fraction={eng.memory_fraction:g}"
    if spec.disagg:
        limits += f" | disaggregated prefill,decode = {spec.disagg}, decode router={spec.router or 'least-outstanding'}"
    elif spec.replicas > 1 or spec.router:
        limits += f" | {spec.replicas} replicas, router={spec.router or 'round-robin'}"
    load = f"closed loop, {spec.concurrency} clients" if spec.concurrency else "open loop (trace arrival times)"
    if spec.rate_scale != 1.0:
        load += f", rate x{spec.rate_scale:g}"
    return (f"config: hw={hw_name} model={model_name} quant={quant} kv_dtype={eng.kv_dtype} "
            f"engine={eng.name} {eng.version} scheduler={eng.scheduler} kv={eng.kv_allocator} {limits} "
            f"| {load} | trace={spec.trace}")


def _write_out(result: SimResult, out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the output folder: {e.strerror}", file=out, field="--out") from None
    (out / "summary.json").write_text(result.to_json() + "\n")
    result.requests.to_csv(out / "requests.csv", index=False)
    result.iterations.to_csv(out / ITERATIONS_FILE, index=False)


def _fmt(x, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if x is None else f"{x * scale:,.{digits}f}"


def _table(result: SimResult) -> Table:
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
