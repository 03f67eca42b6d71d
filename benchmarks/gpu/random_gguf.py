"""Full-size random-weight GGUF files for timing llama.cpp on a GPU we are lent but cannot download to.

The GPU machine this project is sometimes lent reaches no network, so real weights cannot travel
there (the limit is 64 MiB). llama.cpp's kernels run the same instructions whatever the weights'
values are, so a file with the real architecture's tensor names, shapes and storage types times like
the real model: the GEMV/GEMM kernels read the same bytes and do the same arithmetic. That is what
this writes, in seconds rather than the minutes `llama-quantize` would take.

Each quantized tensor is random bytes laid out in the type's blocks (ggml/src/ggml-common.h), with
every block's scale fields set to a small finite half so no kernel sees inf/NaN:

    Q4_0  {half d; u8 qs[16]}                                   18 bytes / 32 weights
    Q8_0  {half d; i8 qs[32]}                                   34 bytes / 32 weights
    Q4_K  {half d; half dmin; u8 scales[12]; u8 qs[128]}       144 bytes / 256 weights
    Q5_K  {half d; half dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}  176 bytes / 256 weights
    Q6_K  {u8 ql[128]; u8 qh[64]; i8 scales[16]; half d}       210 bytes / 256 weights
    F16   halves with exponent field 9 (|w| in [2^-6, 2^-5))      2 bytes / weight

Q4_0 stores the output matrix as Q6_K, and Q4_K_M mixes types as `llama_tensor_get_type` (src/llama-quant.cpp) does for a dense
model: output Q6_K; attn_v and ffn_down Q6_K where `use_more_bits(i, n)` (i < n/8, i >= 7n/8, or
(i - n/8) % 3 == 2); a 70B model's other attn_v Q5_K (llama.cpp's LLM_TYPE_70B rule: its 8x smaller
GQA value matrix gets more bits); everything else Q4_K. Norms and biases stay F32.

Shapes are the models' published configs (their Hugging Face config.json). Run:
    python benchmarks/gpu/random_gguf.py OUT_DIR llama-2-7b:q4_0 qwen2.5-7b:q8_0 ...
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from calibrate.tiny_gguf import add_decoder_metadata  # noqa: E402  (hyper-parameters, SPM vocabulary)


@dataclass(frozen=True)
class Arch:
    """A decoder's shape, from its config.json (hidden_size, num_hidden_layers, ...)."""

    gguf_arch: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    n_ctx: int
    rope_base: float
    rms_eps: float
    qkv_bias: bool = False


ARCHS = {
    # meta-llama/Llama-2-7b-hf config.json
    "llama-2-7b": Arch("llama", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0, 1e-5),
    # meta-llama/Llama-3.1-8B config.json (rope scaling factors omitted: no effect on speed)
    "llama-3.1-8b": Arch("llama", 4096, 32, 32, 8, 14336, 128256, 131072, 500000.0, 1e-5),
    # meta-llama/Llama-3.1-70B config.json
    "llama-3.1-70b": Arch("llama", 8192, 80, 64, 8, 28672, 128256, 131072, 500000.0, 1e-5),
    # Qwen/Qwen2.5-7B config.json (q/k/v projections carry biases)
    "qwen2.5-7b": Arch("qwen2", 3584, 28, 28, 4, 18944, 152064, 32768, 1000000.0, 1e-6, qkv_bias=True),
}

# (block weights, block bytes, byte offsets of the f16 scale fields in a block)
_BLOCKS = {
    "q4_0": (32, 18, (0,)),
    "q8_0": (32, 34, (0,)),
    "q4_k": (256, 144, (0, 2)),
    "q5_k": (256, 176, (0, 2)),
    "q6_k": (256, 210, (208,)),
}
_SCALE = np.array([1.0 / 512], dtype=np.float16).view(np.uint8)  # small finite d / dmin: activations stay bounded
_FILE_TYPE = {"f16": 1, "q4_0": 2, "q8_0": 7, "q4_k_m": 15}  # gguf.LlamaFileType values


