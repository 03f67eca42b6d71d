"""`infersim models list|show` and `infersim fit` (what runs on this machine)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # the catalog and profile models load when a command runs, not when `infersim` starts
    from sim.catalog.hardware import HardwareProfile
    from sim.catalog.models import ModelSpec

app = typer.Typer(no_args_is_help=True)

GB = 1e9  # decimal GB, as the hardware profiles state memory capacity
WIDE = 160  # rich wraps tables at 80 columns when output is not a terminal; these tables need more


def _console() -> Console:
    c = Console()
    return c if c.is_terminal else Console(width=WIDE)


def _gb(n: float) -> str:
    return f"{n / GB:,.1f}" if abs(n) >= 10 * GB else f"{n / GB:,.2f}"


@app.command("list")
def list_models() -> None:
    """The catalog: architecture numbers and sizes (weights in bf16, KV per token in fp16)."""
    from sim.catalog.models import load_catalog

    table = Table(title="Model catalog (sim/catalog/data/models.yaml)")
    cols = ("name", "arch", "params B", "active B", "layers", "heads q/kv", "head dim", "max ctx",
            "KV KiB/tok", "bf16 GB")
    for col in cols:
        table.add_column(col, justify="left" if col in ("name", "arch") else "right", no_wrap=col == "name")
    for name, m in load_catalog().items():
        table.add_row(
            name, m.architecture, f"{m.n_params_total / 1e9:.2f}",
            f"{m.n_params_active / 1e9:.2f}" if m.is_moe else "", str(m.n_layers),
            f"{m.n_heads}/{m.n_kv_heads}", str(m.d_head), f"{m.max_context:,}",
            f"{m.kv_bytes_per_token() / 1024:.0f}", _gb(m.weight_bytes("bf16")),
        )
    _console().print(table)


def derived_quantities(m: ModelSpec, quant: str, kv_dtype: str, context: int) -> dict:
    """The numbers `models show` prints, as a plain dict (also its --json output)."""
    q = m.quant(quant)
    out = {
        "n_params_total": m.n_params_total,
        "n_params_active": m.n_params_active,
        "matmul_params_active": m.matmul_params_active,
        "quant": q.name,
        "bits_per_weight_blocks": q.bits_per_weight,
        "compute_format": q.compute_format,
        "weight_bytes": m.weight_bytes(q),
        "kv_dtype": kv_dtype,
        "kv_bytes_per_token": m.kv_bytes_per_token(kv_dtype),
        "context": context,
        "kv_bytes_per_sequence": float(m.kv_bytes_per_sequence(context, kv_dtype)),
        "flops_per_token_at_context": float(m.flops_per_token(context)),
        "attention_flops_per_token_at_context": float(m.attention_flops_per_token(context)),
    }
    if m.is_moe:
        out["expert_bytes"] = m.expert_bytes(q)
    return out


@app.command("show")
def show(
    name: str = typer.Argument(..., help="catalog name, or a path to a .gguf file or a config.json"),
    quant: Optional[str] = typer.Option(None, "--quant", "-q", help="quantization (default: the model's)"),
    kv_dtype: str = typer.Option("fp16", "--kv-dtype", help="KV-cache dtype: fp16, bf16, fp8, q8_0, q4_0"),
    context: int = typer.Option(4096, "--context", min=1, help="context length for KV and FLOPs figures"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
) -> None:
    """Architecture of one model and what follows from it for a quantization and KV dtype."""
    from sim.catalog.lookup import get_model
    from sim.catalog.quant import get_quant, kv_dtype_bytes

    m = get_model(name)
    kv_dtype_bytes(kv_dtype)  # unknown dtype -> ConfigError before any output
    d = derived_quantities(m, quant or m.default_quant, kv_dtype, context)
    if as_json:
        typer.echo(json.dumps({"model": m.model_dump(), "derived": d}, indent=2))
        return
    arch = Table(title=m.display_name or m.name, show_header=False)
    arch.add_column("field", no_wrap=True)
    arch.add_column("value")
    for field, value in m.model_dump().items():
        if value in (None, "", [], 0) and field not in ("n_experts",):
            continue
        arch.add_row(field, "\n".join(value) if isinstance(value, list) else str(value))
    q = get_quant(d["quant"])
    derived = Table(title=f"Derived ({q.name} weights, {kv_dtype} KV, context {context:,})", show_header=False)
    derived.add_column("quantity", no_wrap=True)
    derived.add_column("value")
    derived.add_row("parameters (total)", f"{d['n_params_total']:,}  ({d['n_params_total'] / 1e9:.3f} B)")
    if m.is_moe:
        derived.add_row("parameters (active per token)", f"{d['n_params_active']:,}  ({d['n_params_active'] / 1e9:.3f} B)")
    derived.add_row("matmul parameters per token", f"{d['matmul_params_active']:,}")
    derived.add_row("weight bytes", f"{d['weight_bytes']:,.0f}  ({_gb(d['weight_bytes'])} GB)")
    derived.add_row("  bits/weight blocks | embedding | lm_head",
                    f"{q.bits_per_weight:.3f} | {q.embedding_bits:.3f} | {q.lm_head_bits:.3f}  (compute {q.compute_format})")
    if m.is_moe:
        derived.add_row("one expert, all layers", f"{d['expert_bytes']:,.0f} bytes")
    derived.add_row("KV bytes per token", f"{d['kv_bytes_per_token']:,.0f}")
    derived.add_row(f"KV bytes per sequence @ {context:,}", f"{d['kv_bytes_per_sequence']:,.0f}"
                    + ("  (sliding-window layers keep only the window)" if m.n_sliding_layers else ""))
    derived.add_row(f"FLOPs per token @ {context:,}", f"{d['flops_per_token_at_context']:.4g}"
                    f"  (attention {d['attention_flops_per_token_at_context']:.3g})")
    con = _console()
    con.print(arch)
    con.print(derived)


# ---- fit ------------------------------------------------------------------------------------------

def engine_for_quant(quant: str) -> str:
    """The engine that serves a format in the speed columns: llama.cpp for GGUF, else vLLM."""
    from sim.catalog.quant import get_quant

    return "llama.cpp" if get_quant(quant).family == "gguf" else "vllm"


def predicted_speed(model: ModelSpec, quant: str, hw: HardwareProfile, context: int,
                    engine: "str | object | None" = None) -> dict:
    """Hook for the "predicted tokens/s" columns: single-stream decode tok/s at `context` and the
    prefill tok/s of a `context`-token prompt, from `sim.cost.roofline.CostModel` with `engine` (default:
    `engine_for_quant`)."""
    from sim.cost.roofline import CostModel

    eng = engine or engine_for_quant(quant)
    cm = CostModel.from_names(model, quant, hw, eng)
    return {"engine": eng if isinstance(eng, str) else eng.name,
            "decode_tok_s": cm.single_stream_decode_tok_s(context), "prefill_tok_s": cm.prefill_tok_s(context)}


def _split(values: Optional[str]) -> list[str]:
    return [v.strip() for v in values.split(",") if v.strip()] if values else []


def fit(
    hw: Optional[str] = typer.Option(None, "--hw", help="hardware profile name or YAML path (default: detect this "
                                     "machine: nvidia-smi, rocm-smi, sysctl, /proc/meminfo + lscpu; sim.catalog.detect)"),
    context: int = typer.Option(4096, "--context", min=1, help="tokens per sequence (prompt + output)"),
    concurrency: int = typer.Option(1, "--concurrency", min=1, help="sequences held in memory at once"),
    quant: Optional[str] = typer.Option(None, "--quant", help="comma-separated quantizations "
                                        "(default: bf16,fp8,q8_0,q4_k_m, plus nvfp4 on fp4 hardware)"),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help="KV-cache dtype: fp16, bf16, fp8, q8_0, q4_0 "
                                           "(default: the engine's, else fp16)"),
    model: Optional[str] = typer.Option(None, "--model", help="comma-separated catalog names or model files "
                                        "(default: the whole catalog)"),
    engine: Optional[str] = typer.Option(None, "--engine", help="serving engine preset: its memory fraction, "
                                         "batched tokens, activation reserve and KV dtype set the budget, and it "
                                         "prices every row (default: none; tok/s from llama.cpp for GGUF rows, "
                                         "vLLM for the others)"),
    memory_fraction: Optional[float] = typer.Option(None, "--memory-fraction", min=0.01, max=1.0,
                                                    help="share of device memory for weights + activations + KV "
                                                    "(default: the engine's, else the profile's usable_memory_fraction)"),
    max_batched_tokens: Optional[int] = typer.Option(None, "--max-batched-tokens", min=0,
                                                     help="tokens per forward that size the activation reserve "
                                                     "(default: the engine's, else vLLM's: 8192 on >= 70 GiB "
                                                     "devices, 2048 below)"),
    speed: bool = typer.Option(True, "--speed/--no-speed", help="add predicted tok/s columns (cost model)"),
    tp: Optional[int] = typer.Option(None, "--tp", min=1, help="GPUs of the machine a model may be split over: "
                                     "tensor parallel (vLLM, SGLang, TensorRT-LLM) or llama.cpp's layer split; "
                                     "each row takes the fewest that fit (default: the GPUs detected; 1 with --hw)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """What fits in memory on a machine: every catalog model x quantization.

    Budget = memory x fraction - weights - activation reserve (one forward of max-batched-tokens,
    see sim/cost/memory.py); the rest holds the KV cache. Shows whether context x concurrency fits,
    the largest context at that concurrency and the most sequences at that context.
    """
    from sim.catalog.hardware import load_profile
    from sim.catalog.lookup import get_model
    from sim.catalog.models import load_catalog
    from sim.catalog.quant import get_quant, kv_dtype_bytes
    from sim.cost import memory

    from sim.commands.fit_parallel import fit_split, split_label, split_options

    detected = None
    n_gpus = 1
    if hw is None:
        from sim.catalog.detect import detect_profile_and_gpus

        prof, detected, n_gpus = detect_profile_and_gpus()
    else:
        prof = load_profile(hw)
    n_gpus = tp or n_gpus
    if n_gpus > 1 and prof.kind != "gpu":
        from sim.errors import ConfigError

        raise ConfigError(f"{n_gpus} devices: splitting a model over several is priced for discrete GPUs only "
                          f"({prof.name} is {prof.kind})", field="--tp")
    explicit_kv = kv_dtype
    reserve_fraction = 0.0
    eng = None
    per_row_fraction = False
    if engine:
        from sim.catalog.engine_config import load_engine

        eng = load_engine(engine).for_hardware(prof)
        # TensorRT-LLM's fraction is of the memory each model leaves free: it is worked out per row
        per_row_fraction = memory_fraction is None and eng.memory_fraction_of == "free"
        memory_fraction = eng.memory_fraction if memory_fraction is None else memory_fraction
        max_batched_tokens = eng.forward_tokens if max_batched_tokens is None else max_batched_tokens
        if per_row_fraction and max_batched_tokens:
            # TensorRT-LLM's activations, and so its free memory, follow its max_num_tokens
            eng = eng.with_overrides(max_num_batched_tokens=max_batched_tokens)
        kv_dtype = kv_dtype or eng.kv_dtype
        reserve_fraction = 0.0 if per_row_fraction else eng.activation_reserve_fraction
    kv_dtype = kv_dtype or "fp16"
    kv_dtype_bytes(kv_dtype)
    quants = [get_quant(q).name for q in _split(quant)] or memory.default_fit_quants(prof)
    models = [get_model(n) for n in _split(model)] or list(load_catalog().values())
    from sim.catalog.deployment import engine_for

    rows = []
    for m in models:
        for q in quants:
            fraction = memory.engine_memory_fraction(prof, m, q, eng) if eng is not None and per_row_fraction \
                else memory_fraction
            # the engine `run` prices this checkpoint with (sim.catalog.deployment.engine_for: device rules, the
            # KV dtype the engine picks for the quantization, weight-format rules), for the speed columns
            row_eng = engine_for(engine or engine_for_quant(q), prof, m, q)
            if per_row_fraction and max_batched_tokens:
                row_eng = row_eng.with_overrides(max_num_batched_tokens=max_batched_tokens)
            # the KV dtype the engine picks for a checkpoint of this quantization (TensorRT-LLM: FP8 for
            # FP8 checkpoints) unless --kv-dtype says otherwise
            row_kv = explicit_kv or (row_eng.kv_dtype if eng is not None else kv_dtype)
            if n_gpus == 1:
                r = memory.fit(prof, m, q, kv_dtype=row_kv, context=context, concurrency=concurrency,
                               memory_fraction=fraction, max_batched_tokens=max_batched_tokens,
                               activation_reserve_fraction=reserve_fraction,
                               engine=eng if per_row_fraction else None)
                row = r.to_dict()
                s = (predicted_speed(m, q, prof, context, row_eng) if speed and r.weight_bytes < r.memory_budget_bytes
                     else None)
            else:
                # several GPUs: the fewest the row's engine can split the model over that fit (sim.commands.fit_parallel)
                for split_tp, split_pp in split_options(row_eng.name, m, n_gpus):
                    split_eng = row_eng.with_overrides(tp=split_tp, pp=split_pp)
                    split_fraction = (memory.engine_memory_fraction(prof, m, q, split_eng) if per_row_fraction
                                      else memory_fraction)
                    r = fit_split(prof, m, q, tp=split_tp, pp=split_pp, kv_dtype=row_kv, context=context,
                                  concurrency=concurrency, memory_fraction=split_fraction,
                                  max_batched_tokens=max_batched_tokens, activation_reserve_fraction=reserve_fraction,
                                  engine=eng if per_row_fraction else None)
                    if r.fits:
                        break
                row = {**r.to_dict(), "tp": split_tp, "pp": split_pp, "split": split_label(split_tp, split_pp)}
                s = (predicted_speed(m, q, prof, context, split_eng)
                     if speed and not r.reason.startswith(memory.WEIGHTS_EXCEED)
                     and r.weight_bytes / (split_tp * split_pp) < r.memory_budget_bytes else None)
            if s is not None:
                row.update(s)
            rows.append(row)
    budget = memory.memory_budget_bytes(prof, memory_fraction)
    tokens = memory.default_max_batched_tokens(prof) if max_batched_tokens is None else max_batched_tokens
    # the expected error of the tok/s columns, per engine that priced a row (sim.catalog.accuracy)
    bands = {}
    if speed:
        from sim.catalog.accuracy import expected_error
        from sim.catalog.engine_config import load_engine

        for name in dict.fromkeys(r["engine"] for r in rows if "engine" in r):
            bands[name] = expected_error(prof, eng if eng is not None and eng.name == name
                                         else load_engine(name).for_hardware(prof))
    if as_json:
        typer.echo(json.dumps({
            "hw": prof.name, "detected": detected, "engine": eng.name if eng else None, "memory_bytes": prof.memory_bytes,
            "memory_budget_bytes": budget,
            "max_batched_tokens": tokens, "context": context, "concurrency": concurrency, "gpus": n_gpus,
            "kv_dtype": kv_dtype, "rows": rows, "expected_error": bands,
        }, indent=2))
        return
    has_speed = any("decode_tok_s" in r for r in rows)
    if detected:
        _console().print(detected, markup=False, highlight=False, soft_wrap=True)
    title = (f"{prof.display_name or prof.name}: {prof.memory_bytes / GB:.1f} GB x "
             f"{budget / prof.memory_bytes:.2f} = {budget / GB:.1f} GB budget; {concurrency} x {context:,} tokens, "
             f"KV {kv_dtype}; activation reserve for {tokens:,} batched tokens"
             + (f"; engine {eng.name}" if eng else "") + (f"; up to {n_gpus} GPUs per model" if n_gpus > 1 else ""))
    table = Table(title=title)
    cols = ["model", "quant", "weights GB", "act. GB", "KV GB/1k tok"] + (["GPUs"] if n_gpus > 1 else []) + [
        "fits", f"max ctx @{concurrency}", f"max seqs @{context:,}"]
    if has_speed:
        cols += ["decode tok/s", "prefill tok/s"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("model", "quant", "fits") else "right", no_wrap=True)
    for r in rows:
        cells = [
            r["model"], r["quant"], _gb(r["weight_bytes"]), _gb(r["activation_reserve_bytes"]),
            f"{r['kv_bytes_per_1k_tokens'] / GB:.3f}",
            *([r["split"]] if n_gpus > 1 else []),
            "yes" if r["fits"] else "no",
            f"{r['max_context']:,}" if r["max_context"] else "-",
            f"{r['max_sequences']:,}" if r["max_sequences"] else "-",
        ]
        if has_speed:
            cells += [f"{r['decode_tok_s']:,.1f}" if "decode_tok_s" in r else "-",
                      f"{r['prefill_tok_s']:,.0f}" if "prefill_tok_s" in r else "-"]
        table.add_row(*cells, style=None if r["fits"] else "dim")
    con = _console()
    con.print(table)
    if n_gpus > 1:
        con.print(f"GPUs: the fewest of the {n_gpus} that fit each row: 'tp T' = tensor parallel over T (vLLM, "
                  "SGLang, TensorRT-LLM; T divides the attention heads), 'layers xN' = llama.cpp's layer split over "
                  "all N; 'act. GB' and the budget are per GPU, 'weights GB' the whole model's.")
    sliding = [m.name for m in models if m.n_sliding_layers]
    if sliding:
        con.print(f"KV GB/1k tok counts every layer; the sliding-window layers of {', '.join(sliding)} hold at most "
                  "their window, which 'fits', 'max ctx' and 'max seqs' account for.")
    hybrid = [f"{m.name} ({m.state_bytes_per_sequence() / 1e6:.0f} MB)" for m in models if m.linear_attention]
    if hybrid:
        con.print(f"Recurrent-state layers hold a fixed state per sequence, whatever its context: {', '.join(hybrid)}; "
                  "'fits', 'max ctx' and 'max seqs' count it.")
    if has_speed:
        con.print("tok/s: single-stream decode at the context and prefill of one context-long prompt, from "
                  + (f"sim.cost with engine {eng.name}." if eng else
                     "sim.cost (llama.cpp for GGUF formats, vLLM otherwise)."))
        from sim.catalog.accuracy import describe

        for name, err in bands.items():
            con.print(f"{name}: {describe(err)}", markup=False, highlight=False, soft_wrap=True)
