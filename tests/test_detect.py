"""Machine detection (sim.catalog.detect) on recorded outputs of nvidia-smi, rocm-smi, sysctl,
system_profiler, /proc/meminfo and lscpu (tests/data/detect), and `fit` / `recommend` without --hw."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.catalog import detect
from sim.catalog.detect import Detected, detect_machine, match_profile
from sim.cli import app
from sim.commands.recommend import rank, recommend_rows, run_command
from sim.catalog.hardware import load_profile
from sim.catalog.models import load_catalog

DATA = Path(__file__).parent / "data" / "detect"
runner = CliRunner()
GiB = 2**30


def machine(files: dict[str, str], platform: str = "linux") -> Detected:
    """detect_machine with each tool answering from a recorded file (absent tools answer None)."""
    def run(cmd):
        name = files.get(cmd[0])
        return (DATA / name).read_text() if name else None

    def read(path):
        name = files.get(path)
        return (DATA / name).read_text() if name else None

    return detect_machine(run=run, read=read, platform=platform)


def test_an_rtx_4090_is_matched_to_its_shipped_profile():
    d = machine({"nvidia-smi": "nvidia-smi-rtx4090.csv", "lscpu": "lscpu-xeon.txt", "/proc/meminfo": "meminfo-xeon.txt"})
    assert (d.source, d.device, d.count) == ("nvidia-smi", "NVIDIA GeForce RTX 4090", 1)
    assert d.device_memory_bytes == 24564 * 2**20
    p, how = match_profile(d)
    assert p.name == "rtx-4090" and "shipped profile rtx-4090" in how and "nvidia-smi" in how


def test_an_8_gpu_h100_node_is_one_h100_sxm_profile_and_says_how_many():
    p, how = match_profile(machine({"nvidia-smi": "nvidia-smi-8xh100.csv"}))
    assert p.name == "h100-sxm" and "x8" in how and "8 found" in how


def test_a_dgx_spark_reports_no_gpu_memory_and_keeps_its_profile():
    d = machine({"nvidia-smi": "nvidia-smi-gb10.csv"})
    assert d.device == "NVIDIA GB10" and d.device_memory_bytes is None
    assert match_profile(d)[0].name == "dgx-spark"


def test_mi300x_cards_are_read_from_rocm_smi():
    d = machine({"rocm-smi": "rocm-smi-mi300x.json"})
    assert (d.source, d.count, d.device_memory_bytes) == ("rocm-smi", 2, 206141652992)
    assert match_profile(d)[0].name == "mi300x"


def test_a_strix_halo_box_is_named_by_its_cpu_and_counts_the_gpu_carve_out():
    d = machine({"rocm-smi": "rocm-smi-strix-halo.json", "lscpu": "lscpu-strix-halo.txt",
                 "/proc/meminfo": "meminfo-strix-halo.txt"})
    assert d.source == "lscpu" and "RYZEN AI MAX+ 395" in d.device
    p, how = match_profile(d)
    # 30.3 GiB MemTotal + 96 GiB carve-out -> the 128 GiB machine: the shipped profile as it is
    assert p.name == "ryzen-ai-max-395" and p.memory_bytes == 128 * GiB


def test_a_64_gb_m4_max_keeps_the_datasheet_figures_with_the_measured_memory():
    d = machine({"sysctl": "sysctl-m4max-64g.txt", "system_profiler": "system-profiler-m4max.json"}, platform="darwin")
    assert (d.device, d.gpu_cores, d.device_memory_bytes) == ("Apple M4 Max", 40, 64 * GiB)
    p, how = match_profile(d)
    shipped = load_profile("apple-m4-max")
    assert p.memory_bytes == 64 * GiB and p.memory_bandwidth_gb_per_s == shipped.memory_bandwidth_gb_per_s
    assert p.engine_efficiency == shipped.engine_efficiency
    assert "measured 64 GiB" in how and "built" in how


def test_a_machine_without_an_accelerator_gets_a_cpu_profile_built_from_its_measurements():
    d = machine({"lscpu": "lscpu-xeon.txt", "/proc/meminfo": "meminfo-xeon.txt"})
    assert (d.cpu_cores, d.device) == (2, "")
    p, how = match_profile(d)
    generic = load_profile("cpu-x86-generic")
    assert p.kind == "cpu" and p.memory_bytes == pytest.approx(8005256 * 1024, rel=1e-3)  # GiB to 2 decimals
    assert p.peak_tflops["fp32"] == pytest.approx(generic.peak_tflops["fp32"] * 2 / 8)  # 2 of the generic 8 cores
    assert "built from cpu-x86-generic" in how


def test_the_build_vms_recorded_lscpu_and_meminfo_parse():
    name, cores = detect.parse_lscpu((DATA / "lscpu-infersim-build-vm.txt").read_text())
    assert name and cores >= 1
    assert detect.parse_meminfo((DATA / "meminfo-infersim-build-vm.txt").read_text()) > GiB


def test_fit_without_hw_detects_this_machine_and_says_what_it_did():
    # its speed (issue 39: < 2 s) is a benchmark's figure, not a timed test: benchmarks/simspeed.py --only fit
    result = runner.invoke(app, ["fit", "--model", "llama-3.1-8b", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["detected"] and ("detected" in out["detected"] or "built" in out["detected"])


def test_recommend_ranks_what_meets_the_need_and_prints_runnable_commands():
    hw = load_profile("rtx-4090")
    cat = load_catalog()
    models = [cat[n] for n in ("llama-3.1-8b", "qwen3-30b-a3b", "llama-3.1-70b", "gemma-3-27b")]
    rows = recommend_rows(hw, models, context=8192, users=4, prompt_tokens=4096, min_tok_s=20, max_ttft_s=None)
    best = rank(rows)
    assert best and all(r["meets"] and r["decode_tok_s_per_user"] >= 20 for r in best)
    assert "llama-3.1-70b" not in {r["model"] for r in best}  # 70B does not fit in 24 GB with 4 x 8k tokens
    assert [r["params_b"] for r in best] == sorted((r["params_b"] for r in best), reverse=True)
    assert len({r["model"] for r in best}) == len(best)
    m = cat["qwen3-30b-a3b"]
    assert run_command(m, "q4_k_m", "ollama", 8192, 4) == \
        "OLLAMA_NUM_PARALLEL=4 OLLAMA_CONTEXT_LENGTH=8192 ollama serve & ollama run qwen3:30b-a3b"
    assert run_command(m, "q4_k_m", "llama.cpp", 8192, 4).startswith("llama-server -m qwen3-30b-a3b-Q4_K_M.gguf -c 32768 -np 4")
    assert run_command(m, "fp8", "vllm", 8192, 4) == \
        "vllm serve Qwen/Qwen3-30B-A3B --max-model-len 8192 --max-num-seqs 4 --quantization fp8"
    assert run_command(m, "mlx-4bit", "mlx", 8192, 1).startswith("mlx_lm.server --model mlx-community/Qwen3-30B-A3B-4bit")
    assert run_command(cat["qwen3-next-80b-a3b"], "q4_k_m", "ollama", 8192, 1) is None  # no library tag: no guess


def test_recommend_cli_prints_the_commands_and_the_offer_to_measure():
    result = runner.invoke(app, ["recommend", "--hw", "apple-m4-max", "--context", "16384", "--users", "2",
                                 "--min-tok-s", "15", "--model", "llama-3.1-8b,qwen3-30b-a3b,llama-3.3-70b"])
    assert result.exit_code == 0, result.output
    assert "run:" in result.output and "measure: infersim calibrate --endpoint http://127.0.0.1:" in result.output
    assert "--peaks-from apple-m4-max" in result.output
    impossible = runner.invoke(app, ["recommend", "--hw", "rtx-5070-ti", "--model", "llama-3.3-70b", "--users", "64"])
    assert impossible.exit_code == 0 and "nothing meets it" in impossible.output


def test_recommend_prices_vllm_in_the_format_its_command_loads():
    """`vllm serve REPO` loads an FP8 (DeepSeek-R1) or MXFP4 (gpt-oss) release as released: recommend
    prices that format alone, never a bf16 copy the printed command would not load (issue 39 audit)."""
    from sim.commands.recommend import runtime_options
    hw, cat = load_profile("b200"), load_catalog()
    oss, r1, llama = cat["gpt-oss-120b"], cat["deepseek-r1"], cat["llama-3.1-8b"]
    assert [q for e, q in runtime_options(hw, oss) if e == "vllm"] == ["mxfp4"]
    assert [q for e, q in runtime_options(hw, r1) if e == "vllm"] == ["fp8"]
    assert [q for e, q in runtime_options(hw, llama) if e == "vllm"] == ["bf16", "fp8"]
    assert run_command(oss, "mxfp4", "vllm", 8192, 4) == \
        "vllm serve openai/gpt-oss-120b --max-model-len 8192 --max-num-seqs 4"
    assert run_command(r1, "fp8", "vllm", 8192, 4) == \
        "vllm serve deepseek-ai/DeepSeek-R1 --max-model-len 8192 --max-num-seqs 4"
    assert run_command(r1, "bf16", "vllm", 8192, 4) is None
    assert run_command(oss, "fp8", "vllm", 8192, 4) is None
    rows = recommend_rows(hw, [oss], context=8192, users=4, prompt_tokens=4096, min_tok_s=None, max_ttft_s=None)
    assert {(r["engine"], r["quant"]) for r in rows if r["engine"] == "vllm"} == {("vllm", "mxfp4")}


def test_a_gb300_is_matched_to_its_own_profile_not_the_b300s():
    from sim.catalog.detect import NAME_TO_PROFILE
    import re

    def match(name):
        return next(prof for pat, prof in NAME_TO_PROFILE if re.search(pat, name, re.I))
    assert match("NVIDIA GB300") == "gb300" and match("NVIDIA B300 SXM6 AC") == "b300"
    assert match("NVIDIA GB200") == "gb200"


# ---- several GPUs: fit / recommend split a model over them (sim.commands.fit_parallel) ------------------------

def test_split_options_follow_what_each_runtime_can_run():
    from sim.commands.fit_parallel import split_options
    cat = load_catalog()
    r1 = cat["deepseek-r1"]  # 128 attention heads
    assert split_options("vllm", r1, 8) == [(1, 1), (2, 1), (4, 1), (8, 1)]
    assert split_options("sglang", r1, 6) == [(1, 1), (2, 1), (4, 1)]  # powers of two up to the GPUs
    assert split_options("vllm", r1.model_copy(update={"n_heads": 12}), 8) == [(1, 1), (2, 1), (4, 1)]
    assert split_options("llama.cpp", r1, 8) == [(1, 1), (1, 8)]  # one GPU or its layer split over all
    assert split_options("mlx", r1, 8) == split_options("vllm", r1, 1) == [(1, 1)]


def test_a_tensor_parallel_fit_is_the_binding_devices_budget_by_hand():
    from sim.commands.fit_parallel import fit_split
    from sim.cost import memory
    hw, m = load_profile("h100-sxm"), load_catalog()["llama-3.1-70b"]
    one = fit_split(hw, m, "bf16", context=8192)
    assert one == memory.fit(hw, m, "bf16", context=8192) and not one.fits  # 141 GB of bf16 on one 80 GB GPU
    r = fit_split(hw, m, "bf16", tp=4, context=8192, concurrency=4)
    budget = memory.memory_budget_bytes(hw)
    reserve = memory.activation_peak_bytes(m, memory.default_max_batched_tokens(hw), tp=4)
    # every device holds weights / 4 and, with 8 KV heads over 4 ranks, a quarter of each token's KV:
    # the KV bytes of the whole model the split holds = 4 x (budget - weights / 4 - reserve)
    assert r.kv_budget_bytes == pytest.approx(4 * (budget - m.weight_bytes("bf16") / 4 - reserve))
    assert r.fits and r.weight_bytes == m.weight_bytes("bf16")
    assert r.max_sequences == int(r.kv_budget_bytes // m.kv_bytes_per_sequence(8192, "fp16"))


def test_fit_prices_deepseek_r1_over_eight_mi355x_with_the_fewest_gpus_that_hold_it():
    alone = runner.invoke(app, ["fit", "--hw", "mi355x", "--model", "deepseek-r1", "--quant", "fp8,q4_k_m", "--json"])
    assert alone.exit_code == 0, alone.output
    assert [r["fits"] for r in json.loads(alone.stdout)["rows"]] == [False, False]  # 673 GB on one 288 GB GPU
    many = runner.invoke(app, ["fit", "--hw", "mi355x", "--model", "deepseek-r1", "--quant", "fp8,q4_k_m", "--tp", "8",
                               "--json"])
    out = json.loads(many.stdout)
    fp8, q4 = out["rows"]
    assert out["gpus"] == 8 and fp8["fits"] and q4["fits"]
    assert (fp8["tp"], fp8["pp"]) == (4, 1)  # 673 GB over 2 x 259 GB budgets does not fit, over 4 it does
    assert (q4["tp"], q4["pp"]) == (1, 8)  # llama.cpp: its layer split over all 8
    assert fp8["decode_tok_s"] > 0
    table = runner.invoke(app, ["fit", "--hw", "mi355x", "--model", "deepseek-r1", "--quant", "fp8", "--tp", "8"])
    assert "tp 4" in table.output and "GPUs" in table.output


def test_fit_and_recommend_split_over_the_gpus_detection_found(monkeypatch):
    node = machine({"nvidia-smi": "nvidia-smi-8xh100.csv"})
    monkeypatch.setattr(detect, "detect_machine", lambda **kw: node)
    fit = runner.invoke(app, ["fit", "--model", "llama-3.1-70b", "--quant", "bf16", "--json"])
    assert fit.exit_code == 0, fit.output
    out = json.loads(fit.stdout)
    assert out["gpus"] == 8 and "8 found" in out["detected"]
    assert out["rows"][0]["fits"] and out["rows"][0]["tp"] in (2, 4)
    rec = runner.invoke(app, ["recommend", "--model", "llama-3.1-70b", "--users", "8"])
    assert rec.exit_code == 0, rec.output
    assert "--tensor-parallel-size" in rec.output or "--tp " in rec.output or "--split-mode" in rec.output


def test_recommend_on_eight_gpus_prints_the_split_in_each_command():
    from sim.commands.recommend import runtime_options
    hw, cat = load_profile("mi355x"), load_catalog()
    r1 = cat["deepseek-r1"]
    assert run_command(r1, "fp8", "vllm", 8192, 4, tp=8) == \
        "vllm serve deepseek-ai/DeepSeek-R1 --max-model-len 8192 --max-num-seqs 4 --tensor-parallel-size 8"
    assert run_command(r1, "fp8", "sglang", 8192, 4, tp=8) == ("python -m sglang.launch_server --model-path "
                                                              "deepseek-ai/DeepSeek-R1 --context-length 8192 "
                                                              "--max-running-requests 4 --tp 8")
    assert "-ngl 999 --split-mode layer" in run_command(r1, "q4_k_m", "llama.cpp", 8192, 4, pp=8, n_gpus=8)
    assert "--split-mode none" in run_command(r1, "q4_k_m", "llama.cpp", 8192, 4, n_gpus=8)
    assert "--split-mode" not in run_command(r1, "q4_k_m", "llama.cpp", 8192, 4)
    assert ("sglang", "fp8") in runtime_options(hw, r1, 8) and ("sglang", "fp8") not in runtime_options(hw, r1)
    one = recommend_rows(hw, [r1], context=8192, users=4, prompt_tokens=4096, min_tok_s=None, max_ttft_s=None)
    assert not any(r["fits"] for r in one)  # the audit's "no" on one MI355X
    rows = recommend_rows(hw, [r1], context=8192, users=4, prompt_tokens=4096, min_tok_s=None, max_ttft_s=None,
                          n_gpus=8)
    vllm = next(r for r in rows if r["engine"] == "vllm")
    assert vllm["fits"] and vllm["meets"] and (vllm["tp"], vllm["gpus"]) == (4, 4)
    # a floor the fewest GPUs miss moves the choice to more GPUs when they meet it, never to fewer
    floor = vllm["decode_tok_s_per_user"] * 1.01
    faster = recommend_rows(hw, [r1], context=8192, users=4, prompt_tokens=4096, min_tok_s=floor, max_ttft_s=None,
                            n_gpus=8)
    v2 = next(r for r in faster if r["engine"] == "vllm")
    assert v2["tp"] >= 4 and (not v2["meets"] or v2["decode_tok_s_per_user"] >= floor)
    cli = runner.invoke(app, ["recommend", "--hw", "mi355x", "--tp", "8", "--model", "deepseek-r1"])
    assert cli.exit_code == 0 and "on up to 8 GPUs" in cli.output, cli.output
    assert re.search(r"x[248] GPUs \((tp [248]|layer split)\)", cli.output)
    assert re.search(r"run: .*(--tensor-parallel-size [248]|--tp [248]|--split-mode layer)", cli.output)
    for cmd in ("recommend", "fit"):
        bad = runner.invoke(app, [cmd, "--hw", "apple-m4-max", "--tp", "2"])
        assert bad.exit_code == 2 and "--tp" in bad.output and "Traceback" not in bad.output


def test_recommend_prices_the_engine_run_resolves_for_the_checkpoint():
    """A preset rule naming the weight format (SGLang: block-scaled FP8 on AMD CDNA3, sim.catalog.weight_format)
    applies in recommend as in `run`: DeepSeek-R1's FP8 release on MI300X under SGLang is priced with its 400 us
    floor, slower than the same rows without the rule; per-channel FP8 Llama is untouched."""
    from sim.api import RunSpec, resolve_engine
    from sim.cost.roofline import CostModel
    from sim.catalog.quant import get_quant
    from sim.catalog.engine_config import load_engine

    hw, cat = load_profile("mi300x"), load_catalog()
    rows = recommend_rows(hw, [cat["deepseek-r1"], cat["llama-3.1-70b"]], context=8192, users=4, prompt_tokens=4096,
                          min_tok_s=None, max_ttft_s=None, n_gpus=8)
    for model in ("deepseek-r1", "llama-3.1-70b"):
        r = next(x for x in rows if x["model"] == model and x["engine"] == "sglang" and x["quant"] == "fp8")
        m, q = cat[model], get_quant("fp8")
        ran = resolve_engine(RunSpec(trace="unused.jsonl", model=model, quant="fp8", engine="sglang", hw="mi300x"), hw)
        ran = ran.with_overrides(tp=r["tp"], pp=r["pp"])
        plain = load_engine("sglang").for_hardware(hw).with_overrides(tp=r["tp"], pp=r["pp"])
        speed = {name: 1.0 / CostModel.from_names(m, q, hw, e).step_time((), (), [8192] * 4)
                 for name, e in (("ran", ran), ("plain", plain))}
        assert r["decode_tok_s_per_user"] == pytest.approx(speed["ran"], rel=1e-9)
        assert (speed["ran"] < 0.8 * speed["plain"]) == (model == "deepseek-r1")