class _Pool:
    """One random byte pool per storage type; tensors are prefixes of it (block aligned)."""

    def __init__(self, n_bytes: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self._raw = np.frombuffer(rng.bytes(n_bytes), dtype=np.uint8)
        self._typed: dict[str, np.ndarray] = {}

    def typed(self, kind: str) -> np.ndarray:
        if kind not in self._typed:
            buf = self._raw.copy()
            if kind == "f16":
                h = buf.view(np.uint16)
                h &= 0x83FF  # keep sign and mantissa
                h |= 9 << 10  # exponent 9: |w| in [2^-6, 2^-5)
            else:
                _, nbytes, offsets = _BLOCKS[kind]
                blocks = buf[: len(buf) // nbytes * nbytes].reshape(-1, nbytes)
                for off in offsets:
                    blocks[:, off : off + 2] = _SCALE
            self._typed[kind] = buf
        return self._typed[kind]


def _use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _tensor_kind(quant: str, name: str, layer: int, n_layer: int, is_70b: bool = False) -> str:
    if quant == "q4_0" and name == "output":
        return "q6_k"  # llama_tensor_get_type: the output matrix of any k-quantizable type is Q6_K
    if quant in ("f16", "q4_0", "q8_0"):
        return quant
    assert quant == "q4_k_m"
    if name == "output":
        return "q6_k"
    if name in ("attn_v", "ffn_down") and _use_more_bits(layer, n_layer):
        return "q6_k"
    if name == "attn_v" and is_70b:
        return "q5_k"
    return "q4_k"


def write_model(path: Path, model: str, quant: str, pool: _Pool) -> Path:
    import gguf

    a = ARCHS[model]
    head_dim = a.n_embd // a.n_head
    n_kv = head_dim * a.n_head_kv
    w = gguf.GGUFWriter(str(path), a.gguf_arch)
    w.add_name(f"random-{model}-{quant}")
    w.add_file_type(_FILE_TYPE[quant])
    add_decoder_metadata(w, n_ctx=a.n_ctx, n_embd=a.n_embd, n_layers=a.n_layer, n_ff=a.n_ff, n_head=a.n_head,
                         n_head_kv=a.n_head_kv, n_vocab=a.n_vocab, rms_eps=a.rms_eps, rope_base=a.rope_base)

    def matrix(name: str, tensor: str, layer: int, rows: int, cols: int) -> None:
        kind = _tensor_kind(quant, tensor, layer, a.n_layer, is_70b=a.gguf_arch == "llama" and a.n_layer == 80 and a.n_head != a.n_head_kv)
        buf = pool.typed(kind)
        if kind == "f16":
            data = buf[: rows * cols * 2].view(np.float16).reshape(rows, cols)
            w.add_tensor(name, data)
            return
        bw, nbytes, _ = _BLOCKS[kind]
        assert cols % bw == 0, (name, cols, bw)
        row_bytes = cols // bw * nbytes
        data = buf[: rows * row_bytes].reshape(rows, row_bytes)
        w.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType[kind.upper()])

    def vector(name: str, n: int, value: float = 1.0) -> None:
        w.add_tensor(name, np.full(n, value, dtype=np.float32))

    matrix("token_embd.weight", "token_embd", 0, a.n_vocab, a.n_embd)
    for i in range(a.n_layer):
        p = f"blk.{i}."
        vector(p + "attn_norm.weight", a.n_embd)
        matrix(p + "attn_q.weight", "attn_q", i, a.n_embd, a.n_embd)
        matrix(p + "attn_k.weight", "attn_k", i, n_kv, a.n_embd)
        matrix(p + "attn_v.weight", "attn_v", i, n_kv, a.n_embd)
        if a.qkv_bias:
            vector(p + "attn_q.bias", a.n_embd, 0.0)
            vector(p + "attn_k.bias", n_kv, 0.0)
            vector(p + "attn_v.bias", n_kv, 0.0)
        matrix(p + "attn_output.weight", "attn_output", i, a.n_embd, a.n_embd)
        vector(p + "ffn_norm.weight", a.n_embd)
        matrix(p + "ffn_gate.weight", "ffn_gate", i, a.n_ff, a.n_embd)
        matrix(p + "ffn_up.weight", "ffn_up", i, a.n_ff, a.n_embd)
        matrix(p + "ffn_down.weight", "ffn_down", i, a.n_embd, a.n_ff)
    vector("output_norm.weight", a.n_embd)
    matrix("output.weight", "output", 0, a.n_vocab, a.n_embd)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    specs = [s.split(":") for s in argv[1:]]
    # The largest matrix of any requested model, in its widest storage (f16: 2 bytes per weight).
    biggest = max(max(ARCHS[m].n_vocab * ARCHS[m].n_embd, ARCHS[m].n_ff * ARCHS[m].n_embd) for m, _ in specs)
    pool = _Pool(biggest * 2, seed=0)
    for model, quant in specs:
        t0 = time.perf_counter()
        final = out / f"{model}-{quant}.gguf"
        if final.exists():  # a warm machine keeps the files of an earlier call
            print(f"kept {final}", flush=True)
            continue
        tmp = final.with_suffix(".tmp")
        p = write_model(tmp, model, quant, pool).replace(final)
        print(f"wrote {p} ({p.stat().st_size / 2**30:.2f} GiB) in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
