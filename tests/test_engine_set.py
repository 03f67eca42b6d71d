"""The serving fit's engine-field override (calibrate/serving/engine_set.py; `run(..., engine_set=)`,
benchmarks/serving_fit.py --engine-set): it reaches every replay of every stage and the replayed EngineConfig, it
enters the replay cache key, a run without it replays and keys exactly as before, and bad fields are refused."""

from __future__ import annotations

import pytest

from calibrate import serving_fit as sf
from calibrate.serving import fit as sf_fit
from calibrate.serving import replay as rp
from tests.serving_cli import CLI, SUBSET_CLI, Stop, load_cli, stubbed_cli
from tests.test_serving_fit import SETS, _curve

ON = {"eager_launch_backends": True}


def _rows() -> list[dict]:
    """Three sources' tiny curves (llama-3.1-8b on H100 and H200, vLLM 0.11): enough for every fold of every stage."""
    rows = []
    for pub, dev in (("A", "h100-sxm"), ("B", "h200"), ("C", "h100-sxm")):
        values = {c: {"ttft_ms|median": 30.0 + c, "tpot_ms|median": 8.0, "output_tps|value": 90.0 * c} for c in (1, 4, 16)}
        rows += _curve(f"es-{pub}", values, publisher=pub, source=f"https://example.org/{pub}", device=dev)
    return rows


def _recorder(calls: list):
    """A stand-in for `replay` that records the parameters of every call and predicts from the fitted fields only
    (so the fit has something to choose and a run's choices do not depend on the engine override)."""
    def fake(point, params=None, cache=None, **kw):
        q = dict(params or {})
        calls.append(q)
        floor = float(q.get("layer_floor_us") or 0.0) + 100.0 * float(q.get("iteration_overhead_ms") or 0.0)
        fe = float(q.get("request_overhead_ms") or 0.0)
        bw = float((q.get("efficiency_scale") or {}).get("bandwidth", 1.0))
        tpot = 7.0 + floor / 50.0 / bw
        return {"ttft_ms|median": 25.0 + point.load + fe + floor / 20.0, "tpot_ms|median": tpot,
                "output_tps|value": 1000.0 / tpot * point.load}
    return fake


def _run_calls(monkeypatch, engine_set, jobs: int = 1) -> tuple[list[dict], list[dict]]:
    """(params of every replay, params of every prefetched pair) of a run of the whole fit on `_rows()`."""
    calls, fetched = [], []
    monkeypatch.setattr(sf_fit, "replay", _recorder(calls))
    monkeypatch.setattr(sf_fit, "prefetch", lambda pairs, cache, jobs, **kw: fetched.extend(q for _, q in pairs) or 0)
    sf.run(_rows(), cache=None, jobs=jobs, engine_set=engine_set)
    return calls, fetched


def test_every_replay_of_every_stage_gets_the_override_and_nothing_else_changes(monkeypatch):
    plain, plain_fetched = _run_calls(monkeypatch, None, jobs=2)
    calls, fetched = _run_calls(monkeypatch, ON, jobs=2)
    assert len(calls) > 50 and plain_fetched  # the stages replayed (and the grid was prefetched)
    assert all(q.get("eager_launch_backends") is True for q in calls + fetched)
    # the same replays, in the same order, with the field added: no stage's choice moved
    assert [{k: v for k, v in q.items() if k != "eager_launch_backends"} for q in calls] == plain
    assert [{k: v for k, v in q.items() if k != "eager_launch_backends"} for q in fetched] == plain_fetched
    assert not any("eager_launch_backends" in q for q in plain + plain_fetched)
    # "the presets as they are" (the shipped replay, and its prefetch) carry the override alone
    assert ON in calls and ON in fetched and {} in plain and {} in plain_fetched
    # None and {} are the same run
    assert _run_calls(monkeypatch, {}, jobs=2) == (plain, plain_fetched)


def test_a_refused_override_stops_the_run_before_any_replay(monkeypatch):
    calls: list = []
    monkeypatch.setattr(sf_fit, "replay", _recorder(calls))
    for bad, words in (({"eager_launch_backend": True}, "no field 'eager_launch_backend'; did you mean "
                                                        "eager_launch_backends"),
                       ({"layer_floor_us": 50.0}, "sets itself"), ({"iteration_overhead_ms": 1.0}, "sets itself"),
                       ({"eager_launch_backends": "perhaps"}, "eager_launch_backends='perhaps'")):
        with pytest.raises(ValueError, match=words) as e:
            sf.run(_rows(), cache=None, engine_set=bad)
        assert "\n" not in str(e.value)
    assert calls == []


def test_values_are_checked_against_the_field_type_and_normalised():
    assert sf.engine_set_of(None) == sf.engine_set_of({}) == {}
    assert sf.engine_set_of({"eager_launch_backends": "true"}) == ON  # pydantic's lax bool, stored as JSON true
    assert sf.engine_set_of({"moe_runner_backend": "flashinfer_trtllm", "flashinfer_allreduce_fusion": None}) == {
        "moe_runner_backend": "flashinfer_trtllm", "flashinfer_allreduce_fusion": None}


def test_the_fields_own_validators_run_too():
    # EngineConfig.gpu_layers's "integer >= 0 or 'auto'" rule is a @field_validator, not part of its type
    with pytest.raises(ValueError, match=r"gpu_layers=-1: .*integer >= 0 or 'auto'") as e:
        sf.engine_set_of({"gpu_layers": -1})
    assert "\n" not in str(e.value)
    assert sf.engine_set_of({"gpu_layers": "7"}) == {"gpu_layers": 7}  # the validator's own conversion
    assert sf.engine_set_of({"gpu_layers": "auto"}) == {"gpu_layers": "auto"}


