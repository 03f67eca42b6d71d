"""A calibration that failed is not saved (issue 41): held-out error above the stated threshold, or
parameters at their bounds, write no profile unless --force, which marks it so that `run` says it."""

from __future__ import annotations

import numpy as np
import pytest
import typer
from rich.console import Console
from test_calibrate_fit import TRUE, synthetic

from calibrate.calibration import _finish
from calibrate.cli import EXIT_UNRELIABLE, refuse_or_warn
from calibrate.fit import (
    MAX_HELDOUT_ERROR,
    Observation,
    fit_cost_params,
    params_at_bounds,
    physical_bounds,
    unreliable_reasons,
)
from sim.catalog.accuracy import describe
from sim.catalog.lookup import get_model
from sim.cost.roofline import CostModel

GOOD_BOUNDS = physical_bounds(27e9, 166e9, int8_speedup=4.0)
# A "busy machine": raw probes far slower than the probe timings need (matmul ceiling 3 GFLOP/s
# against the 150 of the machine that timed them), so the fit can only approach the timings by
# pushing its rates against their (too low) ceilings.
STARVED_BOUNDS = physical_bounds(1e9, 3e9, int8_speedup=1.0)


def _fit(bounds, noise=0.02, seed=0):
    obs = synthetic(TRUE, noise, seed)
    return obs, fit_cost_params(CostModel(get_model("llama-3.1-8b"), "q4_k_m", TRUE), obs, bounds, seed=seed)


@pytest.fixture(scope="module")
def starved():
    """The probe points and the fit that lands on its bounds (fitted once: a fit pressed against its
    bounds takes seconds; the tests of what is written reuse it through a patched fitter)."""
    return _fit(STARVED_BOUNDS)


def test_a_good_fit_has_nothing_against_it():
    _, fit = _fit(GOOD_BOUNDS)
    assert fit.heldout_median_abs_error < MAX_HELDOUT_ERROR
    assert unreliable_reasons(fit) == []


def test_a_fit_pushed_against_its_bounds_is_unreliable_and_says_which(starved):
    _, fit = starved
    at = params_at_bounds(fit)
    assert len(at) >= 2 and all("at its upper bound" in a for a in at)
    assert any(a.startswith("matmul_flops_per_s at its upper bound") for a in at)
    reasons = unreliable_reasons(fit)
    assert any("parameters at their bounds" in r for r in reasons)
    assert any(r.startswith("held-out median error") and f"> {MAX_HELDOUT_ERROR:.0%}" in r for r in reasons)


def test_held_out_error_alone_refuses_a_fit():
    obs, _ = _fit(GOOD_BOUNDS)
    rng = np.random.default_rng(5)  # timings scattered by a factor of ~2 (another process on the cores)
    noisy = [Observation(o.id, o.kind, o.prefill_tokens, o.prefill_context, o.decode_batch, o.decode_context,
                         o.measured_s * float(np.exp(rng.normal(0, 0.7)))) for o in obs]
    fit = fit_cost_params(CostModel(get_model("llama-3.1-8b"), "q4_k_m", TRUE), noisy, GOOD_BOUNDS, seed=0)
    assert fit.heldout_median_abs_error > MAX_HELDOUT_ERROR
    assert unreliable_reasons(fit)[0].startswith("held-out median error")


def _finish_with(starved, monkeypatch, tmp_path, *, force, peaks=(1e9, 3e9)):
    obs, fit = starved
    monkeypatch.setattr("calibrate.calibration.fit_cost_params", lambda *a, **k: fit)
    spec = get_model("llama-3.1-8b")
    return _finish(name="busy-box", spec=spec, quant=spec.quant("q4_k_m"), observations=obs, raw=None, peaks=peaks,
                   int8_speedup=1.0, memory_bytes=64e9, seed=0, engine="llama.cpp",
                   calibration={"method": "llama.cpp probes", "date": "2026-12-06"}, kind="cpu",
                   display_name="busy box", vendor="test", out=tmp_path / "busy-box.yaml", write=True, force=force)


def test_unreliable_fit_writes_no_profile_and_the_cli_exits_non_zero_with_reason_and_retry(
        starved, monkeypatch, tmp_path, capsys):
    result = _finish_with(starved, monkeypatch, tmp_path, force=False)
    assert result.path is None and result.unreliable
    assert not (tmp_path / "busy-box.yaml").exists()
    console = Console(stderr=True, width=400)
    with pytest.raises(typer.Exit) as e:
        refuse_or_warn(console, result, retry="drop --quick for more probe points")
    assert e.value.exit_code == EXIT_UNRELIABLE != 0
    err = capsys.readouterr().err
    assert err.startswith("error: calibration not saved: ") and "parameters at their bounds" in err
    assert "quieter machine" in err and "drop --quick" in err and "--force" in err


def test_forced_profile_is_marked_unreliable_and_run_says_so_in_its_band(starved, monkeypatch, tmp_path, capsys):
    from sim.api import make_spec, run_spec

    result = _finish_with(starved, monkeypatch, tmp_path, force=True)
    assert result.path == tmp_path / "busy-box.yaml" and result.path.is_file()
    refuse_or_warn(Console(stderr=True, width=400), result, retry="-")
    assert "marked unreliable" in capsys.readouterr().err
    assert result.profile.calibration["unreliable"] == list(result.unreliable)
    summary = run_spec(make_spec(trace="workloads/examples/n-users.jsonl", hw=str(result.path), engine="llama.cpp",
                                 model="llama-3.1-8b", quant="q4_k_m", concurrency=1, record_iterations=False)).summary
    band = summary["config"]["expected_error"]
    assert band["unreliable"] == list(result.unreliable)
    assert describe(band).startswith("expected error: UNRELIABLE")
