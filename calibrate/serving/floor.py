"""The per-layer kernel floor per (engine family, device group): the groupings, a point's group, stage 1 of
the fit per group and the nested choice of the grouping (issue 38; used by calibrate/serving/fit.py
`fit_engine_params`, reported by calibrate/serving/floor_report.py)."""

from __future__ import annotations

import math
from collections import defaultdict

from calibrate.serving.rows import LoadPoint

#: the per-layer kernel floor is fitted per (engine family, device group) in the shippable fit. Groupings
#: (`floor_group`): "family" (one floor for every device), "vendor" (the hardware profile's `vendor`: NVIDIA,
#: AMD, ...) or "generation" (its `generation`: hopper, blackwell, cdna3, ...). A group gets a floor of its
#: own only when its rows come from at least MIN_FLOOR_GROUP_SOURCES sources (so each can be predicted from
#: another of the same group); otherwise it takes its family's (all its rows pooled).
#: FLOOR_GROUP "nested" picks the grouping per family by leave-one-source-out over the training sources alone
#: (`fit_engine_params`), like the front-end rule. History, said because it is a choice made after seeing
#: held-out figures: "vendor" was first fixed a priori (the floor is a chain of kernel launch-to-completion
#: times set by the vendor's runtime and libraries: CUDA graphs + cuBLAS/FlashInfer/CUTLASS vs HIP graphs +
#: hipBLASLt/aiter); its held-out figures on SGLang's rows (AMD's TPOT/ITL 27.9% -> 30.3% with the split)
#: were seen before the nested choice over the three groupings replaced it.
FLOOR_GROUPINGS = ("family", "vendor", "generation")
FLOOR_GROUP = "nested"
MIN_FLOOR_GROUP_SOURCES = 2
_PROFILE_FIELD: dict[tuple[str, str], str] = {}


def floor_group(point: LoadPoint, grouping: str = "vendor") -> str:
    """The point's group under `grouping` (FLOOR_GROUPINGS): "*" for "family", else its device profile's
    `vendor` or `generation` ('' -> 'unknown')."""
    if grouping == "family":
        return "*"
    k = (point.device, grouping)
    if k not in _PROFILE_FIELD:
        from sim.catalog.hardware import load_profile

        try:
            _PROFILE_FIELD[k] = getattr(load_profile(point.device), grouping) or "unknown"
        except Exception:  # noqa: BLE001 - a device without a profile is excluded before replay; be safe
            _PROFILE_FIELD[k] = "unknown"
    return _PROFILE_FIELD[k]


def _floor_variants(options: list[dict], i: int) -> list[int]:
    """The options that differ from options[i] only in layer_floor_us (no floor counted as 0): the ones a
    vendor group may pick instead of its family's (so a group never changes the family's host step costs)."""
    def rest(o: dict) -> dict:
        return {k: v for k, v in o.items() if k != "layer_floor_us"}
    return [j for j, o in enumerate(options) if rest(o) == rest(options[i])]


def floor_stage1(ps: list[LoadPoint], options: list[dict], stage1, keep, min_sources: int, grouping: str,
                 among0: set[int] | None = None) -> tuple[int, dict[str, int], dict[str, float]]:
    """(family entry, {point key: entry}, {group: floor}) fitted on the points `keep` selects: stage 1's entry
    for the family (`stage1(keep, among=among0) -> index`; among0 None = any entry), then each group under
    `grouping` whose selected points come from at least `min_sources` sources picks among the entries that
    differ from the family's only in layer_floor_us; every point of such a group (selected or not) takes the
    group's entry."""
    fam_i = stage1(keep, among=among0)
    per_point = {p.key(): fam_i for p in ps}
    own: dict[str, float] = {}
    variants = _floor_variants(options, fam_i) if grouping != "family" else []
    if len(variants) > 1:
        for g in sorted({floor_group(p, grouping) for p in ps if keep(p)}):
            gps = [p for p in ps if keep(p) and floor_group(p, grouping) == g]
            if len({p.source for p in gps}) < max(1, min_sources):
                continue
            gi = stage1(lambda p, g=g: keep(p) and floor_group(p, grouping) == g, among=set(variants))
            own[g] = float(options[gi].get("layer_floor_us", 0.0))
            for p in ps:
                if floor_group(p, grouping) == g:
                    per_point[p.key()] = gi
    return fam_i, per_point, own


