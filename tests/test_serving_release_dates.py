"""Issue 38: a vLLM version that prints no major.minor but a date (AMD's `rocm/vllm-dev:20250112`, "vLLM build
of Jan 2025") replays as the preset release that was current at that date (from upstream's release dates,
calibrate.serving.rows.VLLM_RELEASE_DATES), not as the newest one; `nightly` with no date stays the newest."""
from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

from calibrate.serving.rows import VLLM_RELEASE_DATES, build_date, dated_release, release_of

CSV = Path(__file__).resolve().parents[1] / "benchmarks" / "serving" / "amd_rocm.csv"


def test_the_rocm_dev_image_of_january_2025_replays_as_vllm_0_7():
    versions = {r["engine_version"] for r in csv.DictReader(open(CSV, newline="", encoding="utf-8"))
                if r["engine"] == "vllm"}
    assert versions == {"rocm/vllm-dev:20250112 (vLLM build of Jan 2025; version number not printed)"}
    (v,) = versions
    assert build_date(v) == dt.date(2025, 1, 12)  # the image tag's stamp wins over the month
    assert release_of("vllm", v) == "vllm@0.7"  # v0.7.0 came 2025-01-27; current on 01-12 was 0.6.x


def test_release_dates_pick_the_release_current_on_the_day():
    assert [d for d, _ in VLLM_RELEASE_DATES] == sorted(d for d, _ in VLLM_RELEASE_DATES)
    assert release_of("vllm", "vllm-dev:20250126") == "vllm@0.7"   # 0.6.x
    assert release_of("vllm", "vllm-dev:20250317") == "vllm@0.7"   # 0.7.x, V0 the default
    assert release_of("vllm", "vllm-dev:20250318") == "vllm@0.10"  # v0.8.0 (V1 the default) that day
    assert release_of("vllm", "build of Oct 2025") == "vllm@0.10"  # month-only: its first day, before v0.11.0
    assert release_of("vllm", "build of Nov 2025") == "vllm@0.11"
    assert release_of("vllm", "20240101") == "vllm@0.7"            # older than every release: the oldest
    assert release_of("vllm", "20260601") == "vllm@0.11"           # newer than every release: the newest
    assert dated_release("no date here") is None


def test_undated_versions_keep_their_rules():
    assert release_of("vllm", "nightly") == "vllm@0.11"            # no date: the newest (issue 38 item 3)
    assert release_of("vllm", "nightly wheel dea63512bb9b") == "vllm@0.11"
    assert build_date("nightly wheel ab20250112cd") is None        # digits inside a hash are not a date
    assert release_of("vllm", "unknown") == "vllm@0.11"
    assert release_of("vllm", "0.14.1") == "vllm@0.11"
    assert release_of("vllm", "v0.6.6.post1") == "vllm@0.7"
    # a printed major.minor wins over a date in the same text
    assert release_of("vllm", "0.11.0 (image of 20250112)") == "vllm@0.11"


def test_sglang_dated_builds_of_2024_are_0_4():
    assert release_of("sglang", "unknown (SGLang of Dec 2024; the result line and scripts print no version)") \
        == "sglang@0.4"
    assert release_of("sglang", "dev-cu13") == "sglang@0.5"
    assert release_of("sglang", "nightly-20250601") == "sglang@0.5"
    assert release_of("sglang", "0.5.13.post1") == "sglang@0.5"


def test_the_kernel_level_replay_maps_engine_versions_as_the_serving_corpus_does():
    """calibrate/public/replay.py prices a TP row's all-reduces by its engine release (`row_allreduce_algorithms`),
    mapped by the same `release_of`: TensorRT-LLM 0.5.0, which no release's `covers` range holds, is a 0.x
    release (NCCL's ring, no AUTO tables), not the preset's default 1.0; a dated vLLM build its date's release."""
    from types import SimpleNamespace

    from calibrate.public.replay import row_allreduce_algorithms
    from sim.catalog.engine_config import load_engine

    def algos(engine, version):
        return row_allreduce_algorithms(SimpleNamespace(engine=engine, engine_version=version))

    assert release_of("trtllm", "0.5.0 (TensorRT 9.1.0.4)") == "trtllm@0.x"
    assert algos("trtllm", "0.5.0 (TensorRT 9.1.0.4)") is False
    assert algos("trtllm", "0.13.0") is False and algos("trtllm", "1.0 (doc)") is True
    assert algos("trtllm", "1.2 (page of the 1.2.0 docs)") is True  # above every range: the newest, 1.0
    v = "rocm/vllm-dev:20250112"
    assert algos("vllm", v) is load_engine(release_of("vllm", v)).allreduce_algorithms
    assert algos("tgi", "2.0") is False  # an engine without a preset: no algorithm tables
