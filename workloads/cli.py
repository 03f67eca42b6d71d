"""`infersim trace schema|validate|gen|convert|stats`."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from sim.errors import ConfigError

app = typer.Typer(no_args_is_help=True, help="Request traces: schema, validate, generate, import, statistics.")


def register(root: typer.Typer) -> None:
    """Attach the `trace` command group to the infersim CLI."""
    root.add_typer(app, name="trace", help="Request traces: schema, validate, generate, import, statistics.")


def _write(requests, output: Path) -> int:
    from workloads.trace import write_trace

    if str(output) == "-":
        return write_trace(requests, sys.stdout)
    return write_trace(requests, output)


def _note(msg: str) -> None:
    typer.echo(msg, err=True)


@app.command("schema")
def schema(output: Optional[Path] = typer.Option(None, "-o", "--output", help="write to a file instead of stdout")) -> None:
    """Print the JSON Schema of one trace line (generated from the loader's own model)."""
    from workloads.trace import trace_schema

    text = json.dumps(trace_schema(), indent=2) + "\n"
    if output is None:
        typer.echo(text, nl=False)
    else:
        from sim.files import atomic_write_text

        atomic_write_text(output, text, field="--output")


@app.command("validate")
def validate(
    trace: Path = typer.Argument(..., help="JSONL trace (.jsonl or .jsonl.gz)"),
    sort: bool = typer.Option(False, "--sort", help="accept arrivals out of order (they are sorted)"),
) -> None:
    """Check every line of a trace; the first problem is reported as FILE:LINE: field: problem (exit 2)."""
    from workloads.trace import iter_trace

    n = 0
    last = 0.0
    for r in iter_trace(trace, sort=sort):
        n += 1
        last = r.arrival_s
    typer.echo(f"ok: {n} requests, last arrival {last:g} s")


# ---- gen ----------------------------------------------------------------------------------------


class ArrivalKind(str, Enum):
    poisson = "poisson"
    gamma = "gamma"
    constant = "constant"
    closed = "closed"


@app.command("gen")
def gen(
    output: Path = typer.Option(..., "-o", "--output", help="trace to write (.jsonl, .jsonl.gz, or - for stdout)"),
    spec: Optional[Path] = typer.Option(None, "--spec", help="YAML generator spec (options below override it)"),
    requests: Optional[int] = typer.Option(None, "-n", "--requests", help="number of requests"),
    duration_s: Optional[float] = typer.Option(None, "--duration-s", help="stop at this time instead (or as well)"),
    arrival: Optional[ArrivalKind] = typer.Option(None, "--arrival", help="arrival process [default: poisson]"),
    rate: Optional[float] = typer.Option(None, "--rate", help="requests per second (open loop)"),
    burstiness: Optional[float] = typer.Option(None, "--burstiness", help="gamma shape: 1 = Poisson, < 1 burstier"),
    clients: Optional[int] = typer.Option(None, "--clients", help="closed loop: concurrent users"),
    think_s: Optional[str] = typer.Option(None, "--think-s", help="think time DIST (closed loop, or between turns)"),
    prompt_tokens: Optional[str] = typer.Option(None, "--prompt-tokens", help="DIST, e.g. lognormal:1000,800"),
    output_tokens: Optional[str] = typer.Option(None, "--output-tokens", help="DIST, e.g. fixed:256"),
    lengths_from: Optional[Path] = typer.Option(None, "--lengths-from", help="draw (prompt, output) pairs from this trace"),
    lengths_format: Optional[str] = typer.Option(None, "--lengths-format", help="format of --lengths-from (detected if not given)"),
    max_prompt_tokens: Optional[int] = typer.Option(None, "--max-prompt-tokens", help="clamp prompts"),
    max_output_tokens: Optional[int] = typer.Option(None, "--max-output-tokens", help="clamp outputs"),
    turns: Optional[str] = typer.Option(None, "--turns", help="multi-turn sessions: turns per session DIST"),
    system_prompt_tokens: Optional[int] = typer.Option(None, "--system-prompt-tokens", help="shared prefix of every prompt"),
    seed: Optional[int] = typer.Option(None, "--seed", help="random seed [default: 0]"),
) -> None:
    """Generate a synthetic trace. DIST is N | fixed:N | uniform:LO,HI | normal:MEAN,STD |
    lognormal:MEAN,STD | exponential:MEAN. Same options and seed, byte-identical file."""
    from workloads.generate import build_spec, generate, load_spec, parse_dist

    data = load_spec(spec) if spec is not None else {}
    arr = dict(data.get("arrival") or {})
    _check_gen_conflicts(arrival, rate, clients, burstiness, arr)
    if arrival is not None:
        arr["process"] = arrival.value
    if rate is not None:
        for k in ("schedule", "daily"):
            arr.pop(k, None)
        arr["rate_per_s"] = rate
    if burstiness is not None:
        arr["burstiness"] = burstiness
    if clients is not None:
        arr["clients"] = clients
    closed = arr.get("process") == "closed"
    if closed:
        for k in ("rate_per_s", "schedule", "daily"):  # from --spec, replaced by --arrival closed
            if arrival is not None:
                arr.pop(k, None)
    elif not any(k in arr for k in ("rate_per_s", "schedule", "daily")):
        raise ConfigError("give --rate (requests per second), or a schedule/daily curve in --spec", field="--rate")
    sessions = dict(data.get("sessions") or {}) if (turns is not None or "sessions" in data) else None
    if turns is not None:
        sessions["turns"] = parse_dist(turns, option="--turns").model_dump()
    if think_s is not None:
        d = parse_dist(think_s, option="--think-s").model_dump()
        if closed:
            arr["think_s"] = d
        elif sessions is not None:
            sessions["think_s"] = d
        else:
            raise ConfigError("think time needs --arrival closed or --turns", field="--think-s")
    data["arrival"] = arr
    if sessions is not None:
        data["sessions"] = sessions
    overrides = {
        "requests": requests, "duration_s": duration_s, "seed": seed, "max_prompt_tokens": max_prompt_tokens,
        "max_output_tokens": max_output_tokens, "system_prompt_tokens": system_prompt_tokens,
        "lengths_from": str(lengths_from) if lengths_from is not None else None, "lengths_format": lengths_format,
    }
    data.update({k: v for k, v in overrides.items() if v is not None})
    if prompt_tokens is not None:
        data["prompt"] = parse_dist(prompt_tokens, option="--prompt-tokens").model_dump()
    if output_tokens is not None:
        data["output"] = parse_dist(output_tokens, option="--output-tokens").model_dump()
    reqs = generate(build_spec(data, file=spec))
    n = _write(reqs, output)
    if str(output) != "-":
        _note(f"wrote {n} requests to {output}")


def _check_gen_conflicts(arrival, rate, clients, burstiness, spec_arrival: dict) -> None:
    """Options of the other kind of loop would be ignored without a word (issue 41: --clients with
    --rate): one-line errors naming the options instead."""
    process = arrival.value if arrival is not None else spec_arrival.get("process", "poisson")
    if clients is not None and process != "closed":
        if rate is not None:
            raise ConfigError("--clients (closed loop: users waiting for answers) and --rate (open loop: "
                              "requests per second) exclude each other; give one", field="--clients")
        raise ConfigError(f"--clients needs --arrival closed (arrivals are {process})", field="--clients")
    if rate is not None and process == "closed":
        raise ConfigError("--rate is for open-loop arrivals; a closed loop sends when answered (give --clients)",
                          field="--rate")
    if burstiness is not None and process != "gamma":
        raise ConfigError(f"--burstiness shapes gamma arrivals; add --arrival gamma (arrivals are {process})",
                          field="--burstiness")


# ---- convert ------------------------------------------------------------------------------------


@app.command("convert")
def convert_cmd(
    src: Path = typer.Argument(..., help="source trace or dataset"),
    output: Path = typer.Option(..., "-o", "--output", help="infersim trace to write (.jsonl, .jsonl.gz, -)"),
    fmt: Optional[str] = typer.Option(None, "--format", help="azure|burstgpt|mooncake|sharegpt|vllm-json|infersim (detected if not given)"),
    start_s: Optional[float] = typer.Option(None, "--start-s", help="window start, seconds after the first request"),
    end_s: Optional[float] = typer.Option(None, "--end-s", help="window end (exclusive)"),
    sample: Optional[int] = typer.Option(None, "--sample", help="keep N requests chosen at random (seeded)"),
    rate_scale: float = typer.Option(1.0, "--rate-scale", help="2 = the same requests at twice the rate"),
    rate: Optional[float] = typer.Option(None, "--rate", help="Poisson arrivals (req/s) for sources without times"),
    seed: int = typer.Option(0, "--seed", help="random seed for --sample and --rate"),
) -> None:
    """Import a public trace (Azure, BurstGPT, Mooncake) or dataset (ShareGPT, vLLM JSON).
    Arrivals become seconds after the first kept request."""
    from workloads.importers import convert

    res = convert(src, fmt=fmt, start_s=start_s, end_s=end_s, sample=sample, rate_scale=rate_scale,
                  rate_per_s=rate, seed=seed)
    n = _write(res.requests, output)
    for note in res.notes:
        _note(f"note: {note}")
    if str(output) != "-":
        _note(f"wrote {n} requests to {output} (format {res.format}, {res.source_rows} usable rows in the source)")


# ---- stats --------------------------------------------------------------------------------------


def _fmt_lengths(ls) -> str:
    return f"mean {ls.mean:,.1f}  p50 {ls.p50:,.0f}  p90 {ls.p90:,.0f}  p99 {ls.p99:,.0f}  max {ls.max:,}"


@app.command("stats")
def stats_cmd(
    trace: Path = typer.Argument(..., help="infersim trace (.jsonl or .jsonl.gz)"),
    html: Optional[Path] = typer.Option(None, "--html", help="write a self-contained plotly page"),
    as_json: bool = typer.Option(False, "--json", help="print the numbers as JSON"),
    sort: bool = typer.Option(False, "--sort", help="accept arrivals out of order"),
) -> None:
    """Requests, duration, rate, burstiness (CV of inter-arrival gaps), length percentiles, prefix reuse."""
    from workloads.stats import TraceColumns, trace_stats, write_html
    from workloads.trace import iter_trace

    cols = TraceColumns.collect(iter_trace(trace, sort=sort))
    st = trace_stats(cols)
    if html is not None:
        write_html(cols, st, html, title=trace.name)
    if as_json:
        typer.echo(json.dumps(st.to_dict(), indent=2))
    else:
        est = "  (token counts ESTIMATED from text)" if st.tokens_estimated else ""
        lines = [
            f"requests        {st.requests:,}",
            f"duration_s      {st.duration_s:,.3f}",
            f"rate_per_s      {st.rate_per_s:.4g}" if st.rate_per_s else "rate_per_s      -",
            f"burstiness_cv   {st.burstiness_cv:.3f}" if st.burstiness_cv is not None else "burstiness_cv   -",
            f"prompt_tokens   {_fmt_lengths(st.prompt_tokens)}{est}",
            f"output_tokens   {_fmt_lengths(st.output_tokens)}",
            f"prefix_reuse    {st.prefix_reuse:.1%} of prompt tokens",
        ]
        if st.block_reuse is not None:
            lines.append(f"block_reuse     {st.block_reuse:.1%} of prefix blocks seen earlier")
        lines.append(f"sessions        {st.sessions:,}  (closed-loop requests: {st.closed_loop_requests:,})")
        if st.closed_loop_requests:
            lines.append("note: closed-loop requests wait for earlier answers; their arrival_s (used for "
                         "duration, rate, CV) are earliest send times")
        typer.echo("\n".join(lines))
    if html is not None:
        _note(f"wrote {html}")
