"""SLO-constrained capacity: the highest request rate one replica sustains, replicas and cost.

How the rate is found (`find_max_rate`):

1. **Replays.** The workload trace is replayed open-loop with every arrival time divided by a
   `rate_scale` s, so its request rate is s x the trace's native rate (`TraceStats`). Request
   lengths and their order are unchanged; only the pace changes.
2. **SLO check** (`check_slo`) of one replay: it passes when no request is rejected (a request that
   can never fit fails at every rate), TTFT p90 <= the TTFT SLO, TPOT p90 <= the TPOT SLO, and the
   goodput fraction (requests that completed with TTFT and TPOT both within the SLOs, over all
   requests: DistServe's SLO attainment, Zhong et al. OSDI 2024; vLLM's benchmark_serving
   `--goodput` counts the same requests) is at least the goodput target. Only the SLOs given apply.
3. **Bracket.** Start at `start_rps` (default: the trace's native rate). If it passes, double the
   rate until a replay fails; if it fails, halve it until one passes (at most `max_bracket_steps`
   times each way). A candidate that fails at every rate tried is infeasible, with the reason; the
   halving stops early when a halving leaves TTFT p90, TPOT p90 and goodput unchanged (to 0.1%):
   every request is then served alone and no lower rate can do better.
4. **Bisect** the bracket [last pass, first fail] at its midpoint until
   (first fail - last pass) / first fail <= `rel_tol` or `max_iterations` midpoints were tried.

The answer is the last passing rate (`max_rate_rps`) and the first failing one, both simulated.
**Monotonicity assumption:** bisection is exact only if passing is monotone in the rate — once a
rate fails, every higher rate fails. Queueing delay grows with load, so TTFT percentiles are
monotone in practice; TPOT can dip when a bigger batch amortises overheads, so with a TPOT-only
SLO the boundary found is *a* pass/fail boundary, not necessarily the highest one. On a finite trace
overload shows up as a growing queue, so the trace must be long enough (several hundred requests)
for a rate a little above capacity to break the TTFT SLO.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from sim.engine.verdict import verdict_of_requests
from sim.errors import ConfigError
from sim.plan.costs import OwnershipAssumptions, deployment_cost, replicas_needed
from sim.plan.workload import MIN_PLAN_REQUESTS, PlanWorkload, display_path, plan_workload, trace_stats

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|us|µs|s)?\s*$")
_UNIT_S = {"s": 1.0, None: 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}


def parse_duration(text: str | float, *, field: str = "duration") -> float:
    """Seconds from "2s", "100ms", "250us" or a bare number of seconds ("1.5")."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _DURATION.match(str(text))
        if not m:
            raise ConfigError(f"'{text}' is not a duration (examples: 2s, 100ms, 1.5)", field=field)
        value = float(m.group(1)) * _UNIT_S[m.group(2)]
    if not value > 0:
        raise ConfigError(f"must be > 0, got {text}", field=field)
    return value


#: The percentile the SLOs name (TTFT p90, TPOT p90): what a replay's verdict judges.
SLO_PERCENTILE = 0.9


@dataclass(frozen=True)
class SLO:
    """Service-level objectives; None = not constrained."""

    ttft_p90_s: float | None = None
    tpot_p90_s: float | None = None
    goodput: float | None = None  # fraction of requests meeting both latency SLOs, in (0, 1]

    def __post_init__(self) -> None:
        if self.ttft_p90_s is None and self.tpot_p90_s is None:
            raise ConfigError("give at least one latency SLO (--ttft-p90 and/or --tpot-p90)", field="--ttft-p90")
        if self.goodput is not None and not 0 < self.goodput <= 1:
            raise ConfigError(f"goodput must be a fraction in (0, 1], got {self.goodput}", field="--goodput")

    def describe(self) -> str:
        parts = []
        if self.ttft_p90_s is not None:
            parts.append(f"TTFT p90 <= {self.ttft_p90_s:g} s")
        if self.tpot_p90_s is not None:
            parts.append(f"TPOT p90 <= {self.tpot_p90_s * 1e3:g} ms")
        if self.goodput is not None:
            parts.append(f"goodput >= {self.goodput:.0%}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Probe:
    """One replay at one rate and its verdict."""

    rate_rps: float
    passed: bool
    reason: str = ""
    ttft_p90_s: float | None = None
    tpot_p90_s: float | None = None
    goodput_fraction: float | None = None
    output_tok_s: float | None = None
    rejected: int = 0
    verdict: str = ""  # sim.engine.verdict's text for this replay, judged for the SLO's percentile (p90)
    verdict_state: str = ""


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and np.isnan(x)) else float(x)


