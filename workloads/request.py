"""The request record every trace source (file, generator, importer) turns into."""

from __future__ import annotations

from dataclasses import dataclass


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
