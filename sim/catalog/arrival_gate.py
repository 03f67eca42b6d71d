"""The engine-preset fields that hold a new request back from the next batch although it could run: SGLang's
receive interval and TensorRT-LLM's batch waiting (`EngineConfig` inherits them; sim.engine.recv and
sim.engine.schedulers implement them). Kept apart so engine_config.py stays within the module size limit.

Both are off by default in the engines (the defaults below are theirs); benchmark recipes switch them on to trade
first-token latency for larger batches, so a run that set them waits where the presets would not (issue 38: the
knee where TTFT takes off)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ArrivalGateSettings(BaseModel):
    """When an arrived request may join a batch (EngineConfig's model config applies)."""

    recv_interval_steps: int = Field(
        1, ge=1, description=(
            "SGLang --scheduler-recv-interval (server_args.py, default 1): the scheduler polls its input socket only "
            "when a counter reaches this; every decode step adds 1 (SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DECODE), "
            "an extend (prefill) or mixed step 1000 (…_WEIGHT_DEFAULT), an idle pass 1 "
            "(managers/scheduler_recv_skipper.py SchedulerRecvSkipper.handle). So with N > 1 a request that reaches "
            "a decoding server waits for the N-th decode step since the last poll (sim.engine.recv). 1 = every step"))
    batch_wait_iters: int = Field(
        0, ge=0, description=(
            "TensorRT-LLM batch_wait_timeout_iters (TorchLlmArgs, default 0): while generation requests run, "
            "the context (prompt) requests the scheduler picked are held back for up to this many iterations, "
            "until they and the generation tokens reach batch_wait_tokens_ratio x max_num_tokens "
            "(_torch/pyexecutor/py_executor.py `_waiting_requests`, NVIDIA/TensorRT-LLM PR #7416). 0 = off"))
    batch_wait_tokens_ratio: float = Field(
        0.0, ge=0, description=(
            "TensorRT-LLM batch_wait_max_tokens_ratio (default 0): the held context requests run once the "
            "iteration's scheduled tokens (their prompts plus one per generation request) reach this share of "
            "max_num_tokens, or batch_wait_iters have passed"))
