"""The host-stage fields of an engine preset (`EngineConfig` inherits them; sim.engine.host implements the stage,
docs/cost-model.md 'Host stage' describes it). Kept apart so engine_config.py stays within the module size limit."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class HostStageSettings(BaseModel):
    """The single host process every streamed token passes through (EngineConfig's model config applies)."""

    host_token_us: float = Field(
        0.0, ge=0, description=("host-stage CPU time per streamed output token, in microseconds: the one process every "
                                "token passes through before the client sees it (vLLM's API server: detokenization, "
                                "output objects, SSE; SGLang's detokenizer; trtllm-serve's Python executor loop), "
                                "serialized across the replica's requests, so it delivers at most 1e6 / host_token_us "
                                "tokens/s (sim.engine.host; docs/cost-model.md 'Host stage'). 0 = no stage"))
    host_request_us: float = Field(
        0.0, ge=0, description=("host-stage CPU time per request, in microseconds, on the same single process as "
                                "host_token_us and charged with the request's first token: tokenizing its prompt, "
                                "its request and response objects, opening its stream (sim.engine.host). 0 = none"))
    front_request_ms: float = Field(
        0.0, ge=0, description=("serialized per-request front-end time, in milliseconds, BEFORE the scheduler sees "
                                "the request: one process (vLLM's API server, SGLang's TokenizerManager, "
                                "trtllm-serve's server) parses, validates and tokenizes each request one at a time, "
                                "so a burst of C sends reaches the engine staggered by this much each "
                                "(workloads.arrivals.FrontEnd; fitted by calibrate/serving/front_queue.py). 0 = none"))
    front_jitter: float = Field(
        0.0, ge=0, le=1, description=("spread of the front-end delay (request_overhead_ms) from request to request, "
                                      "0..1: request r waits request_overhead_ms x (1 + front_jitter x (2 u_r - 1)), "
                                      "u_r uniform on [0, 1) fixed by its id, so the mean is unchanged and 1 spreads "
                                      "it over [0, 2 x request_overhead_ms]. The variation of tokenization, HTTP and "
                                      "Python scheduling time that desynchronises a closed loop of identical requests "
                                      "(workloads.arrivals.FrontEnd; docs/ttft-misses.md section 4). 0 = one constant "
                                      "delay"))
    host_stage_mode: Literal["queue", "overlap", "serial"] = Field(
        "queue", description=("how the host stage meets the GPU steps: queue = a separate process the engine runs "
                              "ahead of, its tokens waiting in the stage's FIFO (vLLM V1's API server, SGLang's "
                              "detokenizer, trtllm-serve's server process); overlap = it works on a step's tokens "
                              "while the next step runs and holds the next step until done (an iteration lasts "
                              "max(GPU step, its tokens' host time)); serial = on the thread that launches the steps "
                              "(GPU step + host time). sim.engine.host"))
