"""Engine releases (`--engine vllm@0.7`) and the release-dependent behaviour that decides load: the KV
dtype an engine picks for a checkpoint, SGLang's new-token reservation, vLLM V0's watermark and
long-context chunked prefill, and CUDA-graph padding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.catalog.engine_config import NewTokenRatio, engine_releases, load_engine, release_for_version
from sim.catalog.lookup import get_model
from sim.cost.roofline import CostModel
from sim.engine.kv import PagedAllocator
from sim.engine.metrics import RequestLog
from sim.engine.schedulers import make_scheduler
from sim.engine.state import Pending, ReplicaState
from sim.errors import ConfigError
from workloads.request import Request

ROOT = Path(__file__).resolve().parents[1]
INFERSIM = Path(sys.executable).parent / "infersim"
CHAT = str(ROOT / "workloads" / "examples" / "chat.jsonl")
RELEASES = {"vllm": {"0.7", "0.10", "0.11"}, "sglang": {"0.4", "0.5"}, "trtllm": {"0.x", "1.0"}}
NEWEST = {"vllm": "0.11", "sglang": "0.5", "trtllm": "1.0"}


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_each_engine_lists_its_releases_and_the_newest_is_the_default(name):
    default, releases = engine_releases(name)
    assert set(releases) == RELEASES[name] and default == NEWEST[name]
    assert load_engine(name) == load_engine(f"{name}@{default}")
    for rel in releases:
        e = load_engine(f"{name}@{rel}")
        assert e.release == rel and e.version
        # every field a release changes is backed by a citation (a URL or a labelled estimate)
        covered = {f for s in e.sources for f in s.fields}
        changed = set(releases[rel].set) - {"display_name", "hardware_rules"}
        assert not changed - covered, f"{name}@{rel}: uncited {changed - covered}"
        assert all(s.url.startswith(("https://", "fitted:")) or s.url == "engineering-estimate" for s in e.sources)


def test_releases_differ_where_their_sources_say():
    v07, v11 = load_engine("vllm@0.7"), load_engine("vllm@0.11")
    assert (v07.prefix_caching, v11.prefix_caching) == (False, True)  # V0 default off, V1 on
    assert v07.admission_watermark == 0.01 and v11.admission_watermark == 0.0
    assert v07.cuda_graph_sizes[-1] == 256 and v11.cuda_graph_sizes[-1] == 512
    assert v07.iteration_overhead_ms > v11.iteration_overhead_ms  # V0's scheduler is on the step's path
    assert load_engine("trtllm@0.x").block_size == 64 and load_engine("trtllm@1.0").block_size == 32
    assert load_engine("trtllm@1.0").cuda_graph_padding is False
    assert load_engine("sglang@0.4").memory_fraction == 0.88


def test_unknown_release_is_an_error_naming_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown release 'vllm@0\.3'; known: vllm@0\.11 \(0\.11-0\.12\), "
                                         r"vllm@0\.10 \(0\.9-0\.10\), vllm@0\.7 \(0\.6-0\.7\)"):
        load_engine("vllm@0.3")
    with pytest.raises(ConfigError, match="known: none"):
        load_engine("llama.cpp@b4000")  # a preset without releases
    with pytest.raises(ConfigError, match="empty release"):
        load_engine("vllm@")


def test_a_full_version_runs_the_release_that_covers_it():
    assert load_engine("vllm@0.10.1").release == "0.10"
    assert load_engine("vllm@v0.6.3.post1").release == "0.7"
    assert load_engine("sglang@0.4.6.post5").release == "0.4"
    assert load_engine("trtllm@1.0.0rc4").release == "1.0" and load_engine("trtllm@0.17.0").release == "0.x"
    assert release_for_version("vllm", "0.12.0") == "0.11" and release_for_version("vllm", "0.5.4") is None
    with pytest.raises(ConfigError, match="unknown release 'trtllm@0.9.0'"):
        load_engine("trtllm@0.9.0")


def test_a_user_file_may_start_from_a_release(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("base: vllm@0.7\nmax_num_seqs: 64\n")
    e = load_engine(str(f))
    assert e.max_num_seqs == 64 and e.release == "0.7" and e.admission_watermark == 0.01


def _run(*args):
    return subprocess.run([str(INFERSIM), "run", CHAT, *args], capture_output=True, text=True, timeout=120)


def test_cli_names_the_release_and_rejects_an_unknown_one_in_one_line():
    ok = _run("--engine", "vllm@0.7", "--json")
    assert ok.returncode == 0, ok.stderr
    assert "engine=vllm@0.7 0.7.3" in ok.stderr
    bad = _run("--engine", "sglang@9.9")
    assert bad.returncode == 2
    lines = [ln for ln in bad.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "sglang@0.5 (0.5-0.5), sglang@0.4 (0.4-0.4)" in lines[0]


# ---- KV dtype the engine picks for the checkpoint ----------------------------------------------------

def test_trtllm_keeps_an_fp8_kv_cache_for_fp8_checkpoints_and_vllm_does_not():
    m = get_model("llama-3.1-8b")
    assert load_engine("trtllm").for_checkpoint(m, "fp8").kv_dtype == "fp8"
    assert load_engine("trtllm@0.x").for_checkpoint(m, "fp8_e4m3").kv_dtype == "fp8"  # aliases resolve
    assert load_engine("trtllm").for_checkpoint(m, "bf16").kv_dtype == "bf16"
    for name in ("vllm@0.7", "vllm@0.11", "sglang@0.5"):
        assert load_engine(name).for_checkpoint(m, "fp8").kv_dtype == "bf16", name


def test_fp8_kv_doubles_trtllm_capacity_and_an_explicit_kv_dtype_wins():
    def cap(*extra):
        r = _run("--engine", "trtllm", "--quant", "fp8", "--json", *extra)
        assert r.returncode == 0, r.stderr
        s = json.loads(r.stdout)
        return s["config"]["kv_dtype"], s["kv"]["capacity_tokens"]

    (kv8, c8), (kv16, c16) = cap(), cap("--kv-dtype", "bf16")
    assert (kv8, kv16) == ("fp8", "bf16")
    assert c8 == pytest.approx(2 * c16, rel=0.01)


# ---- vLLM V0: chunked prefill only for long-context models; watermark --------------------------------

def test_vllm_v0_chunks_prefills_only_above_32k_context():
    v07 = load_engine("vllm@0.7")
    long = v07.for_checkpoint(get_model("llama-3.1-8b"), "bf16")  # 131,072-token context
    assert (long.scheduler, long.max_num_batched_tokens) == ("chunked", 2048)
    short_model = get_model("llama-2-7b")  # 4,096-token context
    short = v07.for_checkpoint(short_model, "bf16")
    assert (short.scheduler, short.max_num_batched_tokens) == ("continuous", 4096)
    assert load_engine("vllm").for_checkpoint(short_model, "bf16").scheduler == "chunked"  # V1: always


def _state(kv, *requests):
    log = RequestLog()
    st = ReplicaState(kv, log, lanes=8)
    for r in requests:
        st.waiting.append(Pending(log.add(r.id, r.arrival_s, r.prompt_tokens), r))
    return st


def _req(i, prompt, output=10, max_tokens=None):
    return Request(str(i), 0.0, prompt, output, max_tokens or output)


def test_v0_watermark_keeps_one_percent_of_blocks_free_at_admission():
    # 100 blocks of 16 tokens; a 1,600-token prompt needs all 100: V1 admits it, V0 keeps 1 block free
    for watermark, admitted in ((0.0, 1), (0.01, 0)):
        st = _state(PagedAllocator(1600, 16), _req(0, 1600))
        s = make_scheduler("continuous", max_num_seqs=8, max_num_batched_tokens=None, context_tokens=100_000,
                           watermark=watermark)
        assert len(s.plan(st).prefill_lanes) == admitted


# ---- SGLang's new-token reservation -------------------------------------------------------------------

def _apply(st, batch):
    for lane, chunk in zip(batch.prefill_lanes, batch.prefill_tokens):
        st.ctx[lane] += chunk
        st.used_tokens += chunk
        if st.ctx[lane] >= st.prefill_goal[lane]:
            st.start_decoding(lane)


def test_sglang_admits_only_what_the_reserved_new_tokens_leave_room_for():
    # 10,000 KV tokens; each request: 1,000 prompt tokens, max_tokens 3,000. Without a reservation all
    # five prompts fit; SGLang needs prompt + min(max_new, 4096) = 4,000 free for the first, and the
    # running ones hold 0.7 x 3,000 each: only two are admitted at once.
    reqs = [_req(i, 1000, output=3000) for i in range(5)]
    plain = _state(PagedAllocator(10_000, 1), *reqs)
    s = make_scheduler("chunked", max_num_seqs=8, max_num_batched_tokens=16384, context_tokens=100_000)
    assert len(s.plan(plain).prefill_lanes) == 5
    st = _state(PagedAllocator(10_000, 1), *reqs)
    sg = make_scheduler("chunked", max_num_seqs=8, max_num_batched_tokens=16384, context_tokens=100_000,
                        new_token_ratio=NewTokenRatio())
    first = sg.plan(st)
    assert len(first.prefill_lanes) == 2  # 10,000 -> 6,000 left after the first 4,000 -> 2,000 after the second
    _apply(st, first)
    # running: 2 x 0.7 x min(3000 - 1, 4096) reserved, 8,000 free: 8,000 - 4,199 < 4,000 -> nobody new
    assert not sg.plan(st).prefill_lanes
    # the ratio decays by (0.7 - 0.098) / 600 per decode step, down to 0.7 x 0.14
    st.decode_clock += 300
    assert sg.new_token_ratio(st) == pytest.approx(0.7 - 300 * (0.7 - 0.098) / 600)
    st.decode_clock += 10_000
    assert sg.new_token_ratio(st) == pytest.approx(0.098)


def test_sglang_run_holds_fewer_requests_than_without_its_reservation(tmp_path):
    # A small KV cache (--mem-fraction) and long outputs: the reservation caps concurrency
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"id": str(i), "arrival_s": 0.0, "prompt_tokens": 2000,
                                         "output_tokens": 1500, "max_tokens": 1500}) + "\n" for i in range(64)))
    eng = tmp_path / "noreserve.yaml"
    eng.write_text("base: sglang\nnew_token_ratio: null\n")

    def batch(*args):
        r = subprocess.run([str(INFERSIM), "run", str(trace), "--hw", "rtx-4090", "--json", *args],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["batch_size"]["max"]

    assert batch("--engine", "sglang") < batch("--engine", str(eng))


# ---- CUDA graphs ----------------------------------------------------------------------------------------

def test_graph_batch_pads_up_and_runs_eager_above_the_largest_size():
    v = load_engine("vllm")
    assert (v.graph_batch(1), v.graph_batch(3), v.graph_batch(9), v.graph_batch(512)) == (1, 4, 16, 512)
    assert v.graph_batch(513) is None
    t = load_engine("trtllm")  # enable_padding False: only exact sizes replay a graph
    assert (t.graph_batch(31), t.graph_batch(33), t.graph_batch(64)) == (31, None, 64)


def test_cost_of_a_decode_step_follows_the_graph_it_replays():
    plain = CostModel.from_names("llama-3.1-8b", "bf16", "h100-sxm", load_engine("vllm").model_copy(
        update={"cuda_graph_sizes": None}))
    graphs = CostModel.from_names("llama-3.1-8b", "bf16", "h100-sxm", "vllm")
    ctx = [1000] * 9
    # 9 sequences replay the 16-row graph: never cheaper, and exactly the GEMM difference
    assert graphs.step_time(decode_context=ctx) >= plain.step_time(decode_context=ctx)
    assert graphs.step_time(decode_context=ctx) - plain.step_time(decode_context=ctx) == pytest.approx(
        graphs.graph_extra_s(9), abs=1e-12)
    # above 512 the step is eager: the eager launch cost is added
    big = [1000] * 600
    assert graphs.step_time(decode_context=big) - plain.step_time(decode_context=big) == pytest.approx(1e-3)
    # the closed-form decode runs the replica fast-forwards price the same steps
    assert graphs.decode_run_time(ctx, 1) == pytest.approx(graphs.step_time(decode_context=ctx), rel=1e-9)
    assert graphs.decode_run_time(big, 1) == pytest.approx(graphs.step_time(decode_context=big), rel=1e-9)
    # a prefill step is not a graph replay
    assert graphs.step_time([100], [0], ctx) == pytest.approx(plain.step_time([100], [0], ctx))


def test_engines_command_lists_releases_with_the_default_first():
    r = subprocess.run([str(INFERSIM), "engines", "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    for name, rels in RELEASES.items():
        assert set(rows[name]["releases"]) == rels and rows[name]["default_release"] == NEWEST[name]
    assert rows["llama.cpp"]["releases"] == {}


# ---- how each engine forms an iteration -------------------------------------------------------------

def test_presets_pick_their_engines_batching():
    assert load_engine("sglang").scheduler == load_engine("sglang@0.4").scheduler == "prefill_first"
    assert load_engine("trtllm").scheduler == load_engine("trtllm@0.x").scheduler == "inflight"
    assert load_engine("vllm").scheduler == "chunked"


def test_inflight_runs_decodes_and_whole_prompts_together_within_max_num_tokens():
    st = _state(PagedAllocator(100_000, 16), _req(0, 100), _req(1, 300))
    s = make_scheduler("inflight", max_num_seqs=8, max_num_batched_tokens=400, context_tokens=100_000)
    first = s.plan(st)
    assert first.prefill_tokens == [100, 300]  # whole prompts, never chunked
    _apply(st, first)
    st.waiting.append(Pending(st.log.add("2", 0.0, 399), _req(2, 399)))
    second = s.plan(st)  # two decodes take 2 of the 400 tokens: the 399-token prompt waits
    assert len(second.decode_lanes) == 2 and not second.prefill_lanes
    st.waiting.popleft()
    st.waiting.append(Pending(st.log.add("3", 0.0, 398), _req(3, 398)))
    third = s.plan(st)  # 2 + 398 = 400 fits: decodes and the prompt in one step
    assert len(third.decode_lanes) == 2 and third.prefill_tokens == [398]


def test_prefill_first_never_mixes_prefills_with_decodes_and_chunks_at_the_budget():
    st = _state(PagedAllocator(100_000, 1), _req(0, 100))
    s = make_scheduler("prefill_first", max_num_seqs=8, max_num_batched_tokens=512, context_tokens=100_000)
    _apply(st, s.plan(st))
    st.waiting.append(Pending(st.log.add("1", 0.0, 1000), _req(1, 1000)))
    b = s.plan(st)  # a prefill can be formed: it runs alone, chunked at 512
    assert b.prefill_tokens == [512] and len(b.decode_lanes) == 0
    _apply(st, b)
    b = s.plan(st)  # the chunked request goes on before any decode
    assert b.prefill_tokens == [488] and len(b.decode_lanes) == 0
    _apply(st, b)
    b = s.plan(st)  # nothing left to prefill: both decode
    assert not b.prefill_lanes and len(b.decode_lanes) == 2 and b.stable


def test_a_comparison_of_releases_labels_each_row_with_its_release():
    r = _run("--engine", "vllm@0.7,vllm@0.11", "--concurrency", "8")
    assert r.returncode == 0, r.stderr
    assert "vllm@0.7" in r.stdout and "vllm@0.11" in r.stdout


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_the_load_deciding_defaults_are_cited(name):
    e = load_engine(name)
    covered = {f for s in e.sources for f in s.fields}
    needed = {"cuda_graph_sizes", "kv_dtype_for_quant", "eager_overhead_ms", "scheduler", "iteration_overhead_ms",
              "per_sequence_overhead_ms"} | ({"new_token_ratio"} if name == "sglang" else set())
    assert not needed - covered, f"{name}: uncited {needed - covered}"


def test_sglang_retraction_resets_the_ratio_to_the_batchs_own_estimate():
    st = _state(PagedAllocator(100_000, 1), _req(0, 100, output=40), _req(1, 100, output=40))
    sg = make_scheduler("prefill_first", max_num_seqs=8, max_num_batched_tokens=16384, context_tokens=100_000,
                        new_token_ratio=NewTokenRatio())
    _apply(st, sg.plan(st))  # both prefilled: one token generated each
    sg._retracted(st)  # retract_decode: (decoded + retract_decode_steps x n) / sum max_new_tokens, at most 1
    assert sg.new_token_ratio(st) == pytest.approx((2 + 20 * 2) / 80)  # 0.525
    st.decode_clock += 100  # then it decays again, by (init - min) / decay_steps per step
    assert sg.new_token_ratio(st) == pytest.approx(0.525 - 100 * (0.7 - 0.098) / 600)


def test_cuda_graphs_price_a_tensor_parallel_decode_step_as_they_do_one_gpu():
    """Every rank replays its own graph of its shard (TensorRT-LLM 1.0 llm_args.py CudaGraphConfig, vLLM's
    per-worker CUDA graphs): under TP 2 a decode batch between TensorRT-LLM's exact sizes runs eagerly and
    pays the eager launch cost, and a vLLM batch pads up to the next captured size; a prefill step is
    never a graph replay. Before, a placement skipped both."""
    def pair(name):
        eng = load_engine(name).model_copy(update={"tp": 2})
        return (CostModel.from_names("llama-3.1-8b", "bf16", "h200", eng),
                CostModel.from_names("llama-3.1-8b", "bf16", "h200", eng.model_copy(update={"cuda_graph_sizes": None})))

    trt, trt_plain = pair("trtllm")
    assert trt.placement is not None
    eager = load_engine("trtllm").eager_overhead_ms / 1e3
    for n, extra in ((64, 0.0), (100, eager), (128, 0.0), (200, eager)):
        ctx = [600] * n
        assert trt.step_time(decode_context=ctx) - trt_plain.step_time(decode_context=ctx) == pytest.approx(extra, abs=1e-12)
        # the closed-form decode runs the replica fast-forwards price the same steps
        assert trt.decode_run_time(ctx, 1) == pytest.approx(trt.step_time(decode_context=ctx), rel=1e-9)
        assert trt.decode_run_time(ctx, 3) - trt_plain.decode_run_time(ctx, 3) == pytest.approx(3 * extra, abs=1e-9)
    ctx = [600] * 100
    assert trt.step_time([512], [0], ctx) == pytest.approx(trt_plain.step_time([512], [0], ctx))

    vllm, vllm_plain = pair("vllm")
    n = 300  # vLLM pads to its next captured size: the placement's own step of more rows, never cheaper
    g = vllm.graph_sizes[next(i for i, s in enumerate(vllm.graph_sizes) if s >= n)]
    assert g > n
    ctx = [600] * n
    pad = vllm.step_time(decode_context=ctx) - vllm_plain.step_time(decode_context=ctx)
    assert pad == pytest.approx(vllm.graph_extra_s(n), abs=1e-12) and pad > 0
    # the padding rows cost what the same step with g sequences costs beyond n, less their attention
    more = vllm_plain.step_time(decode_context=[0] * g) - vllm_plain.step_time(decode_context=[0] * n)
    assert pad <= more + 1e-9