def goodput_fraction(requests, slo: SLO) -> float:
    """Share of all requests that completed within both latency SLOs (a one-token output has no
    TPOT and meets the TPOT SLO trivially)."""
    n = len(requests)
    if n == 0:
        return 0.0
    ok = (requests["status"] == "completed").to_numpy().copy()
    if slo.ttft_p90_s is not None:
        ok &= (requests["ttft_s"].to_numpy(dtype=float) <= slo.ttft_p90_s)
    if slo.tpot_p90_s is not None:
        tpot = requests["tpot_s"].to_numpy(dtype=float)
        ok &= np.isnan(tpot) | (tpot <= slo.tpot_p90_s)
    return float(ok.sum()) / n


def check_slo(summary: dict[str, Any], requests, slo: SLO, rate_rps: float) -> Probe:
    """Verdict of one replay against the SLOs (rule 2 of the module docstring)."""
    ttft = _num(summary["ttft_s"]["p90"])
    tpot = _num(summary["tpot_s"]["p90"])
    rejected = int(summary["requests"]["rejected"])
    good = goodput_fraction(requests, slo)
    out_tok_s = _num(summary["throughput"]["output_tok_s"])
    verdict = verdict_of_requests(requests, SLO_PERCENTILE)
    fails = []
    if rejected:
        fails.append(f"{rejected} requests rejected (they never fit)")
    if verdict["state"] == "overloaded":  # a rate the deployment cannot keep up with is not sustained
        fails.append(verdict["text"].split(";")[0])
    if slo.ttft_p90_s is not None and (ttft is None or ttft > slo.ttft_p90_s):
        fails.append(f"TTFT p90 {ttft if ttft is not None else float('nan'):.3g} s > {slo.ttft_p90_s:g} s")
    if slo.tpot_p90_s is not None and tpot is not None and tpot > slo.tpot_p90_s:
        fails.append(f"TPOT p90 {tpot * 1e3:.3g} ms > {slo.tpot_p90_s * 1e3:g} ms")
    if slo.goodput is not None and good < slo.goodput:
        fails.append(f"goodput {good:.1%} < {slo.goodput:.0%}")
    return Probe(rate_rps, not fails, "; ".join(fails), ttft, tpot, good, out_tok_s, rejected, verdict["text"],
                 verdict["state"])


@dataclass(frozen=True)
class SearchSettings:
    start_rps: float | None = None  # None: the trace's native rate
    rel_tol: float = 0.02
    max_iterations: int = 12
    max_bracket_steps: int = 16

    def describe(self) -> str:
        start = "the trace's native rate" if self.start_rps is None else f"{self.start_rps:g} req/s"
        return (f"bracket from {start} by doubling/halving (at most {self.max_bracket_steps} steps), then "
                f"bisection to {self.rel_tol:.0%} relative width or {self.max_iterations} midpoints; "
                "assumes passing is monotone in the rate")


def _same_verdict(a: Probe, b: Probe, rel: float = 1e-3) -> bool:
    """Two failing probes with the same latencies and goodput (to `rel`): load no longer matters."""
    def close(x: float | None, y: float | None) -> bool:
        if x is None or y is None:
            return x is y
        return abs(x - y) <= rel * max(abs(x), abs(y), 1e-12)

    return (close(a.ttft_p90_s, b.ttft_p90_s) and close(a.tpot_p90_s, b.tpot_p90_s)
            and close(a.goodput_fraction, b.goodput_fraction))


@dataclass(frozen=True)
class SearchResult:
    """Outcome of `find_max_rate`: the verified pass/fail pair and every probe, in order."""

    last_pass: Probe | None
    first_fail: Probe | None
    probes: list[Probe] = field(default_factory=list)
    iterations: int = 0
    note: str = ""

    @property
    def max_rate_rps(self) -> float | None:
        return None if self.last_pass is None else self.last_pass.rate_rps


