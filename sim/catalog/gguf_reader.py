"""A `ModelSpec` from a GGUF file's header (the GGUF half of `sim.catalog.model_readers`).

`spec_from_gguf` reads the key/value metadata and the tensor table of the GGUF header (with the
`gguf` package's value types and block sizes) and never touches the weight data, so a 40 GB file
opens in well under a second. The weight bytes it reports are the file's real tensor bytes (sum of every tensor's
`n_bytes`), so a GGUF spec's `weight_bytes()` is exact for the file's own quantization. Raises
`ConfigError` naming the file and the missing or bad field.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim.catalog.models import ModelSpec
from sim.catalog.quant import QUANT_FORMATS
from sim.errors import ConfigError, pydantic_error_to_config_error

# ---- GGUF ----------------------------------------------------------------------------------------

# `general.file_type` (gguf.LlamaFileType, llama.h `llama_ftype`) -> sim.catalog.quant name.
GGUF_FILE_TYPES: dict[int, str] = {
    1: "fp16",     # MOSTLY_F16
    2: "q4_0",     # MOSTLY_Q4_0
    7: "q8_0",     # MOSTLY_Q8_0
    15: "q4_k_m",  # MOSTLY_Q4_K_M
    17: "q5_k_m",  # MOSTLY_Q5_K_M
    18: "q6_k",    # MOSTLY_Q6_K
    32: "bf16",    # MOSTLY_BF16
    38: "mxfp4",   # MOSTLY_MXFP4_MOE
    39: "nvfp4",   # MOSTLY_NVFP4
}

# Dominant tensor type (gguf.GGMLQuantizationType name) -> sim.catalog.quant name, for files without
# `general.file_type`.
GGUF_TENSOR_TYPES: dict[str, str] = {
    "F16": "fp16", "BF16": "bf16", "Q4_0": "q4_0", "Q8_0": "q8_0", "Q4_K": "q4_k_m",
    "Q5_K": "q5_k_m", "Q6_K": "q6_k", "MXFP4": "mxfp4", "NVFP4": "nvfp4",
}

# Architectures whose sliding-window layer pattern llama.cpp hard-codes instead of storing it
# (src/llama-model.cpp: gemma3 `hparams.set_swa_pattern(6)`, gemma2 `set_swa_pattern(2)`): every
# n-th layer attends to the full context, the others to `attention.sliding_window` tokens.
GGUF_SWA_PATTERN: dict[str, int] = {"gemma3": 6, "gemma2": 2}


def n_sliding_from_pattern(n_layers: int, pattern: int) -> int:
    """Layers il with il % pattern < pattern - 1 use the window (llama.cpp `is_swa`)."""
    return sum(1 for il in range(n_layers) if il % pattern < pattern - 1)


# ---- a fast GGUF header walker ------------------------------------------------------------------
#
# gguf.GGUFReader parses every metadata array into numpy objects, element by element: for Gemma 3's
# 262,144-token vocabulary that took 18-25 s on this project's 2-core machine. The walker below reads
# the same header layout (ggml/docs/gguf.md; gguf-py/gguf/gguf_reader.py: magic, version,
# tensor_count, kv_count, key/value pairs, tensor infos) with `struct`, keeping long arrays as their
# length only, and takes the tensor types and block sizes from the `gguf` package.
# Little-endian GGUF v2/v3 only (what llama.cpp writes).

_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_KEEP_ARRAY_MAX = 4096  # longer arrays (vocabularies, merges) are kept as their length only


@dataclass(frozen=True)
class LongArray:
    """A metadata array too long to keep: its element type and length."""

    value_type: int
    length: int

    def __len__(self) -> int:
        return self.length


@dataclass(frozen=True)
class GGUFTensorInfo:
    name: str
    shape: tuple[int, ...]  # GGUF order: ne0 (row length) first
    type_name: str  # gguf.GGMLQuantizationType name
    n_elements: int
    n_bytes: int


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    fields: dict[str, Any]
    tensors: tuple[GGUFTensorInfo, ...]


class _Cursor:
    """Sequential little-endian reads over the mapped file; running off the end is a ConfigError."""

    def __init__(self, buf: Any, path: Path) -> None:
        self.buf, self.pos, self.path = buf, 0, path

    def _need(self, n: int) -> None:
        if self.pos + n > len(self.buf):
            raise ConfigError("truncated GGUF header", file=self.path)

    def unpack(self, fmt: str, count: int = 1) -> Any:
        size = struct.calcsize(f"<{count}{fmt}")
        self._need(size)
        out = struct.unpack_from(f"<{count}{fmt}", self.buf, self.pos)
        self.pos += size
        return out[0] if count == 1 else list(out)

    def string(self) -> str:
        n = self.unpack("Q")
        self._need(n)
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype: int) -> Any:
        if vtype in _SCALAR_FORMATS:
            return self.unpack(_SCALAR_FORMATS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype != _ARRAY:
            raise ConfigError(f"unknown GGUF value type {vtype}", file=self.path)
        etype, count = self.unpack("I"), self.unpack("Q")
        if etype in _SCALAR_FORMATS:
            if count > _KEEP_ARRAY_MAX:
                size = struct.calcsize("<" + _SCALAR_FORMATS[etype]) * count
                self._need(size)
                self.pos += size
                return LongArray(etype, count)
            return self.unpack(_SCALAR_FORMATS[etype], count) if count else []
        if etype == _STRING:
            if count > _KEEP_ARRAY_MAX:
                self.pos = _skip_strings(self.buf, self.pos, count, self.path)
                return LongArray(etype, count)
            return [self.string() for _ in range(count)]
        if count > _KEEP_ARRAY_MAX:
            raise ConfigError(f"unsupported long nested GGUF array (type {etype})", file=self.path)
        return [self.value(etype) for _ in range(count)]


_U64 = struct.Struct("<Q")


def _skip_strings(buf: Any, pos: int, count: int, path: Path) -> int:
    """Position after `count` length-prefixed strings starting at `pos` (the hot loop of a vocabulary)."""
    unpack_from, end = _U64.unpack_from, len(buf)
    for _ in range(count):
        if pos + 8 > end:
            raise ConfigError("truncated GGUF header", file=path)
        pos += 8 + unpack_from(buf, pos)[0]
    if pos > end:
        raise ConfigError("truncated GGUF header", file=path)
    return pos


def read_gguf_header(path: str | Path) -> GGUFHeader:
    """Metadata and tensor table of a GGUF file, without reading tensor data.

    n_bytes of a tensor = n_elements / block_size x bytes_per_block (gguf.GGML_QUANT_SIZES).
    """
    import mmap

    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    path = Path(path)
    if not path.is_file():
        raise ConfigError("file not found", file=path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 24:
            raise ConfigError("not a GGUF file (too short)", file=path)
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        if mm[:4] != b"GGUF":
            raise ConfigError("not a GGUF file (no GGUF magic)", file=path)
        cur = _Cursor(mm, path)
        cur.pos = 4
        version = cur.unpack("I")
        if version not in (2, 3):
            raise ConfigError(f"unsupported GGUF version {version} (expected 2 or 3, little-endian)", file=path)
        n_tensors, n_kv = cur.unpack("Q"), cur.unpack("Q")
        fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string()
            fields[key] = cur.value(cur.unpack("I"))
        tensors = []
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.unpack("I")
            shape = tuple(cur.unpack("Q", n_dims)) if n_dims > 1 else (cur.unpack("Q"),) if n_dims else ()
            type_id = cur.unpack("I")
            cur.unpack("Q")  # offset of the data, not needed
            try:
                qtype = GGMLQuantizationType(type_id)
                block, type_size = GGML_QUANT_SIZES[qtype]
            except (ValueError, KeyError):
                raise ConfigError(f"unknown tensor type {type_id}", file=path, field=name) from None
            n_el = math.prod(shape)
            tensors.append(GGUFTensorInfo(name, shape, qtype.name, n_el, n_el // block * type_size))
        return GGUFHeader(version, fields, tuple(tensors))
    finally:
        mm.close()


class _GGUFMeta:
    """Typed access to one GGUF file's metadata, raising ConfigError that names file and key."""

    def __init__(self, path: Path, header: GGUFHeader) -> None:
        self.path = path
        self.fields = header.fields
        self.arch = self.get_str("general.architecture")

    def raw(self, key: str) -> Any:
        return self.fields.get(key)

    def get_str(self, key: str) -> str:
        v = self.raw(key)
        if not isinstance(v, str) or not v:
            raise ConfigError("missing GGUF metadata key" if v is None else f"expected a string, got {v!r}",
                              file=self.path, field=key)
        return v

    def get_int(self, key: str, default: int | None = None) -> int | None:
        """An integer `{arch}.key`; a per-layer array gives its maximum; missing -> default or error."""
        full = f"{self.arch}.{key}"
        v = self.raw(full)
        if v is None:
            if default is None:
                raise ConfigError("missing GGUF metadata key", file=self.path, field=full)
            return default
        if isinstance(v, list):
            v = max(v) if v else None
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"expected an integer, got {v!r}", file=self.path, field=full)
        return v


