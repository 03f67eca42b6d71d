"""Engine presets (sim/catalog/engines/*.yaml) and EngineConfig loading, overrides and device rules."""

from __future__ import annotations

import pytest

from sim.catalog.engine_config import EngineConfig, available_engines, load_engine
from sim.catalog.hardware import HardwareProfile
from sim.errors import ConfigError

PRESETS = ["vllm", "sglang", "tgi", "trtllm", "llama.cpp", "ollama", "mlx", "lmstudio", "hf"]
# Fields every preset must back with a citation (a source URL or a labelled engineering estimate).
CITED_FIELDS = [
    "scheduler", "kv_allocator", "max_num_seqs", "max_num_batched_tokens", "block_size", "memory_fraction",
    "context_size", "default_quant", "kv_dtype", "prefix_caching", "efficiency_scale",
    "iteration_overhead_ms", "per_sequence_overhead_ms",
]


def gpu(name: str, memory_gb: float, kind: str = "gpu") -> HardwareProfile:
    return HardwareProfile(
        name=name, kind=kind, memory_capacity_gb=memory_gb, memory_bandwidth_gb_per_s=1000, peak_tflops={"bf16": 100.0}
    )


def test_all_seven_presets_ship():
    assert set(PRESETS) <= set(available_engines())


@pytest.mark.parametrize("name", PRESETS)
def test_preset_loads_and_cites_a_versioned_source_for_every_default(name):
    engine = load_engine(name)
    assert engine.name == name and engine.version
    published = [s for s in engine.sources if s.url.startswith("https://")]
    assert published and all(s.version for s in published)
    covered = {f for s in engine.sources for f in s.fields}
    assert not set(CITED_FIELDS) - covered, f"{name}: uncited fields {set(CITED_FIELDS) - covered}"


def test_schedulers_and_allocators_follow_the_engines():
    kinds = {n: (load_engine(n).scheduler, load_engine(n).kv_allocator) for n in PRESETS}
    assert kinds["vllm"] == ("chunked", "paged")
    assert kinds["sglang"] == ("prefill_first", "paged")  # enable_mixed_chunk off (managers/scheduler.py)
    assert kinds["trtllm"] == ("inflight", "contiguous")  # in-flight batching, GUARANTEED_NO_EVICT
    assert kinds["llama.cpp"] == ("slots", "contiguous")
    assert kinds["ollama"] == ("slots", "contiguous")
    assert kinds["hf"] == ("static", "contiguous")
    assert load_engine("llama.cpp").default_quant == "q4_k_m" and load_engine("vllm").default_quant == "bf16"


def test_vllm_picks_larger_batch_defaults_on_70_gib_gpus_except_a100():
    vllm = load_engine("vllm")
    big = vllm.for_hardware(gpu("h100-sxm", 80))
    assert (big.max_num_seqs, big.max_num_batched_tokens) == (1024, 8192)
    small = vllm.for_hardware(gpu("rtx-4090", 24))
    assert (small.max_num_seqs, small.max_num_batched_tokens) == (256, 2048)
    a100 = vllm.for_hardware(gpu("a100-sxm-80gb", 80))
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)
    cpu = vllm.for_hardware(gpu("epyc", 512, kind="cpu"))
    assert (cpu.max_num_seqs, cpu.max_num_batched_tokens) == (128, 2048)


def test_sglang_memory_fraction_leaves_its_reserved_memory_free():
    h100 = gpu("h100-sxm", 80)  # 80e9 B = 74.5 GiB -> 60..160 GiB bracket, 13.125 GiB reserved
    cfg = load_engine("sglang").for_hardware(h100)
    assert cfg.max_num_batched_tokens == 8192
    assert cfg.memory_fraction == pytest.approx(1 - 13.125 / (80e9 / 2**30), abs=1e-3)