def find_max_rate(probe: Callable[[float], Probe], start_rps: float, settings: SearchSettings = SearchSettings()) -> SearchResult:
    """Highest passing rate by bracketing then bisection (steps 3-4 of the module docstring)."""
    if not start_rps > 0:
        raise ValueError(f"start rate must be > 0, got {start_rps}")
    probes: list[Probe] = []

    def run(rate: float) -> Probe:
        p = probe(rate)
        probes.append(p)
        return p

    first = run(start_rps)
    lo: Probe | None = first if first.passed else None
    hi: Probe | None = None if first.passed else first
    if first.rejected:  # rejections do not depend on the rate: no rate can pass
        return SearchResult(None, first, probes, 0, f"infeasible: {first.reason}")
    for _ in range(settings.max_bracket_steps):
        if lo is not None and hi is not None:
            break
        if hi is None:
            p = run(lo.rate_rps * 2)
            lo, hi = (p, None) if p.passed else (lo, p)
        else:
            p = run(hi.rate_rps / 2)
            if not p.passed and _same_verdict(p, hi):
                # Halving the rate changed nothing: requests are already served alone, so no
                # lower rate can pass (the SLO is out of reach of this candidate at any load).
                hi = p
                break
            lo, hi = (p, hi) if p.passed else (None, p)
    if lo is None:
        return SearchResult(None, hi, probes, 0,
                            f"infeasible: fails even at {hi.rate_rps:.4g} req/s ({hi.reason})")
    if hi is None:
        return SearchResult(lo, None, probes, 0,
                            f"passes at every rate tried, up to {lo.rate_rps:.4g} req/s (no upper bound found)")
    iterations = 0
    while (hi.rate_rps - lo.rate_rps) / hi.rate_rps > settings.rel_tol and iterations < settings.max_iterations:
        p = run((lo.rate_rps + hi.rate_rps) / 2)
        iterations += 1
        if p.passed:
            lo = p
        else:
            hi = p
    return SearchResult(lo, hi, probes, iterations, "")


# ---- one candidate (the unit of work an executor runs) -------------------------------------------


@dataclass(frozen=True)
class Candidate:
    hw: str
    engine: str | None = None
    model: str | None = None
    quant: str | None = None

    def label(self) -> str:
        return " / ".join(x for x in (self.hw, self.engine, self.model, self.quant) if x)


def _probe_fn(cand: Candidate, trace: str, slo: SLO, seed: int, overrides: dict[str, Any]):
    from sim.api import make_spec, run_spec

    stats = trace_stats(trace)
    resolved: dict[str, Any] = {}

    def probe(rate_rps: float) -> Probe:
        kwargs = {"trace": trace, "hw": cand.hw, "engine": cand.engine, "model": cand.model,
                  "quant": cand.quant, "rate_scale": stats.rate_scale_for(rate_rps), "seed": seed,
                  "overrides": overrides or None, "record_iterations": False}
        result = run_spec(make_spec(**{k: v for k, v in kwargs.items() if v is not None}))
        config = result.summary.get("config") or {}
        resolved.update({k: config[k] for k in ("model", "quant", "engine") if isinstance(config.get(k), str)})
        return check_slo(result.summary, result.requests, slo, rate_rps)

    return probe, resolved


def search_candidate(task: dict[str, Any]) -> dict[str, Any]:
    """Find one candidate's max rate. `task`: candidate, trace, slo, settings, seed, overrides.

    Returns a plain dict (it crosses process and Ray boundaries); errors are returned, not raised.
    """
    cand = Candidate(**task["candidate"])
    out: dict[str, Any] = {**asdict(cand), "error": None}
    try:
        settings = SearchSettings(**task["settings"])
        slo = SLO(**task["slo"])
        probe, resolved = _probe_fn(cand, task["trace"], slo, task.get("seed", 0), task.get("overrides") or {})
        start = settings.start_rps or trace_stats(task["trace"]).native_rate_rps
        if start is None:
            raise ConfigError("the trace has no arrival times to scale; give --start-rps", file=task["trace"])
        res = find_max_rate(probe, start, settings)
        for k, v in resolved.items():
            out[k] = out[k] or v
        out.update(_uncertainty(cand, task, slo, settings, res))
        out.update(
            max_rate_rps=res.max_rate_rps,
            first_failing_rate_rps=None if res.first_fail is None else res.first_fail.rate_rps,
            at_max_rate=None if res.last_pass is None else asdict(res.last_pass),
            at_first_failing_rate=None if res.first_fail is None else asdict(res.first_fail),
            bisection_iterations=res.iterations,
            simulations=len(res.probes),
            probes=[asdict(p) for p in res.probes],
            note=res.note,
        )
    except ConfigError as e:
        out["error"] = e.format()
    except Exception as e:  # noqa: BLE001 - one failing candidate is reported, the plan goes on
        out["error"] = f"{type(e).__name__}: {e}"
    return out


