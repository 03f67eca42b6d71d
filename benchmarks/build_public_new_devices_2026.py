"""Build benchmarks/public/new_devices_2026.csv: the B200, GB200 and RTX PRO 6000 columns of the
TensorRT-LLM v1.0 perf overview (issue 39).

Source: NVIDIA/TensorRT-LLM@00f37686aa854010d68bcbd0f4ab000221541ca6
docs/source/performance/perf-overview.md, "Throughput Measurements" (`trtllm-bench throughput
--backend pytorch`, "Total Output Throughput (tokens/sec)", offline at an infinite request rate,
synthetic fixed ISL/OSL, `$num_requests` per ISL/OSL from the doc's "Preparing a Dataset" table).
The same file at the same commit is already in the corpus for its Llama 3.1 8B H100/H200 table
(`serving.csv`, rows `trtllm-v1.0-*`). The tables below are pasted as printed in that file; this
script only reads them, so a reader can check every row's `as_printed` against them.

Taken: every single-GPU column of a new part (B200 TP1, GB200 TP1, RTX 6000 Pro TP1,PP1) and the
dense multi-GPU ones (Llama 3.1 405B at TP4 on B200 and GB200). Left out: the MoE tables at TP8
(Qwen3-235B-A22B, Llama 4 Maverick: run with `--ep $ep_size` and attention data parallelism, whose
sizes the doc does not print) and the RTX 6000 Pro pipeline-parallel columns (the replay has no
pipeline parallelism). The H100/H200 columns of these tables are not taken here (this collection is
the new parts'; they would refit the old devices).

    python benchmarks/build_public_new_devices_2026.py          # (re)write the CSV
    python benchmarks/build_public_new_devices_2026.py --check  # exit 1 if the CSV differs
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

COMMIT = "00f37686aa854010d68bcbd0f4ab000221541ca6"
SOURCE = f"https://github.com/NVIDIA/TensorRT-LLM/blob/{COMMIT}/docs/source/performance/perf-overview.md"
SOURCE_REF = ("NVIDIA/TensorRT-LLM@00f37686:docs/source/performance/perf-overview.md "
              "(Throughput Measurements, v1.0-era doc, PyTorch backend)")
VERSION = '1.0 (doc: "NEW for v1.0"; PyTorch backend since v0.19)'
OUT = Path(__file__).resolve().parent / "public" / "new_devices_2026.csv"
COLUMNS = ["row_id", "source", "source_ref", "engine", "engine_version", "backend", "device",
           "device_variant", "n_devices", "model", "quant", "metric", "batch", "request_rate",
           "input_tokens", "output_tokens", "depth", "quantity", "value", "as_printed", "derivation",
           "settings", "notes"]

# "Preparing a Dataset": $num_requests per ISL/OSL, as printed
NUM_REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (1000, 2000): 1500,
                (2048, 128): 3000, (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000,
                (500, 2000): 3000, (20000, 2000): 1000}

# Tables as printed in the source (the header row and the rows; empty cells were not run)
TABLES = {
    "Llama 4 Scout": """
| Sequence Length (ISL/OSL) | B200<br/>TP1 (FP4) | GB200<br/>TP1 (FP4) | H200<br/>TP4 (FP8) | H100<br/>TP4 (FP8) |
| 128/128 | 25,342 | 19,954 | 30,354 | |
| 128/2048 | 14,699 | 15,238 | 34,316 | 15,130 |
| 128/4096 | 8,932 | 9,556 | 21,332 | 8,603 |
| 500/2000 | 11,977 | 11,795 | 24,630 | 12,399 |
| 1000/1000 | 10,591 | 7,738 | 21,636 | 12,129 |
| 1000/2000 | 9,356 | 8,581 | 18,499 | 9,838 |
| 2048/128 | 3,137 | 3,295 | 3,699 | 3,253 |
| 2048/2048 | 7,152 | 7,464 | 14,949 | 7,972 |
| 5000/500 | 2,937 | 3,107 | 4,605 | 3,342 |
| 20000/2000 | 1,644 | 1,767 | 2,105 | |
""",
    "Llama 3.3 70B": """
