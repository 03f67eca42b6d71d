"""The engine's step-pricing protocol (`sim.engine.pricing.StepModel`): its postconditions on every
implementation (roofline, speculative, llama.cpp passes), and a table-driven step model dropped in
to run a whole simulation without the roofline."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import load_profile
from sim.catalog.lookup import get_model
from sim.cost.passes import LlamaCppPasses, make_step_model
from sim.cost.speculative import make_cost_model
from sim.engine.build import LoneClock, build_replica, replica_parts
from sim.engine.pricing import StepBatch
from workloads.arrivals import ArrivalSource
from workloads.request import Request

from sim_helpers import assert_step_model_contract


def _decode_batch(lanes, ctx) -> StepBatch:
    """A decode-only StepBatch over a stand-in state (no sum kept: the batch sums its contexts)."""
    state = SimpleNamespace(n_decoding=-1, decode_ctx_sum=None)
    return StepBatch(state, np.asarray(lanes, dtype=np.int64), [], [], np.asarray(ctx, dtype=np.int64))


def _models():
    hw = load_profile("h100-sxm")
    vllm = load_engine("vllm")
    plain = make_cost_model(hw, "llama-3.1-8b", None, vllm)
    eagle = make_cost_model(hw, "llama-3.1-8b", None, vllm.with_overrides(
        speculative={"method": "eagle", "k": 3, "acceptance_rate": 0.7, "draft_cost_fraction": 0.1}))
    window = make_cost_model(hw, "gemma-3-270m", None, vllm)  # sliding-window layers: several segments
    lcpp = load_engine("llama.cpp").with_overrides(per_sequence_kv_streams=True, context_mode="split",
                                                   ubatch_tokens=4)
    streams = make_step_model(make_cost_model(load_profile("rtx-4090"), "llama-3.1-8b", None, lcpp), lcpp, 8)
    assert isinstance(streams, LlamaCppPasses)
    return {"roofline": plain, "speculative": eagle, "sliding-window": window, "llama.cpp passes": streams}


MODELS = _models()
# lanes with a gap (two K/V-stream passes under llama.cpp's split_equal) and more than a ubatch of them
BATCHES = [([0], [100]), ([0, 1, 2, 5, 6, 7], [10, 300, 2000, 50, 4000, 7]), (list(range(12)), [500 + 37 * i for i in range(12)])]


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("lanes,ctx", BATCHES)
def test_postconditions(name, lanes, ctx):
    assert_step_model_contract(MODELS[name], lambda: _decode_batch(lanes, ctx))


class TableStepModel:
    """A measured step model: seconds per decode step by batch size (linear interpolation between
    the table's points, flat past its ends) and seconds per prompt token. It knows nothing of the
    roofline; it only implements the four methods of `StepModel`."""

    def __init__(self, decode_s: dict[int, float], prefill_s_per_token: float) -> None:
        self.n = np.array(sorted(decode_s), dtype=float)
        self.s = np.array([decode_s[k] for k in sorted(decode_s)])
        self.prefill_s_per_token = prefill_s_per_token
        self.calls = {"batch_time": 0, "run_time": 0, "steps_within": 0, "run_limit": 0}

    def step_s(self, n: int) -> float:
        return float(np.interp(n, self.n, self.s))

    def batch_time(self, b) -> float:
        self.calls["batch_time"] += 1
        return self.prefill_s_per_token * sum(b.prefill_tokens) + (self.step_s(b.n_decode) if b.n_decode else 0.0)

    def run_time(self, b, k: int) -> float:
        self.calls["run_time"] += 1
        return k * self.step_s(b.n_decode)

    def steps_within(self, b, budget_s: float, max_steps: int) -> int:
        self.calls["steps_within"] += 1
        if not math.isfinite(budget_s):
            return max_steps
        j = min(max_steps, max(0, int(budget_s // self.step_s(b.n_decode))))
        while j > 0 and self.run_time(b, j) > budget_s:  # exact inverse despite the float division
            j -= 1
        while j < max_steps and self.run_time(b, j + 1) <= budget_s:
            j += 1
        return j

    def run_limit(self, b) -> None:
        self.calls["run_limit"] += 1
        return None


def _simulate(requests, step_model, fast_forward=True):
    # no front-end latency: the table alone times every request
    parts = replica_parts(load_profile("h100-sxm"), get_model("llama-3.1-8b"), None,
                          load_engine("vllm").with_overrides(request_overhead_ms=0.0))
    clock = LoneClock()
    rep = build_replica(clock, parts, ArrivalSource(requests), step_model=step_model, fast_forward=fast_forward)
    clock.run(rep.run())
    log = rep.log
    return log.first_token_s[:log.n].copy(), log.finish_s[:log.n].copy(), rep


def test_a_table_driven_step_model_runs_a_simulation():
    table = TableStepModel({1: 0.010, 8: 0.012, 64: 0.020}, prefill_s_per_token=1e-4)
    # one request alone: its prompt in one iteration, then 99 decode steps of batch size 1
    first, finish, _ = _simulate([Request("a", 0.0, 1000, 100, 100)], table)
    assert first[0] == pytest.approx(0.1) and finish[0] == pytest.approx(0.1 + 99 * 0.010)
    # four at once: one prefill iteration of 4 x 500 tokens, then decode steps of batch 4 (interpolated:
    # 0.010 + 3/7 x 0.002 s) until the shortest finishes, then of 3, 2, 1
    reqs = [Request(f"r{i}", 0.0, 500, 20 * (i + 1), 1000) for i in range(4)]
    first, finish, rep = _simulate(reqs, table)
    assert np.allclose(first, 0.2)
    s = [table.step_s(n) for n in (4, 3, 2, 1)]
    want, t = [], 0.2
    for i in range(4):  # request i decodes 20 (i + 1) - 1 steps; 20 with each batch size from 4 - i down
        t += (19 if i == 0 else 20) * s[i]
        want.append(t)
    assert finish == pytest.approx(want, rel=1e-12)
    assert rep.batch_steps == 1 + 79  # the prefill, then 79 decode steps ...
    assert table.calls["run_time"] < 20  # ... in a handful of fast-forwarded runs, not one call per step
    # the same results one iteration at a time
    first1, finish1, _ = _simulate(reqs, TableStepModel({1: 0.010, 8: 0.012, 64: 0.020}, 1e-4), fast_forward=False)
    assert np.array_equal(first, first1) and finish1 == pytest.approx(finish, rel=1e-12)


def test_a_run_stops_at_an_arrival_the_table_model_places():
    # the second request arrives mid-run: the fast-forward asks the model how many steps end before it
    table = TableStepModel({1: 0.010, 64: 0.010}, prefill_s_per_token=1e-4)
    reqs = [Request("a", 0.0, 100, 200, 200), Request("b", 0.505, 100, 10, 10)]
    first, finish, _ = _simulate(reqs, table)
    assert table.calls["steps_within"] >= 1
    # step-by-step, "b" is admitted at the first iteration boundary after 0.5 s
    first1, finish1, _ = _simulate(reqs, TableStepModel({1: 0.010, 64: 0.010}, 1e-4), fast_forward=False)
    assert first == pytest.approx(first1, rel=1e-12) and finish == pytest.approx(finish1, rel=1e-12)
    assert first[1] > 0.505