def _uncertainty(cand: Candidate, task: dict[str, Any], slo: SLO, settings: SearchSettings,
                 main: SearchResult) -> dict[str, Any]:
    """The max rate's spread over bootstrap re-searches (`task["replicate_traces"]`, from
    `sim.plan.workload.plan_workload`): each replicate is searched like the main trace, starting
    at the main answer. `max_rate_interval_rps` = [lowest last-passing rate, highest first-failing
    rate] over the main search and every replicate: the search's own bracket widened by how much the
    answer moves when the trace is resampled. With B replicates, a further resample's answer falls
    inside the range of B + 1 searches with probability about (B - 1) / (B + 1) (order statistics of
    exchangeable draws): 4/6 for the default 5."""
    reps = task.get("replicate_traces") or []
    if main.last_pass is None or main.first_fail is None or not reps:
        return {"max_rate_interval_rps": None, "replicate_max_rates_rps": []}
    lows, highs, rates = [main.last_pass.rate_rps], [main.first_fail.rate_rps], []
    for path in reps:
        probe, _ = _probe_fn(cand, path, slo, task.get("seed", 0), task.get("overrides") or {})
        r = find_max_rate(probe, main.last_pass.rate_rps, settings)
        rates.append(r.max_rate_rps)
        # a replicate with no pass (or no fail) bounds the interval by the lowest (highest) rate tried
        lows.append(r.max_rate_rps if r.last_pass is not None else min(p.rate_rps for p in r.probes))
        highs.append(r.first_fail.rate_rps if r.first_fail is not None else max(p.rate_rps for p in r.probes))
    return {"max_rate_interval_rps": [min(lows), max(highs)], "replicate_max_rates_rps": rates}


def add_costs(result: dict[str, Any], *, target_rps: float, mean_output_tokens: float,
              assumptions: OwnershipAssumptions) -> dict[str, Any]:
    """Replicas for the target rate and the deployment's cost per million output tokens.

    The deployment produces target_rps x mean output tokens per request tokens/s (from the trace).
    """
    from sim.catalog.cache import profile as load_profile

    replicas = replicas_needed(target_rps, result.get("max_rate_rps"))
    interval = result.get("max_rate_interval_rps")
    replicas_range = None
    if replicas is not None and interval and interval[0] > 0:
        replicas_range = [replicas_needed(target_rps, interval[1]), replicas_needed(target_rps, interval[0])]
    cost = {"rental": None, "ownership": None}
    hourly = {"rental": None, "ownership": None}
    if replicas is not None:
        p = load_profile(result["hw"])
        d = deployment_cost(replicas=replicas, output_tok_s=target_rps * mean_output_tokens,
                            rental_price_usd_per_hour=p.price.rental_usd_per_hour,
                            purchase_usd=p.price.purchase_usd, power_w=p.power_w, assumptions=assumptions)
        cost = {"rental": d.rental_usd_per_million_output_tokens, "ownership": d.ownership_usd_per_million_output_tokens}
        hourly = {"rental": d.rental_usd_per_hour, "ownership": d.ownership_usd_per_hour}
    return {**result, "feasible": replicas is not None, "replicas": replicas, "replicas_range": replicas_range,
            "cost_per_million_output_tokens": cost, "deployment_usd_per_hour": hourly}


def rank(candidates: list[dict[str, Any]], by: str = "rental") -> list[dict[str, Any]]:
    """Feasible first; then by cost per million output tokens (`by` = rental or ownership; unknown
    prices last), then fewer replicas, then higher max rate."""
    other = "ownership" if by == "rental" else "rental"

    def key(c: dict[str, Any]):
        cost = c.get("cost_per_million_output_tokens") or {}
        first, second = cost.get(by), cost.get(other)
        return (not c.get("feasible"), first is None, first or 0.0, second is None, second or 0.0,
                c.get("replicas") or 0, -(c.get("max_rate_rps") or 0.0))

    return sorted(candidates, key=key)


# ---- the whole plan ------------------------------------------------------------------------------


