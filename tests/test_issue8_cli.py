"""`infersim run` reaches the deployment options of issue 8: tensor/pipeline parallelism, partial
offload, speculative decoding (cost side in sim.cost.parallel / sim.cost.speculative), through CliRunner."""

import json
from pathlib import Path

from paths import INFERSIM
from typer.testing import CliRunner

from sim.cli import app

ROOT = Path(__file__).resolve().parents[1]
CHAT = str(ROOT / "workloads" / "examples" / "chat.jsonl")


def _runner():
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 keeps stderr apart
        return CliRunner()


def run_json(*args: str) -> dict:
    res = _runner().invoke(app, ["run", CHAT, "--json", *args])
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def test_tensor_parallel_more_than_doubles_kv_capacity_and_cuts_tpot():
    one = run_json()
    two = run_json("--tp", "2")
    assert (one["config"]["tp"], two["config"]["tp"]) == (1, 2)
    assert two["config"]["pp"] == 1
    # two devices hold twice the KV, plus the half of the weights each no longer holds
    assert two["kv"]["capacity_tokens"] > 2 * one["kv"]["capacity_tokens"]
    assert two["tpot_s"]["mean"] < one["tpot_s"]["mean"]


def test_pipeline_parallel_is_reported_and_resolves_gpu_layers_to_all():
    s = run_json("--pp", "2")
    assert s["config"]["pp"] == 2
    assert s["config"]["gpu_layers"] == 33  # llama-3.1-8b: 32 layers + output layer, all on devices


def test_eagle_speculative_reports_expected_tokens_per_verify_step():
    s = run_json("--spec-method", "eagle", "--spec-draft-fraction", "0.1", "--spec-k", "3",
                 "--spec-acceptance", "0.6")
    a, k = 0.6, 3
    # E[tokens per step] = (1 - a^(k+1)) / (1 - a) (Leviathan et al. 2023, eq. 1)
    assert abs(s["config"]["spec_tokens_per_step"] - (1 - a ** (k + 1)) / (1 - a)) < 1e-12
    assert s["config"]["speculative"]["method"] == "eagle"
    assert s["config"]["speculative"]["k"] == 3


def test_plain_run_reports_no_speculation_one_token_per_step():
    s = run_json()
    assert s["config"]["speculative"] is None
    assert s["config"]["spec_tokens_per_step"] == 1.0


def test_partial_offload_fixed_layers_is_slower_than_auto():
    base = ["--hw", "rtx-4090", "--engine", "llama.cpp", "--model", "llama-3.1-70b", "--quant", "q4_k_m"]
    auto = run_json(*base, "--gpu-layers", "auto")
    thirty = run_json(*base, "--gpu-layers", "30")
    assert thirty["config"]["gpu_layers"] == 30
    assert 30 < auto["config"]["gpu_layers"] < 81  # some, not all, of 80 layers + output fit in 24 GB
    # fewer layers on the GPU: more weights streamed at host bandwidth per token
    assert thirty["tpot_s"]["mean"] > auto["tpot_s"]["mean"]


def test_bad_gpu_layers_is_a_one_line_error():
    res = _runner().invoke(app, ["run", CHAT, "--engine", "llama.cpp", "--gpu-layers", "lots"])
    assert res.exit_code == 2
    assert "gpu_layers" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) <= 2  # the config line is not printed before it fails


def test_model_too_big_for_tp_devices_names_the_device():
    res = _runner().invoke(app, ["run", CHAT, "--hw", "l4", "--model", "llama-3.1-70b", "--tp", "2"])
    assert res.exit_code == 2
    assert "each l4" in res.stderr and "short by" in res.stderr


def test_sweep_grid_crosses_tp_and_replicas(tmp_path):
    from sim.plan.executors import SerialExecutor
    from sim.plan.runner import run_sweep
    from sim.plan.sweep import load_sweep

    (tmp_path / "t.jsonl").write_text("".join(
        json.dumps({"arrival_s": i * 0.02, "prompt_tokens": 300 + 41 * (i % 9), "output_tokens": 20 + 7 * (i % 5)})
        + "\n" for i in range(40)))
    (tmp_path / "sweep.yaml").write_text(
        "trace: t.jsonl\nhw: h100-sxm\nmodel: llama-3.1-8b\nengine: vllm\n"
        "grid:\n  tp: [1, 2]\n  replicas: [1, 2]\n  router: [least-outstanding]\n")
    out = run_sweep(load_sweep(tmp_path / "sweep.yaml"), tmp_path / "out", SerialExecutor())
    df = out.frame
    assert (df["status"] == "ok").all(), df["error"].tolist()
    assert len(df) == 4 and (df["requests_completed"] == 40).all()
    got = {(r.tp, r.replicas): r for r in df.itertuples()}
    assert set(got) == {(1, 1), (1, 2), (2, 1), (2, 2)}
    # tensor parallel lowers time per token; a second replica takes half the queue
    assert got[(2, 1)].tpot_s_mean < got[(1, 1)].tpot_s_mean
    assert got[(1, 2)].ttft_s_p90 <= got[(1, 1)].ttft_s_p90


def test_replicas_and_prefix_caching_through_a_real_subprocess():
    import subprocess

    cmd = [INFERSIM, "run", str(ROOT / "workloads" / "examples" / "chat-sessions.jsonl"),
           "--json", "--replicas", "2", "--router", "prefix-affinity"]
    a = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    b = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout  # deterministic bytes
    s = json.loads(a.stdout)
    assert s["config"]["replicas"] == 2 and s["config"]["router"] == "prefix-affinity"
    assert [r["replica"] for r in s["replicas"]] == [0, 1]
    assert s["prefix_cache"]["hit_rate"] > 0.3
