"""The physical cost model: seconds for one engine iteration, from the shape of its batch.

One iteration (one forward pass of the engine) processes some prefill chunks (P_i new prompt tokens
of a sequence that already has C_i tokens in its KV cache) and some decode sequences (one new token
each, sequence j having D_j tokens in its KV cache). Its time is a roofline plus overheads:

    compute_s  = matmul_flops / matmul_flops_per_s + attention_flops / attention_flops_per_s
    memory_s   = (weight_bytes + kv_read_bytes + kv_write_bytes) / bandwidth_bytes_per_s
    step_s     = max(compute_s, memory_s) + iteration_overhead_s + per_sequence_overhead_s x sequences

with (T = new tokens = sum P_i + number of decodes; N = sequences = number of chunks + decodes):

    matmul_flops    = 2 x (matmul params without the LM head) x T        [FLOP; 2 = multiply + add]
                    + 2 x (vocab x hidden) x N                            [LM head: logits only for the last
                                                                           position of each sequence, as vLLM
                                                                           and llama.cpp compute them]
    attention_flops = 4 x layers x heads x head_dim x keys                [FLOP; QK^T and PV, 2 each]
        keys        = sum_i (P_i x C_i + P_i (P_i + 1) / 2) + sum_j (D_j + 1)
                      (chunk token t attends to the C_i cached tokens and to itself and the t tokens
                       before it — causal; a decode token attends to its D_j cached tokens and itself)
    weight_bytes    = bytes of every weight matrix streamed once per iteration      [B]
                      (dense: all weights except an untied input-embedding table, of which only T rows
                       are gathered; MoE: see `expected_distinct_experts`)
    kv_read_bytes   = kv_bytes_per_token x (sum_i C_i + sum_j D_j)                   [B]
    kv_write_bytes  = kv_bytes_per_token x T                                         [B]

Why max and not sum: the GPU (or CPU) streams weights and KV from memory while its matmul units work
on what already arrived — the two resources overlap, and the one that needs longer sets the pace
(the roofline model, Williams et al., CACM 2009). A sum would count the overlapped time twice:
a bandwidth-bound decode step would be charged its (small) FLOP time on top. The max of the iteration
totals is slightly optimistic when some kernels of the step are compute-bound and others memory-bound;
that residue, and everything else the roofline leaves out (activation traffic, norms, all-reduces,
kernel launch gaps), is absorbed by the measured efficiencies and overheads that `CostParams` holds.

Activation traffic (about 2 x hidden bytes per token per layer) is ignored: it is < 1% of the weight
bytes for a decode step and prefill is compute-bound. Sliding-window layers are priced as full
attention (the ModelSpec does not describe windows yet).

Unified-memory SoCs and CPUs use the same formulas with their own bandwidth and FLOP/s. The five
numbers in `CostParams` are the only free parameters: calibration fits them with `predict_times`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, ClassVar, Sequence

import numpy as np

from sim.errors import ConfigError
from sim.models import ModelSpec
from sim.quant import QuantFormat

if TYPE_CHECKING:
    from sim.engine_config import EngineConfig
    from sim.hardware import HardwareProfile

# Attention (QK^T, softmax, PV) runs on activations and the KV cache, which all the presets keep in
# 16-bit floats; weight-only and fp8 weight formats do not change that. A profile without bf16 falls
# back to its nearest format (`HardwareProfile.peak_flops`).
ATTENTION_FORMAT = "bf16"


@dataclass(frozen=True)
class CostParams:
    """The five free parameters of the cost model, as effective (achieved) values.

    - `bandwidth_bytes_per_s`: sustained memory read bandwidth [B/s] = peak x efficiency.
    - `matmul_flops_per_s`: sustained dense-matmul throughput in the weights' compute format [FLOP/s].
    - `attention_flops_per_s`: sustained attention-kernel throughput [FLOP/s].
    - `iteration_overhead_s`: fixed cost per iteration (kernel launches, scheduling) [s].
    - `per_sequence_overhead_s`: cost per sequence per iteration (sampling, detokenization) [s].
    """

    bandwidth_bytes_per_s: float
    matmul_flops_per_s: float
    attention_flops_per_s: float
    iteration_overhead_s: float = 0.0
    per_sequence_overhead_s: float = 0.0

    FIELDS: ClassVar[tuple[str, ...]] = (
        "bandwidth_bytes_per_s",
        "matmul_flops_per_s",
        "attention_flops_per_s",
        "iteration_overhead_s",
        "per_sequence_overhead_s",
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            positive = f.name.endswith("_per_s")
            if not (math.isfinite(v) and (v > 0 if positive else v >= 0)):
                raise ConfigError(f"must be {'> 0' if positive else '>= 0'} and finite, got {v}", field=f.name)

    def to_array(self) -> np.ndarray:
        """The parameters as a float array in `FIELDS` order (for least-squares fitting)."""
        return np.array([getattr(self, f) for f in self.FIELDS], dtype=float)

    @classmethod
    def from_array(cls, x: Sequence[float]) -> "CostParams":
        return cls(*(float(v) for v in x))

    @classmethod
    def from_profile(
        cls, hw: "HardwareProfile", quant: str | QuantFormat, engine: "EngineConfig | None" = None
    ) -> "CostParams":
        """Effective parameters of an engine on a hardware profile.

        bandwidth = datasheet bandwidth x eff.bandwidth x scale.bandwidth
        matmul    = peak FLOP/s in the quant's compute format x eff.compute x scale.compute
        attention = peak bf16 FLOP/s x eff.compute x eff.attention x scale.compute x scale.attention
        overheads = profile's (device) + engine's (software), ms -> s

        `eff` is the profile's efficiency for this engine when it has one (then the engine's
        `efficiency_scale` is not applied: the measurement already is that engine's), else its
        generic efficiency times the engine's scale. When the profile was calibrated on this very
        engine (`hw.calibration["engine"] == engine.name`) the engine's overheads are already in the
        profile's and are not added again.
        """
        from sim.quant import get_quant

        q = quant if isinstance(quant, QuantFormat) else get_quant(quant)
        name = engine.name if engine is not None else None
        eff = hw.efficiency_for(name)
        own_measurement = name is not None and name in hw.engine_efficiency
        calibrated_on_engine = name is not None and (hw.calibration or {}).get("engine") == name
        scale_c = scale_b = scale_a = 1.0
        it_ms, seq_ms = hw.iteration_overhead_ms, hw.per_sequence_overhead_ms
        if engine is not None:
            if not own_measurement and not calibrated_on_engine:
                s = engine.efficiency_scale
                scale_c, scale_b, scale_a = s.compute, s.bandwidth, s.attention
            if not calibrated_on_engine:
                it_ms += engine.iteration_overhead_ms
                seq_ms += engine.per_sequence_overhead_ms
        compute_eff = eff.compute * scale_c
        return cls(
            bandwidth_bytes_per_s=hw.bandwidth_bytes_per_s * eff.bandwidth * scale_b,
            matmul_flops_per_s=hw.peak_flops(q.compute_format) * compute_eff,
            attention_flops_per_s=hw.peak_flops(ATTENTION_FORMAT) * compute_eff * eff.attention * scale_a,
            iteration_overhead_s=it_ms / 1e3,
            per_sequence_overhead_s=seq_ms / 1e3,
        )


@dataclass(frozen=True)
class StepFeatures:
    """The aggregates of iteration shapes the cost depends on, one array element per iteration.

    - `new_tokens` T: tokens processed (prefill chunk tokens + one per decode sequence).
    - `sequences` N: sequences in the iteration (prefill chunks + decodes).
    - `attention_context`: sum over new tokens of the keys each attends to (see module docstring).
    - `kv_read_tokens`: cached tokens whose K and V are read (sum of C_i and D_j).
    """

    new_tokens: np.ndarray
    sequences: np.ndarray
    attention_context: np.ndarray
    kv_read_tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.new_tokens)

    @classmethod
    def concat(cls, items: Sequence["StepFeatures"]) -> "StepFeatures":
        return cls(*(np.concatenate([getattr(it, f.name) for it in items]) for f in fields(cls)))

    @classmethod
    def from_probes(
        cls,
        *,
        prefill_tokens: Sequence[float] = (),
        prefill_context: Sequence[float] | None = None,
        decode_batch: Sequence[float] = (),
        decode_context: Sequence[float] | None = None,
    ) -> "StepFeatures":
        """One row per probe: first the prefill probes (one chunk of P tokens after C cached tokens),
        then the decode probes (B sequences decoding one token each, all at context C)."""
        p = np.asarray(prefill_tokens, dtype=float)
        c = np.zeros_like(p) if prefill_context is None else np.asarray(prefill_context, dtype=float)
        b = np.asarray(decode_batch, dtype=float)
        d = np.zeros_like(b) if decode_context is None else np.asarray(decode_context, dtype=float)
        if p.shape != c.shape or b.shape != d.shape:
            raise ValueError("prefill_tokens/prefill_context and decode_batch/decode_context must have equal lengths")
        return cls(
            new_tokens=np.concatenate([p, b]),
            sequences=np.concatenate([np.ones_like(p), b]),
            attention_context=np.concatenate([p * c + p * (p + 1) / 2, b * (d + 1)]),
            kv_read_tokens=np.concatenate([c, b * d]),
        )


def expected_distinct_experts(n_experts: int, n_active: int, tokens: float | np.ndarray) -> float | np.ndarray:
    """Expected number of distinct experts a batch of `tokens` tokens routes to in one MoE layer.

    Assumes each token picks its `n_active` experts uniformly at random, independently of the other
    tokens (real routers are skewed, which touches fewer experts; uniform routing is the upper-bound
    case load-balancing losses push towards). One expert is missed by one token with probability
    1 - k/E, by all T tokens with (1 - k/E)^T, so

        E_distinct = E x (1 - (1 - k/E)^T)

    which is k for T = 1 and tends to E as T grows.
    """
    miss = 1.0 - n_active / n_experts
    return n_experts * (1.0 - np.power(miss, tokens))


class CostModel:
    """Seconds per engine iteration for one model, quantization, KV dtype and `CostParams`."""

    def __init__(self, model: ModelSpec, quant: str | QuantFormat, params: CostParams, kv_dtype: str = "fp16"):
        self.model = model
        self.quant = model.quant(quant)
        self.params = params
        self.kv_dtype = kv_dtype
        lm_head_params = model.vocab_size * model.hidden_size
        # FLOPs per new token in every matmul but the LM head; FLOPs of the LM head per sampled sequence.
        self.flops_per_token = 2.0 * (model.matmul_params_active - lm_head_params)
        self.flops_per_sequence = 2.0 * lm_head_params
        # Attention FLOPs per (query token, key) pair: 4 x layers x heads x head_dim.
        self.attention_flops_per_key = model.attention_flops_per_token(1.0)
        self.kv_bytes_per_token = model.kv_bytes_per_token(kv_dtype)
        # Weights streamed from memory per iteration. An untied input embedding is a table lookup
        # (T rows), not a streamed matrix, so its bytes are left out.
        total = model.weight_bytes(self.quant)
        lookup_params = 0 if model.tie_embeddings else lm_head_params
        streamed = total * (model.n_params_total - lookup_params) / model.n_params_total
        self.expert_bytes = model.expert_bytes(self.quant)  # one routed expert, all layers [B]
        self.non_expert_bytes = streamed - model.n_experts * self.expert_bytes
        self.dense_weight_bytes = streamed

    @classmethod
    def from_names(
        cls,
        model: str | ModelSpec,
        quant: str | QuantFormat | None = None,
        hw: "str | HardwareProfile" = "h100-sxm",
        engine: "str | EngineConfig" = "vllm",
    ) -> "CostModel":
        """Resolve names (or pass objects): quant defaults to the engine's default, KV dtype is the engine's."""
        from sim.engine_config import EngineConfig, load_engine
        from sim.hardware import HardwareProfile, load_profile
        from sim.models import get_model

        spec = model if isinstance(model, ModelSpec) else get_model(model)
        eng = engine if isinstance(engine, EngineConfig) else load_engine(engine)
        prof = hw if isinstance(hw, HardwareProfile) else load_profile(hw)
        q = spec.quant(quant or eng.default_quant)
        return cls(spec, q, CostParams.from_profile(prof, q, eng), kv_dtype=eng.kv_dtype)

    # ---- the physics, on aggregates (scalars or arrays) ------------------------------------------
    def weight_bytes_read(self, new_tokens):
        """Weight bytes streamed in one iteration of `new_tokens` tokens [B].

        Dense: every streamed matrix once. MoE: the non-expert weights (attention, router, shared
        experts, LM head) once, plus one read per distinct routed expert the batch touches.
        """
        if not self.model.is_moe:
            return self.dense_weight_bytes  # broadcasts against array arguments
        touched = expected_distinct_experts(self.model.n_experts, self.model.n_experts_active, new_tokens)
        return self.non_expert_bytes + touched * self.expert_bytes

    def _terms(self, p: Sequence[float], new_tokens, sequences, attention_context, kv_read_tokens):
        """compute_s, memory_s, overhead_s for aggregates (numpy-broadcast), under parameters p."""
        bw, mm, att, it_s, seq_s = p
        compute_s = (self.flops_per_token * new_tokens + self.flops_per_sequence * sequences) / mm + (
            self.attention_flops_per_key * attention_context
        ) / att
        memory_s = (
            self.weight_bytes_read(new_tokens) + self.kv_bytes_per_token * (kv_read_tokens + new_tokens)
        ) / bw
        overhead_s = it_s + seq_s * sequences
        return compute_s, memory_s, overhead_s

    def predict_times(self, params: CostParams | Sequence[float], features: StepFeatures) -> np.ndarray:
        """Step seconds for many iteration shapes at once (vectorised; for calibration fits).

        `params` is a CostParams or a length-5 array in `CostParams.FIELDS` order. Rows with no new
        tokens cost 0 (an empty iteration does not run).
        """
        p = params.to_array() if isinstance(params, CostParams) else np.asarray(params, dtype=float)
        t = np.asarray(features.new_tokens, dtype=float)
        c, m, o = self._terms(
            p, t, np.asarray(features.sequences, float), np.asarray(features.attention_context, float),
            np.asarray(features.kv_read_tokens, float),
        )
        return np.where(t > 0, np.maximum(c, m) + o, 0.0)

    # ---- one iteration ---------------------------------------------------------------------------
    @staticmethod
    def _aggregate(prefill_tokens, prefill_context, decode_context) -> tuple[float, float, float, float]:
        """(new_tokens, sequences, attention_context, kv_read_tokens) of one iteration's shape."""
        if len(prefill_tokens) != len(prefill_context):
            raise ValueError("prefill_tokens and prefill_context must have the same length")
        tokens = seqs = keys = kv_read = 0.0
        for p, c in zip(prefill_tokens, prefill_context):
            tokens += p
            keys += p * c + p * (p + 1) / 2.0
            kv_read += c
            seqs += 1
        n_d = len(decode_context)
        if n_d:
            s_d = float(np.sum(decode_context))
            tokens += n_d
            seqs += n_d
            keys += s_d + n_d
            kv_read += s_d
        return tokens, seqs, keys, kv_read

    def step_time(
        self,
        prefill_tokens: Sequence[int] = (),
        prefill_context: Sequence[int] = (),
        decode_context: Sequence[int] | np.ndarray = (),
    ) -> float:
        """Seconds of one iteration (see the module docstring for every term). Empty -> 0.0."""
        t, n, keys, kv_read = self._aggregate(prefill_tokens, prefill_context, decode_context)
        if t <= 0:
            return 0.0
        p = self.params
        c, m, o = self._terms(
            (p.bandwidth_bytes_per_s, p.matmul_flops_per_s, p.attention_flops_per_s,
             p.iteration_overhead_s, p.per_sequence_overhead_s),
            t, n, keys, kv_read,
        )
        return float(max(c, m) + o)

    def features(self, prefill_tokens=(), prefill_context=(), decode_context=()) -> StepFeatures:
        """The aggregates of one iteration, as a one-row StepFeatures."""
        return StepFeatures(*(np.array([v]) for v in self._aggregate(prefill_tokens, prefill_context, decode_context)))

    def breakdown(self, prefill_tokens=(), prefill_context=(), decode_context=()) -> dict:
        """Every term of one iteration, in FLOP, bytes and seconds (for reports and calibration)."""
        t, n, keys, kv_read = self._aggregate(prefill_tokens, prefill_context, decode_context)
        p = self.params
        c, m, o = self._terms(
            (p.bandwidth_bytes_per_s, p.matmul_flops_per_s, p.attention_flops_per_s,
             p.iteration_overhead_s, p.per_sequence_overhead_s),
            t, n, keys, kv_read,
        )
        out = {
            "new_tokens": t,
            "sequences": n,
            "matmul_flops": self.flops_per_token * t + self.flops_per_sequence * n,
            "attention_flops": self.attention_flops_per_key * keys,
            "weight_bytes": float(self.weight_bytes_read(t)) if t > 0 else 0.0,
            "kv_read_bytes": self.kv_bytes_per_token * kv_read,
            "kv_write_bytes": self.kv_bytes_per_token * t,
            "compute_s": float(c) if t > 0 else 0.0,
            "memory_s": float(m) if t > 0 else 0.0,
            "overhead_s": float(o) if t > 0 else 0.0,
            "step_s": float(max(c, m) + o) if t > 0 else 0.0,
            "bound": "compute" if c > m else "memory",
        }
        if self.model.is_moe:
            out["experts_touched"] = float(
                expected_distinct_experts(self.model.n_experts, self.model.n_experts_active, t)
            )
        return out

    def single_stream_decode_tok_s(self, context: int) -> float:
        """Decode tokens/s of one sequence alone at `context` cached tokens: 1 / step_time."""
        return 1.0 / self.step_time((), (), (context,))

    def prefill_tok_s(self, prompt_tokens: int, context: int = 0) -> float:
        """Prefill tokens/s of one prompt processed as one chunk after `context` cached tokens."""
        return prompt_tokens / self.step_time((prompt_tokens,), (context,), ())

    # ---- runs of decode steps with an unchanged batch (closed form) --------------------------------
    def _decode_lines(self, decode_context) -> tuple[float, float, float, float] | None:
        """The step time of step i of a fixed decode batch as max of two lines in i, overhead included:
        step_i = max(a_c + b_c i, a_m + b_m i).

        With n sequences and S_0 = sum of contexts at step 0, step i has S_i = S_0 + n i, T = N = n,
        keys = S_i + n and kv_read = S_i, so compute and memory are both affine in S_i, hence in i.
        """
        n = len(decode_context)
        if n == 0:
            return None
        s0 = float(np.sum(decode_context))
        p = self.params
        overhead = p.iteration_overhead_s + p.per_sequence_overhead_s * n
        compute0 = (self.flops_per_token + self.flops_per_sequence) * n / p.matmul_flops_per_s
        attn_per_key = self.attention_flops_per_key / p.attention_flops_per_s
        a_c = compute0 + attn_per_key * (s0 + n) + overhead
        b_c = attn_per_key * n
        kv_per_token = self.kv_bytes_per_token / p.bandwidth_bytes_per_s
        a_m = float(self.weight_bytes_read(n)) / p.bandwidth_bytes_per_s + kv_per_token * (s0 + n) + overhead
        b_m = kv_per_token * n
        return a_c, b_c, a_m, b_m

    @staticmethod
    def _split(a1: float, b1: float, a2: float, b2: float) -> tuple[tuple[float, float], float, tuple[float, float]]:
        """(line that dominates first, first index where the other may dominate (may be inf), other line)."""
        if b1 == b2:
            return ((a1, b1) if a1 >= a2 else (a2, b2)), math.inf, (a1, b1)
        r = (a2 - a1) / (b1 - b2)  # the lines cross at i = r
        first, second = ((a2, b2), (a1, b1)) if b1 > b2 else ((a1, b1), (a2, b2))
        if not math.isfinite(r):
            return (first if r > 0 else second), math.inf, second
        if r <= 0:
            return second, math.inf, first  # past the crossing already: `second` dominates throughout
        return first, math.ceil(r), second

    @staticmethod
    def _line_sum(a: float, b: float, start: float, stop: float) -> float:
        """sum_{i=start}^{stop-1} (a + b i) — an arithmetic series."""
        count = stop - start
        return count * a + b * (start + stop - 1) * count / 2.0

    def decode_run_time(self, decode_context: Sequence[int] | np.ndarray, k: int) -> float:
        """Seconds of k consecutive decode steps of the same batch, every context growing by 1 per step.

        Exact closed form of sum_{i<k} max(a_c + b_c i, a_m + b_m i): split at the index where the
        compute and memory lines cross and sum the arithmetic series on each side. O(1) after one sum.
        """
        lines = self._decode_lines(decode_context)
        if lines is None:
            return 0.0
        return self._run_time(lines, k)

    def _run_time(self, lines: tuple[float, float, float, float], k: int) -> float:
        if k <= 0:
            return 0.0
        first, m, second = self._split(*lines)
        m = min(m, k)
        total = self._line_sum(*first, 0, m)
        if m < k:
            total += self._line_sum(*second, m, k)
        return float(total)

    @staticmethod
    def _max_count_within(a: float, b: float, start: float, budget: float) -> int:
        """Largest j with sum_{i=start}^{start+j-1} (a + b i) <= budget, by the quadratic formula
        (stable form; may be off by one from rounding — callers correct it on the exact sum)."""
        if budget <= 0:
            return 0
        a0 = a + b * start - b / 2.0  # sum = a0 j + b j^2 / 2
        j = 2.0 * budget / (a0 + math.sqrt(a0 * a0 + 2.0 * b * budget))
        return int(j) if math.isfinite(j) else 0

    def decode_steps_within(
        self, decode_context: Sequence[int] | np.ndarray, budget_s: float, max_steps: int | None = None
    ) -> int:
        """The largest k such that decode_run_time(decode_context, k) <= budget_s (capped at max_steps).

        Solves the piecewise-quadratic cumulative time with the quadratic formula on the piece the
        budget ends in, then corrects by whole steps against `decode_run_time` itself, so the result
        is the exact integer inverse of the closed form.
        """
        lines = self._decode_lines(decode_context)
        if lines is None:
            return 0
        if not math.isfinite(budget_s):
            if max_steps is None:
                raise ValueError("an infinite budget needs max_steps")
            return max_steps
        first, m, second = self._split(*lines)
        cum_m = self._line_sum(*first, 0, m) if math.isfinite(m) else math.inf
        if budget_s < cum_m:
            k = self._max_count_within(*first, 0, budget_s)
        else:
            k = int(m) + self._max_count_within(*second, m, budget_s - cum_m)
        if max_steps is not None:
            k = min(k, max_steps)
        while k > 0 and self._run_time(lines, k) > budget_s:
            k -= 1
        while (max_steps is None or k < max_steps) and self._run_time(lines, k + 1) <= budget_s:
            k += 1
        return k
