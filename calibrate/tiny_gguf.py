"""A tiny random-weight llama-architecture GGUF that llama.cpp really loads and runs.

Tests of everything that drives llama.cpp (calibration probes, replay against llama-server,
validation) need a model file that loads in milliseconds and decodes in microseconds. This module
writes one with the `gguf` package's `GGUFWriter`: a llama-architecture decoder (RMSNorm, RoPE,
grouped-query attention, SwiGLU FFN) with seeded random weights and a SentencePiece-style
("llama") vocabulary that llama.cpp's SPM tokenizer accepts.

The vocabulary: `<unk>`, `<s>`, `</s>` (ids 0, 1, 2 — llama.cpp's SPM defaults), the 256 byte
tokens `<0x00>` … `<0xFF>` (so any UTF-8 text tokenizes through byte fallback), then printable
ASCII characters, `▁`-prefixed characters and letter pairs, filling up to `n_vocab`. Scores
decrease with the id, so longer pieces listed earlier merge first, as in a SentencePiece model.

Tensor names and shapes follow llama.cpp's `LLM_ARCH_LLAMA` loader (src/llama-model.cpp):
numpy shapes here are (rows, cols) = (out, in); GGUF stores them reversed (ne0 = in).
The same seed and arguments give a byte-identical file.
"""

from __future__ import annotations

import os
import string
import tempfile
from pathlib import Path

import numpy as np

_SPM_SPACE = "\u2581"  # "▁": SentencePiece's word-boundary marker
_N_SPECIAL = 3
_N_BYTE_TOKENS = 256
_MIN_VOCAB = _N_SPECIAL + _N_BYTE_TOKENS + 1

# File-type codes of the `general.file_type` key (gguf.LlamaFileType): 0 = all f32, 1 = mostly f16,
# 7 = mostly q8_0. 1-D tensors (norms) stay f32 in every type, as llama.cpp's quantizer does.
_DTYPES = ("f32", "f16", "q8_0")


