"""The per-layer kernel floor fitted per FFN kind (session 46, issue 38): dense-FFN layers and layers with routed
experts each get a floor of their own (EngineConfig.layer_floor_dense_us and layer_floor_us, sim.catalog.layer_floor;
a step's floor is n_dense x the dense floor + n_routed x the MoE floor, sim.cost.roofline `gemm_floor_s`).

Why: measured TPOT / n_layers at one client (where the weight stream is negligible) is ~125 us for dense
Llama-3.1-8B on vLLM H100 TP2 and ~80 us on TensorRT-LLM FP8 TP2 (waynehacking8), against ~130-190 us for MoE
models on SGLang B200/H100 and 125-200 us for bf16 MoE on MI300X: one floor per family, fitted on both, is too
long for the dense layers (vLLM's 200 us predicts the waynehacking8 TP2 Llama-3.1-8B TPOT 7.3 ms vs 4.0 measured).

The fit (`kind_stage1`, called by fit.fit_engine_params with by_kind=True): a point's kind is "moe" when its
model has any layer with routed experts (hybrids such as DeepSeek's first dense layers, Llama 4's interleave or
Nemotron-H count as MoE), else "dense" (`point_kind`). Stage 1 first picks the family's entry on all its points
as before (the pooled fit, its nested device grouping included); then each kind whose training points come
from at least `min_group_sources` sources (MIN_FLOOR_GROUP_SOURCES, minus one in the held-out folds, as for
device groups) refits, on its own points, the floor among the entries that differ from the family's only in
layer_floor_us, with the same nested choice of device grouping (calibrate/serving/floor.py) inside the kind; a
kind without enough sources keeps the pooled fit. While fitting, a hybrid point's dense layers are priced at
the MoE kind's trial floor (the grid prices every layer at one value); its prediction (`kind_floor_params`)
prices each layer at its own kind's floor: layer_floor_us = the MoE floor, layer_floor_dense_us = the dense
floor (each resolved for the point's device group where the kind has groups).

SHIP RULE, written and committed before any replay with the split (constants below): per engine family, over
its points held out by source (the shippable terms: the floor and the front-end latency fitted on the other
sources, calibrate/serving/fit.py `_heldout`; the AMD block-FP8 group's points are not judged, as in
floor_report.floor_ship_rule), the split ships only if, against one floor per family with its nested device
grouping (the `request_only` records):
  - the TPOT/ITL median |error| improves by at least MIN_GAIN_PTS percentage points,
  - the output-throughput median |error| improves by at least MIN_GAIN_PTS points, and
  - the TTFT p50 median |error| is worse by at most MAX_TTFT_LOSS_PTS points;
and both kinds have a floor of their own in the all-rows fit. Else the family keeps one floor. What ships when it
ships: layer_floor_dense_us = the dense kind's all-rows value, layer_floor_us = the MoE kind's; a kind's own
device-group values (where its nested grouping picks vendor or generation) are reported, and ship as hardware
rules only under the group rule of floor_report.floor_ship_rule, judged by whoever ships them.

Finding (written after the figures were seen; vLLM subset, `python benchmarks/floor_kind_subset.py --curves vllm`,
169 points from 10 sources, 2026-12-07): the dense floor fits 150 us and the MoE floor 200 us in 9 of 10 source
folds and on all rows (each kind's nested grouping: one floor), where one floor per family fits 200 us with a
per-generation split (Hopper 150, CDNA4 75, Blackwell 200). Held out by source, one floor -> per kind: TPOT/ITL
16.6% -> 19.4%, output throughput 31.1% -> 28.9%, TTFT p50 40.7% -> 42.5%: the rule keeps one floor for vLLM.
The dense points gain a little (TPOT/ITL 15.3 -> 14.6%, throughput 14.5 -> 13.6%, TTFT p50 34.8 -> 36.5%); the
MoE points lose the device split (TPOT/ITL 21.0 -> 38.4%: Together AI's MI350X gpt-oss-120b 79.0 -> 104.8% at
200 us instead of CDNA4's 75, pallavim1's Gemma-4 11.3 -> 29.4%), though their throughput gains (103.5 -> 72.5%,
SemiAnalysis' H200 rows). On these rows the device generation explains more of the floor than the FFN kind.
SGLang subset (`--curves 'redhat.*sglang|sglang-datacrunch|sglang-cookbook-(llama-3.1-70b|deepseek-r1|qwen3-235b|
minimax-m2.5-h100|glm-4.7)|ix-api-h200-sglang'`, 83 points, 4 sources, MoE from 2): both kinds fit 150 us on all
rows, the one floor's value, but a fold left with one source of a kind fits it alone (Red Hat held out: dense 0
us; the cookbook held out: MoE 0 us), so held out TPOT/ITL 10.4% -> 24.5%, throughput 7.9% -> 19.0%, TTFT p50
14.4% -> 15.5%: one floor stays for SGLang too.

Since the full fit of 2026-12-07 (1f8b07f: the rule fails for every family, so no preset sets
layer_floor_dense_us), the stage runs only with `python benchmarks/serving_fit.py --floor-kind` (it repeats the
shippable fit held out by source and on all rows, per kind). Without the flag the
report prints that run's figures from RECORD (benchmarks/serving/floorkind_rule.json, copied from the committed
report's `layer_floor.by_kind`), labelled as recorded, and `kind_ships` recomputes each family's verdict from
them (floorkind_report.recorded_ship_rule); tests/test_floor_kind.py holds the presets to the fresh section
where the report has one, else to the record.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from calibrate.serving.floor import _floor_variants, choose_floor_grouping, floor_group, floor_stage1
from calibrate.serving.record_file import read_json, read_record
from calibrate.serving.rows import LoadPoint

#: the ship rule's margins, in percentage points of median |error| (module docstring)
MIN_GAIN_PTS = 1.0
MAX_TTFT_LOSS_PTS = 1.0
#: the two kinds, the MoE one last (its floor is `layer_floor_us`, the dense one `layer_floor_dense_us`)
FLOOR_KINDS = ("dense", "moe")
#: the figures of the stage's last full-fit run, printed by the report when the stage is not run (module docstring)
RECORD = Path(__file__).resolve().parents[2] / "benchmarks" / "serving" / "floorkind_rule.json"
#: the held-out medians the rule reads, in percent
RULE_METRICS = ("tpot_itl", "output_tps", "ttft_p50")


def kind_ships(one: dict, kind: dict, values: dict) -> bool:
    """The ship rule (module docstring) on one family's held-out-by-source median |error| [%] per RULE_METRICS with
    one floor (`one`) and per kind (`kind`; None where a metric has no rows) and its all-rows per-kind entries
    (`values`: {kind: entry}): both kinds fitted, TPOT/ITL and throughput each MIN_GAIN_PTS better (a gain rounded
    to 0.1 point; none counts as 0), TTFT p50 at most MAX_TTFT_LOSS_PTS worse (unjudged without TTFT rows)."""
    def gain(m: str) -> float | None:
        return None if None in (one[m], kind[m]) else round(one[m] - kind[m], 1)
    ttft_ok = None in (one["ttft_p50"], kind["ttft_p50"]) or kind["ttft_p50"] - one["ttft_p50"] <= MAX_TTFT_LOSS_PTS
    return bool(all(k in values for k in FLOOR_KINDS)
                and all((gain(m) or 0.0) >= MIN_GAIN_PTS for m in ("tpot_itl", "output_tps")) and ttft_ok)


def load_record(path: Path | str = RECORD) -> dict:
    """RECORD's figures, checked for what the rule and the report read (each family's one-floor and per-kind
    medians, its all-rows per-kind values, the pooled floor; the date, commits and command): a ValueError naming
    the first missing field otherwise."""
    rec = read_json(path)
    need = [("schema",), ("date",), ("rule_committed_in",), ("recorded_in",), ("command",), ("rerun",),
            ("decides", "field"), ("families",)]
    for fam in rec.get("families") or {}:
        need += [("families", fam, side, m) for side in ("one_floor", "by_kind") for m in RULE_METRICS]
        need += [("families", fam, "values"), ("families", fam, "pooled_floor_us")]
    return read_record(path, need, may_be_empty=("values",), rec=rec)


@lru_cache(maxsize=None)
def _layers(model: str) -> tuple[int, int]:
    """(n_layers, n_routed_layers) of a catalog model."""
    from sim.catalog.lookup import get_model

    m = get_model(model)
    return m.n_layers, m.n_routed_layers


def point_kind(point: LoadPoint) -> str:
    """"moe" when the point's model has a layer with routed experts (hybrids included), else "dense"."""
    return "moe" if _layers(point.model)[1] > 0 else "dense"


