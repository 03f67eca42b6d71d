"""One load point replayed on the simulator (sim.bench.serve.run_client), with a JSON cache keyed by
the tree's fingerprint, the point and the engine parameters (issue 38; overview in
calibrate/serving_fit.py)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np

from calibrate.serving.rows import CACHE_VERSION, ROOT, LoadPoint


# ---- replay ---------------------------------------------------------------------------------------
class Cache:
    """{point key + parameters: predicted figures} in a JSON file (reruns replay only what changed)."""

    def __init__(self, path: Path | None):
        self.path = Path(path) if path else None
        self.data: dict = {}
        if self.path and self.path.exists():
            try:
                self.data = json.loads(self.path.read_text())
            except ValueError:
                self.data = {}
        self.dirty = False

    def get(self, k):
        return self.data.get(k)

    def put(self, k, v):
        self.data[k] = v
        self.dirty = True

    def save(self):
        if self.path and self.dirty:
            # entries of other trees, or of a preset's earlier contents, are dead weight: dropped
            live = {f"{tree_fingerprint()}:{d}:" for d in preset_digests().values()} | {f"{tree_fingerprint()}:-:"}
            self.data = {k: v for k, v in self.data.items() if k[:k.find(":", k.find(":") + 1) + 1] in live}
            self.path.write_text(json.dumps(self.data, sort_keys=True))
            self.dirty = False


def _param_key(params: dict | None) -> str:
    return json.dumps(params or {}, sort_keys=True)


_TREE: list[str] = []


#: engine fields the serving fit itself fits and ships (and a replay's parameters always set, or its
#: cache key spells out with the preset's value): kept out of the tree's fingerprint, so shipping a
#: fitted value re-replays only the points that use the presets as they are, not the whole corpus
FITTED_FIELDS = ("request_overhead_ms", "layer_floor_us", "efficiency_scale", "host_token_us", "layer_floor_dense_us",
                 "front_request_ms")
NEUTRAL_SCALE = {"compute": 1.0, "bandwidth": 1.0, "attention": 1.0}


def effective_scale(value) -> dict | None:
    """An `efficiency_scale` (a mapping with some of compute/bandwidth/attention, or the preset's model) as
    the full mapping in effect, or None when it is neutral (all 1.0): a cache key spells a scale out only
    where it moves something, so the keys of every unscaled replay stay as they were before the scale was
    a fitted field."""
    if value is None:
        return None
    d = value.model_dump() if hasattr(value, "model_dump") else dict(value)
    full = {k: float(d.get(k, 1.0)) for k in NEUTRAL_SCALE}
    return None if full == NEUTRAL_SCALE else full


def _load_yaml(text: bytes):
    """A preset's YAML parsed as sim.catalog.engine_config.read_yaml parses it (libyaml's safe loader when
    pyyaml has it: the same values, ~10x faster than the pure-Python one)."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def engine_preset_digest(text: bytes) -> bytes:
    """What of an engine preset a replay depends on: its parsed values without the FITTED_FIELDS (a
    replay's key spells out their effective values) and without `sources` (citations: url, version,
    fields, note), so re-citing a value or shipping a fitted one does not make the whole corpus cold; a
    hardware rule that sets only FITTED_FIELDS (a per-vendor floor) is left out whole for the same reason."""
    def fitted_only(rule) -> bool:  # a hardware rule that sets only fitted fields (e.g. a per-vendor floor)
        return (isinstance(rule, dict) and isinstance(rule.get("set"), dict) and bool(rule["set"])
                and set(rule["set"]) <= set(FITTED_FIELDS) and rule.get("memory_reserved_gib") is None)

    def strip(x, key=None):
        if isinstance(x, dict):
            return {k: strip(v, k) for k, v in x.items() if k not in FITTED_FIELDS and k != "sources"}
        if isinstance(x, list):
            # such a rule's whole effect is a fitted field's value on the devices it matches, which the cache
            # key spells out (`preset_fitted` resolves the preset on the point's device): left out here too
            return [strip(v) for v in x if not (key == "hardware_rules" and fitted_only(v))]
        return x

    return json.dumps(strip(_load_yaml(text)), sort_keys=True, default=str).encode()


_PRESETS = "sim/catalog/engines/"


