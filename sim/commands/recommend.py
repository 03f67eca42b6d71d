"""`infersim recommend`: which model x quantization x runtime to run on this machine for a stated need.

Candidates are every catalog model (or `--model`) under the runtimes that serve it on the device:
vLLM for 16- and 8-bit checkpoints on GPUs (8-bit where the device has an fp8 rate), llama.cpp and
Ollama for GGUF quantizations everywhere, MLX on Apple silicon. Each is priced by the same code as
`fit` and `run`: memory with the runtime's preset (`sim.cost.memory.fit` at context x users), the
per-user decode rate of `users` sequences decoding together at the context (`CostModel.step_time`),
and the TTFT of one `--prompt-tokens` prompt on an idle server (`prefill_tok_s`).

Candidates that fit and meet the floors (`--min-tok-s`, `--max-ttft`) are ranked by total parameters
(a size proxy, not a quality score), then weight precision in tiers (16, 8, 6, 4
bits: `precision_tier`), then decode speed; one
row per model. For the top choices the exact command to start the runtime is printed, and the
`infersim calibrate --endpoint ...` command that measures it once it runs.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Optional

import typer
import yaml

from sim.catalog.hardware import HardwareProfile

_RUNTIMES_FILE = Path(__file__).resolve().parents[1] / "catalog" / "data" / "runtimes.yaml"
# default port each runtime's server listens on (its documentation): what `calibrate --endpoint` measures
PORTS = {"vllm": 8000, "sglang": 30000, "llama.cpp": 8080, "ollama": 11434, "mlx": 8080}
GGUF_QUANTS = ("q8_0", "q4_k_m")


@lru_cache(maxsize=1)
def _ollama_tags() -> dict:
    return (yaml.safe_load(_RUNTIMES_FILE.read_text()) or {}).get("ollama", {})


def runtime_options(hw: HardwareProfile, model, n_gpus: int = 1) -> list[tuple[str, str]]:
    """(engine preset, quantization) pairs that serve `model` on this device: a checkpoint released in
    MXFP4 (gpt-oss) keeps it in its GGUF, the others take Q8_0 and Q4_K_M; vLLM serves an FP8 or MXFP4
    release as released, a 16-bit one in bf16 or FP8."""
    out: list[tuple[str, str]] = []
    if hw.kind == "gpu" or (hw.kind == "unified-soc" and hw.vendor == "NVIDIA"):
        native = model.default_quant
        if native in ("fp8", "mxfp4"):
            # released in FP8 (DeepSeek-V3/R1, Kimi K2, MiniMax-M2) or MXFP4 (gpt-oss): `vllm serve REPO`
            # loads the checkpoint as released (vLLM reads the format from its config.json), so that is
            # the one vLLM candidate; pricing it as bf16 would size weights the command never loads
            if native == "mxfp4" or "fp8" in hw.peak_tflops:
                out.append(("vllm", native))
        else:
            out += [("vllm", "bf16")] + ([("vllm", "fp8")] if "fp8" in hw.peak_tflops else [])
        if n_gpus > 1 and hw.kind == "gpu":
            # on a multi-GPU server SGLang is the other tensor-parallel runtime (NVIDIA and AMD builds), with
            # the same checkpoint rule as vLLM (`--quantization fp8` quantizes a 16-bit one on the fly)
            out += [("sglang", q) for e, q in list(out) if e == "vllm"]
    if hw.vendor == "Apple":
        out.append(("mlx", "mlx-4bit"))
    gguf = ("mxfp4",) if model.default_quant == "mxfp4" else GGUF_QUANTS
    out += [(eng, q) for q in gguf for eng in ("llama.cpp", "ollama")]
    return out


def hf_repo(model) -> str | None:
    """The Hugging Face repository named by the model's first config.json source, if any."""
    for s in model.sources:
        m = re.match(r"https://huggingface\.co/([^/]+/[^/]+)/", s)
        if m:
            return m.group(1)
    return None


