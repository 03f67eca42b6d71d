"""Catalog entries added for serving-corpus rows (issue 38) and the model catalog's `weight_format` field, which
says which released checkpoints are block-scaled FP8 (sim/catalog/weight_format.py reads it)."""

from __future__ import annotations

import json
import math

import pytest

from calibrate.serving import rows as serving_rows
from sim.catalog import weight_format as wf
from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import load_profile
from sim.catalog.model_readers import spec_from_hf_config
from sim.catalog.models import load_catalog
from sim.cost.roofline import CostModel
from sim.errors import ConfigError

# nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 config.json, the keys that set shapes, as vendored by
# ai-dynamo/aiconfigurator@095f58a51c4ca8e61b66ec108d86f223f8d559ce
# aic-core/src/aiconfigurator_core/model_configs/nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16_config.json
NEMOTRON_3_NANO_CONFIG = {
    "model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"],
    "hidden_size": 2688, "num_hidden_layers": 52,
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
    "intermediate_size": 1856, "moe_intermediate_size": 1856, "moe_shared_expert_intermediate_size": 3712,
    "n_routed_experts": 128, "num_experts_per_tok": 6, "n_shared_experts": 1, "mlp_hidden_act": "relu2",
    "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
    "vocab_size": 131072, "max_position_embeddings": 262144, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _tiny_model(name: str, extra: str = "") -> str:
    """A catalog entry of a two-layer toy model as models.yaml text (8 lines), plus one more field line `extra`."""
    return f"{name}:\n" + """  n_layers: 2
  hidden_size: 64
  n_heads: 4
  n_kv_heads: 4
  intermediate_size: 128
  vocab_size: 100
  max_context: 1024
""" + (f"  {extra}\n" if extra else "")



def test_nemotron_3_nano_entry_is_what_its_config_json_says(tmp_path):
    """The catalog entry equals the cited config.json as the config reader maps it (M / * / E blocks)."""
    (tmp_path / "config.json").write_text(json.dumps(NEMOTRON_3_NANO_CONFIG))
    read = spec_from_hf_config(tmp_path)
    entry = load_catalog()["nemotron-3-nano-30b-a3b"]
    pattern = NEMOTRON_3_NANO_CONFIG["hybrid_override_pattern"]
    # mixer blocks are infersim's layers; every E block is a MoE FFN layer; M blocks are Mamba-2
    assert entry.n_layers == pattern.count("M") + pattern.count("*") == 29
    assert entry.n_moe_layers == entry.n_ffn_layers == pattern.count("E") == 23
    assert entry.linear_attention.n_layers == pattern.count("M") == 23 and entry.n_attention_layers == 6
    assert (entry.hidden_size, entry.n_heads, entry.n_kv_heads, entry.d_head) == (2688, 32, 2, 128)
    assert (entry.n_experts, entry.n_experts_active, entry.moe_intermediate_size) == (128, 6, 1856)
    # the 3712-wide shared expert = 2 experts of the routed width (same weights, same FLOPs)
    assert entry.n_shared_experts * entry.moe_intermediate_size == 3712 and not entry.gated_mlp
    la = entry.linear_attention
    assert (la.kind, la.n_heads, la.head_dim, la.state_dim, la.n_groups, la.conv_kernel) == ("mamba2", 64, 64, 128, 8, 4)
    assert (entry.vocab_size, entry.max_context, entry.tie_embeddings) == (131072, 262144, False)
    for field in ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "n_experts", "n_experts_active",
                  "moe_intermediate_size", "n_shared_experts", "n_moe_layers", "n_ffn_layers", "gated_mlp",
                  "linear_attention", "vocab_size", "max_context", "tie_embeddings"):
        assert getattr(read, field) == getattr(entry, field), field
    # NVIDIA's published sizes (Nemotron 3 Nano report): 31.6B total, 3.6B active with the embedding table
    assert entry.n_params_total / 1e9 == pytest.approx(31.6, rel=0.01)
    assert entry.n_params_active / 1e9 == pytest.approx(3.6, rel=0.01)
    # KV cache only in the 6 attention layers: 6 x 2 x 2 KV heads x 128 x 2 bytes per token
    assert entry.kv_bytes_per_token("bf16") == 6 * 2 * 2 * 128 * 2


