"""Replicas behind a router (sim.cluster, sim.cluster.router): conservation across replicas, causality,
determinism, a cluster of one equals the single replica, and what each routing policy does."""

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_helpers import H100, engine_with_kv_capacity, random_trace, run

from sim.catalog.engine_config import load_engine
from sim.cluster.router import ROUTERS
from workloads.request import Request
from workloads.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]
SESSIONS = ROOT / "workloads" / "examples" / "chat-sessions.jsonl"
COLS = ["arrival_s", "scheduled_s", "first_token_s", "finish_s"]


@st.composite
def traces(draw):
    n = draw(st.integers(1, 25))
    out, t = [], 0.0
    for i in range(n):
        t += draw(st.floats(0.0, 0.3, allow_nan=False))
        prompt, output = draw(st.integers(1, 2500)), draw(st.integers(1, 250))
        kw = {}
        if draw(st.booleans()):
            kw = {"prefix_id": draw(st.sampled_from("ab")), "prefix_tokens": draw(st.integers(1, prompt))}
        out.append(Request(str(i), t, prompt, output, output + draw(st.integers(0, 300)), **kw))
    return out


@st.composite
def engines(draw):
    return engine_with_kv_capacity(
        "vllm", draw(st.sampled_from([4000, 20_000])), scheduler=draw(st.sampled_from(["chunked", "continuous"])),
        kv_allocator=draw(st.sampled_from(["paged", "contiguous"])), max_num_seqs=draw(st.integers(1, 8)))


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(reqs=traces(), eng=engines(), n=st.integers(2, 4), router=st.sampled_from(sorted(ROUTERS)),
       closed=st.sampled_from([None, None, 3]))
def test_every_request_is_served_by_exactly_one_replica_and_time_flows_forward(reqs, eng, n, router, closed):
    res = run(reqs, eng, replicas=n, router=router, concurrency=closed)  # KV conservation inside each replica
    df, s = res.requests, res.summary
    assert sorted(df["id"]) == sorted(r.id for r in reqs)  # each request once
    assert set(df["status"]) <= {"completed", "rejected"}
    assert set(df["replica"]) <= set(range(n))
    per = s["replicas"]
    assert [p["replica"] for p in per] == list(range(n))
    assert sum(p["routed"] for p in per) == len(reqs) == s["requests"]["total"]
    for p in per:
        assert p["routed"] == p["requests"]["total"] == p["requests"]["completed"] + p["requests"]["rejected"]
        assert p["routed"] == int((df["replica"] == p["replica"]).sum())
    assert s["requests"]["completed"] == sum(p["requests"]["completed"] for p in per)
    done = df[df["status"] == "completed"]
    assert (done["arrival_s"] <= done["scheduled_s"]).all()
    assert (done["scheduled_s"] <= done["first_token_s"]).all()
    assert (done["first_token_s"] <= done["finish_s"]).all()
    it = res.iterations
    for _, g in it.groupby("replica"):  # each replica's iterations never overlap
        starts = g["start_s"].to_numpy()
        assert (starts[1:] >= (starts + g["duration_s"].to_numpy())[:-1] - 1e-12).all()
    assert s["kv"]["capacity_tokens"] == sum(p["kv"]["capacity_tokens"] for p in per)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=traces(), eng=engines(), closed=st.sampled_from([None, 2]))
def test_a_cluster_of_one_replica_is_the_single_replica(reqs, eng, closed):
    single = run(reqs, eng, concurrency=closed)
    cluster = run(reqs, eng, replicas=1, router="least-kv", concurrency=closed)
    np.testing.assert_allclose(cluster.requests[COLS].to_numpy(), single.requests[COLS].to_numpy(), rtol=0, atol=0)
    for key in ("requests", "ttft_s", "tpot_s", "itl_s", "e2e_s", "kv", "batch_size", "prefix_cache"):
        assert cluster.summary[key] == single.summary[key], key


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=traces(), eng=engines(), router=st.sampled_from(["round-robin", "least-outstanding", "prefix-affinity"]))
def test_cluster_runs_are_deterministic_and_fast_forward_matches_step_by_step(reqs, eng, router):
    # (least-kv reads KV use, which a fast-forwarded run books at its end: it may route differently)
    a = run(reqs, eng, replicas=3, router=router)
    assert a.to_json() == run(list(reqs), eng, replicas=3, router=router).to_json()
    step = run(reqs, eng, replicas=3, router=router, fast_forward=False)  # open loop: exact
    np.testing.assert_allclose(a.requests[COLS].to_numpy(), step.requests[COLS].to_numpy(), rtol=1e-9, atol=1e-12)
    assert a.requests["replica"].tolist() == step.requests["replica"].tolist()


def test_round_robin_deals_requests_in_turn():
    reqs = random_trace(30, seed=1)
    res = run(reqs, load_engine("vllm").for_hardware(H100), replicas=3, router="round-robin")
    df = res.requests.set_index("id")
    assert [int(df.loc[r.id, "replica"]) for r in reqs] == [i % 3 for i in range(30)]


def test_two_replicas_halve_the_queueing_of_an_overloaded_one():
    reqs = random_trace(120, seed=2, rate_per_s=60.0)
    eng = engine_with_kv_capacity("vllm", 20_000)
    one = run(reqs, eng).summary
    two = run(reqs, eng, replicas=2, router="least-outstanding").summary
    assert two["ttft_s"]["p90"] < one["ttft_s"]["p90"]
    assert two["duration_s"] <= one["duration_s"]


def test_prefix_affinity_keeps_each_shared_prefix_on_one_replica_and_its_cache():
    eng = load_engine("vllm").for_hardware(H100)
    reqs = load_trace(SESSIONS)
    single = run(reqs, eng).summary["prefix_cache"]
    aff = run(reqs, eng, replicas=4, router="prefix-affinity")
    rr = run(reqs, eng, replicas=4, router="round-robin")
    df = aff.requests.merge(
        __import__("pandas").DataFrame({"id": [r.id for r in reqs], "sid": [r.prefix_id for r in reqs]}), on="id")
    assert (df.groupby("sid")["replica"].nunique() == 1).all()
    assert aff.summary["prefix_cache"]["hit_tokens"] == single["hit_tokens"]  # nothing lost to routing
    assert rr.summary["prefix_cache"]["hit_tokens"] < single["hit_tokens"]
    assert aff.summary["ttft_s"]["mean"] < rr.summary["ttft_s"]["mean"]


def test_unknown_router_is_a_one_line_error():
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown router 'random'.*round-robin"):
        run(random_trace(3, seed=0), load_engine("vllm").for_hardware(H100), replicas=2, router="random")
