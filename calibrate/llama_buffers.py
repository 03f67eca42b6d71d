"""llama.cpp's extra weight buffers, and running without them where they crash.

llama.cpp repacks quantized weights for the CPU's matrix units into "extra" buffer types (AMX on
Intel Sapphire Rapids and later, CPU_REPACK for AVX2 / NEON layouts), on by default
(`llama_model_params.use_extra_bufts`). On some machines those kernels crash: on a 2-vCPU Sapphire
Rapids VM that advertises AMX, llama-cpp-python 0.3.36 (its own -march=native build) dies with
SIGSEGV in the first decode of every Q8_0 or Q4_K file once the weights sit in the AMX buffer, the
bundled Gemma 3 270M Q4_K_M included, and runs with the buffers off. Whoever runs llama.cpp here
turns them off after such a crash and says so: the calibrator's probe child
(`calibrate.probes.run_plan`, which reruns once) and the tests (`run_llama_child`); the bounded
server (`calibrate.replay.llama_cpp_server`) and the in-process driver of `replay` / `validate
--local` (`calibrate.replay.local.replay_local`) after a four-token decode in a child
(`extra_bufts_crash`). The rates measured then are llama.cpp's without repacking, which is what that
machine can run.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

# a child that died of one of these is retried without the extra weight buffers
CRASH_SIGNALS = ("SIGSEGV", "SIGILL", "SIGBUS")

# Python run before a child's own code to turn the extra weight buffers off for every model it loads:
# llama-cpp-python's high-level `Llama` (and its server) take the model parameters from
# llama_model_default_params() and have no argument for `use_extra_bufts`.
NO_EXTRA_BUFTS_PRELUDE = (
    "import llama_cpp.llama_cpp as _L\n"
    "_defaults = _L.llama_model_default_params\n"
    "def _params():\n"
    "    p = _defaults()\n"
    "    p.use_extra_bufts = False\n"
    "    return p\n"
    "_L.llama_model_default_params = _params\n"
)


def signal_name(returncode: int) -> str:
    """"SIGSEGV" for a child that died of signal 11 (subprocess return code -11); "" for an exit."""
    if returncode >= 0:
        return ""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


_DECODE_ONCE = (
    "import sys, llama_cpp\n"
    "m = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_threads=1, verbose=False)\n"
    "m.eval([m.token_bos(), 1, 2, 3])\n"
)


def decode_crashed(crash: str) -> str:
    """Why the buffers are off after `extra_bufts_crash` found `crash` (the signal's name)."""
    return f"a decode crashed with them on ({crash})"


def off_warning(why: str) -> str:
    """The one line every command prints when llama.cpp ran without its extra weight buffers."""
    return f"warning: llama.cpp ran without its extra weight buffers (AMX / CPU_REPACK repacking): {why}"


def extra_bufts_crash(model_path: str | Path, timeout_s: float = 300.0) -> str:
    """Load `model_path` in a child with the extra weight buffers on and decode four tokens: "" when
    that runs (or fails some other way, left to the caller to meet), else the crash ("SIGSEGV")."""
    res = subprocess.run([sys.executable, "-c", _DECODE_ONCE, str(model_path)], capture_output=True,
                         timeout=timeout_s)
    name = signal_name(res.returncode)
    return name if name in CRASH_SIGNALS else ""
