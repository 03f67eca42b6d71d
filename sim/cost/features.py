"""What the calibration reads off the roofline: an iteration's aggregates as feature rows
(`StepFeatures`), step times for many rows at once (`predict_times`), and every term of one
iteration (`breakdown`). A mixin of `sim.cost.roofline.CostModel`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from sim.cost.kernels import expected_distinct_experts
from sim.cost.params import CostParams

if TYPE_CHECKING:
    from sim.cost.llamacpp import Pass


@dataclass(frozen=True)
class StepFeatures:
    """The aggregates of iteration shapes the cost depends on, one array element per iteration.

    - `new_tokens` T: tokens processed (prefill chunk tokens + one per decode sequence).
    - `sequences` N: sequences in the iteration (prefill chunks + decodes).
    - `attention_layer_keys`: sum over new tokens and layers of the keys each attends to
      (kappa(x) per token at position x, see `CostModel.layer_tokens`).
    - `kv_read_layer_tokens`: sum over sequences of kappa(cached tokens): K/V entries read, per layer.
    - `decode_layer_keys`: the part of `attention_layer_keys` attended by decode tokens (priced with
      `CostParams.decode_attention_slowdown`).
    """

    new_tokens: np.ndarray
    sequences: np.ndarray
    attention_layer_keys: np.ndarray
    kv_read_layer_tokens: np.ndarray
    decode_layer_keys: np.ndarray

    def __len__(self) -> int:
        return len(self.new_tokens)

    @classmethod
    def concat(cls, items: Sequence["StepFeatures"]) -> "StepFeatures":
        return cls(*(np.concatenate([getattr(it, f.name) for it in items]) for f in fields(cls)))


# Bytes moved per (query row, key, head, layer) by attention kernels that materialise their scores
# (no flash attention): fp32 scores written by the QK^T matmul, read and written by the softmax, read
# by the PV matmul (module docstring).


class CalibrationFeatures:
    """`CostModel`'s feature rows and breakdowns (uses its `_aggregate`, `_terms`, `_kernel_terms`)."""

    def predict_times(self, params: CostParams | Sequence[float], features: StepFeatures) -> np.ndarray:
        """Step seconds for many iteration shapes at once (vectorised; for calibration fits).

        `params` is a CostParams or an array in `CostParams.FIELDS` order (shorter: the trailing defaults).
        Rows with no new tokens cost 0 (an empty iteration does not run).
        """
        p = params.to_array() if isinstance(params, CostParams) else np.asarray(params, dtype=float)
        t = np.asarray(features.new_tokens, dtype=float)
        c, m, o = self._terms(
            p, t, np.asarray(features.sequences, float), np.asarray(features.attention_layer_keys, float),
            np.asarray(features.kv_read_layer_tokens, float), np.asarray(features.decode_layer_keys, float),
        )
        return np.where(t > 0, np.maximum(c, m) + o, 0.0)

    def probe_features(
        self,
        *,
        prefill_tokens: Sequence[float] = (),
        prefill_context: Sequence[float] | None = None,
        decode_batch: Sequence[float] = (),
        decode_context: Sequence[float] | None = None,
    ) -> StepFeatures:
        """One row per probe: first the prefill probes (one chunk of P tokens after C cached tokens),
        then the decode probes (B sequences decoding one token each, all at context C)."""
        p = np.asarray(prefill_tokens, dtype=float)
        c = np.zeros_like(p) if prefill_context is None else np.asarray(prefill_context, dtype=float)
        b = np.asarray(decode_batch, dtype=float)
        d = np.zeros_like(b) if decode_context is None else np.asarray(decode_context, dtype=float)
        if p.shape != c.shape or b.shape != d.shape:
            raise ValueError("prefill_tokens/prefill_context and decode_batch/decode_context must have equal lengths")
        chunk_keys = np.array([self._chunk_layer_keys(pi, ci) for pi, ci in zip(p, c)], dtype=float)
        decode_keys = b * self.layer_tokens(d + 1)
        return StepFeatures(
            new_tokens=np.concatenate([p, b]),
            sequences=np.concatenate([np.ones_like(p), b]),
            attention_layer_keys=np.concatenate([chunk_keys, decode_keys]),
            kv_read_layer_tokens=np.concatenate([self.layer_tokens(c), b * self.layer_tokens(d)]),
            decode_layer_keys=np.concatenate([np.zeros_like(p), decode_keys]),
        )

    def features(self, prefill_tokens=(), prefill_context=(), decode_context=(), outputs: int | None = None) -> StepFeatures:
        """The aggregates of one iteration, as a one-row StepFeatures."""
        return StepFeatures(*(np.array([v]) for v in self._aggregate(prefill_tokens, prefill_context, decode_context,
                                                                     outputs)))

    def pass_features(self, p: "Pass") -> StepFeatures:
        """The aggregates of one pass, as `passes_time` prices it."""
        return self.features(*self._pass_shape(p), outputs=p.outputs)

    def breakdown(self, prefill_tokens=(), prefill_context=(), decode_context=()) -> dict:
        """Every term of one iteration, in FLOP, bytes and seconds (for reports and calibration)."""
        t, n, keys, kv_read, dkeys = self._aggregate(prefill_tokens, prefill_context, decode_context)
        mm_s, w_s, att_s, kv_s, o = self._kernel_terms(self._param_tuple(), t, n, keys, kv_read, dkeys)
        gemm_s, attention_s = max(mm_s, w_s), max(att_s, kv_s)
        ran = t > 0
        out = {
            "new_tokens": t,
            "sequences": n,
            "matmul_flops": self.flops_per_token * t + self.flops_per_sequence * n,
            # prompt keys at the prompt's rate (MLA: unabsorbed), decode keys at the decode rate
            "attention_flops": self.attention_flops_per_layer_key * (
                keys if self.prompt_key_flops_ratio == 1.0 else self.prompt_key_flops_ratio * (keys - dkeys) + dkeys),
            "decode_attention_flops": self.attention_flops_per_layer_key * dkeys,
            "weight_bytes": float(self.weight_bytes_read(t)) if ran else 0.0,
            "kv_read_bytes": self.kv_read_bytes_per_layer_token * kv_read,
            "kv_write_bytes": self.kv_bytes_per_layer_token * self.kv_layers * t,
            "recurrent_state_bytes": self.state_bytes_per_sequence_step * n,  # hybrid models: read + write
            "attention_score_bytes": self.score_bytes_per_layer_key * keys,
            # every FLOP at its rate, every byte at the bandwidth
            "compute_s": float(mm_s + att_s) if ran else 0.0,
            "memory_s": float(w_s + kv_s) if ran else 0.0,
            # the two kernel groups, each at its roofline (`_terms`); the step is their sum + overheads
            "gemm_s": float(gemm_s) if ran else 0.0,
            "gemm_bound": "compute" if mm_s > w_s else "memory",
            "attention_s": float(attention_s) if ran else 0.0,
            "attention_bound": "compute" if att_s > kv_s else "memory",
            "overhead_s": float(o) if ran else 0.0,
            "step_s": float(gemm_s + attention_s + o) if ran else 0.0,
        }
        # what bounds the step: the bound of the kernel group that takes longer
        out["bound"] = out["gemm_bound"] if gemm_s >= attention_s else out["attention_bound"]
        if self.decode_correction is not None and ran and not len(prefill_tokens):
            out["decode_correction"] = self.decode_factor(len(decode_context))  # DecodeCorrection
            out["step_s"] *= out["decode_correction"]
        if self.model.is_moe:
            out["experts_touched"] = float(
                expected_distinct_experts(self.model.n_experts, self.model.n_experts_active, t,
                                          self.model.expert_pool_fraction)
            )
        if self.placement is not None and ran:
            out.update(self._placed_breakdown(t, n, keys, kv_read))
        return out

    def single_stream_decode_tok_s(self, context: int) -> float:
        """Decode tokens/s of one sequence alone at `context` cached tokens: 1 / step_time."""
        return 1.0 / self.step_time((), (), (context,))

    def prefill_tok_s(self, prompt_tokens: int, context: int = 0) -> float:
        """Prefill tokens/s of one prompt processed as one chunk after `context` cached tokens."""
        return prompt_tokens / self.step_time((prompt_tokens,), (context,), ())