def choose_floor_grouping(ps: list[LoadPoint], per_option: list[dict], stage1_by_point, floor_grouping: str | None,
                          min_group_sources: int, loss) -> tuple[str, dict[str, float]]:
    """(grouping, {grouping: loss}): `floor_grouping` itself (None = "family"), or for "nested" the one of
    FLOOR_GROUPINGS whose leave-one-source-out step error is the smallest: each source's TPOT/ITL and
    output-throughput residuals (`per_option[entry][point key]`) under the entries `stage1_by_point` fits on
    the other sources (a group keeping its own floor when another source of it remains), `loss(records)`
    (stage 1's: the median |log| over TPOT/ITL and output-throughput rows) over all of them (ties: the
    earlier in FLOOR_GROUPINGS). Fewer than two sources: "family"."""
    if floor_grouping != "nested":
        return floor_grouping or "family", {}
    sources = sorted({p.source for p in ps})
    if len(sources) < 2:
        return "family", {}
    losses = {}
    for G in FLOOR_GROUPINGS:
        recs = []
        for s in sources:
            ch_s = stage1_by_point(lambda p, s=s: p.source != s, max(1, min_group_sources - 1), G)[1]
            recs += [r for p in ps if p.source == s for r in per_option[ch_s[p.key()]][p.key()]]
        losses[G] = round(loss(recs), 5)
    return min(FLOOR_GROUPINGS, key=lambda G: (losses[G], FLOOR_GROUPINGS.index(G))), losses


def shipped_family_floors(points: list[LoadPoint]) -> dict[str, float]:
    """{family: layer_floor_us} of each family's preset (default release) before its hardware rules: the
    value every vendor group without a rule of its own runs."""
    from sim.catalog.engine_config import load_engine

    return {f: float(load_engine(f).layer_floor_us) for f in sorted({p.family for p in points})}


def preset_values_by_device(points: list[LoadPoint], value) -> dict[str, dict[str, float]]:
    """{family: {device: value(engine)}}: what each family's preset (default release) runs on each device the
    points use, its hardware rules (a per-vendor or per-generation value) applied."""
    from sim.catalog.engine_config import load_engine
    from sim.catalog.hardware import load_profile

    out: dict[str, dict[str, float]] = defaultdict(dict)
    for p in points:
        if p.device not in out[p.family]:
            out[p.family][p.device] = float(value(load_engine(p.family).for_hardware(load_profile(p.device))))
    return {f: dict(sorted(v.items())) for f, v in sorted(out.items())}


def shipped_device_floors(points: list[LoadPoint]) -> dict[str, dict[str, float]]:
    """{family: {device: layer_floor_us}} the presets run (`preset_values_by_device`)."""
    return preset_values_by_device(points, lambda eng: eng.layer_floor_us)


def median_abs_pct(records: list[dict], metric: str, keys: set[str] | None = None) -> float | None:
    """The median |error| in percent, rounded to 0.1 (fit.summarize's `median_abs_pct`), of `records`' rows of
    `metric` (of the points `keys` when given); None without rows. Here, below fit.py, because the ship rules
    of the floor, the bandwidth scale and the joint pair read it and fit imports those modules."""
    from statistics import median

    e = [abs(r["error"]) for r in records
         if r["metric"] == metric and r["error"] is not None and (keys is None or r["point"] in keys)]
    return round(100 * float(median(e)), 1) if e else None


#: the four headline metrics a group term's ship rule reads (blockfp8, blockprefill)
GROUP_METRICS = ("ttft_p50", "ttft_p99", "tpot_itl", "output_tps")


def family_medians(grp: list, family: str, ref: list[dict], got: list[dict]) -> tuple[list, list[str], dict, dict]:
    """A group's points of `family`, their sources (sorted), and the held-out median |error| per GROUP_METRICS
    of `ref` (without a term) and `got` (with it) over those points."""
    gps = [p for p in grp if p.family == family]
    keys = {p.key() for p in gps}
    return (gps, sorted({p.source for p in gps}), {m: median_abs_pct(ref, m, keys) for m in GROUP_METRICS},
            {m: median_abs_pct(got, m, keys) for m in GROUP_METRICS})


