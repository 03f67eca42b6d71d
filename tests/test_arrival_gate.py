"""Engine behaviour that holds an arrived request back from the next batch (sim.catalog.arrival_gate):
SGLang's receive interval (`recv_interval_steps`, sim.engine.recv: the scheduler reads its socket every N-th
decode step, at once after a prefill or when idle) and TensorRT-LLM's batch waiting (`batch_wait_iters` /
`batch_wait_tokens_ratio`: prompts held while generation runs, until enough tokens or iterations); the flags
that set them, and the InferenceX recipe flags the importer writes into the PR-table rows (which print none)."""

import numpy as np
import pytest
from sim_helpers import engine_with_kv_capacity, random_trace, run
from test_schedulers import _finish_prefills, _req, _sched, _state

from sim.bench.corpus import engine_overrides
from sim.engine.kv import PagedAllocator
from sim.engine.recv import RecvGate
from workloads.request import Request


def _by_id(res):
    return res.requests.sort_values("id", key=lambda s: s.astype(int)).reset_index(drop=True)


def _ttft(res):
    r = _by_id(res)
    return (r["first_token_s"] - r["arrival_s"]).to_numpy()


# ---- the counter ---------------------------------------------------------------------------------
def test_the_gate_reads_every_nth_decode_step_and_at_once_after_a_prefill():
    g = RecvGate(10)
    assert g.due()  # a fresh server reads on its first pass
    g.read()
    g.after_decode(9)
    assert not g.due() and g.steps_to_read() == 1
    g.after_decode(1)
    assert g.due()
    g.read()
    g.after_decode(3)
    g.after_other()  # a prefill (extend) pass weighs 1000
    assert g.due()


def test_a_run_past_a_polling_pass_restarts_the_counter_there():
    g = RecvGate(10)
    g.read()
    g.after_decode(4)
    g.after_decode(13)  # polled after 6 of them (reading nothing), 7 since
    assert g.counter == 7 and g.steps_to_read() == 3
    g.after_decode(3)
    assert g.due()
    g.read()
    g.after_decode(20)  # two polling passes; the second is this one
    assert g.due()


def test_a_gate_needs_an_interval_above_one():
    with pytest.raises(ValueError):
        RecvGate(1)


# ---- the replica with SGLang's receive interval --------------------------------------------------
def _sglang(**kw):
    # no front end and no eager-prefill launch floor: the hand-placed arrivals below fall mid-decode-run,
    # clear of the polling passes, for the plain step costs (the floor shifts the passes' phase)
    kw.setdefault("eager_prefill_launch_us", 0.0)
    return engine_with_kv_capacity("sglang", 60_000, request_overhead_ms=0.0, **kw)


def test_requests_that_reach_a_decoding_server_wait_for_the_polling_pass():
    # one long generation keeps the server decoding; the others arrive while it does, one at a time
    reqs = [Request("0", 0.0, 200, 2000, 2000)] + [Request(str(i), 0.5 * i + 0.013, 300, 5, 5) for i in range(1, 9)]
    base = _ttft(run(reqs, _sglang()))
    for n in (10, 30):
        gated = _ttft(run(reqs, _sglang(recv_interval_steps=n)))
        assert gated[0] == pytest.approx(base[0])  # the first reaches an idle server: read at once
        extra = gated[1:] - base[1:]
        assert (extra > 0).all()
        # at most n decode steps (each well under 40 ms here) more than without the gate
        assert (extra < n * 0.04).all()
    assert _ttft(run(reqs, _sglang(recv_interval_steps=30)))[1:].mean() > \
        _ttft(run(reqs, _sglang(recv_interval_steps=10)))[1:].mean()


