"""Each extension name once (issue 40, item 4): the names presets accept are the engine's registries,
capabilities are asked of the classes, engine options come from one table, and a scheduler, a trace
importer or an engine preset is added with one file (tests/extensions/, the docs/contributing.md recipes).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sim.catalog.engine_config as engine_config
from sim.catalog import policies
from sim.catalog.engine_config import EngineConfig, load_engine
from sim.catalog.engine_options import ENGINE_OPTIONS, SWEEP_ALIASES, overrides_from
from sim.cli import app
from sim.engine import schedulers
from sim.engine.kv import ALLOCATORS, KVAllocator
from sim.engine.schedulers import SCHEDULERS, ChunkedPrefill
from sim.errors import ConfigError
from workloads import importers

ROOT = Path(__file__).resolve().parent.parent
EXT = Path(__file__).resolve().parent / "extensions"
CHAT = str(ROOT / "workloads" / "examples" / "chat.jsonl")


def _runner():
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 keeps stderr apart
        return CliRunner()


# ---- names and capabilities ------------------------------------------------------------------------

def test_the_names_presets_accept_are_the_engines_registries_in_one_order():
    assert tuple(SCHEDULERS) == tuple(policies.SCHEDULERS)  # (with any policy of sim/engine/policies/ after)
    assert tuple(SCHEDULERS)[:len(policies.BUILTIN_SCHEDULERS)] == policies.BUILTIN_SCHEDULERS
    assert tuple(ALLOCATORS) == tuple(policies.KV_ALLOCATORS)
    assert tuple(ALLOCATORS)[:len(policies.BUILTIN_KV_ALLOCATORS)] == policies.BUILTIN_KV_ALLOCATORS
    for name, cls in SCHEDULERS.items():
        assert policies.SCHEDULERS[name].per_slot_context is cls.per_slot_context
    assert [n for n in policies.BUILTIN_SCHEDULERS if SCHEDULERS[n].per_slot_context] == ["slots"]
    # --help lists the shipped policies (it loads no engine: tests/test_cli_lazy_imports.py), in the
    # order a bad name is told them
    assert ENGINE_OPTIONS[0].help == "|".join(policies.BUILTIN_SCHEDULERS)
    with pytest.raises(ConfigError, match="Input should be 'static', 'continuous', 'chunked', 'inflight', 'prefill_first', 'sequential'"):
        load_engine("vllm").with_overrides(scheduler="fifo")
    with pytest.raises(ConfigError, match="Input should be 'contiguous' or 'paged'"):
        load_engine("vllm").with_overrides(kv_allocator="linked")


def test_a_class_cannot_contradict_its_declared_name():
    with pytest.raises(TypeError, match="scheduler 'chunked' is declared as"):
        type("BadChunked", (ChunkedPrefill,), {"name": "chunked", "per_slot_context": True})
    assert SCHEDULERS["chunked"] is ChunkedPrefill and not policies.SCHEDULERS["chunked"].per_slot_context


def test_capabilities_come_from_the_classes():
    assert load_engine("llama.cpp").per_slot_context and not load_engine("vllm").per_slot_context
    assert ALLOCATORS["paged"].block_granular and not ALLOCATORS["contiguous"].block_granular
    # a per-slot policy splits the context among slots whatever its name
    eng = load_engine("llama.cpp").with_overrides(context_size=8192, max_num_seqs=4, context_mode="split")
    assert eng.context_limits(131072) == (8192, 2048)
    assert load_engine("vllm").with_overrides(context_size=8192, max_num_seqs=4).context_limits(131072) == (8192, 8192)


def test_every_option_sets_an_engine_field_and_the_sweep_names_are_derived():
    fields = set(EngineConfig.model_fields)
    for o in ENGINE_OPTIONS:
        assert o.field.split(".")[0] in fields, o
    assert SWEEP_ALIASES == {"kv": "kv_allocator", "max_seqs": "max_num_seqs",
                             "max_batched_tokens": "max_num_batched_tokens", "ubatch": "ubatch_tokens",
                             "mem_fraction": "memory_fraction", "llama_backend": "backend"}
    assert overrides_from({"max_seqs": 8, "spec_draft_fraction": 0.1, "flash_attn": True, "kv": None}) == {
        "max_num_seqs": 8, "speculative": {"draft_cost_fraction": 0.1, "method": "eagle"},
        "flash_attention": True, "flash_attention_architectures": ["*"]}
    assert overrides_from({"spec_draft_model": "llama-3.2-1b"})["speculative"]["method"] == "draft"
    assert overrides_from({"flash_attn": False}) == {"flash_attention": False}


def test_run_and_bench_serve_take_the_same_engine_options():
    from sim.commands.bench import build_parser

    run_help = _runner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).stdout
    bench = build_parser()
    for o in ENGINE_OPTIONS:
        first = o.flags.split("/")[0]
        assert first in run_help, first
        assert bench.parse_args([]).__dict__[o.param] is None
    a = bench.parse_args(["--max-seqs", "8", "--no-prefix-caching", "--scheduler", "static"])
    assert (a.max_seqs, a.prefix_caching, a.scheduler) == (8, False, "static")


def test_kernel_family_comes_from_the_presets_only():
    from calibrate.public_fit import engine_family

    for name in engine_config.available_engines():
        eng = load_engine(name)
        assert engine_family(name) == (eng.kernel_family or eng.name)
    assert engine_family("lmstudio", {"runtime": "llama.cpp (CUDA) 1.50"}) == load_engine("llama.cpp").kernel_family
    assert engine_family("lmstudio", {"runtime": "MLX 0.30"}) == load_engine("mlx").kernel_family
    assert not hasattr(sys.modules["calibrate.public_fit"], "ENGINE_FAMILY")


# ---- one file each ---------------------------------------------------------------------------------

@pytest.fixture
def drop_in(tmp_path, monkeypatch):
    """Put an extension file into a package's plugin folder (a copy of it in tmp) and import the folder
    as the package's loader does; forget what it registered afterwards."""
    added: list[tuple[str, str]] = []
    had_schedulers, had_formats = set(SCHEDULERS), set(importers.READERS)

    def put(file: str, package) -> None:
        folder = tmp_path / package.__name__.replace(".", "_")
        folder.mkdir(exist_ok=True)
        shutil.copy(EXT / file, folder / file)
        monkeypatch.setattr(package, "__path__", [str(folder)])
        added.append((package.__name__, Path(file).stem))

    yield put
    for pkg, mod in added:
        sys.modules.pop(f"{pkg}.{mod}", None)
    for name in set(SCHEDULERS) - had_schedulers:
        del SCHEDULERS[name]
        policies.undeclare(name)
    for name in set(importers.READERS) - had_formats:
        del importers.READERS[name], importers.FORMAT_RULES[name]