def test_ollama_context_grows_with_device_memory():
    ollama = load_engine("ollama")
    assert ollama.for_hardware(gpu("small", 16)).context_size == 4096
    assert ollama.for_hardware(gpu("mid", 32)).context_size == 32768
    assert ollama.for_hardware(gpu("big", 80)).context_size == 262144


def test_user_overrides_win_over_device_defaults():
    cfg = load_engine("vllm").for_hardware(gpu("h100-sxm", 80)).with_overrides(max_num_seqs=64)
    assert cfg.max_num_seqs == 64 and cfg.max_num_batched_tokens == 8192


def test_slot_context_depends_on_the_context_mode():
    llama = load_engine("llama.cpp").with_overrides(context_size=8192)
    assert llama.context_mode == "unified" and llama.slot_context_tokens == 8192 and llama.total_context_tokens == 8192
    split = llama.with_overrides(context_mode="split")
    assert split.slot_context_tokens == 2048 and split.total_context_tokens == 8192
    ollama = load_engine("ollama").with_overrides(max_num_seqs=4)
    assert ollama.slot_context_tokens == 4096 and ollama.total_context_tokens == 4 * 4096


def test_overrides_validate_values_and_names():
    vllm = load_engine("vllm")
    assert vllm.with_overrides(max_num_seqs=None) is vllm
    with pytest.raises(ConfigError) as bad_value:
        vllm.with_overrides(max_num_seqs=0)
    assert bad_value.value.field == "max_num_seqs"
    with pytest.raises(ConfigError) as unknown:
        vllm.with_overrides(max_seqs=4)
    assert unknown.value.field == "max_seqs" and "unknown field" in unknown.value.problem
    with pytest.raises(ConfigError):
        vllm.with_overrides(scheduler="round-robin")
    with pytest.raises(ConfigError):
        vllm.with_overrides(memory_fraction=1.5)
    with pytest.raises(ConfigError, match="unknown quantization"):
        vllm.with_overrides(default_quant="q3_banana")


def test_unknown_preset_suggests_close_matches():
    with pytest.raises(ConfigError, match="did you mean: vllm") as err:
        load_engine("vlm")
    assert err.value.field == "--engine"


def test_aliases_resolve_to_presets():
    assert load_engine("llama-server").name == "llama.cpp"
    assert load_engine("TensorRT-LLM").name == "trtllm"


