"""What-if of benchmarks/trtllm0_allreduce.md: TensorRT-LLM 0.12+ rows priced with 0.x's own custom all-reduce.

    python benchmarks/trtllm0_allreduce_whatif.py fit  [--whatif] [--write] [--out FILE.json]
    python benchmarks/trtllm0_allreduce_whatif.py serve [--whatif]

`fit`: the public kernel fit and its cross-validation (calibrate/public_report.py `run_public_fit`'s steps),
printing the rule's figures: held out by device (LODO) of the devices profiled before issue 39, and the
TensorRT-LLM 0.x TP > 1 rows' LODO / in-sample / LOSO errors, the fitted TensorRT-LLM step latencies, and the
set-aside rocm-blog rows priced by the H100's fitted entry. `--write` writes the profiles, the saved fit and the
routing file as `benchmarks/public_fit.py` does (for `serve` to read; `git checkout` them after), never the report.
`serve`: `sim.bench.corpus.predict_row` for a few serving-corpus points of TensorRT-LLM 0.x at TP > 1.
`--whatif` switches the 0.x table on (`install`); without it, the shipped behaviour (the ring).

Nothing here is imported by sim/ or calibrate/: the what-if patches two module attributes in this process only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# TensorRT-LLM 0.x's AUTO all-reduce (allreducePlugin.cpp selectImplementation, 0.12+ with two-shot disabled;
# sources in benchmarks/trtllm0_allreduce.md): one-shot below 16,000,000 B at TP <= 2 (the custom workspace,
# customAllReduceUtils.h getMaxRequiredWorkspaceSize), 1,000,000 B at TP <= 4, 500,000 B above; NCCL beyond
# (no two-shot: the custom limit is the one-shot limit). KiB as AllReducePolicy reads the preset table.
TRT0_ONESHOT_KIB = {2: 16e6 / 1024, 4: 1e6 / 1024, 6: 5e5 / 1024, 8: 5e5 / 1024}
TRT0_TABLE = {"oneshot": TRT0_ONESHOT_KIB, "custom": TRT0_ONESHOT_KIB}


def auto_release(engine: str, version) -> bool:
    """A TensorRT-LLM 0.x release whose custom all-reduce is always on (0.12 to 0.x's end; 0.5-0.11: opt-in)."""
    m = re.match(r"\s*(\d+)\.(\d+)", str(version or ""))
    return engine.startswith("trtllm") and m is not None and int(m[1]) == 0 and int(m[2]) >= 12


def install() -> None:
    """Price the kernel fit's 0.12+ TensorRT-LLM TP rows with the 0.x table (calibrate/public/replayers.py
    row_shape calls `row_allreduce_algorithms(row)` and then `_comm(hw, spec, tp, eng)`) and the serving
    corpus's (sim.bench.corpus row_overrides, read by point_from_row)."""
    import calibrate.public.replayers as rp
    import sim.bench.corpus as sc

    flag0, comm0, over0 = rp.row_allreduce_algorithms, rp._comm, sc.row_overrides
    state = {"row": None}

    def flag(row):
        state["row"] = row
        return True if auto_release(row.engine, row.engine_version) else flag0(row)

    def comm(hw, spec, tp, eng=None):
        row = state["row"]
        if eng is not None and tp > 1 and row is not None and auto_release(row.engine, row.engine_version):
            eng = eng.with_overrides(allreduce_algorithms=True, allreduce_max_kib=TRT0_TABLE)
        return comm0(hw, spec, tp, eng)

    def overrides(row):
        out = over0(row)
        if auto_release(str(row.get("engine") or ""), row.get("engine_version")) and int(out.get("tp", 1) or 1) > 1:
            out = {**out, "allreduce_algorithms": True, "allreduce_max_kib": TRT0_TABLE}
        return out

    rp.row_allreduce_algorithms, rp._comm, sc.row_overrides = flag, comm, overrides


def _stats(errs) -> str:
    import numpy as np

    a = np.abs(np.array([e for e in errs if np.isfinite(e)], dtype=float))
    if not len(a):
        return "n 0"
    return f"n {len(a)} median {100 * np.median(a):.2f}% p90 {100 * np.percentile(a, 90):.2f}%"


def run_fit(write: bool) -> dict:
    import numpy as np

    from calibrate import public_report as pr
    from calibrate.public.state import save_state
    from calibrate.public_fit import _err, params_for, row_shape
    from calibrate.serving.rows import release_of

    corpus = pr.PublicCorpus.load(pr.default_corpus_dir())
    prepared = pr.prepare(corpus.rows, corpus)
    routing = pr.fit_routing(prepared, corpus)
    pr.fit_matvec_alu(prepared, corpus)
    v = pr.cross_validate(prepared, corpus)
    s = pr.summary(v)
    if write:
        pr.write_profiles_from(v)
        save_state(v, pr.default_corpus_dir())
        pr.write_routing(routing)
    out = {"lodo_before_issue39": s["lodo_by_device_set"]["devices profiled before issue 39"]["all"],
           "lodo_all": s["lodo"]["all"], "loso_all": s["loso"]["all"], "in_sample_all": s["in_sample"]["all"]}
    for k, x in out.items():
        print(f"{k}: n {x['n']} median {100 * x['median']:.2f}% p90 {100 * x['p90']:.2f}%")
    old = [it for it in v.prepared if it.shape is not None and it.row.n_devices > 1
           and release_of(it.row.engine, it.row.engine_version) == "trtllm@0.x"]
    print(f"TensorRT-LLM 0.x TP>1 fitted rows: {len(old)}")
    for name, errs in (("lodo", v.lodo), ("in_sample", v.in_sample), ("loso", v.loso)):
        print(f"  {name}: {_stats([errs[it.row.row_id] for it in old if it.row.row_id in errs])}")
    for key in sorted({(it.row.device, it.row.n_devices) for it in old}):
        grp = [it for it in old if (it.row.device, it.row.n_devices) == key]
        print(f"  {key[0]} tp{key[1]}: lodo {_stats([v.lodo.get(it.row.row_id, np.nan) for it in grp])}; "
              f"in-sample {_stats([v.in_sample[it.row.row_id] for it in grp])}; "
              f"signed in-sample median {100 * np.median([v.in_sample[it.row.row_id] for it in grp]):+.1f}%")
    for (d, f), p in sorted(v.fits.items()):
        if f.startswith("trtllm") and p.lat_us is not None:
            print(f"  fitted step {d}/{f}: {p.lat_us:.2f} us")
    aside = []
    for it in v.prepared:
        if it.shape is None and "rocmblog" in it.row.row_id:
            shape = row_shape(it.row, v.corpus)
            p = params_for(it.row.device, it.family, v.fits, corpus=v.corpus)
            e = _err(it.row, shape, p, v.corpus)
            aside.append(e)
            print(f"  set aside {it.row.row_id}: measured {it.row.value:g} {it.row.quantity}, error {100 * e:+.1f}%")
    print(f"  rocm-blog set-aside rows under the H100's fitted entry: {_stats(aside)}")
    return {**out, "old_lodo": [v.lodo.get(it.row.row_id) for it in old]}


def run_serve() -> None:
    from calibrate.serving.rows import load_corpus
    from sim.bench.corpus import predict_row

    rows = load_corpus()
    picks = []
    for r in rows:
        cid, src = str(r.get("curve_id") or ""), str(r.get("source") or "")
        if str(r.get("engine")) != "trtllm":
            continue
        if cid == "trtllm-rocmblog-llama-3.1-70b-fp8-h100-sxm-tp8-128-2048" and str(r.get("max_concurrency")) in ("1", "64"):
            picks.append(r)
        elif "waynehacking8" in src and re.search(r"trtllm_llama31(_fp8)?-c(1|64)\.json$", src):
            picks.append(r)
    done = {}
    for r in picks:
        key = (r["curve_id"], str(r.get("max_concurrency")))
        if key not in done:
            done[key] = predict_row(r)
        pred = done[key].get((r["quantity"], r["statistic"]))
        val = float(r["value"])
        err = "" if pred is None else f" -> predicted {pred:.4g} ({100 * (pred / val - 1):+.1f}%)"
        print(f"{r['curve_id']} c{r.get('max_concurrency')} tp{r.get('tp')} {r['quantity']} {r['statistic']}: "
              f"measured {val:g}{err}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("fit", "serve"))
    ap.add_argument("--whatif", action="store_true", help="TensorRT-LLM 0.12+ rows on 0.x's custom all-reduce")
    ap.add_argument("--write", action="store_true", help="fit: write profiles / saved fit / routing (not the report)")
    ap.add_argument("--out", help="fit: a JSON file for the printed figures")
    a = ap.parse_args()
    if a.whatif:
        install()
    print(f"what-if {'on' if a.whatif else 'off'}")
    if a.mode == "fit":
        out = run_fit(a.write)
        if a.out:
            Path(a.out).write_text(json.dumps(out, indent=1, default=float) + "\n", encoding="utf-8")
    else:
        run_serve()


if __name__ == "__main__":
    main()
