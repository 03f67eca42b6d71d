"""Hardware profiles: every shipped profile validates and is sourced; lookup by name, path and user
folder; the loader's one-line errors; physical sanity invariants of the shipped figures."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.catalog.hardware import (
    HardwareProfile,
    available_profiles,
    load_profile,
    load_profile_file,
    shipped_profiles_dir,
    user_profiles_dir,
)
from sim.errors import ConfigError

SHIPPED = sorted(shipped_profiles_dir().glob("*.yaml"))
REQUIRED = {
    "dgx-spark", "h100-sxm", "h100-pcie", "h200", "a100-80g", "a100-40g", "l40s", "l4", "rtx-4090",
    "rtx-5090", "rtx-3090", "mi300x", "apple-m2-ultra", "apple-m3-max", "apple-m4-max", "cpu-x86-generic",
}

MINIMAL = {
    "name": "tiny",
    "kind": "gpu",
    "memory_capacity_gib": 8,
    "memory_bandwidth_gb_per_s": 100,
    "peak_tflops": {"bf16": 10},
}


def write_profile(path: Path, data: dict | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """No test sees the developer's own ~/.config/infersim/profiles."""
    monkeypatch.setenv("INFERSIM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


# ---- shipped profiles -------------------------------------------------------------------------


def test_all_required_profiles_are_shipped():
    assert REQUIRED <= {p.stem for p in SHIPPED}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_profile_validates_and_cites_its_sources(path):
    p = load_profile_file(path)
    assert p.name == path.stem, "a profile's name must match its file name (lookup is by file stem)"
    assert any(s.url.startswith("http") for s in p.sources), "at least one source URL"
    assert all(s.what for s in p.sources), "every source says what was read there"
    assert p.efficiency.source, "efficiency defaults say where they come from"
    for field in ("usable_memory_fraction", "iteration_overhead_ms", "memory_capacity_gib"):
        assert field in p.provenance, f"{field} has no provenance"
    if p.price.rental_usd_per_hour is not None or p.price.purchase_usd is not None:
        assert p.price.source, "a price cites where it was read"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_profile_is_physically_sane(path):
    p = load_profile_file(path)
    tf = p.peak_tflops
    assert p.bandwidth_bytes_per_s > 0 and p.memory_bytes > 0
    assert 0 < p.usable_memory_fraction <= 1
    assert p.usable_memory_bytes < p.memory_bytes or p.usable_memory_fraction == 1
    # narrower formats are never slower on the same tensor cores
    for wide, narrow in [("bf16", "fp8"), ("fp16", "fp8"), ("fp8", "fp4"), ("bf16", "int8"), ("int8", "int4")]:
        if wide in tf and narrow in tf:
            assert tf[narrow] >= tf[wide], f"{narrow} peak below {wide} peak"
    if "bf16" in tf and "fp16" in tf:
        assert tf["bf16"] == tf["fp16"], "bf16 and fp16 tensor rates are equal on every shipped chip"
    if "fp32" in tf:
        assert tf["fp32"] <= max(tf.values())
    # fallback chain: an fp8/fp4 request never returns less than the wider format's peak
    assert p.peak_flops("fp4") >= p.peak_flops("fp8") >= p.peak_flops("bf16") > 0
    # unified memory has no host link; a discrete GPU does
    if p.kind == "unified-soc":
        assert p.host_bandwidth_gb_per_s is None
    if p.kind == "gpu":
        assert p.host_bandwidth_gb_per_s is not None and p.interconnect_bandwidth_gb_per_s is not None
    # efficiencies within (0, 1] by construction; ridge point (FLOP per byte) within a plausible range
    ridge = p.peak_flops("bf16") / p.bandwidth_bytes_per_s
    assert 1 < ridge < 1000


def test_dense_peaks_are_half_the_sparse_datasheet_headlines():
    """Vendors headline 2:4-sparse figures; the profiles hold dense ones (sparse / 2)."""
    assert load_profile("h100-sxm").peak_tflops["bf16"] == pytest.approx(1978.9 / 2, rel=1e-3)
    assert load_profile("l40s").peak_tflops["fp8"] == pytest.approx(1466 / 2, rel=1e-3)
    assert load_profile("dgx-spark").peak_tflops["fp4"] == pytest.approx(1000 / 2)
    assert load_profile("mi300x").peak_tflops["fp8"] == pytest.approx(5229.8 / 2, rel=1e-3)


def test_unpublished_peaks_are_labelled_as_estimates():
    for name in ("dgx-spark", "apple-m1-max", "apple-m1-ultra", "apple-m2-max", "apple-m2-ultra", "apple-m3-max",
                 "apple-m3-ultra", "apple-m4-pro", "apple-m4-max"):
        p = load_profile(name)
        assert "ESTIMATE" in p.provenance["peak_tflops"], name


def test_memory_in_gib_converts_to_decimal_gb():
    # 80 GiB = 80 x 2^30 bytes = 85.899 GB
    p = load_profile("h100-sxm")
    assert p.memory_capacity_gib == 80
    assert p.memory_bytes == pytest.approx(80 * 2**30)
    assert p.usable_memory_bytes == pytest.approx(0.9 * 80 * 2**30)


# ---- lookup -------------------------------------------------------------------------------------


def test_profile_found_by_name_and_by_path(tmp_path):
    by_name = load_profile("h100-sxm")
    by_path = load_profile(shipped_profiles_dir() / "h100-sxm.yaml")
    assert by_name == by_path
    own = write_profile(tmp_path / "mine.yml", MINIMAL)
    assert load_profile(str(own)).name == "tiny"


def test_a_profile_is_parsed_once_per_version_of_its_file(tmp_path):
    path = write_profile(tmp_path / "mine.yaml", MINIMAL)
    first = load_profile_file(path)
    assert load_profile_file(path) is first  # the same version: not parsed again
    write_profile(path, {**MINIMAL, "memory_bandwidth_gb_per_s": 250})  # the file rewritten
    assert load_profile_file(path).memory_bandwidth_gb_per_s == 250


def test_shipped_profiles_are_package_data():
    import importlib.resources

    files = {f.name for f in importlib.resources.files("hardware_profiles").iterdir()}
    assert {f"{n}.yaml" for n in REQUIRED} <= files


def test_user_profile_shadows_shipped_one(isolated_home):
    shadow = dict(MINIMAL, name="h100-sxm", memory_bandwidth_gb_per_s=1234)
    path = write_profile(user_profiles_dir() / "h100-sxm.yaml", shadow)
    write_profile(user_profiles_dir() / "my-box.yaml", dict(MINIMAL, name="my-box"))
    assert user_profiles_dir() == isolated_home / "profiles"
    profiles = available_profiles()
    assert profiles["h100-sxm"] == path
    assert "my-box" in profiles and "dgx-spark" in profiles
    assert load_profile("h100-sxm").memory_bandwidth_gb_per_s == 1234


def test_unknown_name_lists_close_matches():
    with pytest.raises(ConfigError) as e:
        load_profile("h100")
    assert e.value.field == "--hw"
    assert "did you mean" in e.value.problem and "h100-sxm" in e.value.problem
    with pytest.raises(ConfigError) as e:
        load_profile("qqqqqq")
    assert "known:" in e.value.problem and "dgx-spark" in e.value.problem


# ---- one-line configuration errors ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, line, field, problem",
    [
        ("name: x\nkind: gpu\npeak_tflops: {bf16: 1\n", 3, None, "invalid YAML"),
        ("name: x\nkind: gpu\nmemory_capacity_gib: 8\nmemory_bandwidth_gb_per_s: -5\npeak_tflops: {bf16: 1}\n",
         4, "memory_bandwidth_gb_per_s", "greater than 0"),
        ("name: x\nkind: gpu\nmemory_capacity_gib: 8\nmemory_bandwidth_gb_per_s: 5\npeak_tflops: {bf16: 1}\nbandwith: 3\n",
         6, "bandwith", "unknown field"),
        ("name: x\nkind: gpu\nmemory_capacity_gib: lots\nmemory_bandwidth_gb_per_s: 5\npeak_tflops: {bf16: 1}\n",
         3, "memory_capacity_gib", "valid number"),
        ("name: x\nkind: tpu\nmemory_capacity_gib: 8\nmemory_bandwidth_gb_per_s: 5\npeak_tflops: {bf16: 1}\n",
         2, "kind", "gpu"),
        ("name: x\nkind: gpu\nmemory_capacity_gib: 8\nmemory_bandwidth_gb_per_s: 5\npeak_tflops:\n  bf16: 1\n  fp6: 2\n",
         7, "peak_tflops.fp6", "Input should be"),
        ("name: x\nkind: gpu\nmemory_capacity_gib: 8\nmemory_bandwidth_gb_per_s: 5\nmemory_bandwidth_gb_per_s: 6\npeak_tflops: {bf16: 1}\n",
         5, "memory_bandwidth_gb_per_s", "duplicate key"),
        ("name: x\nkind: gpu\nmemory_capacity_gib: 8\nmemory_bandwidth_gb_per_s: 5\npeak_tflops: {bf16: 1}\nefficiency: {compute: 1.5}\n",
         6, "efficiency.compute", "less than or equal to 1"),
        ("- just\n- a list\n", 1, None, "expected a mapping"),
        ("", 1, None, "expected a mapping"),
    ],
    ids=["bad-yaml", "negative-bandwidth", "unknown-field", "wrong-type", "bad-kind", "unknown-format",
         "duplicate-key", "efficiency-above-one", "not-a-mapping", "empty-file"],
)
def test_config_error_names_file_line_and_field(tmp_path, text, line, field, problem):
    path = write_profile(tmp_path / "bad.yaml", text)
    with pytest.raises(ConfigError) as e:
        load_profile(str(path))
    err = e.value
    assert err.file == str(path) and err.line == line and err.field == field
    assert problem in err.problem
    assert "\n" not in err.format()


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_profile(str(tmp_path / "nope.yaml"))
    assert e.value.problem == "file not found" and e.value.file.endswith("nope.yaml")


