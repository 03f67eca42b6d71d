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

How it meets the GPU steps (`EngineConfig.host_stage_mode`):
- `queue` (default; `HostQueue`): the stage is a separate process the engine runs ahead of (vLLM V1's engine
  core pushes its outputs into a ZMQ socket and steps on; SGLang's scheduler sends them to its detokenizer
  process; trtllm-serve's executor workers hand responses to the server process, which detokenizes them).
  Tokens wait in the stage's FIFO; the client sees them, and a closed-loop client sends its next request,
  only when the stage has handled them. The GPU's steps, batch and KV cache are not held.
- `overlap` (`HostStage`): the stage works on step n's tokens while the GPU runs step n+1 and holds step n+2
  until it is done: an iteration lasts max(GPU step, tokens x host_token_us).
- `serial` (`HostStage`): the host work runs on the thread that launches the steps (TensorRT-LLM with its
  overlap scheduler disabled, a single-threaded server): GPU step + tokens x host_token_us.
Tokens an iteration emits: one per decoding sequence (`tokens_per_step` of them under speculative decoding)
and one per prompt chunk that completes its prompt (the first token, which also carries `host_request_us`,
the request's own work: tokenizing its prompt, its request and response objects, opening its stream).

`HostStage` wraps any `sim.engine.pricing.StepModel` and keeps its contract: `run_time` increasing in k,
`steps_within` its exact integer inverse, and `run_limit` cutting an overlap-mode run where the GPU step
overtakes the stage's per-step cost, so each run's step times stay linear (the replica's ITL records).
Deterministic (pure functions of the batch; the queue's state is one float). `host_token_us` and
`host_request_us` 0 (every preset's default) build neither: nothing changes.
"""

from __future__ import annotations

import math

from sim.engine.pricing import StepBatch

HOST_STAGE_MODES = ("queue", "overlap", "serial")


class _HostCost:
    """The stage's seconds for the tokens an iteration emits (module docstring): `host_token_us` per token (one
    per decoding sequence, `tokens_per_step` under speculative decoding) and, on a request's first token, its
    `host_request_us` more."""

    def __init__(self, host_token_us: float, host_request_us: float, tokens_per_step: float) -> None:
        self.token_s = float(host_token_us) * 1e-6
        # a request's own work, charged with its first token (tokenizing its prompt, its request and response
        # objects, the stream's set-up): the step that completes its prompt
        self.first_s = self.token_s + float(host_request_us) * 1e-6
        self.tokens_per_step = float(tokens_per_step)

    def _decode_host_s(self, n_decode: int) -> float:
        """Seconds the stage spends on one decode step's tokens."""
        return n_decode * self.tokens_per_step * self.token_s

    def _step_host_s(self, n_decode: int, prefill_ends) -> float:
        """Seconds the stage spends on one step's tokens: its decode tokens and the first tokens of the prompts
        it completes (a true entry of `prefill_ends` each)."""
        return self._decode_host_s(n_decode) + sum(prefill_ends) * self.first_s


class HostQueue(_HostCost):
    """The `queue` mode: the engine runs ahead of the stage, and tokens wait in its FIFO (vLLM V1's engine core
    pushes its outputs into a ZMQ socket and steps on; SGLang's scheduler sends them to the detokenizer process;
    trtllm-serve's executor hands responses to the server process). The stage is one server of fluid work:
    `busy` is when its backlog clears. An event (a step, or a fast-forwarded run of k decode steps) adds
    host_token_us per emitted token and host_request_us per first token; the stage starts on it when the first
    step's tokens exist and it is free, and the event's last tokens reach the client when the stage is done
    with them: max(start + work, end + the last step's work). The replica stamps the event's first tokens and
    completions with that time and a closed-loop client sends its next request then; the GPU's steps, the KV
    cache and the batch are not held (the engine frees a finished request's blocks when it finishes). While
    the stage keeps up, a token reaches the client one step's host work after its step; when it does not,
    the backlog grows and every token waits behind it (TTFT and E2E grow with the load), and the client
    receives at most 1e6 / host_token_us tokens/s. TPOT follows from the seen first and last tokens; `bench
    serve`'s client ITLs spread a request's seen span over its tokens (sim.bench.serve `_itls`), while `run`'s
    ITL percentiles (the replica's GapLog) stay the engine's step gaps."""

    def __init__(self, host_token_us: float, host_request_us: float = 0.0, tokens_per_step: float = 1.0) -> None:
        super().__init__(host_token_us, host_request_us, tokens_per_step)
        self.busy = 0.0

    def emit(self, start_s: float, end_s: float, first_step_s: float, n_decode: int, prefill_ends, k: int) -> float:
        """An event from `start_s` to `end_s` (k steps, the first `first_step_s` long) emitting `n_decode` tokens
        per step and a first token per true entry of `prefill_ends`: when the client sees its last tokens."""
        step = self._step_host_s(n_decode, prefill_ends)
        if step <= 0:  # a prompt chunk that emits nothing
            return end_s
        start = max(self.busy, start_s + first_step_s)
        self.busy = max(start + k * step, end_s + step)
        return self.busy


class HostStage(_HostCost):
    """A `StepModel` whose iterations also wait for the host stage (module docstring)."""

    def __init__(self, inner, host_token_us: float, mode: str = "overlap", tokens_per_step: float = 1.0,
                 host_request_us: float = 0.0) -> None:
        if mode not in HOST_STAGE_MODES:
            raise ValueError(f"host stage mode must be one of {', '.join(HOST_STAGE_MODES)}, got {mode!r}")
        if not (host_token_us > 0 or host_request_us > 0) or host_token_us < 0 or host_request_us < 0:
            raise ValueError(f"a host stage needs host_token_us or host_request_us > 0, got {host_token_us!r}, "
                             f"{host_request_us!r}")
        super().__init__(host_token_us, host_request_us, tokens_per_step)
        self.inner = inner
        self.serial = mode == "serial"

    def batch_time(self, b: StepBatch) -> float:
        gpu = self.inner.batch_time(b)
        host = self._step_host_s(b.n_decode, b.prefill_ends())
        return gpu + host if self.serial else max(gpu, host)

    def run_time(self, b: StepBatch, k: int) -> float:
        if k <= 0:
            return 0.0
        gpu = self.inner.run_time(b, k)
        host = k * self._decode_host_s(b.n_decode)
        # overlap: exact over a run `run_limit` keeps in one regime (every step GPU- or stage-bound)
        return gpu + host if self.serial else max(gpu, host)

    def steps_within(self, b: StepBatch, budget_s: float, max_steps: int) -> int:
        if budget_s == math.inf:
            return max_steps
        hi = self.inner.steps_within(b, budget_s, max_steps)  # run_time >= the GPU's: no more steps than it
        if not self.serial:
            h = self._decode_host_s(b.n_decode)
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
        h = self._decode_host_s(b.n_decode)
        s0 = self.inner.run_time(b, 1)
        if s0 >= h:  # the GPU step already outlasts the stage and only grows along the run
            return limit
        d = self.inner.run_time(b, 2) - 2.0 * s0  # the GPU step's growth per step (linear in the run)
        if d <= 0:
            return limit
        cross = max(1, math.ceil((h - s0) / d))  # steps before the GPU step reaches the stage's cost
        return cross if limit is None else min(limit, cross)


def with_host_stage(step_model, engine, tokens_per_step: float = 1.0):
    """(step model, host queue) of the engine's host stage: `step_model` itself and None when host_token_us and
    host_request_us are 0 (nothing changes); in `queue` mode the step model itself and a `HostQueue`; in
    `overlap` / `serial` mode `step_model` wrapped in `HostStage` and None."""
    us = float(getattr(engine, "host_token_us", 0.0) or 0.0)
    req = float(getattr(engine, "host_request_us", 0.0) or 0.0)
    if us <= 0 and req <= 0:
        return step_model, None
    mode = getattr(engine, "host_stage_mode", "queue")
    if mode == "queue":
        return step_model, HostQueue(us, req, tokens_per_step)
    return HostStage(step_model, us, mode, tokens_per_step, req), None
