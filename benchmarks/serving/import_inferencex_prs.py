"""InferenceX's published sweeps, as quoted in the baseline tables of InferenceX image-bump PRs ->
inferencex_published.csv rows (run by `import_inferencex.py`), with the server flags of each point from
the family's recipe (side_tables/recipe_flags.csv, README 'Recipe flags'): the tables print the points
but not the flags, so the rows carry the recipe's, per load."""
from __future__ import annotations

import csv
import math
import re
from decimal import Decimal
from pathlib import Path

from import_inferencex_common import HERE, IX_REPO, SRC, base_row, dec_str


# The recipe flags side table
# --------------------------------------------------------------------------------------------
# One line per curve and load range: the flags the family's recipe script under InferenceX's
# benchmarks/single_node/ at the baseline date passes to the server at those loads (some are per load:
# SGLang's --scheduler-recv-interval 10 below 16 clients and 30 from 16, TensorRT-LLM's batch waiting
# from 64), with the script's address and lines.
RECIPE_TABLE = HERE / "side_tables" / "recipe_flags.csv"
RECIPE_COLUMNS = ("curve_id", "load_min", "load_max", "engine_flags", "source", "source_ref", "notes")


def _load_bound(text: str | None, default: float | None = None) -> float | None:
    """A load bound of the table: a number, or `default` when blank; None when not a number."""
    text = (text or "").strip()
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        return None


def load_recipe_flags(path: Path | None = None) -> dict[str, list[dict]]:
    """The side table by curve_id. A missing column, a blank or non-numeric load_min, or empty flags is a
    one-line error naming the file, line and field."""
    path = Path(RECIPE_TABLE if path is None else path)
    out: dict[str, list[dict]] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in RECIPE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column {missing[0]}")
        for line, r in enumerate(reader, start=2):
            if _load_bound(r["load_min"]) is None:
                raise ValueError(f"{path}:{line}: load_min: not a number: {r['load_min']!r}")
            if _load_bound(r["load_max"], math.inf) is None:
                raise ValueError(f"{path}:{line}: load_max: not a number: {r['load_max']!r}")
            if not (r["engine_flags"] or "").strip():
                raise ValueError(f"{path}:{line}: engine_flags: empty")
            out.setdefault(r["curve_id"], []).append(r)
    return out


def recipe_entry(curve_id: str, load: float, table: dict[str, list[dict]]) -> dict | None:
    """The table's entry for one load point of a curve (None when it has none): the one whose
    [load_min, load_max] holds the load (a blank load_max: no upper end)."""
    for r in table.get(curve_id, []):
        if _load_bound(r["load_min"]) <= load <= _load_bound(r["load_max"], math.inf):
            return r
    return None