def test_memory_must_be_given_once_and_consistently():
    with pytest.raises(ValueError, match="required"):
        HardwareProfile.model_validate({k: v for k, v in MINIMAL.items() if k != "memory_capacity_gib"})
    with pytest.raises(ValueError, match="disagree"):
        HardwareProfile.model_validate(dict(MINIMAL, memory_capacity_gb=8.0))  # 8 GiB is 8.59 GB
    both = HardwareProfile.model_validate(dict(MINIMAL, memory_capacity_gb=8.59))
    assert both.memory_capacity_gb == 8.59
    gb_only = HardwareProfile.model_validate(
        dict({k: v for k, v in MINIMAL.items() if k != "memory_capacity_gib"}, memory_capacity_gb=24))
    assert gb_only.memory_bytes == 24e9


@pytest.mark.parametrize("name", ["h100-sxm", "dgx-spark", "cpu-x86-generic"])
def test_profile_round_trips_through_yaml(tmp_path, name):
    """A calibrated profile is written by dumping a loaded one; it must load back unchanged."""
    p = load_profile(name)
    path = write_profile(tmp_path / f"{name}.yaml", p.model_dump(mode="json"))
    assert load_profile(str(path)) == p


def test_provenance_must_name_real_fields():
    with pytest.raises(ValueError, match="unknown field"):
        HardwareProfile.model_validate(dict(MINIMAL, provenance={"bandwith": "typo"}))


