"""How fast is the simulator? Wall time, simulated requests per second and peak memory.

Workload (the issue's): Poisson arrivals, prompt lengths lognormal around 1,000 tokens, outputs
lognormal around 250, on the `vllm` preset, `h100-sxm`, `llama-3.1-8b` (bf16). Requests are
streamed from a generator, as `infersim run` streams a trace file.

    .venv/bin/python benchmarks/simspeed.py                 # 10k, 100k, 1M
    .venv/bin/python benchmarks/simspeed.py --sizes 10000 --profile

Targets (issue 3, on a 2-core machine): 100k requests < 10 s, 1M < 100 s within 2 GB, cost
growing no faster than linearly. Each size runs in a fresh subprocess so its peak RSS
(`resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`) is its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

RATE_PER_S = 20.0  # offered load: ~60% of what the simulated H100 sustains on this mix (batch ~40-50)


def requests(n: int, seed: int = 0, rate_per_s: float = RATE_PER_S):
    """n requests: Poisson arrivals, lognormal prompt (median 1000, sigma 0.6) and output (median
    250, sigma 0.6) lengths, max_tokens = 2 x output (the client's budget, not the true length)."""
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
        for i, (a, p, o) in enumerate(zip(arrivals.tolist(), prompt.tolist(), output.tolist())):
            yield Request(str(start + i), a, p, o, 2 * o)


def run_one(n: int, profile: bool) -> dict:
    from sim.engine_config import load_engine
    from sim.hardware import load_profile
    from sim.models import get_model
    from sim.simulate import simulate

    hw, model = load_profile("h100-sxm"), get_model("llama-3.1-8b")
    engine = load_engine("vllm").for_hardware(hw)  # vLLM defaults on an H100: 1024 seqs, 8192 tokens
    t = time.perf_counter()
    cpu = time.process_time()
    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        res = prof.runcall(simulate, requests(n), hw=hw, model=model, quant=None, engine=engine)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    else:
        res = simulate(requests(n), hw=hw, model=model, quant=None, engine=engine)
    wall = time.perf_counter() - t
    cpu = time.process_time() - cpu
    s = res.summary
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
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--profile", action="store_true", help="cProfile the run (top 25 by own time, on stderr)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child, args.profile)))
        return
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (shared: timings are noisy)")
    print(f"workload: Poisson {RATE_PER_S:g} req/s, prompt ~LogN(1000), output ~LogN(250); vllm, h100-sxm, llama-3.1-8b")
    print("cpu us/req = CPU seconds / requests (flat across sizes = linear cost); load = 1-min load average after the run")
    print(f"{'requests':>10} {'wall s':>8} {'cpu s':>8} {'cpu us/req':>10} {'req/s':>9} {'events':>9} {'events/req':>10} "
          f"{'batch':>6} {'peak MB':>8} {'load':>5}")
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        cmd = [sys.executable, __file__, "--child", str(n)] + (["--profile"] if args.profile else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        if args.profile:
            sys.stderr.write(out.stderr)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(f"{r['requests']:>10,} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f} {1e6 * r['cpu_s'] / r['requests']:>10.1f} "
              f"{r['sim_requests_per_wall_s']:>9,.0f} {r['events']:>9,} {r['events'] / r['requests']:>10.2f} "
              f"{r['batch_mean']:>6.1f} {r['peak_rss_mb']:>8.0f} {os.getloadavg()[0]:>5.2f}", flush=True)
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        growth = (b["cpu_s"] / a["cpu_s"]) / (b["requests"] / a["requests"])
        print(f"CPU time per request, largest vs smallest run: x{growth:.2f} (1.0 = linear)")


if __name__ == "__main__":
    main()
