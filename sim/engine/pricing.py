"""The seam between the engine and the cost model: the step-pricing protocol (`StepModel`).

The replica (`sim.engine.replica`) decides *what* runs: a batch of prompt chunks and decodes, and,
when nothing can change the decode batch for a while, a run of k identical decode steps
(fast-forward). A step model decides *how long* it takes. The replica asks it exactly four things,
and nothing else of it (tests/test_architecture.py checks that the engine uses no private member of
another package):

- `batch_time(b)`: seconds of one iteration of batch `b` (prompt chunks and / or decodes);
- `run_time(b, k)`: seconds of k consecutive decode steps of the decode-only batch `b`, every
  sequence one token further at each step;
- `steps_within(b, budget_s, max_steps)`: the most of those steps that end within a time budget;
- `run_limit(b)`: the most steps the model prices as one run of same-shaped steps (a token
  budget: e.g. until a padded KV view grows a block), None when unbounded.

Modelled on BLIS's `LatencyModel` (one interface, several implementations behind it). The
implementations: the roofline `sim.cost.roofline.CostModel`, the speculative-decoding
`sim.cost.speculative.SpeculativeCostModel`, and llama.cpp's pass splitter
`sim.cost.passes.LlamaCppPasses` (which cuts a batch into ubatches and per-sequence K/V streams and
prices each pass with the model it wraps); `tests/test_pricing.py` drops in a table-driven one.
The protocol is structural (`typing.Protocol`): an implementation needs no import of this module,
so the cost package stays below the engine in the layers.

A batch is handed over as a `StepBatch`, built by the replica once per event; its decode contexts
are gathered only when a model asks for them (the roofline prices a full-attention decode batch
from its size and the sum of its contexts alone, so most events gather nothing).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

_isum = np.add.reduce  # ndarray.sum(), minus numpy's Python wrapper (once per event)


class StepBatch:
    """One iteration's batch, as a step model sees it.

    - `decode_lanes`: the decoding sequences' lane numbers (llama-server's slot ids), in lane order;
      `n_decode` of them, each computing one token;
    - `prefill_lanes[i]` computes `prefill_tokens[i]` prompt tokens after `prefill_context()[i]`
      cached ones; `prefill_ends()[i]`: whether that chunk ends its prompt (its last row has logits);
    - `decode_ctx()` / `decode_contexts()` / `decode_ctx_sum()`: the decodes' cached tokens before
      this step (ints / floats / their sum), gathered on first use;
    - `memo`: free for the step model to keep what it derived from this batch between the calls
      of one event (the replica prices a batch several times: its run length, then its run).

    A `StepBatch` is valid for one event: the replica builds a new one after each apply.
    """

    __slots__ = ("decode_lanes", "n_decode", "prefill_lanes", "prefill_tokens", "memo", "_state", "_ctx", "_ctx_f",
                 "_pctx")

    def __init__(self, state, decode_lanes: np.ndarray, prefill_lanes: list[int], prefill_tokens: list[int],
                 ctx: np.ndarray | None = None) -> None:
        self._state = state
        self.decode_lanes = decode_lanes
        self.n_decode = len(decode_lanes)
        self.prefill_lanes = prefill_lanes
        self.prefill_tokens = prefill_tokens
        self.memo = None
        self._ctx = ctx
        self._ctx_f = None
        self._pctx = None

    def decode_ctx(self) -> np.ndarray:
        """The decodes' contexts (KV tokens before this step) as an int64 array, in lane order."""
        if self._ctx is None:
            self._ctx = self._state.decode_contexts(self.decode_lanes)
        return self._ctx

    def decode_contexts(self) -> np.ndarray:
        """`decode_ctx()` as float64 (what the cost formulas compute in); empty without decodes."""
        if self._ctx_f is None:
            self._ctx_f = self.decode_ctx().astype(np.float64) if self.n_decode else self.decode_lanes
        return self._ctx_f

    def decode_ctx_sum(self) -> int:
        """Sum of the decodes' contexts (kept by the state when every decoding sequence steps)."""
        st = self._state
        return st.decode_ctx_sum if self.n_decode == st.n_decoding else int(_isum(self.decode_ctx()))

    def prefill_context(self) -> list[int]:
        """Cached tokens of each prefilling sequence before its chunk."""
        if self._pctx is None:
            pl = self.prefill_lanes
            self._pctx = [] if not pl else [int(self._state.ctx[pl[0]])] if len(pl) == 1 else self._state.ctx[pl].tolist()
        return self._pctx

    def prefill_ends(self) -> list[bool]:
        """Whether each prompt chunk completes its prompt (its last token's logits are computed)."""
        if not self.prefill_lanes:
            return []
        goal = self._state.prefill_goal
        return [c + chunk >= goal[lane]
                for lane, chunk, c in zip(self.prefill_lanes, self.prefill_tokens, self.prefill_context())]


class StepModel(Protocol):
    """Prices engine iterations for the replica. Every method is a pure function of its arguments
    and the model's own fixed parameters (deterministic: the same batch gives the same float).

    Preconditions (the replica guarantees them): a batch has at least one sequence; `run_time`,
    `steps_within` and `run_limit` get decode-only batches (no prompt chunk) and `k`, `max_steps`
    >= 1; contexts are the tokens cached before the step.

    Postconditions (tests/test_pricing.py checks them on every implementation):
    - `batch_time(b)` > 0, and for a decode-only batch `batch_time(b)` == `run_time(b, 1)` up to
      the model's own rounding (the replica prices decode-only iterations with `run_time`);
    - `run_time(b, k)` is increasing in k, with `run_time(b, 0)` == 0;
    - `steps_within(b, budget_s, max_steps)` is the exact integer inverse: the largest
      0 <= j <= max_steps with `run_time(b, j)` <= budget_s (max_steps for an infinite budget);
    - `run_limit(b)` is None or >= 1; over the first `run_limit(b)` steps the step times are
      linear in the step index (the replica spreads a run's inter-token gaps linearly).
    """

    def batch_time(self, b: StepBatch) -> float:
        """Seconds of one iteration of `b`."""
        ...

    def run_time(self, b: StepBatch, k: int) -> float:
        """Seconds of k consecutive decode steps of the decode-only batch `b`."""
        ...

    def steps_within(self, b: StepBatch, budget_s: float, max_steps: int) -> int:
        """Largest j <= max_steps with run_time(b, j) <= budget_s."""
        ...

    def run_limit(self, b: StepBatch) -> int | None:
        """Most steps of `b` priced as one linear run; None = no limit."""
        ...
