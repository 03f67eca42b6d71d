"""Build benchmarks/public/gb300.csv: the GB300 columns of the TensorRT-LLM 1.2 perf overview (issue 39:
the GB300 had rows on that page but no profile; `hardware_profiles/gb300.yaml` now ships).

Source: the page `build_public_b300.py` reads,
https://nvidia.github.io/TensorRT-LLM/1.2.0/developer-guide/perf-overview.html, whose tables that builder
keeps as printed (`TABLES`); this one reads the same tables, so the two builders cannot disagree on a
cell. The page's hardware list: "As of `release/1.2`, support for B300 and GB300 is in beta, and
performance data should not be considered finalized. ... - GB300 288 GB (GB300 NVL72) (beta)".

Method, as printed (see build_public_b300.py): `trtllm-bench ... throughput --backend pytorch`, an
offline maximum-throughput run at fixed ISL/OSL; the figure is "Per GPU Output Throughput (tps/gpu)".
Every column taken is TP1 (one GPU), so the per-GPU figure is the run's output tokens/s.

Taken: every TP1 cell of the "GB300* (beta)" column (GPT-OSS 120B and 20B, LLaMA v3.3 70B, Qwen3 30B A3B:
18 cells; the Qwen3 30B A3B 1024/32768 cell is empty). Left out: the GB300's DEP4 columns (DeepSeek R1
0528, Qwen3 235B A22B: attention data parallelism with expert parallelism over 4 GPUs, not replayed, as
for the B300).

Set aside, not fitted: new rows of an issue 39 part are reported under the part's shipped transfer
(held out by device), as the B300's are; fitting them is a decision for a later round with its own
before/after figures (docs/changelog-calibration.md, round 30).

    python benchmarks/build_public_gb300.py          # (re)write the CSV
    python benchmarks/build_public_gb300.py --check  # exit 1 if the CSV differs
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_public_b300 as page  # noqa: E402 (the page's tables, kept as printed, and its row fields)
from build_public_b300 import column_rows  # noqa: E402,F401 (one row builder for every column of the page)
from build_public_new_devices_2026 import builder  # noqa: E402

SOURCE, SOURCE_REF, VERSION, TABLES = page.SOURCE, page.SOURCE_REF, page.VERSION, page.TABLES
OUT = Path(__file__).resolve().parent / "public" / "gb300.csv"
COLUMN = "GB300* (beta)<br/>TP1 (FP4)"
VARIANT = ("GB300 288 GB (GB300 NVL72), the page's '(beta)' column: 'performance data should not be considered "
           "finalized'")
SET_ASIDE = ("Set aside: a new part's rows, reported under the GB300's shipped transfer from the B200 / GB200 "
             "TensorRT-LLM fits (held out by device) and not fitted, as the B300's rows of the same page (round 30, "
             "docs/changelog-calibration.md). ")


def rows() -> list[dict]:
    return column_rows(COLUMN, "gb300", VARIANT, SET_ASIDE)


render, main = builder(OUT, rows)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
