"""The public fit's result, saved, so the shipped profiles' generated blocks are written by one generator.

A full public fit (`calibrate.public_report.run_public_fit`) takes minutes: every row replayed, every
(device, kernel family) fitted, every row held out three ways. What the profiles ship from it
(`calibrate.public.profiles.profile_entries`) needs far less: the fitted groups (`GroupParams`, every
field, including what `transfer` weighs donors by: rows, pinned values, spread, eager mode), the two
cross-device choices the corpus carries (MoE routing skew, the K-quant mat-vec cost) and, per replayed
row, its device, family, quantity and held-out errors (the error bands). The fit saves exactly that
(`save_state`, benchmarks/public_fit_state.json) beside its report, with a fingerprint of the corpus
files it read.

`load_state` rebuilds a `Validation` from it, and `profile_entries` then writes every profile's block
as the fit did: a newly added profile (no rows: its entries are transfers from the fitted devices)
gets its block without a refit (`infersim calibrate --public --profiles-only`), and a test checks that
the blocks every shipped profile carries are byte for byte what the saved fit generates for the
corpus of this checkout (tests/test_public_state.py). JSON keeps Python floats exactly (shortest
repr round-trips; inf/nan as Infinity/NaN), so a rebuilt group prices every row as the fitted one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, fields
from pathlib import Path

from calibrate.public.corpus import PublicCorpus
from calibrate.public.params import GroupParams
from calibrate.public.validate import Validation

ROOT = Path(__file__).resolve().parent.parent.parent
STATE_FILE = ROOT / "benchmarks" / "public_fit_state.json"
STATE_VERSION = 1


def corpus_fingerprint(folder: str | Path) -> str:
    """sha256 over every corpus CSV of `folder` (rows and micro-benchmarks), name and bytes, in name order."""
    h = hashlib.sha256()
    for f in sorted(Path(folder).glob("*.csv")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _group_to_json(g: GroupParams) -> dict:
    d = asdict(g)
    d["pinned"] = None if g.pinned is None else sorted(g.pinned)
    d["seen_classes"] = list(g.seen_classes)
    return d


def _group_from_json(d: dict) -> GroupParams:
    known = {f.name for f in fields(GroupParams)}
    d = {k: v for k, v in d.items() if k in known}
    d["pinned"] = None if d.get("pinned") is None else frozenset(d["pinned"])
    d["seen_classes"] = tuple(d.get("seen_classes", ()))
    return GroupParams(**d)


def save_state(v: Validation, folder: str | Path, path: str | Path = STATE_FILE) -> None:
    """Write what `profile_entries(v)` reads (module docstring) to `path`."""
    from calibrate.public.validate import held_rows

    state = {
        "version": STATE_VERSION,
        "corpus_fingerprint": corpus_fingerprint(folder),
        "pool": dict(sorted(v.corpus.pool.items())),
        "kquant_matvec_flops": v.corpus.kquant_matvec_flops,
        "fits": [_group_to_json(g) for _, g in sorted(v.fits.items())],
        # (row_id, device, family, quantity) of every replayed row and its held-out errors
        "held": [[rid, dev, fam, q, v.lodo.get(rid), v.lomo.get(rid)] for rid, dev, fam, q in held_rows(v)],
    }
    Path(path).write_text(json.dumps(state, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")


def load_state(folder: str | Path, path: str | Path = STATE_FILE, *, check: bool = True) -> Validation:
    """The `Validation` a saved fit rebuilds (enough for `profile_entries`), with the corpus of `folder`.
    With `check`, a corpus changed since the fit is a one-line error (a new row needs a full refit)."""
    from sim.errors import ConfigError

    path = Path(path)
    if not path.is_file():
        raise ConfigError("no saved public fit: run `infersim calibrate --public` first", file=path)
    state = json.loads(path.read_text(encoding="utf-8"))
    if state.get("version") != STATE_VERSION:
        raise ConfigError(f"saved public fit has version {state.get('version')}, expected {STATE_VERSION}: "
                          "run `infersim calibrate --public`", file=path, field="version")
    if check and state["corpus_fingerprint"] != corpus_fingerprint(folder):
        raise ConfigError(f"the corpus in {folder} changed since the saved fit: run `infersim calibrate --public` "
                          "(a full refit) instead of --profiles-only", file=path, field="corpus_fingerprint")
    corpus = PublicCorpus.load(folder)
    corpus.pool = dict(state["pool"])
    corpus.kquant_matvec_flops = state["kquant_matvec_flops"]
    fits = {(g.device, g.family): g for g in map(_group_from_json, state["fits"])}
    held = [tuple(h[:4]) for h in state["held"]]
    lodo = {h[0]: h[4] for h in state["held"] if h[4] is not None}
    lomo = {h[0]: h[5] for h in state["held"] if h[5] is not None}
    return Validation(prepared=[], fits=fits, in_sample={}, lodo=lodo, loso={}, lodo_from={}, lomo=lomo,
                      corpus=corpus, held=held)