def _gguf_quant(meta: _GGUFMeta, tensors: list, n_bytes: int, spec_args: dict) -> tuple[str, str]:
    """(sim.catalog.quant name, how it was found): file type, else dominant tensor type, else nearest size."""
    ftype = meta.raw("general.file_type")
    if isinstance(ftype, int) and ftype in GGUF_FILE_TYPES:
        return GGUF_FILE_TYPES[ftype], f"general.file_type={ftype}"
    by_type: dict[str, int] = {}
    for t in tensors:
        if len(t.shape) >= 2:
            by_type[t.type_name] = by_type.get(t.type_name, 0) + t.n_bytes
    dominant = max(by_type, key=by_type.get) if by_type else None
    if dominant in GGUF_TENSOR_TYPES and ftype is None:
        return GGUF_TENSOR_TYPES[dominant], f"dominant tensor type {dominant}"
    # A type the table has no entry for (IQ4_XS, Q3_K_M, F32, ...): the GGUF/float format whose
    # nominal size is nearest to the real bytes gives the compute format; the bytes stay real.
    probe = ModelSpec.model_validate(spec_args)
    candidates = [q for q in QUANT_FORMATS.values() if q.family in ("gguf", "float") and q.compute_format != "fp8"
                  and q.compute_format != "int8"]
    best = min(candidates, key=lambda q: abs(probe.nominal_weight_bytes(q) - n_bytes))
    what = f"file type {ftype}" if ftype is not None else f"dominant tensor type {dominant}"
    return best.name, f"{what} has no table entry; nearest by size: {best.name}"


