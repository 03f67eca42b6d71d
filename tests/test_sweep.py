"""Sweep files: grid expansion, explicit lists, overrides, stable keys and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError
from sim.plan.sweep import SweepFile, expand, load_sweep

REPO = Path(__file__).resolve().parents[1]
MINIMAL = """\
trace: workloads/examples/chat.jsonl
grid:
  hw: [dgx-spark, rtx-4090]
  engine: [vllm, ollama]
  concurrency: [1, 4]
"""


def _trace(path: Path, n: int = 5) -> Path:
    path.write_text("".join(json.dumps({"arrival_s": i * 0.5, "prompt_tokens": 100 + i, "output_tokens": 20})
                            + "\n" for i in range(n)))
    return path


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "sweep.yaml"
    p.write_text(text)
    return p


def test_minimal_sweep_file_from_the_issue_expands_to_eight_combinations(monkeypatch):
    monkeypatch.chdir(REPO)
    if not (REPO / "workloads/examples/chat.jsonl").exists():
        pytest.skip("workloads/examples/chat.jsonl not built yet")
    path = REPO / "tests" / "_minimal_sweep.yaml"
    try:
        path.write_text(MINIMAL)
        sweep = load_sweep(path)
    finally:
        path.unlink()
    combos = sweep.combinations
    assert len(combos) == 8
    assert {(c.hw, c.engine, c.concurrency) for c in combos} == {
        (h, e, n) for h in ("dgx-spark", "rtx-4090") for e in ("vllm", "ollama") for n in (1, 4)}
    # last grid key varies fastest, as documented
    assert [c.concurrency for c in combos[:2]] == [1, 4]
    assert [c.index for c in combos] == list(range(8))
    assert len({c.key for c in combos}) == 8


def test_runs_list_is_crossed_with_the_grid_and_overrides_fixed_fields(tmp_path):
    _trace(tmp_path / "t.jsonl")
    sweep = load_sweep(_write(tmp_path, """\
trace: t.jsonl
model: llama-3.1-8b
engine: vllm
runs:
  - {hw: h100-sxm}
  - {hw: dgx-spark, engine: llama.cpp, quant: q4_k_m}
grid:
  rate_scale: [1, 2, 4]
"""))
    combos = sweep.combinations
    assert len(combos) == 2 * 3
    assert [(c.hw, c.engine, c.quant, c.rate_scale) for c in combos] == [
        ("h100-sxm", "vllm", None, 1), ("h100-sxm", "vllm", None, 2), ("h100-sxm", "vllm", None, 4),
        ("dgx-spark", "llama.cpp", "q4_k_m", 1), ("dgx-spark", "llama.cpp", "q4_k_m", 2),
        ("dgx-spark", "llama.cpp", "q4_k_m", 4)]
    assert all(c.model == "llama-3.1-8b" for c in combos)


def test_engine_overrides_in_grid_use_flag_aliases_and_merge_with_fixed_overrides(tmp_path):
    _trace(tmp_path / "t.jsonl")
    sweep = load_sweep(_write(tmp_path, """\
trace: t.jsonl
hw: h100-sxm
overrides: {block_size: 32}
grid:
  kv: [paged, contiguous]
  max_seqs: [4, 8]
  scheduler: [continuous]
"""))
    assert [c.overrides for c in sweep.combinations] == [
        {"block_size": 32, "kv_allocator": k, "max_num_seqs": m, "scheduler": "continuous"}
        for k in ("paged", "contiguous") for m in (4, 8)]


def test_ubatch_is_a_grid_dimension_under_its_flag_name(tmp_path):
    _trace(tmp_path / "t.jsonl")
    sweep = load_sweep(_write(tmp_path, """\
trace: t.jsonl
hw: rtx-4090
engine: llama.cpp
grid:
  ubatch: [128, 512]
"""))
    assert [c.overrides for c in sweep.combinations] == [{"ubatch_tokens": 128}, {"ubatch_tokens": 512}]


def test_a_runs_entry_adds_its_overrides_to_the_fixed_ones(tmp_path):
    _trace(tmp_path / "t.jsonl")
    sweep = load_sweep(_write(tmp_path, """\
trace: t.jsonl
hw: h100-sxm
overrides: {block_size: 32, max_num_seqs: 8}
runs:
  - {}
  - {overrides: {max_num_seqs: 64}, scheduler: static}
