"""A `ModelSpec` from a Hugging Face `config.json` (the config.json half of `sim.catalog.model_readers`).

`spec_from_hf_config` maps a config.json's keys to ModelSpec fields for the model types in
`HF_MODEL_TYPES` (a table, not a chain of ifs). Raises `ConfigError` naming the file and the
missing or bad field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim.catalog.gguf_reader import n_sliding_from_pattern  # llama.cpp's is_swa rule, shared by both readers
from sim.catalog.models import ModelSpec
from sim.errors import ConfigError, pydantic_error_to_config_error

# ---- Hugging Face config.json ----------------------------------------------------------------------


@dataclass(frozen=True)
class HFModelType:
    """How one `model_type` maps onto ModelSpec (what transformers' config class defaults to)."""

    architecture: str
    tie_default: bool  # transformers' default for tie_word_embeddings of this config class
    qkv_bias: bool | str = False  # True, or the config key that says so (e.g. "attention_bias")
    experts_key: str | None = None  # key holding the number of routed experts
    sliding: str = "none"  # "all" (every layer), "layer_types", "gemma_pattern", "qwen", "none"
    # how the config states the 2026 architectures (`_hf_extra`): "deepseek" (MLA, first_k_dense_replace,
    # n_shared_experts, num_nextn_predict_layers), "qwen3_next" (Gated DeltaNet layers, gated attention,
    # shared expert), "llama4" (interleaved MoE, chunked attention), "glm4_moe", "granite_hybrid" (Mamba-2
    # layers by layer_types), "nemotron_h" (hybrid_override_pattern), "jamba" (Mamba every attn_layer_period)
    extra: str = ""
    active_key: str = "num_experts_per_tok"  # key holding the experts each token is routed to
    # key whose value stands in for a missing intermediate_size (Qwen3.5 MoE configs state only the expert
    # width: every layer is MoE, so the dense width is unused)
    ffn_fallback_key: str | None = None


# transformers config classes: LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config (Qwen2Attention
# has bias=True on q/k/v), Qwen3Config, Qwen3MoeConfig, Gemma3TextConfig (tie default True,
# sliding_window_pattern 6), Phi3Config (its sliding_window is not applied by serving engines).
HF_MODEL_TYPES: dict[str, HFModelType] = {
    "llama": HFModelType("llama", False, "attention_bias"),
    "mistral": HFModelType("mistral", False, sliding="all"),
    "mixtral": HFModelType("mixtral", False, experts_key="num_local_experts", sliding="all"),
    "qwen2": HFModelType("qwen2", False, True, sliding="qwen"),
    "qwen3": HFModelType("qwen3", False, "attention_bias", sliding="qwen"),
    "qwen3_moe": HFModelType("qwen3moe", False, "attention_bias", experts_key="num_experts", sliding="qwen"),
    "gemma3_text": HFModelType("gemma3", True, "attention_bias", sliding="gemma_pattern"),
    "phi3": HFModelType("phi3", False),
    "deepseek_v3": HFModelType("deepseek2", False, experts_key="n_routed_experts", extra="deepseek"),
    "kimi_k2": HFModelType("deepseek2", False, experts_key="n_routed_experts", extra="deepseek"),
    "qwen3_next": HFModelType("qwen3next", False, experts_key="num_experts", extra="qwen3_next"),
    "llama4_text": HFModelType("llama4", False, experts_key="num_local_experts", extra="llama4"),
    "glm4_moe": HFModelType("glm4moe", False, "attention_bias", experts_key="n_routed_experts", extra="deepseek"),
    "granitemoehybrid": HFModelType("granitehybrid", False, experts_key="num_local_experts", extra="granite_hybrid"),
    "nemotron_h": HFModelType("nemotron_h", False, experts_key="n_routed_experts", extra="nemotron_h"),
    "jamba": HFModelType("jamba", False, experts_key="num_experts", extra="jamba"),
    # serving-corpus models (issue 38): transformers MiniMaxM2Config, Qwen3_5MoeTextConfig / Qwen3_5TextConfig
    # (the text_config of Qwen3_5(Moe)ForConditionalGeneration), Glm4MoeLiteConfig, Ernie4_5_MoeConfig
    "minimax_m2": HFModelType("minimax_m2", False, experts_key="num_local_experts", extra="minimax_m2"),
    "qwen3_5_moe_text": HFModelType("qwen3_5_moe", False, experts_key="num_experts", extra="qwen3_next",
                                    ffn_fallback_key="moe_intermediate_size"),
    "qwen3_5_text": HFModelType("qwen3_5", False, extra="qwen3_next"),
    "glm4_moe_lite": HFModelType("glm4moelite", False, "attention_bias", experts_key="n_routed_experts",
                                 extra="deepseek"),
    "kimi_linear": HFModelType("kimi_linear", False, experts_key="num_experts", extra="kimi_linear",
                               active_key="num_experts_per_token"),
    # transformers Gemma4TextConfig (the text_config of Gemma4ForConditionalGeneration): tie default True
    "gemma4_text": HFModelType("gemma4", True, "attention_bias", sliding="gemma_pattern", extra="gemma4"),
    "ernie4_5_moe": HFModelType("ernie4_5_moe", True, "use_bias", experts_key="moe_num_experts", extra="ernie",
                                active_key="moe_k"),
}

# quantization_config.quant_method -> sim.catalog.quant name.
HF_QUANT_METHODS: dict[str, str] = {"awq": "awq", "gptq": "gptq", "fp8": "fp8", "mxfp4": "mxfp4"}
# torch_dtype / dtype -> sim.catalog.quant name (vLLM's dtype "auto" serves float32 checkpoints in fp16).
HF_DTYPES: dict[str, str] = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp16"}


class _HFConfig:
    def __init__(self, path: Path, data: dict) -> None:
        self.path, self.data = path, data

    def int(self, key: str, default: int | None = None) -> int | None:
        v = self.data.get(key)
        if v is None:
            if default is None:
                raise ConfigError("missing required field", file=self.path, field=key)
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"expected an integer, got {v!r}", file=self.path, field=key)
        return v

    def bool(self, key: str, default: bool) -> bool:
        v = self.data.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise ConfigError(f"expected true or false, got {v!r}", file=self.path, field=key)
        return v


