"""Calibrated profiles: they reproduce the fitted parameters through the simulator's own path, are
written atomically, and lend their efficiencies to machines we do not have."""

from __future__ import annotations

import os

import pytest

import calibrate.profile as profile_mod
from calibrate.profile import build_profile, write_profile_atomic
from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import apply_efficiencies, load_profile, load_profile_file
from sim.catalog.quant import get_quant
from sim.cost.params import CostParams
import sim.files as files_mod  # where the atomic write (and its os calls) lives

Q4 = get_quant("q4_k_m")


def _profile(params: CostParams, *, raw_bw=27e9, raw_mm=166e9, name="box"):
    return build_profile(
        name=name, params=params, quant=Q4, raw_bandwidth_bytes_per_s=raw_bw, raw_matmul_flops_per_s=raw_mm,
        memory_bytes=25e9, calibration={"date": "2026-12-02T00:00:00+00:00", "method": "test"},
    )


@pytest.mark.parametrize(
    "params",
    [
        CostParams(20e9, 120e9, 30e9, 0.5e-3, 0.1e-3),  # everything below the raw peaks
        CostParams(40e9, 400e9, 300e9, 0.0, 0.2e-3),  # int8 kernels beat fp32 GEMM; cache-resident weights
    ],
)
def test_profile_reproduces_the_fitted_parameters_through_from_profile(params, tmp_path):
    prof = _profile(params)
    for eff in (prof.efficiency.compute, prof.efficiency.bandwidth, prof.efficiency.attention):
        assert 0 < eff <= 1
    path = write_profile_atomic(prof, tmp_path / "box.yaml")
    back = load_profile_file(path)  # the YAML round trip, as --hw finds it
    for engine in (None, load_engine("llama.cpp")):
        got = CostParams.from_profile(back, Q4, engine)
        for f in CostParams.FIELDS:
            assert getattr(got, f) == pytest.approx(getattr(params, f), rel=1e-5), f
    assert (back.calibration["peaks_raised"] != []) == (params.matmul_flops_per_s > 166e9)


def test_profile_written_to_the_user_folder_is_found_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERSIM_HOME", str(tmp_path))
    from sim.catalog.hardware import user_profiles_dir

    write_profile_atomic(_profile(CostParams(20e9, 120e9, 30e9), name="my-box"), user_profiles_dir() / "my-box.yaml")
    assert load_profile("my-box").calibration["engine"] == "llama.cpp"


def test_interrupted_write_leaves_the_old_profile_and_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "box.yaml"
    old = _profile(CostParams(10e9, 50e9, 10e9))
    write_profile_atomic(old, target)
    before = target.read_bytes()

    def interrupted(src, dst):
        raise KeyboardInterrupt  # Ctrl-C between writing the temporary file and the rename

    monkeypatch.setattr(files_mod.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_profile_atomic(_profile(CostParams(30e9, 150e9, 30e9)), target)
    assert target.read_bytes() == before
    assert os.listdir(tmp_path) == ["box.yaml"]


def test_interrupted_first_write_leaves_no_profile_at_all(tmp_path, monkeypatch):
    def fail_midway(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(files_mod.os, "fsync", fail_midway)  # after part of the text is written
    with pytest.raises(KeyboardInterrupt):
        write_profile_atomic(_profile(CostParams(30e9, 150e9, 30e9)), tmp_path / "new.yaml")
    assert os.listdir(tmp_path) == []


def test_apply_efficiencies_keeps_target_peaks_and_takes_source_efficiencies():
    source = _profile(CostParams(20e9, 120e9, 30e9, 0.5e-3, 0.1e-3), name="my-box")
    h100 = load_profile("h100-sxm")
    out = apply_efficiencies(h100, source)
    assert out.memory_bandwidth_gb_per_s == h100.memory_bandwidth_gb_per_s
    assert out.peak_tflops == h100.peak_tflops
    assert out.efficiency == source.efficiency
    assert out.engine_efficiency["llama.cpp"] == source.engine_efficiency["llama.cpp"]
    # cpu -> gpu: a CPU's per-iteration software time is not a GPU's launch overhead
    assert out.iteration_overhead_ms == h100.iteration_overhead_ms
    prov = out.calibration["efficiency_from"]
    assert prov["profile"] == "my-box" and "efficiency" in prov["fields"]
    assert "iteration_overhead_ms" in prov["kept_from_target"]
    got = CostParams.from_profile(out, Q4)
    assert got.bandwidth_bytes_per_s == pytest.approx(h100.bandwidth_bytes_per_s * source.efficiency.bandwidth)
    assert got.matmul_flops_per_s == pytest.approx(h100.peak_flops("fp16") * source.efficiency.compute)


def test_apply_efficiencies_between_cpus_takes_the_overheads_too():
    source = _profile(CostParams(20e9, 120e9, 30e9, 0.5e-3, 0.1e-3), name="my-box")
    other_cpu = _profile(CostParams(60e9, 900e9, 200e9, 0.1e-3, 0.01e-3), raw_bw=80e9, raw_mm=1e12, name="big-cpu")
    out = apply_efficiencies(other_cpu, source)
    assert out.iteration_overhead_ms == pytest.approx(0.5)
    assert out.per_sequence_overhead_ms == pytest.approx(0.1)
    assert out.calibration["engine"] == "llama.cpp"  # so the llama.cpp preset's overheads are not added twice
    assert out.memory_bandwidth_gb_per_s == other_cpu.memory_bandwidth_gb_per_s


def test_timed_runs_are_written_one_list_per_line_and_read_back_exactly(tmp_path):
    samples = [0.013, 0.0125, 0.01301, 0.01299] * 25
    prof = build_profile(
        name="box", params=CostParams(20e9, 120e9, 30e9), quant=Q4, raw_bandwidth_bytes_per_s=27e9,
        raw_matmul_flops_per_s=166e9, memory_bytes=25e9,
        calibration={"method": "test", "probe_points": [{"id": "decode-1@64", "samples_s": samples, "runs": 100,
                                                          "tags": ["a", "b"]}]},
    )
    text = profile_mod.profile_to_yaml(prof)
    back = load_profile_file(write_profile_atomic(prof, tmp_path / "box.yaml"))
    assert back.calibration["probe_points"][0]["samples_s"] == samples
    assert "samples_s: [0.013, 0.0125," in text  # a flow list, not 100 lines
    assert "  - a\n" in text  # lists of strings keep the block style
