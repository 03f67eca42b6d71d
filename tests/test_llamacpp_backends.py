"""llama.cpp's Vulkan and ROCm/HIP backends as their own kernel families (issue 39).

A corpus row's `backend` (vulkan, rocm) puts it in its own family (ggml-vulkan, ggml-rocm) beside the
CUDA/Metal rows (ggml); the fit ships an entry per family; a run picks the family from the engine's
`backend` (`--llama-backend`), else the device's usual one (`default_backend`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from calibrate.public.params import engine_family
from sim.catalog.engine_config import backend_family, base_family, default_backend, load_engine
from sim.catalog.hardware import load_profile
from sim.cost.params import CostParams
from sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_a_rows_backend_names_its_family():
    assert engine_family("llama.cpp", {}, "vulkan") == "ggml-vulkan"
    assert engine_family("llama.cpp", {}, "rocm") == "ggml-rocm"
    assert engine_family("llama.cpp", {}, "cuda") == engine_family("llama.cpp", {}, "metal") == "ggml"
    assert engine_family("ollama", {}, "rocm") == "ggml-rocm"          # any ggml engine
    assert engine_family("vllm", {}, "rocm") == "torch"                # not a llama.cpp backend
    assert base_family("ggml-vulkan") == base_family("ggml") == "ggml" and base_family("torch") == "torch"
    assert backend_family(None) == "ggml"


def test_the_engine_picks_the_devices_usual_backend_or_the_one_asked_for():
    eng = load_engine("llama.cpp")
    halo, mi300x, h100, m4 = (load_profile(n) for n in ("ryzen-ai-max-395", "mi300x", "h100-sxm", "apple-m4-max"))
    assert [default_backend(h) for h in (halo, mi300x, h100, m4)] == ["vulkan", "rocm", "cuda", "metal"]
    assert eng.efficiency_family(halo) == "ggml-vulkan" and eng.efficiency_family(mi300x) == "ggml-rocm"
    assert eng.efficiency_family(h100) == eng.efficiency_family(m4) == "ggml"
    assert eng.with_overrides(backend="rocm").efficiency_family(halo) == "ggml-rocm"
    with pytest.raises(ConfigError) as e:
        eng.with_overrides(backend="cuda").efficiency_family(halo)
    assert e.value.field == "--llama-backend" and "vulkan" in str(e.value)
    with pytest.raises(ConfigError):
        load_engine("vllm").with_overrides(backend="vulkan")
    # Vulkan on an NVIDIA part has no entry of its own: the CUDA fit prices it
    assert h100.efficiency_for("llama.cpp", "ggml-vulkan") is h100.engine_efficiency["ggml"]


def test_strix_halo_ships_a_fitted_entry_per_backend_and_they_price_differently():
    from calibrate.public_corpus import load_corpus

    halo = load_profile("ryzen-ai-max-395")
    rows = {r.row_id: r for r in load_corpus()}
    for family, backend in (("ggml-vulkan", "vulkan"), ("ggml-rocm", "rocm")):
        e = halo.engine_efficiency[family]
        assert e.corpus_rows and not e.transferred_from, family
        assert all(rows[r].backend == backend and rows[r].device == "ryzen-ai-max-395" for r in e.corpus_rows)
    eng = load_engine("llama.cpp")
    vk = CostParams.from_profile(halo, "q4_0", eng)
    rocm = CostParams.from_profile(halo, "q4_0", eng.with_overrides(backend="rocm"))
    assert vk != rocm
    # the AMD datacenter parts ship both backends too (transferred), and no plain ggml entry
    for name in ("mi300x", "mi355x", "mi350x"):
        assert {"ggml-rocm", "ggml-vulkan"} <= set(load_profile(name).engine_efficiency), name
        assert "ggml" not in load_profile(name).engine_efficiency, name


def _run(*args):
    return subprocess.run([sys.executable, "-c", "from sim.cli import console_main; console_main()", "run",
                           "workloads/examples/chat.jsonl", "--hw", "ryzen-ai-max-395", "--model", "llama-3.1-8b",
                           "--engine", "llama.cpp", *args], capture_output=True, text=True, cwd=ROOT)


def test_run_takes_a_backend_and_refuses_one_the_device_cannot_run():
    vk, rocm = _run("--llama-backend", "vulkan"), _run("--llama-backend", "rocm")
    assert vk.returncode == 0 and rocm.returncode == 0, vk.stderr + rocm.stderr
    assert vk.stdout != rocm.stdout
    bad = _run("--llama-backend", "cuda")
    assert bad.returncode == 2 and "--llama-backend" in bad.stderr and "Traceback" not in bad.stderr
