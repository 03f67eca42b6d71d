"""The requests a benchmark client sends (`sim.bench.serve`): vLLM's random and ShareGPT datasets
(and SGLang's range-ratio rule) and the client's release times, drawn as the clients draw them.
See `sim.bench.serve`'s docstring for the sources (vLLM's benchmarks/datasets.py and serve.py at the
commits named there). `client` is a `sim.bench.serve.ServeClient` (typed Any here: that module
imports this one)."""

from __future__ import annotations

import json
import math
import random as _pyrandom
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ConfigError

INF = float("inf")
#: ShareGPT filter (vllm/benchmarks/datasets/utils.py is_valid_sequence defaults)
SHAREGPT_MIN_LEN, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL = 4, 1024, 2048


@dataclass(frozen=True)
class Workload:
    """The requests a client sends: prompt and output lengths (the prompt includes `prefix_tokens`
    shared tokens) and when the client releases each (seconds from the benchmark's start)."""

    prompt_lens: np.ndarray
    output_lens: np.ndarray
    release_s: np.ndarray
    prefix_tokens: int = 0
    tokens_estimated: bool = False

    def __len__(self) -> int:
        return len(self.prompt_lens)


# ---- the workload -------------------------------------------------------------------------------------
def sample_random(client: Any) -> tuple[np.ndarray, np.ndarray]:
    """vLLM's `RandomDataset.get_sampling_params` with 0 special tokens: (sampled input lengths,
    output lengths), the prefix not included."""
    r = client.random_range_ratio
    i_len, o_len = client.random_input_len, client.random_output_len
    if client.range_mode == "sglang":
        # sglang/bench_serving.py sample_random_requests: randint(max(int(I r), 1), I + 1), outputs
        # randint(int(O r), O + 1) (here at least 1 token); the same distribution, not SGLang's seed stream
        rng = np.random.RandomState(client.seed)
        inputs = rng.randint(max(int(i_len * r), 1), i_len + 1, size=client.num_prompts)
        outputs = rng.randint(max(int(o_len * r), 1), max(o_len, 1) + 1, size=client.num_prompts)
        return inputs.astype(np.int64), outputs.astype(np.int64)
    in_lo, in_hi = math.floor(i_len * (1 - r)), math.ceil(i_len * (1 + r))
    out_lo, out_hi = max(math.floor(o_len * (1 - r)), 1), max(math.ceil(o_len * (1 + r)), 1)
    rng = np.random.default_rng(client.seed)
    inputs = rng.integers(in_lo, in_hi + 1, size=client.num_prompts)
    outputs = rng.integers(out_lo, out_hi + 1, size=client.num_prompts)
    return inputs.astype(np.int64), outputs.astype(np.int64)


def sample_sharegpt(client: Any) -> tuple[np.ndarray, np.ndarray]:
    """vLLM's `ShareGPTDataset` (load_data, sample, maybe_oversample_requests) with token counts
    estimated from characters (no tokenizer offline)."""
    from workloads.importers import estimate_tokens

    path = Path(client.dataset_path or "")
    if not path.is_file():
        raise ConfigError("file not found", file=path, field="--dataset-path")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"not a ShareGPT JSON file ({e})", file=path, field="--dataset-path") from None
    if not isinstance(data, list):
        raise ConfigError("expected a JSON list of conversations", file=path, field="--dataset-path")
    data = [e for e in data if isinstance(e, dict) and isinstance(e.get("conversations"), list)
            and len(e["conversations"]) >= 2]
    rnd = _pyrandom.Random(client.seed)  # random.seed(self.random_seed); random.shuffle(self.data)
    rnd.shuffle(data)
    fixed_out = client.sharegpt_output_len
    prompts, outputs = [], []
    for entry in data:
        if len(prompts) >= client.num_prompts:
            break
        turns = entry["conversations"]
        p = estimate_tokens(str(turns[0].get("value", "")) if isinstance(turns[0], dict) else "")
        o = estimate_tokens(str(turns[1].get("value", "")) if isinstance(turns[1], dict) else "")
        o = o if fixed_out is None else fixed_out
        too_short = p < SHAREGPT_MIN_LEN or (fixed_out is None and o < SHAREGPT_MIN_LEN)
        if too_short or p > SHAREGPT_MAX_PROMPT or p + o > SHAREGPT_MAX_TOTAL:
            continue
        prompts.append(p)
        outputs.append(o)
    if not prompts:
        raise ConfigError("no conversation passes vLLM's length filter", file=path, field="--dataset-path")
    while len(prompts) < client.num_prompts:  # maybe_oversample_requests: random.choice of the kept ones
        k = rnd.randrange(len(prompts))
        prompts.append(prompts[k])
        outputs.append(outputs[k])
    return np.array(prompts, dtype=np.int64), np.array(outputs, dtype=np.int64)


def release_times(client: Any, n: int) -> np.ndarray:
    """When the client's `get_request` releases each of n requests (seconds from the benchmark's start).
    Today's vLLM draws gamma gaps (shape = burstiness) and rescales them so the n requests span exactly
    n / rate. The older benchmark_serving.py lineage (`range_mode` "sglang": SGLang's bench_serving,
    InferenceX's vLLM-derived script, vLLM before the change) yields a request, then sleeps an
    exponential gap: the same draws, not rescaled."""
    rng = np.random.RandomState(client.seed)  # np.random.seed(args.seed): the legacy global generator
    delays = np.zeros(n)
    ramp = client.ramp_up_strategy
    for i in range(n):
        rate = client.request_rate
        if ramp is not None:
            progress = i / max(n - 1, 1)
            lo, hi = client.ramp_up_start_rps, client.ramp_up_end_rps
            rate = lo + (hi - lo) * progress if ramp == "linear" else lo * (hi / lo) ** progress
            if not rate > 0:
                raise ConfigError(f"obtained non-positive request rate {rate}", field="--ramp-up-start-rps")
        if rate == INF:
            delays[i] = 0.0
        elif client.burstiness == INF:
            delays[i] = 1.0 / rate
        else:
            delays[i] = rng.gamma(shape=client.burstiness, scale=1.0 / (rate * client.burstiness))
    cum = np.cumsum(delays)
    if ramp is None and n and cum[-1] != 0 and getattr(client, "range_mode", "vllm") == "sglang":
        return np.concatenate([[0.0], cum[:-1]])  # yield, then sleep: the first request goes at 0
    if ramp is None and n and cum[-1] != 0:
        cum = cum * ((n / client.request_rate) / cum[-1])
    return cum


def make_workload(client: Any) -> Workload:
    """The requests `client` sends: lengths from its dataset, release times from its rate."""
    client.check()
    if client.dataset_name == "random":
        inputs, outputs = sample_random(client)
        prefix, estimated = client.random_prefix_len, False
    else:
        inputs, outputs = sample_sharegpt(client)
        prefix, estimated = 0, True
    return Workload(inputs + prefix, outputs, release_times(client, len(inputs)), prefix, estimated)