def test_engine_specific_efficiency_overrides_default():
    p = HardwareProfile.model_validate(dict(MINIMAL, engine_efficiency={"vllm": {"compute": 0.5, "bandwidth": 0.9}}))
    assert p.efficiency_for("vllm").bandwidth == 0.9
    assert p.efficiency_for("llama.cpp") == p.efficiency
    assert p.efficiency_for(None) == p.efficiency


# ---- invariants over arbitrary profiles ----------------------------------------------------------

FORMATS = ["fp32", "bf16", "fp16", "fp8", "fp4", "int8", "int4"]


@settings(max_examples=60, deadline=None)
@given(
    peaks=st.dictionaries(st.sampled_from(FORMATS), st.floats(0.01, 1e5), min_size=1),
    gib=st.floats(0.5, 4096),
    frac=st.floats(0.01, 1.0),
    fmt=st.sampled_from(FORMATS + ["fp6"]),
)
def test_derived_quantities_follow_their_formulas(peaks, gib, frac, fmt):
    p = HardwareProfile.model_validate(
        dict(MINIMAL, peak_tflops=peaks, memory_capacity_gib=gib, usable_memory_fraction=frac))
    # memory_bytes = GiB x 2^30; usable = memory x fraction
    assert math.isclose(p.memory_bytes, gib * 2**30, rel_tol=1e-12)
    assert math.isclose(p.usable_memory_bytes, p.memory_bytes * frac, rel_tol=1e-12)
    # the peak for any requested format is one of the chip's own peaks (native or fallback)
    got = p.peak_flops(fmt) / 1e12
    assert any(math.isclose(got, v, rel_tol=1e-12) for v in peaks.values())
    if fmt in peaks:
        assert math.isclose(got, peaks[fmt], rel_tol=1e-12)