# InferenceX published sweeps, as quoted in the baseline tables of InferenceX image-bump PRs
# --------------------------------------------------------------------------------------------
# Each "[Klaud Cold] Update ... image" PR description freezes the family's published points from
# the InferenceX API (inferencex.semianalysis.com, "Mean latency") in a table: total and output
# tokens/s per GPU, mean TTFT, mean TPOT. The sources/ files are verbatim excerpts of those PR
# descriptions. Per-GPU throughputs are InferenceX's own normalisation (utils/process_result.py:
# total_token_throughput / (tp x pp x pcp) for a single-node run; pp = pcp = 1 here), so the
# server's throughput is the printed figure x TP.
IX_PR_HARNESS = (
    "Harness: InferenceX's official single-node sweep (benchmarks/benchmark_lib.sh "
    "run_benchmark_serving -> utils/bench_serving/benchmark_serving.py): --dataset-name random, "
    "--random-range-ratio 0.8 (RANDOM_RANGE_RATIO default of .github/workflows/benchmark-tmpl.yml "
    "since Jan 2026; this client draws lengths from [int(0.8 L), L]), --request-rate inf "
    "--max-concurrency C --ignore-eos --num-warmups 2xC; the recipes pass --num-prompts 10xC "
    "(not restated in the table; num_prompts is that count, from the recipe line the row cites). "
    "Server flags: the family's recipe script under benchmarks/single_node/ at the baseline date (not restated in the table; engine_flags "
    "carries them where side_tables/recipe_flags.csv records that recipe, else it is empty). Latencies are "
    "means (the table is labelled 'Mean latency')."
)
IX_PRS = {
    3173: dict(family="dsr1-fp8-h200-sglang", engine="sglang", version="0.5.12",
               image="lmsysorg/sglang:v0.5.12-cu130", date="2026-05-17", device="h200",
               model="deepseek-ai/DeepSeek-R1-0528", quant="fp8", extra=""),
    3183: dict(family="dsr1-fp4-b300-sglang", engine="sglang", version="0.5.12",
               image="lmsysorg/sglang:v0.5.12-cu130", date="2026-05-22", device="b300",
               model="nvidia/DeepSeek-R1-0528-FP4-V2", quant="nvfp4",
               extra="The PR description shows 12 of the 29 published points (c1-c32)."),
    3175: dict(family="dsr1-fp8-b300-sglang", engine="sglang", version="0.5.12",
               image="lmsysorg/sglang:v0.5.12-cu130", date="2026-05-22", device="b300",
               model="deepseek-ai/DeepSeek-R1-0528", quant="fp8",
               extra="The PR description shows 12 of the 16 published points."),
    3311: dict(family="qwen3.5-fp4-mi355x-sglang", engine="sglang", version="0.5.19",
               image="lmsysorg/sglang-rocm:v0.5.19-rocm720-mi35x-20260913", date="2026-09-14",
               device="mi355x", model="amd/Qwen3.5-397B-A17B-MXFP4", quant="mxfp4",
               extra="The excerpt kept here ends after the c128 TP2 row."),
    3285: dict(family="qwen3.5-fp4-mi355x-sglang-mtp", engine="sglang", version="0.5.19",
               image="lmsysorg/sglang-rocm:v0.5.19-rocm720-mi35x-20260913", date="2026-09-14",
               device="mi355x", model="amd/Qwen3.5-397B-A17B-MXFP4", quant="mxfp4",
               extra="MTP speculative decoding (family '-mtp'): TPOT counts accepted tokens. The "
                     "excerpt kept here ends inside the c128 TP2 row, which is left out."),
    3107: dict(family="qwen3.5-fp8-mi355x-sglang-mtp", engine="sglang", version="0.5.18",
               image="lmsysorg/sglang-rocm:v0.5.18-rocm720-mi35x-20260828", date="2026-08-31",
               device="mi355x", model="Qwen/Qwen3.5-397B-A17B-FP8", quant="fp8",
               extra="MTP speculative decoding (family '-mtp'): TPOT counts accepted tokens."),
    3318: dict(family="dsr1-fp8-mi325x-sglang", engine="sglang", version="0.5.19",
               image="lmsysorg/sglang:v0.5.19-rocm700-mi30x", date="2026-09-10", device="mi325x",
               model="deepseek-ai/DeepSeek-R1-0528", quant="fp8", extra=""),
    3317: dict(family="dsr1-fp8-b200-trt", engine="trtllm", version="1.3.0rc14",
               image="nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc14", date="2026-05-18",
               device="b200", model="deepseek-ai/DeepSeek-R1-0528", quant="fp8",
               extra="The family's config has two TP8 EP1 search-space entries (conc 4-8 and "
                     "64-128), both listed here as one curve; the excerpt kept here ends inside "
                     "the 8k/1k rows. Client backend: InferenceX's client against trtllm-serve."),
}
#: The line of each family's recipe script that sets the prompt count (`run_benchmark_serving ... --num-prompts
#: $((CONC * 10))`; benchmarks/benchmark_lib.sh passes it to the client unchanged, except under PROFILE=1, a
#: profiling run): (commit, path, line). The May families' scripts at ed5867f9e, their last change before the
#: baseline dates (as side_tables/recipe_flags.csv cites them). The AMD families' baselines (2026-08-31 to
#: 2026-09-14) are newer than the newest InferenceX snapshot read here, 843c6254 (2026-08-21): the scripts are
#: cited there (their runner, runners/launch_mi355x-amds.sh, picks fixed_seq_len/<model>_<precision>_mi355x[_mtp].sh
#: for SGLang); every fixed-sequence recipe in both snapshots passes 10 x CONC (77 scripts in 843c6254).
IX_EARLY = "ed5867f9e998648b57b6c8052223027cb7432bd7"
IX_LATE = "843c6254ff69b567f772f6a5fd97675af3d04431"
RECIPE_NUM_PROMPTS = {
    "dsr1-fp8-h200-sglang": (IX_EARLY, "benchmarks/single_node/dsr1_fp8_h200.sh", 68),
    "dsr1-fp4-b300-sglang": (IX_EARLY, "benchmarks/single_node/dsr1_fp4_b300.sh", 68),
    "dsr1-fp8-b300-sglang": (IX_EARLY, "benchmarks/single_node/dsr1_fp8_b300.sh", 100),
    "dsr1-fp8-b200-trt": (IX_EARLY, "benchmarks/single_node/dsr1_fp8_b200_trt.sh", 140),
    "dsr1-fp8-mi325x-sglang": (IX_LATE, "benchmarks/single_node/fixed_seq_len/dsr1_fp8_mi325x.sh", 64),
    "qwen3.5-fp4-mi355x-sglang": (IX_LATE, "benchmarks/single_node/fixed_seq_len/qwen3.5_fp4_mi355x.sh", 60),
    "qwen3.5-fp4-mi355x-sglang-mtp": (IX_LATE, "benchmarks/single_node/fixed_seq_len/qwen3.5_fp4_mi355x_mtp.sh", 64),
    "qwen3.5-fp8-mi355x-sglang-mtp": (IX_LATE, "benchmarks/single_node/fixed_seq_len/qwen3.5_fp8_mi355x_mtp.sh", 72),
}


