"""Client-overhead sweep: bench.py's httpx loop and vllm-bench-serve's aiohttp loop against the mock engine.

For each client and each concurrency C it starts a fresh mock_server.py process (stdlib only), runs the
client in a process of its own (`--client-python`, a throw-away venv with httpx and aiohttp) for 8 x C
requests of 256 tokens, reads the server's per-request log (`GET /stats`) and prints per C:

- client TTFT: median over requests of first `data:` chunk - t0 (the client's own definition);
- server TTFT: median of first token chunk written - whole request received (the mock engine's share:
  waiting for the next step plus `--prefill-ms`);
- client - server: the difference of the two medians, the client's and the loopback transport's share;
- send / recv: medians over requests matched by id of server received - client t0 (building and
  sending the request, opening a connection if one must be opened) and client first chunk - server wrote
  it (delivering and parsing the first chunk);
- CPU seconds of the client and the server process, the server's step lateness (p50 / p99: how late its
  step timer fired, i.e. how busy the server's own event loop was) and the client-measured inter-token
  latency (mean of (end - first) / (tokens - 1)) against the server's step.

Then, per client, the least-squares slope through the lowest load (as benchmarks/knee_split.py: of
y - y(lowest C) against C - lowest C) of the client TTFT and of client - server, in ms per concurrent
stream: the figure docs/ttft-misses.md §7 gives for waynehacking8's curves (1.2-2.3 ms).

    python benchmarks/client_overhead/sweep.py --client-python /tmp/venv/bin/python [--clients bench_httpx]
        [--concurrency 1,2,4,8,16,32,64,128] [--step-ms vllm_h100] [--max-tokens 256] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))

# Engine step per C: the client-measured inter-token latency p50 of waynehacking8's vLLM Llama-3.1-8B curve
# (results/vllm_llama31-c{1,4,16,32,64,128}.json at 208b7ed: itl_p50_ms), interpolated in log C in between.
# It sets how many chunks per second reach the client at each C as on that host (19.7k tok/s at C = 128).
VLLM_ITL_P50_MS = {1: 4.04, 4: 4.14, 16: 4.34, 32: 4.45, 64: 4.85, 128: 5.55}


def step_ms_for(c: int, spec: str) -> float:
    """The mock engine's step at concurrency c: a fixed number of ms, or 'vllm_h100' (the table above)."""
    if spec != "vllm_h100":
        return float(spec)
    pts = sorted(VLLM_ITL_P50_MS.items())
    if c <= pts[0][0]:
        return pts[0][1]
    for (c0, v0), (c1, v1) in zip(pts, pts[1:]):
        if c <= c1:
            w = (math.log(c) - math.log(c0)) / (math.log(c1) - math.log(c0))
            return v0 + w * (v1 - v0)
    return pts[-1][1]


def slope_through_lowest(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of y - y0 against x - x0 through the origin (x0, y0: the lowest x's point)."""
    i0 = min(range(len(xs)), key=xs.__getitem__)
    num = sum((x - xs[i0]) * (y - ys[i0]) for x, y in zip(xs, ys))
    den = sum((x - xs[i0]) ** 2 for x in xs)
    return num / den if den else float("nan")


def start_server(step_ms: float, prefill_ms: float, python: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([python, os.path.join(HERE, "mock_server.py"), "--port", "0",
                             "--step-ms", f"{step_ms}", "--prefill-ms", f"{prefill_ms}"],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().split()
    if not line or line[0] != "PORT":
        proc.kill()
        raise RuntimeError("mock server did not start")
    return proc, int(line[1])


def fetch_stats(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=30) as r:
        return json.loads(r.read())


def pctl(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1)))] if s else float("nan")


def run_point(client: str, c: int, total: int, max_tokens: int, step_ms: float, prefill_ms: float,
              client_python: str, server_python: str) -> dict:
    """One closed-loop run: fresh server, the client process, the server's log; medians in ms."""
    server, port = start_server(step_ms, prefill_ms, server_python)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "client.json")
            subprocess.run([client_python, os.path.join(HERE, "clients.py"), "--client", client,
                            "--base", f"http://127.0.0.1:{port}", "--concurrency", str(c), "--total", str(total),
                            "--max-tokens", str(max_tokens), "--out", out], check=True)
            with open(out) as fh:
                cl = json.load(fh)
        st = fetch_stats(port)
    finally:
        server.terminate()
        server.wait()
    recs = cl["records"]
    srv = {r["rid"]: r for r in st["records"]}
    assert all(r["tokens"] == max_tokens for r in recs), "a stream did not deliver max_tokens tokens"
    matched = [(r, srv[r["rid"]]) for r in recs if r["rid"] in srv]
    assert len(matched) == total, f"{len(matched)} of {total} client requests found in the server log"
    ms = 1000.0
    client_ttft = [(r["first_s"] - r["t0_s"]) * ms for r, _ in matched]
    server_ttft = [(s["first_s"] - s["recv_s"]) * ms for _, s in matched]
    itl = [(r["end_s"] - r["first_s"]) / (r["tokens"] - 1) * ms for r, _ in matched if r["tokens"] > 1]
    return {
        "client": client, "concurrency": c, "requests": total, "max_tokens": max_tokens, "step_ms": step_ms,
        "prefill_ms": prefill_ms,
        "client_ttft_ms": statistics.median(client_ttft), "server_ttft_ms": statistics.median(server_ttft),
        "send_ms": statistics.median((s["recv_s"] - r["t0_s"]) * ms for r, s in matched),
        "recv_ms": statistics.median((r["first_s"] - s["first_s"]) * ms for r, s in matched),
        "client_ttft_p99_ms": pctl(client_ttft, 0.99),
        # causality on the shared clock, per request: client t0 <= received, written <= client first token
        "send_min_ms": min((s["recv_s"] - r["t0_s"]) * ms for r, s in matched),
        "recv_min_ms": min((r["first_s"] - s["first_s"]) * ms for r, s in matched),
        "server_ttft_min_ms": min(server_ttft),
        "client_itl_mean_ms": statistics.mean(itl) if itl else float("nan"),
        "client_cpu_s": cl["cpu_s"], "client_wall_s": cl["wall_s"],
        "server_cpu_s": st["cpu_user_s"] + st["cpu_sys_s"], "connections": st["connections"] - 1,  # less /stats's own
        "step_late_p50_ms": pctl(st["late_s"], 0.5) * ms, "step_late_p99_ms": pctl(st["late_s"], 0.99) * ms,
        "versions": cl["versions"], "python": cl["python"],
    }