def run_command(model, quant: str, engine: str, context: int, users: int, tp: int = 1, pp: int = 1,
                n_gpus: int = 1) -> str | None:
    """The command that starts `engine` serving `model` in `quant` for `users` x `context` tokens, or None
    when there is no way to name the weights (an Ollama model without a library tag, a vLLM format the
    release is not in). `tp`: tensor-parallel size (vLLM, SGLang); `pp` > 1: llama.cpp's layer split over
    the machine's `n_gpus` GPUs (sim.commands.fit_parallel)."""
    repo = hf_repo(model) or model.name
    if engine in ("vllm", "sglang"):
        native = model.default_quant
        if quant == native or (quant == "bf16" and native == "fp16"):
            q = ""  # the checkpoint as released
        elif quant == "fp8" and native in ("bf16", "fp16"):
            q = " --quantization fp8"  # on-the-fly FP8 weight quantization of a 16-bit checkpoint (both engines)
        else:
            return None  # e.g. bf16 of an FP8 or MXFP4 release: `vllm serve REPO` would load the release instead
        if engine == "sglang":
            return (f"python -m sglang.launch_server --model-path {repo} --context-length {context} "
                    f"--max-running-requests {users}{q}" + (f" --tp {tp}" if tp > 1 else ""))
        return (f"vllm serve {repo} --max-model-len {context} --max-num-seqs {users}{q}"
                + (f" --tensor-parallel-size {tp}" if tp > 1 else ""))
    if engine == "llama.cpp":
        # llama-server splits -c over its -np slots: each slot gets context tokens; with several GPUs visible
        # it splits the layers over all of them unless told --split-mode none
        split = " --split-mode layer" if pp > 1 else (" --split-mode none" if n_gpus > 1 else "")
        return (f"llama-server -m {model.name}-{quant.upper()}.gguf -c {context * users} -np {users} -ngl 999"
                f"{split}   # the {quant.upper()} GGUF of {repo}")
    if engine == "ollama":
        entry = _ollama_tags().get(model.name)
        if entry is None or entry["quant"] != quant:
            return None
        return (f"OLLAMA_NUM_PARALLEL={users} OLLAMA_CONTEXT_LENGTH={context} ollama serve & "
                f"ollama run {entry['tag']}")
    if engine == "mlx":
        name = repo.split("/")[-1]
        return f"mlx_lm.server --model mlx-community/{name}-4bit   # the mlx-community 4-bit conversion of {repo}"
    return None


def calibrate_command(model, quant: str, engine: str, hw: HardwareProfile) -> str:
    """`infersim calibrate --endpoint` against the runtime's default port; `--peaks-from` names the shipped
    profile whose datasheet peaks the fit divides by (a profile built by detection has no file to name)."""
    from sim.catalog.hardware import available_profiles

    peaks = f" --peaks-from {hw.name}" if hw.name in available_profiles() else ""
    return (f"infersim calibrate --endpoint http://127.0.0.1:{PORTS[engine]} --model {model.name} --quant {quant} "
            f"--engine {engine}{peaks} --name {hw.name}-{engine}")


