"""Benchmark clients replayed on the simulator: what `vllm bench serve`, AIPerf / genai-perf and
GuideLLM would measure against a server, computed from a simulated one.

- `sim.bench.serve`: the vLLM client (datasets, arrival process, semaphore) and its metrics;
  `run_client(client, deployment)` is the one call a replay of a published load point needs.
- `sim.bench.tools`: AIPerf / genai-perf concurrency runs and GuideLLM sweeps (load patterns and
  result formats).
- `sim.bench.results`: reading those tools' result files back (vLLM JSON or console block, SGLang
  bench_serving lines, AIPerf / genai-perf exports, GuideLLM benchmarks.json), for `infersim
  validate --measured` and `infersim calibrate --from-bench`.
- `sim.bench.corpus`: one row of the serving corpus (benchmarks/serving) replayed, `predict_row(row)`;
  its `row_lengths` and `shared_prefix` are the one length rule and the one prompt-sharing rule
  the serving fit uses too, and `STATIC_BATCH` / `static_batch` the one rule for static-batch tools
  (llama-batched-bench, vLLM's benchmark_latency, TensorRT-LLM's emulated static batching).
- `sim.bench.corpus_spec`: the speculative-decoding acceptance a corpus row's source states (the side
  table benchmarks/serving/side_tables/spec_acceptance.csv) -> the engine's `speculative` block, for
  `predict_row` and the serving fit's load points alike.
- `sim.bench.corpus_static`: the figures a static-batch tool prints (llama-batched-bench's T_PP, batch decode
  step and T; benchmark_latency's and gptManagerBenchmark's batch latency), from its simulated batch's requests.
- `sim.bench.corpus_cells`: reading one corpus cell (`blank`, `cell_number`).
- `sim.bench.corpus_deployment`: the deployment a corpus row names, resolved in this tree (its model's
  catalog entry, `model_id`; its engine version's preset release, `release_of`): the one rule
  `predict_row` and the serving fit's load points both use.
"""
