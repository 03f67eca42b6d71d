"""Build benchmarks/public/trtllm12_mxfp4.csv: the B200 and GB200 gpt-oss (MXFP4) TP1 columns of the
TensorRT-LLM 1.2 perf overview, the page `build_public_b300.py` keeps as printed (`TABLES`).

Why: the B200 and GB200 TensorRT-LLM entries are fitted to NVFP4 rows only (the v1.0 page,
new_devices_2026.csv); no MXFP4 TensorRT-LLM row was in the corpus, and the B300's gpt-oss rows are
under-predicted by 24-76% (round 29). These rows measure that format gap on the fitted devices
themselves.

Taken: "GPT-OSS 20B" B200 TP1 and GB200 TP1, "GPT-OSS 120B" GB200 TP1 (15 cells). Left out: the
"GPT-OSS 120B" B200 column, which is DEP2 (attention data parallelism with expert parallelism over two
GPUs, not replayed, as the DEP4 columns), and the page's LLaMA / Qwen3 NVFP4 columns of those devices.

Set aside, not fitted: fitted, they would refit the B200 and GB200 TensorRT-LLM entries (and through
them every transfer that borrows from them, the B300's and GB300's included); kept in the corpus, their
error is reported under the entries the B200 and GB200 ship (fitted to NVFP4: a transfer across weight
formats, not across devices) in benchmarks/public_fidelity.md (round 30, docs/changelog-calibration.md).

    python benchmarks/build_public_trtllm12_mxfp4.py          # (re)write the CSV
    python benchmarks/build_public_trtllm12_mxfp4.py --check  # exit 1 if the CSV differs
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_public_b300 import column_rows  # noqa: E402 (one row builder for every column of the page)
from build_public_new_devices_2026 import builder  # noqa: E402

OUT = Path(__file__).resolve().parent / "public" / "trtllm12_mxfp4.csv"
GPT_OSS = ("GPT-OSS 120B", "GPT-OSS 20B")
# (column as printed, device, variant as the v1.0 rows of the device name it)
COLUMNS = (("B200<br/>TP1 (FP4)", "b200", "B200 180GB (DGX B200)"),
           ("GB200<br/>TP1 (FP4)", "gb200", "GB200 192GB (GB200 NVL72)"))
SET_ASIDE = ("Set aside: fitted, these MXFP4 rows would refit the device's TensorRT-LLM entry (fitted to its NVFP4 "
             "rows of the v1.0 page) and every transfer borrowing from it; their error is reported under the entry "
             "the device ships, a transfer across weight formats (round 30, docs/changelog-calibration.md). ")


def rows() -> list[dict]:
    return [r for column, device, variant in COLUMNS
            for r in column_rows(column, device, variant, SET_ASIDE, tables=GPT_OSS)]


render, main = builder(OUT, rows)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
