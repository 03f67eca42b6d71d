"""Print the low-load per-layer floor analysis (calibrate/serving/floor_spread.py) from the committed replay
results (benchmarks/serving_fidelity.json): per-layer times, their spread within one layer kind, the sources
per engine release, the context slopes. Writes nothing; docs/floor-structure.md quotes its output."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibrate.serving.floor_spread import analysis, markdown  # noqa: E402

if __name__ == "__main__":
    print(markdown(analysis()), end="")