"""))
    assert [c.overrides for c in sweep.combinations] == [
        {"block_size": 32, "max_num_seqs": 8},
        {"block_size": 32, "max_num_seqs": 64, "scheduler": "static"}]


def test_trace_can_be_a_grid_dimension_and_relative_paths_resolve_next_to_the_sweep_file(tmp_path, monkeypatch):
    _trace(tmp_path / "a.jsonl")
    _trace(tmp_path / "b.jsonl", n=7)
    monkeypatch.chdir(REPO)  # not the sweep file's folder
    sweep = load_sweep(_write(tmp_path, "hw: h100-sxm\ngrid:\n  trace: [a.jsonl, b.jsonl]\n"))
    assert [Path(c.trace).name for c in sweep.combinations] == ["a.jsonl", "b.jsonl"]
    assert sweep.combinations[0].trace_sha256 != sweep.combinations[1].trace_sha256


def test_key_is_stable_across_loads_and_changes_with_the_trace_bytes(tmp_path):
    trace = _trace(tmp_path / "t.jsonl")
    path = _write(tmp_path, "trace: t.jsonl\nhw: h100-sxm\ngrid:\n  concurrency: [1, 2]\n")
    first = [c.key for c in load_sweep(path).combinations]
    assert first == [c.key for c in load_sweep(path).combinations]
    from sim.plan import sweep as sweep_mod

    _trace(trace, n=6)
    sweep_mod._file_sha256.cache_clear()
    assert set(first).isdisjoint(c.key for c in load_sweep(path).combinations)


@pytest.mark.parametrize(("text", "line", "field", "problem"), [
    ("trace: t.jsonl\ngrid:\n  hw: [h100-sxm]\n  schedular: [static]\n", 4, "grid.schedular", "did you mean scheduler"),
    ("trace: missing.jsonl\nhw: h100-sxm\n", 1, "trace", "trace file not found"),
    ("trace: t.jsonl\nhw: h100-sxm\ngrid:\n  concurrency: [1, 0]\n", 4, "grid.concurrency", "greater than 0"),
    ("trace: t.jsonl\nhw: h100-sxm\nconcurrency: 2\ngrid:\n  rate_scale: [1]\n", 5, "grid.rate_scale", "one load"),
    ("trace: t.jsonl\ngrid:\n  engine: [vllm]\n", None, "hw", "no hardware"),
    ("trace: t.jsonl\nhw: h100-sxm\ngrid:\n  concurrency: []\n", 4, "grid.concurrency", "empty list"),
    ("trace: t.jsonl\nhw: h100-sxm\ngird:\n  concurrency: [1]\n", 3, "gird", "unknown field"),
])
def test_bad_sweep_files_raise_one_error_naming_file_line_and_field(tmp_path, text, line, field, problem):
    _trace(tmp_path / "t.jsonl")
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_sweep(path)
    err = info.value
    assert err.file == str(path)
    assert err.field == field
    assert problem in err.problem
    if line is not None:
        assert err.line == line


def test_invalid_yaml_names_the_line(tmp_path):
    path = _write(tmp_path, "trace: t.jsonl\ngrid: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_sweep(path)
    assert "invalid YAML" in info.value.problem and info.value.line is not None


@settings(deadline=None, max_examples=25)
@given(st.dictionaries(st.sampled_from(["hw", "engine", "concurrency", "max_num_seqs", "block_size"]),
                       st.lists(st.integers(1, 64), min_size=1, max_size=3, unique=True), max_size=4),
       st.integers(0, 3))
def test_combination_count_is_runs_times_product_of_grid_lengths(tmp_path_factory, grid, n_runs):
    trace = _trace(tmp_path_factory.mktemp("t") / "t.jsonl")
    grid = {k: ([f"hw{v}" for v in vals] if k in ("hw", "engine") else vals) for k, vals in grid.items()}
    runs = [{"seed": i} for i in range(n_runs)]
    doc = SweepFile(trace=str(trace), hw="h100-sxm", grid=grid, runs=runs)
    combos = expand(doc).combinations
    expected = max(n_runs, 1)
    for vals in grid.values():
        expected *= len(vals)
    assert len(combos) == expected
    assert len({c.key for c in combos}) == expected  # every combination is distinct and keyed apart


def test_a_generator_spec_as_trace_is_generated_once_into_the_cache_folder(tmp_path):
    (tmp_path / "gen.yaml").write_text("seed: 3\nrequests: 12\narrival: {rate_per_s: 4}\n"
                                       "prompt: {dist: fixed, value: 64}\noutput: {dist: fixed, value: 8}\n")
    path = _write(tmp_path, "trace: gen.yaml\nhw: h100-sxm\ngrid:\n  concurrency: [1, 2]\n")
    cache = tmp_path / "cache"
    first = load_sweep(path, cache_dir=cache).combinations
    generated = Path(first[0].trace)
    assert generated.parent == cache and generated.suffix == ".jsonl"
    lines = generated.read_text().splitlines()
    assert len(lines) == 12 and all(json.loads(x)["prompt_tokens"] == 64 for x in lines)
    # seeded: loading again reuses the same file and gives the same keys
    assert [c.key for c in load_sweep(path, cache_dir=cache).combinations] == [c.key for c in first]
