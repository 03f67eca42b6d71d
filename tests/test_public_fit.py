"""The public-measurement corpus, the fit of the cost model to it, and the error bands it ships."""

from __future__ import annotations

import csv
import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from calibrate.public_corpus import (
    COLUMNS,
    MICROBENCH_COLUMNS,
    MICROBENCH_FILE,
    MicroRow,
    default_corpus_dir,
    load_corpus,
    load_microbench,
)
from calibrate import public_fit as pf
from calibrate.public_fit import (
    GroupParams,
    cost_params,
    fit_group,
    predict,
    prepare,
    _tier,
    device_package,
    row_shape,
    transfer,
)
from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import load_profile
from sim.catalog.lookup import get_model
from sim.catalog.quant import kernel_class
from sim.cli import app
from sim.cost.params import CostParams
from sim.cost.roofline import CostModel

ROOT = Path(__file__).resolve().parent.parent
CHAT = ROOT / "workloads" / "examples" / "chat.jsonl"
runner = CliRunner()


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def test_corpus_loads_and_every_row_cites_a_source(corpus):
    assert len(corpus) >= 150
    for r in corpus:
        assert r.source.startswith(("http://", "https://", "repo:")), r.row_id
        if r.source.startswith("repo:"):  # timed here: the committed raw log holds the printed figure
            assert r.extra["as_printed"].strip() in (ROOT / r.source[len("repo:"):]).read_text(), r.row_id
        assert r.extra["as_printed"].strip(), r.row_id
        assert r.value > 0
    assert len({r.device for r in corpus}) >= 12
    assert len({r.engine for r in corpus}) >= 4
    # batched / concurrent rows, not only single stream
    assert sum(r.metric in ("batched", "serving", "offline") and (r.batch or 0) > 1 for r in corpus) >= 50