def kind_stage1(ps: list[LoadPoint], options: list[dict], stage1, per_option: list[dict], floor_grouping: str | None,
                min_group_sources: int, loss, pooled_grouping: str):
    """A function fit(keep, min_sources) -> (pooled entry, {point key: entry}, {kind: {"layer_floor_us",
    "floor_grouping", "layer_floor_us_by_group", "floor_grouping_losses"}}) for one family's points `ps`: the
    pooled fit (floor_stage1 under `pooled_grouping`), then each kind with enough sources refitted on its own
    points (module docstring); the kinds' device groupings are chosen once, here, on all of `ps` (as the
    pooled grouping is: choose_floor_grouping), and reused in every inner fold."""
    kinds = {k: [p for p in ps if point_kind(p) == k] for k in FLOOR_KINDS}

    def kind_fit(k: str, keep, m: int, grouping: str):
        keep_k = (lambda p: keep(p) and point_kind(p) == k)
        variants = set(_floor_variants(options, stage1(keep)))  # the pooled entry's host costs, any floor
        return floor_stage1(kinds[k], options, stage1, keep_k, m, grouping, among0=variants)

    groupings, losses = {}, {}
    for k, ps_k in kinds.items():
        if ps_k:
            groupings[k], losses[k] = choose_floor_grouping(
                ps_k, per_option, lambda keep, m, G, k=k: kind_fit(k, keep, m, G), floor_grouping,
                min_group_sources, loss)

    def fit(keep, m: int):
        best_i, choice, _ = floor_stage1(ps, options, stage1, keep, m, pooled_grouping)
        own: dict[str, dict] = {}
        for k, ps_k in kinds.items():
            if len({p.source for p in ps_k if keep(p)}) < max(1, m):
                continue  # too few sources of this kind: the pooled fit
            ki, per_point, by_group = kind_fit(k, keep, m, groupings[k])
            choice.update(per_point)
            own[k] = {"layer_floor_us": float(options[ki].get("layer_floor_us", 0.0)), "floor_grouping": groupings[k],
                      **({"layer_floor_us_by_group": by_group} if by_group else {}),
                      **({"floor_grouping_losses": losses[k]} if losses.get(k) else {})}
        return best_i, choice, own
    return fit


