"""Blind test of new measurements: predict rows the fit has not seen, before they join the corpus.

    python benchmarks/gpu/blind_check.py ROWS.csv [ROWS.csv ...]

Fits the corpus in benchmarks/public as it stands, leaving out any row whose row_id is in ROWS.csv,
then predicts each new row the way a shipped profile would: with its device's fitted group where the
corpus has one, else transferred from the other devices for the rows' own llama.cpp era
(calibrate/public_fit.py `transfer`). Prints each row's signed error (predicted / measured - 1) and
the median / p80 / p90 of |error|, overall and for single-stream decode. Run it on a lent machine's
rows before committing them (benchmarks/gpu/README.md quotes its figures for the H200 runs).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from calibrate import public_fit as pf  # noqa: E402
from calibrate.public_corpus import (  # noqa: E402
    MICROBENCH_FILE, default_corpus_dir, load_corpus, load_corpus_file, load_microbench,
)
from sim.catalog.hardware import available_profiles  # noqa: E402
from sim.catalog.models import load_catalog  # noqa: E402


def _summary(label: str, errs: list[float]) -> str:
    st = pf._stats(errs)  # |error| median / p80 / p90, as the fidelity report computes them
    if not st["n"]:
        return f"{label}: no rows"
    return f"{label}: {st['n']} rows, median {100 * st['median']:.1f}%, p80 {100 * st['p80']:.1f}%, " \
           f"p90 {100 * st['p90']:.1f}%"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    devices, models = set(available_profiles()), set(load_catalog())
    new = [r for f in argv for r in load_corpus_file(f, devices=devices, models=models)]
    new_ids = {r.row_id for r in new}
    corpus_dir = default_corpus_dir()
    rows = [r for r in load_corpus(corpus_dir) if r.row_id not in new_ids]
    corpus = pf.PublicCorpus(rows, load_microbench(corpus_dir / MICROBENCH_FILE))
    prepared = pf.prepare(rows, corpus)
    pf.fit_routing(prepared, corpus)
    fits = pf.fit_all(prepared, corpus)

    errs, tg = [], []
    for it in pf.prepare(new, corpus):
        r = it.row
        if it.shape is None:
            print(f"{r.row_id:64s} not replayed: {it.excluded}")
            continue
        p = pf.params_for(r.device, it.family, fits, era=pf.current_share([r]), corpus=corpus)
        e = pf._err(r, it.shape, p, corpus)
        how = "fitted on this device" if (r.device, it.family) in fits else \
            "transferred from " + ", ".join(p.transferred_from if p else [])
        print(f"{r.row_id:64s} {r.value:>10.2f} {100 * e:+7.1f}%  ({how})")
        errs.append(e)
        if r.metric == "tg":
            tg.append(e)
    print(_summary("all", errs))
    print(_summary("single-stream decode", tg))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
