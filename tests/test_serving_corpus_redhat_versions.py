"""Issue 38: the Red Hat images in corpus C name the upstream vLLM they ship, so their rows replay against the
preset release that models that vLLM (vllm@0.10 for 0.9.x), not the newest one an `unknown` version falls to.

- RHAIIS 3.2.0 (registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.2.0): v0.9.2, Red Hat AI 3 'Supported product and
  hardware configurations', Table 2.1.
- RHOAI 2.23 (quay.io/modh/vllm:rhoai-2.23-cuda): 0.9.2.1, the tag on the red-hat-data-services/vllm rhoai-2.23
  branch the image is built from.
- RHAIIS 3.1.0: no public source found, so it stays `unknown` (and replays as the newest release).
"""
from __future__ import annotations

import csv
from pathlib import Path

from calibrate.serving.rows import release_of

CSV = Path(__file__).resolve().parents[1] / "benchmarks" / "serving" / "corpus_c.csv"
PREFIX = "corpus_c-redhat-h200-llama-3.3-70b-fp8-"


def _by_curve() -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    with open(CSV, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if r["curve_id"].startswith(PREFIX):
                out.setdefault(r["curve_id"][len(PREFIX):], []).append(r)
    return out


def test_red_hat_images_record_the_upstream_vllm_and_map_to_its_release():
    curves = _by_curve()
    expected = {  # curve suffix -> (engine_version, preset release)
        "rhaiis3.2.0-tp4-1000-100": ("v0.9.2", "vllm@0.10"),
        "take2-rhaiis3.2.0-tp4-1000-100": ("v0.9.2", "vllm@0.10"),
        "take2-rhaiis3.2.0-tp1-1000-100": ("v0.9.2", "vllm@0.10"),
        "rhoai2.23-tp4-1000-100": ("0.9.2.1", "vllm@0.10"),
        "vllm-midstream0.9.2.2-tp4-1000-100": ("0.9.2.2", "vllm@0.10"),
        "vllm0.9.2-tp4-1000-100": ("0.9.2", "vllm@0.10"),
        "take2-rhaiis3.1.0-tp4-1000-100": ("unknown", "vllm@0.11"),
    }
    for suffix, (version, release) in expected.items():
        rows = curves[suffix]
        assert {r["engine_version"] for r in rows} == {version}, suffix
        assert release_of("vllm", version) == release, suffix


def test_each_derived_version_cites_where_it_comes_from():
    curves = _by_curve()
    for suffix in ("rhaiis3.2.0-tp4-1000-100", "take2-rhaiis3.2.0-tp4-1000-100", "take2-rhaiis3.2.0-tp1-1000-100"):
        for r in curves[suffix]:
            assert "Table 2.1" in r["notes"] and "'3.2.0 | v0.9.2 |" in r["notes"], suffix
    for r in curves["rhoai2.23-tp4-1000-100"]:
        assert "red-hat-data-services/vllm" in r["notes"] and "v0.9.2.1" in r["notes"]
        assert "VLLM_VERSION=0.9.0.1" in r["notes"]  # the pretend version the build passes is said too
    for r in curves["take2-rhaiis3.1.0-tp4-1000-100"]:
        assert "no public page found names 3.1.0's vLLM" in r["notes"]
