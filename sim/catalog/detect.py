"""What machine is this? Detect the accelerator and memory, and pick or build its hardware profile.

`infersim fit` and `infersim recommend` without `--hw` call `detect_profile()`, which asks, in order
and each with a short timeout (the whole detection stays well under a second when a tool is absent):

1. `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits` (NVIDIA GPUs, DGX Spark,
   Jetson Thor: `memory.total` reads `[N/A]` on unified-memory parts);
2. `rocm-smi --showproductname --showmeminfo vram --json` (AMD Instinct / Radeon);
3. on macOS, `sysctl -n machdep.cpu.brand_string hw.memsize` and `system_profiler SPDisplaysDataType
   -json` (Apple silicon: chip name, unified memory, GPU cores);
4. on Linux, `/proc/meminfo` (MemTotal) and `lscpu` (model name, CPUs) for CPUs and APUs.

The parsers are plain functions of the tools' text (tests feed them recorded outputs,
tests/data/detect/). `match_profile` maps the detected name onto a shipped profile through
`NAME_TO_PROFILE` (first pattern that matches), keeping the profile's datasheet figures and, where
the measured memory differs from the profile's (a 64 GB M4 Max, a 64 GB Strix Halo box), replacing
only the memory — and says which it did. A machine with no known accelerator gets a CPU profile
built from `cpu-x86-generic` with the measured memory and core count, and says so.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from sim.catalog.hardware import HardwareProfile, load_profile

GiB = 2**30

# detected device name (case-insensitive regex) -> shipped profile; first match wins, so the more
# specific names come first. Apple chips with fewer GPU cores than the profile's are named by
# `_apple_profile`.
NAME_TO_PROFILE: list[tuple[str, str]] = [
    (r"GB300", "gb300"), (r"GB200", "gb200"), (r"\bB300\b", "b300"), (r"\bB200\b", "b200"),
    (r"H100.*PCIe|H100 PCIe", "h100-pcie"), (r"H100", "h100-sxm"), (r"H200", "h200"), (r"\bH20\b", "h20"),
    (r"A100.*40\s?GB|A100-SXM4-40GB|A100-PCIE-40GB", "a100-40g"), (r"A100", "a100-80g"),
    (r"L40S", "l40s"), (r"\bL20\b", "l20"), (r"\bL4\b", "l4"),
    (r"RTX PRO 6000", "rtx-pro-6000"), (r"RTX 5090", "rtx-5090"), (r"RTX 5080", "rtx-5080"),
    (r"RTX 5070 Ti", "rtx-5070-ti"), (r"RTX 4090", "rtx-4090"), (r"RTX 3090", "rtx-3090"),
    (r"\bGB10\b|DGX Spark", "dgx-spark"), (r"\bThor\b", "jetson-agx-thor"),
    (r"MI355X", "mi355x"), (r"MI350X", "mi350x"), (r"MI325X", "mi325x"), (r"MI300X", "mi300x"),
    (r"RYZEN AI MAX\+? (PRO )?395", "ryzen-ai-max-395"),
    (r"Apple M5 Max", "apple-m5-max"), (r"Apple M5 Pro", "apple-m5-pro"), (r"Apple M5\b", "apple-m5"),
    (r"Apple M4 Max", "apple-m4-max"), (r"Apple M4 Pro", "apple-m4-pro"),
    (r"Apple M3 Ultra", "apple-m3-ultra"), (r"Apple M3 Max", "apple-m3-max"),
    (r"Apple M2 Ultra", "apple-m2-ultra"), (r"Apple M2 Max", "apple-m2-max"),
    (r"Apple M1 Ultra", "apple-m1-ultra"), (r"Apple M1 Max", "apple-m1-max"),
]
CPU_FALLBACK = "cpu-x86-generic"
# Strix Halo and other APUs report MemTotal without the BIOS carve-out for the GPU: the machine's
# memory is the next size up of the ones these boxes ship with
APU_MEMORY_GIB = (32, 64, 96, 128)


@dataclass
class Detected:
    """What the tools said: the accelerator's name, its memory, how many, and the host's."""

    source: str = ""                 # the tool that named the device ("nvidia-smi", "rocm-smi", "sysctl", "lscpu")
    device: str = ""                 # device or chip name as printed
    count: int = 0                   # accelerators of that name (0: CPU only)
    device_memory_bytes: float | None = None   # per accelerator, as the driver reports it
    host_memory_bytes: float | None = None     # /proc/meminfo MemTotal or hw.memsize
    cpu: str = ""                    # lscpu model name / machdep.cpu.brand_string
    cpu_cores: int = 0
    gpu_cores: int = 0               # Apple: system_profiler sppci_cores
    notes: list[str] = field(default_factory=list)


# ---- parsers of the tools' outputs ---------------------------------------------------------------

def parse_nvidia_smi(text: str) -> tuple[str, int, float | None]:
    """(name, count, memory bytes per GPU or None) from `--query-gpu=name,memory.total --format=csv,noheader,nounits`
    (MiB; `[N/A]` on unified-memory parts). The first GPU's name; count of GPUs with that name."""
    rows = [[c.strip() for c in line.split(",")] for line in text.strip().splitlines() if line.strip()]
    if not rows:
        return "", 0, None
    name = rows[0][0]
    mem = rows[0][1] if len(rows[0]) > 1 else ""
    mib = float(mem) if re.fullmatch(r"\d+(\.\d+)?", mem) else None
    return name, sum(1 for r in rows if r[0] == name), (mib * 2**20 if mib else None)