def _kind_floor(entry: dict, point: LoadPoint) -> float:
    """A kind's floor for `point`: its device group's own where the kind has one, else the kind's."""
    by_group = entry.get("layer_floor_us_by_group") or {}
    g = floor_group(point, entry.get("floor_grouping") or "family") if by_group else None
    return float(by_group[g]) if g in by_group else float(entry["layer_floor_us"])


def kind_floor_params(by_kind: dict, point: LoadPoint, pooled_floor: float) -> dict:
    """The floor overrides of `point` under a per-kind fit (`by_kind`: {kind: entry}; a kind without an entry
    takes `pooled_floor`, the point's floor under the pooled fit): a dense model {"layer_floor_us": dense
    floor}; a model whose every layer has routed experts {"layer_floor_us": MoE floor}; a hybrid both,
    {"layer_floor_us": MoE floor, "layer_floor_dense_us": dense floor} (each layer at its own kind's)."""
    f = {k: (_kind_floor(by_kind[k], point) if k in by_kind else float(pooled_floor)) for k in FLOOR_KINDS}
    n_layers, n_routed = _layers(point.model)
    if n_routed == 0:
        return {"layer_floor_us": f["dense"]}
    if n_routed == n_layers:
        return {"layer_floor_us": f["moe"]}
    return {"layer_floor_us": f["moe"], "layer_floor_dense_us": f["dense"]}
