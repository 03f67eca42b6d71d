"""`fit` and `recommend` on a machine with several GPUs: the smallest multi-GPU split that fits.

How each runtime spreads one model over N GPUs of the machine (what its launch command asks for):

- vLLM, SGLang, TensorRT-LLM: tensor parallelism (`--tensor-parallel-size T`, `--tp T`, `--tp_size T`).
  T is a power of two up to N that divides the attention heads (vLLM checks num_attention_heads % T == 0;
  KV heads are replicated when T exceeds them, `sim.cost.parallel.kv_heads_per_device`).
- llama.cpp and Ollama: one GPU, or consecutive layers on each of all N GPUs. llama-server's default with
  several visible GPUs is `--split-mode layer` over all of them (the command says `--split-mode none` when
  one GPU is priced, `--split-mode layer` when N are); Ollama loads a model on one GPU when it fits there,
  else spreads it over all the GPUs it finds (Ollama FAQ, "How does Ollama load models on multiple
  GPUs?"). The layer split is priced as the simulator's pipeline stages (`pp = N`; `sim.cost.parallel`).
  Assumed, not measured: the layers split evenly (llama.cpp's default --tensor-split follows free memory,
  so equal GPUs get equal shares). The presets' `pipeline_overlap: none` makes every forward pass run the
  stages one after the other (a decode step = the sum of the stages + the hops, at any number of users),
  as llama.cpp does: its scheduler copies (GGML_SCHED_MAX_COPIES = 4) overlap only the ubatches of one
  large batch, which the simulator does not model (prompt processing is priced without that overlap).
- MLX, LM Studio and the others: one device.

Memory per GPU follows `sim.cost.memory.device_memory_bytes` (weights / T per stage, KV by each device's
share of the layers and heads) with the activation reserve of one forward split T ways
(`activation_peak_bytes(tp=T)`); the binding (most loaded) device decides. One device is exactly
`sim.cost.memory.fit`.
"""

from __future__ import annotations

from dataclasses import replace

TP_ENGINES = ("vllm", "sglang", "trtllm")  # tensor parallel across GPUs
LAYER_SPLIT_ENGINES = ("llama.cpp", "ollama")  # consecutive layers on each GPU


def split_options(engine: str, model, n_gpus: int) -> list[tuple[int, int]]:
    """(tp, pp) splits `engine` can run `model` with on up to `n_gpus` GPUs, fewest GPUs first."""
    if n_gpus <= 1:
        return [(1, 1)]
    if engine in TP_ENGINES:
        out, t = [], 1
        while t <= n_gpus:
            if model.n_heads % t == 0:
                out.append((t, 1))
            t *= 2
        return out
    if engine in LAYER_SPLIT_ENGINES:
        return [(1, 1), (1, min(n_gpus, model.n_layers))]
    return [(1, 1)]


def fit_split(hw, model, quant, *, tp: int = 1, pp: int = 1, kv_dtype: str = "fp16", context: int = 4096,
              concurrency: int = 1, memory_fraction=None, max_batched_tokens=None,
              activation_reserve_fraction: float = 0.0, engine=None):
    """`sim.cost.memory.fit` for a tp x pp split: a FitResult whose budgets are those of the binding device,
    expressed as the equivalent single-device KV budget so that max context / max sequences keep their meaning:

        room_s     = budget - weights_s - reserve                (per device of stage s)
        share_s    = KV bytes per token on that device / KV bytes per token of the model
        kv_budget  = min over s of room_s / share_s              (KV bytes of the whole model the split holds)

    weight_bytes stays the whole model's; a reason of weights says the binding device's exceed its budget."""
    from sim.cost import memory

    if tp == 1 and pp == 1:
        return memory.fit(hw, model, quant, kv_dtype=kv_dtype, context=context, concurrency=concurrency,
                          memory_fraction=memory_fraction, max_batched_tokens=max_batched_tokens,
                          activation_reserve_fraction=activation_reserve_fraction, engine=engine)
    q = model.quant(quant)
    budget = memory.memory_budget_bytes(hw, memory_fraction)
    if engine is not None and engine.memory_fraction_of == "free":
        eng = engine.with_overrides(tp=tp, pp=pp)
        if max_batched_tokens is not None:
            eng = eng.with_overrides(max_num_batched_tokens=max_batched_tokens)
        reserve = memory.engine_activation_bytes(hw, model, eng)
    else:
        tokens = memory.default_max_batched_tokens(hw) if max_batched_tokens is None else max_batched_tokens
        reserve = max(memory.activation_peak_bytes(model, tokens, tp=tp), activation_reserve_fraction * budget)
    per_token = model.kv_bytes_per_token(kv_dtype)
    devices = memory.device_memory_bytes(model, q, kv_dtype, 1, tp, pp)
    kv_budget = min((budget - w - reserve) / (kv / per_token) for w, kv in devices)
    weights_dev = max(w for w, _ in devices)
    reason = memory.fit_reason(model, kv_dtype, context, concurrency, weights_dev, budget, kv_budget,
                               where=" of a device")
    base = memory.fit(hw, model, quant, kv_dtype=kv_dtype, context=context, concurrency=concurrency,
                      memory_fraction=memory_fraction, max_batched_tokens=max_batched_tokens,
                      activation_reserve_fraction=activation_reserve_fraction)
    return replace(base, activation_reserve_bytes=reserve, kv_budget_bytes=kv_budget, fits=not reason,
                   max_context=memory.max_context_tokens(model, kv_budget, kv_dtype, concurrency),
                   max_sequences=memory.max_sequences(model, kv_budget, kv_dtype, context), reason=reason)


def split_label(tp: int, pp: int) -> str:
    """How the table names a split: `1`, `tp 8`, `layers x3` (llama.cpp / Ollama layer split)."""
    if tp > 1:
        return f"tp {tp}"
    if pp > 1:
        return f"layers x{pp}"
    return "1"
