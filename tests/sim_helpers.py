"""Shared scaffolding for the simulation tests: real presets and cost model, small KV caches."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import Efficiency, load_profile
from sim.catalog.lookup import get_model
from sim.cluster.simulate import simulate
from sim.cost.memory import activation_peak_bytes, default_max_batched_tokens
from workloads.request import Request

MODEL = get_model("llama-3.1-8b")
H100 = load_profile("h100-sxm")


def engine_with_kv_capacity(preset: str, capacity_tokens: int, hw=H100, model=MODEL, **overrides):
    """A real preset whose memory fraction is chosen so the KV cache holds about `capacity_tokens`:
    fraction = (weights + activation peak + capacity x KV bytes per token) / device memory."""
    eng = load_engine(preset).for_hardware(hw).with_overrides(activation_reserve_fraction=0.0, **overrides)
    tokens = eng.forward_tokens or default_max_batched_tokens(hw)
    need = (model.weight_bytes(eng.default_quant) + activation_peak_bytes(model, tokens)
            + (capacity_tokens + 0.5) * model.kv_bytes_per_token(eng.kv_dtype))
    return eng.with_overrides(memory_fraction=need / hw.memory_bytes)


def bandwidth_bound_h100():
    """The H100 profile with compute made effectively free and no overheads: every step is priced
    by memory traffic alone, bandwidth x 0.8."""
    return H100.model_copy(update={
        "peak_tflops": {k: v * 1e6 for k, v in H100.peak_tflops.items()},
        "efficiency": Efficiency(compute=1.0, bandwidth=0.8, attention=1.0),
        "engine_efficiency": {},
        "iteration_overhead_ms": 0.0,
        "per_sequence_overhead_ms": 0.0,
        "calibration": None,
    })


def random_trace(n: int, seed: int, *, rate_per_s: float = 20.0, prompt=(1, 3000), output=(1, 400),
                 extra_budget=(0, 300)) -> list[Request]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / rate_per_s, n))
    out = []
    for i in range(n):
        o = int(rng.integers(output[0], output[1] + 1))
        out.append(Request(str(i), float(t[i]), int(rng.integers(prompt[0], prompt[1] + 1)), o,
                           o + int(rng.integers(extra_budget[0], extra_budget[1] + 1))))
    return out


def run(requests, engine, hw=H100, model=MODEL, **kw):
    return simulate(requests, hw=hw, model=model, quant=None, engine=engine, check_invariants=True, **kw)


def assert_step_model_contract(m, batch) -> tuple[float, list[float], int | None]:
    """The `StepModel` postconditions (docs/contracts.md) of `m` on the batch `batch()` builds afresh for each
    call: one step costs > 0 and batch_time is run_time(1); run_time grows strictly with the step count from 0 at
    0 steps; steps_within is the largest count whose run_time fits the budget; run_limit is None or >= 1.
    Returns (one step's time, run_time of 0..39 steps, run_limit)."""
    one = m.run_time(batch(), 1)
    assert one > 0 and m.batch_time(batch()) == pytest.approx(one, rel=1e-9)
    times = [m.run_time(batch(), k) for k in range(0, 40)]
    assert times[0] == 0.0 and all(x < y for x, y in zip(times, times[1:]))
    for budget in (0.0, one * 0.5, times[7], times[7] * 1.0001, times[30] - 1e-12, 1e9, math.inf):
        j = m.steps_within(batch(), budget, 35)
        want = max((k for k in range(0, 36) if times[k] <= budget), default=0)
        assert j == want, (budget, j, want)
    limit = m.run_limit(batch())
    assert limit is None or limit >= 1
    return one, times, limit
