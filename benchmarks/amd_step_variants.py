"""Replay AMD serving curves under four variants of the decode step's fixed costs and print the signed
errors per load point (docs/cost-model.md, 'The per-sequence cost on AMD (torch family)', quotes its
output for the vLLM curves). A diagnostic, not a fit: nothing is fitted or written, no replay cache is
read or filled.

Variants: the preset's per-layer floor (`layer_floor_us`) at 150 us or 0, times the profile's fitted
`torch` per-sequence cost (`Efficiency.per_sequence_ms`, 0.0825 ms on every AMD part, docs/cost-model.md)
kept ("profile") or removed ("engine": the engine preset's own `per_sequence_overhead_ms` alone). The
removal is `replay(..., efficiency_overrides={"per_sequence_ms": 0.0})` (calibrate/serving/replay.py ->
sim.catalog.hardware.with_efficiency_fields), passed for points on an AMD profile whose engine prices with
the torch kernel family only; other points replay the same in both modes.

    python benchmarks/amd_step_variants.py 'ix-together|vllm_amd'   # curves whose curve_id matches
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibrate.serving.replay import preset_fitted, replay  # noqa: E402
from calibrate.serving.rows import LoadPoint, curves, load_corpus, load_points  # noqa: E402

FLOORS_US = (150.0, 0.0)
SEQ_MODES = ("profile", "engine")
#: the "engine" mode's change to the profile's efficiency entry: its fitted per-sequence cost removed
NO_PROFILE_SEQ = {"per_sequence_ms": 0.0}


def seq_overrides(point: LoadPoint, seq: str) -> dict | None:
    """The `efficiency_overrides` of one variant: NO_PROFILE_SEQ in "engine" mode for a point on an AMD
    profile whose engine's kernel family is torch (vLLM, SGLang on ROCm), else None (the profile as shipped)."""
    if seq == "profile":
        return None
    from sim.catalog.engine_config import load_engine
    from sim.catalog.hardware import load_profile

    eng = load_engine(point.engine)
    if load_profile(point.device).vendor == "AMD" and (eng.kernel_family or eng.name) == "torch":
        return dict(NO_PROFILE_SEQ)
    return None


def _signed(pred, meas) -> str:
    return f"{(pred / meas - 1) * 100:+.0f}%" if pred and meas else "-"


def main(pattern: str) -> None:
    rx = re.compile(pattern)
    print("| curve, C | measured TPOT ms | " + " | ".join(f"floor {f:g}, {s}" for f in FLOORS_US for s in SEQ_MODES)
          + " |")
    print("|---|---|" + "---|" * (len(FLOORS_US) * len(SEQ_MODES)))
    for cid, rows in sorted(curves(load_corpus()).items()):
        if not rx.search(cid):
            continue
        for p in load_points(rows):
            tpot = p.measured.get(("tpot_ms", "median"))
            tps = p.measured.get(("output_tps", "value"))
            cells = []
            for floor in FLOORS_US:
                for seq in SEQ_MODES:
                    out = replay(p, {**preset_fitted(p), "layer_floor_us": floor}, None,
                                 efficiency_overrides=seq_overrides(p, seq))
                    cells.append(f"{_signed(out.get('tpot_ms|median'), tpot)} "
                                 f"({_signed(out.get('output_tps|value'), tps)})")
            print(f"| {cid}, {p.load:g} | {tpot:.2f} | " if tpot else f"| {cid}, {p.load:g} | - | ", end="")
            print(" | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/amd_step_variants.py CURVE_REGEX")
    main(sys.argv[1])
