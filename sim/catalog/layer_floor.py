"""The engine-preset fields of the per-layer kernel floor (`EngineConfig` inherits them; sim.cost.roofline and
sim.cost.placed price them; docs/cost-model.md 'Per-layer kernel floor'). Kept apart so engine_config.py stays
within the module size limit.

A decoder layer's decode step is a chain of small kernels, each lasting a few microseconds from launch to
completion, so the layer takes at least a floor however few bytes it moves. The chain of a layer with routed
experts (router, top-k, permute, grouped GEMMs, combine) is longer than a dense MLP's (one gate/up GEMM, an
activation, one down GEMM), so the floor may differ by the layer's FFN kind (session 46, issue 38: measured
TPOT / n_layers at one client is ~80-125 us for dense Llama-3.1-8B on H100 TP2, vLLM and TensorRT-LLM,
against ~130-200 us for MoE models on SGLang B200/H100 and MI300X; benchmarks/serving_fidelity.json)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class LayerFloorSettings(BaseModel):
    """The per-layer kernel floor, per FFN kind (EngineConfig's model config applies)."""

    layer_floor_us: float = Field(0.0, ge=0, description=(
        "device time one decoder layer takes at least in a step (its chain of 10-30 small kernels; with "
        "layer_floor_dense_us set: the layers with routed experts only); 0 = no floor"))
    layer_floor_dense_us: float | None = Field(None, ge=0, description=(
        "the floor of a layer without routed experts (a dense MLP, or mixer-only); None = layer_floor_us"))
    layer_floor_plus_stream: bool = Field(False, description=(
        "the floor's form: False = the layers' chain latency alone (n_layers x layer_floor_us bounds the step's "
        "weight GEMMs and TP all-reduces); True = that chain latency plus the step's weight bytes at the "
        "device's datasheet bandwidth (sim.cost.kernels.layer_floor_stream_s), so a TP group or a smaller "
        "format still streams faster; layer_floor_us is then the chain's latency alone"))


def layer_floor_total_s(model, floor_s: float, dense_floor_s: float | None = None) -> float:
    """Seconds one forward's layer chains take at least, summed over the layers by kind:

        n_routed_layers x floor_s + (n_layers - n_routed_layers) x dense_floor_s

    (`ModelSpec.n_routed_layers`: the layers with routed experts; the others are dense-MLP layers and the
    mixer-only blocks of hybrids such as Nemotron-H, whose chain has no routed FFN either). dense_floor_s None
    = floor_s for every layer, n_layers x floor_s exactly as before the split (a dense model: 0 routed layers,
    so only dense_floor_s counts once set)."""
    if dense_floor_s is None:
        return float(floor_s) * model.n_layers  # the one-floor formula, bit for bit
    n_moe = model.n_routed_layers
    return float(floor_s) * n_moe + float(dense_floor_s) * (model.n_layers - n_moe)
