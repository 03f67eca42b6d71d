"""How fast is the simulator? Start-up, a 10k trace through the CLI, 100k and 1M simulated
requests, and sweep/plan throughput.

Workload (issue 3's): Poisson arrivals, prompt lengths lognormal around 1,000 tokens, outputs
lognormal around 250, on the `vllm` preset, `h100-sxm`, `llama-3.1-8b` (bf16). Requests are
streamed from a generator, as `infersim run` streams a trace file.

    .venv/bin/python benchmarks/simspeed.py                       # everything below
    .venv/bin/python benchmarks/simspeed.py --only sim --sizes 10000 --profile
    .venv/bin/python benchmarks/simspeed.py --only startup,cli,grid
    .venv/bin/python benchmarks/simspeed.py --only fit

Sections (issue 17's targets, on a 2-core machine):
- startup: `infersim --help` process wall (target <= 0.25 s), median of several runs.
- cli: `infersim run` process wall on a 10,000-request trace of the workload above, written to a
  temporary JSONL file, configured as Vidur's own 10k benchmark (llama-2-7b on a100-80g, vLLM,
  max_num_seqs 128, 4,096 batched tokens, block 16; target <= 0.6 s).
- sim: 10k, 100k and 1M requests simulated in-process (target 1M <= 30 s within 1 GB), each in a
  fresh subprocess so its peak RSS (`ru_maxrss`) is its own; CPU us/request of every 100k block of
  the stream (flat = linear cost).
- grid: runs per second of a 64-point sweep (2 hw x 2 engines x 4 max_num_seqs x 4 rate scales on
  `workloads/examples/chat.jsonl`) and simulations per second of a capacity plan, both in one
  process (`--workers 1`), so what they measure is the per-run overhead a loaded model/profile/
  preset saves.
- fit: `infersim fit` with no options process wall (issue 39's target: < 2 s, detecting this machine
  and naming what it detected), median of several runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# offered load: ~60% of what the simulated H100 sustains on this mix (measured at commit 8739881's
# profiles: 15.5 req/s saturated, batch ~290; at 9 req/s the mean batch is ~43). Above capacity the
# queue grows without bound and the last block of a long run measures draining the backlog.
RATE_PER_S = 9.0
# the CLI section's 10k trace keeps the rate it was first measured at (issue 17's figures): on the
# a100-80g / llama-2-7b / 128-sequence setup that is a saturated server with a queue and preemptions
CLI_RATE_PER_S = 20.0
BLOCK = 100_000  # requests per block of the per-block cost figures
ROOT = Path(__file__).resolve().parent.parent
CLI_ARGS = ["--hw", "a100-80g", "--model", "llama-2-7b", "--engine", "vllm", "--max-seqs", "128",
            "--max-batched-tokens", "4096", "--block-size", "16"]


def requests(n: int, seed: int = 0, rate_per_s: float = RATE_PER_S, marks: list | None = None):
    """n requests: Poisson arrivals, lognormal prompt (median 1000, sigma 0.6) and output (median
    250, sigma 0.6) lengths, max_tokens = 2 x output (the client's budget, not the true length).
    With `marks`, the CPU time is appended each time another `BLOCK` requests have been pulled
    (the simulator pulls a request when the clock reaches its arrival, so this tracks progress)."""
    from workloads.request import Request

    rng = np.random.default_rng(seed)
    chunk = 100_000
    t0 = 0.0
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        arrivals = t0 + np.cumsum(rng.exponential(1.0 / rate_per_s, m))
        t0 = float(arrivals[-1])
        prompt = np.clip(rng.lognormal(np.log(1000), 0.6, m), 1, 8000).astype(np.int64)
        output = np.clip(rng.lognormal(np.log(250), 0.6, m), 1, 2000).astype(np.int64)
        if marks is not None and start % BLOCK == 0:
            marks.append(time.process_time())
        for i, (a, p, o) in enumerate(zip(arrivals.tolist(), prompt.tolist(), output.tolist())):
            yield Request(str(start + i), a, p, o, 2 * o)


def run_one(n: int, profile: bool) -> dict:
    from sim.catalog.engine_config import load_engine
    from sim.catalog.hardware import load_profile
    from sim.catalog.lookup import get_model
    from sim.cluster.simulate import simulate

    hw, model = load_profile("h100-sxm"), get_model("llama-3.1-8b")
    engine = load_engine("vllm").for_hardware(hw)  # vLLM defaults on an H100: 1024 seqs, 8192 tokens
    marks: list[float] = []
    t = time.perf_counter()
    cpu = time.process_time()
    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        res = prof.runcall(simulate, requests(n, marks=marks), hw=hw, model=model, quant=None, engine=engine)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    else:
        res = simulate(requests(n, marks=marks), hw=hw, model=model, quant=None, engine=engine)
    wall = time.perf_counter() - t
    end_cpu = time.process_time()
    marks.append(end_cpu)
    cpu = end_cpu - cpu
    s = res.summary
    sizes = [min(BLOCK, n - i * BLOCK) for i in range(len(marks) - 1)]
    return {
        "requests": n,
        "wall_s": wall,
        "cpu_s": cpu,
        "sim_requests_per_wall_s": n / wall,
        "events": res.extra["events"],
        "simulated_duration_s": s["duration_s"],
        "batch_mean": s["batch_size"]["mean"],
        "completed": s["requests"]["completed"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        # the last block also carries the summary (percentiles, tables): a step there is not the loop
        "block_us_per_request": [1e6 * (b - a) / k for a, b, k in zip(marks, marks[1:], sizes)],
    }


def _wall(cmd: list[str], repeat: int, **kw) -> list[float]:
    """Process wall of `cmd`, `repeat` times after one untimed run. As installed (pip compiles
    the package), the modules load from bytecode: PYTHONDONTWRITEBYTECODE is dropped so the first
    run writes it, otherwise every run would compile the simulator's sources again (~35 ms)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = []
    for i in range(repeat + 1):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, **kw)
        if i:
            out.append(time.perf_counter() - t)
    return out