def _vocab(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types of a SentencePiece-style vocabulary of exactly `n_vocab`."""
    from gguf import TokenType

    tokens = ["<unk>", "<s>", "</s>"]
    types = [int(TokenType.UNKNOWN), int(TokenType.CONTROL), int(TokenType.CONTROL)]
    tokens += [f"<0x{b:02X}>" for b in range(_N_BYTE_TOKENS)]
    types += [int(TokenType.BYTE)] * _N_BYTE_TOKENS

    letters = string.ascii_lowercase
    pieces: list[str] = [_SPM_SPACE]
    pieces += [_SPM_SPACE + c for c in letters]
    pieces += [c for c in string.ascii_letters + string.digits + string.punctuation]
    pieces += [a + b for a in letters for b in letters]
    pieces += [_SPM_SPACE + a + b for a in letters for b in letters]
    seen = set(tokens)
    for p in pieces:
        if len(tokens) >= n_vocab:
            break
        if p not in seen:
            seen.add(p)
            tokens.append(p)
            types.append(int(TokenType.NORMAL))
    i = 0
    while len(tokens) < n_vocab:  # larger vocabularies: unique filler pieces, never produced by merges
        tokens.append(f"<extra_{i}>")
        types.append(int(TokenType.USER_DEFINED))
        i += 1
    scores = [0.0] * (_N_SPECIAL + _N_BYTE_TOKENS) + [
        -float(k) for k in range(len(tokens) - _N_SPECIAL - _N_BYTE_TOKENS)
    ]
    return tokens, scores, types


def add_decoder_metadata(w, *, n_ctx: int, n_embd: int, n_layers: int, n_ff: int, n_head: int, n_head_kv: int,
                         n_vocab: int, rms_eps: float = 1e-5, rope_base: float | None = None) -> None:
    """The hyper-parameter keys of a RoPE / RMSNorm / GQA decoder (under the writer's architecture
    prefix, e.g. `llama.` or `qwen2.`) and the SentencePiece-style vocabulary of `_vocab`, on a
    `gguf.GGUFWriter`. Shared by this tiny model and benchmarks/gpu/random_gguf.py's full-size ones."""
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(n_embd // n_head)
    if rope_base is not None:
        w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(rms_eps)
    w.add_vocab_size(n_vocab)

    tokens, scores, types = _vocab(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)


def write_tiny_gguf(
    path: str | Path,
    *,
    n_layers: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    n_vocab: int = 512,
    n_ctx: int = 2048,
    dtype: str = "f16",
    seed: int = 0,
) -> Path:
    """Write a tiny random-weight llama GGUF to `path` (atomically) and return the path.

    Defaults give a ~0.2 MB model (2 layers, hidden 64, 4 query / 2 KV heads, FFN 128, vocab 512,
    context 2048) that loads in a few milliseconds. `dtype` is the storage type of the 2-D weight
    matrices: "f32", "f16" or "q8_0" (q8_0 needs n_embd and n_ff to be multiples of 32).
    Weights are N(0, 0.02²) from `numpy.random.default_rng(seed)` — the GPT-2 initialisation
    scale, small enough that activations stay finite through any number of layers.
    """
    import gguf

    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
    if n_vocab < _MIN_VOCAB:
        raise ValueError(f"n_vocab must be >= {_MIN_VOCAB} (3 special + 256 byte tokens + 1), got {n_vocab}")
    if n_embd % n_head or n_head % n_head_kv:
        raise ValueError("n_embd must be a multiple of n_head and n_head a multiple of n_head_kv")
    head_dim = n_embd // n_head
    if head_dim % 2:
        raise ValueError(f"head dimension n_embd/n_head must be even for RoPE, got {head_dim}")
    if dtype == "q8_0" and (n_embd % 32 or n_ff % 32):
        raise ValueError("q8_0 needs n_embd and n_ff to be multiples of 32 (its block size)")

    path = Path(path)
    rng = np.random.default_rng(seed)
    n_embd_kv = head_dim * n_head_kv

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)

    w = gguf.GGUFWriter(None, "llama")
    w.add_name(f"tiny-llama-{n_layers}x{n_embd}-seed{seed}")
    file_type = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                 "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[dtype]
    w.add_file_type(int(file_type))
    add_decoder_metadata(w, n_ctx=n_ctx, n_embd=n_embd, n_layers=n_layers, n_ff=n_ff, n_head=n_head,
                         n_head_kv=n_head_kv, n_vocab=n_vocab)

    def add_matrix(name: str, data: np.ndarray) -> None:
        if dtype == "f32":
            w.add_tensor(name, data)
        elif dtype == "f16":
            w.add_tensor(name, data.astype(np.float16))
        else:
            q = gguf.GGMLQuantizationType.Q8_0
            w.add_tensor(name, gguf.quants.quantize(data, q), raw_dtype=q)

    def add_norm(name: str) -> None:
        w.add_tensor(name, np.ones(n_embd, dtype=np.float32))

    add_matrix("token_embd.weight", matrix(n_vocab, n_embd))
    for i in range(n_layers):
        add_norm(f"blk.{i}.attn_norm.weight")
        add_matrix(f"blk.{i}.attn_q.weight", matrix(n_embd, n_embd))
        add_matrix(f"blk.{i}.attn_k.weight", matrix(n_embd_kv, n_embd))
        add_matrix(f"blk.{i}.attn_v.weight", matrix(n_embd_kv, n_embd))
        add_matrix(f"blk.{i}.attn_output.weight", matrix(n_embd, n_embd))
        add_norm(f"blk.{i}.ffn_norm.weight")
        add_matrix(f"blk.{i}.ffn_gate.weight", matrix(n_ff, n_embd))
        add_matrix(f"blk.{i}.ffn_up.weight", matrix(n_ff, n_embd))
        add_matrix(f"blk.{i}.ffn_down.weight", matrix(n_embd, n_ff))
    add_norm("output_norm.weight")
    add_matrix("output.weight", matrix(n_vocab, n_embd))

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        w.write_header_to_file(Path(tmp))
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
