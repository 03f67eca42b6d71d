"""Real llama.cpp probes on the tiny GGUF: they run in a child, measure what they say, refuse sizes
that do not fit, and turn a crash of llama.cpp into an error message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_model import requires_llama_cpp, tiny_gguf  # noqa: F401  (fixture)

from calibrate.probe_worker import ContextLimits, probe_fits
from calibrate.probes import ProbeError, build_plan, count_probes, merge_rounds, run_plan, validate_plan

pytestmark = requires_llama_cpp


def _probe(pid, *, p=0, cp=0, b=0, cd=0, runs=3, warmup=1):
    kind = "mixed" if p and b else ("prefill" if p else "decode")
    return {"id": pid, "kind": kind, "prefill_tokens": p, "prefill_context": cp, "decode_batch": b,
            "decode_context": cd, "warmup": warmup, "runs": runs, "max_runs": runs, "min_time_s": 0.0}


def _plan(model, sessions, **extra):
    return {"model_path": str(model), "n_threads": 1, "n_gpu_layers": 0, "seed": 0, "warm_loads": 1,
            "sessions": sessions, **extra}


def test_probes_run_in_a_child_and_time_every_planned_shape(tiny_gguf):
    plan = _plan(tiny_gguf, [
        {"name": "single", "n_ctx": 1024, "n_batch": 512, "n_seq_max": 1, "probes": [
            _probe("prefill-16", p=16), _probe("prefill-512", p=512), _probe("decode-1@32", b=1, cd=32, runs=8)]},
        {"name": "batched", "n_ctx": 16 * 128, "n_batch": 512, "n_seq_max": 16, "probes": [
            _probe("decode-16@32", b=16, cd=32, runs=8), _probe("mixed", p=64, b=4, cd=32)]},
    ])
    events = []
    run = run_plan(plan, on_event=events.append)
    by_id = {p.id: p for p in run.points}
    assert list(by_id) == ["prefill-16", "prefill-512", "decode-1@32", "decode-16@32", "mixed"]
    for p in run.points:
        assert 0 < p.min_s <= p.p25_s <= p.median_s <= p.p75_s <= p.max_s
        assert p.runs == len(p.samples_s) >= 3
    # 32x the tokens cost more (by far more than any scheduling noise on a shared machine)
    assert by_id["prefill-512"].median_s > 3 * by_id["prefill-16"].median_s
    # decode sequences grow one position per run: warm-up 1 + 8 runs from 32 -> mean context 32 + 1 + 3.5
    assert by_id["decode-1@32"].decode_context == pytest.approx(36.5)
    assert run.load_cold_s > 0 and len(run.load_warm_s) == 1
    assert [c["n_seq_max"] for c in run.contexts] == [1, 16]
    assert run.llama_cpp_version
    assert [e["id"] for e in events if e["event"] == "start"] == list(by_id)


def test_quick_plan_fits_its_contexts_and_stays_within_the_model_context():
    plan = build_plan("m.gguf", n_ctx_train=512, quick=True, n_threads=1)
    validate_plan(plan)  # no exception
    for s in plan["sessions"]:
        for pr in s["probes"]:
            assert pr["prefill_context"] + pr["prefill_tokens"] <= 512
            assert pr["decode_context"] + pr["warmup"] + pr["max_runs"] <= 512
    full = build_plan("m.gguf", n_ctx_train=32768, quick=False, n_threads=2)
    prefill = sorted(p["prefill_tokens"] for p in full["sessions"][0]["probes"] if p["kind"] == "prefill")
    assert prefill[0] == 32 and prefill[-1] == 2048
    assert sorted({p["decode_batch"] for p in full["sessions"][1]["probes"] if p["kind"] == "decode"}) == [1, 2, 3, 4, 6, 8, 10, 12, 16]


@pytest.mark.parametrize(
    "probe, why",
    [
        (_probe("too-many-seqs", b=5, cd=8), "n_seq_max"),
        (_probe("too-many-tokens", p=300), "n_batch"),
        (_probe("past-context", p=100, cp=200), "per-sequence context"),
        (_probe("decode-past-context", b=1, cd=250, runs=10), "per-sequence context"),
    ],
)
def test_sizes_that_do_not_fit_are_refused_before_llama_cpp_starts(probe, why):
    limits = ContextLimits(n_ctx=1024, n_ctx_seq=256, n_batch=256, n_seq_max=4, kv_unified=False)
    assert why in probe_fits(probe, limits)
    plan = _plan("does-not-matter.gguf", [{"name": "s", "n_ctx": 1024, "n_batch": 256, "n_seq_max": 4,
                                           "probes": [probe]}])
    with pytest.raises(ProbeError, match=why):
        run_plan(plan)


def test_probes_exactly_at_the_limits_run(tiny_gguf):
    plan = _plan(tiny_gguf, [{"name": "edge", "n_ctx": 4 * 64, "n_batch": 64, "n_seq_max": 4, "probes": [
        _probe("full-batch", p=64),  # exactly n_batch tokens, exactly the per-sequence context
        _probe("all-seqs", p=8, cp=52, b=3, cd=60, runs=3),  # 4 sequences, decode to position 64
    ]}])
    run = run_plan(plan)
    assert [p.id for p in run.points] == ["full-batch", "all-seqs"]


def test_unchecked_oversized_probe_fails_inside_llama_cpp_with_its_reason(tiny_gguf):
    """Why the size check exists: without it llama.cpp refuses the batch (here: no KV slot)."""
    plan = _plan(tiny_gguf, [{"name": "s", "n_ctx": 256, "n_batch": 64, "n_seq_max": 1,
                              "probes": [_probe("overflow", b=1, cd=250, runs=10)]}], unchecked=True)
    with pytest.raises(ProbeError, match=r"probe overflow.*llama_decode returned"):
        run_plan(plan, validate=False)


def test_a_llama_cpp_abort_in_the_child_becomes_an_error_naming_the_assert(tiny_gguf):
    plan = _plan(tiny_gguf, [{"name": "s", "n_ctx": 256, "n_batch": 64, "n_seq_max": 1,
                              "probes": [_probe("prefill-8", p=8)]}], inject_fault="sample_without_logits")
    with pytest.raises(ProbeError) as e:
        run_plan(plan)
    msg = str(e.value)
    assert "crashed (SIGABRT)" in msg and "GGML_ASSERT(logits != nullptr)" in msg
    assert "\n" not in msg  # one line


def test_a_segfault_in_the_extra_weight_buffers_reruns_without_them_and_says_so(tiny_gguf):
    plan = _plan(tiny_gguf, [{"name": "s", "n_ctx": 256, "n_batch": 64, "n_seq_max": 1,
                              "probes": [_probe("prefill-8", p=8)]}], inject_fault="segfault_with_extra_bufts")
    run = run_plan(plan)
    assert [p.id for p in run.points] == ["prefill-8"] and run.points[0].median_s > 0
    assert "crashed (SIGSEGV)" in run.extra_bufts_off
    assert run_plan({**plan, "inject_fault": None}).extra_bufts_off == ""  # no crash, buffers stay on


def test_a_segfault_that_persists_without_extra_weight_buffers_is_an_error(tiny_gguf):
    plan = _plan(tiny_gguf, [{"name": "s", "n_ctx": 256, "n_batch": 64, "n_seq_max": 1,
                              "probes": [_probe("prefill-8", p=8)]}], inject_fault="segfault")
    with pytest.raises(ProbeError, match=r"crashed \(SIGSEGV\)"):
        run_plan(plan)


def test_a_corrupted_gguf_is_an_error_not_a_crash(tiny_gguf, tmp_path):
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(Path(tiny_gguf).read_bytes()[: 40_000])  # header intact, tensor data cut off
    plan = _plan(bad, [{"name": "s", "n_ctx": 256, "n_batch": 64, "n_seq_max": 1, "probes": [_probe("p", p=8)]}])
    with pytest.raises(ProbeError, match="could not load the model file"):
        run_plan(plan)


def test_a_probe_run_past_its_time_limit_is_stopped(tiny_gguf):
    plan = _plan(tiny_gguf, [{"name": "s", "n_ctx": 2048, "n_batch": 2048, "n_seq_max": 1,
                              "probes": [_probe("long", p=2048, runs=10_000)]}])
    plan["sessions"][0]["probes"][0]["max_runs"] = 10_000
    with pytest.raises(ProbeError, match="did not finish within 2 s"):
        run_plan(plan, timeout_s=2.0)


def test_worker_protocol_channel_is_clean_json_even_when_c_code_prints(tiny_gguf):
    plan = _plan(tiny_gguf, [{"name": "s", "n_ctx": 256, "n_batch": 64, "n_seq_max": 1, "probes": [_probe("p", p=8)]}])
    out = subprocess.run([sys.executable, "-m", "calibrate.probe_worker"], input=json.dumps(plan),
                         capture_output=True, text=True, timeout=60, env={**os.environ, "GGML_NO_BACKTRACE": "1"})
    assert out.returncode == 0
    events = [json.loads(line) for line in out.stdout.splitlines()]  # every stdout line is JSON
    assert events[0]["event"] == "load" and events[-1]["event"] == "done"


def test_runs_that_lost_their_cpu_to_another_process_are_left_out_of_the_median():
    from calibrate.probe_worker import summarize, undisturbed

    wall = [0.020, 0.021, 0.060, 0.020, 0.055]  # two runs stalled by another process
    cpu = [0.0198, 0.0207, 0.031, 0.0199, 0.030]  # ... during which the thread got ~half its CPU
    assert undisturbed(wall, cpu, 1) == [True, True, False, True, False]
    s = summarize(wall, cpu, 1)
    assert s["median_s"] == pytest.approx(0.020) and s["undisturbed_runs"] == 3
    assert s["median_all_s"] == pytest.approx(0.021)
    assert undisturbed(wall, [0.0] * 5, 1) == [True] * 5  # no CPU clock: keep everything


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to list child processes")
def test_interrupted_calibration_stops_the_child_and_writes_no_profile(tiny_gguf, tmp_path):
    from calibrate.calibration import calibrate_model
    from sim.catalog.lookup import get_model

    spec = get_model(str(tiny_gguf))
    before = set(_children(os.getpid()))

    def ctrl_c_at_first_point(event):
        if event.get("event") == "point":
            raise KeyboardInterrupt

    out = tmp_path / "profiles" / "x.yaml"
    with pytest.raises(KeyboardInterrupt):
        calibrate_model(tiny_gguf, name="x", spec=spec, quant=spec.quant("fp16"), quick=True, threads=1,
                        out=out, on_event=ctrl_c_at_first_point)
    assert not out.exists() and not out.parent.exists()
    assert set(_children(os.getpid())) <= before  # the probe worker is gone


def test_a_point_disturbed_throughout_is_recognised_against_the_run_wide_best_share():
    from calibrate.probe_worker import _wants_more, summarize, undisturbed

    wall = [0.040, 0.042, 0.041, 0.044]
    cpu = [0.020, 0.021, 0.020, 0.022]  # share ~0.5 in every run; earlier points reached 0.99
    assert undisturbed(wall, cpu, 1, reference_share=0.99) == [False] * 4
    kept = undisturbed(wall, cpu, 1, reference_share=0.99)
    assert _wants_more(wall, kept, max_runs=64, min_runs=3, min_time_s=0.25)  # keeps sampling
    assert summarize(wall, cpu, 1, reference_share=0.99)["undisturbed_runs"] == 4  # then falls back to its best


def test_a_plan_in_rounds_times_every_shape_once_per_round_and_pools_the_samples(tiny_gguf):
    plan = _plan(tiny_gguf, [
        {"name": "single", "n_ctx": 512, "n_batch": 512, "n_seq_max": 1, "probes": [
            _probe("prefill-32", p=32, runs=3), _probe("decode-1@16", b=1, cd=16, runs=4)]},
        {"name": "batched", "n_ctx": 4 * 128, "n_batch": 512, "n_seq_max": 4, "probes": [
            _probe("decode-4@16", b=4, cd=16, runs=5)]},
    ], rounds=2)
    assert count_probes(plan) == 6
    events = []
    run = run_plan(plan, on_event=events.append)
    per_round = [e for e in events if e["event"] == "point"]
    assert [(e["id"], e["round"]) for e in per_round] == [
        ("prefill-32", 0), ("decode-1@16", 0), ("decode-4@16", 0),
        ("prefill-32", 1), ("decode-1@16", 1), ("decode-4@16", 1)]
    by_id = {p.id: p for p in run.points}
    assert list(by_id) == ["prefill-32", "decode-1@16", "decode-4@16"]
    for p in run.points:
        pooled = [x for e in per_round if e["id"] == p.id for x in e["samples_s"]]
        assert list(p.samples_s) == pooled and p.runs == len(pooled)
        assert p.min_s <= p.median_s <= p.max_s
    # each round starts the decode sequences again at 16: warm-up 1, then contexts 17..20 in both
    assert by_id["decode-1@16"].decode_context == pytest.approx(18.5)
    assert run.plan_summary["rounds"] == 2


def test_merging_rounds_takes_the_median_of_the_pooled_undisturbed_runs_and_weights_the_context():
    def ev(rnd, samples, cpu, ctx):
        return {"event": "point", "id": "decode-2@64", "kind": "decode", "session": "batched", "round": rnd,
                "prefill_tokens": 0, "prefill_context": 0, "decode_batch": 2, "decode_context": ctx,
                "runs": len(samples), "samples_s": samples, "cpu_s": cpu, "median_s": samples[0]}

    fast = ev(0, [0.010, 0.011, 0.012], [0.010, 0.011, 0.012], 66.0)
    slow = ev(1, [0.020, 0.021, 0.030, 0.019], [0.020, 0.021, 0.012, 0.019], 67.5)  # 0.030: lost its CPU
    other = {**fast, "id": "prefill-8", "session": "single"}
    merged = merge_rounds([fast, other, slow], n_threads=1)
    assert [m["id"] for m in merged] == ["decode-2@64", "prefill-8"]
    m = merged[0]
    assert m["runs"] == 7 and m["rounds"] == 2
    assert m["samples_s"] == fast["samples_s"] + slow["samples_s"]
    assert m["undisturbed_runs"] == 6  # the run that kept 40 % of its CPU is left out
    assert m["median_s"] == pytest.approx(0.0155)  # median of 10, 11, 12, 19, 20, 21 ms
    assert m["decode_context"] == pytest.approx((66.0 * 3 + 67.5 * 4) / 7)
    assert merged[1] is other  # a point of one round passes through unchanged


def test_a_stored_point_that_already_pools_rounds_counts_with_them():
    """`calibrate --extend` pools a profile's stored point (2 rounds) with a new round: 3 rounds."""
    base = {"event": "point", "id": "decode-1@64", "kind": "decode", "session": "batched", "prefill_tokens": 0,
            "prefill_context": 0, "decode_batch": 1, "decode_context": 70.0}
    stored = {**base, "runs": 4, "rounds": 2, "samples_s": [0.010, 0.012, 0.011, 0.013], "cpu_s": [0.010, 0.012, 0.011, 0.013]}
    new = {**base, "runs": 2, "samples_s": [0.020, 0.021], "cpu_s": [0.020, 0.021]}
    (m,) = merge_rounds([stored, new], n_threads=1)
    assert m["rounds"] == 3 and m["runs"] == 6 and m["median_s"] == pytest.approx(0.0125)
    from calibrate.probes import ProbePoint

    p = ProbePoint.from_event(m)
    assert p.rounds == 3 and p.cpu_s == tuple(stored["cpu_s"] + new["cpu_s"])
    assert ProbePoint.from_event(p.to_event()) == p  # what a profile stores comes back whole


