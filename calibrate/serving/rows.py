"""The serving corpus's rows: reading the CSVs, grouping them into curves, the reason a curve is not
replayed (`exclusion`), and the load points a replayable curve becomes (issue 38; overview in
calibrate/serving_fit.py)."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sim.bench.corpus import range_mode, row_lengths, stated_means  # noqa: F401 (stated_means: re-exported)
# the fixed-prompt rule lives beside row_lengths, shared with predict_row (re-exported: tests import it from here)
from sim.bench.corpus import FIXED_LENGTH_DATASETS, shared_prefix  # noqa: F401
from sim.bench.corpus import VLLM_LIKE as _CORPUS_VLLM_LIKE
from sim.bench.datasets import release_times
from sim.bench.serve import ServeClient
from sim.bench.corpus import blank as _blank
from sim.bench.corpus import cell_number as _num
from sim.bench.corpus import mean_lengths as _mean_lengths
# a row's engine overrides (flags, KV dtype, tp): the rule point_from_row uses too
from sim.bench.corpus import row_overrides as _overrides
# what deployment a row names (its model's catalog entry, its engine version's preset release): one rule in sim,
# shared with predict_row, re-exported here for this package's modules and tests
from sim.bench.corpus_deployment import (  # noqa: F401
    NAMED_MODELS, VLLM_RELEASE_DATES, build_date, dated_release, model_aliases, model_id, release_of)
from sim.bench.corpus_deployment import catalog_models as _catalog_models
# static-batch tools (which clients, their one batch of fixed lengths): one rule in sim, shared with predict_row
from sim.bench.corpus import STATIC_BATCH, is_static_batch, static_batch  # noqa: F401 (STATIC_BATCH: re-exported)
# speculative decoding's stated acceptance -> the engine's `speculative` block: one rule in sim, shared with
# predict_row, re-exported here for this package's modules and tests
from sim.bench import corpus_spec as _spec
from sim.bench.corpus_spec import SPEC_METHODS as _SPEC_METHODS  # noqa: F401
from sim.bench.corpus_spec import iid_acceptance, spec_override  # noqa: F401

#: HF repository ids the serving corpus names -> catalog ids (read from the catalog's `hf_repos`). An alias
#: applies only when the catalog passed to `model_id` has the target.
MODEL_ALIASES = model_aliases()

ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIR = ROOT / "benchmarks" / "serving"
PUBLIC_DIR = ROOT / "benchmarks" / "public"
CACHE_VERSION = "serving-fit-2"  # 2: fit_params spells efficiency_scale out in full (calibrate/serving/fit.py)

#: the four headline metrics of issue 38 and the (quantity, statistic) rows each takes
METRICS = {
    "ttft_p50": (("ttft_ms", "median"), ("ttft_ms", "mean")),
    "ttft_p99": (("ttft_ms", "p99"),),
    "tpot_itl": (("tpot_ms", "median"), ("tpot_ms", "mean"), ("itl_ms", "median"), ("itl_ms", "mean")),
    "output_tps": (("output_tps", "value"),),
}
KNEE_FACTOR = 3.0  # issue 38: the knee is the highest load whose TTFT p50 stays under 3x its low-load value

#: clients replayed as `vllm bench serve` (same arrivals and metric definitions); static-batch tools (B requests
#: at once, fixed lengths, every request measured) are sim.bench.corpus.STATIC_BATCH (imported above).
#: VLLM_LIKE is predict_row's set (sim.bench.corpus.VLLM_LIKE, the one definition) less "trtllm-bench": the fit
#: lists a trtllm-bench curve as "not replayable" (`exclusion`), where predict_row replays one as `vllm bench
#: serve` (no better definition known); no corpus curve names that client today, so the difference excludes no row
VLLM_LIKE = tuple(c for c in _CORPUS_VLLM_LIKE if c != "trtllm-bench")


# ---- the corpus -----------------------------------------------------------------------------------
def load_corpus(corpus_dir: Path = CORPUS_DIR) -> list[dict]:
    rows = []
    for f in sorted(Path(corpus_dir).glob("*.csv")):
        with f.open(newline="", encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                r["_file"] = f.name
                rows.append(r)
    return rows


def residuals_with_rows(fidelity_json: Path, corpus_dir: Path = CORPUS_DIR):
    """(residual row, its corpus row) for every row of a serving report's JSON (benchmarks/serving_fidelity.json
    `rows`), in the report's order: the join the analysis scripts read (benchmarks/ttft_split.py,
    inferencex_split.py). A residual whose row the corpus no longer has is an error naming it."""
    import json

    corpus = {r["row_id"]: r for r in load_corpus(corpus_dir)}
    for r in json.loads(Path(fidelity_json).read_text())["rows"]:
        c = corpus.get(r["row_id"])
        if c is None:
            raise SystemExit(f"row {r['row_id']} of {Path(fidelity_json).name} is not in the corpus")
        yield r, c


def public_sources(public_dir: Path = PUBLIC_DIR) -> set[str]:
    """Source URLs (without #anchors) of the kernel-level corpus: rows from them trained the kernel fit."""
    out = set()
    for f in sorted(Path(public_dir).glob("*.csv")):
        with f.open(newline="", encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                for key in ("source", "url"):
                    if r.get(key):
                        out.add(r[key].split("#")[0].strip())
    return out


def curves(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        out[r["curve_id"]].append(r)
    return dict(out)


def _hw_names() -> set[str]:
    return {p.stem for p in (ROOT / "hardware_profiles").glob("*.yaml")}


def _client_kind(client: str) -> str | None:
    c = client.strip()
    if c in VLLM_LIKE:
        return "serve"
    if is_static_batch(c):
        return "static"
    return None


#: why a curve whose dataset is a multi-turn conversation file is not replayed (README "Multi-turn datasets")
MULTI_TURN_REASON = ("multi-turn dataset file not available offline (per-turn token lengths, and so the "
                     "prefixes its requests share in the prefix cache, not stated)")


def _data_parallel(r: dict) -> int:
    """dp = n_devices / (tp x pp) of a row (schema: n_devices = tp*pp*dp); 1 when any is not stated."""
    n, tp = _num(r.get("n_devices")), _num(r.get("tp"), 1) or 1
    if n is None:
        return 1
    m = re.search(r"(?:--pipeline-parallel-size|-pp)[ =](\d+)", r.get("engine_flags") or "")
    pp = int(m.group(1)) if m else 1
    return max(1, int(n) // max(1, int(tp) * pp))


def exclusion(curve: list[dict], *, hw: set[str] | None = None, catalog: set[str] | None = None,
              public: set[str] | None = None) -> str | None:
    """Why a curve cannot be replayed, or None. One reason, the first that applies."""
    hw = _hw_names() if hw is None else hw
    catalog = _catalog_models() if catalog is None else catalog
    public = public_sources() if public is None else public
    r = curve[0]
    text = " ".join((r["curve_id"], r.get("engine_flags") or "", r.get("notes") or "")).lower()
    if all("outlier" in (x.get("notes") or "").lower() for x in curve):
        return "outlier (its collector's note)"
    if re.search(r"\b(eagle3?|mtp|speculative|spec[- ]decod|medusa|ngram)\b", text):
        why = spec_unreplayable(curve)
        if why:
            return why
    if r["device"] not in hw:
        return f"device {r['device']} has no hardware profile"
    dp = _data_parallel(r)
    if dp > 1:
        # e.g. InferenceX's MiniMax-M2.5 "DEP8": attention data-parallel on 8 GPUs, experts spread across them.
        # The simulator serves one tp x pp replica, so tp 1 would put the whole model on one GPU (it does not
        # fit), and tp 8 would price tensor-parallel attention and all-reduces the run did not do.
        return (f"data-parallel layout (n_devices {int(_num(r.get('n_devices')))} = "
                f"tp x pp x dp with dp {dp}) not modelled: the simulator serves one tp x pp replica")
    if model_id(r["model"], catalog) is None:
        return f"model {r['model']} not in the catalog"
    if release_of(r["engine"], r.get("engine_version")) is None:
        return f"engine {r['engine']} has no preset"
    if r["source"].split("#")[0].strip() in public or "same figures are in benchmarks/public" in text:
        return "same source as benchmarks/public rows (kernel-fit training data, not held out)"
    kind = _client_kind(r.get("client") or "")
    if kind is None:
        return f"client {r.get('client')!r} not replayable"
    ds = (r.get("dataset") or "").strip().lower()
    if kind == "serve" and ds != "random":
        # no ShareGPT file offline: only its stated mean lengths. A closed loop replayed with equal lengths
        # runs in lock-step (C prompts prefilled at once, every round), which the real run, with its spread
        # of conversation lengths, did not do; an open loop's Poisson arrivals do not synchronise, so an
        # open loop with both mean lengths stated is replayed at them. A multi-turn dataset's requests
        # share prefixes (a conversation's earlier turns, a common context) that vLLM's prefix cache
        # reuses; how many tokens each request shares is set by the dataset file's per-turn lengths, which
        # no row states and no file here holds (the DigitalOcean curves: benchmarks/serving/README.md,
        # "Multi-turn datasets", says what is known and what a replay would need).
        if "multi-turn" in ds:
            return MULTI_TURN_REASON
        fixed = ds in FIXED_LENGTH_DATASETS and _mean_lengths(r) is not None
        if not fixed and any((x.get("load_kind") or "").strip() != "rate" for x in curve):
            return f"{ds or 'dataset'} dataset not available offline (mean lengths alone would replay a lock-step)"
        if _mean_lengths(r) is None:
            return f"{ds or 'dataset'} mean lengths not stated (no dataset file offline)"
    if r.get("engine") not in ("vllm", "sglang", "trtllm", "llama.cpp"):
        return f"engine {r['engine']} not replayed by the serving fit"
    return None


# ---- load points ----------------------------------------------------------------------------------
@dataclass
class LoadPoint:
    curve_id: str
    source: str  # the publisher (the unit of held-out-by-source)
    device: str
    engine: str  # preset release, e.g. sglang@0.4
    family: str  # vllm, sglang, trtllm, llama.cpp
    model: str
    quant: str | None
    tp: int
    kv_dtype: str | None
    overrides: dict
    load_kind: str  # concurrency | rate
    load: float  # C or R (inf: all at once)
    num_prompts: int  # as the source ran it
    replayed_prompts: int  # after the cap
    prompt_lens: list[int]
    output_lens: list[int]
    release_s: list[float]
    max_concurrency: int | None
    measured: dict = field(default_factory=dict)  # (quantity, statistic) -> value
    row_ids: dict = field(default_factory=dict)  # (quantity, statistic) -> row_id
    #: the source itself labels the run experimental / work in progress (`experimental_by_source`); not
    #: part of `key()`: it changes no replay
    experimental: bool = False
    #: why the curve is scored but trains nothing (`build_anomalies`: a TP>1 run no faster than a one-device
    #: run of the same engine), "" when it trains; not part of `key()`
    build_anomaly: str = ""
    #: leading prompt tokens every request of the point shares with every other, which an engine whose prefix
    #: cache is on reuses (`shared_prefix`): a fixed-prompt dataset sends one prompt text N times, so after the
    #: first request has been prefilled the engine recomputes only what its cache cannot hold (vLLM V1: the
    #: tokens past the last full KV block, sim.engine.prefix_cache). 0: nothing shared (the key as before)
    shared_prefix_tokens: int = 0

    def __setattr__(self, name, value):
        """Setting a field forgets the remembered `key` (the fit asks for it millions of times, and each
        computation serialises the point's length lists: half the fitting stages' time when not kept)."""
        object.__setattr__(self, name, value)
        if name != "_key":
            object.__setattr__(self, "_key", None)

    def key(self) -> str:
        key = getattr(self, "_key", None)
        if key is None:
            key = self._compute_key()
            object.__setattr__(self, "_key", key)
        return key

    def _compute_key(self) -> str:
        parts = [self.curve_id, self.engine, self.model, self.quant, self.tp, self.kv_dtype,
                 sorted(self.overrides.items()), self.load_kind, self.load, self.prompt_lens,
                 self.output_lens, self.release_s, self.max_concurrency]
        if self.shared_prefix_tokens:  # appended only when set: every other point keeps its key
            parts.append({"shared_prefix_tokens": self.shared_prefix_tokens})
        blob = json.dumps(parts, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]


def prompt_cap(load_kind: str, load: float, num_prompts: int, overloaded: bool = False) -> int:
    """Requests replayed per point. A closed loop of C replays all N of the source's prompts: its C
    first requests are sent at once (`--request-rate inf`: vLLM's and SGLang's semaphore lets C through
    at t = 0) and are prefilled as one burst, the last of them waiting for C prefills, so the TTFT tail
    (p99 = the top 1% of N samples, `np.percentile` linear) and mean are set by the burst's share C / N
    of the samples. Replaying fewer than N raises that share: an earlier cap of max(8 C, 32) replayed
    8 C of the Red Hat sweeps' 20 C prompts and predicted a p99 TTFT ~20% above the one the same replay
    gives with all N (vLLM 0.9.2 TP4 H200 70B FP8, C=90: 4.76 s with 720 prompts, 3.90 s with 1,800;
    measured 3.78 s). An open loop below saturation keeps min(N, 400) (no burst: its queue is stable and
    400 arrivals cover its spread); an overloaded open loop (all at once, or a measured request
    throughput under 90% of the offered rate) keeps all N, because its queue, and so its TTFT, grows
    with N."""
    if load_kind == "concurrency" or overloaded or not math.isfinite(load):
        return int(num_prompts)
    return int(min(num_prompts, 400))


def _lengths(r: dict, kind: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Input/output lengths as the row's client draws them: sim.bench.corpus.row_lengths (the one rule,
    README 'What range_ratio means'); a static-batch tool's fixed lengths (sim.bench.corpus.static_batch)."""
    if kind == "static":  # n is the batch, B = the row's max_concurrency (load_points)
        return static_batch(r)[1:]
    ins, outs = row_lengths(r, n, seed)
    return ins.astype(int), outs.astype(int)


# ---- speculative decoding -------------------------------------------------------------------------
# the rule (reading the side table, matching a row's load point, the `speculative` block) and the table's
# path are sim.bench.corpus_spec's (SPEC_TABLE there; a test points the fit and predict_row at another table
# by swapping that one attribute): the fit reads the same table predict_row does


def spec_unreplayable(curve: list[dict], table: dict[str, list[dict]] | None = None) -> str | None:
    """Why a speculative curve cannot be replayed as speculative, or None: its source must state the
    acceptance of every load point (benchmarks/serving/side_tables/spec_acceptance.csv), with a
    method the speculative cost model prices (EAGLE/EAGLE-3 heads, MTP modules)."""
    table = _spec.load_spec_acceptance() if table is None else table
    stated = _spec.spec_stated(curve, table)
    points = {_spec.row_load(r) for r in curve if "outlier" not in (r.get("notes") or "").lower()}
    if not stated:
        return "speculative decoding (not replayed: acceptance not stated in the source)"
    if points - set(stated):
        return "speculative decoding (not replayed: acceptance stated for some load points only)"
    methods = {(e.get("method") or "").strip().lower() for e in stated.values()}
    if not methods <= set(_SPEC_METHODS):
        return f"speculative decoding (not replayed: method {sorted(methods - set(_SPEC_METHODS))[0]} not modelled)"
    return None


#: what a collector's note quotes when the source itself says a run is experimental work in progress, not
#: part of its published results (SemiAnalysis InferenceX's experimental/ folder README: "experimental WIP
#: code ... not ... part of the official InferenceMAX results")
EXPERIMENTAL_NOTE = re.compile(r"experimental WIP", re.IGNORECASE)


def experimental_by_source(curve: list[dict]) -> bool:
    """True when a row's note quotes the source calling the run experimental work in progress."""
    return any(EXPERIMENTAL_NOTE.search(r.get("notes") or "") for r in curve)


def load_points(curve: list[dict], *, catalog: set[str] | None = None, seed: int = 0,
                build_anomaly: str = "") -> list[LoadPoint]:
    catalog = _catalog_models() if catalog is None else catalog
    r0 = curve[0]
    kind = _client_kind(r0.get("client") or "")
    family = r0["engine"]
    engine = release_of(family, r0.get("engine_version"))
    model = model_id(r0["model"], catalog)
    quant = None if _blank(r0.get("quant")) else r0["quant"].strip()
    tp = int(_num(r0.get("tp"), 1) or 1)
    kvs = str(r0.get("kv_cache_dtype") or "").lower()
    kv = "fp8" if kvs.startswith("fp8") else None
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in curve:
        if "outlier" in (r.get("notes") or "").lower():
            continue
        load_kind = (r.get("load_kind") or "concurrency").strip()
        load = _num(r.get("max_concurrency")) if load_kind == "concurrency" else _num(r.get("request_rate"), math.inf)
        groups[(load_kind, load if load is not None else math.inf, r.get("max_concurrency") or "")].append(r)
    table = _spec.load_spec_acceptance()  # the side table (sim.bench.corpus_spec.SPEC_TABLE)
    points = []
    for (load_kind, load, cap), rs in sorted(groups.items(), key=lambda kv_: (kv_[0][0], kv_[0][1])):
        r = rs[0]
        conc = _num(r.get("max_concurrency"))
        n_src = int(_num(r.get("num_prompts"), 0) or 0)
        if kind == "static":
            n_src = int(conc or 1)
        if n_src <= 0:
            n_src = int(max(100, 10 * conc)) if conc else 1000
        rtps = next((_num(x.get("value")) for x in rs if x["quantity"] == "request_tps"), None)
        overloaded = load_kind == "rate" and (not math.isfinite(load) or (rtps is not None and rtps < 0.9 * load))
        n = prompt_cap(load_kind, load, n_src, overloaded) if kind == "serve" else n_src
        ins, outs = _lengths(r, kind, n, seed)
        if load_kind == "rate" and math.isfinite(load):  # released as the client releases them
            release = release_times(ServeClient(num_prompts=n, request_rate=load, seed=seed,
                                                burstiness=_num(r.get("burstiness"), 1.0) or 1.0,
                                                range_mode=range_mode(r.get("client"))), n)
        else:
            release = np.zeros(n)
        p = LoadPoint(
            curve_id=r["curve_id"], source=r.get("publisher") or r["source"], device=r["device"], engine=engine,
            family=family, model=model, quant=quant, tp=tp, kv_dtype=kv,
            overrides={**_overrides(r), **_spec.row_speculative(r, table)},
            load_kind=load_kind, load=float(load), num_prompts=n_src, replayed_prompts=n,
            prompt_lens=[int(x) for x in ins], output_lens=[int(x) for x in outs],
            release_s=[round(float(x), 6) for x in release], max_concurrency=int(conc) if conc else None,
            experimental=experimental_by_source(curve), build_anomaly=build_anomaly,
            shared_prefix_tokens=shared_prefix(r, ins))
        for x in rs:
            v = _num(x.get("value"))
            if v is not None and v > 0:
                p.measured[(x["quantity"], x["statistic"])] = v
                p.row_ids[(x["quantity"], x["statistic"])] = x["row_id"]
        points.append(p)
    return points