def test_a_nemotron_3_moe_block_needs_its_experts(tmp_path):
    cfg = {k: v for k, v in NEMOTRON_3_NANO_CONFIG.items() if k != "n_routed_experts"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as e:
        spec_from_hf_config(tmp_path)
    assert e.value.field == "hybrid_override_pattern"
    (tmp_path / "config.json").write_text(json.dumps({**NEMOTRON_3_NANO_CONFIG, "moe_shared_expert_intermediate_size": 3000}))
    with pytest.raises(ConfigError) as e:
        spec_from_hf_config(tmp_path)
    assert e.value.field == "moe_shared_expert_intermediate_size"


def test_nemotron_3_nano_prices_on_the_corpus_device():
    """The Vultr curve's setup (B200, TP2, FP8, vLLM): a decode step and a prefill take finite, positive time, and a
    step of 64 sequences costs more than one of 1 (the MoE touches more experts, the state and KV reads grow)."""
    cm = CostModel.from_names("nemotron-3-nano-30b-a3b", "fp8", "b200", load_engine("vllm").with_overrides(tp=2))
    one, many = cm.step_time((), (), [2048]), cm.step_time((), (), [2048] * 64)
    prefill = cm.step_time((2048,), (0,), ())
    assert all(math.isfinite(t) and t > 0 for t in (one, many, prefill)) and many > one


def test_the_vultr_nemotron_row_resolves_to_the_catalog_entry():
    catalog = set(load_catalog())
    name = next(iter(serving_rows.NAMED_MODELS))
    assert serving_rows.model_id(name, catalog) == "nemotron-3-nano-30b-a3b"
    assert serving_rows.model_id("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8", catalog) == "nemotron-3-nano-30b-a3b"
    assert serving_rows.model_id("Nemotron Nano 30B", catalog) is None  # only the exact corpus cell is mapped


# stepfun-ai/Step-3.5-Flash config.json, the keys that set shapes, as vendored by Megatron-Bridge's Step-3.5 tests
# (yevvonlim/Megatron-Bridge@2023060258425968ad5401c99153723cee8cd114
# tests/unit_tests/models/step3p5/_reference/config.json); layer_types lists the 45 layers then the 3 MTP layers
STEP_3_5_FLASH_CONFIG = {
    "hidden_size": 4096, "intermediate_size": 11264, "num_hidden_layers": 45, "max_position_embeddings": 262144,
    "vocab_size": 128896, "tie_word_embeddings": False, "num_attention_heads": 64, "num_attention_groups": 8,
    "head_dim": 128, "moe_num_experts": 288, "moe_top_k": 8, "moe_intermediate_size": 1280, "share_expert_dim": 1280,
    "moe_layers_enum": ",".join(str(i) for i in range(3, 45)), "sliding_window": 512,
    "layer_types": ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(48)],
    "attention_other_setting": {"attention_type": "sliding_attention", "num_attention_heads": 96,
                                "num_attention_groups": 8, "head_dim": 128},
    "num_nextn_predict_layers": 3,
}


def test_step_3_5_flash_entry_is_what_its_config_json_says():
    c, m = STEP_3_5_FLASH_CONFIG, load_catalog()["step-3.5-flash"]
    types = c["layer_types"][:c["num_hidden_layers"]]
    other = c["attention_other_setting"]
    assert (m.n_layers, m.hidden_size, m.vocab_size, m.max_context, m.tie_embeddings) == (
        c["num_hidden_layers"], c["hidden_size"], c["vocab_size"], c["max_position_embeddings"], c["tie_word_embeddings"])
    assert (m.n_heads, m.n_kv_heads, m.d_head) == (c["num_attention_heads"], c["num_attention_groups"], c["head_dim"])
    # the sliding layers: own query heads, the same KV heads and head dim (so one KV-cache shape)
    assert m.sliding_n_heads == other["num_attention_heads"] and (other["num_attention_groups"], other["head_dim"]) == (
        m.n_kv_heads, m.d_head)
    assert (m.n_sliding_layers, m.n_full_attention_layers) == (types.count("sliding_attention"),
                                                                types.count("full_attention")) == (33, 12)
    assert m.sliding_window == c["sliding_window"]
    assert m.n_moe_layers == len(c["moe_layers_enum"].split(",")) == 42 and m.intermediate_size == c["intermediate_size"]
    assert (m.n_experts, m.n_experts_active, m.moe_intermediate_size) == (
        c["moe_num_experts"], c["moe_top_k"], c["moe_intermediate_size"])
    assert m.n_shared_experts * m.moe_intermediate_size == c["share_expert_dim"]
    # the sliding layers' q and o projections have 96 heads: 33 x 2 x h x 32 x d more than 64-head layers would
    plain = m.model_copy(update={"sliding_n_heads": None})
    assert m.mixer_params - plain.mixer_params == 33 * 2 * 4096 * (96 - 64) * 128
    # StepFun: 196B total (196.81B with the head), 11B activated per token
    assert m.n_params_total / 1e9 == pytest.approx(196.81, rel=0.01)
    assert m.n_params_active / 1e9 == pytest.approx(11, rel=0.1)
    # one KV shape in all 45 layers: 8 KV heads x 128, the 33 sliding layers capped at 512 tokens
    assert m.kv_bytes_per_sequence(4096, "bf16") == 2 * 8 * 128 * 2 * (12 * 4096 + 33 * 512)


