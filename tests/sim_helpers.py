"""Shared scaffolding for the simulation tests: real presets and cost model, small KV caches."""

from __future__ import annotations

import numpy as np

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
