"""`infersim plan` on the simulator: the search's pass/fail pair re-simulated, JSON contract, costs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.catalog.hardware import load_profile
from sim.cli import app
from sim.plan.costs import HOURS_PER_YEAR
from sim.plan.planner import SLO, SearchSettings, check_slo, search_candidate
from sim.plan.workload import trace_stats


def _trace(path: Path, n: int = 120) -> Path:
    # Poisson-like but deterministic gaps (golden-ratio sequence), prompts 300..1,500, outputs 40..160
    t, lines = 0.0, []
    for i in range(n):
        t += 0.2 + 0.6 * ((i * 0.618034) % 1.0)
        lines.append(json.dumps({"arrival_s": round(t, 6), "prompt_tokens": 300 + (i * 397) % 1200,
                                 "output_tokens": 40 + (i * 53) % 120}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _replay(trace: str, rate_rps: float, slo: SLO):
    from sim.api import RunSpec, run_spec

    res = run_spec(RunSpec(trace=trace, hw="rtx-4090", engine="vllm", model="llama-3.1-8b", quant="fp8",
                           rate_scale=trace_stats(trace).rate_scale_for(rate_rps)))
    return check_slo(res.summary, res.requests, slo, rate_rps)


def test_search_finds_a_rate_that_meets_the_slo_and_a_slightly_higher_one_that_does_not(tmp_path):
    trace = str(_trace(tmp_path / "t.jsonl"))
    slo = SLO(ttft_p90_s=0.5, tpot_p90_s=0.1)
    settings = SearchSettings(rel_tol=0.05)
    out = search_candidate({"candidate": {"hw": "rtx-4090", "engine": "vllm", "model": "llama-3.1-8b", "quant": "fp8"},
                            "trace": trace, "slo": vars(slo), "settings": vars(settings), "seed": 0})
    assert out["error"] is None, out["error"]
    lo, hi = out["max_rate_rps"], out["first_failing_rate_rps"]
    assert lo is not None and hi is not None and lo < hi
    assert (hi - lo) / hi <= 0.05
    # Re-simulate both ends independently of the search.
    at_lo, at_hi = _replay(trace, lo, slo), _replay(trace, hi, slo)
    assert at_lo.passed, at_lo.reason
    assert not at_hi.passed
    # the first failing rate misses an SLO, or outruns the deployment (issue 41: an overload fails)
    assert at_lo.ttft_p90_s <= 0.5 and (at_hi.ttft_p90_s > 0.5 or at_hi.tpot_p90_s > 0.1
                                        or at_hi.verdict_state == "overloaded")
    assert at_lo.verdict_state != "overloaded"
    assert out["simulations"] == len(out["probes"]) >= 3


def test_plan_json_has_the_contract_fields_and_costs_that_check_by_hand(tmp_path):
    trace = _trace(tmp_path / "t.jsonl", n=80)
    res = CliRunner().invoke(app, [
        "plan", "--trace", str(trace), "--hw", "rtx-4090,dgx-spark", "--engine", "vllm", "--model", "llama-3.1-8b",
        "--quant", "fp8", "--ttft-p90", "800ms", "--tpot-p90", "0.1", "--target-rps", "20", "--years", "4",
        "--electricity-usd-per-kwh", "0.2", "--utilization", "0.5", "--workers", "1", "--replicates", "2", "--json",
        "--html", str(tmp_path / "plan.html")])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert {c["hw"] for c in plan["candidates"]} == {"rtx-4090", "dgx-spark"}
    mean_out = trace_stats(str(trace.resolve())).mean_output_tokens
    wl = plan["workload"]  # 80 requests: extended by resampling to the 2,000 a plan searches on (issue 41)
    assert (wl["requests"], wl["searched_requests"], wl["extended"], wl["bootstrap_replicates"]) == (80, 2000, True, 2)
    for c in plan["candidates"]:
        lo, hi = c["max_rate_interval_rps"]
        assert lo <= c["max_rate_rps"] < hi and len(c["replicate_max_rates_rps"]) == 2
        assert c["replicas_range"][0] <= c["replicas"] <= c["replicas_range"][1]
        assert c["at_max_rate"]["verdict_state"] != "overloaded"
        assert {"hw", "engine", "model", "quant", "max_rate_rps", "replicas", "cost_per_million_output_tokens"} <= set(c)
        assert (c["engine"], c["model"], c["quant"]) == ("vllm", "llama-3.1-8b", "fp8")
        assert c["replicas"] == math.ceil(20 / c["max_rate_rps"])
        p = load_profile(c["hw"])
        tokens_per_hour = 20 * mean_out * 3600
        rental = c["cost_per_million_output_tokens"]["rental"]
        if p.price.rental_usd_per_hour is None:
            assert rental is None
        else:
            assert rental == pytest.approx(c["replicas"] * p.price.rental_usd_per_hour / tokens_per_hour * 1e6)
        if p.price.purchase_usd is not None and p.power_w is not None:
            hourly = p.price.purchase_usd / (4 * HOURS_PER_YEAR * 0.5) + p.power_w / 1000 * 0.2
            assert c["cost_per_million_output_tokens"]["ownership"] == pytest.approx(
                c["replicas"] * hourly / tokens_per_hour * 1e6)
    assert "Every replay of the rate search" in (tmp_path / "plan.html").read_text()


def test_plan_rejects_a_malformed_slo_in_one_line(tmp_path):
    trace = _trace(tmp_path / "t.jsonl", n=5)
    res = CliRunner().invoke(app, ["plan", "--trace", str(trace), "--hw", "rtx-4090", "--ttft-p90", "soon",
                                   "--target-rps", "1"])
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == "error: --ttft-p90: 'soon' is not a duration (examples: 2s, 100ms, 1.5)"


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--engine", "vlm", "error: --engine: unknown engine 'vlm'; did you mean: vllm"),
    ("--hw", "h100", "error: --hw: unknown hardware profile 'h100'"),
    ("--target-rps", "0", "error: --target-rps: must be > 0, got 0.0"),
])
def test_plan_rejects_unknown_names_before_searching(tmp_path, option, value, message):
    args = {"--trace": str(_trace(tmp_path / "t.jsonl", n=5)), "--hw": "rtx-4090", "--engine": "vllm",
            "--ttft-p90": "1s", "--target-rps": "1", option: value}
    res = CliRunner().invoke(app, ["plan", *[x for kv in args.items() for x in kv]])
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1].startswith(message)


def test_a_parallel_plan_reports_its_candidates_in_their_input_order(tmp_path):
    """Workers finish in any order; `on_done` (the progress lines) hears of the candidates in the
    order they were given, so a plan prints the same lines however its workers were scheduled."""
    from sim.plan.executors import Outcome
    from sim.plan.planner import Candidate, run_plan

    class Backwards:
        """Completes the items last to first, as a pool of workers may."""

        name = "backwards"

        def map_unordered(self, fn, items):
            for item in reversed(list(items)):
                yield Outcome(item, error="not run") if item["position"] == 1 else Outcome(item, fn(item))

        def close(self):
            pass

    trace = str(_trace(tmp_path / "t.jsonl", n=40))
    candidates = [Candidate(hw=h, engine="vllm", model="llama-3.1-8b", quant="fp8")
                  for h in ("rtx-4090", "h100-sxm", "dgx-spark")]
    heard = []
    from sim.plan.workload import plan_workload

    out = run_plan(trace=trace, candidates=candidates, slo=SLO(ttft_p90_s=1.0), target_rps=5.0,
                   settings=SearchSettings(rel_tol=0.2, max_iterations=4), executor=Backwards(),
                   workload=plan_workload(trace, min_requests=40, replicates=0, cache_dir=tmp_path),
                   on_done=lambda r: heard.append((r["hw"], r.get("error"))))
    assert heard == [("rtx-4090", None), ("h100-sxm", "not run"), ("dgx-spark", None)]
    assert {c["hw"] for c in out["candidates"]} == {"rtx-4090", "h100-sxm", "dgx-spark"}
