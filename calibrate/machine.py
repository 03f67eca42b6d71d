"""Raw machine probes and a description of the machine: what the hardware can do without llama.cpp.

The fitted cost-model rates (effective bandwidth, effective FLOP/s) become *efficiencies* only
when divided by something the machine can do at best. These probes measure that "best" the way
the classic benchmarks do, so the ratio transfers to another machine's datasheet figure:

- memory bandwidth: a STREAM-style copy (McCalpin, STREAM, https://www.cs.virginia.edu/stream/):
  `dst[:] = src` over arrays far larger than the last-level cache, split across threads (numpy
  releases the GIL in plain array copies), counting 2 x bytes per copy (one read + one write, the
  STREAM convention, which ignores the write-allocate read). Best of the repeats, as STREAM reports.
- matmul throughput: a square fp32 GEMM through numpy's BLAS (`a @ b`), 2 n³ FLOPs, best of the
  repeats: the sustained dense fp32 rate a well-tuned kernel reaches on this machine.

Best-of rather than median: these are "peak" figures, and on a shared machine the best repeat is
the one least disturbed by other processes.
"""

from __future__ import annotations

import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class RawRates:
    """What the machine can do at best, measured here."""

    memory_bandwidth_bytes_per_s: float
    matmul_fp32_flops_per_s: float
    bandwidth_array_bytes: int
    bandwidth_threads: int
    matmul_n: int
    bandwidth_samples_bytes_per_s: tuple[float, ...]
    matmul_samples_flops_per_s: tuple[float, ...]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["bandwidth_samples_bytes_per_s"] = list(self.bandwidth_samples_bytes_per_s)
        d["matmul_samples_flops_per_s"] = list(self.matmul_samples_flops_per_s)
        return d


def measure_memory_bandwidth(
    array_bytes: int = 256 * 2**20, threads: int | None = None, repeats: int = 5
) -> tuple[float, tuple[float, ...]]:
    """STREAM-copy bandwidth in bytes/s: best of `repeats` copies of an `array_bytes` array.

    Each thread copies its own contiguous slice so all cores pull on memory at once, as the
    llama.cpp worker threads do during decode. Returns (best, all samples).
    """
    threads = threads or available_threads()
    n = array_bytes // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
    bounds = np.linspace(0, n, threads + 1, dtype=np.int64)
    slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]

    def copy(s: slice) -> None:
        dst[s] = src[s]

    samples = []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(copy, slices))  # warm-up: fault the pages in
        for _ in range(repeats):
            t0 = time.perf_counter()
            list(pool.map(copy, slices))
            dt = time.perf_counter() - t0
            samples.append(2.0 * src.nbytes / dt)
    return max(samples), tuple(samples)


def measure_matmul_flops(n: int = 2048, repeats: int = 5) -> tuple[float, tuple[float, ...]]:
    """Dense fp32 GEMM rate in FLOP/s through numpy's BLAS: 2 n³ / time, best of `repeats`."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b  # warm-up: BLAS thread pool start, page faults
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        dt = time.perf_counter() - t0
        samples.append(2.0 * n**3 / dt)
    return max(samples), tuple(samples)


def measure_raw_rates(*, quick: bool = False, threads: int | None = None) -> RawRates:
    """Both raw probes. Quick mode uses a smaller GEMM and fewer repeats (still > L3-sized arrays)."""
    threads = threads or available_threads()
    array_bytes = (128 if quick else 256) * 2**20
    n = 1024 if quick else 2048
    repeats = 3 if quick else 5
    bw, bw_samples = measure_memory_bandwidth(array_bytes, threads, repeats)
    fl, fl_samples = measure_matmul_flops(n, repeats)
    return RawRates(bw, fl, array_bytes, threads, n, bw_samples, fl_samples)


# ---- describing the machine ----------------------------------------------------------------------


def available_threads() -> int:
    """Hardware threads this process may run on (affinity-aware where the OS tells us)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def _cpuinfo() -> dict[str, str]:
    """The first processor block of /proc/cpuinfo (Linux); empty elsewhere."""
    p = Path("/proc/cpuinfo")
    out: dict[str, str] = {}
    if p.is_file():
        for line in p.read_text().splitlines():
            if not line.strip():
                if out:
                    break
                continue
            key, _, value = line.partition(":")
            out[key.strip()] = value.strip()
    return out