def _gguf_mla_args(meta: "_GGUFMeta", n_layers: int, n_experts: int) -> dict[str, Any]:
    """ModelSpec fields of llama.cpp's deepseek2-style keys: MLA from attention.kv_lora_rank (+ q_lora_rank,
    key_length(_mla) = d_nope + d_R, value_length(_mla) = d_v, rope.dimension_count = d_R), dense leading
    layers from leading_dense_block_count, MTP modules from nextn_predict_layers. Empty for other archs."""
    out: dict[str, Any] = {}
    rank = meta.get_int("attention.kv_lora_rank", 0)
    if rank:
        rope = meta.get_int("rope.dimension_count")
        key = meta.get_int("attention.key_length_mla", 0) or meta.get_int("attention.key_length")
        value = meta.get_int("attention.value_length_mla", 0) or meta.get_int("attention.value_length")
        out["mla"] = dict(kv_lora_rank=rank, q_lora_rank=meta.get_int("attention.q_lora_rank", 0) or None,
                          qk_nope_head_dim=key - rope, qk_rope_head_dim=rope, v_head_dim=value)
    dense = meta.get_int("leading_dense_block_count", 0)
    if dense and n_experts:
        out["n_moe_layers"] = n_layers - dense
    nextn = meta.get_int("nextn_predict_layers", 0)
    if nextn:
        out["mtp_layers"] = nextn
    return out