def _infersim() -> list[str]:
    exe = Path(sys.executable).parent / "infersim"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "sim.cli"]


def section_startup(repeat: int) -> None:
    walls = _wall(_infersim() + ["--help"], repeat)
    print(f"infersim --help: median {statistics.median(walls):.3f} s, min {min(walls):.3f} s process wall "
          f"over {repeat} runs (target <= 0.25 s)", flush=True)


def section_fit(repeat: int) -> None:
    walls = _wall(_infersim() + ["fit"], repeat)
    print(f"infersim fit (no options: detects this machine): median {statistics.median(walls):.3f} s, "
          f"min {min(walls):.3f} s process wall over {repeat} runs (target < 2 s)", flush=True)


def section_cli(repeat: int) -> None:
    from workloads.trace import write_trace

    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "poisson-10k.jsonl"
        write_trace(requests(10_000, rate_per_s=CLI_RATE_PER_S), trace)
        one = Path(tmp) / "poisson-1.jsonl"
        write_trace(requests(1, rate_per_s=CLI_RATE_PER_S), one)
        cmd = _infersim() + ["run", str(trace), *CLI_ARGS, "--json"]
        walls = _wall(cmd, repeat)
        start = _wall(_infersim() + ["run", str(one), *CLI_ARGS, "--json"], repeat)
    print(f"infersim run (10,000-request trace, Poisson {CLI_RATE_PER_S:g} req/s; {' '.join(CLI_ARGS)}): median {statistics.median(walls):.3f} s, "
          f"min {min(walls):.3f} s process wall over {repeat} runs (target <= 0.6 s)", flush=True)
    print(f"infersim run, the same options on a 1-request trace (start-up): median {statistics.median(start):.3f} s, "
          f"min {min(start):.3f} s process wall over {repeat} runs; load average after {os.getloadavg()[0]:.2f}", flush=True)


