"""llama.cpp's pass splitter as a step model: a batch cut into passes over the weights, each priced.

llama.cpp runs one `llama_decode` batch as several forward passes (ubatches) when it holds more than
`n_ubatch` tokens (`-ub`, `EngineConfig.ubatch_tokens`: `split_simple` over one K/V stream), and,
with one K/V stream per sequence (`EngineConfig.per_sequence_kv_streams`: `split_equal`), one pass
per run of consecutive slot ids with equal token counts (`sim.cost.llamacpp`, which cites
src/llama-batch.cpp). `LlamaCppPasses` implements the engine's step-pricing protocol
(`sim.engine.pricing.StepModel`) over a wrapped cost model: it builds the batch as llama-server
does (one token per decoding slot in slot order, then the prompt chunks in admission order), cuts
it, and prices each pass with the wrapped model (`CostModel.passes_time`, `simple_passes_time`,
`decode_run_time` per pass of decodes). Batches that are one pass go to the wrapped model as they are.
"""

from __future__ import annotations

import numpy as np

from sim.cost.llamacpp import Piece, split_equal, split_simple
from sim.cost.speculative import SpeculativeCostModel


class LlamaCppPasses:
    """A `StepModel` that prices a batch as the passes llama.cpp cuts it into (module docstring).

    `ubatch_tokens`: tokens per pass (None = no limit); `per_sequence_kv_streams`: one K/V stream per
    sequence (`split_equal`) rather than one for all (`split_simple`); `max_seqs`: the scheduler's
    sequence limit (with one stream and no more sequences than a pass holds, decodes alone are
    always one pass, which the wrapped model prices as it would without the splitter)."""

    def __init__(self, cost, ubatch_tokens: int | None, per_sequence_kv_streams: bool, max_seqs: int) -> None:
        self.cost = cost
        self.ubatch_tokens = ubatch_tokens
        self.per_sequence_kv_streams = per_sequence_kv_streams
        self.decodes_alone = not per_sequence_kv_streams and (ubatch_tokens is None or max_seqs <= ubatch_tokens)

    # ---- the batch as llama-server builds it -----------------------------------------------------
    @staticmethod
    def pieces(b) -> list[Piece]:
        """One token per decoding slot in slot order, then the prompt chunks in admission order (a
        chunk has logits when it ends its prompt)."""
        dl, ctx = b.decode_lanes, b.decode_ctx() if b.n_decode else b.decode_lanes
        order = np.argsort(dl, kind="stable")
        pieces = [Piece(int(dl[i]), 1, int(ctx[i])) for i in order]
        pieces += [Piece(lane, chunk, c, end) for lane, chunk, c, end
                   in zip(b.prefill_lanes, b.prefill_tokens, b.prefill_context(), b.prefill_ends())]
        return pieces

    def stream_groups(self, dl: np.ndarray) -> list[np.ndarray] | None:
        """The decodes' positions in `dl` by the pass llama.cpp runs them in. With one K/V stream
        per sequence, runs of consecutive lanes (slot ids): each run is its own pass (`split_equal`
        only packs consecutive seq_ids). More decodes than a pass holds take one pass per pass-full,
        in slot order: `ubatch_tokens` of them with one stream, `ubatch_tokens` + 1 in a run with one
        stream per sequence (`split_equal`). None when the decodes are one pass."""
        ub = self.ubatch_tokens
        streams = self.per_sequence_kv_streams
        # sequences per pass: split_simple's n_ubatch tokens, or split_equal's n_ubatch + 1 sequences
        per_pass = None if ub is None else ub + 1 if streams else ub
        over = per_pass is not None and len(dl) > per_pass
        if not over and (not streams or len(dl) < 2):
            return None
        order = np.argsort(dl, kind="stable")
        groups = [order]
        if streams:
            breaks = np.flatnonzero(np.diff(dl[order]) != 1) + 1
            groups = np.split(order, breaks) if len(breaks) else groups
        if over:
            groups = [g[i:i + per_pass] for g in groups for i in range(0, len(g), per_pass)]
        return groups if len(groups) > 1 else None

    # ---- the step-pricing protocol (sim.engine.pricing.StepModel) --------------------------------
    def batch_time(self, b) -> float:
        """One iteration: one priced pass per ubatch (`split_equal` with a stream per sequence,
        `split_simple` when the batch holds more than `ubatch_tokens`), else the wrapped model's."""
        ub = self.ubatch_tokens
        over = ub is not None and sum(b.prefill_tokens) + b.n_decode > ub
        if self.per_sequence_kv_streams and (b.n_decode or len(b.prefill_lanes) > 1 or over):
            return self.cost.passes_time(split_equal(self.pieces(b), ub))
        if over:
            return self.cost.simple_passes_time(split_simple(self.pieces(b), ub))
        return self.cost.batch_time(b)

    def run_time(self, b, k: int) -> float:
        """k decode steps: one closed-form run per pass of decodes (`stream_groups`)."""
        groups = self.stream_groups(b.decode_lanes)
        if groups is None:
            return self.cost.run_time(b, k) if self.decodes_alone else self.cost.decode_run_time(b.decode_contexts(), k)
        ctx_f = b.decode_contexts()
        return sum(self.cost.decode_run_time(ctx_f[g], k) for g in groups)

    def steps_within(self, b, budget_s: float, max_steps: int) -> int:
        """The wrapped model's exact inverse for one pass; bisection on the (increasing) sum of
        closed forms for several."""
        groups = self.stream_groups(b.decode_lanes)
        if groups is None:
            if self.decodes_alone:
                return self.cost.steps_within(b, budget_s, max_steps)
            return self.cost.decode_steps_within(b.decode_contexts(), budget_s, max_steps=max_steps)
        lo, hi = 0, max_steps  # run_time(lo) <= budget; find the last k that fits
        if self.run_time(b, hi) <= budget_s:
            return hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.run_time(b, mid) <= budget_s:
                lo = mid
            else:
                hi = mid
        return lo

    def run_limit(self, b) -> int | None:
        """The fewest steps any pass takes before its padded KV view grows (`steps_in_kv_block`)."""
        groups = self.stream_groups(b.decode_lanes)
        if groups is None:
            return self.cost.run_limit(b)
        ctx_f = b.decode_contexts()
        limits = [self.cost.steps_in_kv_block(ctx_f[g]) for g in groups]
        return None if None in limits else min(limits)


def make_step_model(cost, engine, max_seqs: int):
    """The step model a replica of `engine` prices its batches with: `cost` itself, or wrapped in
    `LlamaCppPasses` when the engine splits batches (`ubatch_tokens`, `per_sequence_kv_streams`).
    A speculative model prices its rounds itself: no ubatch split (its K/V streams still group its
    decodes)."""
    ubatch = None if isinstance(cost, SpeculativeCostModel) else engine.ubatch_tokens
    if ubatch is None and not engine.per_sequence_kv_streams:
        return cost
    return LlamaCppPasses(cost, ubatch, engine.per_sequence_kv_streams, max_seqs)
