"""benchmarks/gpu: the random-weight GGUF writer (real shapes and storage types) and the log converter."""

from __future__ import annotations

import csv
import io
import sys
from collections import Counter
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from tiny_model import run_llama_child

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
import log_to_corpus  # noqa: E402
import random_gguf  # noqa: E402

TINY = random_gguf.Arch("llama", 512, 16, 8, 2, 1024, 1000, 512, 1e4, 1e-5)
TINY_QWEN = random_gguf.Arch("qwen2", 512, 8, 8, 2, 1024, 1200, 512, 1e6, 1e-6, qkv_bias=True)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = tmp_path_factory.mktemp("rg")
    saved = dict(random_gguf.ARCHS)
    random_gguf.ARCHS.update(tiny=TINY, tinyq=TINY_QWEN)
    try:
        with redirect_stdout(io.StringIO()):
            random_gguf.main([str(out), "tiny:q4_0", "tiny:q8_0", "tiny:q4_k_m", "tiny:f16", "tinyq:q4_k_m"])
    finally:
        random_gguf.ARCHS.clear()
        random_gguf.ARCHS.update(saved)
    return out


def _types(path: Path) -> Counter:
    import gguf

    return Counter((t.name.rsplit(".", 2)[-2], t.tensor_type.name) for t in gguf.GGUFReader(path).tensors)


def test_q4_k_m_mixes_types_as_llama_quantize_does(models):
    t = _types(models / "tiny-q4_k_m.gguf")
    # 16 layers: use_more_bits holds for i < 2, i >= 14 and (i - 2) % 3 == 2 -> 8 layers get Q6_K
    assert t[("attn_v", "Q6_K")] == 8 and t[("attn_v", "Q4_K")] == 8
    assert t[("ffn_down", "Q6_K")] == 8 and t[("ffn_down", "Q4_K")] == 8
    assert t[("attn_q", "Q4_K")] == 16 and t[("output", "Q6_K")] == 1 and t[("token_embd", "Q4_K")] == 1
    assert t[("attn_norm", "F32")] == 16
    q4 = _types(models / "tiny-q4_0.gguf")
    assert q4[("output", "Q6_K")] == 1 and q4[("attn_q", "Q4_0")] == 16
    assert _types(models / "tinyq-q4_k_m.gguf")[("attn_q", "F32")] == 8  # qwen2's q/k/v biases


def test_random_weight_files_load_and_decode_in_llama_cpp(models):
    """Each file really runs through llama.cpp (in a child process: an abort must not kill pytest)."""
    code = (
        "import sys, llama_cpp\n"
        "for p in sys.argv[1:]:\n"
        "    m = llama_cpp.Llama(p, n_ctx=128, verbose=False)\n"
        "    m.eval([1, 5, 7, 9])\n"
        "    print(p.rsplit('/', 1)[-1], m.n_vocab())\n"
    )
    files = sorted(str(p) for p in models.glob("*.gguf"))
    res = run_llama_child(code, *files)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == [w for p in files for w in (Path(p).name, "1200" if "tinyq" in p else "1000")]


def test_the_committed_rows_are_what_the_converter_makes_of_the_committed_log():
    made = []
    for run in ("h200-2026-12-04", "h200-2026-12-04b"):
        log = ROOT / "benchmarks" / "gpu" / run / "h200_llamacpp.log"
        made += log_to_corpus.rows_from_log(log, f"repo:{log.relative_to(ROOT).as_posix()}")
    with open(ROOT / "benchmarks" / "public" / "measured_here.csv", newline="") as f:
        committed = list(csv.DictReader(f))
    assert [{k: str(v) for k, v in r.items()} for r in made] == committed
    assert len(made) == 77  # 60 + 17; the second run's last test was cut at its time limit after one row
    for r in made:  # every value is a cell of its printed table line
        assert r["value"] in r["as_printed"]
