"""calibrate/serving/floor_spread.py: the low-load per-layer floor analysis (docs/floor-structure.md)."""

from types import SimpleNamespace

from calibrate.serving.floor_spread import (context_slopes, kind_spread, layer_kind, low_load_tpot, markdown,
                                            release_sources)


def _meta(model, n_layers=50, kind="gqa+moe", version="0.5.6", publisher="A", mean_in=1000.0, mean_out=1000.0,
          device="b200", quant="bf16"):
    return {"engine": "sglang", "version": version, "device": device, "tp": "8", "model": model, "quant": quant,
            "publisher": publisher, "flags": "--tp 8", "n_layers": n_layers, "kind": kind, "mean_in": mean_in,
            "mean_out": mean_out}


def _row(cid, load, stat, measured, baseline=1.0, by_source=2.0, quantity="tpot_ms", metric="tpot_itl"):
    return {"curve_id": cid, "load": load, "metric": metric, "measured": measured, "baseline": baseline,
            "by_source": by_source, "row_id": f"{cid}-c{load:g}-{quantity}-{stat}"}


def test_layer_kind_names_attention_and_ffn():
    mla = SimpleNamespace(mla=object(), n_linear_layers=0, n_sliding_layers=0, is_moe=True)
    swa = SimpleNamespace(mla=None, n_linear_layers=0, n_sliding_layers=18, is_moe=True)
    lin = SimpleNamespace(mla=None, n_linear_layers=36, n_sliding_layers=0, is_moe=True)
    dense = SimpleNamespace(mla=None, n_linear_layers=0, n_sliding_layers=0, is_moe=False)
    assert [layer_kind(s) for s in (mla, swa, lin, dense)] == ["mla+moe", "gqa-swa+moe", "hybrid-linear+moe",
                                                               "gqa+dense"]


def test_low_load_picks_lowest_concurrency_mean_tpot_and_per_layer_times():
    meta = {"a": _meta("m1", n_layers=50)}
    rows = [_row("a", 4.0, "mean", 9.0), _row("a", 1.0, "median", 7.0), _row("a", 1.0, "mean", 7.5, baseline=5.0),
            _row("a", 1.0, "mean", 99.0, quantity="itl_ms"),  # ITL rows are not read
            _row("a", 16.0, "mean", 20.0),                    # above the low-load region
            {**_row("a", 1.0, "mean", 1.0), "row_id": "a-r1-tpot_ms-mean"}]  # a rate row: not a concurrency
    (r,) = low_load_tpot(rows, meta)
    assert (r["load"], r["measured_ms"]) == (1.0, 7.5)
    assert r["per_layer_us"] == 150.0 and r["gap_per_layer_us"] == 50.0
    assert r["error_pct"] == round(100 * (2.0 / 7.5 - 1), 1)


def test_kind_spread_needs_two_models_of_one_kind_on_one_deployment():
    meta = {"a": _meta("m1", n_layers=100), "b": _meta("m2", n_layers=50), "c": _meta("m3", kind="mla+moe")}
    recs = low_load_tpot([_row("a", 1.0, "mean", 10.0), _row("b", 1.0, "mean", 8.0), _row("c", 1.0, "mean", 9.0)],
                         meta)
    (g,) = kind_spread(recs)
    assert g["kind"] == "gqa+moe" and g["per_layer_us"] == {"m1": 100.0, "m2": 160.0} and g["max_over_min"] == 1.6


def test_release_sources_lists_publishers_per_version():
    meta = {"a": _meta("m1", version="0.5.12", publisher="X"), "b": _meta("m2", version="0.5.12", publisher="Y"),
            "c": _meta("m3", version="0.5.6", publisher="X")}
    recs = low_load_tpot([_row(c, 1.0, "mean", 10.0) for c in "abc"], meta)
    by_v = {g["version"]: g for g in release_sources(recs)}
    assert by_v["0.5.12"]["publishers"] == ["X", "Y"] and by_v["0.5.6"]["publishers"] == ["X"]


def test_context_slope_measured_against_predicted():
    meta = {"short": _meta("g", n_layers=40, mean_in=600.0, mean_out=400.0),
            "long": _meta("g", n_layers=40, mean_in=4200.0, mean_out=400.0),
            "other_quant": _meta("g", n_layers=40, mean_in=9000.0, mean_out=400.0, quant="fp8")}
    rows = [_row("short", 1.0, "mean", 8.0, by_source=5.0), _row("long", 1.0, "mean", 11.6, by_source=5.036),
            _row("other_quant", 1.0, "mean", 50.0)]
    (s,) = context_slopes(low_load_tpot(rows, meta))  # the fp8 curve is another deployment
    assert (s["context_lo"], s["context_hi"]) == (800, 4400)
    assert s["measured_us_per_token"] == 1.0 and s["predicted_us_per_token"] == 0.01
    assert s["measured_ns_per_token_layer"] == 25.0
    assert "| sglang 0.5.6 b200 tp8 g | 800 -> 4400 | 1.000 | 0.010 | 25.0 |" in markdown(
        {"records": [], "kind_spread": [], "release_sources": [], "context_slopes": [s]})