def _gguf_ssm_heads(meta: "_GGUFMeta", path: Path, what: str) -> tuple[int, int]:
    """(heads, head dim) of the recurrent layers: ssm.time_step_rank heads sharing ssm.inner_size (Gated
    DeltaNet value heads, Mamba-2 heads), the inner size a whole multiple of the heads."""
    heads = meta.get_int("ssm.time_step_rank")
    inner = meta.get_int("ssm.inner_size")
    if inner % heads:
        raise ConfigError(f"ssm.inner_size {inner} is not a multiple of ssm.time_step_rank {heads} ({what})",
                          file=path, field=f"{meta.arch}.ssm.inner_size")
    return heads, inner // heads


def _gguf_mamba2(meta: "_GGUFMeta", path: Path, n_layers: int) -> dict[str, Any]:
    """The `linear_attention` entry of n_layers Mamba-2 layers (Granite 4 hybrid, Nemotron-H) from the ssm.* keys."""
    heads, head_dim = _gguf_ssm_heads(meta, path, "Mamba-2 heads")
    return dict(kind="mamba2", n_layers=n_layers, n_heads=heads, head_dim=head_dim,
                state_dim=meta.get_int("ssm.state_size"), n_groups=meta.get_int("ssm.group_count", 1),
                conv_kernel=meta.get_int("ssm.conv_kernel", 4))


def _gguf_qwen3next_args(meta: "_GGUFMeta", path: Path, n_layers: int, n_experts: int,
                         expert_ffn: int | None) -> dict[str, Any]:
    """Qwen3-Next's Gated DeltaNet layers from the keys llama.cpp's converter writes (convert_hf_to_gguf.py
    Qwen3NextModel.set_gguf_parameters): ssm.conv_kernel = linear_conv_kernel_dim, ssm.state_size =
    linear_key_head_dim, ssm.group_count = linear_num_key_heads, ssm.time_step_rank = linear_num_value_heads,
    ssm.inner_size = linear_value_head_dim x linear_num_value_heads, full_attention_interval (every
    interval-th layer is full attention); the shared expert from expert_shared_feed_forward_length
    (Qwen2MoeModel). The same fields `hf_config` reads from a config.json; the converter drops the MTP layers,
    so a GGUF has none."""
    heads, head_dim = _gguf_ssm_heads(meta, path, "value heads")
    interval = meta.get_int("full_attention_interval", 4)
    out: dict[str, Any] = {
        "linear_attention": dict(kind="gated_deltanet", n_layers=n_layers - n_layers // interval, n_heads=heads,
                                 head_dim=head_dim, state_dim=meta.get_int("ssm.state_size"),
                                 n_groups=meta.get_int("ssm.group_count"),
                                 conv_kernel=meta.get_int("ssm.conv_kernel", 4)),
        "attention_output_gate": True}
    shared = meta.get_int("expert_shared_feed_forward_length", 0) if n_experts else 0
    if shared and shared != expert_ffn:
        raise ConfigError(f"a shared expert of width {shared} beside experts of width {expert_ffn} is not modelled "
                          "(one expert width per model)", file=path,
                          field=f"{meta.arch}.expert_shared_feed_forward_length")
    out["n_shared_experts"] = 1 if shared else 0
    return out


def _gguf_granitehybrid_args(meta: "_GGUFMeta", path: Path, n_layers: int, n_experts: int) -> dict[str, Any]:
    """Granite 4 hybrid (and Bamba) Mamba-2 layers from the keys llama.cpp's converter writes
    (convert_hf_to_gguf.py GraniteHybridModel.set_gguf_parameters): ssm.conv_kernel, ssm.state_size,
    ssm.group_count = n_groups, ssm.inner_size = d_inner (heads x head dim), ssm.time_step_rank = the Mamba-2
    head count; attention.head_count_kv is per layer, 0 on the Mamba-2 layers. The shared MLP of the MoE
    variants from expert_shared_feed_forward_length (GraniteMoeModel). The same fields `hf_config` reads."""
    kv = _gguf_per_layer(meta, path, "attention.head_count_kv", n_layers, "0 on the Mamba-2 layers")
    out: dict[str, Any] = {"linear_attention": _gguf_mamba2(meta, path, sum(1 for k in kv if k == 0))}
    if n_experts:
        out["n_shared_experts"] = 1 if meta.get_int("expert_shared_feed_forward_length", 0) else 0
    return out