def parse_rocm_smi(text: str) -> tuple[str, int, float | None]:
    """(name, count, VRAM bytes per GPU) from `rocm-smi --showproductname --showmeminfo vram --json`."""
    data = json.loads(text)
    cards = [v for k, v in data.items() if k.startswith("card") and isinstance(v, dict)]
    if not cards:
        return "", 0, None
    name = cards[0].get("Card Series") or cards[0].get("Card series") or cards[0].get("Card model", "")
    vram = cards[0].get("VRAM Total Memory (B)")
    return str(name), sum(1 for c in cards if (c.get("Card Series") or c.get("Card series")) == name), (
        float(vram) if vram else None)


def parse_meminfo(text: str) -> float | None:
    """MemTotal in bytes from /proc/meminfo (kB)."""
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.M)
    return float(m.group(1)) * 1024 if m else None


def parse_lscpu(text: str) -> tuple[str, int]:
    """(model name, physical cores) from `lscpu`: CPU(s) / Thread(s) per core."""
    fields = dict((k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in text.splitlines()) if v)
    cpus = int(fields.get("CPU(s)", "0") or 0)
    per_core = int(fields.get("Thread(s) per core", "1") or 1)
    return fields.get("Model name", ""), cpus // max(per_core, 1)


def parse_sysctl(text: str) -> tuple[str, float | None]:
    """(chip, memory bytes) from `sysctl -n machdep.cpu.brand_string hw.memsize` (two lines)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    chip = lines[0] if lines else ""
    mem = float(lines[1]) if len(lines) > 1 and lines[1].isdigit() else None
    return chip, mem


def parse_system_profiler(text: str) -> int:
    """GPU cores of the first display adapter in `system_profiler SPDisplaysDataType -json` (0 if absent)."""
    try:
        items = json.loads(text).get("SPDisplaysDataType") or []
    except json.JSONDecodeError:
        return 0
    cores = str(items[0].get("sppci_cores", "")) if items else ""
    return int(cores) if cores.isdigit() else 0


# ---- running the tools ---------------------------------------------------------------------------

Runner = Callable[[list[str]], "str | None"]


def run_tool(cmd: list[str], timeout_s: float = 1.5) -> str | None:
    """A tool's stdout, or None when it is missing, fails or takes longer than `timeout_s`."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 and out.stdout.strip() else None