def test_a_scheduler_in_one_file_is_accepted_everywhere_and_runs(drop_in):
    from sim.engine import policies as policy_modules

    drop_in("drain_first.py", policy_modules)
    schedulers._import_policy_modules()  # what importing sim.engine.schedulers does
    assert "drain_first" in SCHEDULERS and "drain_first" in policies.SCHEDULERS

    def run(*args):
        res = _runner().invoke(app, ["run", CHAT, "--json", "--max-seqs", "4", *args])
        assert res.exit_code == 0, res.stderr
        return json.loads(res.stdout)

    toy, static, default = run("--scheduler", "drain_first"), run("--scheduler", "static"), run()
    assert toy["config"]["scheduler"] == "drain_first"
    for key in ("ttft_s", "tpot_s", "e2e_s", "throughput", "batch_size"):
        assert toy[key] == static[key], key  # the toy re-implements static batching exactly
    assert toy["ttft_s"] != default["ttft_s"]  # and it is not the preset's own chunked prefill


def test_a_trace_importer_in_one_file_converts_and_is_detected(drop_in, tmp_path):
    from workloads import formats

    drop_in("pipe_format.py", formats)
    importers._import_format_modules()
    src = tmp_path / "calls.txt"
    src.write_text("#pipe\n0.0|100|20\n0.5|2000|7\n2.0|30|300\n")
    assert importers.detect_format(src) == "pipe"
    out = tmp_path / "calls.jsonl"
    res = _runner().invoke(app, ["trace", "convert", str(src), "-o", str(out)])
    assert res.exit_code == 0, res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["arrival_s"], r["prompt_tokens"], r["output_tokens"]) for r in rows] == [
        (0.0, 100, 20), (0.5, 2000, 7), (2.0, 30, 300)]
    src.write_text("#pipe\n0.0|100\n")
    res = _runner().invoke(app, ["trace", "convert", str(src), "-o", str(out)])
    assert res.exit_code == 2 and f"{src}:2: line: expected seconds|prompt|output" in res.stderr


def test_an_engine_preset_in_one_file_is_listed_and_runs(drop_in, tmp_path, monkeypatch):
    from sim.engine import policies as policy_modules

    drop_in("drain_first.py", policy_modules)  # the preset names the one-file scheduler above
    schedulers._import_policy_modules()
    presets = tmp_path / "engines"
    shutil.copytree(ROOT / "sim" / "catalog" / "engines", presets)
    shutil.copy(EXT / "toy-engine.yaml", presets / "toy-engine.yaml")
    monkeypatch.setattr(engine_config, "_PRESETS_DIR", presets)
    assert "toy-engine" in engine_config.available_engines()
    res = _runner().invoke(app, ["run", CHAT, "--json", "--engine", "toy-engine,vllm"])
    assert res.exit_code == 0, res.stderr
    runs = json.loads(res.stdout)["runs"]
    assert [r["config"]["engine"] for r in runs] == ["toy-engine", "vllm"]
    assert runs[0]["config"]["scheduler"] == "drain_first" and runs[0]["config"]["max_num_seqs"] == 4


def test_trace_convert_help_lists_the_shipped_formats():
    # `infersim trace --help` must not import the readers (pandas; tests/test_cli_lazy_imports.py), so
    # its list is text: it must stay the registry's (the shipped formats; workloads/formats/ ones follow)
    import inspect

    from workloads.cli import convert_cmd

    text = inspect.signature(convert_cmd).parameters["fmt"].default.help
    assert text == "|".join(list(importers.READERS)[:6]) + " (detected if not given)"
    assert list(importers.READERS)[:6] == ["azure", "burstgpt", "mooncake", "sharegpt", "vllm-json", "infersim"]
