"""Does llama.cpp's KV-view padding (get_n_kv: used cells rounded up to 256) cost attention on a CPU?

Times one decode token of the tiny random-weight GGUF (calibrate.tiny_gguf, 2 layers, hidden 64) after a context of
c tokens, with flash attention on (llama.cpp's default `auto` resolves to on for the CPU) and off, one thread, the
median of 20 timed tokens per context. Padded views would price every context up to 256 the same and jump past it;
ggml-cpu's flash attention skips masked cells (ops.cpp), so its time should grow with the context itself. Read with
the preset's CPU rule (sim/catalog/engines/llama.cpp.yaml hardware_rules: flash_attention_skips_kv_padding on kind
cpu, so EngineConfig.kv_padding_for gives 0 with flash attention on and the engine's 256 with it off).

    PYTHONPATH=. python benchmarks/llamacpp_cpu_kv_padding.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

CONTEXTS = (32, 120, 200, 250, 262, 330, 500)


def decode_ms(model_path: str, flash_attn: bool) -> dict[int, float]:
    import llama_cpp

    m = llama_cpp.Llama(model_path=model_path, n_ctx=1024, n_batch=512, n_threads=1, flash_attn=flash_attn,
                        verbose=False)
    out = {}
    for c in CONTEXTS:
        m.reset()
        m.eval([1] * c)
        ts = []
        for _ in range(25):
            t0 = time.perf_counter()
            m.eval([2])
            ts.append(time.perf_counter() - t0)
        out[c] = 1e3 * statistics.median(ts[5:])
    return out


def main() -> None:
    from calibrate.tiny_gguf import write_tiny_gguf

    path = str(write_tiny_gguf(Path(tempfile.mkdtemp()) / "tiny.gguf", n_ctx=2048, seed=0))
    print("decode ms per token after c context tokens (tiny GGUF, 1 thread)")
    print("flash attention  " + "  ".join(f"c={c:<4}" for c in CONTEXTS))
    for fa in (True, False):
        ms = decode_ms(path, fa)
        print(f"{'on ' if fa else 'off'}              " + "  ".join(f"{ms[c]:6.3f}" for c in CONTEXTS))


if __name__ == "__main__":
    main()