def _write_corpus(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "rows.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow(r)
    return path


def _good_row(**kw) -> dict:
    row = {c: "" for c in COLUMNS}
    row.update(row_id="t-1", source="https://example.org/bench", engine="llama.cpp", device="rtx-4090", n_devices="1",
               model="llama-3.1-8b", quant="q4_k_m", metric="tg", batch="1", input_tokens="0", output_tokens="128",
               depth="0", quantity="decode_tps", value="120.5", as_printed="| tg128 | 120.50 |")
    row.update(kw)
    return row


def test_a_row_set_aside_is_kept_listed_with_its_reason_and_not_fitted(tmp_path):
    """A row whose notes say "Set aside: <why>." loads, is not fitted, and the report gives its reason;
    the shipped corpus's set-aside rows (llama.cpp PR tables of 2025-26 builds, round 14) all say why."""
    folder = tmp_path / "corpus"
    _write_corpus(folder, [_good_row(), _good_row(row_id="t-2", notes="Set aside: a regime the fit cannot follow. More.")])
    prepared = pf.prepare(load_corpus(folder))
    assert [p.shape is not None for p in prepared] == [True, False]
    assert prepared[1].excluded == "set aside: a regime the fit cannot follow"
    shipped = [p for p in pf.prepare(load_corpus(default_corpus_dir())) if p.excluded.startswith("set aside:")]
    assert len(shipped) >= 84 and all(len(p.excluded) > len("set aside: ") + 20 for p in shipped)


@pytest.mark.parametrize("field,value,problem", [
    ("device", "rtx-9999", "not a shipped hardware profile"),
    ("value", "fast", "expected a number"),
    ("batch", "two", "expected a whole number"),
    ("quantity", "ttft_ms", "cannot report"),
    ("source", "a friend told me", "must be a URL"),
    ("source", "repo:benchmarks/gpu/no-such-run/missing.log", "does not exist"),
    ("model", "llama-9-1t", "not in the model catalog"),
])
def test_a_bad_corpus_row_is_one_line_naming_file_line_and_field(tmp_path, field, value, problem):
    path = _write_corpus(tmp_path / "corpus", [_good_row(row_id="ok"), _good_row(row_id="bad", **{field: value})])
    _assert_one_line_error(path.parent, f"{path}:3", field, problem)


def test_a_row_measured_here_cites_its_committed_log(tmp_path):
    """Rows timed with this repository's scripts on a lent machine cite the raw log by `repo:<path>`."""
    log = "repo:benchmarks/gpu/h200-2026-12-04/h200_llamacpp.log"
    path = _write_corpus(tmp_path / "corpus", [_good_row(row_id="here", source=log)])
    assert [r.source for r in load_corpus(path.parent)] == [log]


def _assert_one_line_error(corpus_dir, where: str, field: str, problem: str) -> None:
    """`calibrate --public` on `corpus_dir` exits 2 with one line naming `where` (file:line), the field and the problem."""
    res = runner.invoke(app, ["calibrate", "--public", "--dry-run", "--corpus", str(corpus_dir)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    assert where in lines[0] and field in lines[0] and problem in lines[0]
    assert "Traceback" not in res.output


def test_duplicate_row_ids_are_refused(tmp_path):
    path = _write_corpus(tmp_path / "c", [_good_row(), _good_row()])
    res = runner.invoke(app, ["calibrate", "--public", "--dry-run", "--corpus", str(path.parent)])
    assert res.exit_code == 2 and "duplicate row_id" in res.output and "row_id" in res.output


def _synthetic_rows(truth: GroupParams, ubatches: tuple[int, ...] = ()):
    """Rows of the kinds the corpus holds (pp, tg, batched decode and prefill) on `truth.device`
    (rtx-4090 in most tests) whose values are what `truth` predicts: the fit must find `truth` again.
    `ubatches`: also pp512 at these physical batches (llama-bench -ub), whose GEMMs run that many rows."""
    base = _good_row()
    rows, i = [], 0
    for model, quant in (("llama-3.1-8b", "q4_k_m"), ("llama-3.1-8b", "fp16"), ("qwen2.5-7b", "q8_0"),
                         ("mistral-7b-v0.3", "q4_k_m")):
        for metric, b, isl, osl, depth, quantity, settings in (
            ("pp", 1, 512, 0, 0, "prompt_tps", ""), ("pp", 1, 4096, 0, 0, "prompt_tps", ""),
            ("tg", 1, 0, 128, 0, "decode_tps", ""), ("tg", 1, 0, 128, 4096, "decode_tps", ""),
            ("batched", 8, 512, 64, 0, "decode_tps", ""), ("batched", 32, 512, 64, 0, "decode_tps", ""),
            ("batched", 4, 512, 64, 0, "prompt_tps", ""),
            *(("pp", 1, 512, 0, 0, "prompt_tps", f"ub={u}") for u in ubatches),
        ):
            i += 1
            rec = {**base, "row_id": f"s{i}", "model": model, "quant": quant, "metric": metric, "batch": str(b),
                   "input_tokens": str(isl), "output_tokens": str(osl), "depth": str(depth), "quantity": quantity,
                   "value": "1", "source": f"https://example.org/{i % 3}", "settings": settings}
            from calibrate.public_corpus import parse_row

            rec["device"], rec["backend"] = truth.device, "metal" if truth.device.startswith("apple") else "cuda"
            r = parse_row(rec, file="synthetic", line=i, devices={truth.device}, models={model})
            rows.append(r)
    prepared = prepare(rows)
    out = []
    for it in prepared:
        assert it.shape is not None, it.excluded
        out.append(replace(it, row=replace(it.row, value=predict(it.row, it.shape, truth))))
    return out


# the parameters synthetic rows are generated from (`_synthetic_rows`), and their fit, shared by the tests
TRUTH_4090 = GroupParams("rtx-4090", "ggml", bandwidth={"gguf": 0.62, "f16": 0.81}, compute={"gguf": 0.18, "f16": 0.7},
                         attention=0.2, floor_ms=0.9, seq_ms=0.0, half_rows=0.0)


@pytest.fixture(scope="module")
def synthetic_fit():
    """(rows generated from TRUTH_4090, their fit)."""
    items = _synthetic_rows(TRUTH_4090)
    return items, fit_group(items, "rtx-4090", "ggml")


def test_the_fit_recovers_known_parameters_from_synthetic_rows(synthetic_fit):
    items, got = synthetic_fit
    assert got.bandwidth["gguf"] == pytest.approx(0.62, rel=0.03)
    assert got.bandwidth["f16"] == pytest.approx(0.81, rel=0.03)
    assert got.compute["gguf"] == pytest.approx(0.18, rel=0.05)
    assert got.compute["f16"] == pytest.approx(0.7, rel=0.05)
    assert got.floor_ms == pytest.approx(0.9, abs=0.1)
    errs = [predict(it.row, it.shape, got) / it.row.value - 1 for it in items]
    assert max(abs(e) for e in errs) < 0.02


def test_the_kquant_matvec_cost_on_apple_gpus_is_found_again_from_synthetic_rows():
    """Rows two Macs would give if llama.cpp's Metal K-quant mat-vec kernels spent 32 FLOP per weight at
    the fp32 rate (their Q4_K_M decodes then follow the GPUs' ALU rates, not their bandwidths):
    `fit_matvec_alu` picks 32 from its grid, and leaves it set on the corpus for the profiles."""
    items, truths = [], {}
    for device, bw in (("apple-m1-max", 0.75), ("apple-m3-max", 0.8)):
        truths[device] = GroupParams(device, "ggml", bandwidth={"gguf": bw, "f16": bw},
                                     compute={"gguf": 0.6, "f16": 0.7}, attention=0.3, floor_ms=1.0, seq_ms=0.0,
                                     half_rows=0.0, kquant_matvec_flops=32.0)
        items += _synthetic_rows(truths[device])
    # the K-quant decodes are ALU-bound in this truth: without the roof the same efficiencies
    # decode the M1 Max's Q4_K_M more than 20% faster than its rows say
    tg = next(it for it in items if it.row.device == "apple-m1-max" and it.row.quant == "q4_k_m"
              and it.row.metric == "tg" and not it.row.depth)
    assert predict(tg.row, tg.shape, replace(truths["apple-m1-max"], kquant_matvec_flops=None)) > 1.2 * tg.row.value
    corpus = pf.PublicCorpus()
    got = pf.fit_matvec_alu(items, corpus)
    assert got["flops_per_weight"] == 32.0 and corpus.kquant_matvec_flops == 32.0
    # the groups fitted with that corpus carry it into their profile entries; others do not
    assert fit_group(items[:len(items) // 2], "apple-m1-max", "ggml", corpus).efficiency.kquant_matvec_flops_per_weight == 32.0
    assert pf.PublicCorpus().matvec_flops_for("apple-m1-max", "ggml") is None
    assert corpus.matvec_flops_for("h200", "ggml") is None and corpus.matvec_flops_for("apple-m1-max", "mlx") is None
    assert got["devices"] == ["apple-m1-max", "apple-m3-max"]
    assert min(got["loss_by_value"].values()) == got["loss_by_value"]["32"] < got["loss_by_value"]["0"]


def test_the_fit_says_which_efficiencies_its_rows_pinned_and_a_transfer_prefers_those(synthetic_fit):
    """Decode rows alone pin the bandwidth, not the matmul efficiency (left at the prior): such a donor's
    matmul efficiency counts UNPINNED_TIERS further in a transfer than one that prompts pinned."""
    items, full = synthetic_fit
    assert {"bandwidth:gguf", "compute:gguf", "bandwidth:f16", "compute:f16"} <= full.pinned
    decode = fit_group([it for it in items if it.row.metric == "tg"], "rtx-4090", "ggml")
    assert "bandwidth:gguf" in decode.pinned and "compute:gguf" not in decode.pinned
    # decodes 3x faster than the datasheet bandwidth allows: the fit stops at its bound, 1.0, which
    # the bound set, not the rows
    fast = fit_group([replace(it, row=replace(it.row, value=3.0 * it.row.value)) for it in items
                      if it.row.metric == "tg" and it.row.quant == "q4_k_m"], "rtx-4090", "ggml")
    assert fast.bandwidth["gguf"] == pytest.approx(1.0, abs=1e-5) and "bandwidth:gguf" not in fast.pinned
    # the L40S (tier 0 for an RTX 4090) measured decode only; the RTX 3090 (tier 1) also prompts
    fits = {("l40s", "ggml"): replace(decode, device="l40s", compute={"gguf": 0.05, "f16": 0.05}),
            ("rtx-3090", "ggml"): replace(full, device="rtx-3090")}
    got = pf.transfer("rtx-4090", "ggml", fits)
    # both now one tier away for the matmul side: a sqrt(rows)-weighted geometric mean of 0.05 and the
    # RTX 3090's fitted value (0.18 in the truth)
    w_l, w_3 = math.sqrt(len(decode.rows)), math.sqrt(len(full.rows))
    c3 = full.compute["gguf"]
    assert c3 == pytest.approx(0.18, rel=0.05)
    assert got.compute["gguf"] == pytest.approx(math.exp((w_l * math.log(0.05) + w_3 * math.log(c3)) / (w_l + w_3)),
                                                rel=1e-3)
    # the bandwidth both pinned: the L40S, tier 0, decides
    assert got.bandwidth["gguf"] == pytest.approx(decode.bandwidth["gguf"] * pf.bandwidth_anchor("rtx-4090", "l40s"),
                                                  rel=1e-3)


def test_a_gemm_start_up_the_rows_left_at_its_bound_is_lent_as_unpinned(corpus):
    """Prompts at physical batches of 8-64 tokens run GEMMs of that many rows: rows from a truth with a
    32-row start-up find it again and pin it. The M1 Max's corpus rows (dense pp512 / tg128) push it
    to its bound 0, which the bound set, not the rows: not pinned. In a transfer the pinned donor's
    start-up then decides, where by rows alone the two would average."""
    slow = fit_group(_synthetic_rows(replace(TRUTH_4090, half_rows=32.0), ubatches=(8, 16, 64)), "rtx-4090", "ggml")
    assert slow.half_rows == pytest.approx(32.0, rel=0.05) and "half_rows" in slow.pinned
    real = [it for it in prepare([r for r in corpus if r.device == "apple-m1-max"])
            if it.family == "ggml" and it.shape is not None]
    flat = fit_group(real, "apple-m1-max", "ggml")
    assert flat.half_rows == pytest.approx(0.0, abs=1e-6) and "half_rows" not in flat.pinned
    assert "bandwidth:gguf" in flat.pinned  # the rule is about the start-up, not the whole fit
    fits = {("l40s", "ggml"): replace(flat, device="l40s", spread=slow.spread, rows=slow.rows),
            ("rtx-3090", "ggml"): replace(slow, device="rtx-3090")}
    assert pf._tier("rtx-5090", "l40s") == pf._tier("rtx-5090", "rtx-3090")  # NVIDIA, GDDR: one tier
    got = pf.transfer("rtx-5090", "ggml", fits)
    # the 0 counts TIER_DECAY ** UNPINNED_TIERS as much as the 32
    w = pf.TIER_DECAY ** pf.UNPINNED_TIERS
    assert got.half_rows == pytest.approx(slow.half_rows / (1 + w), rel=1e-6)
    # a hand-made group (no fit, pinned None) counts its start-up as measured
    assert pf.GroupParams("h200", "ggml", {}, {}, 0.3, 0.0).pins("half_rows")


def test_a_donor_whose_rows_the_model_follows_poorly_counts_less_in_a_transfer(synthetic_fit):
    """`GroupParams.spread` is the median |log(predicted / measured)| of a fit; a transfer weighs each
    donor by (ROW_SIGMA / max(spread, SPREAD_FLOOR)) ** SPREAD_POWER on top of sqrt(rows)."""
    items, clean = synthetic_fit
    # the same rows, alternately 40% fast and slow: no parameters follow them
    noisy = fit_group([replace(it, row=replace(it.row, value=it.row.value * (1.4 if i % 2 else 1 / 1.4)))
                       for i, it in enumerate(items)], "rtx-4090", "ggml")
    assert clean.spread < 0.01 and noisy.spread > 2 * pf.ROW_SIGMA
    assert "bandwidth:gguf" in noisy.pinned
    # an RTX 5090 held out: the L40S and the RTX 4090 are both one tier away (NVIDIA, GDDR)
    assert pf._tier("rtx-5090", "l40s", "memory") == pf._tier("rtx-5090", "rtx-4090", "memory")
    fits = {("l40s", "ggml"): replace(clean, device="l40s", bandwidth={"gguf": 0.5, "f16": 0.8}),
            ("rtx-4090", "ggml"): replace(noisy, device="rtx-4090", bandwidth={"gguf": 0.8, "f16": 0.8})}
    got = pf.transfer("rtx-5090", "ggml", fits)

    def w(g):
        return math.sqrt(len(g.rows)) * (pf.ROW_SIGMA / max(g.spread, pf.SPREAD_FLOOR)) ** pf.SPREAD_POWER

    logs = [(w(g), math.log(g.bandwidth["gguf"] * pf.bandwidth_anchor("rtx-5090", g.device))) for g in fits.values()]
    assert got.bandwidth["gguf"] == pytest.approx(math.exp(sum(a * b for a, b in logs) / sum(a for a, _ in logs)),
                                                  rel=1e-6)
    # the clean donor's 0.5 decides: with equal trust the two would meet near sqrt(0.5 x 0.8) = 0.63
    assert got.bandwidth["gguf"] < 0.52
    # a fit cannot be more precise than its rows' scatter: two donors whose fits follow their rows within
    # ROW_SIGMA count alike (by their rows alone), however much closer one of them follows
    close = replace(noisy, device="rtx-4090", bandwidth={"gguf": 0.8, "f16": 0.8}, spread=0.6 * pf.ROW_SIGMA)
    fits[("rtx-4090", "ggml")] = close
    assert pf.transfer("rtx-5090", "ggml", fits).bandwidth["gguf"] == pytest.approx(math.sqrt(0.5 * 0.8), rel=1e-6)


def test_fit_and_simulator_price_a_fitted_profile_alike():
    """What the fit optimised (public_fit.cost_params) is what the simulator runs (CostParams.from_profile)."""
    for device, engine, quant in (("rtx-4090", "llama.cpp", "q4_k_m"), ("h100-sxm", "trtllm", "fp8"),
                                  ("dgx-spark", "ollama", "mxfp4"), ("apple-m3-max", "mlx", "mlx-4bit"),
                                  ("apple-m1-max", "llama.cpp", "q4_k_m")):
        hw = load_profile(device)
        eng = load_engine(engine).for_hardware(hw)
        fam = eng.kernel_family
        e = hw.engine_efficiency[fam]
        p = GroupParams(device, fam, dict(e.bandwidth_by_class), dict(e.compute_by_class), e.attention_of_peak,
                        e.floor_ms, e.per_sequence_ms, e.matmul_half_rows,
                        kquant_matvec_flops=e.kquant_matvec_flops_per_weight)
        q = get_model("llama-3.1-8b").quant(quant)
        assert CostParams.from_profile(hw, q, eng) == cost_params(hw, eng, q, p), (device, engine)


def test_fit_and_simulator_hold_a_model_alike():
    """The fit's replay (`_objects`) holds a model's weights as the simulator's engine loads them: the
    catalog's GGUF sizes for llama.cpp, the released checkpoint's bytes for vLLM (gpt-oss-120b MXFP4:
    63.4 GB as GGUF, 65.2 GB as released)."""
    from sim.cost.roofline import CostModel

    for engine in ("llama.cpp", "vllm"):
        fit_cm = pf._objects("dgx-spark", engine, "gpt-oss-120b", "mxfp4", 1)[4]
        sim_cm = CostModel.from_names("gpt-oss-120b", "mxfp4", "dgx-spark", engine)
        assert fit_cm.weight_bytes_read(1) == pytest.approx(sim_cm.weight_bytes_read(1)), engine
    gguf = pf._objects("dgx-spark", "llama.cpp", "gpt-oss-120b", "mxfp4", 1)[2].weight_bytes("mxfp4")
    released = pf._objects("dgx-spark", "vllm", "gpt-oss-120b", "mxfp4", 1)[2].weight_bytes("mxfp4")
    assert gguf == pytest.approx(63.37e9, rel=1e-3) and released == pytest.approx(65.2e9, rel=2e-3)


def microbench(rows) -> pf.PublicCorpus:
    """A corpus whose transfer anchors are these micro-benchmark rows (no corpus: the shipped file's)."""
    return pf.PublicCorpus(micro=list(rows))


def test_an_unmeasured_device_borrows_from_its_nearest_architecture():
    datasheet = microbench([])  # the datasheet anchor
    fits = {(d, "ggml"): GroupParams(d, "ggml", {"gguf": bw}, {"gguf": c}, 0.2, 1.0, rows=["r"] * 10,
                                     seen_classes=("gguf",))
            for d, bw, c in (("a100-80g", 0.5, 0.15), ("rtx-4090", 0.7, 0.17), ("apple-m3-max", 0.7, 0.7))}
    p = transfer("a100-40g", "ggml", fits, corpus=datasheet)
    assert p.transferred_from == ["a100-80g"]
    assert p.bandwidth["gguf"] == pytest.approx(0.5, rel=0.05)
    assert transfer("a100-40g", "trtllm", fits, corpus=datasheet) is None


def test_an_apple_chips_package_is_a_profile_field_not_its_name(tmp_path):
    """The memory side of a transfer pools Apple chips by package (Max with Max, Ultra with Ultra):
    what decides it is the profile's `package` field, so a user's profile named anything keeps it."""
    from sim.catalog.hardware import profile_path
    from sim.errors import ConfigError

    text = profile_path("apple-m2-ultra").read_text()
    mine = tmp_path / "studio-192.yaml"
    mine.write_text(text.replace("name: apple-m2-ultra", "name: studio-192"))
    assert device_package(str(mine)) == "ultra"
    assert _tier(str(mine), "apple-m1-ultra", "memory") == 0      # same package, other generation
    assert _tier(str(mine), "apple-m2-max", "memory") == 1        # same generation, other package
    unpackaged = tmp_path / "studio-unknown.yaml"
    unpackaged.write_text("\n".join(line for line in text.replace("name: apple-m2-ultra", "name: studio-unknown")
                                     .splitlines() if not line.startswith("package:")))
    assert device_package(str(unpackaged)) == ""
    assert _tier(str(unpackaged), "apple-m2-max", "memory") == 0  # no package: the generation decides
    assert {device_package(d) for d in ("h100-sxm", "dgx-spark", "rtx-4090")} == {""}
    bad = tmp_path / "studio-bad.yaml"
    bad.write_text(text.replace("package: ultra", "package: huge"))
    with pytest.raises(ConfigError):
        device_package(str(bad))


def test_a_launch_floor_does_not_cross_vendors():
    """The per-iteration floor is the engine's launch path on the vendor's runtime: a device takes it
    from devices of its own vendor, and with none its profile's own estimate."""
    datasheet = microbench([])
    fits = {(d, "torch"): GroupParams(d, "torch", {"f16": 0.7}, {"f16": 0.4}, 0.3, floor, seq_ms=seq,
                                      rows=["r"] * 10, seen_classes=("f16",))
            for d, floor, seq in (("h100-sxm", 2.0, 0.01), ("a100-80g", 4.0, 0.02), ("mi300x", 0.0, 0.08))}
    amd = transfer("mi300x", "torch", {k: v for k, v in fits.items() if k[0] != "mi300x"}, corpus=datasheet)
    mi300x = load_profile("mi300x")
    assert (amd.floor_ms, amd.seq_ms) == (mi300x.iteration_overhead_ms, mi300x.per_sequence_overhead_ms)
    nvidia = transfer("h200", "torch", fits, corpus=datasheet)
    assert 2.0 <= nvidia.floor_ms <= 4.0 and 0.01 <= nvidia.seq_ms <= 0.02  # the MI300X's 0 / 0.08 left out


def test_a_transfer_compares_devices_by_the_peak_their_kernels_can_reach():
    """llama.cpp's fp16 GEMMs accumulate in fp16, which a GeForce card runs at twice the fp32-accumulate
    peak its profile quotes; its flash-attention kernel accumulates half its FLOPs in fp32 (KQ) and
    half in fp16 (VKQ), so 4/3 of that peak; its MMQ kernels reach about half of Hopper's wgmma-only
    int8 peak. A transfer carries the share of that achievable peak, not of the datasheet's."""
    from calibrate.public_fit import ATTENTION_CLASS, achievable_share

    assert achievable_share("rtx-4090", "ggml", "f16") == 2.0
    assert achievable_share("rtx-4090", "ggml", ATTENTION_CLASS) == pytest.approx(4 / 3)
    assert achievable_share("dgx-spark", "ggml", ATTENTION_CLASS) == 1.0
    assert achievable_share("l40s", "ggml", "f16") == 1.0
    assert achievable_share("h100-sxm", "ggml", "gguf") == 0.5
    assert achievable_share("h100-sxm", "trtllm", "fp8") == 1.0
    fits = {("l40s", "ggml"): GroupParams("l40s", "ggml", {"f16": 0.8}, {"f16": 0.4}, 0.2, 1.0, rows=["r"] * 10,
                                          seen_classes=("f16",)),
            ("a100-80g", "ggml"): GroupParams("a100-80g", "ggml", {"gguf": 0.5}, {"gguf": 0.16}, 0.2, 1.0,
                                              rows=["r"] * 10, seen_classes=("gguf",))}
    # same generation and memory class: the 4090 borrows the L40S's share of its fp16-accumulate peak
    # for the weight GEMMs, and of its mixed-accumulate peak (4/3) for attention
    to_4090 = transfer("rtx-4090", "ggml", fits)
    assert to_4090.compute["f16"] == pytest.approx(0.8)
    assert to_4090.attention == pytest.approx(4 / 3 * 0.2)
    # and back: the L40S reads a 4090's attention as 3/4 of its datasheet share
    back = transfer("l40s", "ggml", {("rtx-4090", "ggml"): replace(fits[("l40s", "ggml")], device="rtx-4090")})
    assert back.attention == pytest.approx(0.2 * 3 / 4)
    # an H100 borrows the A100's share of the int8 rate MMQ reaches, half of Hopper's datasheet rate
    assert transfer("h100-sxm", "ggml", fits).compute["gguf"] == pytest.approx(0.08)


def test_microbenchmarks_load_and_every_row_cites_a_source():
    rows = load_microbench()
    assert len(rows) >= 20
    for r in rows:
        assert r.source.startswith(("http://", "https://")) and r.value > 0, (r.file, r.line)
    from calibrate.public_fit import ANCHOR_KERNEL, bandwidth_shares

    anchored = {r.device for r in rows if ANCHOR_KERNEL.get(r.benchmark) == r.kernel}
    assert len(anchored) >= 10
    for d in anchored:  # a stream kernel reaches most of the datasheet bandwidth, never more
        assert all(0.5 < s <= 1.0 for s in bandwidth_shares(d).values()), (d, bandwidth_shares(d))


def _write_microbench(folder: Path, rows: list[dict]) -> Path:
    path = folder / MICROBENCH_FILE
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=MICROBENCH_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in MICROBENCH_COLUMNS})
    return path


def _micro_row(**kw) -> dict:
    row = dict(device="rtx-4090", benchmark="torch-copy", kernel="copy", quantity="memory_bandwidth", value="912",
               unit="GB/s", as_printed="| Nvidia 4090 | 912 |", source="https://example.org/bench")
    row.update(kw)
    return row


@pytest.mark.parametrize("field,value,problem", [
    ("device", "rtx-9999", "not a shipped hardware profile"),
    ("value", "fast", "expected a number"),
    ("unit", "TB/s", "is in GB/s"),
    ("quantity", "latency", "unknown quantity"),
    ("source", "a friend told me", "must be a URL"),
    ("as_printed", "", "is required"),
])
def test_a_bad_microbenchmark_row_is_one_line_naming_file_line_and_field(tmp_path, field, value, problem):
    folder = tmp_path / "corpus"
    _write_corpus(folder, [_good_row()])
    path = _write_microbench(folder, [_micro_row(), _micro_row(kernel="other", **{field: value})])
    _assert_one_line_error(folder, f"{path}:3", field, problem)


def test_the_microbenchmark_file_is_not_read_as_corpus_rows(tmp_path):
    folder = tmp_path / "corpus"
    _write_corpus(folder, [_good_row()])
    _write_microbench(folder, [_micro_row(), _micro_row(device="rtx-3090", value="831")])
    assert [r.row_id for r in load_corpus(folder)] == ["t-1"]
    assert [r.device for r in load_microbench(folder / MICROBENCH_FILE)] == ["rtx-4090", "rtx-3090"]


def test_a_transfer_carries_the_share_of_a_microbenchmark_both_devices_ran():
    """Bandwidth efficiency travels as engine-achieved / micro-benchmark: a donor fitted at 0.5 of its
    datasheet whose copy kernel reaches 0.8 of it, to a target whose copy reaches 0.9 of its own,
    gives 0.5 x 0.9 / 0.8. A benchmark only one of them ran anchors nothing (the datasheet share)."""
    from calibrate.public_fit import bandwidth_anchor

    peak = {d: load_profile(d).memory_bandwidth_gb_per_s for d in ("a100-80g", "a100-40g")}
    fits = {("a100-80g", "ggml"): GroupParams("a100-80g", "ggml", {"gguf": 0.5}, {"gguf": 0.15}, 0.2, 1.0,
                                              rows=["r"] * 10, seen_classes=("gguf",))}
    both = microbench([
        MicroRow("a100-80g", "torch-copy", "copy", "memory_bandwidth", 0.8 * peak["a100-80g"], "https://x"),
        MicroRow("a100-40g", "torch-copy", "copy", "memory_bandwidth", 0.9 * peak["a100-40g"], "https://x"),
        MicroRow("a100-40g", "babelstream", "Copy", "memory_bandwidth", 0.7 * peak["a100-40g"], "https://x")])
    assert bandwidth_anchor("a100-40g", "a100-80g", both) == pytest.approx(0.9 / 0.8)
    assert transfer("a100-40g", "ggml", fits, corpus=both).bandwidth["gguf"] == pytest.approx(0.5 * 0.9 / 0.8)
    one = microbench([MicroRow("a100-40g", "torch-copy", "copy", "memory_bandwidth", 0.9 * peak["a100-40g"], "https://x")])
    assert transfer("a100-40g", "ggml", fits, corpus=one).bandwidth["gguf"] == pytest.approx(0.5)


def test_a_transferred_all_reduce_latency_is_a_multiple_of_the_targets_link():
    fits = {(d, "trtllm"): GroupParams(d, "trtllm", {"fp8": 0.7}, {"fp8": 0.5}, 0.1, 1.0, lat_us=lat, rows=["r"] * 10,
                                       seen_classes=("fp8",))
            for d, lat in (("h100-sxm", 15.0), ("h200", 15.0))}
    link = load_profile("l40s").interconnect_latency_us / load_profile("h100-sxm").interconnect_latency_us
    assert transfer("l40s", "trtllm", fits).lat_us == pytest.approx(15.0 * link)


def _torch_donor(device: str, floor_ms: float, lat_us: float, eager: bool) -> GroupParams:
    """A fitted vLLM/SGLang-family group of 10 fp8 rows with the given launch path."""
    return GroupParams(device, "torch", {"fp8": 0.7}, {"fp8": 0.5}, 0.3, floor_ms, lat_us=lat_us, rows=["r"] * 10,
                       seen_classes=("fp8",), eager=eager)


def test_with_no_graph_mode_donor_a_device_keeps_its_own_measured_all_reduce_latency():
    """No donor of the family ran with CUDA graphs: the all-reduce step latency is the device's own
    NCCL/RCCL micro-benchmark's (median over 1-8 KB of time / 2 (N - 1)), not the profile's
    engineering default; without that micro-benchmark, None (the profile's). Donors, when there are
    any, still decide (the micro-benchmark is no anchor between them)."""
    eager = _torch_donor("dgx-spark", 4.8, 12.0, True)
    times = (44.8, 51.2, 47.8, 49.4)  # the Azure ND MI300X v5 RCCL figures, 1K-8K
    rccl = microbench([MicroRow("mi300x", "rccl-tests", f"all_reduce 8 GPUs {k}K", "allreduce_time", t, "https://x")
                       for k, t in zip((1, 2, 4, 8), times)])
    assert pf.allreduce_step_latency_us("mi300x", rccl) == pytest.approx((47.8 + 49.4) / 2 / 14)
    assert transfer("mi300x", "torch", {("dgx-spark", "torch"): eager}, corpus=rccl).lat_us == pytest.approx(48.6 / 14)
    graph = _torch_donor("h100-sxm", 0.2, 2.0, False)
    link = load_profile("mi300x").interconnect_latency_us / load_profile("h100-sxm").interconnect_latency_us
    assert transfer("mi300x", "torch", {("h100-sxm", "torch"): graph}, corpus=rccl).lat_us == pytest.approx(2.0 * link)
    assert transfer("mi300x", "torch", {("dgx-spark", "torch"): eager}, corpus=microbench([])).lat_us is None
    # no corpus: the shipped file, measured for the Azure ND parts, 1.86 us on the H100
    assert pf.allreduce_step_latency_us("h100-sxm") == pytest.approx(26.05 / 14, rel=1e-3)
    assert pf.allreduce_step_latency_us("rtx-4090") is None


def test_an_all_reduce_micro_benchmark_names_its_device_count(tmp_path):
    folder = tmp_path / "corpus"
    _write_corpus(folder, [_good_row()])
    path = _write_microbench(folder, [_micro_row(), _micro_row(benchmark="nccl-tests", kernel="all_reduce 1K",
                                                                quantity="allreduce_time", unit="us", value="25.6")])
    _assert_one_line_error(folder, f"{path}:3", "kernel", "names its device count")


def test_eager_mode_donors_lend_no_floor_and_no_all_reduce_latency(corpus):
    """A donor whose rows all ran without CUDA graphs (enforce_eager) measured eager mode's launch path:
    a transfer takes the floor and the all-reduce latency from graph-mode donors, or else the profile's
    floor and the device's own measured collective latency (`allreduce_step_latency_us`)."""
    h100 = load_profile("h100-sxm")
    only_eager = transfer("h100-sxm", "torch", {("dgx-spark", "torch"): _torch_donor("dgx-spark", 4.8, 12.0, True)})
    assert only_eager.floor_ms == h100.iteration_overhead_ms
    assert only_eager.lat_us == pf.allreduce_step_latency_us("h100-sxm") != 12.0
    assert only_eager.lat_from_microbench  # the shipped profile's source text says where it came from
    both = transfer("h100-sxm", "torch", {("dgx-spark", "torch"): _torch_donor("dgx-spark", 4.8, 12.0, True),
                                          ("h200", "torch"): _torch_donor("h200", 0.4, 6.0, False)})
    assert both.floor_ms == pytest.approx(0.4) and both.lat_us == pytest.approx(6.0)
    assert not both.lat_from_microbench
    # the efficiencies still come from every donor
    assert only_eager.bandwidth["fp8"] == pytest.approx(0.7 * pf.bandwidth_anchor("h100-sxm", "dgx-spark"))
    # the shipped eager rows (kubis.ai's DGX Spark vLLM runs) say so in their settings, and only they do
    eager = [r for r in corpus if r.setting_flag("enforce_eager")]
    assert eager and {r.device for r in eager} == {"dgx-spark"} and all("kubis" in r.row_id for r in eager)


def test_a_rows_mxfp4_layers_setting_replays_the_checkpoint_it_names():
    """kubis.ai's vLLM image quantized gpt-oss-120b's attention and LM head to MXFP4 too
    (mxfp4_layers=moe,qkv,o,lm_head): a decode token reads ~2.7 GB, not the released 5.0 GB."""
    released = pf._objects("dgx-spark", "vllm", "gpt-oss-120b", "mxfp4", 1)[4]
    all_mx = pf._objects("dgx-spark", "vllm", "gpt-oss-120b", "mxfp4", 1, "", None, "moe,qkv,o,lm_head")[4]
    assert released.weight_bytes_read(1) == pytest.approx(5.0e9, rel=0.01)
    # attention 36 x 26.5M + LM head 201,088 x 2,880 at 4.25 bits (0.82 GB) + 4 experts x 36 layers (1.90 GB)
    assert all_mx.weight_bytes_read(1) == pytest.approx(2.72e9, rel=0.02)


def test_each_llama_cpp_row_is_replayed_with_the_flash_attention_it_ran(corpus):
    by_id = {r.row_id: r for r in corpus}
    # printed fa wins: this repository's H200 run of Llama 2 7B Q8_0 pp512 with -fa 0 and -fa 1
    off = [r for r in corpus if r.device == "h200" and r.settings.get("fa") == "0"]
    on = [r for r in corpus if r.device == "h200" and r.settings.get("fa") == "1"]
    assert off and on
    assert not any(pf.row_flash_attention(r) for r in off) and all(pf.row_flash_attention(r) for r in on)
    # no fa printed: a 2023-24 build ran without it (XiongjieDai's A100 table, build 2837), a current one with it
    old = [r for r in corpus if r.device == "a100-80g" and "2837" in r.engine_version]
    assert old and not any(pf.row_flash_attention(r) for r in old)
    unprinted = [r for r in corpus if pf.engine_family(r.engine, r.settings) == "ggml" and not r.settings.get("fa")]
    assert all(pf.row_flash_attention(r) == bool(pf.row_is_current(r)) for r in unprinted)
    # engines that always fuse attention
    assert all(pf.row_flash_attention(r) for r in corpus if r.engine in ("vllm", "trtllm", "sglang"))
    # the replay prices the scores of the unfused path: the same row runs slower with fa off
    row = next(r for r in off if r.metric == "pp")
    twin = replace(row, settings_text=row.settings_text.replace("fa=0", "fa=1"))
    assert pf._row_objects(row)[4].score_bytes_per_layer_key > 0
    assert pf._row_objects(twin)[4].score_bytes_per_layer_key == 0
    shape = row_shape(row)
    p = GroupParams("h200", "ggml", {"gguf": 0.8}, {"gguf": 0.1}, 0.2, 0.1, 0.0, 0.0, None)
    assert predict(row, shape, p) < predict(twin, shape, p)


def test_a_fit_that_says_nothing_about_attention_ships_the_rate_its_donors_measured():
    """Rows run without flash attention leave the fused kernel's rate at its prior: the shipped
    profile takes it from the donors whose rows pinned it; a group that measured it keeps its own."""
    def group(device, attention, info, pinned):
        g = GroupParams(device, "ggml", {"gguf": 0.8}, {"gguf": 0.15}, attention, 0.1, rows=["r"] * 20,
                        seen_classes=("gguf",), pinned=frozenset(pinned), spread=0.05)
        g.attention_info = info
        return g

    fits = {("l40s", "ggml"): group("l40s", 0.3, 0.0, {"bandwidth:gguf", "compute:gguf"}),
            ("rtx-4090", "ggml"): group("rtx-4090", 0.146, 50.0, {"attention", "bandwidth:gguf"}),
            ("h200", "ggml"): group("h200", 0.228, 8.0, {"bandwidth:gguf"})}
    shipped = pf.params_for("l40s", "ggml", fits)
    assert shipped.attention == pytest.approx(pf.transfer("l40s", "ggml", fits, era=1.0).attention)
    assert shipped.attention != pytest.approx(0.3) and shipped.attention_from == ["rtx-4090"]
    assert shipped.bandwidth == fits[("l40s", "ggml")].bandwidth  # only the attention is lent
    # information 8 (a standard deviation of 0.35 e-folds): the H200 keeps what its rows say
    assert pf.params_for("h200", "ggml", fits) is fits[("h200", "ggml")]
    # no donor pinned it: nothing better to lend
    alone = {k: v for k, v in fits.items() if k[0] != "rtx-4090"}
    assert pf.params_for("l40s", "ggml", alone).attention == 0.3
    # the lent value: the RTX 4090's share of the peak its attention kernel reaches (4/3 of its quoted
    # fp32-accumulate one: KQ accumulates in fp32, VKQ in fp16) on the L40S's
    assert pf.transfer("l40s", "ggml", fits, era=1.0).attention == pytest.approx(0.146 * 3 / 4, rel=1e-6)


def test_moe_experts_pay_their_start_up_per_touched_expert():
    moe, dense = get_model("qwen3-30b-a3b"), get_model("qwen2.5-7b")
    for spec in (moe, dense):
        cm = CostModel(spec, "q8_0", CostParams(1e12, 1e14, 1e14))
        t = np.array([1.0, 64.0, 2048.0])
        # without a start-up the experts are plain FLOPs x rows, as before
        assert np.allclose(cm._layer_matmul_flops(t, 0.0), cm.flops_per_token * t)
        with_half = cm._layer_matmul_flops(t, 64.0)
        if spec.is_moe:
            # a 2048-token prompt over 128 experts (top-8) costs far more than its FLOPs
            assert with_half[2] > 1.15 * cm.flops_per_token * 2048
        else:
            assert with_half[2] == pytest.approx(cm.flops_per_token * (2048 + 64))


def test_routing_skew_reads_fewer_experts_as_the_batch_grows_and_the_catalog_carries_it():
    from sim.cost.roofline import expected_distinct_experts

    t = np.array([1.0, 2.0, 32.0, 4096.0])
    uniform = expected_distinct_experts(128, 4, t)
    skewed = expected_distinct_experts(128, 4, t, 0.5)
    assert skewed[0] == pytest.approx(4.0) == uniform[0]
    assert skewed[2] < 0.75 * uniform[2] and skewed[3] == pytest.approx(64.0, rel=1e-6)
    assert np.array_equal(expected_distinct_experts(128, 4, t, 1.0), uniform)
    # the fitted fraction (sim/catalog/data/moe_routing.yaml) reaches the catalog's spec and the cost model
    spec = get_model("gpt-oss-120b")
    assert 0 < spec.expert_pool_fraction <= 1
    cm = CostModel(spec, "mxfp4", CostParams(1e12, 1e14, 1e14))
    assert cm.weight_bytes_read(32.0) == pytest.approx(
        cm.non_expert_bytes + expected_distinct_experts(128, 4, 32.0, spec.expert_pool_fraction) * cm.expert_bytes)


def test_run_json_carries_the_expected_error_band():
    res = runner.invoke(app, ["run", str(CHAT), "--hw", "rtx-4090", "--engine", "llama.cpp", "--model",
                              "llama-3.1-8b", "--json"])
    assert res.exit_code == 0, res.output
    start = res.stdout.index("{")
    err = json.loads(res.stdout[start:])["config"]["expected_error"]
    assert err["family"] == "ggml"
    assert err["figures"]["tpot"]["pct"] > 0 and err["figures"]["tpot"]["n"] >= 3
    assert "rtx-4090" in err["basis"]


@pytest.mark.parametrize("hw,old_builds,timed_here", [("a100-80g", True, False), ("h200", False, True)])
def test_the_band_says_when_a_fit_describes_older_llama_cpp_builds(hw, old_builds, timed_here):
    """A device fitted mostly on 2023-24 llama.cpp builds says so beside its band (today's decode faster);
    one fitted to rows timed with this repository's scripts (the lent H200) does not call them public."""
    res = runner.invoke(app, ["run", str(CHAT), "--hw", hw, "--engine", "llama.cpp", "--model", "llama-3.1-8b",
                              "--json"])
    assert res.exit_code == 0, res.output
    err = json.loads(res.stdout[res.stdout.index("{"):])["config"]["expected_error"]
    assert ("builds of 2023-24" in err["basis"]) is old_builds
    assert ("timed with this repository's benchmarks/gpu scripts" in err["basis"]) is timed_here
    assert ("public measurements" in err["basis"]) is not timed_here
    eff = load_profile(hw).engine_efficiency["ggml"]
    assert (eff.rows_timed_here == len(eff.corpus_rows)) is timed_here and (eff.rows_timed_here == 0) is not timed_here


def test_run_prints_the_band_and_says_when_a_device_has_no_data():
    res = runner.invoke(app, ["run", str(CHAT), "--hw", "l4", "--engine", "vllm", "--model", "llama-3.1-8b"])
    assert res.exit_code == 0, res.output
    assert "expected error:" in res.stdout and "no public data for torch kernels on l4: transferred from" in res.stdout
    res = runner.invoke(app, ["run", str(CHAT), "--hw", "cpu-x86-generic", "--engine", "llama.cpp", "--model",
                              "llama-3.1-8b", "--quant", "q4_k_m", "--json"])
    err = json.loads(res.stdout[res.stdout.index("{"):])["config"]["expected_error"]
    assert err["figures"] == {} and "no public measurements" in err["basis"]


def test_fit_and_plan_carry_the_band():
    res = runner.invoke(app, ["fit", "--hw", "dgx-spark", "--model", "llama-3.1-8b", "--json"])
    assert res.exit_code == 0, res.output
    bands = json.loads(res.stdout)["expected_error"]
    assert set(bands) >= {"llama.cpp"} and bands["llama.cpp"]["figures"]


def test_plan_json_carries_the_band_of_each_candidate():
    res = runner.invoke(app, ["plan", "--trace", str(CHAT), "--hw", "rtx-4090", "--engine", "vllm", "--quant", "fp8",
                              "--model", "llama-3.1-8b", "--ttft-p90", "2s", "--target-rps", "2", "--json"])
    assert res.exit_code == 0, res.output
    bands = json.loads(res.stdout[res.stdout.index("{"):])["expected_error"]
    assert list(bands) == ["rtx-4090 / vllm"]
    assert "transferred from" in bands["rtx-4090 / vllm"]["basis"]


def test_hw_show_lists_the_fitted_families():
    res = runner.invoke(app, ["hw", "show", "dgx-spark"], env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    assert "Fitted to public measurements" in res.stdout
    line = next(ln for ln in res.stdout.splitlines() if ln.strip().startswith("ggml"))
    assert str(len(load_profile("dgx-spark").engine_efficiency["ggml"].corpus_rows)) in line.split() and "gguf" in line


def test_calibrate_public_on_a_small_corpus_reports_held_out_error(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(default_corpus_dir() / "mlx.csv", corpus / "mlx.csv")
    report = tmp_path / "fidelity.md"
    res = runner.invoke(app, ["calibrate", "--public", "--dry-run", "--corpus", str(corpus), "--report", str(report),
                              "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout[res.stdout.index("{"):])
    assert out["replayed"] >= 40 and out["in_sample"]["all"]["median"] < 0.2
    text = report.read_text()
    assert "Leave-one-device-out" in text and "apple-m3-max" in text


def test_every_row_is_replayed_or_excluded_with_a_reason(corpus):
    for r in corpus[:200]:
        try:
            row_shape(r)
        except Exception as e:  # noqa: BLE001 - Excluded carries the reason
            assert type(e).__name__ == "Excluded" and str(e), r.row_id


def test_kernel_class_puts_mxfp4_under_ggml_with_the_gguf_kernels():
    q = get_model("gpt-oss-20b").quant("mxfp4")
    assert kernel_class(q, "ggml") == ("gguf", "int8")
    assert kernel_class(q, "torch") == ("fp4", "fp4")


def test_tensorrt_llms_moe_experts_are_a_weight_class_of_their_own():
    """A MoE model under TensorRT-LLM prices its GEMMs with the `<class>-moe` efficiency (the MoE
    plugin's grouped GEMMs), falling back to the format's class where a profile has none; llama.cpp's
    experts run its dense kernels (class gguf whatever the model)."""
    from sim.catalog.hardware import Efficiency
    from sim.catalog.quant import base_class

    fp8 = get_model("mixtral-8x7b").quant("fp8")
    assert kernel_class(fp8, "trtllm", moe=True) == ("fp8-moe", "fp8")
    assert kernel_class(fp8, "trtllm") == ("fp8", "fp8")
    assert kernel_class(get_model("qwen3-30b-a3b").quant("q8_0"), "ggml", moe=True) == ("gguf", "int8")
    assert base_class("fp8-moe") == "fp8" and base_class("gguf") == "gguf"
    e = Efficiency(compute=0.4, bandwidth=0.7, compute_by_class={"fp8": 0.5, "f16-moe": 0.3})
    assert (e.compute_for("fp8-moe"), e.compute_for("f16-moe"), e.compute_for("int8-moe")) == (0.5, 0.3, 0.4)
    # the shipped H100 SXM profile: Mixtral's GEMMs get the fitted MoE share, a dense model the dense one
    hw = load_profile("h100-sxm")
    eng = load_engine("trtllm").for_hardware(hw)
    fitted = hw.engine_efficiency["trtllm"].compute_by_class
    moe, dense = CostParams.from_profile(hw, fp8, eng, moe=True), CostParams.from_profile(hw, fp8, eng)
    assert moe.matmul_flops_per_s / dense.matmul_flops_per_s == pytest.approx(fitted["fp8-moe"] / fitted["fp8"])
    assert fitted["fp8-moe"] < fitted["fp8"]
    from sim.cost.roofline import CostModel

    assert CostModel.from_names("mixtral-8x7b", "fp8", "h100-sxm", "trtllm").params == moe
    assert CostModel.from_names("llama-3.1-8b", "fp8", "h100-sxm", "trtllm").params == dense


def test_the_fit_recovers_a_moe_class_apart_from_its_dense_class():
    """Synthetic TensorRT-LLM rows of a dense and a MoE model on one device, generated with the MoE
    grouped GEMMs at half the dense share: the fit finds both shares again."""
    from calibrate.public_corpus import parse_row

    truth = GroupParams("h100-sxm", "trtllm", bandwidth={"fp8": 0.8, "fp8-moe": 0.8},
                        compute={"fp8": 0.5, "fp8-moe": 0.25}, attention=0.35, floor_ms=0.1, seq_ms=0.0,
                        half_rows=0.0)
    rows, i = [], 0
    for model in ("llama-3.1-8b", "mixtral-8x7b"):
        for isl, osl in ((128, 128), (128, 2048), (2048, 128), (5000, 500), (500, 2000), (1000, 1000)):
            i += 1
            rec = {**_good_row(), "row_id": f"t{i}", "engine": "trtllm", "engine_version": "v0.13",
                   "backend": "cuda", "device": "h100-sxm", "model": model, "quant": "fp8", "metric": "offline",
                   "batch": "", "input_tokens": str(isl), "output_tokens": str(osl), "depth": "0",
                   "quantity": "output_tps", "value": "1", "settings": "tp=1", "n_devices": "1"}
            rows.append(parse_row(rec, file="synthetic", line=i, devices={"h100-sxm"}, models={model}))
    items = []
    for it in prepare(rows):
        assert it.shape is not None, it.excluded
        items.append(replace(it, row=replace(it.row, value=predict(it.row, it.shape, truth))))
    got = fit_group(items, "h100-sxm", "trtllm")
    assert set(got.compute) == {"fp8", "fp8-moe"}
    assert got.compute["fp8-moe"] / got.compute["fp8"] == pytest.approx(0.5, rel=0.1)


def test_fit_and_run_size_tensorrt_llms_kv_pool_alike():
    """TensorRT-LLM's memory fraction is of the memory the weights leave (memory_fraction_of: free):
    `infersim fit --engine trtllm` and the simulator's KV pool use the same rule (sim.cost.memory)."""
    res = runner.invoke(app, ["fit", "--hw", "h100-sxm", "--engine", "trtllm", "--model", "llama-3.1-70b",
                              "--quant", "fp8", "--concurrency", "1", "--no-speed", "--json"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.stdout)["rows"][0]
    run = runner.invoke(app, ["run", str(CHAT), "--hw", "h100-sxm", "--engine", "trtllm", "--model", "llama-3.1-70b",
                              "--quant", "fp8", "--json"])
    assert run.exit_code == 0, run.output
    capacity = json.loads(run.stdout[run.stdout.index("{"):])["kv"]["capacity_tokens"]
    assert row["fits"] and row["max_context"] == capacity > 0


def test_a_locally_calibrated_profile_quotes_its_own_held_out_probe_error():
    from sim.catalog.accuracy import describe, expected_error

    hw = load_profile("cpu-x86-generic")
    hw = hw.model_copy(update={
        "engine_efficiency": {"llama.cpp": hw.efficiency},
        "calibration": {"engine": "llama.cpp", "date": "2026-12-04",
                        "fit": {"heldout_median_abs_error_by_kind": {"prefill": 0.031, "decode": 0.018},
                                "n_heldout": 7}},
    })
    err = expected_error(hw, load_engine("llama.cpp"))
    assert err["figures"]["ttft"]["pct"] == pytest.approx(3.1) and err["figures"]["tpot"]["pct"] == pytest.approx(1.8)
    assert err["figures"]["e2e"]["kind"] == "decode" and err["figures"]["tpot"]["n"] == 7
    assert "calibrated on this machine" in describe(err)


def test_trtllm_bench_limits_follow_calc_engine_setting():
    """trtllm-bench's engine limits (tensorrt_llm/bench/build/tuning.py), worked by hand: Llama 3.1 8B
    FP8 (FP8 KV) on an 80 GiB H100 at 128/128: 2 x 32 x 8 x 128 x 1 B = 64 KiB per token; (80 - 8.03)
    x 0.95 GiB / 64 KiB / 256 = 4,375 requests -> capped at 4096 -> batch 4096; 4096 x 2 = 8192 tokens."""
    from calibrate.public_corpus import load_corpus
    from calibrate.public_fit import _row_objects, trtllm_bench_limits

    row = next(r for r in load_corpus() if r.row_id == "trtllm-v0.13-h100-sxm-llama-3.1-8b-fp8-tp1-128-128")
    hw, _, spec, _, _ = _row_objects(row)
    assert trtllm_bench_limits(row, hw, spec) == (4096, 8192)


def test_trtllm_bench_limits_of_the_pytorch_flow_count_the_checkpoints_fp8_kv_cache():
    """The v1.0 rows (PyTorch backend, ModelOpt FP8 checkpoints) run with the checkpoint's FP8 KV cache
    (`_pytorch_trtllm_fp8`), and trtllm-bench's `get_settings` sizes the engine with it too
    (validate_and_set_kv_cache_quant, then calc_engine_setting's byte_per_kv_elem = 1): Llama 3.1 8B on
    an H100 at 128/4096: (80 - 8.03) x 0.95 GiB / 64 KiB / 4224 = 265 requests -> batch 384 (a BF16
    KV cache would give 133 -> 160). Chunked prefill is off in that flow, so max_num_tokens is at
    least the prompt plus the batch: 20000/2000 -> 20000 + 64."""
    from calibrate.public_corpus import load_corpus
    from calibrate.public_fit import _row_objects, trtllm_bench_limits

    rows = {r.row_id: r for r in load_corpus()}
    row = rows["trtllm-v1.0-h100-sxm-llama-3.1-8b-fp8-tp1-128-4096"]
    hw, eng, spec, _, _ = _row_objects(row)
    assert eng.kv_dtype == "fp8"
    assert trtllm_bench_limits(row, hw, spec) == (384, 2048)
    row = rows["trtllm-v1.0-h100-sxm-llama-3.1-8b-fp8-tp1-20000-2000"]
    hw, _, spec, _, _ = _row_objects(row)
    assert trtllm_bench_limits(row, hw, spec) == (64, 20064)


def test_row_era_is_read_from_what_the_row_prints(corpus):
    """llama.cpp rows are current (2025+) or earlier builds by their printed date, build or PR number."""
    by_id = {r.row_id: r for r in corpus}
    assert pf.row_is_current(by_id["lcpp-cuda-spark-q25-7b-q8_0-bb-pp512-tg32-b1-stg"]) is True   # build 6918
    assert pf.row_is_current(by_id["lcpp-cuda-h100pcie-xdai-l3-8b-q4_k_m-tg512"]) is False      # build 2843
    assert pf.row_is_current(by_id["lcpp-cuda-h200-here-l2-7b-q4_0-tg128-ub512-fa1"]) is True   # dated 2026-10
    assert pf.row_is_current(by_id["lcpp-cuda-5090-d15013-l2-7b-q4_0-nofa-tg128"]) is True      # 2025 scoreboard
    trt = next(r for r in corpus if r.engine == "trtllm")
    assert pf.row_is_current(trt) is None


def test_a_donor_of_the_other_software_era_is_further_on_the_memory_side():
    """transfer(): with two equally near donors on one side, the one of the prediction's era decides."""
    def donor(device, bw, share):
        return pf.GroupParams(device, "ggml", {"gguf": bw}, {"gguf": 0.1}, 0.1, 1.0, rows=["r"] * 4,
                              seen_classes=("gguf",), current_share=share)
    fits = {("a100-80g", "ggml"): donor("a100-80g", 0.4, 0.0), ("h100-pcie", "ggml"): donor("h100-pcie", 0.8, 1.0)}
    old = pf.transfer("h100-sxm", "ggml", fits, era=0.0)
    new = pf.transfer("h100-sxm", "ggml", fits, era=1.0)
    # h100-pcie is h100-sxm's own generation (tier 0), a100-80g the same vendor and memory (tier 1);
    # for an earlier-era prediction the current-era h100-pcie moves ERA_TIERS further and a100 decides
    assert new.bandwidth["gguf"] == pytest.approx(0.8 * pf.bandwidth_anchor("h100-sxm", "h100-pcie"), rel=1e-3)
    assert old.bandwidth["gguf"] == pytest.approx(0.4 * pf.bandwidth_anchor("h100-sxm", "a100-80g"), rel=1e-3)
    assert new.transferred_from == ["h100-pcie"] and "a100-80g" in old.transferred_from


def test_a_class_the_nearest_donor_did_not_measure_weighs_one_tier_further():
    """transfer(): the H100 SXM's fp16 values mix the A100's fp16 (tier 1, measured) and the H200's fp8
    (tier 0, the same chip, but another class: UNPINNED_TIERS further) alike, instead of the A100's alone."""
    def donor(device, cls, comp):
        return pf.GroupParams(device, "trtllm", {cls: 0.8}, {cls: comp}, 0.3, 0.0, rows=["r"] * 9,
                              seen_classes=(cls,))
    fits = {("a100-80g", "trtllm"): donor("a100-80g", "f16", 0.64), ("h200", "trtllm"): donor("h200", "fp8", 0.49)}
    # on the datasheet anchor (no GEMM micro-benchmarks): the tiers alone decide. Before the corpus was
    # an explicit object this test passed only after another test had left the module's micro-benchmark
    # rows empty, and failed on its own (the shipped GEMM rows anchor the A100 -> H100 transfer)
    h100 = pf.transfer("h100-sxm", "trtllm", fits, corpus=microbench([]))
    assert pf.UNPINNED_TIERS == 1
    assert h100.compute["f16"] == pytest.approx(math.sqrt(0.64 * 0.49), rel=1e-6)  # equal weights, geometric mean
    assert h100.compute["fp8"] == pytest.approx(0.49, rel=1e-3)  # measured on tier 0: the A100's f16 is tier 2
    # a class no donor measured at all is not invented: only measured classes are transferred
    assert set(h100.compute) == {"f16", "fp8"}


def test_a_gemm_micro_benchmark_anchors_the_matmul_side_of_library_kernel_families():
    """The Azure cuBLASLt GEMMs (m = n = k = 16384) reach 0.822 of the A100's fp16 peak and 0.696 of
    the H100 SXM's fp8 peak; stas00's MAMF search 0.869 and 0.803 of their bf16 peaks: a TensorRT-LLM
    transfer between them carries the geometric mean of the two benchmarks' ratios (the first across
    formats, the second within bf16). llama.cpp's f16 class is a cuBLAS GEMM too and takes it; its
    quantized classes run its own MMQ kernels and do not."""
    # no corpus given: the shipped micro-benchmark file
    assert pf.matmul_shares("a100-80g")["cublaslt-gemm"] == {"fp16": pytest.approx(256.5 / 312, rel=1e-6)}
    assert pf.matmul_shares("h100-sxm")["cublaslt-gemm"]["fp8"] == pytest.approx(1377.3 / 1978.9, rel=1e-3)
    cublas = (256.5 / 312) / (1377.3 / 1978.9)
    mamf = (271.2 / 312) / (794.5 / 989.4)  # the H100's fp8 MAMF row has no A100 counterpart: not used
    ratio = pf.compute_anchor("a100-80g", "h100-sxm")
    assert ratio == pytest.approx(math.sqrt(cublas * mamf), rel=1e-3) and ratio > 1.1
    assert pf.compute_anchor("a100-80g", "l40s") == 1.0  # no common benchmark: the datasheet anchor
    # (the quantized class travels as a share of Hopper's reachable MMQ peak, `achievable_share`: 0.2 / 0.5)
    for fam, cls, expect in (("trtllm", "f16", 0.2 * ratio), ("ggml", "f16", 0.2 * ratio), ("ggml", "gguf", 0.4)):
        donor = pf.GroupParams("h100-sxm", fam, {cls: 0.8}, {cls: 0.2}, 0.3, 0.0, rows=["r"] * 9,
                               seen_classes=(cls,))
        got = pf.transfer("a100-80g", fam, {("h100-sxm", fam): donor})
        assert got.compute[cls] == pytest.approx(expect, rel=1e-6), (fam, cls)


def test_matmul_anchor_compares_formats_both_devices_ran():
    """Within one benchmark the anchor compares the number formats both devices ran it in; where they
    ran different ones, each device's mean share of its own formats' peaks. The MI300X's one GEMM
    figure (MAMF bf16, 0.511 of its 1,307 TFLOPS) against the H100 SXM (bf16 0.803, fp8 0.709) uses the
    bf16 rows only; against the H200 (fp8 only) the two shares as they are."""
    rows = [MicroRow("mi300x", "mamf", "bf16 a", "matmul", 668.4, "s"),
            MicroRow("h100-sxm", "mamf", "bf16 a", "matmul", 794.5, "s"),
            MicroRow("h100-sxm", "mamf", "fp8 a", "matmul", 1402.6, "s"),
            MicroRow("h200", "mamf", "fp8 a", "matmul", 1453.4, "s")]
    c = microbench(rows)
    mi, h100 = pf.matmul_shares("mi300x", c)["mamf"], pf.matmul_shares("h100-sxm", c)["mamf"]
    assert set(h100) == {"bf16", "fp8"} and mi["bf16"] == pytest.approx(668.4 / 1307.4, rel=1e-3)
    assert pf.compute_anchor("mi300x", "h100-sxm", c) == pytest.approx(mi["bf16"] / h100["bf16"], rel=1e-9)
    h200 = pf.matmul_shares("h200", c)["mamf"]["fp8"]
    assert pf.compute_anchor("mi300x", "h200", c) == pytest.approx(mi["bf16"] / h200, rel=1e-9)
    assert pf.compute_anchor("mi300x", "h100-sxm", c) < 0.7  # the MI300X's GEMMs reach less of their peak


def test_shipped_transfers_take_current_llama_cpp_builds_as_donors():
    """A device without llama.cpp rows is predicted for today's builds: the H100 SXM's llama.cpp values
    come from its own generation on either era (the 2024-build H100 PCIe and the 2026-build H200)."""
    from sim.catalog.hardware import load_profile

    eff = load_profile("h100-sxm").engine_efficiency["ggml"]
    assert not eff.corpus_rows
    assert "h200" in eff.transferred_from


def test_llama_batched_bench_rows_get_a_routing_skew_of_their_own_that_only_their_replay_reads(tmp_path, monkeypatch):
    from calibrate import public_report
    from sim.catalog import models

    rows = {r.row_id: r for r in load_corpus()}
    bench = rows["lcpp-cuda-spark-goss120b-mxfp4-bb-pp512-tg32-b8-stg"]
    served = rows["kubis-spark-vllm-dgx-spark-gpt-oss-120b-mxfp4-tp1-c8-pp1024-tg128-decode"]
    assert "llama-batched-bench" in bench.settings_text
    assert pf.routing_key(bench) == "gpt-oss-120b" + pf.SYNTHETIC_SUFFIX
    assert pf.routing_key(served) == "gpt-oss-120b"
    # each row is replayed with its own key's fraction (the corpus's fitted choices)
    corpus = pf.PublicCorpus(pool={"gpt-oss-120b": 0.8, "gpt-oss-120b" + pf.SYNTHETIC_SUFFIX: 0.4})
    assert pf._row_objects(bench, corpus=corpus)[2].expert_pool_fraction == 0.4
    assert pf._row_objects(served, corpus=corpus)[2].expert_pool_fraction == 0.8
    # the catalog keeps the model's key as the model's routing, and the benchmark's beside it as a field of the model
    from sim.bench.corpus import benchmark_routing
    from sim.catalog.lookup import get_model

    monkeypatch.setattr(models, "_ROUTING_FILE", tmp_path / "moe_routing.yaml")
    public_report.write_routing({
        "gpt-oss-120b": {"expert_pool_fraction": 0.8, "rows": 10, "devices": ["dgx-spark"]},
        "gpt-oss-120b" + pf.SYNTHETIC_SUFFIX: {"expert_pool_fraction": 0.3, "rows": 32, "devices": ["dgx-spark"]},
    })
    text = (tmp_path / "moe_routing.yaml").read_text()
    assert "gpt-oss-120b:" in text and "expert_pool_fraction: 0.8" in text
    assert pf.SYNTHETIC_SUFFIX not in text and "identical_tokens_pool_fraction: 0.3" in text
    try:
        spec = get_model("gpt-oss-120b")
        assert spec.expert_pool_fraction == 0.8 and spec.identical_tokens_pool_fraction == 0.3
        # only a replay of the benchmark itself routes with it (the serving corpus's batched-bench rows)
        assert benchmark_routing("llama-batched-bench", "gpt-oss-120b") == {"expert_pool_fraction": 0.3}
        assert benchmark_routing("vllm-bench-serve", "gpt-oss-120b") is None
        assert benchmark_routing("llama-batched-bench", "llama-3.1-8b") is None  # a model without one
    finally:
        models._load_catalog_file.cache_clear()


def test_a_model_with_only_benchmark_batches_is_tied_to_the_benchmarks_routing(monkeypatch):
    # Qwen3-30B-A3B: its multi-sequence rows are all llama-batched-bench's (DGX Spark); its other rows
    # are single-sequence prompts (RTX 4090, M2 Ultra). Its own key must follow the benchmark's,
    # whatever the corpus's pool or the catalog held before.
    rows = [r for r in load_corpus() if r.model == "qwen3-30b-a3b" and r.engine != "trtllm"]
    prepared = prepare(rows)
    seen = []

    def fake_choice(grid, apply, groups, rows_of, corpus):
        apply(0.32)
        seen.append(sorted({it.row.device for v in rows_of.values() for it in v}))
        return 0.32, {c: (1.0 if c == 0.32 else 5.0) for c in grid}  # rows that prefer 0.32

    from calibrate.public import fitting

    monkeypatch.setattr(fitting, "_grid_choice", fake_choice)
    corpus = pf.PublicCorpus(pool={"qwen3-30b-a3b": 0.8})  # a previous run's value
    out = pf.fit_routing(prepared, corpus)
    key = "qwen3-30b-a3b" + pf.SYNTHETIC_SUFFIX
    assert set(out) == {key, "qwen3-30b-a3b"}
    assert out["qwen3-30b-a3b"]["tied_to"] == key
    assert corpus.pool["qwen3-30b-a3b"] == corpus.pool[key] == 0.32
    assert seen == [["dgx-spark"]]  # chosen on the benchmark's rows only


def test_rows_that_do_not_tell_the_routing_fractions_apart_do_not_choose_it(monkeypatch):
    # Qwen3-30B-A3B's TensorRT-LLM offline rows (B200, GB200, RTX PRO 6000; batches of hundreds touch
    # every expert) fit every fraction alike: the model's key then follows the benchmark's (tied), as it
    # did before those rows, instead of the grid's first minimum
    rows = [r for r in load_corpus() if r.model == "qwen3-30b-a3b"]
    prepared = prepare(rows)
    seen = []

    def fake_choice(grid, apply, groups, rows_of, corpus):
        devices = sorted({it.row.device for v in rows_of.values() for it in v})
        seen.append(devices)
        # the offline rows: flat losses (spread under ROUTING_MIN_SPREAD); the benchmark's: 0.5 clearly best
        scores = ({c: 43.7 + 0.01 * i for i, c in enumerate(grid)} if devices != ["dgx-spark"]
                  else {c: (0.0 if c == 0.5 else 5.0) for c in grid})
        best = min(scores, key=scores.get)
        apply(best)
        return best, scores

    from calibrate.public import fitting

    monkeypatch.setattr(fitting, "_grid_choice", fake_choice)
    corpus = pf.PublicCorpus(pool={"qwen3-30b-a3b": 0.8})
    out = pf.fit_routing(prepared, corpus)
    key = "qwen3-30b-a3b" + pf.SYNTHETIC_SUFFIX
    assert seen[0] == ["b200", "gb200", "rtx-pro-6000"] and seen[1] == ["dgx-spark"]
    assert out["qwen3-30b-a3b"]["uninformative"] and out["qwen3-30b-a3b"]["tied_to"] == key
    assert out["qwen3-30b-a3b"]["devices"] == ["b200", "gb200", "rtx-pro-6000"]  # its own rows, reported
    assert out["qwen3-30b-a3b"]["expert_pool_fraction"] == corpus.pool["qwen3-30b-a3b"] == corpus.pool[key] == 0.5


def test_the_mmq_tile_floor_prices_current_llama_cpp_rows_but_not_their_own_fit():
    """The MMQ tile floor (sim.cost.llamacpp `mmq_tile_traffic_bytes`) is on for current-build llama.cpp
    rows on NVIDIA GPUs with quantized weights, off for 2023-24 builds (dequantize + cuBLAS), and off in
    the cost model a group's own fit prices its rows with."""
    rows = {r.row_id: r for r in load_corpus(default_corpus_dir())}
    spark = rows["lcpp-cuda-spark-q25-7b-q8_0-pp2048"]
    old = rows["lcpp-cuda-4090-pr4766-cl-7b-q8_0-pp512"]
    assert pf.row_mmq_tiles(spark) and not pf.row_mmq_tiles(old)
    assert pf._row_objects(spark)[4].mmq_tile_bandwidth == pytest.approx(273e9)
    assert pf._row_objects(spark, fitting=True)[4].mmq_tile_bandwidth == 0.0
    assert pf._row_objects(old)[4].mmq_tile_bandwidth == 0.0


def test_every_corpus_metric_has_one_replayer_in_the_registry_and_row_shape_dispatches_on_it(corpus, monkeypatch):
    """The replay is one function per benchmark kind (`REPLAYERS`, keyed by the corpus's `metric`): the
    registry covers exactly the metrics a corpus row may carry, and `row_shape` goes through it."""
    from calibrate.public import replayers
    from calibrate.public_corpus import METRICS

    assert set(replayers.REPLAYERS) == set(METRICS)
    row = next(r for r in corpus if r.metric == "pp" and r.engine == "llama.cpp" and r.n_devices == 1)
    real = pf.row_shape(row)
    seen = []

    def spy(ctx):
        seen.append(ctx.row.row_id)
        return replayers.replay_prompt(ctx)

    monkeypatch.setitem(replayers.REPLAYERS, "pp", spy)
    again = pf.row_shape(row)
    assert seen == [row.row_id] and np.array_equal(again.weights, real.weights) and again.numerator == real.numerator
    monkeypatch.delitem(replayers.REPLAYERS, "pp")
    with pytest.raises(pf.Excluded, match="metric pp not replayed"):
        pf.row_shape(row)
