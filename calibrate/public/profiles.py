"""What the profiles ship: each device's entry per kernel family (`profile_entries`, fitted or
transferred, with its error bands) and the generated YAML block (`render_block`, `write_profile_block`).
"""

from __future__ import annotations

from dataclasses import replace

from calibrate.public.corpus import PublicCorpus
from calibrate.public.params import GroupParams
from calibrate.public.transfer import _tier, transfer
from calibrate.public.validate import Validation, error_bands


# ---- writing the shipped profiles ---------------------------------------------------------------------

BLOCK_START = "# ---- fitted to public measurements"
BLOCK_END = "# ---- end of fitted block"


# Below this Fisher information on the log attention efficiency (a standard deviation above 1, an
# e-fold) a fitted group's rows are taken to say nothing about the attention kernels' rate (`params_for`)
LEND_ATTENTION_INFO = 1.0


def params_for(device: str, family: str, fits: dict[tuple[str, str], GroupParams],
               era: float | None = 1.0, *, corpus: PublicCorpus | None = None) -> GroupParams | None:
    """What a profile ships for (device, family): its own fit where it has rows, else a transfer for
    `era` (1 = today's llama.cpp builds, what users run; `transfer`).

    A fitted group whose rows carry next to no information on its attention efficiency (Fisher
    information under LEND_ATTENTION_INFO: a standard deviation of more than one e-fold) ships the
    transferred one instead, when some donor's rows pinned it (`attention_from` names them). The
    rows of a device measured on 2023-24 llama.cpp builds ran attention without flash attention,
    whose cost is the scores' bytes (sim.cost.roofline SCORE_BYTES), so they leave the fused kernel's
    rate at its prior (0.3), while the simulator prices today's builds with that kernel
    (EngineConfig.flash_attention): the L40S would otherwise ship 0.3 of its 362 TFLOPS, 4.5x the
    rate its own die reaches in the RTX 4090 (0.146 of 165). A group that measured the rate a little
    (the H200's, information 8) keeps its own."""
    own = fits.get((device, family))
    if own is None:
        return transfer(device, family, fits, era=era, corpus=corpus)
    pinned = [d for (d, f), g in fits.items() if f == family and d != device and g.pins("attention")]
    if own.attention_info is None or own.attention_info >= LEND_ATTENTION_INFO or not pinned:
        return own
    lent = transfer(device, family, fits, era=era, corpus=corpus)
    # name the donors that carry the weight: those whose rows pinned it, at the nearest matmul-side tier
    nearest = min(_tier(device, d, "compute") for d in pinned)
    donors = sorted(d for d in pinned if _tier(device, d, "compute") == nearest)
    return replace(own, attention=lent.attention, attention_from=donors)


# which kernel families run on which kind of device (mlx only on Apple Silicon; TensorRT-LLM only on
# NVIDIA; vLLM/SGLang/TGI on CUDA and ROCm GPUs). llama.cpp: `ggml` is its CUDA backend on NVIDIA and
# its Metal backend on Apple; AMD parts run its ROCm/HIP or its Vulkan backend, each its own family
# (sim.catalog.engine_config.backend_family; `--llama-backend` picks, `default_backend` when not given). A
# Vulkan run on an NVIDIA or Apple part is priced with `ggml` (HardwareProfile.efficiency_for).
def families_for(device: str) -> tuple[str, ...]:
    from sim.catalog.hardware import load_profile

    hw = load_profile(device)
    if hw.kind == "cpu":
        return ()
    if hw.vendor == "Apple":
        return ("ggml", "mlx")
    if hw.vendor == "NVIDIA":
        return ("ggml", "torch", "trtllm")
    if hw.vendor == "AMD":
        return ("ggml-rocm", "ggml-vulkan", "torch")
    return ("ggml", "torch")


def efficiency_entry(p, src: str, *, rows: list, error: dict) -> dict:
    """The `engine_efficiency` entry of fitted or transferred parameters `p` (GroupParams), in the
    layout profiles ship: efficiencies, per-class rates, overheads, where it came from and its bands."""
    return {
        "compute": round(p.efficiency.compute, 4),
        "bandwidth": round(p.efficiency.bandwidth, 4),
        "compute_by_class": {c: round(x, 4) for c, x in sorted(p.compute.items())},
        "bandwidth_by_class": {c: round(x, 4) for c, x in sorted(p.bandwidth.items())},
        "attention_of_peak": round(p.attention, 4),
        "floor_ms": round(p.floor_ms, 3),
        "per_sequence_ms": round(p.seq_ms, 4),
        "matmul_half_rows": round(p.half_rows, 2),
        "interconnect_latency_us": None if p.lat_us is None else round(p.lat_us, 2),
        "source": src,
        "corpus_rows": rows,
        "transferred_from": list(p.transferred_from),
        "error": error,
    }