def test_a_run_slowed_while_on_the_cpu_is_left_out_though_its_cpu_share_is_full():
    """Caches refilled after another process ran, a busy sibling hyperthread: the run's CPU seconds
    grow with its wall seconds, so the share stays ~1.0; its CPU seconds against the point's fewest
    show it (ON_CPU_SLOWDOWN, the worker's rule within one round)."""
    from calibrate.probe_worker import ON_CPU_SLOWDOWN, summarize, undisturbed

    wall = [0.0100, 0.0102, 0.0170, 0.0101, 0.0150]
    cpu = [0.0099, 0.0101, 0.0169, 0.0100, 0.0149]  # every share ~0.99
    assert 0.0150 / 0.0100 > ON_CPU_SLOWDOWN > 0.0102 / 0.0100
    assert undisturbed(wall, cpu, 1, on_cpu=True) == [True, True, False, True, False]
    s = summarize(wall, cpu, 1, on_cpu=True)
    assert s["median_s"] == pytest.approx(0.0101) and s["undisturbed_runs"] == 3
    # pooled rounds (merge_rounds) are judged by share alone: every run here keeps it
    assert undisturbed(wall, cpu, 1) == [True] * 5


def test_the_cpu_floor_comes_from_the_runs_that_kept_their_share():
    from calibrate.probe_worker import undisturbed

    # the preempted run did less work in its wall time (share 0.3) and its CPU reading is the lowest:
    # it must not set the floor that the other runs are held to
    wall = [0.020, 0.021, 0.040, 0.019]
    cpu = [0.020, 0.021, 0.012, 0.019]
    assert undisturbed(wall, cpu, 1, on_cpu=True) == [True, True, False, True]


def test_a_point_whose_runs_were_all_slowed_on_the_cpu_keeps_sampling_then_keeps_its_fastest():
    from calibrate.probe_worker import _wants_more, undisturbed

    wall = [0.010, 0.016, 0.017, 0.018, 0.016, 0.017, 0.019, 0.016]  # one fast run, then a slow stretch
    kept = undisturbed(wall, wall, 1, on_cpu=True)
    assert kept == [True] + [False] * 7
    assert _wants_more(wall, kept, max_runs=32, min_runs=8, min_time_s=0.05)  # fewer than 8 undisturbed


def test_no_cpu_clock_keeps_every_run_as_before():
    from calibrate.probe_worker import undisturbed

    assert undisturbed([0.01, 0.03, 0.02], [0.0, 0.0, 0.0], 1, on_cpu=True) == [True] * 3