| Sequence Length (ISL/OSL) | B200<br/>TP1 (FP4) | GB200<br/>TP1 (FP4) | H200<br/>TP1 (FP8) | H100<br/>TP2 (FP8) |
| 128/128 | 11,147 | 12,189 | 3,803 | 6,378 |
| 128/2048 | 9,922 | 11,309 | 4,336 | 6,651 |
| 128/4096 | 6,831 | 7,849 | 2,872 | 4,199 |
| 500/2000 | 7,762 | 9,028 | 3,666 | 5,222 |
| 1000/1000 | 7,007 | 7,326 | 2,909 | 4,205 |
| 1000/2000 | 6,271 | 6,513 | 2,994 | 4,146 |
| 2048/128 | 1,339 | 1,450 | 442 | 762 |
| 2048/2048 | 4,783 | 5,646 | 2,003 | 3,082 |
| 5000/500 | 1,459 | 1,602 | 566 | 898 |
| 20000/2000 | 665 | 755 | 283 | 437 |
""",
    "Llama 3.3 70B / RTX 6000 Pro Blackwell Server Edition": """
| Sequence Length (ISL/OSL) | **1 GPUs**<br/>TP1,PP1 (FP4) | **2 GPUs**<br/>TP1,PP2 (FP4) | **4 GPUs**<br/>TP1,PP4 (FP4) | **8 GPUs**<br/>TP1,PP8 (FP4) |
| 128/128 | 3,264 | 6,172 | 9,641 | 11,881 |
| 128/2048 | 2,422 | 4,993 | 7,922 | 9,833 |
| 128/4096 | 1,349 | 2,893 | 4,978 | 7,352 |
| 500/2000 | 1,856 | 4,114 | 6,939 | 9,435 |
| 1000/1000 | 1,787 | 3,707 | 5,961 | 8,166 |
| 1000/2000 | 1,594 | 2,993 | 5,274 | 6,943 |
| 2048/128 | 393 | 813 | 1,511 | 2,495 |
| 2048/2048 | 1,074 | 2,336 | 3,870 | 6,078 |
| 5000/500 | 401 | 812 | 1,511 | 2,491 |
| 20000/2000 | 142 | 319 | 630 | 1,148 |
""",
    "Qwen3-30B-A3B": """
| Sequence Length (ISL/OSL) | B200<br/>TP1 (FP4) | GB200<br/>TP1 (FP4) |
| 128/128 | 39,827 | 24,107 |
| 128/2048 | 37,844 | 31,311 |
| 128/4096 | 24,953 | 26,337 |
| 500/2000 | 27,817 | 20,604 |
| 1000/1000 | 25,828 | 17,481 |
| 1000/2000 | 22,051 | 17,177 |
| 2048/128 | 6,251 | 6,595 |
| 2048/2048 | 17,554 | 14,719 |
| 5000/500 | 6,142 | 5,908 |
| 20000/2000 | 2,944 | 3,203 |
""",
    "Qwen3-30B-A3B / RTX 6000 Pro Blackwell Server Edition": """
| Sequence Length (ISL/OSL) | **1 GPUs**<br/>TP1,PP1 (FP4) | **2 GPUs**<br/>TP2,PP1 (FP4) | **4 GPUs**<br/>TP4,PP1 (FP4) | **8 GPUs**<br/>TP8,PP1 (FP4) |
| 128/128 | 28,011 | 32,646 | 36,819 | 39,490 |
| 128/2048 | 12,540 | 22,744 | 35,715 | 52,676 |
| 128/4096 | 7,491 | 15,049 | 28,139 | 33,895 |
| 500/2000 | 10,695 | 17,266 | 26,175 | 44,088 |
| 1000/1000 | 9,910 | 16,431 | 24,046 | 31,785 |
| 1000/2000 | 8,378 | 13,323 | 25,131 | 28,881 |
| 2048/128 | 3,257 | 3,785 | 4,311 | 4,798 |
| 2048/2048 | 5,908 | 10,679 | 18,134 | 22,391 |
| 5000/500 | 2,530 | 3,799 | 5,212 | 5,965 |
| 20000/2000 | 871 | 1,558 | 2,551 | |
""",
    "Llama 3.1 405B": """