def _gguf_per_layer(meta: "_GGUFMeta", path: Path, key: str, n_layers: int, what: str) -> list[int]:
    """A per-layer integer array `{arch}.key` of n_layers entries (llama.cpp writes head_count_kv, and for
    Nemotron-H feed_forward_length, per layer on the hybrid architectures)."""
    field = f"{meta.arch}.{key}"
    v = meta.raw(field)
    if not isinstance(v, list) or len(v) != n_layers or not all(isinstance(x, int) for x in v):
        raise ConfigError(f"expected a per-layer array of {n_layers} integers ({what})", file=path, field=field)
    return v


def _gguf_jamba_args(meta: "_GGUFMeta", path: Path, n_layers: int, n_experts: int,
                     by_name: dict) -> dict[str, Any]:
    """Jamba's Mamba (v1) layers from the keys llama.cpp's converter writes (convert_hf_to_gguf.py
    JambaModel.set_gguf_parameters): ssm.conv_kernel = mamba_d_conv, ssm.inner_size = mamba_expand x hidden,
    ssm.state_size = mamba_d_state, ssm.time_step_rank = mamba_dt_rank (ceil(hidden / 16) when unset);
    attention.head_count_kv is per layer, 0 on the Mamba layers (attn_layer_period / offset). The converter
    writes no expert-layer period: the MoE layers are those whose tensors include `blk.N.ffn_*_exps`. The same
    fields `hf_config` reads from a config.json (one Mamba "head" as wide as the inner size)."""
    kv = _gguf_per_layer(meta, path, "attention.head_count_kv", n_layers, "0 on the Mamba layers")
    out: dict[str, Any] = {
        "linear_attention": dict(kind="mamba", n_layers=sum(1 for k in kv if k == 0), n_heads=1,
                                 head_dim=meta.get_int("ssm.inner_size"), state_dim=meta.get_int("ssm.state_size"),
                                 conv_kernel=meta.get_int("ssm.conv_kernel", 4),
                                 dt_rank=meta.get_int("ssm.time_step_rank"))}
    if n_experts:
        moe = sum(1 for i in range(n_layers) if any(f"blk.{i}.ffn_{w}_exps.weight" in by_name
                                                    for w in ("gate", "up", "down")))
        if not moe:
            raise ConfigError("expert_count > 0 but no layer has blk.N.ffn_*_exps tensors (which layers are MoE "
                              "is read from the tensor table)", file=path, field=f"{meta.arch}.expert_count")
        out["n_moe_layers"] = moe
    return out


def _gguf_nemotron_h_args(meta: "_GGUFMeta", path: Path, n_layers: int) -> dict[str, Any]:
    """Nemotron-H's blocks from the keys llama.cpp's converter writes (convert_hf_to_gguf.py NemotronHModel,
    a GraniteHybridModel): block_count = len(hybrid_override_pattern), one block per character;
    attention.head_count_kv per block (> 0 on the `*` attention blocks), feed_forward_length per block (> 0 on
    the `-` MLP blocks), the rest are Mamba-2 (`M`): ssm.time_step_rank = mamba_num_heads, ssm.inner_size =
    mamba_num_heads x mamba_head_dim, ssm.state_size, ssm.group_count = n_groups, ssm.conv_kernel. As
    `hf_config` reads the config.json: infersim's layers are the mixer blocks (M and *), the MLP blocks are
    counted apart (n_ffn_layers), squared-ReLU MLPs (no gate)."""
    kv = _gguf_per_layer(meta, path, "attention.head_count_kv", n_layers, "> 0 on the attention blocks")
    ff = _gguf_per_layer(meta, path, "feed_forward_length", n_layers, "> 0 on the MLP blocks")
    if any(k and f for k, f in zip(kv, ff)):
        raise ConfigError("a block with both attention heads and an MLP width is not a Nemotron-H block",
                          file=path, field=f"{meta.arch}.feed_forward_length")
    attention, mlps = sum(1 for k in kv if k), sum(1 for f in ff if f)
    return {"n_layers": n_layers - mlps, "n_ffn_layers": mlps, "gated_mlp": False,
            "linear_attention": _gguf_mamba2(meta, path, n_layers - mlps - attention)}


