"""Held-out error: in sample, leave-one-device-out (through `transfer`), leave-one-source-out,
leave-one-model-out (`cross_validate`), and the error bands a profile ships (`error_bands`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from calibrate.public.corpus import PublicCorpus, corpus_or_default
from calibrate.public.era import current_share
from calibrate.public.fitting import _groups, fit_all, fit_group
from calibrate.public.params import GroupParams
from calibrate.public.replay import Shape, predict
from calibrate.public.replayers import Prepared
from calibrate.public.transfer import _tier, transfer
from calibrate.public_corpus import PublicRow


# ---- the whole fit and its held-out error -----------------------------------------------------------

KINDS = {"prompt_tps": "prefill", "ttft_ms": "prefill", "decode_tps": "decode", "tpot_ms": "decode",
         "itl_ms": "decode", "decode_tps_per_user": "decode", "output_tps": "throughput",
         "total_tps": "throughput", "e2e_s": "latency"}


def _err(row: PublicRow, shape: Shape, p: GroupParams | None, corpus: PublicCorpus | None = None) -> float:
    """Signed relative error (predicted / measured - 1); nan when nothing predicts the row."""
    if p is None:
        return float("nan")
    pred = predict(row, shape, p, corpus=corpus)
    return pred / row.value - 1.0 if math.isfinite(pred) else float("inf")


@dataclass
class Validation:
    """Per-row errors: in-sample, leave-one-device-out, leave-one-source-out, leave-one-model-out."""

    prepared: list[Prepared]
    fits: dict
    in_sample: dict[str, float]
    lodo: dict[str, float]
    loso: dict[str, float]
    lodo_from: dict[str, list[str]]
    lomo: dict[str, float] = field(default_factory=dict)
    # the corpus the rows were fitted and predicted with (its micro-benchmarks and fitted routing skew
    # and mat-vec cost): what `profile_entries` transfers and the report's checks price with
    corpus: PublicCorpus = field(default_factory=PublicCorpus)
    # (row_id, device, family, quantity) of every replayed row, when the rows themselves are not here
    # (a fit reloaded by calibrate.public.state); None: read off `prepared` (`held_rows`)
    held: list[tuple[str, str, str, str]] | None = None


def held_rows(v: Validation) -> list[tuple[str, str, str, str]]:
    """(row_id, device, family, quantity) of every replayed row of `v`: what the error bands read."""
    if v.held is not None:
        return v.held
    return [(it.row.row_id, it.row.device, it.family, it.row.quantity) for it in v.prepared if it.shape is not None]


def cross_validate(prepared: list[Prepared], corpus: PublicCorpus | None = None,
                   fits: dict | None = None) -> Validation:
    """Fit every group (unless `fits` are given) and hold rows out: by device (through `transfer`), by
    source (refits without it), by model within a device; every row priced with `corpus`."""
    corpus = corpus_or_default(corpus)
    fits = fits if fits is not None else fit_all(prepared, corpus)
    groups = _groups(prepared)
    ins, lodo, loso, lodo_from = {}, {}, {}, {}
    for (d, f), items in groups.items():
        for it in items:
            ins[it.row.row_id] = _err(it.row, it.shape, fits[(d, f)], corpus)
    # leave one device out: every group of that device predicted from the other devices only
    for d in sorted({d for d, _ in groups}):
        rest = {k: v for k, v in fits.items() if k[0] != d}
        for (dd, f), items in groups.items():
            if dd != d:
                continue
            p = transfer(d, f, rest, era=current_share([it.row for it in items]), corpus=corpus)
            for it in items:
                lodo[it.row.row_id] = _err(it.row, it.shape, p, corpus)
                lodo_from[it.row.row_id] = p.transferred_from if p else []
    # leave one source out: refit the groups a source touches without it
    by_source: dict = defaultdict(list)
    for k, items in groups.items():
        for it in items:
            by_source[it.row.source].append((k, it))
    for src, members in by_source.items():
        keys = sorted({k for k, _ in members})
        for k in keys:
            left = [it for it in groups[k] if it.row.source != src]
            if left:
                p = fit_group(left, *k, corpus)
            else:
                p = transfer(k[0], k[1], {kk: v for kk, v in fits.items() if kk != k},
                             era=current_share([it.row for it in groups[k]]), corpus=corpus)
            for kk, it in members:
                if kk == k:
                    loso[it.row.row_id] = _err(it.row, it.shape, p, corpus)
    # leave one model out, within a device: what a user predicting a model the device's rows never
    # measured should expect (groups with a single model have no such error)
    lomo = {}
    for k, items in groups.items():
        models = sorted({it.row.model for it in items})
        if len(models) < 2:
            continue
        for m in models:
            p = fit_group([it for it in items if it.row.model != m], *k, corpus)
            for it in items:
                if it.row.model == m:
                    lomo[it.row.row_id] = _err(it.row, it.shape, p, corpus)
    return Validation(prepared, fits, ins, lodo, loso, lodo_from, lomo, corpus)


def _stats(errs: list[float]) -> dict:
    a = np.abs(np.array([e for e in errs if not math.isnan(e)], dtype=float))
    if not len(a):
        return {"n": 0, "median": None, "p80": None, "p90": None}
    a = np.where(np.isfinite(a), a, 10.0)
    return {"n": int(len(a)), "median": float(np.median(a)), "p80": float(np.percentile(a, 80)),
            "p90": float(np.percentile(a, 90))}


BAND_MIN_ROWS = 3  # fewer held-out rows than this of a kind: the next basis down is quoted


def error_bands(v: Validation, device: str, family: str) -> dict[str, dict]:
    """Expected error per kind of figure for `device` under `family`: the 80th percentile of
    held-out |predicted / measured - 1|. Where the device has rows of the kind for at least two
    models, leave-one-model-out on this device (a model the fit did not see: what a user asks about
    next); else the family's leave-one-device-out error over the comparable devices (same
    generation, or same vendor and memory class), or over every device when those have too few
    rows of the kind (what a transferred prediction has shown elsewhere)."""
    out = {}
    fam = [(rid, dev, q) for rid, dev, f, q in held_rows(v) if f == family]
    own = [(rid, q) for rid, dev, q in fam if dev == device]
    fitted_here = (device, family) in v.fits
    # the comparable devices (`_tier` per distinct device, not per row)
    near = sorted(d for d in {dev for _, dev, _ in fam} if d != device and _tier(device, d) <= 1)
    for kind in ("prefill", "decode", "throughput", "latency"):
        mine = [v.lomo[rid] for rid, q in own if KINDS[q] == kind and rid in v.lomo]
        st = _stats(mine)
        if fitted_here and st["n"] >= BAND_MIN_ROWS:
            out[kind] = {"pct": round(100 * st["p80"], 1), "n": st["n"], "basis": "held out by model, this device"}
            continue
        # a transfer's error as shown by comparable devices (same generation, or same vendor and memory
        # class: the tiers `transfer` leans on) when they have rows of the kind, else by every device
        for pool, label in ((near, f"{family} on {', '.join(near)}"), (None, f"all {family} devices")):
            theirs = [v.lodo[rid] for rid, dev, q in fam
                      if KINDS[q] == kind and (pool is None or dev in pool)]
            st = _stats(theirs)
            if st["n"] >= BAND_MIN_ROWS:
                out[kind] = {"pct": round(100 * st["p80"], 1), "n": st["n"], "basis": f"held out by device, {label}"}
                break
    return out