@pytest.mark.slow
def test_profiles_load_by_name_after_non_editable_install(tmp_path):
    """Build and install the package (not editable) into a fresh venv; profiles are package data.

    The venv borrows pydantic/pyyaml from the project venv through a plain path entry (which does not
    pull in the project's editable install), and runs from a folder outside the repository.
    """
    import subprocess
    import sys
    import sysconfig

    repo = Path(__file__).resolve().parents[1]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(repo)], check=True, timeout=600)
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    code = ("import sim.catalog.hardware as h; p = h.load_profile('dgx-spark'); "
            "print(h.shipped_profiles_dir()); print(p.name, len(h.available_profiles()))")
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "INFERSIM_HOME": str(tmp_path / "home")})
    assert out.returncode == 0, out.stderr
    folder, summary = out.stdout.splitlines()
    assert folder.startswith(site), "profiles come from the installed package, not the checkout"
    assert summary == f"dgx-spark {len(SHIPPED)}"


# ---- the 2026 parts (issue 39) ----------------------------------------------------------------

NEW_2026 = ["b200", "b300", "gb200", "gb300", "rtx-pro-6000", "rtx-5080", "rtx-5070-ti", "jetson-agx-thor", "l20", "h20",
            "mi325x", "mi350x", "mi355x", "ryzen-ai-max-395", "apple-m5", "apple-m5-pro", "apple-m5-max"]


@pytest.mark.parametrize("name", NEW_2026)
def test_a_2026_profile_cites_datasheets_and_carries_efficiencies_transferred_from_a_fitted_part(name):
    p = load_profile(name)
    assert sum(s.url.startswith("http") for s in p.sources) >= 2, "at least two datasheet/spec pages"
    assert "peak_tflops" in p.provenance or "dense" in (Path(available_profiles()[name]).read_text()), \
        "the dense peaks say how they follow from the headline figures"
    # plausible physics for a 2024-26 accelerator or SoC
    assert 100 <= p.memory_bandwidth_gb_per_s <= 10_000
    assert 16 <= p.memory_bytes / 2**30 <= 300
    assert 10e12 <= p.peak_flops("bf16") <= 3e15
    # every kernel family that runs on it ships efficiencies borrowed from a fitted device, and says so
    from calibrate.public_fit import families_for

    assert set(p.engine_efficiency) == set(families_for(name))
    from sim.catalog.engine_config import base_family

    for family, e in p.engine_efficiency.items():
        if e.corpus_rows:  # fitted to its own public rows (benchmarks/public/new_devices.csv)
            assert not e.transferred_from and "fitted by calibrate/public_fit.py" in e.source, family
            continue
        assert e.transferred_from, family
        assert "transferred from" in e.source and "calibrate/public_fit.py transfer" in e.source, family
        for donor in e.transferred_from:
            theirs = load_profile(donor).engine_efficiency
            lent = family if family in theirs and theirs[family].corpus_rows else base_family(family)
            assert theirs[lent].corpus_rows, f"{family} donor {donor} is a fitted device"


def test_datacenter_blackwell_peaks_are_half_the_sparse_headlines_and_domains_are_stated():
    b200, gb200, b300 = load_profile("b200"), load_profile("gb200"), load_profile("b300")
    assert b200.peak_tflops["fp8"] == 9000 / 2 and b200.peak_tflops["fp4"] == 18000 / 2   # HGX B200 sparse 9 / 18 PF
    assert gb200.peak_tflops["bf16"] == 5000 / 2                                        # GB200 at 1,200 W
    assert (b200.scale_up_domain_devices, gb200.scale_up_domain_devices) == (8, 72)
    assert "int8" not in b300.peak_tflops and "INT8" in b300.provenance["peak_tflops"]   # Blackwell Ultra cut INT8
    # GeForce Blackwell keeps the rtx-5090's ratios (fp32 accumulate at half rate): bf16 = fp4 / 8
    for name in ("rtx-5080", "rtx-5070-ti", "rtx-5090"):
        tf = load_profile(name).peak_tflops
        assert tf["bf16"] == pytest.approx(tf["fp4"] / 8, rel=0.01), name


def test_the_mi350x_is_the_mi355x_chip_at_its_lower_clock():
    """MI350X: the MI355X's gfx950 (256 CUs, 288 GiB, 8 TB/s) at 2.2 GHz and 1,000 W instead of 2.4 GHz."""
    a, b = load_profile("mi350x"), load_profile("mi355x")
    assert (a.memory_capacity_gib, a.memory_bandwidth_gb_per_s) == (b.memory_capacity_gib, b.memory_bandwidth_gb_per_s)
    for fmt in ("bf16", "fp8", "fp4"):
        assert a.peak_tflops[fmt] == pytest.approx(b.peak_tflops[fmt] * 2.2 / 2.4, rel=1e-3), fmt
    assert a.peak_tflops["bf16"] == pytest.approx(8 * 32 * 4096 * 2.2e9 / 1e12, abs=0.05)  # 2,306.9 as printed
    assert a.power_w == 1000 and any("2306.9" in s.what for s in a.sources)
