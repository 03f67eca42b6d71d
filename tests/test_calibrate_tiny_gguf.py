"""The tiny GGUF that tests of real llama.cpp runs use: deterministic, and llama.cpp really runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tiny_model import requires_llama_cpp, run_llama_child

from calibrate.tiny_gguf import write_tiny_gguf
from sim.catalog.lookup import get_model


def test_same_seed_gives_the_same_bytes_and_another_seed_other_weights(tmp_path):
    a = write_tiny_gguf(tmp_path / "a.gguf", seed=3).read_bytes()
    b = write_tiny_gguf(tmp_path / "b.gguf", seed=3).read_bytes()
    c = write_tiny_gguf(tmp_path / "c.gguf", seed=4).read_bytes()
    assert a == b and a != c and len(a) == len(c)


@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0"])
def test_header_describes_the_requested_architecture(tmp_path, dtype):
    spec = get_model(str(write_tiny_gguf(tmp_path / "m.gguf", n_layers=3, n_embd=64, n_head=4, n_head_kv=1,
                                         n_ff=96, n_vocab=300, n_ctx=512, dtype=dtype)))
    assert (spec.n_layers, spec.hidden_size, spec.n_heads, spec.n_kv_heads) == (3, 64, 4, 1)
    assert (spec.intermediate_size, spec.vocab_size, spec.max_context) == (96, 300, 512)


@pytest.mark.parametrize("bad", [dict(n_vocab=100), dict(n_embd=60, n_head=8), dict(dtype="q4_k")])
def test_impossible_shapes_are_refused(tmp_path, bad):
    with pytest.raises(ValueError):
        write_tiny_gguf(tmp_path / "m.gguf", **bad)


@requires_llama_cpp
@pytest.mark.parametrize("dtype", ["f16", "q8_0"])
def test_llama_cpp_loads_tokenizes_and_generates(tmp_path, dtype):
    """In a child process (`run_llama_child`): an abort in llama.cpp must not kill pytest."""
    path = write_tiny_gguf(tmp_path / "m.gguf", dtype=dtype, n_ctx=256)
    code = (
        "import json, sys, llama_cpp\n"
        "llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, n_threads=1, verbose=False, seed=0)\n"
        "tokens = llm.tokenize(b'Hello world, 123!')\n"
        "out = llm('Hello', max_tokens=6, temperature=0.0)\n"
        "print(json.dumps({'tokens': tokens, 'completion_tokens': out['usage']['completion_tokens']}))\n"
    )
    res = run_llama_child(code, str(path))
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["tokens"][0] == 1 and len(got["tokens"]) > 5  # BOS, then pieces / byte fallback
    assert got["completion_tokens"] >= 1


@requires_llama_cpp
def test_the_prelude_turns_llamas_extra_weight_buffers_off_and_the_file_still_runs(tmp_path):
    from calibrate.llama_buffers import NO_EXTRA_BUFTS_PRELUDE, extra_bufts_crash

    path = write_tiny_gguf(tmp_path / "m.gguf", dtype="f16", n_ctx=256)
    code = (
        "import sys, llama_cpp\n"
        "m = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_threads=1, verbose=False)\n"
        "m.eval([1, 5, 7])\n"
        "print(llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts)\n"
    )
    on = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    off = subprocess.run([sys.executable, "-c", NO_EXTRA_BUFTS_PRELUDE + code, str(path)], capture_output=True,
                         text=True, timeout=120)
    assert (on.returncode, off.returncode) == (0, 0), off.stderr[-2000:]
    assert (on.stdout.split()[-1], off.stdout.split()[-1]) == ("True", "False")
    assert extra_bufts_crash(path) == ""  # f16 weights are not repacked: nothing crashes


@requires_llama_cpp
def test_the_server_runs_without_extra_weight_buffers_where_they_crash(tmp_path, monkeypatch):
    """The server's launch path for a machine whose extra weight buffers crash (forced here)."""
    import httpx

    import calibrate.replay.llama_cpp_server as srv

    monkeypatch.setattr(srv, "extra_bufts_crash", lambda path: "SIGSEGV")
    path = write_tiny_gguf(tmp_path / "m.gguf", dtype="f16", n_ctx=256)
    log = tmp_path / "server.log"
    with srv.llama_cpp_server(path, n_ctx=256, extra_args=("--n_threads", "1"), log_path=log) as url:
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "Hello", "max_tokens": 3, "temperature": 0},
                       timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
    first = log.read_text(errors="replace").splitlines()[0]
    assert first == "extra weight buffers off: a decode crashed with them on (SIGSEGV)"