def tree_fingerprint() -> str:
    """A hash of everything a replay depends on but its engine preset (the simulator's code, profiles,
    catalog): a cache entry made by another tree is never reused. The shipped engine presets are keyed per
    point instead (`point_preset_digest`), so a change to one engine's preset re-replays only its curves."""
    if not _TREE:
        h = hashlib.sha256(CACHE_VERSION.encode())
        files = sorted([*ROOT.glob("sim/**/*.py"), *ROOT.glob("sim/**/*.yaml"), *ROOT.glob("workloads/*.py"),
                        *ROOT.glob("hardware_profiles/*.yaml")])
        skip = ("sim/commands/", "sim/cli.py", "sim/catalog/accuracy.py", "sim/plan/")  # not on a replay's path
        for f in files:
            rel = str(f.relative_to(ROOT))
            if rel.startswith(skip) or (rel.startswith(_PRESETS) and f.suffix == ".yaml"):
                continue
            h.update(rel.encode())
            h.update(f.read_bytes())
        _TREE.append(h.hexdigest()[:16])
    return _TREE[0]


_DIGESTS: dict[str, str] = {}


def preset_digests() -> dict[str, str]:
    """Shipped preset name -> a hash of its `engine_preset_digest` (no FITTED_FIELDS: `cache_key` spells out
    their effective values; no citations) and of the presets its `base:` entries name, at any depth of
    the file (a release may set one), followed to the end of the chain."""
    if not _DIGESTS:
        files = {f.stem: f for f in sorted((ROOT / _PRESETS).glob("*.yaml"))}
        texts = {name: f.read_bytes() for name, f in files.items()}

        def bases(x) -> set[str]:
            if isinstance(x, dict):
                own = {str(x["base"]).split("@")[0].lower()} if isinstance(x.get("base"), str) else set()
                return own.union(*(bases(v) for v in x.values()))
            if isinstance(x, list):
                return set().union(*(bases(v) for v in x))
            return set()

        named = {name: bases(_load_yaml(t)) for name, t in texts.items()}
        for name in files:
            chain, todo = set(), [name]
            while todo:  # the preset and every preset it builds on (a cycle or an unknown name ends a branch)
                n = todo.pop()
                if n in chain or n not in texts:
                    continue
                chain.add(n)
                todo.extend(named[n])
            h = hashlib.sha256()
            for n in sorted(chain):
                h.update(n.encode() + b"\0" + engine_preset_digest(texts[n]) + b"\0")
            _DIGESTS[name] = h.hexdigest()[:12]
    return _DIGESTS


def point_preset_digest(point: LoadPoint) -> str:
    """`preset_digests` of the shipped preset the point's engine names (its release suffix and aliases as
    `sim.catalog.engine_config.engine_path` reads them); "-" for an engine that is no shipped preset."""
    if point.engine not in _POINT_DIGESTS:  # the fit asks millions of times for a handful of engine names
        from sim.catalog.engine_config import engine_path

        path = engine_path(point.engine)
        shipped = path is not None and path.parent.resolve() == (ROOT / _PRESETS).resolve()
        _POINT_DIGESTS[point.engine] = preset_digests().get(path.stem, "-") if shipped else "-"
    return _POINT_DIGESTS[point.engine]


_POINT_DIGESTS: dict[str, str] = {}


_PRESET_FITTED: dict[str, dict] = {}


def preset_fitted(point: LoadPoint) -> dict:
    """{field: value} of the FITTED_FIELDS the point's engine preset (its release, on its device and
    checkpoint: its hardware rules applied, so a per-vendor floor keys the replay) sets, for the cache key:
    the fingerprint leaves those lines out."""
    k = f"{point.key()}:{point.device}:{point.engine}"
    if k not in _PRESET_FITTED:
        from sim.api import make_spec, resolve

        try:
            _, eng = resolve(make_spec(trace="<serving fit>", hw=point.device, model=point.model, quant=point.quant,
                                       engine=point.engine))
            _PRESET_FITTED[k] = {f: (getattr(eng, f) if f == "efficiency_scale" else float(getattr(eng, f)))
                                 for f in FITTED_FIELDS if getattr(eng, f, None) is not None}  # None: no dense floor
        except Exception:  # noqa: BLE001 - a deployment the simulator refuses: replay records the error
            _PRESET_FITTED[k] = {}
    return _PRESET_FITTED[k]


