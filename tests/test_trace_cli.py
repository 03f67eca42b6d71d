"""`infersim trace ...` end to end: CliRunner for each command, one real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from paths import INFERSIM
from typer.testing import CliRunner

from sim.cli import app
from workloads.trace import load_trace, trace_schema

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


def run(*args: str):
    return CliRunner().invoke(app, ["trace", *args])


def _write(tmp_path: Path, *lines: str) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("lines, expected", [
    (['{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2}', '{"arrival_s": 1, "prompt_tokens": 5'],
     ":2: invalid JSON: "),
    (['{"arrival_s": 0, "prompt_tokens": 5}'], ":1: output_tokens: Field required"),
    (['{"arrival_s": 0, "prompt_tokens": 5, "output_token": 2}'],
     ":1: output_token: unknown field (did you mean 'output_tokens'?)"),
    (['{"arrival_s": 0, "prompt_tokens": -5, "output_tokens": 2}'],
     ":1: prompt_tokens: Input should be greater than or equal to 1"),
    (['{"arrival_s": 3, "prompt_tokens": 5, "output_tokens": 2}', '{"arrival_s": 1, "prompt_tokens": 5, "output_tokens": 2}'],
     ":2: arrival_s: 1 is before the previous request's 3"),
])
def test_validate_reports_one_line_and_exits_2(tmp_path, lines, expected):
    p = _write(tmp_path, *lines)
    res = run("validate", str(p))
    assert res.exit_code == 2
    out = res.stderr if hasattr(res, "stderr") else res.output
    assert out.startswith(f"error: {p}{expected}")
    assert out.count("\n") == 1 and "Traceback" not in out


def test_validate_sort_accepts_out_of_order(tmp_path):
    p = _write(tmp_path, '{"arrival_s": 3, "prompt_tokens": 5, "output_tokens": 2}',
               '{"arrival_s": 1, "prompt_tokens": 5, "output_tokens": 2}')
    res = run("validate", str(p), "--sort")
    assert res.exit_code == 0 and res.stdout == "ok: 2 requests, last arrival 3 s\n"


def test_schema_command_prints_the_models_schema(tmp_path):
    res = run("schema")
    assert res.exit_code == 0 and json.loads(res.stdout) == trace_schema()
    out = tmp_path / "s.json"
    assert run("schema", "-o", str(out)).exit_code == 0
    assert json.loads(out.read_text()) == trace_schema()


def test_shipped_schema_file_is_current():
    """workloads/trace.schema.json is what `infersim trace schema` prints (regenerate it if this fails)."""
    assert json.loads((ROOT / "workloads" / "trace.schema.json").read_text()) == trace_schema()


def test_gen_is_deterministic_and_follows_the_options(tmp_path):
    args = ["gen", "-n", "300", "--arrival", "gamma", "--burstiness", "0.5", "--rate", "4",
            "--prompt-tokens", "lognormal:800,400", "--output-tokens", "uniform:10,100", "--seed", "7"]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert run(*args, "-o", str(a)).exit_code == 0
    assert run(*args, "-o", str(b)).exit_code == 0
    assert a.read_bytes() == b.read_bytes()
    reqs = load_trace(a)
    assert len(reqs) == 300 and all(10 <= r.output_tokens <= 100 for r in reqs)


def test_gen_spec_file_with_cli_override(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("requests: 50\nseed: 3\narrival:\n  schedule:\n    - {start_s: 0, rate_per_s: 1}\n"
                    "    - {start_s: 10, rate_per_s: 20}\nprompt: {dist: fixed, value: 64}\n")
    out = tmp_path / "o.jsonl"
    res = run("gen", "--spec", str(spec), "-o", str(out), "--requests", "80")
    assert res.exit_code == 0, res.output
    reqs = load_trace(out)
    assert len(reqs) == 80 and {r.prompt_tokens for r in reqs} == {64}


@pytest.mark.parametrize("args, message", [
    (["-n", "5"], "error: --rate: give --rate (requests per second), or a schedule/daily curve in --spec"),
    (["-n", "5", "--rate", "1", "--prompt-tokens", "zipf:1"], "error: --prompt-tokens: unknown distribution 'zipf'"),
    (["-n", "5", "--rate", "1", "--think-s", "5"], "error: --think-s: think time needs --arrival closed or --turns"),
    (["--rate", "1"], "error: give requests or duration_s"),
])
def test_gen_bad_options_are_one_line_errors(tmp_path, args, message):
    res = run("gen", "-o", str(tmp_path / "x.jsonl"), *args)
    assert res.exit_code == 2
    assert res.stderr.startswith(message)
    assert not (tmp_path / "x.jsonl").exists()


def test_gen_bad_spec_names_the_file(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("requests: 5\narrival: {rate_per_s: 1}\nprompt: {dist: fixed, valu: 3}\n")
    res = run("gen", "--spec", str(spec), "-o", str(tmp_path / "x.jsonl"))
    assert res.exit_code == 2 and res.stderr.startswith(f"error: {spec}: prompt.fixed.valu: unknown field")


def test_convert_then_stats_json(tmp_path):
    out = tmp_path / "az.jsonl"
    res = run("convert", str(DATA / "azure_code_excerpt.csv"), "-o", str(out), "--sample", "20", "--seed", "1")
    assert res.exit_code == 0, res.output
    assert "wrote 20 requests" in res.stderr and "format azure" in res.stderr
    stats = run("stats", str(out), "--json")
    d = json.loads(stats.stdout)
    reqs = load_trace(out)
    assert d["requests"] == 20 and d["duration_s"] == pytest.approx(reqs[-1].arrival_s)
    assert d["prompt_tokens"]["max"] == max(r.prompt_tokens for r in reqs)


def test_convert_labels_estimated_tokens(tmp_path):
    out = tmp_path / "sg.jsonl"
    res = run("convert", str(DATA / "sharegpt_synthetic.json"), "-o", str(out))
    assert res.exit_code == 0 and "token counts are ESTIMATES" in res.stderr
    assert all(json.loads(x)["tokens_estimated"] is True for x in out.read_text().splitlines())
    text = run("stats", str(out)).stdout
    assert "ESTIMATED" in text


def test_stats_html_writes_a_page(tmp_path):
    html = tmp_path / "s.html"
    res = run("stats", str(ROOT / "workloads" / "examples" / "bursty.jsonl"), "--html", str(html))
    assert res.exit_code == 0 and "requests        300" in res.stdout
    assert html.stat().st_size > 1_000_000


def test_real_subprocess_exit_code_and_one_line_error(tmp_path):
    bad = _write(tmp_path, '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2, "prompt_tokns": 4}')
    exe = [INFERSIM]
    proc = subprocess.run([*exe, "trace", "stats", str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == f"error: {bad}:1: prompt_tokns: unknown field (did you mean 'prompt_tokens'?)\n"
    ok = subprocess.run([*exe, "trace", "stats", str(ROOT / "workloads" / "examples" / "n-users.jsonl"), "--json"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and json.loads(ok.stdout)["output_tokens"]["p50"] == 512


SHARED = Path("/work/shared/traces")


@pytest.mark.parametrize("name", ["chat", "bursty", "n-users", "chat-sessions"])
def test_shipped_examples_are_what_make_examples_sh_generates(tmp_path, name):
    """Each example is regenerated from its line in make_examples.sh and compared byte for byte."""
    script = (ROOT / "workloads" / "examples" / "make_examples.sh").read_text()
    joined = script.replace("\\\n", " ")
    line = next(x for x in joined.splitlines() if f"$E/{name}.jsonl" in x)
    args = line.split('"$I" trace ', 1)[1].split()
    if any("$T" in a for a in args) and not SHARED.is_dir():
        pytest.skip("needs the public traces in /work/shared/traces")
    out = tmp_path / f"{name}.jsonl"
    args = [str(out) if a == f"$E/{name}.jsonl" else a.replace('"$T', str(SHARED)).replace('"', "") for a in args]
    res = run(*args)
    assert res.exit_code == 0, res.output
    assert out.read_bytes() == (ROOT / "workloads" / "examples" / f"{name}.jsonl").read_bytes()


def test_gzip_output_round_trips(tmp_path):
    out = tmp_path / "g.jsonl.gz"
    assert run("gen", "-o", str(out), "-n", "20", "--rate", "2").exit_code == 0
    assert len(load_trace(out)) == 20