def first_best(values, loss_of, default: float) -> float:
    """The grid searches' argmin (the bandwidth scale's, the host cost's): `values` are scanned in their order
    (`loss_of` is called in it) and one replaces the best so far only when its loss is lower by more than
    1e-12, so a later value must be strictly better (ties and float noise keep the earlier); `default` when no
    loss is below infinity."""
    best, best_loss = default, math.inf
    for v in values:
        lv = loss_of(v)
        if lv < best_loss - 1e-12:
            best, best_loss = v, lv
    return best


def stacked_rows(head: str, blank: str, metrics, before: dict, after: dict, ship: bool, fmt) -> list[str]:
    """Markdown rows, one per metric (`fmt(before[m])`, `fmt(after[m])`): the first starts with `head` and ends
    with the ship verdict, the others start with `blank` (the reports' before/after tables of the block-FP8 term
    and the joint pair)."""
    return [f"{head if i == 0 else blank} {m} | {fmt(before[m])} | {fmt(after[m])} | "
            f"{('yes' if ship else 'no') if i == 0 else ''} |" for i, m in enumerate(metrics)]


def pct(v: float | None) -> str:
    """A median |error| % as the report prints it ('-' for none)."""
    return "-" if v is None else f"{v:.1f}%"


def held_out_gain(tpot_with: float | None, tpot_without: float | None, tps_with: float | None,
                  tps_without: float | None) -> bool:
    """The ship rules' test of a per-group term (the floor's, the bandwidth scale's): held out, the TPOT/ITL
    median |error| % with it is smaller than without, and the output-throughput one no larger (None: none)."""
    return (None not in (tpot_with, tpot_without) and tpot_with < tpot_without
            and (tps_with is None or tps_without is None or tps_with <= tps_without))


def split_ships(has_own: bool, value: float, family_value: float, split: dict, one_floor: dict) -> bool:
    """The per-group floor's ship rule (floor_report.floor_ship_rule; effscale.floors_as_shipped reads it too):
    the group has a value of its own, different from the family's, and its rows held out by source beat one
    floor per family (`held_out_gain` over {metric: median |error| %} with the split vs with one floor)."""
    return bool(has_own and value != family_value and held_out_gain(
        split["tpot_itl"], one_floor["tpot_itl"], split["output_tps"], one_floor["output_tps"]))


def floor_ships_alone(points: list[LoadPoint], baseline_records: list[dict], floor_records: list[dict]
                      ) -> dict[str, bool]:
    """{family: whether its fitted floor ships on its own}: over all the family's rows held out by source, the
    shippable fit (the floor and the front-end latency fitted on the other sources, `floor_records`) has a
    smaller TPOT/ITL median |error| than the baseline (no floor, no front-end latency: `baseline_records`)
    and an output-throughput median no larger (`held_out_gain`). The rule the presets followed when the
    floors shipped (SGLang, TensorRT-LLM 150 us; vLLM's 150 us rejected: NVIDIA TPOT/ITL 29.9% -> 34.1%,
    benchmarks/serving_fidelity.md), written down here so that the scale's and the joint ship rules
    (calibrate/serving/effscale.py) read a decision, not what a preset happens to run."""
    return {f: v["ship"] for f, v in floor_alone_figures(points, baseline_records, floor_records).items()}


def floor_alone_figures(points: list[LoadPoint], baseline_records: list[dict], floor_records: list[dict]
                        ) -> dict[str, dict]:
    """{family: {"baseline": {metric: median |error| %}, "floor": {...}, "ship": bool}}: the figures behind
    `floor_ships_alone` (TPOT/ITL and output throughput, all the family's rows held out by source)."""
    out = {}
    for fam in sorted({p.family for p in points}):
        keys = {p.key() for p in points if p.family == fam}
        b = {m: median_abs_pct(baseline_records, m, keys) for m in ("tpot_itl", "output_tps")}
        f = {m: median_abs_pct(floor_records, m, keys) for m in ("tpot_itl", "output_tps")}
        out[fam] = {"baseline": b, "floor": f,
                    "ship": held_out_gain(f["tpot_itl"], b["tpot_itl"], f["output_tps"], b["output_tps"])}
    return out
