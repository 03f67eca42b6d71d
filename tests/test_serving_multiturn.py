"""The serving corpus's multi-turn curves (DigitalOcean GTC 2026, benchmarks/serving/README.md "Multi-turn
datasets"): excluded with the reason that holds, every other exclusion of theirs unchanged, and the
README's derived figures (which of the dataset's 500 entries vLLM's sampler sends) recomputed with
infersim's ShareGPT sampler, so the README cannot drift from the code it cites."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from calibrate.serving import rows as sr
from sim.bench.datasets import sample_sharegpt
from sim.bench.serve import ServeClient

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "benchmarks" / "serving" / "README.md").read_text(encoding="utf-8")
DO = "DigitalOcean solutions team"
N_CONV, N_TURNS = 100, 5  # the runs' report: 500 entries from 100 completed 5-turn conversations
BASE = 100  # synthetic entry i has BASE + i estimated tokens, so a sampled length names its entry


@pytest.fixture(scope="module")
def do_curves() -> dict[str, list[dict]]:
    rows = [r for r in sr.load_corpus() if r["publisher"].startswith(DO)]
    return sr.curves(rows)


@pytest.fixture(scope="module")
def sets() -> dict:
    return {"hw": sr._hw_names(), "catalog": sr._catalog_models(), "public": sr.public_sources()}


def test_multiturn_curves_excluded_with_the_missing_file_as_reason(do_curves, sets):
    multi = {cid: c for cid, c in do_curves.items() if "multi-turn" in c[0]["dataset"].lower()}
    reasons = {cid: sr.exclusion(c, **sets) for cid, c in multi.items()}
    spec = {cid for cid in multi if "eagle3" in cid}
    assert len(multi) == 8 and len(spec) == 1
    # the EAGLE-3 curve's acceptance is stated (benchmarks/serving/side_tables/spec_acceptance.csv), so the
    # speculative rule lets it through and it too stops at the multi-turn rule
    for cid, why in reasons.items():
        assert why == sr.MULTI_TURN_REASON, (cid, why)
    assert sum(len(multi[c]) for c in multi if c not in spec) == 1520
    assert "not available offline" in sr.MULTI_TURN_REASON and "prefix" in sr.MULTI_TURN_REASON


def test_the_same_publishers_sharegpt_v3_curve_is_not_caught_by_the_multiturn_rule(do_curves, sets):
    (cid,) = [c for c in do_curves if "phase0-sharegpt" in c]
    assert sr.exclusion(do_curves[cid], **sets) is None  # an open loop at its stated mean lengths
    assert sr.load_points(do_curves[cid])  # and it becomes load points


def test_rows_state_the_totals_the_readme_uses(do_curves):
    """Every rate of every multi-turn curve sent the same 300 prompts (1,741,762 input tokens)."""
    for cid, c in do_curves.items():
        if "multi-turn" not in c[0]["dataset"].lower():
            continue
        for r in c:
            assert "recorded total 1741762 / 300 completed requests" in r["notes"], r["row_id"]


def _dataset(tmp_path: Path) -> Path:
    """500 ShareGPT entries in the collector's order (conversation-major, turns in order); entry i's human
    text is 4 (BASE + i) characters, which infersim's estimator counts as BASE + i tokens."""
    entries = [{"conversations": [{"from": "human", "value": "x" * (4 * (BASE + i))},
                                  {"from": "gpt", "value": "y" * 40}]} for i in range(N_CONV * N_TURNS)]
    p = tmp_path / "conversations-sharegpt.json"
    p.write_text(json.dumps(entries))
    return p


def _sent(path: Path, n: int) -> list[tuple[int, int]]:
    client = ServeClient(dataset_name="sharegpt", dataset_path=str(path), num_prompts=n, seed=0)
    prompts, _ = sample_sharegpt(client)
    return [divmod(int(p) - BASE, N_TURNS) for p in prompts]  # (conversation, turn)


def test_readme_sampling_figures_follow_from_vllms_sampler(tmp_path):
    path = _dataset(tmp_path)
    sent = _sent(path, 300)
    assert len(set(sent)) == 300  # 500 entries: no oversampling, no entry twice
    by_turn = Counter(t for _, t in sent)
    counts = [by_turn[t] for t in range(N_TURNS)]
    mean_turn = sum(t for _, t in sent) / 300
    per_conv = Counter(Counter(c for c, _ in sent).values())
    assert f"{', '.join(map(str, counts[:-1]))} and {counts[-1]} times (mean turn {mean_turn:.3f})" in README
    assert len({c for c, _ in sent}) == N_CONV and "every one of the 100 conversations is sent" in README
    said = re.search(r"\((\d+) of them\s+once, (\d+) twice, (\d+) three, (\d+) four, (\d+) five times\)", README)
    assert said and [int(x) for x in said.groups()] == [per_conv[k] for k in range(1, 6)]
    warm = _sent(path, 10)
    assert warm == sent[:10]  # the warm-up (10 prompts, same seed) is the first 10 of the 300
    assert len({c for c, _ in warm}) == 10
    warm_turn = sum(t for _, t in warm) / 10
    assert f"10 different\nconversations (mean turn {warm_turn:.1f})" in README
    # the two-sum decomposition the README shows (and does not use)
    d = (1741762 / 300 - 53526 / 10) / (mean_turn - warm_turn)
    b = 1741762 / 300 - mean_turn * d
    assert f"= {d:,.0f} tokens" in README and f"= {b:,.0f}:" in README


def test_sampling_is_deterministic(tmp_path):
    path = _dataset(tmp_path)
    assert _sent(path, 300) == _sent(path, 300)