def recommend_rows(hw: HardwareProfile, models, *, context: int, users: int, prompt_tokens: int,
                   min_tok_s: float | None, max_ttft_s: float | None, n_gpus: int = 1) -> list[dict]:
    """Every candidate with its memory fit, per-user decode tok/s, TTFT and whether it meets the need.
    With `n_gpus` > 1 each candidate takes the fewest GPUs (`sim.commands.fit_parallel.split_options`) that
    fit and meet the need; when none meets it, the fewest that fit (the row then says it does not meet it)."""
    from sim.catalog.deployment import engine_for
    from sim.catalog.quant import get_quant
    from sim.cost import memory
    from sim.cost.roofline import CostModel
    from sim.commands.fit_parallel import fit_split, split_options

    rows = []
    for m in models:
        for engine, quant in runtime_options(hw, m, n_gpus):
            # the preset on this device and checkpoint as `run` resolves it (sim.catalog.deployment.engine_for:
            # device rules, the KV dtype the engine picks for the checkpoint, weight-format rules)
            base_eng = engine_for(engine, hw, m, quant)
            if engine in ("ollama", "vllm", "sglang") and run_command(m, quant, engine, context, users) is None:
                continue
            q = get_quant(quant)
            if m.max_context < context:
                continue
            # on unified memory the OS and the GPU's share of the pool bound every runtime (the profile's
            # usable_memory_fraction), whatever share the runtime would take of a discrete GPU
            fraction = (min(base_eng.memory_fraction, hw.usable_memory_fraction) if hw.kind == "unified-soc"
                        else base_eng.memory_fraction)
            row = None
            for tp, pp in split_options(engine, m, n_gpus):
                eng = base_eng.with_overrides(tp=tp, pp=pp) if tp * pp > 1 else base_eng
                r = fit_split(hw, m, q, tp=tp, pp=pp, kv_dtype=eng.kv_dtype, context=context, concurrency=users,
                              memory_fraction=fraction, max_batched_tokens=eng.forward_tokens,
                              activation_reserve_fraction=eng.activation_reserve_fraction)
                cand = {"model": m.name, "quant": quant, "engine": engine, "fits": bool(r.fits),
                        "params_b": m.n_params_total / 1e9, "bits_per_weight": q.bits_per_weight,
                        "weight_gb": r.weight_bytes / 1e9, "tp": tp, "pp": pp, "gpus": tp * pp}
                if r.fits:
                    cm = CostModel.from_names(m, q, hw, eng)
                    step = cm.step_time((), (), [context] * users)
                    cand["decode_tok_s_per_user"] = 1.0 / step
                    cand["ttft_s"] = prompt_tokens / cm.prefill_tok_s(prompt_tokens)
                    cand["meets"] = ((min_tok_s is None or cand["decode_tok_s_per_user"] >= min_tok_s)
                                     and (max_ttft_s is None or cand["ttft_s"] <= max_ttft_s))
                else:
                    cand["meets"] = False
                if row is None or (cand["fits"] and not row["fits"]):
                    row = cand  # the first split tried, else the fewest GPUs that fit
                if cand["meets"]:
                    row = cand
                    break
            rows.append(row)
    return rows


def precision_tier(bits_per_weight: float) -> int:
    """16, 8, 6 or 4: the weight precision a format keeps, in the tiers users compare (Q8_0's 8.5 bits and
    FP8's 8 are one tier; the ranking then goes by speed)."""
    return next(t for t, floor in ((16, 15.0), (8, 7.5), (6, 5.5), (4, 0.0)) if bits_per_weight >= floor)


def rank(rows: list[dict]) -> list[dict]:
    """The candidates that meet the need, best first, one per model (module docstring)."""
    ok = sorted((r for r in rows if r["meets"]),
                key=lambda r: (-r["params_b"], -precision_tier(r["bits_per_weight"]), -r["decode_tok_s_per_user"]))
    seen, out = set(), []
    for r in ok:
        if r["model"] not in seen:
            seen.add(r["model"])
            out.append(r)
    return out


