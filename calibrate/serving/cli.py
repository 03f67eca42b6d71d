"""What the serving-fit scripts share (benchmarks/serving_fit.py, the full fit, and benchmarks/eager_backends_subset.py,
a what-if on a subset): the on-disk replay cache they read and write, the report's targets, and the `--curves`
selection with its one-line error."""

from __future__ import annotations

import re
import sys

from calibrate.serving.rows import ROOT

#: the serving fit's replay cache (untracked; calibrate/serving/replay.py Cache): every key names the point and the
#: parameters replayed (an `engine_set` override included), so the scripts share it without sharing entries
CACHE = ROOT / "benchmarks" / ".serving_fit_cache.json"
#: the serving fit's targets (issue 38): held out by source, the median |error| in % of each headline metric and of
#: the knee (report.report_markdown's Targets table)
TARGETS = {"tpot_itl": 10.0, "output_tps": 10.0, "ttft_p50": 20.0, "knee": 15.0}


def curve_rows(rows: list[dict], pattern: str, prog: str) -> list[dict] | None:
    """The corpus rows whose curve_id the regular expression `pattern` matches (re.search); None, after printing
    `PROG: error: --curves 'PATTERN' matches no curve_id` on stderr, when none does (the script exits 2)."""
    pat = re.compile(pattern)
    out = [r for r in rows if pat.search(r["curve_id"])]
    if not out:
        print(f"{prog}: error: --curves {pattern!r} matches no curve_id", file=sys.stderr)
        return None
    return out