def test_an_idle_server_reads_at_once():
    reqs = [Request(str(i), 3.0 * i, 500, 20, 20) for i in range(6)]  # each done before the next arrives
    a = _by_id(run(reqs, _sglang()))
    b = _by_id(run(reqs, _sglang(recv_interval_steps=30)))
    np.testing.assert_allclose(a["first_token_s"], b["first_token_s"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("concurrency", [None, 4])
def test_the_gated_replica_fast_forwards_to_the_same_results(concurrency):
    reqs = random_trace(40, 5, rate_per_s=8.0, prompt=(50, 1500), output=(5, 300))
    eng = _sglang(recv_interval_steps=10)
    fast = _by_id(run(reqs, eng, concurrency=concurrency))
    slow = _by_id(run(reqs, eng, concurrency=concurrency, fast_forward=False))
    assert len(fast) == 40 and fast["finish_s"].notna().all()
    for col in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(fast[col], slow[col], rtol=1e-9, atol=1e-9)


def test_a_closed_loop_with_a_front_end_drains_through_the_gate():
    reqs = random_trace(30, 9, prompt=(100, 1200), output=(20, 200))
    eng = engine_with_kv_capacity("sglang", 60_000, recv_interval_steps=30)  # with the preset's front end
    res = _by_id(run(reqs, eng, concurrency=6))
    assert len(res) == 30 and res["finish_s"].notna().all()
    assert (res["first_token_s"] >= res["arrival_s"]).all()


# ---- TensorRT-LLM's batch waiting -----------------------------------------------------------------
def test_inflight_holds_prompts_while_generation_runs_until_the_timeout():
    st = _state(PagedAllocator(100_000, 16), _req(0, 100, output=50))
    s = _sched("inflight", budget=1000, batch_wait=(3, 0.8))
    _finish_prefills(st, s.plan(st))  # an idle server: no generation yet, so no waiting
    assert st.n_decoding == 1
    st.waiting.append(_pending(st, 1, 100))
    held = [s.plan(st) for _ in range(3)]
    assert all(not b.prefill_lanes and len(b.decode_lanes) == 1 for b in held)
    assert not any(b.stable for b in held)
    b = s.plan(st)  # the fourth iteration: the timeout has passed
    assert b.prefill_tokens == [100] and len(b.decode_lanes) == 1
    assert s.waited == 0


def test_inflight_stops_holding_once_the_prompts_reach_the_token_share():
    def server():
        st = _state(PagedAllocator(100_000, 16), _req(0, 100, output=50))
        s = _sched("inflight", budget=1000, batch_wait=(40, 0.8))
        _finish_prefills(st, s.plan(st))  # one generation request runs
        return st, s

    st, s = server()
    st.waiting.append(_pending(st, 1, 500))
    assert not s.plan(st).prefill_lanes  # 500 + 1 tokens < 0.8 x 1000: held
    st.waiting.append(_pending(st, 2, 400))
    assert s.plan(st).prefill_tokens == [500, 400]  # 901 >= 800: both go
    st, s = server()
    st.waiting.append(_pending(st, 1, 799))
    assert s.plan(st).prefill_tokens == [799]  # 799 + 1 = 800: not held at all
    st, s = server()
    st.waiting.append(_pending(st, 1, 798))
    assert not s.plan(st).prefill_lanes and s.waited == 1


def _pending(st, i, prompt):
    from sim.engine.state import Pending

    r = _req(i, prompt)
    return Pending(st.log.add(r.id, r.arrival_s, r.prompt_tokens), r)


def test_batch_waiting_off_is_the_engine_without_it():
    reqs = random_trace(30, 3, rate_per_s=10.0, prompt=(50, 1000), output=(5, 200))
    eng = engine_with_kv_capacity("trtllm", 60_000, request_overhead_ms=0.0)
    a = _by_id(run(reqs, eng))
    b = _by_id(run(reqs, eng.with_overrides(batch_wait_iters=0, batch_wait_tokens_ratio=0.8)))
    c = _by_id(run(reqs, eng.with_overrides(batch_wait_iters=40, batch_wait_tokens_ratio=0.8)))
    assert a[["first_token_s", "finish_s"]].equals(b[["first_token_s", "finish_s"]])
    assert (c["first_token_s"] - c["arrival_s"]).mean() > (a["first_token_s"] - a["arrival_s"]).mean()
    assert len(c) == 30 and c["finish_s"].notna().all()


# ---- the flags -----------------------------------------------------------------------------------
def test_the_recipe_flags_set_the_gates():
    o = engine_overrides("--tp 4 --scheduler-recv-interval 30 --disable-radix-cache")
    assert o["recv_interval_steps"] == 30 and o["prefix_caching"] is False
    o = engine_overrides("trtllm-serve --max_num_tokens=8192 --extra_llm_api_options=x.yml; x.yml: batch_wait_timeout_iters=40 "
                         "batch_wait_max_tokens_ratio=0.8 kv_cache_config.dtype=fp8 "
                         "kv_cache_config.enable_block_reuse=false kv_cache_config.free_gpu_memory_fraction=0.8")
    assert o == {"max_num_batched_tokens": 8192, "batch_wait_iters": 40, "batch_wait_tokens_ratio": 0.8,
                 "kv_dtype": "fp8", "prefix_caching": False, "memory_fraction": 0.8}
    assert "prefix_caching" not in engine_overrides("kv_cache_config.enable_block_reuse=maybe")


# ---- the InferenceX recipe flags in the corpus rows ----------------------------------------------
SERVING = __import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks" / "serving"


def _prs():
    import sys

    sys.path.insert(0, str(SERVING))
    import import_inferencex_prs

    return import_inferencex_prs


def test_the_published_inferencex_rows_carry_their_recipes_flags_per_load():
    """The importer fills engine_flags from side_tables/recipe_flags.csv (the PR table prints none), so the
    replay reads them as it reads any row's flags."""
    from calibrate.serving.rows import curves, load_corpus, load_points

    c = curves(load_corpus())["ix-api-b300-sglang-dsr1-fp4-b300-sglang-tp4ep4-isl1024-osl1024"]
    flags = {int(r["max_concurrency"]): r["engine_flags"] for r in c}
    assert flags[8].endswith("--stream-interval 10") and "--scheduler-recv-interval 10 " in flags[8]
    assert "--scheduler-recv-interval 30 " in flags[16]
    assert all("side_tables/recipe_flags.csv" in r["notes"] and "dsr1_fp4_b300.sh" in r["notes"] for r in c)
    ov = {p.load: p.overrides for p in load_points(c)}
    assert ov[8.0]["recv_interval_steps"] == 10 and ov[16.0]["recv_interval_steps"] == 30
    assert ov[1.0]["kv_dtype"] == "fp8_e4m3" and ov[1.0]["expert_parallel"] is True
    assert ov[1.0]["prefix_caching"] is False and ov[1.0]["max_num_batched_tokens"] == 16384
    t = curves(load_corpus())["ix-api-b200-trtllm-dsr1-fp8-b200-trt-tp8ep1-isl1024-osl1024"]
    ov = {p.load: p.overrides for p in load_points(t)}
    assert "batch_wait_iters" not in ov[8.0] and ov[64.0]["batch_wait_iters"] == 40
    # a family the table has no recipe for keeps empty flags (and its notes say so)
    q = curves(load_corpus())["ix-api-mi325x-sglang-dsr1-fp8-mi325x-sglang-tp8ep1-isl8192-osl1024"]
    assert all(not r["engine_flags"] and "side_tables/recipe_flags.csv" not in r["notes"].split("Table row:")[1]
               for r in q)


def test_the_importer_puts_each_loads_recipe_flags_in_the_rows():
    prs = _prs()
    cid = "ix-api-b300-sglang-dsr1-fp8-b300-sglang-tp8ep1-isl1024-osl1024"
    table = {cid: [dict(load_min="1", load_max="15", engine_flags="--tp 8 --scheduler-recv-interval 2",
                        source="https://x/s.sh#L1", source_ref="s.sh (L1)", notes=""),
                   dict(load_min="16", load_max="", engine_flags="--tp 8 --scheduler-recv-interval 7",
                        source="https://x/s.sh#L1", source_ref="s.sh (L1)", notes="")]}
    rows = [r for r in prs.ix_pr_rows(table) if r["curve_id"] == cid]
    by_c = {int(r["max_concurrency"]): r["engine_flags"] for r in rows}
    assert by_c[4].endswith("interval 2") and by_c[16].endswith("interval 7") and by_c[64].endswith("interval 7")
    # an entry that matches no point is an error, not silently dropped
    with pytest.raises(SystemExit, match="no-such-curve at loads 1-no limit matches no point"):
        prs.ix_pr_rows({**table, "no-such-curve": [dict(table[cid][1], load_min="1")]})


def test_a_row_that_prints_its_flags_is_replayed_with_them():
    from calibrate.serving.rows import curves, load_corpus, load_points

    c = curves(load_corpus())["ix-api-b300-sglang-dsr1-fp4-b300-sglang-tp4ep4-isl1024-osl1024"]
    mine = [{**r, "engine_flags": "--tp 4 --scheduler-recv-interval 2"} for r in c]
    assert {p.overrides.get("recv_interval_steps") for p in load_points(mine)} == {2}


def test_a_bad_recipe_table_is_a_one_line_error_naming_file_line_and_field(tmp_path):
    prs = _prs()
    head = "curve_id,load_min,load_max,engine_flags,source,source_ref,notes\n"
    ok = tmp_path / "ok.csv"
    ok.write_text(head + "c,1,15,--scheduler-recv-interval 10,s,r,n\nc,16,,--scheduler-recv-interval 30,s,r,n\n")
    table = prs.load_recipe_flags(ok)
    assert prs.recipe_entry("c", 8, table)["engine_flags"].endswith("10")
    assert prs.recipe_entry("c", 512, table)["engine_flags"].endswith("30")
    assert prs.recipe_entry("other", 8, table) is None
    bad = tmp_path / "bad.csv"
    bad.write_text(head + "c,x,15,--tp 2,s,r,n\n")
    with pytest.raises(ValueError, match=r"bad.csv:2: load_min"):
        prs.load_recipe_flags(bad)
    empty = tmp_path / "empty.csv"
    empty.write_text(head + "c,1,15,,s,r,n\n")
    with pytest.raises(ValueError, match=r"empty.csv:2: engine_flags: empty"):
        prs.load_recipe_flags(empty)
    short = tmp_path / "short.csv"
    short.write_text("curve_id,load_min\nc,1\n")
    with pytest.raises(ValueError, match="missing column load_max"):
        prs.load_recipe_flags(short)