def recommend(
    hw: Optional[str] = typer.Option(None, "--hw", help="hardware profile name or YAML path (default: detect this machine)"),
    context: int = typer.Option(8192, "--context", min=1, help="tokens per conversation (prompt + output)"),
    users: int = typer.Option(1, "--users", min=1, help="conversations served at once"),
    min_tok_s: Optional[float] = typer.Option(None, "--min-tok-s", min=0.0, help="decode tokens/s each user must get"),
    max_ttft: Optional[float] = typer.Option(None, "--max-ttft", min=0.0, help="seconds to the first token, at most"),
    prompt_tokens: Optional[int] = typer.Option(None, "--prompt-tokens", min=1,
                                                help="prompt length of the TTFT floor (default: half the context)"),
    model: Optional[str] = typer.Option(None, "--model", help="comma-separated catalog names (default: the catalog)"),
    top: int = typer.Option(3, "--top", min=1, help="how many choices to print with their commands"),
    tp: Optional[int] = typer.Option(None, "--tp", min=1, help="GPUs of the machine a model may be split over "
                                     "(vLLM / SGLang tensor parallel, llama.cpp layer split); each choice takes the "
                                     "fewest that meet the need (default: the GPUs detected; 1 with --hw)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
) -> None:
    """What to run on this machine: model x quantization x runtime for a stated need, with the commands."""
    from sim.catalog.hardware import load_profile
    from sim.catalog.lookup import get_model
    from sim.catalog.models import load_catalog

    n_gpus = 1
    if hw is None:
        from sim.catalog.detect import detect_profile_and_gpus

        prof, how, n_gpus = detect_profile_and_gpus()
    else:
        prof, how = load_profile(hw), f"profile {hw} (--hw)"
    n_gpus = tp or n_gpus
    if n_gpus > 1 and prof.kind != "gpu":
        from sim.errors import ConfigError

        raise ConfigError(f"{n_gpus} devices: splitting a model over several is priced for discrete GPUs only "
                          f"({prof.name} is {prof.kind})", field="--tp")
    models = [get_model(n.strip()) for n in model.split(",") if n.strip()] if model else list(load_catalog().values())
    prompt = prompt_tokens or max(1, context // 2)
    rows = recommend_rows(prof, models, context=context, users=users, prompt_tokens=prompt,
                          min_tok_s=min_tok_s, max_ttft_s=max_ttft, n_gpus=n_gpus)
    best = rank(rows)[:top]
    for r in best:
        m = get_model(r["model"])
        r["command"] = run_command(m, r["quant"], r["engine"], context, users, r["tp"], r["pp"], n_gpus)
        r["measure"] = calibrate_command(m, r["quant"], r["engine"], prof)
    need = (f"{users} user(s) x {context:,} tokens" + (f" on up to {n_gpus} GPUs" if n_gpus > 1 else "")
            + (f", >= {min_tok_s:g} tok/s each" if min_tok_s else "")
            + (f", TTFT <= {max_ttft:g} s for a {prompt:,}-token prompt" if max_ttft else ""))
    if as_json:
        typer.echo(json.dumps({"hw": prof.name, "detected": how, "need": need, "choices": best,
                               "candidates": len(rows), "fitting": sum(r["fits"] for r in rows)}, indent=2))
        return
    typer.echo(how)
    typer.echo(f"need: {need}; {sum(r['fits'] for r in rows)} of {len(rows)} candidates fit, "
               f"{sum(r['meets'] for r in rows)} meet the need")
    if not best:
        typer.echo("nothing meets it: lower --context or --users, relax the floors, or try --hw with a larger machine"
                   + ("" if n_gpus > 1 else " (or --tp N on a machine with N GPUs)"))
        return
    typer.echo("ranked by parameters (a size proxy, not a quality score), then weight precision, then speed:")
    for i, r in enumerate(best, 1):
        on = (f" x{r['gpus']} GPUs (tp {r['tp']})" if r["tp"] > 1 else
              f" x{r['gpus']} GPUs (layer split)" if r["pp"] > 1 else "")
        typer.echo(f"{i}. {r['model']} {r['quant']} on {r['engine']}{on}: {r['weight_gb']:.1f} GB of weights, "
                   f"{r['decode_tok_s_per_user']:,.1f} tok/s per user, TTFT {r['ttft_s']:.2f} s (predicted)")
        typer.echo(f"   run:     {r['command']}")
        typer.echo(f"   measure: {r['measure']}")