def run_plan(
    *,
    trace: str,
    candidates: list[Candidate],
    slo: SLO,
    target_rps: float,
    assumptions: OwnershipAssumptions = OwnershipAssumptions(),
    settings: SearchSettings = SearchSettings(),
    seed: int = 0,
    overrides: dict[str, Any] | None = None,
    executor=None,
    rank_by: str = "rental",
    on_done: Callable[[dict[str, Any]], None] | None = None,
    journal=None,
    workload: PlanWorkload | None = None,
) -> dict[str, Any]:
    """Search every candidate (in parallel through `executor`), then cost and rank them.

    `journal` (a `sim.plan.plan_journal.PlanJournal`): candidates it holds are not searched again,
    and each new search result is appended to it as soon as it arrives (an interrupted plan loses
    only the candidates in flight).

    Returns the plan as a JSON-ready dict: workload, slo, target_rps, search, assumptions and the
    ranked `candidates` (each with max_rate_rps, replicas and cost_per_million_output_tokens).
    """
    from sim.plan.executors import SerialExecutor

    if not target_rps > 0:
        raise ConfigError(f"must be > 0, got {target_rps}", field="--target-rps")
    source_stats = trace_stats(trace)
    workload = workload or plan_workload(trace, seed=seed)
    stats = trace_stats(workload.path)
    executor = executor or SerialExecutor()
    tasks = [{"position": i, "candidate": asdict(c), "trace": workload.path, "replicate_traces": list(workload.replicates),
              "slo": asdict(slo), "settings": asdict(settings), "seed": seed, "overrides": overrides or {}}
             for i, c in enumerate(candidates)]
    results = []
    # `on_done` hears of the candidates in their input order (each as soon as it and every candidate
    # before it are done), so a parallel plan prints the same progress lines as a serial one
    waiting: dict[int, dict[str, Any]] = {}
    told = 0  # candidates `on_done` has heard of: positions 0 .. told - 1
    from sim.plan.executors import Outcome

    resumed = [Outcome(t, journal.finished(t)) for t in tasks if journal is not None and journal.finished(t)]
    todo = [t for t in tasks if journal is None or not journal.finished(t)]

    def outcomes():
        yield from resumed
        for outcome in executor.map_unordered(search_candidate, todo):
            if journal is not None and outcome.error is None:
                journal.record(outcome.item, outcome.value)
            yield outcome

    try:
        for outcome in outcomes():
            r = outcome.value if outcome.error is None else {**outcome.item["candidate"], "error": outcome.error}
            r = add_costs(r, target_rps=target_rps, mean_output_tokens=source_stats.mean_output_tokens,
                          assumptions=assumptions)
            results.append((outcome.item["position"], r))
            if on_done:
                waiting[outcome.item["position"]] = r
                while told in waiting:
                    on_done(waiting.pop(told))
                    told += 1
    finally:
        executor.close()
    # Candidates' input order breaks ties in the ranking, so completion order never shows.
    results = [r for _, r in sorted(results, key=lambda pair: pair[0])]
    a = assumptions
    return {
        "workload": {"trace": display_path(trace), "requests": source_stats.requests,
                     "native_rate_rps": source_stats.native_rate_rps,
                     "mean_prompt_tokens": source_stats.mean_prompt_tokens,
                     "mean_output_tokens": source_stats.mean_output_tokens,
                     # what the search replayed (issue 41): the trace, or the trace extended by resampling
                     "searched_requests": workload.requests, "extended": workload.extended,
                     "searched_native_rate_rps": stats.native_rate_rps, "bootstrap_replicates": len(workload.replicates),
                     "text": workload.text},
        "slo": asdict(slo),
        "slo_text": slo.describe(),
        "target_rps": target_rps,
        "search": {**asdict(settings), "method": settings.describe()},
        "assumptions": {"years": a.years, "electricity_usd_per_kwh": a.electricity_usd_per_kwh,
                        "utilization": a.utilization, "rank_by": rank_by,
                        "text": (f"rental = profile $/hour x replicas; ownership = purchase price over {a.years:g} years "
                                 f"at {a.utilization:.0%} utilisation + board power x {a.electricity_usd_per_kwh:g} $/kWh; "
                                 f"per million output tokens at {target_rps:g} req/s x "
                                 f"{source_stats.mean_output_tokens:.1f} output tokens/request")},
        "candidates": rank(results, rank_by),
    }
