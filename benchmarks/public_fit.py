"""Fit every shipped hardware profile to the public-measurement corpus and publish the held-out error.

    python benchmarks/public_fit.py            # writes hardware_profiles/*.yaml (fitted block),
                                               # benchmarks/public_fidelity.md and .json
Same as `infersim calibrate --public`. Deterministic: the same corpus gives the same files.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibrate.public_report import run_public_fit, summary_lines  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    # no options: the parser only answers --help (and refuses anything else) instead of starting a fit that rewrites
    # the profiles and reports
    argparse.ArgumentParser(description=__doc__.splitlines()[0],
                            epilog="Writes hardware_profiles/*.yaml (the fitted block) and benchmarks/public_fidelity.md "
                                   "/ .json; takes minutes.").parse_args(argv)
    t0 = time.perf_counter()
    s = run_public_fit(write_profiles=True, report=ROOT / "benchmarks" / "public_fidelity.md")
    print(f"{time.perf_counter() - t0:.1f} s")
    for line in summary_lines(s):
        print(line)
    for name, x in s["targets"].items():
        print(f"target {name}: {100 * x['value']:.1f}% (goal <= {100 * x['target']:.0f}%)")
    print(f"profiles written: {', '.join(s.get('profiles_written', [])) or 'none changed'}")


if __name__ == "__main__":
    main()
