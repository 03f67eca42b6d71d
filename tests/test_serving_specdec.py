"""Speculative-decoding curves of the serving corpus (issue 38): a curve is replayed as speculative only
with the acceptance its source states (benchmarks/serving/side_tables/spec_acceptance.csv), and the
stated mean acceptance length sets the tokens each simulated verify step yields."""

from __future__ import annotations

import csv
import dataclasses
import math

import pytest

from calibrate.serving import rows as R
from sim.bench import corpus_spec as S
from sim.catalog.engine_config import load_engine
from sim.cost.speculative import expected_tokens_per_step, make_cost_model
from tests.test_serving_fit import _curve

DO_CURVE = "vllm_independent-do-gtc2026-phase3-eagle3-llama-3.3-70b-fp8-h200-tp1"
SPEC_FLAGS = "--speculative-config {\"method\":\"eagle3\",\"num_speculative_tokens\":2}"


def _spec_curve(name="spec-curve"):
    return _curve(name, {1: {"tpot_ms|median": 10.0}, 4: {"tpot_ms|median": 12.0}}, notes="EAGLE3 speculative decoding")


def _table(tmp_path, rows, monkeypatch):
    cols = ["curve_id", "load_kind", "load", "stated", "method", "num_speculative_tokens", "mean_acceptance_length",
            "draft_cost_fraction", "source"]
    path = tmp_path / "spec_acceptance.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in cols})
    monkeypatch.setattr(S, "SPEC_TABLE", path)
    return S.load_spec_acceptance(path)


def test_iid_acceptance_inverts_the_expected_tokens_on_hand_checked_cases():
    # k = 1: E = 1 + a, so L = 1.5 is a = 0.5; k = 2: E = 1 + a + a^2 = 1.75 at a = 0.5; L = k + 1 is a = 1
    assert R.iid_acceptance(1.5, 1) == pytest.approx(0.5, abs=1e-9)
    assert R.iid_acceptance(1.75, 2) == pytest.approx(0.5, abs=1e-9)
    assert R.iid_acceptance(3.0, 2) == pytest.approx(1.0, abs=1e-9)
    assert R.iid_acceptance(1.0, 3) == pytest.approx(0.0, abs=1e-9)
    # the DO run's printed figure: 1 + 53 accepted / 248511 drafts
    L = 1.0002132702375348
    assert expected_tokens_per_step(R.iid_acceptance(L, 3), 3) == pytest.approx(L, rel=1e-9)


def test_acceptance_length_raises_decode_tokens_per_step_as_stated():
    """Hand check: a draft + verify round costs the same whatever the acceptance, so the time per output
    token of a single sequence at L = 1.75 is the L = 1 round's divided by 1.75."""
    eng = load_engine("vllm")
    per_token = {}
    for L in (1.0, 1.75):
        spec = R.spec_override({"method": "eagle3", "num_speculative_tokens": "2", "mean_acceptance_length": str(L),
                                "draft_cost_fraction": "0.05"})
        assert spec["method"] == "eagle" and spec["k"] == 2
        cm = make_cost_model("h100-sxm", "llama-3.1-8b", "bf16", eng.with_overrides(speculative=spec))
        assert cm.tokens_per_step == pytest.approx(L, rel=1e-9)
        per_token[L] = cm.per_token_time([1000])
        assert cm.round_time([1000]) == pytest.approx(per_token[L] * L, rel=1e-9)
    assert per_token[1.0] / per_token[1.75] == pytest.approx(1.75, rel=1e-6)
    # against plain decoding: with nothing accepted the drafts and the 3-position verify only cost time
    plain = make_cost_model("h100-sxm", "llama-3.1-8b", "bf16", eng).step_time((), (), [1000])
    assert per_token[1.0] > plain
    assert per_token[1.75] < plain  # at batch 1 the verify reads the weights once: 1.75 tokens pay