def machine() -> str:
    model = "?"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = os.getloadavg()
    return (f"{platform.node()} {model}, nproc {os.cpu_count()}, load average {load[0]:.2f} {load[1]:.2f} "
            f"{load[2]:.2f}, Python {platform.python_version()}")


def speed_reference_ms() -> tuple[float, float]:
    """A single-core Python speed reference: ms for 100,000 json.loads of one vLLM-sized completion chunk
    (best of 3), wall and CPU time (CPU: the core's speed; wall - CPU: time this process waited for a core),
    so a reader can run this on another host and scale the figures here by the ratio."""
    chunk = json.dumps({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "mock-engine",
                        "choices": [{"index": 0, "text": " tok", "logprobs": None, "finish_reason": None,
                                     "stop_reason": None}], "usage": None})
    best = (float("inf"), float("inf"))
    for _ in range(3):
        t, cpu = time.perf_counter(), time.process_time()
        for _ in range(100_000):
            json.loads(chunk)
        best = min(best, (time.perf_counter() - t, time.process_time() - cpu))
    return best[0] * 1000.0, best[1] * 1000.0


def speed_line() -> str:
    wall, cpu = speed_reference_ms()
    return f"100,000 json.loads of a completion chunk, best of 3: {wall:.0f} ms wall, {cpu:.0f} ms CPU"


def print_table(rows: list[dict]) -> None:
    print("| C | step ms | client TTFT p50 | server TTFT p50 | client - server | send | recv | client ITL | "
          "client CPU s / wall s | client CPU us/token | server CPU s | step late p50 / p99 | TCP connections |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['step_ms']:.2f} | {r['client_ttft_ms']:.2f} | {r['server_ttft_ms']:.2f} | "
              f"{r['client_ttft_ms'] - r['server_ttft_ms']:.2f} | {r['send_ms']:.2f} | {r['recv_ms']:.2f} | "
              f"{r['client_itl_mean_ms']:.2f} | {r['client_cpu_s']:.2f} / {r['client_wall_s']:.2f} | "
              f"{r['client_cpu_s'] / (r['requests'] * r['max_tokens']) * 1e6:.1f} | "
              f"{r['server_cpu_s']:.2f} | {r['step_late_p50_ms']:.2f} / {r['step_late_p99_ms']:.2f} | "
              f"{r['connections']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--client-python", default=sys.executable, help="a python with httpx and aiohttp")
    ap.add_argument("--server-python", default=sys.executable)
    ap.add_argument("--clients", default="bench_httpx,vllm_aiohttp")
    ap.add_argument("--concurrency", default="1,2,4,8,16,32,64,128")
    ap.add_argument("--requests-per-c", type=int, default=8, help="requests = this x C (bench.py's sweep: 8)")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--step-ms", default="vllm_h100", help="ms, or vllm_h100 (the ITL of the measured curve)")
    ap.add_argument("--step-scale", type=float, default=1.0,
                    help="multiply every step by k: the same client against a k times lower chunk rate; the "
                         "slopes are also printed / k, the host-equivalent figure only if the growth followed the "
                         "chunk rate (README.md: it does not)")
    ap.add_argument("--prefill-ms", type=float, default=0.0)
    ap.add_argument("--json", help="write every row here")
    a = ap.parse_args()
    cs = [int(x) for x in a.concurrency.split(",")]
    print("machine:", machine())
    print("speed reference:", speed_line())
    rows = []
    for client in a.clients.split(","):
        crow = []
        for c in cs:
            t = time.perf_counter()
            row = run_point(client, c, a.requests_per_c * c, a.max_tokens, a.step_scale * step_ms_for(c, a.step_ms),
                            a.prefill_ms, a.client_python, a.server_python)
            print(f"  {client} C={c}: {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
            crow.append(row)
        rows.extend(crow)
        print(f"\n{client} ({', '.join(f'{k} {v}' for k, v in crow[0]['versions'].items())}; "
              f"Python {crow[0]['python']}), {a.requests_per_c} x C requests of {a.max_tokens} tokens, "
              f"prefill {a.prefill_ms} ms, step x {a.step_scale:g}; times in ms")
        print_table(crow)
        xs = [r["concurrency"] for r in crow]
        s_client = slope_through_lowest(xs, [r["client_ttft_ms"] for r in crow])
        s_diff = slope_through_lowest(xs, [r["client_ttft_ms"] - r["server_ttft_ms"] for r in crow])
        s_server = slope_through_lowest(xs, [r["server_ttft_ms"] for r in crow])
        print(f"slope through the lowest load, ms per concurrent stream: client TTFT {s_client:.3f}, "
              f"server TTFT {s_server:.3f}, client - server {s_diff:.3f}"
              + (f"; / {a.step_scale:g}: client TTFT {s_client / a.step_scale:.3f}, client - server "
                 f"{s_diff / a.step_scale:.3f}" if a.step_scale != 1 else ""))
    print("machine after:", machine())
    print("speed reference after:", speed_line())
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