def read_text(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def detect_machine(run: Runner = run_tool, read: Callable[[str], "str | None"] = read_text,
                   platform: str = sys.platform) -> Detected:
    """Ask the tools (module docstring) and return what they said."""
    d = Detected()
    if platform == "darwin":
        chip, mem = parse_sysctl(run(["sysctl", "-n", "machdep.cpu.brand_string", "hw.memsize"]) or "")
        d.cpu, d.host_memory_bytes = chip, mem
        if chip.startswith("Apple"):
            d.source, d.device, d.count, d.device_memory_bytes = "sysctl", chip, 1, mem
            d.gpu_cores = parse_system_profiler(run(["system_profiler", "SPDisplaysDataType", "-json"]) or "")
        return d
    d.host_memory_bytes = parse_meminfo(read("/proc/meminfo") or "")
    d.cpu, d.cpu_cores = parse_lscpu(run(["lscpu"]) or "")
    text = run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"])
    if text:
        d.device, d.count, d.device_memory_bytes = parse_nvidia_smi(text)
        d.source = "nvidia-smi"
        return d
    text = run(["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"])
    if text:
        try:
            name, count, vram = parse_rocm_smi(text)
        except (json.JSONDecodeError, AttributeError):
            name, count, vram = "", 0, None
        if name and _lookup(name):  # an Instinct card; an APU's iGPU is named by its CPU below
            d.source, d.device, d.count, d.device_memory_bytes = "rocm-smi", name, count, vram
            return d
        if vram:
            d.notes.append(f"rocm-smi: GPU '{name}' with {vram / GiB:.1f} GiB of VRAM carve-out")
            d.device_memory_bytes = vram
    if d.cpu and _lookup(d.cpu):  # an APU (Strix Halo) named by its CPU
        d.source, d.device, d.count = "lscpu", d.cpu, 1
    return d


# ---- matching ------------------------------------------------------------------------------------

def _lookup(name: str) -> str | None:
    for pattern, profile in NAME_TO_PROFILE:
        if re.search(pattern, name, re.I):
            return profile
    return None


def _with_memory(p: HardwareProfile, gib: float, why: str) -> HardwareProfile:
    data = p.model_dump()
    data.update(memory_capacity_gib=round(gib, 2), memory_capacity_gb=None, memory_reported_gib=None,
                name=f"{p.name}-{gib:.0f}g", notes=f"{p.notes}; {why}" if p.notes else why)
    return HardwareProfile.model_validate(data)


def match_profile(d: Detected) -> tuple[HardwareProfile, str]:
    """(profile, one line saying what was detected and whether the profile is shipped or built)."""
    seen = f"{d.device} x{d.count}" if d.count > 1 else d.device
    name = _lookup(d.device) if d.device else None
    if name is not None:
        p = load_profile(name)
        how = f"detected {seen} via {d.source} -> shipped profile {name}"
        if p.kind == "unified-soc":
            mem = d.device_memory_bytes or d.host_memory_bytes
            if p.vendor == "AMD" and d.source == "lscpu":
                # an APU: MemTotal leaves out the GPU's carve-out (rocm-smi's VRAM): the next size these
                # boxes ship with above the two together
                seen_bytes = (d.host_memory_bytes or 0) + (d.device_memory_bytes or 0)
                mem = next((g * GiB for g in APU_MEMORY_GIB if g * GiB >= seen_bytes * 0.98), seen_bytes) or None
            if mem and abs(mem - p.memory_bytes) > 0.05 * p.memory_bytes:
                p = _with_memory(p, mem / GiB, f"memory {mem / GiB:.0f} GiB as measured ({d.source})")
                how = (f"detected {seen} via {d.source} -> profile {name}'s datasheet figures with the measured "
                       f"{mem / GiB:.0f} GiB (built: {p.name})")
        elif d.device_memory_bytes and d.device_memory_bytes > p.memory_bytes * 1.05:
            p = _with_memory(p, d.device_memory_bytes / GiB, f"{d.device_memory_bytes / GiB:.0f} GiB as measured")
            how += f", memory as measured ({p.memory_bytes / GiB:.0f} GiB)"
        if d.count > 1:
            how += (f"; {d.count} found: memory figures are per device, a model may be split over up to "
                    f"{d.count} (--tp)")
        return p, how
    # no known accelerator: the CPU with the measured memory and cores
    base = load_profile(CPU_FALLBACK)
    data = base.model_dump()
    cores = d.cpu_cores or 8
    mem = d.host_memory_bytes or base.memory_bytes
    scale = cores / 8  # cpu-x86-generic assumes 8 cores at 4.0 GHz x 32 FLOP/cycle
    data.update(name="this-cpu", display_name=f"{d.cpu or 'CPU'} ({cores} cores, {mem / GiB:.0f} GiB)",
                memory_capacity_gib=round(mem / GiB, 2), memory_capacity_gb=None,
                peak_tflops={k: v * scale for k, v in base.peak_tflops.items()},
                notes=f"built from {CPU_FALLBACK} (AVX2, 4.0 GHz, DDR5-5600 dual channel assumed) with the measured "
                      f"memory and {cores} cores; calibrate it: infersim calibrate")
    p = HardwareProfile.model_validate(data)
    what = f"GPU '{d.device}' is not in the datasheet table, so " if d.device else ""
    how = (f"{what}detected {d.cpu or 'an unknown CPU'} ({cores} cores, {mem / GiB:.1f} GiB) -> built from "
           f"{CPU_FALLBACK} with the measured memory and cores (assumed clock and memory speed)")
    return p, how


def detect_profile(**kwargs) -> tuple[HardwareProfile, str]:
    """`match_profile(detect_machine())`."""
    return match_profile(detect_machine(**kwargs))


def gpu_count(d: Detected, p: HardwareProfile) -> int:
    """GPUs a model can be split over: the detected count of a discrete GPU matched to a shipped profile;
    1 for a unified-memory part or a CPU."""
    return d.count if p.kind == "gpu" and d.count > 1 else 1


def detect_profile_and_gpus(**kwargs) -> tuple[HardwareProfile, str, int]:
    """(profile, what was detected, how many of its GPUs the machine has: `gpu_count`)."""
    d = detect_machine(**kwargs)
    p, how = match_profile(d)
    return p, how, gpu_count(d, p)
