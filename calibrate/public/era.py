"""Which software era a row ran: llama.cpp builds of 2023-24 or of 2025 on; TensorRT-LLM engines or its PyTorch flow.

Read from what the row prints (`row_is_current`); the replay (flash attention, MMQ tiles) and the
transfer (`ERA_TIERS`, `_era_step`) both go by it.
"""

from __future__ import annotations

import re

from calibrate.public.params import GroupParams, engine_family
from calibrate.public_corpus import PublicRow


# ---- software era: which llama.cpp a row ran ------------------------------------------------------------

# llama.cpp's CUDA decode got much faster between the 2023-24 builds most published tables used and
# the 2025-26 ones (CUDA graphs, fused kernels, flash attention by default): Llama 2 7B Q4_0 tg128 on
# an A100 was 136 t/s at build 1680 (XiongjieDai's table, Dec 2023) and 191 / 201 t/s (fa off / on)
# on the 2025 CUDA scoreboard (discussion #15013); this repository's H200 run (2026, build 0c1e5709)
# decodes Llama 3.1 8B Q4_K_M at 273 t/s where a same-generation H100 PCIe at build 2843 did 146.
# So a donor fitted on the other era's software is a worse donor than its hardware tier says.
CURRENT_BUILD = 5000    # llama.cpp build numbers: the corpus has 1619-2843 (2023-24) and 6918 (2025-11)
CURRENT_PR = 10000      # PR numbers: #2917-#6017 (2023-24) and #15616-#22298 (2025-26)
CURRENT_YEAR = 2025
# Tiers (`_tier`) a memory-side donor of the other era is moved away: the bandwidth efficiencies, the
# per-iteration floor and per-sequence cost are where the builds differ (launch path, GEMV kernels).
# Chosen by leave-one-device-out error on the 1,216 rows with this repository's 58 H200 rows (median /
# p90 / single-stream decode median): no era 12.3 / 47.9 / 12.4%; 1 tier on both sides 12.4 / 51.3 /
# 10.2% (the DGX Spark's matmul donors narrowed to the H200: its batched rows 18 -> 29%); on the memory
# side only, 1 tier 11.8 / 43.0 / 10.2%, 2 tiers 11.7 / 43.0 / 9.0%, 4 tiers 11.3 / 41.4 / 8.1%, 6 tiers
# 11.6 / 41.7 / 9.0%. Again on the final 1,232 rows (the second H200 run added): none 12.1 / 46.2 /
# 11.3%, 2 or 3 tiers 11.7 / 43.0 / 9.0%, 4 tiers 11.3 / 41.4 / 8.1%, 5 or 6 tiers 11.7 / 42.4 / 9.0%.
# With 4, a device's own generation on the other era (tier 4) ties with any
# NVIDIA part of its era (tier 4 is "anything" on the memory side), so both count. A hyper-parameter
# picked on all rows, like `_tier`'s orderings.
ERA_TIERS = 4
_CURRENT_SOURCES = ("discussions/15013",)  # the CUDA scoreboard, opened 2025-08


def row_is_current(row: PublicRow) -> bool | None:
    """Whether a llama.cpp-family row ran a 2025-or-later build, read from what the row prints: a date
    (YYYY-MM), a build number, a PR number, or the source (the 2025 CUDA scoreboard). Rows whose
    build is not printed (the scrape of discussion #4167's summary table, 2023-24 submissions) count
    as earlier builds. None for other families (their versions are not compared)."""
    if engine_family(row.engine, row.settings) != "ggml":
        return None
    text = row.engine_version
    if m := re.search(r"\b(20\d\d)-\d\d", text):
        return int(m.group(1)) >= CURRENT_YEAR
    if m := re.search(r"build(?::\s*[0-9a-f]+)?\s*(?:=\s*)?\(?(\d{3,5})\)?", text):
        return int(m.group(1)) >= CURRENT_BUILD
    if m := re.search(r"PR #(\d+)", text):
        return int(m.group(1)) >= CURRENT_PR
    return any(s in row.source for s in _CURRENT_SOURCES)


def row_software_current(row: PublicRow) -> bool | None:
    """The era a row's software belongs to, for `current_share` (the transfer's `_era_step`): a
    llama.cpp-family row by its build (`row_is_current`); a TensorRT-LLM row by its runtime, the
    PyTorch-backend flow of 1.0 (`trtllm-bench throughput --backend pytorch`, the v1.0 perf-overview
    rows) against the TensorRT engines of 0.x (the v0.13 perf-overview tables). The two launch a step
    differently (Python scheduler and CUDA graphs over PyTorch modules vs one enqueue of a compiled
    engine), which is what the memory-side parameters (per-iteration floor, per-sequence cost) and the
    GEMV kernels' bandwidth carry. Without it the B200 / GB200 / RTX PRO 6000 NVFP4 rows (all PyTorch
    flow) lent their launch costs to the A100's and L40S's 0.13-engine rows held out (A100 p90 16.4 ->
    17.1%, L40S 13.9 -> 15.0%; the devices before issue 39 p90 24.4 -> 24.5%). Set after seeing that.
    None for the other families (their versions are not compared). `row_is_current` itself stays the
    llama.cpp replay's switch (flash attention, MMQ tiles)."""
    if engine_family(row.engine, row.settings) == "trtllm":
        return "--backend pytorch" in (row.settings.get("bench") or "")
    return row_is_current(row)


def current_share(rows: list[PublicRow]) -> float | None:
    """Share of `rows` run on current software (`row_software_current`: llama.cpp builds of 2025 on,
    TensorRT-LLM's PyTorch flow); None when no row says."""
    flags = [f for f in (row_software_current(r) for r in rows) if f is not None]
    return sum(flags) / len(flags) if flags else None


def _era_step(target_share: float | None, donor: "GroupParams") -> int:
    """1 between a prediction for one software era and a donor fitted mostly on the other (shares of
    current-build rows differing by more than a half), else 0; 0 when either is unknown. `transfer`
    moves such a donor ERA_TIERS tiers away on the memory side."""
    if target_share is None or donor.current_share is None:
        return 0
    return int(abs(target_share - donor.current_share) > 0.5)