def _read_json(path: Path) -> dict:
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError("file not found", file=path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"invalid JSON: {e.msg}", file=path, line=e.lineno) from None
    except UnicodeDecodeError:
        raise ConfigError("not a text file", file=path) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a JSON object of config fields", file=path)
    return data


def _hf_sliding(cfg: _HFConfig, kind: HFModelType, n_layers: int, context: int) -> tuple[int | None, int]:
    """(window, layers using it) from sliding_window and layer_types / patterns."""
    window = cfg.data.get("sliding_window")
    if kind.sliding == "none" or not window:
        return None, 0
    window = cfg.int("sliding_window")
    layer_types = cfg.data.get("layer_types")
    if isinstance(layer_types, list):
        n = sum(1 for t in layer_types[:n_layers] if t == "sliding_attention")
    elif kind.sliding == "gemma_pattern":
        pattern = cfg.data.get("sliding_window_pattern") or cfg.data.get("_sliding_window_pattern") or 6
        n = n_sliding_from_pattern(n_layers, int(pattern))
    elif kind.sliding == "qwen":
        # Qwen2/3: sliding attention only when use_sliding_window, in layers >= max_window_layers.
        if not cfg.bool("use_sliding_window", False):
            return None, 0
        n = max(0, n_layers - cfg.int("max_window_layers", n_layers))
    else:  # "all"
        n = n_layers
    if n == 0 or window >= context:
        return None, 0
    return window, n