def cache_key(point: LoadPoint, params: dict | None, efficiency_overrides: dict | None = None) -> str:
    """The tree, the point, and the engine parameters in effect: `params` over the preset's fitted fields;
    `efficiency_overrides` (see `replay`), when given, appended (without them a key is what it always was)."""
    eff = {**preset_fitted(point), **(params or {})}
    if eff.get("layer_floor_dense_us", 0.0) is None:  # no dense-layer floor of its own: the key as before the field
        eff.pop("layer_floor_dense_us")
    if "efficiency_scale" in eff:  # spelled out in full where not neutral, else left out (see effective_scale)
        sc = eff.pop("efficiency_scale")
        if isinstance(sc, dict):  # the engine merges a partial scale into its preset's (EngineConfig.with_overrides)
            sc = {**(effective_scale(preset_fitted(point).get("efficiency_scale")) or NEUTRAL_SCALE), **sc}
        sc = effective_scale(sc)
        if sc is not None:
            eff["efficiency_scale"] = sc
    extra = f":efficiency={_param_key(efficiency_overrides)}" if efficiency_overrides else ""
    return f"{tree_fingerprint()}:{point_preset_digest(point)}:{point.key()}:{_param_key(eff)}{extra}"


#: where a replay charges the front-end latency `request_overhead_ms` (`replay(..., front_end=)`): "in_loop"
#: (the default, and the only placement the serving fit, the bands and every shipped figure use: the
#: simulator's workloads.arrivals.FrontEnd: each request reaches the engine's queue that long after its
#: send, so a closed loop's next request reaches the engine that long after its predecessor finished) or
#: "additive" (a diagnostic that only benchmarks/front_end_placement.py asks for: the engine sees every
#: request at its send; the value is added to each request's TTFT and E2E afterwards, and a closed loop's
#: clients wait for it: its throughputs shrink by mean E2E / (mean E2E + value)). Why it exists (branch
#: ttft, issue 38): on a closed loop with fixed lengths the in-loop delay moves requests across step
#: boundaries, so its TTFT moves in whole prefill steps (Red Hat vLLM 0.9.2 TP4 H200 70B FP8, C=60: median
#: TTFT 849 ms with 0-10 ms, 1,299 ms with 25 ms, 1,735 ms with 50 ms; measured 826 ms): a held-out front
#: end a few ms too long costs whole steps. "additive" is not a physical model: a real closed-loop client
#: cannot send before it has the last token, so the engine does see its next request that much later, as
#: "in_loop" replays it (the RHAIIS 3.2.0 curve's 56 ms higher unloaded TTFT with the same loaded median is
#: no evidence either way: that build's TP4 steps are 2.5x slow, calibrate/serving/anomaly.py). An explicit
#: argument, not an environment variable, so that no production replay can be switched from outside.
FRONT_END_PLACEMENTS = ("in_loop", "additive")


def _placement(front_end: str) -> str:
    if front_end not in FRONT_END_PLACEMENTS:
        raise ValueError(f"front_end must be one of {', '.join(FRONT_END_PLACEMENTS)}, got {front_end!r}")
    return front_end


def _additive_front_end(point: LoadPoint, params: dict, cache: Cache | None,
                        efficiency_overrides: dict | None = None) -> dict:
    """`replay` with the front-end latency added after the run ("additive", see FRONT_END_PLACEMENTS)."""
    d = float(params.get("request_overhead_ms") or 0.0)
    out = dict(replay(point, {**params, "request_overhead_ms": 0.0}, cache,
                      efficiency_overrides=efficiency_overrides))
    if "error" in out or d <= 0:
        return out
    for k in list(out):
        if k.startswith(("ttft_ms|", "e2el_ms|")):
            out[k] = out[k] + d
    e2e = out.get("e2el_ms|mean")
    if point.load_kind == "concurrency" and e2e:
        f = (e2e - d) / e2e  # the clients' cycle: E2E before the front end -> after it
        for k in ("output_tps|value", "total_tps|value", "request_tps|value"):
            if k in out:
                out[k] = out[k] * f
    return out


def point_workload(point: LoadPoint):
    """The requests a load point's client sends (sim.bench.serve.Workload): its prompt and output lengths, send
    times and the prompt prefix every request shares (a fixed prompt's, rows.shared_prefix)."""
    from sim.bench.serve import Workload

    return Workload(np.array(point.prompt_lens), np.array(point.output_lens), np.array(point.release_s),
                    prefix_tokens=point.shared_prefix_tokens)


