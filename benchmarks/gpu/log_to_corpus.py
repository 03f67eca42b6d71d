"""Turn a run_h200.sh log into corpus rows (benchmarks/public/README.md schema), one per printed figure.

Every value is copied from a table cell of the committed log; `as_printed` is that table line. The
log's command lines say which settings each table ran with; llama-bench's defaults fill the rest
(n_batch 2048, n_ubatch 512, all layers offloaded, flash attention `auto`, which on this CUDA build
runs flash attention). Run from the repository root:

    python benchmarks/gpu/log_to_corpus.py benchmarks/gpu/h200-2026-12-04 benchmarks/gpu/h200-2026-12-04b \
        > benchmarks/public/measured_here.csv
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from calibrate.public_corpus import COLUMNS  # noqa: E402  (the corpus schema)

# The random-weight files random_gguf.py writes -> (catalog model, corpus quant, short id)
_MODELS = {
    "llama-2-7b-q4_0.gguf": ("llama-2-7b", "q4_0", "l2-7b-q4_0"),
    "llama-3.1-8b-q4_k_m.gguf": ("llama-3.1-8b", "q4_k_m", "l31-8b-q4_k_m"),
    "llama-3.1-8b-f16.gguf": ("llama-3.1-8b", "fp16", "l31-8b-f16"),
    "qwen2.5-7b-q8_0.gguf": ("qwen2.5-7b", "q8_0", "q25-7b-q8_0"),
    "llama-3.1-70b-q4_k_m.gguf": ("llama-3.1-70b", "q4_k_m", "l31-70b-q4_k_m"),
    "llama-2-7b-q8_0.gguf": ("llama-2-7b", "q8_0", "l2-7b-q8_0"),
}
_ENGINE_VERSION = ("llama.cpp 0c1e5709 (2026-10-01; vendored in llama-cpp-python 0.3.36); CUDA 13.0, sm_90. llama-bench "
                   "prints 'build: bce3693 (359)': that is this repository's commit, which the build picked up")
_VARIANT = "NVIDIA H200 (nvidia-smi name), 141 GB HBM3e, 700 W limit, driver 580.159.04"
_NOTE = ("Measured with this repository's benchmarks/gpu/run_h200.sh on a lent single-GPU H200 machine. "
         "Weights are random (benchmarks/gpu/random_gguf.py) in the real architecture's tensor shapes and "
         "storage types, so llama.cpp runs the same kernels on the same bytes as for the real model.")


def _option(cmd: list[str], flag: str, default: str) -> str:
    return cmd[cmd.index(flag) + 1] if flag in cmd else default


def rows_from_log(log: Path, source: str) -> list[dict]:
    out: list[dict] = []
    cmd: list[str] = []
    header: list[str] = []
    first_config = False
    base = dict(source=source, engine="llama.cpp", engine_version=_ENGINE_VERSION, backend="cuda",
                device="h200", device_variant=_VARIANT, n_devices="1", request_rate="", notes=_NOTE,
                source_ref=f"infersim {source[len('repo:'):]} (run 2026-12-04)")
    for raw in log.read_text().splitlines():
        m = re.match(r"=== \[t\+\d+ s\] (\S*llama-(?:batched-)?bench) (.*)", raw)
        if m:
            cmd = [Path(m.group(1)).name] + m.group(2).split()
            header = []
            first_config = True
            continue
        if not cmd or not raw.startswith("|"):
            continue
        cells = [c.strip() for c in raw.strip().strip("|").split("|")]
        if cells[0] in ("model", "PP"):
            header = cells
            continue
        if not header or set(cells[0]) <= {"-", ":", " "}:
            continue
        model, quant, short = _MODELS[Path(_option(cmd, "-m", "")).name]
        rec = dict(base, model=model, quant=quant, as_printed=raw.strip(), derivation="")
        col = dict(zip(header, cells))
        if cmd[0] == "llama-bench":
            test = col["test"]
            t = re.match(r"(pp|tg)(\d+)(?: @ d(\d+))?$", test)
            kind, n, depth = t.group(1), int(t.group(2)), int(t.group(3) or 0)
            ub = col.get("n_ubatch", _option(cmd, "-ub", "512"))
            fa = col.get("fa", "auto (on)")
            mean = col["t/s"].split("±")[0].strip()
            rec.update(row_id=f"lcpp-cuda-h200-here-{short}-{test.replace(' @ ', '-')}-ub{ub}-fa{fa[0]}",
                       metric=kind, batch="1", input_tokens=str(n if kind == "pp" else 0),
                       output_tokens=str(n if kind == "tg" else 0), depth=str(depth),
                       quantity="prompt_tps" if kind == "pp" else "decode_tps", value=mean,
                       settings=f"bench=llama-bench;ngl=99;n_batch={_option(cmd, '-b', '2048')};n_ubatch={ub};"
                                f"fa={fa};reps={_option(cmd, '-r', '5')}")
            rec["notes"] += " llama-bench mean ± sd over the repetitions; value is the mean."
            out.append(rec)
        else:  # llama-batched-bench: one row for the prompt rate, one for the decode rate
            pp, tg, b = col["PP"], col["TG"], col["B"]
            settings = (f"bench=llama-batched-bench;n_batch={_option(cmd, '-b', '2048')};"
                        f"n_ubatch={_option(cmd, '-ub', '512')};fa=1;is_pp_shared=0 (prompts not shared);ngl=99;"
                        f"n_kv_max={_option(cmd, '-c', '')}")
            for quantity, key, tkey, what in (("prompt_tps", "S_PP t/s", "T_PP s", "spp"),
                                               ("decode_tps", "S_TG t/s", "T_TG s", "stg")):
                r = dict(rec, row_id=f"lcpp-cuda-h200-here-{short}-bb-pp{pp}-tg{tg}-b{b}-{what}", metric="batched",
                         batch=b, input_tokens=pp, output_tokens=tg, depth="0", quantity=quantity,
                         value=col[key], settings=settings)
                r["notes"] += (f" llama-batched-bench row: B sequences each with PP prompt tokens then TG generated "
                               f"tokens; N_KV={col['N_KV']}. value = {key} ({tkey}={col[tkey]}).")
                if first_config and quantity == "prompt_tps":
                    r["notes"] += (" Treat as an outlier: the first configuration of the llama-batched-bench run, "
                                   "whose prompt pass carries one-time costs (first launches, buffer growth) that "
                                   "the next configuration's twice as many tokens do not; the same as the ggml-org "
                                   "DGX Spark table's first row.")
                out.append(r)
            first_config = False
    return out


def main(argv: list[str]) -> int:
    w = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for run in argv:
        log = Path(run) / "h200_llamacpp.log"
        rows = rows_from_log(log, f"repo:{log.as_posix()}")
        w.writerows(rows)
        print(f"{len(rows)} rows from {log}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