| Sequence Length (ISL/OSL) | B200<br/>TP4 (FP4) | GB200<br/>TP4 (FP4) | H200<br/>TP8 (FP8) | H100<br/>TP8 (FP8) |
| 128/128 | 6,281 | 6,740 | 3,814 | 3,627 |
| 128/2048 | 8,020 | 8,151 | 5,348 | 4,340 |
| 128/4096 | 6,345 | 6,608 | 4,741 | 3,116 |
| 500/2000 | 6,244 | 6,540 | 4,724 | 3,994 |
| 1000/1000 | 5,209 | 5,389 | 3,330 | 2,919 |
| 1000/2000 | 4,933 | 5,135 | 3,722 | 2,895 |
| 2048/128 | 749 | 797 | 456 | 453 |
| 2048/2048 | 4,212 | 4,407 | 2,948 | 2,296 |
| 5000/500 | 1,048 | 1,112 | 650 | 610 |
| 20000/2000 | 672 | 739 | 505 | 345 |
""",
}

# table -> (catalog model, checkpoint named in the doc's "FP4 Models" list, MoE)
MODELS = {
    "Llama 4 Scout": ("llama-4-scout", "not in the doc's FP4 list (the table says FP4)", True),
    "Llama 3.3 70B": ("llama-3.3-70b", "nvidia/Llama-3.3-70B-Instruct-FP4", False),
    "Qwen3-30B-A3B": ("qwen3-30b-a3b", "nvidia/Qwen3-30B-A3B-FP4", True),
    "Llama 3.1 405B": ("llama-3.1-405b", "nvidia/Llama-3.1-405B-Instruct-FP4", False),
}
# the columns taken: (table, column header as printed) -> (device, device_variant, n_devices)
COLUMNS_TAKEN = {
    ("Llama 4 Scout", "B200<br/>TP1 (FP4)"): ("b200", "B200 180GB (DGX B200)", 1),
    ("Llama 4 Scout", "GB200<br/>TP1 (FP4)"): ("gb200", "GB200 192GB (GB200 NVL72)", 1),
    ("Llama 3.3 70B", "B200<br/>TP1 (FP4)"): ("b200", "B200 180GB (DGX B200)", 1),
    ("Llama 3.3 70B", "GB200<br/>TP1 (FP4)"): ("gb200", "GB200 192GB (GB200 NVL72)", 1),
    ("Llama 3.3 70B / RTX 6000 Pro Blackwell Server Edition", "**1 GPUs**<br/>TP1,PP1 (FP4)"):
        ("rtx-pro-6000", "RTX 6000 Pro Blackwell Server Edition (the profile is the Workstation Edition: same GB202, 96 GB GDDR7, 1,792 GB/s)", 1),
    ("Qwen3-30B-A3B", "B200<br/>TP1 (FP4)"): ("b200", "B200 180GB (DGX B200)", 1),
    ("Qwen3-30B-A3B", "GB200<br/>TP1 (FP4)"): ("gb200", "GB200 192GB (GB200 NVL72)", 1),
    ("Qwen3-30B-A3B / RTX 6000 Pro Blackwell Server Edition", "**1 GPUs**<br/>TP1,PP1 (FP4)"):
        ("rtx-pro-6000", "RTX 6000 Pro Blackwell Server Edition (the profile is the Workstation Edition: same GB202, 96 GB GDDR7, 1,792 GB/s)", 1),
    ("Llama 3.1 405B", "B200<br/>TP4 (FP4)"): ("b200", "B200 180GB (DGX B200)", 4),
    ("Llama 3.1 405B", "GB200<br/>TP4 (FP4)"): ("gb200", "GB200 192GB (GB200 NVL72)", 4),
}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def rows() -> list[dict]:
    out = []
    for (table, header), (device, variant, n) in COLUMNS_TAKEN.items():
        lines = [ln for ln in TABLES[table].strip().splitlines() if ln.strip()]
        head = _cells(lines[0])
        col = head.index(header)
        base = table.split(" / ")[0]
        model, ckpt, moe = MODELS[base]
        for ln in lines[1:]:
            cells = _cells(ln)
            if not cells[col]:
                continue
            isl, osl = (int(x) for x in cells[0].split("/"))
            value = int(cells[col].replace(",", ""))
            label = header.replace("<br/>", " ").replace("**", "")
            tp = n
            settings = (f"tp={tp};bench=trtllm-bench throughput --backend pytorch;"
                        "cuda_graph padding batch_sizes up to 8192;"
                        + ("enable_attention_dp=true (MoE llm_options);" if moe else "")
                        + f"kv_cache_free_gpu_mem_fraction=0.90-0.95;num_requests={NUM_REQUESTS[(isl, osl)]}")
            notes = ("Reported metric \"Total Output Throughput (tokens/sec)\" (output tokens/s of whole system), "
                     "offline max-load, synthetic fixed ISL/OSL. "
                     + (f"Checkpoint {ckpt}. " if ckpt.startswith("nvidia/") else f"Checkpoint {ckpt}. ")
                     + "KV cache dtype not printed (the trtllm preset's kv_dtype_for_quant: FP8 for NVFP4 checkpoints). "
                     + "Max batch not stated."
                     + (f" Tensor parallel over {n} GPUs of one {'DGX B200' if device == 'b200' else 'GB200 NVL72'}." if n > 1 else ""))
            out.append({
                "row_id": f"trtllm-v1.0-{device}-{model}-nvfp4-tp{tp}-{isl}-{osl}",
                "source": SOURCE, "source_ref": SOURCE_REF, "engine": "trtllm", "engine_version": VERSION,
                "backend": "", "device": device, "device_variant": variant, "n_devices": n, "model": model,
                "quant": "nvfp4", "metric": "offline", "batch": "", "request_rate": "",
                "input_tokens": isl, "output_tokens": osl, "depth": 0, "quantity": "output_tps",
                "value": value, "as_printed": f"{table} table | {cells[0]} | {label}: {cells[col]}",
                "derivation": "", "settings": settings, "notes": notes,
            })
    return out


def csv_text(records: list[dict], columns: list[str] = COLUMNS) -> str:
    """The corpus CSV of `records` (the public corpus's columns, '\n' line ends)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    for r in records:
        w.writerow(r)
    return buf.getvalue()


def write_or_check(argv: list[str], out: Path, records: list[dict]) -> int:
    """A builder's command line: `--check` compares `out` with the CSV of `records` (exit 1 when it differs),
    else writes it."""
    text = csv_text(records)
    if "--check" in argv:
        same = out.exists() and out.read_text(encoding="utf-8") == text
        print(f"{out.name}: {'up to date' if same else 'differs from the builder'}")
        return 0 if same else 1
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({len(records)} rows)")
    return 0


def builder(out: Path, rows) -> tuple:
    """A builder module's (`render`, `main`): `render()` the CSV text of `rows()` (what the tests compare with
    `out`), `main(argv)` its command line (`write_or_check`)."""
    def render() -> str:
        return csv_text(rows())

    def main(argv: list[str]) -> int:
        return write_or_check(argv, out, rows())
    return render, main


render, main = builder(OUT, rows)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
