"""One engine resolver (sim.catalog.deployment.engine_for) for every command that prices a model on a machine:
`validate`, `fit --speed` and `recommend` price the engine `run` resolves (device rules, the checkpoint's KV
dtype, weight-format rules), and no other module applies the checkpoint steps itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from calibrate.replay.records import ReplayResult, RequestRecord
from sim.api import make_spec, resolve
from sim.catalog import cache
from sim.catalog.hardware import load_profile
from sim.catalog.models import load_catalog
from sim.catalog.quant import get_quant
from sim.cli import app
from sim.cost.roofline import CostModel
from workloads.request import Request

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def run_engine(hw: str, model: str, quant: str | None, engine: str, **overrides):
    """The engine `infersim run` simulates for this deployment."""
    return resolve(make_spec(trace="unused.jsonl", hw=hw, model=model, quant=quant, engine=engine,
                             overrides=overrides))[1]


def _served(reqs) -> ReplayResult:
    """A made-up measurement: every request completed, one token every 20 ms after 100 ms."""
    recs = []
    for r in reqs:
        t = tuple(r.arrival_s + 0.1 + 0.02 * k for k in range(r.output_tokens))
        recs.append(RequestRecord(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens, t, r.output_tokens,
                                  r.arrival_s, t[-1]))
    return ReplayResult(tuple(recs), {"target": "endpoint", "server": "test"})


@pytest.mark.parametrize("engine,quant,field,want", [
    ("vllm", "bf16", "max_num_seqs", 1024),  # vLLM's H100-class device rule (PR #17885); the bare preset has 256
    ("trtllm", "fp8", "kv_dtype", "fp8"),   # TensorRT-LLM keeps an FP8 KV cache for an FP8 checkpoint
])
def test_validate_simulates_the_engine_run_resolves(engine, quant, field, want):
    """`validate --endpoint` simulated the bare preset (no device rules, no checkpoint KV dtype); it now
    simulates what `run` does for the same --hw/--model/--quant/--engine."""
    from calibrate.replay.validate import run_validation

    reqs = [Request(str(i), 0.0, 200 + 10 * i, 12, 12) for i in range(3)]
    rep = run_validation(reqs, hw="h100-sxm", engine=engine, model="llama-3.1-8b", quant=quant, concurrency=2,
                         replay=_served, speed_margin=0)
    ran = run_engine("h100-sxm", "llama-3.1-8b", quant, engine)
    assert getattr(rep.engine, field) == want == getattr(ran, field)
    assert rep.engine.model_dump() == ran.model_dump()
    # user overrides still win over the resolved engine
    rep = run_validation(reqs, hw="h100-sxm", engine=engine, model="llama-3.1-8b", quant=quant, concurrency=2,
                         replay=_served, speed_margin=0, overrides={"max_num_seqs": 7})
    assert rep.engine.max_num_seqs == 7


def _fit_rows(*args: str) -> list[dict]:
    res = runner.invoke(app, ["fit", "--speed", "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)["rows"]


def test_fit_speed_prices_the_checkpoint_kv_dtype_as_run_does():
    """TensorRT-LLM on an FP8 checkpoint: the memory column already used its FP8 KV cache, the speed
    column priced a BF16 one (235 vs 196 tok/s at 32k context before the fix)."""
    hw, m, ctx = load_profile("h100-sxm"), load_catalog()["llama-3.1-8b"], 32000
    row = next(r for r in _fit_rows("--hw", "h100-sxm", "--model", "llama-3.1-8b", "--quant", "fp8",
                                    "--engine", "trtllm", "--context", str(ctx)))
    ran = run_engine("h100-sxm", "llama-3.1-8b", "fp8", "trtllm")
    assert ran.kv_dtype == "fp8"
    want = CostModel.from_names(m, get_quant("fp8"), hw, ran).single_stream_decode_tok_s(ctx)
    assert row["decode_tok_s"] == pytest.approx(want, rel=1e-9)
    bf16_kv = CostModel.from_names(m, get_quant("fp8"), hw, ran.with_overrides(kv_dtype="bf16"))
    assert row["decode_tok_s"] > 1.1 * bf16_kv.single_stream_decode_tok_s(ctx)


def test_fit_speed_applies_the_weight_format_rules_as_run_does():
    """SGLang on AMD CDNA3 with a block-scaled FP8 checkpoint (DeepSeek-R1): `run` prices its 400 us layer
    floor and 0.8 bandwidth scale; `fit --speed` priced the plain AMD rule (104 vs 40 tok/s before the fix)."""
    hw, m, ctx = load_profile("mi300x"), load_catalog()["deepseek-r1"], 4096
    row = next(r for r in _fit_rows("--hw", "mi300x", "--model", "deepseek-r1", "--quant", "fp8", "--engine", "sglang",
                                    "--tp", "8", "--context", str(ctx)))
    ran = run_engine("mi300x", "deepseek-r1", "fp8", "sglang", tp=row["tp"], pp=row["pp"])
    assert ran.layer_floor_us == 400
    want = CostModel.from_names(m, get_quant("fp8"), hw, ran).single_stream_decode_tok_s(ctx)
    assert row["decode_tok_s"] == pytest.approx(want, rel=1e-9)


def test_recommend_applies_a_checkpoint_rule_as_run_does(monkeypatch):
    """recommend skipped `for_checkpoint`: no candidate engine has a checkpoint rule today, so a rule added
    later (here: vLLM keeping an FP8 KV cache for FP8 checkpoints) would have priced `run` and `recommend`
    apart. Both now resolve through the same function and agree."""
    from sim.commands.recommend import recommend_rows

    real = cache.engine

    def with_fp8_kv(name):
        eng = real(name)
        return eng.with_overrides(kv_dtype_for_quant={"fp8": "fp8"}) if str(name) == "vllm" else eng

    monkeypatch.setattr(cache, "engine", with_fp8_kv)
    hw, m, ctx, users = load_profile("h100-sxm"), load_catalog()["llama-3.1-8b"], 8192, 8
    rows = recommend_rows(hw, [m], context=ctx, users=users, prompt_tokens=4096, min_tok_s=None, max_ttft_s=None)
    row = next(r for r in rows if r["engine"] == "vllm" and r["quant"] == "fp8")
    ran = run_engine("h100-sxm", "llama-3.1-8b", "fp8", "vllm")
    assert ran.kv_dtype == "fp8"
    speed = {kv: 1.0 / CostModel.from_names(m, get_quant("fp8"), hw, ran.with_overrides(kv_dtype=kv))
             .step_time((), (), [ctx] * users) for kv in ("fp8", "bf16")}
    assert row["decode_tok_s_per_user"] == pytest.approx(speed["fp8"], rel=1e-9)
    assert speed["fp8"] > 1.05 * speed["bf16"]  # the rule moves the price: the check could fail


def test_only_the_resolver_applies_the_checkpoint_steps():
    """`for_checkpoint` and `for_weight_format` are called in sim.catalog.deployment alone (a command that
    applied them itself would miss the next rule added there)."""
    allowed = {"sim/catalog/deployment.py"}
    calls = re.compile(r"(\.for_checkpoint\(|\bfor_weight_format\()")
    found = []
    for pkg in ("sim", "calibrate", "benchmarks"):
        for p in (ROOT / pkg).rglob("*.py"):
            rel = p.relative_to(ROOT).as_posix()
            for line in p.read_text().splitlines():
                code = line.split("#", 1)[0]
                if calls.search(code) and not code.lstrip().startswith("def ") and rel not in allowed:
                    found.append(f"{rel}: {line.strip()}")
    assert found == []