def profile_entries(v: Validation) -> dict[str, dict[str, dict]]:
    """device -> family -> the `engine_efficiency` entry to ship (fitted, or transferred when the
    device has no rows of that family), with its error bands."""
    from sim.catalog.hardware import available_profiles

    out: dict = {}
    for device in available_profiles():
        for family in families_for(device):
            p = params_for(device, family, v.fits, corpus=v.corpus)
            if p is None:
                continue
            if p.transferred_from:
                src = (f"no public rows of {family} kernels on {device}: transferred from "
                       f"{', '.join(p.transferred_from)} (nearest architecture, calibrate/public_fit.py transfer)")
                if p.donor_family:
                    src += (f"; their {p.donor_family} fits: no other device has public rows of {family} kernels "
                            f"(llama.cpp's {family.split('-', 1)[1]} backend)")
                if p.lat_from_microbench:
                    src += ("; all-reduce step latency: this device's own NCCL/RCCL all-reduce micro-benchmark "
                            "(benchmarks/public/device_microbench.csv), no donor of the family ran with CUDA graphs")
            else:
                here = "timed with this repository's benchmarks/gpu scripts"
                kind = ("public measurements" if not p.rows_here else f"measurements {here}"
                        if p.rows_here == len(p.rows) else f"public measurements and ones {here}")
                src = (f"fitted by calibrate/public_fit.py to {len(p.rows)} {kind} from "
                       f"{len(p.sources)} source(s): " + "; ".join(p.sources))
                if p.attention_from:
                    src += ("; attention_of_peak: these rows carry next to no information on it (run without "
                            "flash attention, or too shallow), transferred from the devices whose rows pinned it: "
                            + ", ".join(p.attention_from))
            entry = efficiency_entry(p, src, rows=list(p.rows), error=error_bands(v, device, family))
            if p.efficiency.kquant_matvec_flops_per_weight is not None:
                entry["kquant_matvec_flops_per_weight"] = p.efficiency.kquant_matvec_flops_per_weight
            # llama.cpp builds only (sim.catalog.hardware `current_build_share`; TensorRT-LLM's era is
            # the transfer's alone, calibrate/public/era.py `row_software_current`)
            if p.current_share is not None and not p.transferred_from and family.startswith("ggml"):
                entry["current_build_share"] = round(p.current_share, 2)
            if p.rows_here and not p.transferred_from:
                entry["rows_timed_here"] = p.rows_here
            out.setdefault(device, {})[family] = entry
    return out


def render_block(entries: dict[str, dict]) -> str:
    import yaml

    class _Flow(list):
        pass

    def flow(dumper, data):
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)

    yaml.SafeDumper.add_representer(_Flow, flow)
    data = {fam: {**e, "corpus_rows": _Flow(e["corpus_rows"]), "transferred_from": _Flow(e["transferred_from"])}
            for fam, e in entries.items()}
    body = yaml.safe_dump({"engine_efficiency": data}, sort_keys=False, width=100, allow_unicode=True)
    return (f"{BLOCK_START}: generated by `infersim calibrate --public` (calibrate/public_fit.py)\n"
            f"# from benchmarks/public/*.csv; rerun the fit instead of editing by hand. Held-out error per\n"
            f"# kind of figure in `error` (benchmarks/public_fidelity.md).\n{body}{BLOCK_END}\n")


def write_profile_block(path, entries: dict[str, dict]) -> bool:
    """Replace (or append) the generated block of a profile YAML; True when the file changed."""
    from pathlib import Path

    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if BLOCK_START in text:
        head = text[: text.index(BLOCK_START)]
        tail = text[text.index(BLOCK_END) + len(BLOCK_END):].lstrip("\n") if BLOCK_END in text else ""
    else:
        head, tail = text, ""
    new = head.rstrip("\n") + "\n" + render_block(entries) + tail
    if new != text:
        path.write_text(new, encoding="utf-8")
        return True
    return False