# GGUF architectures whose recurrent-state (ssm.*) layers are read; others with ssm.* keys are refused
GGUF_HYBRID_ARCHS = ("qwen3next", "granitehybrid", "jamba", "nemotron_h")


def spec_from_gguf(path: str | Path) -> ModelSpec:
    """A ModelSpec from a GGUF file's header (metadata + tensor table; weights are not read).

    Keys read (llama.cpp naming, `{arch}` = general.architecture): block_count, embedding_length,
    attention.head_count, attention.head_count_kv, attention.key_length, feed_forward_length,
    context_length, vocab_size (else the tokenizer's token list, else token_embd's shape),
    expert_count, expert_used_count, expert_feed_forward_length, expert_shared_count,
    attention.sliding_window (+ attention.sliding_window_pattern or the per-arch pattern).
    From the tensor table: tied embeddings (no `output.weight`), q/k/v biases (`blk.0.attn_q.bias`),
    a gated FFN (`ffn_gate*` tensors or Phi-3's fused `ffn_up` of width 2F), and
    weight_bytes_override = sum of all tensors' n_bytes.
    """
    path = Path(path)
    header = read_gguf_header(path)
    meta = _GGUFMeta(path, header)
    tensors = list(header.tensors)
    by_name = {t.name: t for t in tensors}

    n_layers = meta.get_int("block_count")
    hidden = meta.get_int("embedding_length")
    n_heads = meta.get_int("attention.head_count")
    if meta.arch in ("mamba", "mamba2") or n_heads == 0:
        # llama.cpp's MambaModel / Mamba2Model write head_count 0 and feed_forward_length 0: every layer is a
        # state-space mixer; infersim's hybrid model keeps at least one attention layer
        raise ConfigError(f"{n_heads}: architecture '{meta.arch}' has no attention layers (a pure state-space "
                          "model), which is not modelled; the hybrids qwen3next, granitehybrid, jamba and nemotron_h "
                          "are", file=path, field=f"{meta.arch}.attention.head_count")
    n_kv = meta.get_int("attention.head_count_kv", n_heads)
    head_dim = meta.get_int("attention.key_length", 0) or None
    n_experts = meta.get_int("expert_count", 0)
    n_active = meta.get_int("expert_used_count", 0) if n_experts else 0
    expert_ffn = meta.get_int("expert_feed_forward_length", 0) or None
    ffn = meta.get_int("feed_forward_length", expert_ffn or 0) or None
    if ffn is None:
        raise ConfigError("missing GGUF metadata key", file=path, field=f"{meta.arch}.feed_forward_length")
    context = meta.get_int("context_length")

    vocab = meta.get_int("vocab_size", 0)
    if not vocab:
        tokens = meta.raw("tokenizer.ggml.tokens")
        if tokens is not None:
            vocab = len(tokens)
        elif "token_embd.weight" in by_name:
            vocab = int(by_name["token_embd.weight"].shape[-1])  # GGUF shape is (ne0=h, ne1=V)
        else:
            raise ConfigError("no vocab_size key, tokenizer.ggml.tokens or token_embd.weight tensor",
                              file=path, field=f"{meta.arch}.vocab_size")

    window = meta.get_int("attention.sliding_window", 0) or None
    n_sliding = 0
    if window:
        pattern = meta.raw(f"{meta.arch}.attention.sliding_window_pattern")
        if isinstance(pattern, list):
            n_sliding = sum(1 for swa in pattern[:n_layers] if swa)
        elif isinstance(pattern, int) and pattern > 0:
            n_sliding = n_sliding_from_pattern(n_layers, pattern)
        elif meta.arch in GGUF_SWA_PATTERN:
            n_sliding = n_sliding_from_pattern(n_layers, GGUF_SWA_PATTERN[meta.arch])
        else:
            n_sliding = n_layers  # a window and no pattern: every layer slides (Mistral v0.1 style)
        if window >= context:
            window, n_sliding = None, 0  # a window as long as the context is full attention

    up = by_name.get("blk.0.ffn_up.weight")
    has_gate = any(n in by_name for n in ("blk.0.ffn_gate.weight", "blk.0.ffn_gate_exps.weight"))
    fused_gate_up = up is not None and int(up.shape[-1]) == 2 * ffn
    gated = has_gate or fused_gate_up or up is None

    n_bytes = sum(t.n_bytes for t in tensors)
    name = meta.raw("general.name")
    # layers with a fixed-size recurrent state (llama.cpp's ssm.* keys): Qwen3-Next's Gated DeltaNet, Granite 4's
    # and Nemotron-H's Mamba-2, Jamba's Mamba are read; other architectures with ssm.* keys (Falcon-H1,
    # Nemotron-H MoE, LFM2, ...) are refused rather than priced as GQA
    ssm = sorted(k for k in meta.fields if k.startswith(f"{meta.arch}.ssm."))
    if ssm and meta.arch not in GGUF_HYBRID_ARCHS:
        raise ConfigError(f"architecture '{meta.arch}' has recurrent-state (SSM / linear-attention) layers that are "
                          f"not modelled from a GGUF header (read: {', '.join(GGUF_HYBRID_ARCHS)})",
                          file=path, field=ssm[0])
    extra = _gguf_mla_args(meta, n_layers, n_experts)
    if meta.arch == "qwen3next":
        extra.update(_gguf_qwen3next_args(meta, path, n_layers, n_experts, expert_ffn))
    elif meta.arch == "granitehybrid":
        extra.update(_gguf_granitehybrid_args(meta, path, n_layers, n_experts))
    elif meta.arch == "jamba":
        extra.update(_gguf_jamba_args(meta, path, n_layers, n_experts, by_name))
    elif meta.arch == "nemotron_h":
        extra.update(_gguf_nemotron_h_args(meta, path, n_layers))
        n_layers, gated = extra.pop("n_layers"), extra.pop("gated_mlp")
    spec_args: dict[str, Any] = dict(
        name=path.stem,
        display_name=name if isinstance(name, str) else path.stem,
        architecture=meta.arch,
        n_layers=n_layers, hidden_size=hidden, n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim,
        intermediate_size=ffn, vocab_size=vocab, max_context=context,
        tie_embeddings="output.weight" not in by_name and bool(tensors),
        gated_mlp=gated, qkv_bias="blk.0.attn_q.bias" in by_name,
        n_experts=n_experts, n_experts_active=n_active,
        moe_intermediate_size=expert_ffn if n_experts else None,
        sliding_window=window, n_sliding_layers=n_sliding,
        sources=[str(path)],
        **{"n_shared_experts": meta.get_int("expert_shared_count", 0) if n_experts else 0, **extra},
    )
    if extra.get("mla"):
        spec_args.update(n_kv_heads=n_heads, head_dim=None)  # MLA caches a latent, not K/V heads
    try:
        quant, how = _gguf_quant(meta, tensors, n_bytes, spec_args)
        return ModelSpec.model_validate({
            **spec_args, "default_quant": quant, "quant_override": quant,
            "weight_bytes_override": n_bytes if n_bytes > 0 else None,
            "notes": f"read from GGUF header; quantization from {how}; {len(tensors)} tensors, {n_bytes} bytes",
        })
    except ValidationError as e:
        raise pydantic_error_to_config_error(e, file=path) from None