def test_stated_or_excluded(tmp_path, monkeypatch):
    kw = dict(hw={"h100-sxm"}, catalog={"llama-3.1-8b"}, public=set())
    curve = _spec_curve()
    _table(tmp_path, [], monkeypatch)
    assert R.exclusion(curve, **kw) == "speculative decoding (not replayed: acceptance not stated in the source)"
    # a row saying where it was looked for and not found changes nothing
    _table(tmp_path, [{"curve_id": "spec-curve", "stated": "no", "method": "eagle3"}], monkeypatch)
    assert R.exclusion(curve, **kw).endswith("acceptance not stated in the source)")
    one = {"curve_id": "spec-curve", "load_kind": "concurrency", "load": "1", "stated": "yes", "method": "eagle3",
           "num_speculative_tokens": "2", "mean_acceptance_length": "2.2", "draft_cost_fraction": "0.05"}
    _table(tmp_path, [one], monkeypatch)
    assert R.exclusion(curve, **kw) == "speculative decoding (not replayed: acceptance stated for some load points only)"
    _table(tmp_path, [one, {**one, "load": "4", "mean_acceptance_length": "2.0"}], monkeypatch)
    assert R.exclusion(curve, **kw) is None
    _table(tmp_path, [{**one, "load": "", "method": "ngram"}], monkeypatch)
    assert R.exclusion(curve, **kw) == "speculative decoding (not replayed: method ngram not modelled)"
    # stated, but another reason still applies: that reason
    _table(tmp_path, [{**one, "load": ""}], monkeypatch)  # one per-run row stands for every point
    assert R.exclusion(_curve("spec-curve", {1: {"tpot_ms|median": 1.0}}, model="nope", notes="mtp"), **kw) \
        == "model nope not in the catalog"


def test_stated_curve_becomes_speculative_load_points(tmp_path, monkeypatch):
    curve = _spec_curve()
    one = {"curve_id": "spec-curve", "load_kind": "concurrency", "load": "1", "stated": "yes", "method": "eagle3",
           "num_speculative_tokens": "2", "mean_acceptance_length": "2.2", "draft_cost_fraction": "0.05"}
    _table(tmp_path, [one, {**one, "load": "4", "mean_acceptance_length": "1.75"}], monkeypatch)
    pts = R.load_points(curve, catalog={"llama-3.1-8b"})
    assert [p.load for p in pts] == [1.0, 4.0]
    for p, L in zip(pts, (2.2, 1.75)):
        spec = p.overrides["speculative"]
        assert spec["method"] == "eagle" and spec["k"] == 2 and spec["draft_cost_fraction"] == 0.05
        assert expected_tokens_per_step(spec["acceptance_rate"], 2) == pytest.approx(L, rel=1e-6)
    assert pts[0].key() != dataclasses.replace(pts[0], overrides={}).key()  # the cache sees it
    # a plain curve gets no speculative block
    plain = _curve("plain", {1: {"tpot_ms|median": 10.0}})
    assert all("speculative" not in p.overrides for p in R.load_points(plain, catalog={"llama-3.1-8b"}))


def test_committed_table_matches_the_corpus():
    """Every curve of the side table is a speculative corpus curve; stated rows carry a source and the
    printed figures (L >= 1, = 1 + accepted / drafts where counts are given); the DO EAGLE-3 run is stated
    at all eight rates (and stays out of the fit for its multi-turn dataset); every other speculative
    curve is excluded for its unstated acceptance."""
    table = S.load_spec_acceptance(S.SPEC_TABLE)
    curves = R.curves(R.load_corpus())
    assert table and set(table) <= set(curves)
    for cid, entries in table.items():
        for e in entries:
            assert e["source"].startswith("https://")
            if e["stated"] == "yes":
                L = float(e["mean_acceptance_length"])
                assert L >= 1.0
                if e.get("drafts"):
                    assert L == pytest.approx(1 + int(e["accepted_tokens"]) / int(e["drafts"]), rel=1e-9)
    assert R.spec_unreplayable(curves[DO_CURVE]) is None
    assert len(S.spec_stated(curves[DO_CURVE], S.load_spec_acceptance())) == 8
    assert R.exclusion(curves[DO_CURVE]).startswith("multi-turn")
    for cid, c in curves.items():
        text = " ".join((cid, c[0].get("engine_flags") or "", c[0].get("notes") or "")).lower()
        if cid != DO_CURVE and R.re.search(r"\b(eagle3?|mtp|speculative|spec[- ]decod|medusa|ngram)\b", text):
            assert R.exclusion(c) == "speculative decoding (not replayed: acceptance not stated in the source)", cid
