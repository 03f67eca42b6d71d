"""Run a sweep: every combination through `sim.api.run_spec`, journaled, then tabled and reported.

`run_combination` is the unit of work an executor ships to a worker (a top-level function of a
plain dict, so it pickles for process pools and Ray). It never raises: a failing combination
becomes a row with `status = "error"` and the error text, and the sweep goes on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sim.engine.verdict import verdict_of_requests
from sim.errors import ConfigError
from sim.files import atomic_write_text, check_writable
from sim.plan.costs import OwnershipAssumptions, ownership_usd_per_hour, usd_per_million_output_tokens
from sim.plan.executors import Executor
from sim.plan.results import (
    ResultsJournal,
    combination_columns,
    error_row,
    flatten_summary,
    judge_slo,
    rows_to_frame,
    write_tables,
)
from sim.plan.sweep import Combination, Sweep
from sim.plan.workload import trace_stats


#: The percentile a sweep point's verdict judges (sim.engine.verdict).
SWEEP_VERDICT_PERCENTILE = 0.9


def run_spec_kwargs(combo: Combination) -> dict[str, Any]:
    """The `sim.api.RunSpec` fields of a combination (None = the RunSpec default).

    `rate_rps` becomes a `rate_scale` relative to the trace's native arrival rate.
    """
    rate_scale = combo.rate_scale
    if combo.rate_rps is not None:
        rate_scale = trace_stats(combo.trace).rate_scale_for(combo.rate_rps)
    kwargs: dict[str, Any] = {
        "trace": combo.trace, "hw": combo.hw, "model": combo.model, "quant": combo.quant,
        "engine": combo.engine, "overrides": dict(combo.overrides) or None,
        "concurrency": combo.concurrency, "rate_scale": rate_scale, "seed": combo.seed,
        "efficiency_from": combo.efficiency_from,
        "record_iterations": False,  # a sweep keeps summaries, not iteration logs
    }
    return {k: v for k, v in kwargs.items() if v is not None}


def _cost_columns(hw: str, config: dict[str, Any], output_tok_s: float | None,
                  assumptions: OwnershipAssumptions) -> dict[str, Any]:
    """Hourly cost of every device the run used and the price of a million output tokens at its
    throughput. Devices = replicas x tp x pp of `hw`, or, disaggregated, each pool's replicas x
    tp x pp of its own profile: a deployment pays for all of them, not for one replica."""
    from sim.catalog.cache import profile as load_profile

    devices = deployment_devices(hw, config)
    rent = own = 0.0
    for name, count in devices.items():
        p = load_profile(name)
        r = p.price.rental_usd_per_hour
        o = ownership_usd_per_hour(p.price.purchase_usd, p.power_w, assumptions)
        rent = None if rent is None or r is None else rent + count * r
        own = None if own is None or o is None else own + count * o
    return {
        "devices": sum(devices.values()),
        "rental_usd_per_hour": rent,
        "ownership_usd_per_hour": own,
        "cost_rental_usd_per_million_output_tokens": usd_per_million_output_tokens(rent, output_tok_s),
        "cost_ownership_usd_per_million_output_tokens": usd_per_million_output_tokens(own, output_tok_s),
    }


def deployment_devices(hw: str, config: dict[str, Any]) -> dict[str, int]:
    """Profile name -> number of devices of a run, from its resolved summary `config`."""
    per_replica = int(config.get("tp") or 1) * int(config.get("pp") or 1)
    disagg = config.get("disagg")
    if disagg:
        from sim.cluster.disagg import parse_disagg

        pools = ([(p.hw, p.replicas) for p in parse_disagg(disagg)] if isinstance(disagg, str)
                 else [(disagg[k]["hw"], disagg[k]["replicas"]) for k in ("prefill", "decode")])
        devices: dict[str, int] = {}
        for name, replicas in pools:
            devices[name] = devices.get(name, 0) + int(replicas) * per_replica
        return devices
    return {hw: int(config.get("replicas") or 1) * per_replica}


def run_combination(task: dict[str, Any]) -> dict[str, Any]:
    """Simulate one combination; return its results row (never raises).

    `task` = {"combination": Combination.model_dump(), "costs": OwnershipAssumptions fields}.
    """
    combo = Combination.model_validate(task["combination"])
    try:
        from sim.api import make_spec, run_spec

        kwargs = run_spec_kwargs(combo)
        result = run_spec(make_spec(**kwargs))
        summary = result.summary
        # judged for p90, the highest percentile a sweep table shows and the one its SLO names
        summary["verdict"] = verdict_of_requests(result.requests, SWEEP_VERDICT_PERCENTILE)
        row = {**combination_columns(combo), "status": "ok", "error": None}
        if "rate_scale" in kwargs:
            native = trace_stats(combo.trace).native_rate_rps
            row["offered_rps"] = None if native is None else native * kwargs["rate_scale"]
        config = summary.get("config") or {}
        for name in ("model", "quant", "engine"):  # what the defaults resolved to
            if row.get(name) is None and isinstance(config.get(name), str):
                row[name] = config[name]
        row.update(flatten_summary(summary))
        row.update(_cost_columns(combo.hw, config, row.get("throughput_output_tok_s"),
                                 OwnershipAssumptions(**task["costs"])))
        return row
    except ConfigError as e:
        return error_row(combo, f"ConfigError: {e.format()}")
    except Exception as e:  # noqa: BLE001 - one failing combination is recorded, the sweep goes on
        return error_row(combo, f"{type(e).__name__}: {e}")


@dataclass(frozen=True)
class SweepOutcome:
    frame: pd.DataFrame
    ran: int  # combinations simulated by this call
    skipped: int  # finished in an earlier run (--resume)
    failed: int  # rows of the table with status error
    out_dir: Path
    files: dict[str, Path]
    wall_s: float


def run_sweep(
    sweep: Sweep,
    out_dir: Path,
    executor: Executor,
    *,
    resume: bool = False,
    console: Console | None = None,
    report: bool = True,
) -> SweepOutcome:
    """Run the combinations not yet done, append each row as it arrives, then write the tables.

    With `resume`, rows already in `out_dir/results.jsonl` with status ok are kept and their
    combinations skipped (a failed one is tried again); without it the journal starts empty.
    """
    check_writable(out_dir)
    journal = ResultsJournal(out_dir / "results.jsonl")
    if resume:
        journal.drop_partial_line()
        done = {k: r for k, r in journal.read().items() if r.get("status") == "ok"}
    else:
        journal.start_fresh()
        done = {}
    keys = {c.key for c in sweep.combinations}
    todo = [c for c in sweep.combinations if c.key not in done]
    tasks = [{"combination": c.model_dump(), "costs": vars(sweep.costs)} for c in todo]

    console = console or Console(stderr=True)
    t0 = time.perf_counter()
    failed = 0
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(), TimeRemainingColumn(),
                  console=console, transient=False) as progress:
        bar = progress.add_task(f"sweep ({executor.name})", total=len(tasks), failed=0)
        try:
            for outcome in executor.map_unordered(run_combination, tasks):
                row = outcome.value
                if outcome.error is not None:  # the worker itself died
                    row = error_row(Combination.model_validate(outcome.item["combination"]), outcome.error)
                journal.append(row)
                failed += row["status"] != "ok"
                progress.update(bar, advance=1, failed=failed)
        finally:
            executor.close()
    wall_s = time.perf_counter() - t0

    # The table holds exactly this sweep's combinations, in sweep order, re-indexed to this file's
    # order (a resumed row may come from an earlier expansion of an edited file).
    index_of = {c.key: c.index for c in sweep.combinations}
    rows = [{**r, "index": index_of[k]} for k, r in journal.read().items() if k in keys]
    frame = judge_slo(rows_to_frame(rows), sweep.slo)
    files: dict[str, Path] = {"journal": journal.path}
    files["csv"], files["parquet"] = write_tables(frame, out_dir)
    if report:
        from sim.plan.report import sweep_report

        files["html"] = atomic_write_text(out_dir / "report.html", sweep_report(frame, title=sweep.name))
    return SweepOutcome(frame, ran=len(tasks), skipped=len(sweep.combinations) - len(tasks),
                        failed=int((frame["status"] != "ok").sum()), out_dir=out_dir, files=files, wall_s=wall_s)
