"""Disaggregated prefill/decode (sim.cluster.disagg): TTFT from the prefill pool, KV transfer priced at
the slower interconnect, decode after the transfer; conservation across both pools."""

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.api import make_spec, run_spec
from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import load_profile
from sim.catalog.lookup import get_model
from sim.cli import app
from sim.cluster.disagg import parse_disagg, simulate_disagg
from sim.cost.speculative import make_cost_model
from sim.errors import ConfigError
from workloads.request import Request

ROOT = Path(__file__).resolve().parents[1]
CHAT = str(ROOT / "workloads" / "examples" / "chat.jsonl")
MODEL = get_model("llama-3.1-8b")
H100, L40S = load_profile("h100-sxm"), load_profile("l40s")


def engine_for(hw, **kw):
    kw.setdefault("request_overhead_ms", 0.0)  # hand-computed timings: the engine without its front-end latency
    return load_engine("vllm").for_hardware(hw).with_overrides(**kw)


def disagg(reqs, pre=H100, dec=L40S, n_pre=1, n_dec=1, eng=None, **kw):
    return simulate_disagg(reqs, prefill_hw=pre, decode_hw=dec, prefill_replicas=n_pre, decode_replicas=n_dec,
                           model=MODEL, quant=None, engine_for=lambda hw: engine_for(hw, **(eng or {})),
                           router="least-outstanding", check_invariants=True, **kw)


def test_one_request_hand_computed_prefill_transfer_and_decode():
    P, out = 2000, 3
    res = disagg([Request("a", 0.0, P, out, out)])
    row = res.requests.iloc[0]
    none = np.zeros(0, dtype=np.int64)
    pre_cost = make_cost_model(H100, MODEL, None, engine_for(H100))
    dec_cost = make_cost_model(L40S, MODEL, None, engine_for(L40S))
    t1 = pre_cost.step_time([P], [0], none)  # the prefill node computes the prompt and token 1
    assert abs(row["first_token_s"] - t1) < 1e-12
    # KV: 2000 tokens x 128 KiB (32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes) over the slower
    # link (L40S: PCIe Gen4, 32 GB/s < H100 NVLink 450 GB/s), plus the larger latency (10 us)
    kv_bytes = P * 32 * 8 * 128 * 2 * 2
    transfer = kv_bytes / 32e9 + 10e-6
    assert abs(row["kv_transfer_s"] - transfer) < 1e-12
    assert abs(row["decode_scheduled_s"] - (t1 + transfer)) < 1e-12
    # decode: token 2 = one iteration computing token 1's KV at context P, token 3 one decode step later
    t2 = t1 + transfer + dec_cost.step_time([1], [P], none)
    t3 = t2 + dec_cost.decode_run_time(np.array([P + 1]), 1)
    assert abs(row["finish_s"] - t3) < 1e-9
    assert row["output_tokens"] == 3
    assert res.summary["kv_transfer"]["transfers"] == 1


@st.composite
def traces(draw):
    n = draw(st.integers(1, 20))
    out, t = [], 0.0
    for i in range(n):
        t += draw(st.floats(0.0, 0.3, allow_nan=False))
        o = draw(st.integers(1, 200))
        out.append(Request(str(i), t, draw(st.integers(1, 3000)), o, o + draw(st.integers(0, 200))))
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=traces(), n_pre=st.integers(1, 2), n_dec=st.integers(1, 3), closed=st.sampled_from([None, 2]),
       seqs=st.integers(1, 6))
def test_every_request_is_done_once_and_decode_follows_its_transfer(reqs, n_pre, n_dec, closed, seqs):
    res = disagg(reqs, n_pre=n_pre, n_dec=n_dec, concurrency=closed, eng={"max_num_seqs": seqs})
    df, s = res.requests, res.summary
    assert sorted(df["id"]) == sorted(r.id for r in reqs)
    assert set(df["status"]) <= {"completed", "rejected"}
    assert s["requests"]["total"] == len(reqs)
    done = df[df["status"] == "completed"]
    assert (done["arrival_s"] <= done["scheduled_s"]).all()
    assert (done["scheduled_s"] <= done["first_token_s"]).all()
    assert (done["first_token_s"] <= done["finish_s"]).all()
    moved = done[done["output_tokens"] > 1]
    assert (moved["first_token_s"] + moved["kv_transfer_s"] <= moved["decode_scheduled_s"] + 1e-12).all()
    assert s["kv_transfer"]["transfers"] == len(moved)
    by_id = {r.id: r for r in reqs}
    for rid, o in zip(done["id"], done["output_tokens"]):
        assert o == min(by_id[rid].output_tokens, by_id[rid].max_tokens)
    pools = [p["pool"] for p in s["replicas"]]
    assert pools == ["prefill"] * n_pre + ["decode"] * n_dec
    assert sum(p["routed"] for p in s["replicas"] if p["pool"] == "prefill") == len(reqs)
    assert res.to_json() == disagg(list(reqs), n_pre=n_pre, n_dec=n_dec, concurrency=closed,
                                   eng={"max_num_seqs": seqs}).to_json()


def test_disagg_option_reaches_run_and_the_json_summary():
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    res = runner.invoke(app, ["run", CHAT, "--json", "--disagg", "h100-sxm:1,l40s:2"])
    assert res.exit_code == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["config"]["disagg"]["prefill"] == {"hw": "h100-sxm", "replicas": 1,
                                                "kv_capacity_tokens": s["config"]["disagg"]["prefill"]["kv_capacity_tokens"]}
    assert s["config"]["disagg"]["decode"]["replicas"] == 2
    assert s["config"]["disagg"]["kv_transfer_bandwidth_bytes_per_s"] == 32e9
    assert s["requests"]["completed"] == 200
    bad = runner.invoke(app, ["run", CHAT, "--disagg", "h100-sxm"])
    assert bad.exit_code == 2 and "--disagg" in bad.stderr and "Traceback" not in bad.stderr


def test_disagg_spec_text_is_parsed_and_checked():
    pre, dec = parse_disagg("h100-sxm:2,l40s:3")
    assert (pre.hw, pre.replicas, dec.hw, dec.replicas) == ("h100-sxm", 2, "l40s", 3)
    with pytest.raises(ConfigError, match="HW:N"):
        parse_disagg("h100-sxm:0,l40s:1")
