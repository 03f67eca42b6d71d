"""Speculative decoding: what a draft-then-verify round costs and how many tokens it yields.

A round, for each of the n decoding sequences (Leviathan et al. 2023, "Fast Inference from
Transformers via Speculative Decoding", arXiv 2211.17192; Chen et al. 2023, arXiv 2302.01318):

1. the drafter proposes k tokens, one draft step each:
   - `draft`: a small model of the same vocabulary, priced by the same cost model
     (`CostModel.decode_run_time(context, k)`: k decode steps, contexts growing by one);
   - `eagle`: a light head on the target's hidden states (EAGLE, Li et al. 2024, arXiv 2401.15077),
     priced as `draft_cost_fraction` x one target decode step per drafted token;
2. the target verifies all k + 1 positions in one forward pass — priced like a prefill chunk of
   k + 1 tokens after the sequence's context, with logits for all k + 1 positions;
3. with each drafted token accepted independently with probability a (Leviathan et al.'s alpha),
   the accepted prefix plus the target's own next token gives, in expectation (their eq. 1),

       E[tokens per round] = (1 - a^(k+1)) / (1 - a)        (= k + 1 when a = 1)

So the effective time per output token of every sequence in the batch is

       per_token_s(context) = (draft_s(context) + verify_s(context)) / E[tokens per round]

and speculation pays when that is below the plain decode step. At batch 1 on a bandwidth-bound
device the verify costs about one decode step (the weights are read once either way) and the
round yields E > 1 tokens; at a large batch in the compute-bound regime the verify costs about
k + 1 decode steps' FLOPs and E < k + 1, so the gain vanishes or reverses.

`SpeculativeCostModel` has the simulator's cost interface (`step_time`, `decode_run_time`,
`decode_steps_within`): one simulator step advances every decoding sequence by one token at the
effective rate (step i of a run is priced as per_token_s at context + i, i.e. the expected
progress of a round is spread over its tokens). Its run sums are exact over those per-step
prices (vectorised over the steps, O(steps), not a closed form).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from sim.cost.decode_runs import _steps_without_search
from sim.cost.params import CostParams
from sim.cost.roofline import CostModel
from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.catalog.engine_config import EngineConfig
    from sim.catalog.hardware import HardwareProfile
    from sim.catalog.models import ModelSpec
    from sim.catalog.quant import QuantFormat


def expected_tokens_per_step(acceptance_rate: float, k: int) -> float:
    """Expected tokens a verify step yields per sequence: (1 - a^(k+1)) / (1 - a), k + 1 at a = 1
    (Leviathan et al. 2023, eq. 1; i.i.d. acceptance per drafted token)."""
    if not 0 <= acceptance_rate <= 1:
        raise ConfigError(f"must be in [0, 1], got {acceptance_rate}", field="acceptance_rate")
    if k < 1:
        raise ConfigError(f"must be >= 1, got {k}", field="k")
    if acceptance_rate == 1:
        return float(k + 1)
    return (1.0 - acceptance_rate ** (k + 1)) / (1.0 - acceptance_rate)


def _decode_aggregates_at(cm: CostModel, d: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(layer keys, KV layer-tokens read) of a decode step of the batch at contexts d + t, per offset t."""
    n = len(d)
    if cm.window is None:
        s = float(d.sum())
        return cm.n_layers * (s + n * offsets + n), cm.n_layers * (s + n * offsets)
    grid = d[None, :] + offsets[:, None]
    return cm.layer_tokens(grid + 1, keys=True).sum(axis=1), cm.layer_tokens(grid).sum(axis=1)


def _chunk_keys_array(cm: CostModel, p: int, c: np.ndarray) -> np.ndarray:
    """Vectorised `CostModel._chunk_layer_keys`: keys a causal chunk of p tokens after c cached attends to."""
    full = p * c + p * (p + 1) / 2.0
    if cm.window is None:
        return cm.n_layers * full
    w = cm.window
    top = np.minimum(c + p, w)
    below = np.where(top > c, (top * (top + 1) - c * (c + 1)) / 2.0, 0.0)
    windowed = below + (c + p - np.maximum(top, c)) * w
    return cm.full_key_layers * full + cm.n_sliding_layers * windowed


def _verify_aggregates_at(cm: CostModel, d: np.ndarray, offsets: np.ndarray, p: int):
    """(layer keys, KV layer-tokens read) of a verify pass (a p-token chunk per sequence) per offset."""
    n = len(d)
    if cm.window is None:
        s = d.sum() + n * offsets
        return cm.n_layers * (p * s + n * p * (p + 1) / 2.0), cm.n_layers * s
    grid = d[None, :] + offsets[:, None]
    return _chunk_keys_array(cm, p, grid).sum(axis=1), cm.layer_tokens(grid).sum(axis=1)