def test_sliding_n_heads_needs_sliding_layers_and_whole_kv_groups(tmp_path):
    base = dict(n_layers=4, hidden_size=64, n_heads=4, n_kv_heads=2, intermediate_size=128, vocab_size=100,
                max_context=1024)
    from sim.catalog.models import ModelSpec
    with pytest.raises(ValueError):
        ModelSpec(name="x", sliding_n_heads=6, **base)  # no sliding layers
    with pytest.raises(ValueError):
        ModelSpec(name="x", sliding_n_heads=5, sliding_window=8, n_sliding_layers=2, **base)  # 5 % 2
    ok = ModelSpec(name="x", sliding_n_heads=6, sliding_window=8, n_sliding_layers=2, **base)
    assert ok.mixer_params > ModelSpec(name="x", sliding_window=8, n_sliding_layers=2, **base).mixer_params


def test_step_3_5_flash_prices_on_the_corpus_device():
    cm = CostModel.from_names("step-3.5-flash", "bf16", "h200", load_engine("sglang").with_overrides(tp=4))
    one, many = cm.step_time((), (), [1000]), cm.step_time((), (), [1000] * 16)
    assert all(math.isfinite(t) and t > 0 for t in (one, many)) and many > one
    assert serving_rows.model_id("stepfun-ai/Step-3.5-Flash", set(load_catalog())) == "step-3.5-flash"


def test_the_catalog_weight_format_field_is_what_marks_block_fp8(tmp_path):
    """block_fp8 sets are read from the catalog: every entry with `weight_format: block-fp8` and its checkpoints."""
    cat = load_catalog()
    declared = {n for n, m in cat.items() if m.weight_format is not None and m.weight_format.format == "block-fp8"}
    assert wf.block_fp8_catalog_ids() == declared == wf.BLOCK_FP8_CATALOG_IDS
    assert set(wf.block_fp8_repos()) == {r.lower() for n in declared for r in cat[n].weight_format.checkpoints}
    # Kimi K2 Instruct: weight_block_size [128, 128] (aiconfigurator's vendored config.json copy, cited second)
    assert "kimi-k2" in declared and wf.is_block_fp8("moonshotai/Kimi-K2-Instruct", "fp8")
    assert wf.is_block_fp8("kimi-k2", None) and not wf.is_block_fp8("kimi-k2", "nvfp4")
    assert "aiconfigurator" in cat["kimi-k2"].weight_format.checkpoints["moonshotai/Kimi-K2-Instruct"][1]
    # a catalog file of one's own: the entry that declares the format is the one that has it
    y = tmp_path / "models.yaml"
    y.write_text("\n" + _tiny_model("m-block", "weight_format: {format: block-fp8, checkpoints: "
                                   "{Org/M-Block-FP8: [https://example.org/config.json]}}") + _tiny_model("m-plain"))
    assert wf._index(y) == ({"org/m-block-fp8": "https://example.org/config.json"}, frozenset({"m-block"}))


def test_the_weight_format_field_drives_the_engines_weight_format_rules():
    """SGLang's `when: {vendor: [AMD], generation: [cdna3], weight_format: [block-fp8]}` rule applies to a model the
    catalog marks block-FP8 (Kimi K2, through its weight_format field alone) and not to an FP8 model it does not."""
    hw = load_profile("mi300x")
    eng = load_engine("sglang").for_hardware(hw)
    rule = next(r for r in eng.hardware_rules if r.when.weight_format)
    kimi = wf.for_weight_format(eng, hw, ("kimi-k2",), "fp8")
    assert kimi.layer_floor_us == rule.set["layer_floor_us"] != eng.layer_floor_us
    assert wf.for_weight_format(eng, hw, ("llama-3.1-70b",), "fp8") == eng
    nv = load_profile("h200")  # the rule is AMD's: an NVIDIA device keeps its engine
    assert wf.for_weight_format(load_engine("sglang").for_hardware(nv), nv, ("kimi-k2",), "fp8") == load_engine(
        "sglang").for_hardware(nv)


def test_an_unknown_weight_format_is_an_error_naming_file_line_and_field(tmp_path):
    y = tmp_path / "models.yaml"
    y.write_text(_tiny_model("ok-model") + _tiny_model(
        "bad-model", "weight_format: {format: block-int4, checkpoints: {Org/M: [https://example.org/config.json]}}"))
    with pytest.raises(ConfigError) as e:
        load_catalog(y)
    assert e.value.line == 9 and "weight_format" in (e.value.field or "") and "format" in e.value.field
    assert str(y) in str(e.value) and "block-fp8" in str(e.value)
    y.write_text(y.read_text().replace("{Org/M: [https://example.org/config.json]}", "{Org/M: []}")
                 .replace("block-int4", "block-fp8"))
    with pytest.raises(ConfigError) as e:
        load_catalog(y)
    assert "cite the config.json" in str(e.value)