def num_prompts_note(family: str, c: int) -> str:
    commit, path, line = RECIPE_NUM_PROMPTS[family]
    late = (" (the newest snapshot read here, older than the baseline date)" if commit == IX_LATE else "")
    return (f"num_prompts {10 * c} = 10 x C: {IX_REPO}@{commit[:9]}{late}:{path} L{line} passes "
            f"--num-prompts $((CONC * 10)) (https://github.com/{IX_REPO}/blob/{commit}/{path}#L{line}).")


SEQ = {"1k": 1024, "8k": 8192}
POINT_ROW = re.compile(r"^\| (?P<isl>\d+k)/(?P<osl>\d+k) c(?P<c>\d+) TP(?P<tp>\d+) EP(?P<ep>\d+) "
                       r"(?P<hash>[0-9a-f]{6}) \| (?P<cells>.*) \|$")
CONC_ROW = re.compile(r"^\| (?P<c>\d+) \| (?P<cells>.*) \|$")
CONC_HEADER = re.compile(r"^(?P<isl>\d+k)/(?P<osl>\d+k) · TP(?P<tp>\d+)/EP(?P<ep>\d+) · Mean latency")


def ix_pr_rows(recipes: dict[str, list[dict]] | None = None) -> list[dict]:
    """The rows of every PR table in IX_PRS; `recipes`: the recipe flags side table (default RECIPE_TABLE).
    A side-table entry that no point uses (a curve id or load range that matches nothing) is an error."""
    recipes = load_recipe_flags() if recipes is None else recipes
    used: set[int] = set()
    rows = []
    for pr, meta in sorted(IX_PRS.items()):
        path = SRC / "SemiAnalysisAI__InferenceX" / "pulls" / f"{pr}.md"
        lines = path.read_text().splitlines()
        header = next((CONC_HEADER.match(l) for l in lines if CONC_HEADER.match(l)), None)
        points = []  # (isl, osl, tp, ep, c, hash, cells, raw line)
        for line in lines:
            if (m := POINT_ROW.match(line)):
                points.append((m["isl"], m["osl"], int(m["tp"]), int(m["ep"]), int(m["c"]),
                               m["hash"], m["cells"], line))
            elif header and (m := CONC_ROW.match(line)):
                points.append((header["isl"], header["osl"], int(header["tp"]), int(header["ep"]),
                               int(m["c"]), "", m["cells"], line))
        curves = {}
        for p in points:
            cells = [c.strip() for c in p[6].split("|")]
            if len(cells) != 4 or "N/A" in cells:
                continue  # unavailable point (printed N/A)
            curves.setdefault(p[:4], []).append((p, cells))
        for (isl_s, osl_s, tp, ep), pts in curves.items():
            if len({p[4] for p, _ in pts}) < 3:
                continue
            isl, osl = SEQ[isl_s], SEQ[osl_s]
            curve = (f"ix-api-{meta['device']}-{meta['engine']}-{meta['family']}-tp{tp}ep{ep}-"
                     f"isl{isl}-osl{osl}")
            notes_base = " ".join(x for x in (
                f"InferenceX published sweep of family {meta['family']} on {meta['date']} "
                f"(image {meta['image']}), quoted as the frozen baseline of PR #{pr}; EP{ep}.",
                meta["extra"], IX_PR_HARNESS) if x)
            for p, cells in pts:
                c, point_hash, raw_line = p[4], p[5], p[7]
                recipe = recipe_entry(curve, c, recipes)
                if recipe is not None:
                    used.add(id(recipe))
                common = dict(
                    curve_id=curve, source=f"https://github.com/{IX_REPO}/pull/{pr}",
                    source_ref=f"{IX_REPO} PR #{pr} description, baseline table"
                               + (f" (point {point_hash})" if point_hash else f" (row c={c})"),
                    publisher="SemiAnalysis", engine=meta["engine"],
                    engine_version=meta["version"], engine_flags=recipe["engine_flags"] if recipe else "",
                    device=meta["device"],
                    device_variant=f"InferenceX runner '{meta['device']}' ({meta['family']})",
                    n_devices=tp, tp=tp, model=meta["model"], quant=meta["quant"],
                    kv_cache_dtype="not stated", client="custom", dataset="random",
                    input_tokens=isl, output_tokens=osl, range_ratio="0.8", num_prompts=10 * c,
                    warmup=2 * c, ramp_up="", ignore_eos="true", load_kind="concurrency",
                    max_concurrency=c, request_rate="inf", burstiness="1.0",
                )
                notes = f"{notes_base} Table row: {raw_line} {num_prompts_note(meta['family'], c)}"
                if recipe is not None:
                    notes += (f" engine_flags: the recipe's flags at C = {c} ({recipe['source_ref']}; "
                              f"{recipe['source']}), from side_tables/recipe_flags.csv.")
                stem = f"{curve}-c{c}"
                total, out, ttft, tpot = (x.replace(",", "") for x in cells)
                for qty, raw, label in (("total_tps", total, "Total tok/s/GPU"),
                                        ("output_tps", out, "Output tok/s/GPU")):
                    rows.append(base_row(**common, row_id=f"{stem}-{qty}-value", quantity=qty,
                                         statistic="value", value=dec_str(Decimal(raw) * tp),
                                         as_printed=f"{label} {cells[0 if qty == 'total_tps' else 1]}",
                                         derivation=f"{raw} tok/s/GPU x TP {tp} GPUs", notes=notes))
                for qty, raw, label, cell in (("ttft_ms", ttft, "TTFT ms", cells[2]),
                                              ("tpot_ms", tpot, "TPOT ms", cells[3])):
                    rows.append(base_row(**common, row_id=f"{stem}-{qty}-mean", quantity=qty,
                                         statistic="mean", value=dec_str(Decimal(raw)),
                                         as_printed=f"{label} {cell}",
                                         derivation="thousands separator dropped" if "," in cell else "",
                                         notes=notes))
    unused = [(cid, r["load_min"], r["load_max"]) for cid, rs in recipes.items() for r in rs if id(r) not in used]
    if unused:
        cid, lo, hi = unused[0]
        raise SystemExit(f"{RECIPE_TABLE}: the entry for {cid} at loads {lo}-{hi or 'no limit'} matches no point "
                         "of the PR tables")
    return rows