def _deepseek_keys(cfg: _HFConfig, n_layers: int, n_experts: int, shared_key: str, *, mla: bool) -> dict[str, Any]:
    """The DeepSeek-V3 keys (DeepseekV3Config; Kimi Linear reuses them, naming its shared experts
    `shared_key`): the MLA latent and head sizes, the first `first_k_dense_replace` layers dense, the
    shared experts, num_nextn_predict_layers MTP modules."""
    out: dict[str, Any] = {}
    if mla:
        out["mla"] = dict(kv_lora_rank=cfg.int("kv_lora_rank"), q_lora_rank=cfg.int("q_lora_rank", 0) or None,
                          qk_nope_head_dim=cfg.int("qk_nope_head_dim"), qk_rope_head_dim=cfg.int("qk_rope_head_dim"),
                          v_head_dim=cfg.int("v_head_dim"))
    dense = cfg.int("first_k_dense_replace", 0)
    if n_experts and dense:
        out["n_moe_layers"] = n_layers - dense
    out["n_shared_experts"] = cfg.int(shared_key, 0) if n_experts else 0
    out["mtp_layers"] = cfg.int("num_nextn_predict_layers", 0)
    return out


def _hf_extra(cfg: _HFConfig, kind: HFModelType, n_layers: int, hidden: int, n_experts: int) -> dict[str, Any]:
    """ModelSpec fields of the architectures beyond GQA transformers (`HFModelType.extra`), from the keys
    each config class defines (transformers DeepseekV3Config, Qwen3NextConfig, Llama4TextConfig,
    Glm4MoeConfig, GraniteMoeHybridConfig, NemotronHConfig, JambaConfig)."""
    out: dict[str, Any] = {}
    d = cfg.data
    if kind.extra == "deepseek":
        out.update(_deepseek_keys(cfg, n_layers, n_experts, "n_shared_experts", mla=bool(d.get("kv_lora_rank"))))
    elif kind.extra == "qwen3_next":
        interval = cfg.int("full_attention_interval", 4)
        types = d.get("layer_types")
        linear = (sum(1 for t in types[:n_layers] if t == "linear_attention") if isinstance(types, list)
                  else n_layers - n_layers // interval)
        out["linear_attention"] = dict(kind="gated_deltanet", n_layers=linear,
                                       n_heads=cfg.int("linear_num_value_heads"), head_dim=cfg.int("linear_value_head_dim"),
                                       state_dim=cfg.int("linear_key_head_dim"), n_groups=cfg.int("linear_num_key_heads"),
                                       conv_kernel=cfg.int("linear_conv_kernel_dim", 4))
        out["attention_output_gate"] = cfg.bool("attn_output_gate", True)  # Qwen3.5 states it; Qwen3-Next always gates
        shared = cfg.int("shared_expert_intermediate_size", 0) if n_experts else 0
        if shared and shared != cfg.int("moe_intermediate_size"):
            raise ConfigError(f"a shared expert of width {shared} beside experts of width "
                              f"{cfg.int('moe_intermediate_size')} is not modelled (one expert width per model)",
                              file=cfg.path, field="shared_expert_intermediate_size")
        out["n_shared_experts"] = 1 if shared else 0
        out["mtp_layers"] = cfg.int("mtp_num_hidden_layers", 0)
    elif kind.extra == "llama4":
        step = cfg.int("interleave_moe_layer_step", 1)
        out["n_moe_layers"] = n_layers // step
        out["moe_intermediate_size"] = cfg.int("intermediate_size")
        out["intermediate_size"] = cfg.int("intermediate_size_mlp", cfg.int("intermediate_size"))
        out["n_shared_experts"] = 1
        chunk = cfg.int("attention_chunk_size", 0)
        if chunk:  # three of four layers attend within chunks (no_rope_layers), priced as a window
            out["sliding_window"], out["n_sliding_layers"] = chunk, n_layers - n_layers // 4
    elif kind.extra == "granite_hybrid":
        types = d.get("layer_types")
        if not isinstance(types, list):
            raise ConfigError("expected a list of 'mamba' / 'attention'", file=cfg.path, field="layer_types")
        heads = cfg.int("mamba_n_heads")
        out["linear_attention"] = dict(kind="mamba2", n_layers=sum(1 for t in types[:n_layers] if t == "mamba"),
                                       n_heads=heads, head_dim=cfg.int("mamba_d_head"),
                                       state_dim=cfg.int("mamba_d_state"), n_groups=cfg.int("mamba_n_groups", 1),
                                       conv_kernel=cfg.int("mamba_d_conv", 4))
        out["n_shared_experts"] = 1 if cfg.int("shared_intermediate_size", 0) and n_experts else 0
    elif kind.extra == "nemotron_h":
        # one block per character: M = Mamba-2, * = attention, - = MLP, E = MoE FFN (Nemotron 3: n_routed_experts,
        # num_experts_per_tok, moe_intermediate_size, a shared expert of moe_shared_expert_intermediate_size).
        # infersim's layers are the mixer blocks; the MLP and MoE blocks are counted apart (n_ffn_layers, of which
        # n_moe_layers are MoE). Other block kinds are not modelled
        pattern = d.get("hybrid_override_pattern")
        if not isinstance(pattern, str) or not pattern:
            raise ConfigError("missing required field", file=cfg.path, field="hybrid_override_pattern")
        mixers, mlps, moes = sum(c in "M*" for c in pattern), pattern.count("-"), pattern.count("E")
        known = "M*-E" if n_experts else "M*-"
        if any(c not in known for c in pattern):
            raise ConfigError(f"block kinds {sorted(set(pattern) - set(known))} are not modelled (M = Mamba-2, "
                              "* = attention, - = MLP, E = MoE with n_routed_experts)", file=cfg.path,
                              field="hybrid_override_pattern")
        out["n_ffn_layers"] = mlps + moes
        if n_experts:
            out["n_moe_layers"] = moes
            shared, width = cfg.int("moe_shared_expert_intermediate_size", 0), cfg.int("moe_intermediate_size")
            if shared % width:
                raise ConfigError(f"a shared expert of width {shared}, not a multiple of moe_intermediate_size "
                                  f"{width}, is not modelled", file=cfg.path, field="moe_shared_expert_intermediate_size")
            out["n_shared_experts"] = shared // width  # one MLP of k x the expert width = k experts' weights and FLOPs
        out["linear_attention"] = dict(kind="mamba2", n_layers=pattern.count("M"), n_heads=cfg.int("mamba_num_heads"),
                                       head_dim=cfg.int("mamba_head_dim"), state_dim=cfg.int("ssm_state_size"),
                                       n_groups=cfg.int("n_groups", 1), conv_kernel=cfg.int("conv_kernel", 4))
        out["n_layers"] = mixers
        out["gated_mlp"] = False  # squared-ReLU MLP: up and down projections
    elif kind.extra == "minimax_m2":
        # MiniMaxM2Config: attn_type_list marks each layer 1 = softmax attention, 0 = lightning (linear)
        # attention as in MiniMax-01 / M1; M2 and M2.5 are all 1. Lightning attention is not modelled.
        types = d.get("attn_type_list")
        if isinstance(types, list) and any(t != 1 for t in types[:n_layers]):
            raise ConfigError("lightning (linear) attention layers (attn_type_list 0) are not modelled",
                              file=cfg.path, field="attn_type_list")
        if cfg.int("shared_intermediate_size", 0):
            raise ConfigError("a shared expert (shared_intermediate_size > 0) of MiniMax's form is not modelled",
                              file=cfg.path, field="shared_intermediate_size")
        # the expert width is `intermediate_size` (no moe_intermediate_size key)
        out["moe_intermediate_size"] = cfg.int("intermediate_size")
        out["mtp_layers"] = cfg.int("num_mtp_modules", 0) if cfg.bool("use_mtp", False) else 0
    elif kind.extra == "kimi_linear":
        # KimiLinearConfig: MLA full-attention layers (the keys DeepSeek-V3 uses) between Kimi Delta
        # Attention layers listed in linear_attn_config.kda_layers (1-based); DeepSeek-style MoE
        la = d.get("linear_attn_config")
        if not isinstance(la, dict) or not isinstance(la.get("kda_layers"), list):
            raise ConfigError("expected an object with kda_layers, num_heads, head_dim", file=cfg.path,
                              field="linear_attn_config")
        lac = _HFConfig(cfg.path, la)
        heads, width = lac.int("num_heads"), lac.int("head_dim")
        out["linear_attention"] = dict(kind="kda", n_layers=len(la["kda_layers"]), n_heads=heads, head_dim=width,
                                       state_dim=width, n_groups=heads,
                                       conv_kernel=lac.int("short_conv_kernel_size", 4))
        out.update(_deepseek_keys(cfg, n_layers, n_experts, "num_shared_experts", mla=True))
    elif kind.extra == "ernie":
        # Ernie4_5_MoeConfig: experts in layers start..end (inclusive) every `interval`, the others dense;
        # moe_num_shared_experts shared experts of the expert width (one MLP of that many widths)
        start = cfg.int("moe_layer_start_index", 0)
        end = d.get("moe_layer_end_index")
        end = n_layers - 1 if end is None or end == -1 else cfg.int("moe_layer_end_index")
        interval = cfg.int("moe_layer_interval", 1)
        if n_experts:
            out["n_moe_layers"] = sum(1 for i in range(n_layers) if start <= i <= end and (i - start) % interval == 0)
        out["n_shared_experts"] = cfg.int("moe_num_shared_experts", 0) if n_experts else 0
    elif kind.extra == "jamba":
        period, offset = cfg.int("attn_layer_period", 8), cfg.int("attn_layer_offset", 4)
        attention = sum(1 for i in range(n_layers) if i % period == offset)
        inner = cfg.int("mamba_expand", 2) * hidden
        out["linear_attention"] = dict(kind="mamba", n_layers=n_layers - attention, n_heads=1, head_dim=inner,
                                       state_dim=cfg.int("mamba_d_state", 16), conv_kernel=cfg.int("mamba_d_conv", 4),
                                       dt_rank=cfg.int("mamba_dt_rank", 0) or -(-hidden // 16))
        if n_experts:
            e_period, e_offset = cfg.int("expert_layer_period", 2), cfg.int("expert_layer_offset", 1)
            out["n_moe_layers"] = sum(1 for i in range(n_layers) if i % e_period == e_offset)
    elif kind.extra == "gemma4":
        out.update(_gemma4_keys(cfg))
    return out


def _gemma4_keys(cfg: _HFConfig) -> dict[str, Any]:
    """transformers Gemma4TextConfig: the full-attention layers' global_head_dim (default 512) and, with
    attention_k_eq_v (no v_proj there), num_global_key_value_heads (transformers and vLLM's gemma4.py use it
    only then); enable_moe_block runs num_experts experts (top_k_experts) beside the dense MLP, which is
    intermediate_size / moe_intermediate_size shared experts. Per-Layer Embeddings and cross-layer KV sharing
    (the E2B / E4B siblings) are not modelled: refused."""
    for key, default in (("hidden_size_per_layer_input", 256), ("num_kv_shared_layers", 0)):
        if cfg.int(key, default):
            raise ConfigError(f"Gemma 4 {'Per-Layer Embeddings' if default else 'cross-layer KV sharing'} "
                              "(the E2B / E4B models) is not modelled", file=cfg.path, field=key)
    k_eq_v = cfg.bool("attention_k_eq_v", False)
    out: dict[str, Any] = dict(global_head_dim=cfg.int("global_head_dim", 512), global_k_eq_v=k_eq_v)
    if k_eq_v and cfg.data.get("num_global_key_value_heads") is not None:
        out["global_n_kv_heads"] = cfg.int("num_global_key_value_heads")
    if not cfg.bool("enable_moe_block", False):
        return {**out, "n_experts": 0, "n_experts_active": 0, "moe_intermediate_size": None}
    dense, width = cfg.int("intermediate_size"), cfg.int("moe_intermediate_size")
    if dense % width:
        raise ConfigError(f"a dense MLP of width {dense} beside experts of width {width} is not modelled (one "
                          "expert width per model)", file=cfg.path, field="intermediate_size")
    return {**out, "n_experts": cfg.int("num_experts"), "n_experts_active": cfg.int("top_k_experts"),
            "moe_intermediate_size": width, "n_shared_experts": dense // width}


def spec_from_hf_config(path: str | Path) -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (or a folder holding one).

    Keys: num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads (default: heads),
    head_dim (default hidden/heads), intermediate_size, vocab_size, max_position_embeddings,
    tie_word_embeddings (default per model_type), num_local_experts / num_experts,
    num_experts_per_tok, moe_intermediate_size, sliding_window (+ layer_types / patterns),
    quantization_config.quant_method or torch_dtype for the default quantization. A multimodal
    config with a `text_config` (e.g. model_type gemma3) is read from its text part.
    """
    path = Path(path)
    data = _read_json(path)
    file = path / "config.json" if path.is_dir() else path
    top = data
    if isinstance(data.get("text_config"), dict) and data.get("model_type") not in HF_MODEL_TYPES:
        data = {**data["text_config"], "quantization_config": top.get("quantization_config")}
    model_type = data.get("model_type")
    if model_type is None:
        raise ConfigError("missing required field", file=file, field="model_type")
    if model_type not in HF_MODEL_TYPES:
        raise ConfigError(f"unsupported model_type '{model_type}'; supported: {', '.join(HF_MODEL_TYPES)}",
                          file=file, field="model_type")
    kind = HF_MODEL_TYPES[model_type]
    cfg = _HFConfig(file, data)

    n_layers = cfg.int("num_hidden_layers")
    n_heads = cfg.int("num_attention_heads")
    # Kimi Linear states its context as model_max_length (no max_position_embeddings)
    context = cfg.int("max_position_embeddings", cfg.int("model_max_length") if "model_max_length" in data else None)
    n_experts = cfg.int(kind.experts_key, 0) if kind.experts_key else 0
    ffn = cfg.int("intermediate_size", cfg.int(kind.ffn_fallback_key) if kind.ffn_fallback_key else None)
    qkv_bias = kind.qkv_bias if isinstance(kind.qkv_bias, bool) else cfg.bool(kind.qkv_bias, False)
    window, n_sliding = _hf_sliding(cfg, kind, n_layers, context)

    quant = None
    qc = data.get("quantization_config")
    if isinstance(qc, dict):
        quant = HF_QUANT_METHODS.get(str(qc.get("quant_method", "")).lower())
    dtype = data.get("torch_dtype") or data.get("dtype") or top.get("torch_dtype")
    quant = quant or HF_DTYPES.get(str(dtype), "bf16")

    name_or_path = top.get("_name_or_path")
    name = file.parent.name if file.name == "config.json" and file.parent.name else file.stem
    extra = _hf_extra(cfg, kind, n_layers, cfg.int("hidden_size"), n_experts)
    if "mla" in extra:
        extra.update(head_dim=None)  # MLA: num_key_value_heads is the head count, the cache a latent
    if kind.extra == "nemotron_h":
        n_layers = extra.pop("n_layers")
    try:
        return ModelSpec.model_validate({**dict(
            name=name,
            display_name=name_or_path if isinstance(name_or_path, str) and name_or_path else name,
            architecture=kind.architecture,
            n_layers=n_layers,
            hidden_size=cfg.int("hidden_size"),
            n_heads=n_heads,
            n_kv_heads=cfg.int("num_key_value_heads", n_heads),
            head_dim=cfg.int("head_dim", 0) or None,
            intermediate_size=ffn,
            vocab_size=cfg.int("vocab_size"),
            max_context=context,
            tie_embeddings=cfg.bool("tie_word_embeddings", kind.tie_default),
            qkv_bias=qkv_bias,
            n_experts=n_experts,
            n_experts_active=cfg.int(kind.active_key) if n_experts else 0,
            moe_intermediate_size=cfg.int("moe_intermediate_size", 0) or None if n_experts else None,
            sliding_window=window,
            n_sliding_layers=n_sliding,
            default_quant=quant,
            sources=[str(file)],
            notes=f"read from config.json (model_type {model_type})",
        ), **extra})
    except ValidationError as e:
        raise pydantic_error_to_config_error(e, file=file) from None
