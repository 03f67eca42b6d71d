"""Fit every shipped hardware profile to the public-measurement corpus and publish the held-out error.

    python benchmarks/public_fit.py            # writes hardware_profiles/*.yaml (fitted block),
                                               # benchmarks/public_fidelity.md and .json
Same as `infersim calibrate --public`. Deterministic: the same corpus gives the same files.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibrate.public_report import run_public_fit  # noqa: E402


def main() -> None:
    t0 = time.perf_counter()
    s = run_public_fit(write_profiles=True, report=ROOT / "benchmarks" / "public_fidelity.md")
    a, t = s["lodo"]["all"], s["targets"]
    print(f"{s['rows']} rows, {s['replayed']} replayed, {len(s['excluded'])} excluded; "
          f"{time.perf_counter() - t0:.1f} s")
    for name, st in (("in-sample", s["in_sample"]["all"]), ("leave-one-device-out", a),
                     ("leave-one-source-out", s["loso"]["all"]), ("leave-one-model-out", s["lomo"]["all"])):
        print(f"{name:22s} n={st['n']:5d} median {100 * st['median']:.1f}%  p80 {100 * st['p80']:.1f}%  "
              f"p90 {100 * st['p90']:.1f}%")
    for name, x in t.items():
        print(f"target {name}: {100 * x['value']:.1f}% (goal <= {100 * x['target']:.0f}%)")
    print(f"profiles written: {', '.join(s.get('profiles_written', [])) or 'none changed'}")


if __name__ == "__main__":
    main()
