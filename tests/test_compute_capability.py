"""Hardware profiles' CUDA compute capability (`HardwareProfile.compute_capability`) and the one reader of it,
`sim.cost.prefill_graphs.sm_major`: every NVIDIA profile gives the figure NVIDIA's CUDA GPUs page (or, for parts
it leaves out, the cited device reports) gives and cites it; no other profile has one; a malformed value is a
one-line ConfigError naming the field; SGLang's compute-capability-10 choices (piecewise graphs off, the fused MoE
runner and all-reduce fusion for DeepSeek-V3) follow the field, so they reach the same four shipped devices the
name list they replace named, and an ad-hoc profile of another name too."""

from __future__ import annotations

import pytest
import yaml

from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import available_profiles, load_profile
from sim.catalog.lookup import get_model
from sim.cost.eager_backends import Backends, deployment_backends
from sim.cost.prefill_graphs import SM100_MAJOR, prefill_graphs_active, sm_major
from sim.errors import ConfigError

#: the figures verified for the shipped NVIDIA profiles (sources in each profile; Jetson Thor as CUDA 13 numbers it)
EXPECTED = {
    "a100-40g": "8.0", "a100-80g": "8.0",
    "h100-sxm": "9.0", "h100-pcie": "9.0", "h200": "9.0", "h20": "9.0",
    "l4": "8.9", "l40s": "8.9", "l20": "8.9", "rtx-4090": "8.9", "rtx-3090": "8.6",
    "b200": "10.0", "gb200": "10.0", "b300": "10.3", "gb300": "10.3",
    "rtx-5090": "12.0", "rtx-5080": "12.0", "rtx-5070-ti": "12.0", "rtx-pro-6000": "12.0",
    "dgx-spark": "12.1", "jetson-agx-thor": "11.0",
}
#: the devices the name list SM100_DEVICES held before the field replaced it
FORMER_SM100_DEVICES = {"b200", "b300", "gb200", "gb300"}

MINIMAL = {"name": "tiny", "kind": "gpu", "vendor": "NVIDIA", "memory_capacity_gib": 192,
           "memory_bandwidth_gb_per_s": 8000, "peak_tflops": {"bf16": 2250}}


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """No test sees the developer's own ~/.config/infersim/profiles."""
    monkeypatch.setenv("INFERSIM_HOME", str(tmp_path / "home"))


def _write(path, data: dict | str):
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return str(path)


@pytest.mark.parametrize("name", sorted(available_profiles()))
def test_every_nvidia_profile_gives_its_cited_compute_capability_and_no_other_profile_has_one(name):
    p = load_profile(name)
    if p.vendor != "NVIDIA":
        assert p.compute_capability is None and sm_major(p) is None
        return
    assert p.compute_capability == EXPECTED[name]
    sm = "sm_" + p.compute_capability.replace(".", "")
    assert any(p.compute_capability in s.what or sm in s.what for s in p.sources), \
        f"{name}: no source says {p.compute_capability} / {sm}"
    assert sm_major(p) == int(p.compute_capability.split(".")[0])


def test_the_expected_table_covers_every_nvidia_profile():
    nvidia = {n for n in available_profiles() if load_profile(n).vendor == "NVIDIA"}
    assert nvidia == set(EXPECTED)


def test_sm100_devices_are_the_four_the_name_list_named():
    """So every prediction on a shipped profile is what the name list gave."""
    sm100 = {n for n in available_profiles() if sm_major(load_profile(n)) == SM100_MAJOR}
    assert sm100 == FORMER_SM100_DEVICES


@pytest.mark.parametrize("value, line", [('"9.0"', '"9.0"'), ("9.0", "9.0"), ("10.3", "10.3"), ("12.1", "12.1")])
def test_quoted_or_unquoted_major_minor_loads(tmp_path, value, line):
    text = yaml.safe_dump(MINIMAL, sort_keys=False) + f"compute_capability: {value}\n"
    assert load_profile(_write(tmp_path / "ok.yaml", text)).compute_capability == line.strip('"')


@pytest.mark.parametrize("value, problem", [
    ('"sm_90"', "should match pattern"), ('"9"', "should match pattern"), ('"9.10"', "should match pattern"),
    ('"90"', "should match pattern"), ('"0.9"', "should match pattern"), ("9", "valid string"),
    ("[9, 0]", "valid string"),
])
def test_a_malformed_compute_capability_is_a_one_line_error_naming_the_field(tmp_path, value, problem):
    text = yaml.safe_dump(MINIMAL, sort_keys=False) + f"compute_capability: {value}\n"
    path = _write(tmp_path / "bad.yaml", text)
    with pytest.raises(ConfigError) as e:
        load_profile(path)
    err = e.value
    assert err.field == "compute_capability" and err.line == text.count("\n") and err.file == path
    assert problem in err.problem and "\n" not in err.format()


def test_an_adhoc_profile_with_compute_capability_10_gets_sglangs_sm100_choices(tmp_path):
    """A --hw file of another name with compute capability 10.0: the name list missed it; the field does not."""
    r1 = get_model("deepseek-r1")
    q = r1.quant("fp8")
    graphs = load_engine("sglang").model_copy(update={"prefill_graphs": True, "eager_prefill_launch_us": 38.0})
    fused = load_engine("sglang").with_overrides(eager_launch_backends=True, tp=8)
    mine = load_profile(_write(tmp_path / "my-blackwell.yaml", dict(MINIMAL, name="my-blackwell",
                                                                     compute_capability="10.0")))
    assert mine.name not in FORMER_SM100_DEVICES and sm_major(mine) == 10
    assert not prefill_graphs_active(r1, graphs, mine)  # flashinfer_trtllm MoE runner: graphs off
    assert deployment_backends(r1, fused, mine, q) == Backends("flashinfer_trtllm", True)
    # the same device without the field (or a consumer Blackwell, 12.0) is not SM100: graphs on, nothing fused
    for cc in (None, "12.0", "9.0"):
        other = load_profile(_write(tmp_path / f"other-{cc}.yaml", dict(MINIMAL, name="other", compute_capability=cc)))
        assert prefill_graphs_active(r1, graphs, other), cc
        assert deployment_backends(r1, fused, other, q) is None, cc
    # hw not known at all: assumed NVIDIA for graphs, not SM100
    assert prefill_graphs_active(r1, graphs, None) and deployment_backends(r1, fused, None, q) is None
