"""The request record every trace source (file, generator, importer) turns into."""

from __future__ import annotations

from dataclasses import dataclass

# Physical ranges of a request's numbers, checked on every trace line (`workloads.trace.TraceLine`,
# which both `infersim trace validate` and `infersim run` read through) and on scaled arrivals.
#: Most tokens in one count: token ids, positions and lengths are 32-bit signed integers in the
#: engines simulated (llama.cpp `llama_token` / `llama_pos` are int32_t, include/llama.h; vLLM and
#: SGLang position tensors are torch.int32/int64 but their context limits are far below 2^31).
#: Whether a request also fits a model's context is the simulator's call: it is rejected at arrival
#: with that reason (docs/simulating.md), as a real server would answer it.
MAX_TOKENS = 2**31 - 1
#: Latest time a trace may name, seconds: 1e8 s is 3.2 years, longer than any published trace
#: (Azure 2023: one week; BurstGPT: 121 days). float64 keeps 15 ns resolution up to there, far below
#: a token's time; at 1e308 s adding a second changes nothing (the issue-41 case: TTFT 0).
MAX_TIME_S = 1e8


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a trace.

    `output_tokens` is what the model really generates (the simulator uses it to know when a
    request ends); `max_tokens` is the client's budget, the only length a real server knows, so
    admission and KV reservation use `max_tokens` and never `output_tokens`.

    Closed loop: when `think_s` is set and an earlier request of the same `session_id` exists,
    the request is sent `think_s` seconds after that earlier request's response completes (the
    client read the answer and typed the next message); `arrival_s` is then only the earliest
    possible send time, the value an open-loop replay uses. Without `think_s` a request is sent
    at `arrival_s` (open loop).
    """

    id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    session_id: str | None = None
    prefix_id: str | None = None
    prefix_tokens: int = 0
    prefix_blocks: tuple[int, ...] | None = None
    line: int | None = None  # line number in the source file, for error messages
    think_s: float | None = None  # closed loop: delay after the previous response of the session
    tokens_estimated: bool = False  # token counts estimated from text (no tokenizer), not exact
