"""What a static-batch tool prints, computed from the simulated requests of its one batch.

A static-batch tool's corpus row (sim.bench.corpus STATIC_BATCH) is replayed as its B requests sent together at
fixed lengths (sim.bench.corpus.static_batch). The tool does not print vLLM bench serve's per-request statistics:
it times the whole batch. `tool_figures` turns the simulated requests' times (sim.bench.serve.Timings: send,
first-token and finish times, seconds from the benchmark's start) into the figures the tool prints, in the corpus's
quantities, as the corpus builders derived them from the printed figures. A figure the simulated times cannot give
is left out, never approximated by another.

- llama-batched-bench (llama.cpp examples/batched-bench/batched-bench.cpp and its README; the corpus's rows:
  benchmarks/serving/build_dgx_spark_mac_csv.py `batched_bench_rows`). The tool puts the B prompts of PP tokens in
  one batch, decodes it in n_batch slices and synchronizes: T_PP is that prompt pass ("prompt processing time (i.e.
  time to first token)"). Then it runs TG decode calls of one token for each of the B sequences: T_TG. T = T_PP +
  T_TG, S = N_KV / T with N_KV = B (PP + TG) (prompt not shared, is_pp_shared 0). The corpus's rows: ttft_ms mean =
  T_PP, tpot_ms mean = T_TG / TG, e2el_ms mean = T, output_tps = B TG / T, total_tps = S.
  From the simulation: T_PP = the last first-token time less the batch's start (the prompt pass ends when every
  prompt is prefilled: the last prompt's logits). The decode phase after it holds TG - 1 steps (the simulated
  requests ask for TG tokens and the prompt pass gives each its first), so one batch decode step is that phase
  over TG - 1 and T_TG is TG such steps (the tool's TG decode calls; its last call at context PP + TG - 1, one
  token longer than the simulated last step, a difference this leaves out). These are the tool's phases only where
  the simulated batch ran the tool's schedule, every prompt read before any sequence decodes and then all B
  decoding in every step, i.e. all B finish in the same step (their finish times within half a step): a schedule
  that decodes early prompts while later ones are still being read (llama-server's slots) mixes decode work into
  the prompt time and leaves fewer than B sequences in the decode steps, so such a batch gives no figure. TG < 2
  (no decode step simulated) gives T_PP alone.
- vLLM's benchmark_latency (vllm benchmarks/benchmark_latency.py `run_to_completion`: the wall time of one
  `llm.generate` of the B dummy prompts with max_tokens = output_len, ignore_eos; "Avg latency" is its mean over
  --num-iters runs, each the same batch) and TensorRT-LLM's gptManagerBenchmark emulated static batching
  (benchmarks/cpp: `total_latency(ms)` = the run's start to its last response; `token_throughput` = output tokens /
  total_latency); the corpus's rows (benchmarks/serving/build_trtllm_amd_csv.py, ROCm blog "Latency (ms)": "elapsed
  time to process input + output lengths" of the batch): e2el_ms mean = that latency, output_tps = B x output /
  latency. From the simulation: the last finish time less the batch's start. Which of gptManagerBenchmark's
  total_latency and avg_sequence_latency the blog printed is not stated; the corpus's throughput (B x output /
  latency, gptManagerBenchmark's token_throughput) holds for total_latency, the figure taken here.

A batch with a request the simulated server did not complete gives no figure (the tools print none for a failed
run). A run's start is the first send time (every request is sent at once).
"""

from __future__ import annotations

import numpy as np

#: the client cells whose figures `tool_figures` computes, by their corpus builders' definitions: llama-batched-bench's
#: phases, and the batch latency of the others; together the static-batch tools (STATIC_BATCH, the one list, which
#: sim.bench.corpus replays as one batch)
BATCHED_BENCH = "llama-batched-bench"
BATCH_LATENCY = ("vllm-benchmark-latency", "trtllm-static-batch", "benchmark_latency", "gptManagerBenchmark")
STATIC_BATCH = (BATCHED_BENCH, *BATCH_LATENCY)


def batch_phases(t) -> tuple[float, float | None, float] | None:
    """(prompt pass, decode step, makespan) of one simulated static batch, seconds: the last first token less the
    batch's start, the decode phase after it over the TG - 1 steps it holds (None for TG < 2), the last finish less
    the start. None when a request did not complete, or the batch did not decode in lock-step (see the module
    docstring)."""
    if not len(t.success) or not np.all(t.success):
        return None
    t0 = float(np.min(t.start_s))
    last_first, last_finish = float(np.max(t.first_token_s)), float(np.max(t.finish_s))
    tg = int(np.max(t.output_lens))
    step = None
    if tg >= 2:
        step = (last_finish - last_first) / (tg - 1)
        # the tool's schedule: every sequence decodes in every step of the phase, so all B finish in one step
        if int(np.min(t.output_lens)) != tg or float(np.max(t.finish_s) - np.min(t.finish_s)) >= 0.5 * step:
            return None
    return last_first - t0, step, last_finish - t0


def tool_figures(client: str, t) -> dict[tuple[str, str], float]:
    """{(quantity, statistic): value} the static-batch tool `client` prints for the simulated batch `t`
    (sim.bench.serve.Timings of its B requests), in the corpus's quantities (see the module docstring); {} for a
    client of neither kind, or a batch `batch_phases` cannot time as the tool does."""
    c = str(client or "")
    phases = batch_phases(t) if BATCHED_BENCH in c else _makespan(t)
    if phases is None:
        return {}
    t_pp, step, makespan = phases
    b = len(t.output_lens)
    out: dict[tuple[str, str], float] = {}
    if BATCHED_BENCH in c:
        pp, tg = int(np.max(t.prompt_lens)), int(np.max(t.output_lens))
        out[("ttft_ms", "mean")] = 1000.0 * t_pp  # T_PP
        if step is not None:
            total = t_pp + tg * step  # T = T_PP + T_TG, T_TG = TG batch decode steps
            out[("tpot_ms", "mean")] = 1000.0 * step  # T_TG / TG
            out[("e2el_ms", "mean")] = 1000.0 * total  # T
            out[("output_tps", "value")] = b * tg / total  # B TG / T
            out[("total_tps", "value")] = b * (pp + tg) / total  # S = N_KV / T, N_KV = B (PP + TG)
    elif any(s in c for s in BATCH_LATENCY):
        out[("e2el_ms", "mean")] = 1000.0 * makespan  # the batch's latency
        out[("output_tps", "value")] = float(np.sum(t.output_lens)) / makespan  # B x output / latency
    return out


def _makespan(t) -> tuple[None, None, float] | None:
    """(None, None, the last finish less the batch's start) of a batch whose every request completed, else None."""
    if not len(t.success) or not np.all(t.success):
        return None
    return None, None, float(np.max(t.finish_s) - np.min(t.start_s))
