"""Eager prefill: the host-side launch time of a prompt (extend) forward that runs without a CUDA graph
(EngineConfig.eager_prefill_moe_layer_us, session 44, and eager_prefill_launch_us, session 45: the forward's
kernel launches counted per layer kind by `sim.cost.eager_launches`; issue 38). A `sim.engine.pricing.StepModel`
wrapper.

What it models. SGLang captures CUDA graphs for decode batches only; an extend (prefill) batch runs the
model's forward eagerly, op by op from Python, unless the opt-in piecewise CUDA graph is on
(`--enable-piecewise-cuda-graph`, sgl-project/sglang PR #10062, 2025-09: "SGLang's current native
prefilling can incur kernel launch overhead ... especially for the short length input"; the default-on
switch, PR #16331 of 2026-01, still lists DeepSeek and MiniMax EP as unsupported in issue #18130 of
2026-02-02). The host then issues every kernel of every layer one by one, and the GPU cannot run ahead of
it: a step with prompt tokens lasts at least the host's launch time for its layers (SGLang 0.5.10+ replays
piecewise graphs by default where its server_args allow: such steps skip the floor, sim.cost.prefill_graphs),

    prefill step >= n_moe_layers x eager_prefill_moe_layer_us          (0 for a dense model)

beside the step's own roofline time (the GPU's work), max of the two: a short prompt on a large TP
group, or a small-active-parameter MoE model, is host-bound, a long prompt of a dense 70B is not.
Only MoE layers are counted: their eager forward launches several times the kernels of a dense MLP
(router GEMM, top-k, align/sort, two grouped GEMMs, activation, combine, shared expert; on block-FP8
checkpoints a per-token-group quantisation before every GEMM), and the corpus's dense SGLang curves
(Llama-3.x 70B/405B) show no unloaded TTFT excess beyond the front end (docs/floor-structure.md; their
GPU time at 0.5-8k-token prompts hides their launches). Decode steps are untouched (CUDA graphs).

The cited value. sgl-project/sglang PR #12160 (2025-10-26) logs the eager forward of DeepSeek-V3
prefilling one new token: "forward cost-82.6406478881836 ms" (23.1 ms with its prefill CUDA graph). A
one-token forward does almost no GPU work, so the 82.6 ms is the eager forward's host time over
DeepSeek-V3's 58 MoE layers (61 layers, the first 3 dense): 82.64 / 58 = 1425 us per MoE layer, the
dense layers' launches attributed to the MoE ones. The GPU of that log is not stated. Whether the term
ships in the SGLang preset is decided by the held-out rule in calibrate/serving/eagerprefill.py."""

from __future__ import annotations

from sim.cost import eager_backends  # read through the module, so a test can swap deployment_backends
from sim.cost.prefill_graphs import graph_max_tokens

#: PR #12160's eager DeepSeek-V3 forward of one new token [ms] over its 58 MoE layers [us per MoE layer]
CITED_FORWARD_MS = 82.6406478881836
CITED_MOE_LAYERS = 58
CITED_US_PER_MOE_LAYER = CITED_FORWARD_MS * 1e3 / CITED_MOE_LAYERS


def eager_prefill_floor_s(model, engine, quant=None, hw=None, n_tokens: int | None = None) -> float:
    """Seconds a step with prompt tokens lasts at least: n_moe_layers x eager_prefill_moe_layer_us (session
    44's per-MoE-layer form; 0 for a dense model) + the forward's kernel launches x eager_prefill_launch_us
    (session 45's per-model form, `sim.cost.eager_launches`: counted from the architecture, `quant` the
    deployment's QuantFormat, None = bf16; session 47: under the fused backends the deployment runs,
    `sim.cost.eager_backends`, `hw` the HardwareProfile (None = not known), `n_tokens` the step's input tokens
    (None = a step too large for the all-reduce fusion)). 0 with both fields 0."""
    us = float(getattr(engine, "eager_prefill_moe_layer_us", 0.0) or 0.0)
    layers = int(getattr(model, "n_routed_layers", 0) or 0)
    floor = us * layers / 1e6 if us > 0 and layers > 0 else 0.0
    launch_us = float(getattr(engine, "eager_prefill_launch_us", 0.0) or 0.0)
    if launch_us > 0:
        tp = int(getattr(engine, "tp", 1) or 1)
        backends = eager_backends.deployment_backends(model, engine, hw, quant)
        floor += eager_backends.backend_launches(model, quant, tp, backends, n_tokens) * launch_us / 1e6
    return floor


class EagerPrefill:
    """A `StepModel` whose batches with prompt chunks last at least `floor_s` (module docstring):
    batch_time = max(inner, floor_s) when the batch has a prompt chunk; decode-only runs as `inner`. With
    `graph_max_tokens` > 0 (SGLang 0.5.10+'s piecewise CUDA graphs, sim.cost.prefill_graphs) a prompt step of at
    most that many input tokens (its prompt tokens + decode lanes: len(input_ids)) replays a graph: no floor. With
    `small_max_tokens` > 0 a step of at most that many input tokens has the floor `small_floor_s` instead (SGLang's
    all-reduce fusion, on steps of at most 2,048 tokens: sim.cost.eager_backends)."""

    def __init__(self, inner, floor_s: float, graph_max_tokens: int = 0, small_floor_s: float | None = None,
                 small_max_tokens: int = 0) -> None:
        if not floor_s > 0:
            raise ValueError(f"an eager-prefill floor needs floor_s > 0, got {floor_s!r}")
        self.inner = inner
        self.floor_s = float(floor_s)
        self.graph_max_tokens = max(int(graph_max_tokens), 0)
        self.small_floor_s = self.floor_s if small_floor_s is None else float(small_floor_s)
        self.small_max_tokens = max(int(small_max_tokens), 0)

    def batch_time(self, b) -> float:
        t = self.inner.batch_time(b)
        if not b.prefill_tokens:
            return t
        n_tokens = sum(b.prefill_tokens) + int(getattr(b, "n_decode", 0) or 0)
        if self.graph_max_tokens and n_tokens <= self.graph_max_tokens:
            return t  # a piecewise graph replays the step: no eager launches
        if self.small_max_tokens and n_tokens <= self.small_max_tokens:
            return max(t, self.small_floor_s)
        return max(t, self.floor_s)

    def run_time(self, b, k: int) -> float:
        return self.inner.run_time(b, k)

    def steps_within(self, b, budget_s: float, max_steps: int) -> int:
        return self.inner.steps_within(b, budget_s, max_steps)

    def run_limit(self, b):
        return self.inner.run_limit(b)

    def __getattr__(self, name):  # everything else (e.g. `tokens_per_step`) from the wrapped model
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def with_eager_prefill(step_model, model, engine, quant=None, hw=None):
    """`step_model` itself when the engine's eager-prefill floor is 0 for `model`, else wrapped; `hw` (the
    HardwareProfile, None = not known) decides with the engine whether prompt steps replay piecewise graphs."""
    floor = eager_prefill_floor_s(model, engine, quant, hw)
    if not floor > 0:
        return step_model
    small = eager_prefill_floor_s(model, engine, quant, hw, n_tokens=eager_backends.FUSE_ALLREDUCE_MAX_TOKENS)
    return EagerPrefill(step_model, floor, graph_max_tokens(model, engine, hw), small_floor_s=small,
                        small_max_tokens=eager_backends.FUSE_ALLREDUCE_MAX_TOKENS if small != floor else 0)
