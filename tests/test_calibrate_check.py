"""The profile check (`calibrate.check`, `infersim calibrate --check`): drift against the calibration's
own measurements, the verdict, the steal-time reading and the plan it times."""

from __future__ import annotations

import pytest

from calibrate.check import DRIFT_TOLERANCE, CheckPoint, ProfileCheck, check_plan
from calibrate.machine import CpuTimes
from calibrate.probes import validate_plan


def test_drift_is_against_the_calibrations_own_measurement_when_the_profile_recorded_the_shape():
    p = CheckPoint("decode-8@64", measured_s=0.110, predicted_s=0.090, calibrated_s=0.100)
    assert p.drift == pytest.approx(0.10)  # the machine is 10 % slower than when calibrated
    assert p.profile_error == pytest.approx(0.090 / 0.110 - 1)  # what a simulation would miss by now
    q = CheckPoint("decode-1@64", measured_s=0.012, predicted_s=0.010)
    assert q.drift == pytest.approx(0.20)  # no recorded measurement: against the prediction


def test_the_verdict_is_the_median_shape_within_tolerance():
    ok = ProfileCheck((CheckPoint("a", 1.05, 1.0, 1.0), CheckPoint("b", 0.95, 1.0, 1.0)), steal_share=0.0, wall_s=1)
    assert ok.matches and ok.max_abs_drift == pytest.approx(0.05)
    assert ok.summary().startswith("as calibrated")
    # one shape far off alone (a noisy point): the median of a, b, c is still a's +5 %
    odd = ProfileCheck(ok.points + (CheckPoint("c", 1.3, 1.0, 1.0),), None, 1)
    assert odd.matches and odd.median_drift == pytest.approx(0.05) and odd.max_abs_drift == pytest.approx(0.3)
    # most shapes slower: the machine drifted
    slow = 1.0 + DRIFT_TOLERANCE + 0.01
    bad = ProfileCheck((CheckPoint("a", 1.0, 1.0, 1.0), CheckPoint("b", slow, 1.0, 1.0), CheckPoint("c", 1.2, 1.0, 1.0)),
                       None, 1)
    assert not bad.matches
    assert bad.summary().startswith("drifted") and "median +9.0%" in bad.summary() and "c +20.0%" in bad.summary()
    d = bad.to_dict()
    assert d["matches"] is False and [x["id"] for x in d["points"]] == ["a", "b", "c"]


def test_steal_share_is_the_stolen_part_of_all_cpu_time_between_two_readings():
    # user nice system idle iowait irq softirq steal
    t0 = CpuTimes((100, 0, 50, 1000, 0, 0, 0, 10))
    t1 = CpuTimes((160, 0, 70, 1100, 0, 0, 0, 30))
    assert t1.steal_share_since(t0) == pytest.approx(20 / 200)
    assert CpuTimes(None).steal_share_since(t0) is None
    now = CpuTimes.now()  # Linux: a real reading
    assert now.ticks is None or len(now.ticks) == 8


def test_the_check_plan_opens_the_calibrations_contexts_and_fits_them():
    recorded = [{"session": "single", "n_ctx": 2304, "n_batch": 2048, "n_seq_max": 1, "kv_unified": False},
                {"session": "batched", "n_ctx": 12288, "n_batch": 2048, "n_seq_max": 16, "kv_unified": False}]
    plan = check_plan("m.gguf", n_threads=1, contexts=recorded)
    validate_plan(plan)
    single, batched = plan["sessions"]
    assert (single["n_ctx"], batched["n_ctx"], batched["n_seq_max"]) == (2304, 12288, 16)
    assert [p["id"] for p in single["probes"] + batched["probes"]] == [
        "prefill-256", "decode-1@64", "decode-4@64", "decode-8@64"]
    # no record (or a unified cache, which would change the attention cost): contexts of its own
    plan = check_plan("m.gguf", n_threads=1, contexts=[{**recorded[1], "kv_unified": True}])
    validate_plan(plan)
    assert plan["sessions"][1]["n_seq_max"] == 8 and not plan["sessions"][1]["kv_unified"]