def point_deployment(point: LoadPoint, params: dict | None = None, efficiency_overrides: dict | None = None):
    """The deployment a load point is replayed on (sim.bench.serve.Deployment): its device, model, quantization
    and engine release, with the point's engine overrides and then `params` (the fit's candidate) laid over them."""
    from sim.bench.serve import Deployment

    return Deployment(hw=point.device, model=point.model, quant=point.quant, engine=point.engine,
                      overrides={**point.overrides, **(params or {})}, efficiency_overrides=efficiency_overrides or None)


def replay(point: LoadPoint, params: dict | None = None, cache: Cache | None = None, *,
           front_end: str = "in_loop", efficiency_overrides: dict | None = None) -> dict:
    """{"quantity|statistic": predicted} for one load point with engine overrides `params` added;
    `front_end`: where the front-end latency is charged (FRONT_END_PLACEMENTS; "additive" is a diagnostic);
    `efficiency_overrides`: fields of the device profile's efficiency entry that the point's engine is priced
    with, replaced for this replay (`sim.catalog.hardware.with_efficiency_fields`, e.g. {"per_sequence_ms":
    0.0}: the profile's fitted per-sequence cost removed, the engine preset's own kept). A diagnostic's
    what-if (benchmarks/amd_step_variants.py); the serving fit never passes it. None (the default): the
    profile as shipped, and the replay and its cache key are what they were before the argument existed."""
    if _placement(front_end) == "additive" and (params or {}).get("request_overhead_ms"):
        return _additive_front_end(point, params, cache, efficiency_overrides)
    k = cache_key(point, params, efficiency_overrides)
    if cache is not None and cache.get(k) is not None:
        return cache.get(k)
    from sim.bench.serve import ServeClient, run_client

    n = len(point.prompt_lens)
    client = ServeClient(num_prompts=n, request_rate=math.inf if point.load_kind == "concurrency" else point.load,
                         max_concurrency=point.max_concurrency, random_input_len=1, random_output_len=1,
                         percentile_metrics=("ttft", "tpot", "itl", "e2el"), metric_percentiles=(50.0, 90.0, 95.0, 99.0))
    wl, dep = point_workload(point), point_deployment(point, params, efficiency_overrides)
    try:
        res = run_client(client, dep, workload=wl, date="serving-fit", per_request=False)  # (only statistics read)
    except Exception as e:  # noqa: BLE001 - a deployment the simulator refuses (does not fit, bad TP): recorded
        out = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
        if cache is not None:
            cache.put(k, out)
        return out
    out = {}
    for q in ("ttft", "tpot", "itl", "e2el"):
        for stat, key in (("mean", f"mean_{q}_ms"), ("median", f"median_{q}_ms"), ("p90", f"p90_{q}_ms"),
                          ("p95", f"p95_{q}_ms"), ("p99", f"p99_{q}_ms")):
            if key in res and res[key] is not None:
                out[f"{q}_ms|{stat}"] = float(res[key])
    out["output_tps|value"] = float(res["output_throughput"])
    out["total_tps|value"] = float(res["total_token_throughput"])
    out["request_tps|value"] = float(res["request_throughput"])
    if res.get("mean_tpot_ms"):
        out["tps_per_user|value"] = 1000.0 / float(res["mean_tpot_ms"])
    out["completed"] = int(res.get("completed", n))
    if cache is not None:
        cache.put(k, out)
    return out


def _replay_uncached(args: tuple) -> dict:
    point, params = args
    return replay(point, params, None)


def prefetch(pairs: list[tuple[LoadPoint, dict]], cache: Cache, jobs: int, *, front_end: str = "in_loop") -> int:
    """Fill `cache` with `replay(point, params, front_end=front_end)` for every pair not yet in it, in `jobs`
    worker processes.
    The results are those of a one-process run (each replay is a pure function of its point, parameters and
    the tree), so the fit reads the same numbers; only the wall time changes. Returns the replays run."""
    todo, keys, seen = [], [], set()
    for point, params in pairs:
        if _placement(front_end) == "additive" and (params or {}).get("request_overhead_ms"):
            params = {**params, "request_overhead_ms": 0.0}  # what an additive replay runs (never cached as in-loop)
        k = cache_key(point, params)
        if cache.get(k) is None and k not in seen:
            todo.append((point, params))
            keys.append(k)
            seen.add(k)
    if not todo:
        return 0
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        for k, out in zip(keys, pool.imap(_replay_uncached, todo, chunksize=2)):
            cache.put(k, out)
    return len(todo)
