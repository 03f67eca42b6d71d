"""sim.cost.split_kv: the serial chain of a capped split-KV decode kernel (SGLang's triton backend)."""

import numpy as np
import pytest

from sim.bench.corpus import engine_overrides
from sim.catalog.engine_config import load_engine
from sim.catalog.lookup import get_model
from sim.cost.roofline import CostModel
from sim.cost.split_kv import TAU_S_PER_KEY, SplitKV, split_kv_s


def test_tau_reproduces_the_published_batch1_slope():
    # PR #21775's "Old Triton" column (Qwen3-8B, H100): 141.37 tok/s at L=1000, 48.35 at L=32000; 36 layers
    chain = SplitKV(splits=8, head_blocks=8)
    measured = 1 / 48.35 - 1 / 141.37
    assert chain.seconds(36 * 31000, 1) == pytest.approx(measured, rel=0.005)
    assert TAU_S_PER_KEY == pytest.approx(8 * measured / 31000 / 36, rel=0.005)


def test_head_blocks_follow_the_triton_grid():
    eng = load_engine("sglang").model_copy(update={"decode_kv_splits": 8})
    glm = get_model("glm-4.7-flash")  # MLA, 20 heads: one latent KV head, cdiv(20, 16) programs
    assert SplitKV.for_engine(eng, glm) == SplitKV(splits=8, head_blocks=2)
    assert SplitKV.for_engine(eng.model_copy(update={"tp": 2}), glm).head_blocks == 1  # 10 heads per device
    llama = get_model("llama-3.1-8b")  # GQA 32 / 8: one program per KV head (group 4 < 16)
    assert SplitKV.for_engine(eng, llama).head_blocks == 8
    assert SplitKV.for_engine(load_engine("sglang"), glm) is None  # the preset: no cap
    assert split_kv_s(None, 1e6, 1) == 0.0


def test_chain_is_per_sequence_mean_and_linear_in_keys():
    c = SplitKV(splits=8, head_blocks=2)
    assert c.seconds(47 * 1000, 1) == pytest.approx(47 * 1000 / 8 * TAU_S_PER_KEY)
    # four sequences attending 4x the keys in all: the same chain (they run side by side)
    assert c.seconds(4 * 47 * 1000, 4) == pytest.approx(c.seconds(47 * 1000, 1))
    keys = np.array([1e4, 2e4])
    assert np.allclose(split_kv_s(c, keys, 1), [c.seconds(1e4, 1), c.seconds(2e4, 1)])


def test_step_time_grows_with_context_by_the_chain_and_runs_stay_exact():
    spec = get_model("glm-4.7-flash")
    base = load_engine("sglang")
    capped = base.model_copy(update={"decode_kv_splits": 8})
    cm0, cm1 = (CostModel.from_names(spec, "bf16", "b200", e) for e in (base, capped))
    n_attn = cm1.n_layers
    for ctx in (800, 4400):
        extra = cm1.step_time((), (), (ctx,)) - cm0.step_time((), (), (ctx,))
        chain = n_attn * (ctx + 1) / 8 * TAU_S_PER_KEY  # the step is gemm + max(attention + chain, K/V reads)
        assert chain * 0.98 < extra <= chain
    # the decode-run closed form sums the same per-step figures (sim.cost.decode_runs)
    steps = [cm1.step_time((), (), (4000 + i, 900 + i)) for i in range(40)]
    assert cm1.decode_run_time([4000, 900], 40) == pytest.approx(sum(steps), rel=1e-9)


def test_tensor_parallel_placement_prices_the_chain_on_decode_only_steps():
    spec = get_model("glm-4.7-flash")
    base = load_engine("sglang").model_copy(update={"tp": 2})
    capped = base.model_copy(update={"decode_kv_splits": 8})
    cm0, cm1 = (CostModel.from_names(spec, "bf16", "b200", e) for e in (base, capped))
    extra = cm1.step_time((), (), (4000,)) - cm0.step_time((), (), (4000,))
    assert extra == pytest.approx(cm1.n_layers * 4001 / 8 * TAU_S_PER_KEY, rel=0.02)
    steps = [cm1.step_time((), (), (4000 + i,)) for i in range(20)]
    assert cm1.decode_run_time([4000], 20) == pytest.approx(sum(steps), rel=1e-9)
    # a prefill step runs the extend kernel: no chain
    assert cm1.step_time((512,), (0,), ()) == pytest.approx(cm0.step_time((512,), (0,), ()), rel=1e-12)


def test_corpus_flag_reading_of_sglang_triton_backend():
    from sim.bench.corpus import _triton_kv_splits

    assert _triton_kv_splits("triton") == 8
    with pytest.raises(ValueError):
        _triton_kv_splits("fa3")
    assert "decode_kv_splits" not in engine_overrides("--tp 8")


def test_ship_rule_decides_the_corpus_flag_mapping():
    from calibrate.serving.split_kv_rule import RECORDED, ships, split_kv_markdown
    from sim.bench import corpus

    # the corpus replays read --attention-backend triton exactly when the recorded subset runs pass the rule
    assert ("--attention-backend" in corpus._FLAGS) == ships(RECORDED)
    assert not ships(RECORDED)  # 2026-12-06: TPOT/ITL 27.0% -> 27.0% on the rule's line: not shipped
    better = {"subset": "x", "date": "d", "without": {"tpot_itl": 30.0, "output_tps": 20.0},
              "with": {"tpot_itl": 25.0, "output_tps": 20.0},
              "runs": {"with": "commit a", "without": "commit b", "recorded_in": "commit c"}}
    assert ships(better)
    assert not ships({**better, "with": {"tpot_itl": 25.0, "output_tps": 21.0}})  # throughput worse
    assert not ships({**better, "with": {"tpot_itl": 30.0, "output_tps": 10.0}})  # TPOT not better
    assert not ships({})
    assert "| tpot_itl | 30.0% | 25.0% |" in "\n".join(split_kv_markdown(better))


def test_the_report_says_the_split_kv_figures_are_recorded_and_from_which_runs():
    """The section's figures are copied from two subset runs, not computed by the report: it says so, names the
    subset command, the trees the runs ran on and the recording commit, and refuses figures without them."""
    from calibrate.serving.split_kv_rule import RECORDED, split_kv_markdown

    text = "\n".join(split_kv_markdown())
    assert "Recorded figures, not recomputed by this report" in text
    assert f"--curves '{RECORDED['subset']}'" in text
    for k in ("with", "without", "recorded_in"):
        assert RECORDED["runs"][k] in text
    # the figures printed are RECORDED's, both columns
    for m in ("tpot_itl", "output_tps"):
        assert f"| {m} | {RECORDED['without'][m]:.1f}% | {RECORDED['with'][m]:.1f}% |" in text
    with pytest.raises(ValueError, match="runs"):
        split_kv_markdown({k: v for k, v in RECORDED.items() if k != "runs"})
