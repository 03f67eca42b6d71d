"""Efficiencies for a new hardware profile from the shipped fits, without rerunning the public fit.

`calibrate/public_fit.py` fits every (device, kernel family) that has public rows and lends the
result to devices without rows through `transfer` (nearest architecture first). Rerunning the whole
fit rewrites every shipped profile; a newly added profile only needs the second half. This module
rebuilds each donor's fitted parameters (`GroupParams`) from what its profile ships in
`engine_efficiency` (entries with `corpus_rows` and no `transferred_from`: fitted ones) and calls
the same `public_fit.transfer` for the new device, then writes the generated block with
`public_fit.write_profile_block`, the format the fit writes. The next full public fit replaces the
block with its own transfer.

What a shipped entry does not carry is taken as a hand-made group does (`GroupParams` docs): every
class a donor measured counts as pinned (`pinned=None`), and every donor's fit as precise (`spread=None`,
so donors of one tier weigh by the square root of their rows only). A donor whose rows all ran in eager
mode lends no launch floor (read from the corpus rows' settings, as the fit does).

Error bands: a transfer's held-out error is the fit's leave-one-device-out residuals, which only the
full fit computes. A new entry copies the family's "held out by device, all <family> devices" band that
shipped transferred entries carry (the error a transferred prediction has shown over every device),
and none where no shipped entry has one.

    python -m calibrate.profile_transfer b200 mi355x ...   # writes the block into those profiles
"""

from __future__ import annotations

import sys

from calibrate.public.profiles import efficiency_entry
from calibrate.public_fit import (
    GroupParams,
    families_for,
    transfer,
    write_profile_block,
)


def donor_groups(exclude: set[str]) -> dict[tuple[str, str], GroupParams]:
    """(device, family) -> GroupParams rebuilt from every shipped profile's fitted entries, less `exclude`."""
    from calibrate.public_corpus import load_corpus
    from sim.catalog.hardware import available_profiles, load_profile

    eager_rows = {r.row_id for r in load_corpus() if r.setting_flag("enforce_eager")}
    out: dict[tuple[str, str], GroupParams] = {}
    for name in available_profiles():
        if name in exclude:
            continue
        for family, e in load_profile(name).engine_efficiency.items():
            if e.transferred_from or not e.corpus_rows:
                continue  # transferred or hand-made: not a fit
            out[(name, family)] = GroupParams(
                device=name, family=family,
                bandwidth=dict(e.bandwidth_by_class), compute=dict(e.compute_by_class),
                attention=e.attention_of_peak if e.attention_of_peak is not None else e.attention,
                floor_ms=e.floor_ms or 0.0, seq_ms=e.per_sequence_ms or 0.0,
                half_rows=e.matmul_half_rows or 0.0, lat_us=e.interconnect_latency_us,
                rows=list(e.corpus_rows), seen_classes=tuple(e.compute_by_class),
                current_share=e.current_build_share,
                eager=all(r in eager_rows for r in e.corpus_rows),
            )
    return out


def shipped_transfer_bands() -> dict[str, dict]:
    """family -> {kind: band} of the 'all <family> devices' bands shipped transferred entries carry."""
    from sim.catalog.hardware import available_profiles, load_profile

    out: dict[str, dict] = {}
    for name in available_profiles():
        for family, e in load_profile(name).engine_efficiency.items():
            for kind, band in e.error.items():
                if band.basis == f"held out by device, all {family} devices":
                    out.setdefault(family, {})[kind] = band.model_dump()
    return out


def kquant_matvec_value() -> float | None:
    """The Apple K-quant mat-vec ALU cost the fit shipped (one value for every Apple ggml entry)."""
    from sim.catalog.hardware import available_profiles, load_profile

    for name in available_profiles():
        e = load_profile(name).engine_efficiency.get("ggml")
        if e is not None and e.kquant_matvec_flops_per_weight is not None:
            return e.kquant_matvec_flops_per_weight
    return None


def entries_for(device: str, donors: dict, bands: dict) -> dict[str, dict]:
    """family -> the `engine_efficiency` entry `transfer` gives `device` (profile_entries' layout)."""
    from sim.catalog.hardware import load_profile

    vendor = load_profile(device).vendor
    out = {}
    for family in families_for(device):
        p = transfer(device, family, donors, era=1.0)
        if p is None:
            continue
        src = (f"no public rows of {family} kernels on {device}: transferred from "
               f"{', '.join(p.transferred_from)} (nearest architecture, calibrate/public_fit.py transfer, "
               f"applied to the shipped fits by calibrate/profile_transfer.py; the next public fit redoes it)")
        entry = efficiency_entry(p, src, rows=[], error=bands.get(family, {}))
        if family == "ggml" and vendor == "Apple" and (k := kquant_matvec_value()) is not None:
            entry["kquant_matvec_flops_per_weight"] = k
        out[family] = entry
    return out


def main(devices: list[str]) -> int:
    from sim.catalog.hardware import profile_path

    donors = donor_groups(exclude=set(devices))
    bands = shipped_transfer_bands()
    for d in devices:
        changed = write_profile_block(profile_path(d), entries_for(d, donors, bands))
        print(f"{d}: {'written' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