def section_sim(sizes: list[int], profile: bool) -> None:
    print(f"workload: Poisson {RATE_PER_S:g} req/s, prompt ~LogN(1000), output ~LogN(250); vllm, h100-sxm, llama-3.1-8b")
    print("cpu us/req = CPU seconds / requests (flat across sizes = linear cost); load = 1-min load average after the run")
    print(f"{'requests':>10} {'wall s':>8} {'cpu s':>8} {'cpu us/req':>10} {'req/s':>9} {'events':>9} {'events/req':>10} "
          f"{'batch':>6} {'peak MB':>8} {'load':>5}")
    rows = []
    for n in sizes:
        cmd = [sys.executable, __file__, "--child", str(n)] + (["--profile"] if profile else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        if profile:
            sys.stderr.write(out.stderr)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(f"{r['requests']:>10,} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f} {1e6 * r['cpu_s'] / r['requests']:>10.1f} "
              f"{r['sim_requests_per_wall_s']:>9,.0f} {r['events']:>9,} {r['events'] / r['requests']:>10.2f} "
              f"{r['batch_mean']:>6.1f} {r['peak_rss_mb']:>8.0f} {os.getloadavg()[0]:>5.2f}", flush=True)
    for r in rows:
        if r["requests"] > BLOCK:
            blocks = " ".join(f"{x:.1f}" for x in r["block_us_per_request"])
            print(f"{r['requests']:,} requests, cpu us/request per {BLOCK:,}-request block (last includes the summary): {blocks}")
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        growth = (b["cpu_s"] / a["cpu_s"]) / (b["requests"] / a["requests"])
        print(f"CPU time per request, largest vs smallest run: x{growth:.2f} (1.0 = linear)")


SWEEP_YAML = """name: simspeed grid
trace: {trace}
model: llama-3.1-8b
grid:
  hw: [h100-sxm, a100-80g]
  engine: [vllm, sglang]
  max_seqs: [16, 32, 64, 128]
  rate_scale: [0.5, 1, 2, 4]
"""


def section_grid(repeat: int) -> None:
    from sim.plan.executors import SerialExecutor
    from sim.plan.planner import SLO, Candidate, SearchSettings, run_plan
    from sim.plan.runner import run_sweep
    from sim.plan.sweep import load_sweep
    from sim.plan.workload import trace_stats

    trace = ROOT / "workloads" / "examples" / "chat.jsonl"
    trace_stats(str(trace))  # read once, as the commands do before their runs
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "grid.yaml"
        path.write_text(SWEEP_YAML.format(trace=trace))
        rates = []
        for i in range(repeat):
            spec = load_sweep(path)
            t = time.perf_counter()
            res = run_sweep(spec, Path(tmp) / f"out{i}", SerialExecutor(), report=False,
                            console=__import__("rich.console").console.Console(file=open(os.devnull, "w")))
            wall = time.perf_counter() - t
            assert res.failed == 0 and len(res.frame) == 64, (res.failed, len(res.frame))
            rates.append(64 / wall)
        print(f"sweep, 64-point grid ({len(spec.combinations)} runs of {trace.name}, 200 requests each, "
              f"in-process): {statistics.median(rates):.1f} runs/s (median of {repeat})", flush=True)
        cands = [Candidate(hw=h, engine=e) for h in ("h100-sxm", "a100-80g") for e in ("vllm", "sglang")]
        rates = []
        for _ in range(repeat):
            t = time.perf_counter()
            plan = run_plan(trace=str(trace), candidates=cands, slo=SLO(ttft_p90_s=0.5), target_rps=10.0,
                            settings=SearchSettings(), executor=SerialExecutor())
            wall = time.perf_counter() - t
            sims = sum(c.get("simulations") or 0 for c in plan["candidates"])
            rates.append(sims / wall)
        print(f"plan, {len(cands)} candidates x bisection ({sims} simulations of {trace.name}, in-process): "
              f"{statistics.median(rates):.1f} simulations/s (median of {repeat})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="startup,fit,cli,sim,grid",
                    help="comma-separated sections: startup,fit,cli,sim,grid")
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--repeat", type=int, default=5, help="runs of the start-up and CLI timings")
    ap.add_argument("--profile", action="store_true", help="cProfile the sim runs (top 25 by own time, on stderr)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child, args.profile)))
        return
    load = os.getloadavg()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    print(f"machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"(shared: timings are noisy); commit {commit or '?'}; python {sys.version.split()[0]}")
    only = set(args.only.split(","))
    if "startup" in only:
        section_startup(args.repeat)
    if "fit" in only:
        section_fit(args.repeat)
    if "cli" in only:
        section_cli(args.repeat)
    if "sim" in only:
        section_sim([int(x) for x in args.sizes.split(",")], args.profile)
    if "grid" in only:
        section_grid(max(1, min(args.repeat, 3)))


if __name__ == "__main__":
    main()