class SpeculativeCostModel:
    """A target `CostModel` with speculative decoding: k drafted tokens per round, acceptance a.

    Give `draft` (a CostModel of the draft model, usually on the same device) or
    `draft_cost_fraction` (an EAGLE-style head: one draft step = that fraction of a target decode
    step). `extra_weight_bytes` is the draft model's weights, which share the device's memory.
    """

    def __init__(
        self,
        target: CostModel,
        k: int,
        acceptance_rate: float,
        draft: CostModel | None = None,
        draft_cost_fraction: float | None = None,
    ):
        if (draft is None) == (draft_cost_fraction is None):
            raise ConfigError("give exactly one of draft (a model) or draft_cost_fraction", field="speculative")
        if draft_cost_fraction is not None and not 0 < draft_cost_fraction <= 1:
            raise ConfigError(f"must be in (0, 1], got {draft_cost_fraction}", field="draft_cost_fraction")
        self.target = target
        self.k = int(k)
        self.acceptance_rate = float(acceptance_rate)
        self.tokens_per_step = expected_tokens_per_step(acceptance_rate, k)
        self.draft = draft
        self.draft_cost_fraction = draft_cost_fraction
        self.extra_weight_bytes = draft.model.weight_bytes(draft.quant) if draft is not None else 0.0
        # what callers read off a cost model
        self.model, self.quant, self.params, self.kv_dtype = target.model, target.quant, target.params, target.kv_dtype
        # the calibration's measured decode correction reported for the deployment: the target's
        self.decode_correction = target.decode_correction

    # ---- the parts of a round, for a batch at contexts d + t for each offset t -----------------
    def _draft_step_times(self, d: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Seconds of one draft step of the batch at each offset."""
        n = len(d)
        drafter = self.draft or self.target
        keys, reads = _decode_aggregates_at(drafter, d, offsets)
        step = drafter.placed_time(float(n), float(n), keys, reads)
        return step if self.draft is not None else self.draft_cost_fraction * step

    def _verify_times(self, d: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Seconds of the target's verify pass (k + 1 positions per sequence, logits for each)."""
        n, p = len(d), self.k + 1
        keys, reads = _verify_aggregates_at(self.target, d, offsets, p)
        t = self.target
        # a verify pass of n x p rows replays (or, above the largest size, misses) a CUDA graph as a
        # decode step of that many rows would (`CostModel.graph_extra_s`, per rank on a placement)
        graphs = t.graph_extra_s(n * p)
        return t.placed_time(float(n * p), float(n), keys, reads, logits=float(n * p)) + graphs

    def per_token_times(self, decode_context: Sequence[int] | np.ndarray, steps: int) -> np.ndarray:
        """Effective seconds of simulator steps 0 .. steps-1 (every sequence one token further each):

            per_token_s(i) = (sum_{j<k} draft_step(context + i + j) + verify(context + i)) / E
        """
        d = np.asarray(decode_context, dtype=float)
        if steps <= 0 or len(d) == 0:
            return np.zeros(0)
        draft = self._draft_step_times(d, np.arange(steps + self.k - 1, dtype=float))
        csum = np.concatenate([[0.0], np.cumsum(draft)])
        draft_round = csum[self.k:self.k + steps] - csum[:steps]
        verify = self._verify_times(d, np.arange(steps, dtype=float))
        return (draft_round + verify) / self.tokens_per_step

    def round_time(self, decode_context: Sequence[int] | np.ndarray) -> float:
        """Seconds of one draft + verify round of the batch at these contexts."""
        return float(self.per_token_times(decode_context, 1)[0]) * self.tokens_per_step

    def per_token_time(self, decode_context: Sequence[int] | np.ndarray) -> float:
        """Effective seconds per output token of every sequence of the batch (round / E)."""
        return float(self.per_token_times(decode_context, 1)[0])

    def speedup(self, decode_context: Sequence[int] | np.ndarray) -> float:
        """Plain decode step / effective per-token time, for this batch (> 1: speculation pays)."""
        return self.target.step_time((), (), decode_context) / self.per_token_time(decode_context)

    # ---- the simulator's cost interface --------------------------------------------------------
    def step_time(self, prefill_tokens=(), prefill_context=(), decode_context=()) -> float:
        """One iteration. Prefill chunks share the target's forward with the verify (as vLLM
        batches them); the prefill's marginal time is not amortised, the decode round is:

            t = [fwd(prefill + verify) - fwd(verify)] + (draft + fwd(verify)) / E
        """
        d = np.asarray(decode_context, dtype=float)
        if len(d) == 0:
            return self.target.step_time(prefill_tokens, prefill_context, ())
        tgt = self.target
        tp, np_, kp, rp, _ = tgt._aggregate(prefill_tokens, prefill_context, ())
        n, p = len(d), self.k + 1
        zero = np.zeros(1)
        kv_keys, kv_reads = (float(x[0]) for x in _verify_aggregates_at(tgt, d, zero, p))
        verify = float(tgt.placed_time(n * p, n, kv_keys, kv_reads, logits=n * p))
        both = float(tgt.placed_time(tp + n * p, np_ + n, kp + kv_keys, rp + kv_reads, logits=np_ + n * p))
        draft = float(np.sum(self._draft_step_times(d, np.arange(self.k, dtype=float))))
        return both - verify + (draft + verify) / self.tokens_per_step

    def decode_run_time(self, decode_context: Sequence[int] | np.ndarray, k: int) -> float:
        """Seconds of k simulator steps of the same batch (sum of `per_token_times`, in order)."""
        if len(decode_context) == 0 or k <= 0:
            return 0.0
        return float(np.cumsum(self.per_token_times(decode_context, k))[-1])

    def decode_steps_within(
        self, decode_context: Sequence[int] | np.ndarray, budget_s: float, max_steps: int | None = None
    ) -> int:
        """Largest k with decode_run_time(decode_context, k) <= budget_s (capped at max_steps); exact:
        the cumulative per-step times are searched, so it inverts `decode_run_time` step for step."""
        trivial = _steps_without_search(len(decode_context) == 0, budget_s, max_steps)
        if trivial is not None:
            return trivial
        horizon = max_steps if max_steps is not None else 64
        while True:
            cum = np.cumsum(self.per_token_times(decode_context, horizon))
            k = int(np.searchsorted(cum, budget_s, side="right"))
            if k < horizon or (max_steps is not None and horizon >= max_steps):
                return min(k, horizon)
            horizon *= 4

    # ---- the engine's step-pricing protocol (sim.engine.pricing.StepModel) ---------------------
    def batch_time(self, b) -> float:
        """One iteration of the batch `b` (a `sim.engine.pricing.StepBatch`): `step_time`."""
        return self.step_time(b.prefill_tokens, b.prefill_context(), b.decode_contexts())

    def run_time(self, b, k: int) -> float:
        """k simulator steps of the decode-only batch `b`: `decode_run_time`."""
        return self.decode_run_time(b.decode_contexts(), k)

    def steps_within(self, b, budget_s: float, max_steps: int) -> int:
        """`decode_steps_within` (exact inverse of `run_time`)."""
        return self.decode_steps_within(b.decode_contexts(), budget_s, max_steps=max_steps)

    def run_limit(self, b) -> None:
        """No limit: rounds over padded KV views are not modelled (`steps_in_kv_block`)."""
        return None

    def steps_in_kv_block(self, decode_context) -> None:
        """None: a speculative round is priced without padded KV views (`CostModel.steps_in_kv_block`)."""
        return None

    def breakdown(self, prefill_tokens=(), prefill_context=(), decode_context=()) -> dict:
        """The target's breakdown of a plain iteration plus the speculative figures of the decodes."""
        out = self.target.breakdown(prefill_tokens, prefill_context, decode_context)
        if len(decode_context):
            out.update(spec_tokens_per_step=self.tokens_per_step, spec_round_s=self.round_time(decode_context),
                       spec_per_token_s=self.per_token_time(decode_context), spec_speedup=self.speedup(decode_context),
                       step_s=self.step_time(prefill_tokens, prefill_context, decode_context))
        return out

    def single_stream_decode_tok_s(self, context: int) -> float:
        return 1.0 / self.per_token_time([context])

    def prefill_tok_s(self, prompt_tokens: int, context: int = 0) -> float:
        return self.target.prefill_tok_s(prompt_tokens, context)


def make_cost_model(
    hw: "str | HardwareProfile",
    model: "str | ModelSpec",
    quant: "str | QuantFormat | None",
    engine: "str | EngineConfig",
    params: CostParams | None = None,
) -> CostModel | SpeculativeCostModel:
    """The cost model a simulation of `engine` uses: `CostModel.from_names` (tp, pp, gpu_layers
    from the engine), wrapped in a `SpeculativeCostModel` when `engine.speculative` is set (the
    draft model priced on the same device, with the same tp/pp, in `draft_quant` or the target's)."""
    from sim.catalog.engine_config import EngineConfig, load_engine

    eng = engine if isinstance(engine, EngineConfig) else load_engine(engine)
    target = CostModel.from_names(model, quant, hw, eng, params=params)
    spec = eng.speculative
    if spec is None:
        return target
    draft = None
    if spec.method == "draft":
        plain = eng.model_copy(update={"speculative": None, "gpu_layers": None})
        draft = CostModel.from_names(spec.draft_model, spec.draft_quant or target.quant.name, hw, plain)
        if draft.model.vocab_size != target.model.vocab_size:
            raise ConfigError(
                f"draft model {draft.model.name} has vocabulary {draft.model.vocab_size}, the target "
                f"{target.model.vocab_size}: speculative decoding needs the same tokenizer", field="draft_model")
    if spec.method == "mtp":
        # the model's own MTP modules draft (sim.catalog.models.ModelSpec.mtp_draft_cost_fraction); their
        # weights are loaded beside the model's
        fraction = spec.draft_cost_fraction or target.model.mtp_draft_cost_fraction()
        scm = SpeculativeCostModel(target, spec.k, spec.acceptance_rate, draft_cost_fraction=fraction)
        scm.extra_weight_bytes = target.model.mtp_params() * target.quant.bits_per_weight / 8.0
        return scm
    return SpeculativeCostModel(target, spec.k, spec.acceptance_rate, draft=draft,
                                draft_cost_fraction=spec.draft_cost_fraction if spec.method == "eagle" else None)
