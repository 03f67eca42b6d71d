"""The serving host stage: the one process every streamed token passes through (issue 38).

What it models. A serving engine's GPU steps are driven by one process, but what the client sees goes
through a second, single-threaded stage on the host: vLLM V1's API-server process (the engine core's
outputs arrive over ZMQ; `OutputProcessor` detokenizes each request's new tokens, builds its
`RequestOutput` and the HTTP server writes the SSE chunk: `--api-server-count` exists because that
process saturates), SGLang's DetokenizerManager and TokenizerManager processes, trtllm-serve's Python
executor loop and its response/detokenization path (`--num_postprocess_workers` 0 by default). Each
emitted token costs that stage `host_token_us` microseconds of one CPU core (Python: incremental
detokenization, output object, JSON chunk, socket write), serialized across every request of the
replica (capacity 1). When the tokens a step emits cost the stage more than the step takes on the GPU,
the stage is the bottleneck: the replica cannot deliver more than 1e6 / host_token_us tokens/s, whatever
the batch, and the client's ITL, TPOT, E2E and TTFT stretch with it.

How it is priced. The stage works on step n's tokens while the GPU runs step n+1 (vLLM V1's engine core
and API server are separate processes; SGLang's detokenizer is too; TensorRT-LLM's PyTorch executor
overlaps its host work with the next forward by default: the overlap scheduler). A step the stage cannot
keep up with is held until it can (the client sees a token only once the stage has handled it, and a
closed-loop client sends its next request only then), so in `overlap` mode (`EngineConfig.host_stage_mode`)
an iteration lasts max(GPU step, tokens x host_token_us); in `serial` mode (the host work on the thread
that launches the steps: TensorRT-LLM with its overlap scheduler disabled, a single-threaded server) it
lasts GPU step + tokens x host_token_us. Tokens an iteration emits: one per decoding sequence
(`tokens_per_step` of them under speculative decoding) and one per prompt chunk that completes its
prompt (the first token). A real vLLM engine core runs further ahead (its outputs queue in the socket)
and keeps fewer sequences in its batch; at the stage's rate the client sees the same token stream.

`HostStage` wraps any `sim.engine.pricing.StepModel` and keeps its contract: `run_time` increasing in k,
`steps_within` its exact integer inverse, and `run_limit` cutting an overlap-mode run where the GPU step
overtakes the stage's per-step cost, so each run's step times stay linear (the replica's ITL records).
Deterministic (a pure function of the batch). `host_token_us` 0 (every preset's default) builds no
wrapper: nothing changes.
"""

from __future__ import annotations

import math

from sim.engine.pricing import StepBatch

HOST_STAGE_MODES = ("overlap", "serial")


class HostStage:
    """A `StepModel` whose iterations also wait for the host stage (module docstring)."""

    def __init__(self, inner, host_token_us: float, mode: str = "overlap", tokens_per_step: float = 1.0) -> None:
        if mode not in HOST_STAGE_MODES:
            raise ValueError(f"host stage mode must be one of {', '.join(HOST_STAGE_MODES)}, got {mode!r}")
        if not host_token_us > 0:
            raise ValueError(f"host_token_us must be > 0 for a host stage, got {host_token_us!r}")
        self.inner = inner
        self.token_s = float(host_token_us) * 1e-6
        self.serial = mode == "serial"
        self.tokens_per_step = float(tokens_per_step)

    # ---- the stage's seconds per iteration ----------------------------------------------------------
    def _decode_host_s(self, b: StepBatch) -> float:
        """Seconds the stage spends on one decode step's tokens."""
        return b.n_decode * self.tokens_per_step * self.token_s

    def batch_time(self, b: StepBatch) -> float:
        gpu = self.inner.batch_time(b)
        host = self._decode_host_s(b) + sum(b.prefill_ends()) * self.token_s
        return gpu + host if self.serial else max(gpu, host)

    def run_time(self, b: StepBatch, k: int) -> float:
        if k <= 0:
            return 0.0
        gpu = self.inner.run_time(b, k)
        host = k * self._decode_host_s(b)
        # overlap: exact over a run `run_limit` keeps in one regime (every step GPU- or stage-bound)
        return gpu + host if self.serial else max(gpu, host)

    def steps_within(self, b: StepBatch, budget_s: float, max_steps: int) -> int:
        if budget_s == math.inf:
            return max_steps
        hi = self.inner.steps_within(b, budget_s, max_steps)  # run_time >= the GPU's: no more steps than it
        if not self.serial:
            h = self._decode_host_s(b)
            if h > 0:
                j = min(hi, int(budget_s / h) + 1)
                while j > 0 and j * h > budget_s:  # the float product itself, as run_time computes it
                    j -= 1
                return j
            return hi
        lo = 0  # serial: the largest j <= hi with run_time(b, j) <= budget_s (run_time increasing)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.run_time(b, mid) <= budget_s:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def run_limit(self, b: StepBatch) -> int | None:
        limit = self.inner.run_limit(b)
        if self.serial:
            return limit
        h = self._decode_host_s(b)
        s0 = self.inner.run_time(b, 1)
        if s0 >= h:  # the GPU step already outlasts the stage and only grows along the run
            return limit
        d = self.inner.run_time(b, 2) - 2.0 * s0  # the GPU step's growth per step (linear in the run)
        if d <= 0:
            return limit
        cross = max(1, math.ceil((h - s0) / d))  # steps before the GPU step reaches the stage's cost
        return cross if limit is None else min(limit, cross)


def with_host_stage(step_model, engine, tokens_per_step: float = 1.0):
    """`step_model` wrapped in the engine's host stage, or itself when `host_token_us` is 0."""
    us = float(getattr(engine, "host_token_us", 0.0) or 0.0)
    if us <= 0:
        return step_model
    return HostStage(step_model, us, getattr(engine, "host_stage_mode", "overlap"), tokens_per_step)