def physical_cores() -> int:
    """Distinct (physical id, core id) pairs in /proc/cpuinfo; falls back to the thread count."""
    p = Path("/proc/cpuinfo")
    if p.is_file():
        cores, phys = set(), "0"
        for line in p.read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "physical id":
                phys = value.strip()
            elif key == "core id":
                cores.add((phys, value.strip()))
        if cores:
            return len(cores)
    return os.cpu_count() or 1


def total_memory_bytes() -> int | None:
    """MemTotal from /proc/meminfo, or sysconf pages x page size; None if neither is available."""
    p = Path("/proc/meminfo")
    if p.is_file():
        for line in p.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return None


def describe_machine() -> dict:
    """CPU name, cores, threads, RAM, OS: the provenance block of a calibrated profile."""
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    simd = [f for f in ("avx512_vnni", "avx512_bf16", "avx512f", "avx2", "fma", "f16c", "neon", "asimd") if f in flags]
    return {
        "cpu": info.get("model name") or platform.processor() or platform.machine(),
        "cpu_vendor": info.get("vendor_id", ""),
        "physical_cores": physical_cores(),
        "threads_available": available_threads(),
        "simd": simd,
        "memory_bytes": total_memory_bytes(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


@dataclass(frozen=True)
class CpuTimes:
    """The machine's cumulative CPU time by state, from the first line of /proc/stat (Linux).

    Fields in clock ticks: user, nice, system, idle, iowait, irq, softirq, steal (proc(5)). `steal`
    is time a virtual CPU was ready to run while the hypervisor ran something else: on a shared
    VM it stretches every measured step without showing in the process's own CPU time.
    """

    ticks: tuple[int, ...] | None

    @classmethod
    def now(cls) -> "CpuTimes":
        try:
            first = Path("/proc/stat").read_text().splitlines()[0].split()
        except (OSError, IndexError):
            return cls(None)
        if first[0] != "cpu" or len(first) < 9:
            return cls(None)
        return cls(tuple(int(x) for x in first[1:9]))

    def steal_share_since(self, earlier: "CpuTimes") -> float | None:
        """Stolen share of all CPU time between `earlier` and this reading (None off Linux)."""
        if self.ticks is None or earlier.ticks is None:
            return None
        delta = [a - b for a, b in zip(self.ticks, earlier.ticks)]
        total = sum(delta)
        return delta[7] / total if total > 0 else 0.0


def measure_raw_rates_isolated(*, threads: int, quick: bool = False, timeout_s: float = 300.0) -> RawRates:
    """`measure_raw_rates` in a child process whose BLAS uses exactly `threads` threads.

    BLAS libraries fix their thread count when they load, so a fresh process with
    OPENBLAS/OMP/MKL_NUM_THREADS set is the reliable way to measure the peak of the same number
    of cores llama.cpp is given — the efficiency fitted/peak is then about the kernels, not about
    how many cores were used.
    """
    import json
    import subprocess
    import sys

    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        env[var] = str(threads)
    args = [sys.executable, "-m", "calibrate.machine", "--threads", str(threads)] + (["--quick"] if quick else [])
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        raise RuntimeError(f"raw machine probe failed: {out.stderr.strip()[-500:]}")
    d = json.loads(out.stdout)
    d["bandwidth_samples_bytes_per_s"] = tuple(d["bandwidth_samples_bytes_per_s"])
    d["matmul_samples_flops_per_s"] = tuple(d["matmul_samples_flops_per_s"])
    return RawRates(**d)


if __name__ == "__main__":
    import argparse
    import json

    ap = argparse.ArgumentParser(description="raw memory-bandwidth and fp32 GEMM probes (JSON on stdout)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    print(json.dumps(measure_raw_rates(quick=a.quick, threads=a.threads).to_dict()))
