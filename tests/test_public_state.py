"""The shipped profiles' generated blocks have one generator: the public fit (`infersim calibrate --public`).

The fit saves what `profile_entries` reads (calibrate/public/state.py, benchmarks/public_fit_state.json);
`--profiles-only` writes every profile's block from it without refitting (a newly added profile).
These tests check that what ships is byte for byte what that generator writes for this checkout's
corpus, and that the saved fit refuses a corpus it was not fitted to.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from calibrate.public.params import GroupParams
from calibrate.public.profiles import BLOCK_END, BLOCK_START, families_for, profile_entries, render_block
from calibrate.public.state import STATE_FILE, _group_from_json, _group_to_json, load_state
from calibrate.public_corpus import default_corpus_dir
from sim.catalog.hardware import available_profiles, shipped_profiles_dir
from sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def saved_entries():
    return profile_entries(load_state(default_corpus_dir()))


def test_every_shipped_profile_block_is_what_the_saved_public_fit_writes(saved_entries):
    """Regenerating (`infersim calibrate --public --profiles-only`) leaves every profile byte-identical:
    the fitted and the transferred entries (the 2026 parts', MI350X's) come from the one generator."""
    for name in available_profiles():
        path = shipped_profiles_dir() / f"{name}.yaml"
        text = path.read_text(encoding="utf-8")
        if not families_for(name):
            assert BLOCK_START not in text, name  # CPUs: no kernel family, no block
            continue
        block = text[text.index(BLOCK_START): text.index(BLOCK_END) + len(BLOCK_END)] + "\n"
        assert block == render_block(saved_entries[name]), f"{name}: rerun `infersim calibrate --public --profiles-only`"


def test_the_saved_fit_is_of_this_checkouts_corpus_and_refuses_another(tmp_path):
    assert STATE_FILE.is_file()
    load_state(default_corpus_dir())  # the corpus the shipped profiles were fitted to: no error
    other = tmp_path / "corpus"
    shutil.copytree(default_corpus_dir(), other)
    csv = sorted(other.glob("*.csv"))[0]
    csv.write_text(csv.read_text(encoding="utf-8") + "\n", encoding="utf-8")  # one byte more
    with pytest.raises(ConfigError) as e:
        load_state(other)
    assert e.value.field == "corpus_fingerprint" and "--profiles-only" in str(e.value)


def test_a_group_round_trips_through_the_saved_fit_exactly():
    g = GroupParams("h200", "ggml", {"gguf": 0.612345678901234, "f16": 0.8}, {"gguf": 0.1 / 3}, 0.2337, 0.794,
                    seq_ms=1e-3, half_rows=33.68, lat_us=None, rows=["a", "b"], sources=["s"], seen_classes=("gguf", "f16"),
                    current_share=0.5, pinned=frozenset({"attention", "compute:gguf"}), spread=0.071, eager=True,
                    attention_info=float("inf"))
    import json

    back = _group_from_json(json.loads(json.dumps(_group_to_json(g))))
    assert back == g and back.efficiency == g.efficiency


def test_profiles_only_takes_no_report_and_runs_from_the_cli():
    bad = subprocess.run([sys.executable, "-c", "from sim.cli import console_main; console_main()", "calibrate",
                          "--public", "--profiles-only", "--report", "x.md"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "--profiles-only" in bad.stderr and "Traceback" not in bad.stderr
    orphan = subprocess.run([sys.executable, "-c", "from sim.cli import console_main; console_main()", "calibrate",
                             "--profiles-only"], capture_output=True, text=True, cwd=ROOT)
    assert orphan.returncode == 2 and "--public" in orphan.stderr