def test_yaml_file_may_start_from_a_preset(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("base: vllm\nname: my-vllm\nmax_num_seqs: 32\nefficiency_scale: {compute: 0.8}\n")
    cfg = load_engine(str(f))
    assert (cfg.name, cfg.max_num_seqs, cfg.block_size) == ("my-vllm", 32, 16)
    assert cfg.efficiency_scale.compute == 0.8 and cfg.efficiency_scale.bandwidth == 1.0


def test_bad_field_in_a_yaml_file_names_file_line_and_field(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("base: vllm\nblock_size: 16\nmax_num_seqs: -3\n")
    with pytest.raises(ConfigError) as err:
        load_engine(str(f))
    assert (err.value.file, err.value.line, err.value.field) == (str(f), 3, "max_num_seqs")


def test_hardware_rule_with_an_unknown_field_is_rejected():
    with pytest.raises(ValueError, match="max_seqs"):
        EngineConfig(name="x", scheduler="continuous", kv_allocator="paged", max_num_seqs=1,
                     hardware_rules=[{"set": {"max_seqs": 2}}])


def test_context_limits_follow_each_servers_rules():
    # llama-server default: -c from the model, shrunk by --fit to the KV capacity, one shared buffer
    llama = load_engine("llama.cpp")
    assert llama.context_limits(131072, kv_capacity_tokens=50_000) == (50_000, 50_000)
    assert llama.context_limits(131072, kv_capacity_tokens=1_000) == (4096, 4096)  # --fit never below 4096
    assert llama.with_overrides(context_size=8192, context_mode="split").context_limits(131072, 50_000) == (8192, 2048)
    # an explicit -c is not shrunk
    assert llama.with_overrides(context_size=65536).context_limits(131072, 50_000) == (65536, 65536)
    # Ollama: each of the NUM_PARALLEL slots gets num_ctx, capped at the model's context
    ollama = load_engine("ollama").with_overrides(max_num_seqs=4)
    assert ollama.context_limits(131072) == (4 * 4096, 4096)
    assert ollama.with_overrides(context_size=262144).context_limits(32768) == (4 * 32768, 32768)
    # vLLM: max_model_len per request, the KV pool is the capacity
    assert load_engine("vllm").context_limits(131072, kv_capacity_tokens=400_000) == (400_000, 131072)


def test_flash_attention_follows_the_engine_and_ollama_turns_it_on_per_model_family():
    from sim.catalog.lookup import get_model

    llama, gpt_oss = get_model("llama-3.1-8b"), get_model("gpt-oss-20b")
    lc = load_engine("llama.cpp")
    assert lc.flash_attention_for(llama) and lc.flash_attention_for(gpt_oss)  # -fa auto
    assert not lc.with_overrides(flash_attention=False).flash_attention_for(gpt_oss)
    ollama = load_engine("ollama")
    # Ollama enables it for gpt-oss, qwen3, gemma3 ... but not for Llama unless OLLAMA_FLASH_ATTENTION=1
    assert ollama.flash_attention_for(gpt_oss) and ollama.flash_attention_for(get_model("qwen3-30b-a3b"))
    assert not ollama.flash_attention_for(llama)
    assert ollama.with_overrides(flash_attention_architectures=["*"]).flash_attention_for(llama)
    assert not ollama.with_overrides(flash_attention=False).flash_attention_for(gpt_oss)
    for name in ("vllm", "sglang", "trtllm", "tgi", "mlx", "lmstudio"):
        assert load_engine(name).flash_attention_for(llama)


def test_llama_cpp_kv_padding_on_a_cpu_follows_flash_attention_after_the_users_overrides():
    # ggml-cpu's flash attention skips the masked cells of the 256-cell KV view; with -fa off the KQ matmul spans
    # them (benchmarks/llamacpp_cpu_kv_padding.py). The override comes after the device rules, as `run` applies it
    from sim.api import RunSpec, resolve_engine
    from sim.catalog.hardware import load_profile
    from sim.catalog.lookup import get_model
    from sim.cost.roofline import CostModel

    model = "llama-3.1-8b"
    spec = get_model(model)

    def decode_s(hw: str, **overrides) -> tuple[int, float, float]:
        prof = load_profile(hw)
        eng = resolve_engine(RunSpec(trace="-", hw=hw, model=model, engine="llama.cpp", overrides=overrides), prof)
        cm = CostModel.from_names(spec, hw=prof, engine=eng)
        return cm.kv_pad, cm.step_time((), (), [64]), cm.step_time((), (), [192])

    pad, at64, at192 = decode_s("cpu-x86-generic")  # flash attention on (-fa auto): the context itself counts
    assert pad == 0 and at192 > at64
    pad, at64, at192 = decode_s("cpu-x86-generic", flash_attention=False)  # --no-flash-attn: padded to 256
    assert pad == 256 and at192 == pytest.approx(at64, rel=1e-12)
    for fa in (True, False):  # a GPU keeps the padding either way (CUDA skips masked KV only for big batches)
        pad, at64, at192 = decode_s("rtx-4090", flash_attention=fa)
        assert pad == 256 and at192 == pytest.approx(at64, rel=1e-12)
    # the per-architecture flash-attention default counts too (Ollama's way of turning it on)
    cpu = load_engine("llama.cpp").for_hardware(load_profile("cpu-x86-generic"))
    per_family = cpu.with_overrides(flash_attention_architectures=["gpt_oss"])
    assert per_family.kv_padding_for(get_model("gpt-oss-20b")) == 0 and per_family.kv_padding_for(spec) == 256
    assert load_engine("llama.cpp").for_hardware(load_profile("rtx-4090")).kv_padding_for(spec) == 256