def test_the_override_enters_the_cache_key_and_without_it_every_key_is_as_before():
    (p,) = sf.load_points(_curve("key", {1: {"ttft_ms|median": 20.0}}), catalog=SETS["catalog"])
    for q in [{}] + sf.grid():
        before = rp.cache_key(p, sf.fit_params(q))
        assert sf.fit_params(q, None) == sf.fit_params(q, {}) == sf.fit_params(q)
        assert rp.cache_key(p, sf.fit_params(q, None)) == rp.cache_key(p, sf.fit_params(q, {})) == before
        on, off = (rp.cache_key(p, sf.fit_params(q, {"eager_launch_backends": v})) for v in (True, False))
        assert len({before, on, off}) == 3  # with, without, and set to its default: three cache entries
    assert rp.cache_key(p, {}) != rp.cache_key(p, ON)  # the shipped replay's key too


def test_the_override_reaches_the_replayed_engine_config(monkeypatch):
    """`replay` hands the parameters to the deployment's overrides; resolved as run_client resolves them, the engine
    has the field set (without the override: the preset's default, off)."""
    import sim.bench.serve as serve
    from sim.api import make_spec, resolve

    (p,) = sf.load_points(_curve("eng", {1: {"ttft_ms|median": 20.0}}), catalog=SETS["catalog"])
    seen = []

    def fake_run_client(client, dep, **kw):
        seen.append(dep)
        raise RuntimeError("stop")
    monkeypatch.setattr(serve, "run_client", fake_run_client)
    for es in (ON, None):
        assert "error" in sf.predict(p, {}, None, es)
    engines = [resolve(make_spec(trace="t", hw=d.hw, model=d.model, quant=d.quant, engine=d.engine,
                                 overrides=dict(d.overrides)))[1] for d in seen]
    assert [e.eager_launch_backends for e in engines] == [True, False]


def _cli():
    return load_cli("serving_fit_cli_es")


def test_the_cli_parses_engine_set_and_refuses_bad_ones_with_exit_2(monkeypatch, capsys):
    cli, seen = stubbed_cli(monkeypatch, "serving_fit_cli_es")
    for argv in (["--curves", "x"], ["--curves", "x", "--engine-set", "eager_launch_backends=true",
                                     "--engine-set", "moe_runner_backend=flashinfer_trtllm"]):
        with pytest.raises(Stop):
            cli.main(argv)
    assert [kw["engine_set"] for kw in seen] == [{}, {"eager_launch_backends": True,
                                                     "moe_runner_backend": "flashinfer_trtllm"}]
    assert sf.parse_engine_set(["a=0.5", "b=null", "c=text", "d={\"x\": 1}"]) == {
        "a": 0.5, "b": None, "c": "text", "d": {"x": 1}}
    capsys.readouterr()
    for bad in (["--engine-set", "no_such_field=1"], ["--engine-set", "eager_launch_backends"],
                ["--engine-set", "layer_floor_us=5"],
                ["--engine-set", "eager_launch_backends=true", "--engine-set", "eager_launch_backends=false"]):
        assert cli.main(bad) == 2
        err = capsys.readouterr().err
        assert err.startswith("serving_fit.py: error: ") and err.count("\n") == 1, err
    assert len(seen) == 2  # nothing ran


def test_a_what_if_writes_nothing(monkeypatch):
    cli = _cli()
    wrote = []
    monkeypatch.setattr(cli.sf, "run", lambda rows, **kw: {})
    monkeypatch.setattr(cli.sf, "Cache", lambda path: type("C", (), {"save": lambda self: None})())
    monkeypatch.setattr(cli.sf, "load_corpus", lambda: [{"curve_id": "x"}])
    monkeypatch.setattr(cli.sf, "report_markdown", lambda res, t: "")
    monkeypatch.setattr(cli.sf, "summary_lines", lambda res, t: [])
    for name in ("OUT_JSON", "OUT_MD", "BANDS_JSON"):
        monkeypatch.setattr(cli, name, type("P", (), {"write_text": lambda self, s, n=name: wrote.append(n)})())
    assert cli.main(["--engine-set", "eager_launch_backends=true"]) == 0
    assert wrote == []


def test_the_eager_backends_subset_runs_the_fit_with_the_field_on_or_off(monkeypatch):
    cli, seen = stubbed_cli(monkeypatch, "eager_subset_cli_es", SUBSET_CLI)
    for argv in (["--curves", "x"], ["--curves", "x", "--off"]):
        with pytest.raises(Stop):
            cli.main(argv)
    assert [kw["engine_set"] for kw in seen] == [ON, {"eager_launch_backends": False}]


@pytest.mark.parametrize("script", [CLI, SUBSET_CLI], ids=lambda p: p.name)
def test_both_clis_refuse_curves_matching_nothing_with_their_own_one_line_error(monkeypatch, capsys, script):
    cli, seen = stubbed_cli(monkeypatch, f"{script.stem}_cli_curves", script)
    capsys.readouterr()
    assert cli.main(["--curves", "^nothing$"]) == 2
    assert capsys.readouterr().err == f"{script.name}: error: --curves '^nothing$' matches no curve_id\n"
    assert seen == []  # nothing ran
