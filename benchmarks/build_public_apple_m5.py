"""Build benchmarks/public/apple_m5.csv: the base Apple M5's first public rows (issue 39: the M5
family had none with a stated batch and lengths).

Two sources, both single-sequence figures with the prompt and generation lengths stated:

1. enescingoz/mac-llm-bench@5e9194811173ce32a2be067f781a67da153af734 (2026-04-22),
   `results/m5/base/raw/m5_10c-10g_32gb/mlx/<model>_4bit_ngl99.json`: mlx-lm on a MacBook Air with the
   base M5 (the files' `hardware`: "chip": "Apple M5", "gpu_cores": "10", "total_ram_gb": 32,
   "power_source": "ac_power", macOS 26.4), timed 2026-04-06/07. The runner, `lib/run_bench_mlx.sh` of
   the same commit (last changed in f0899db8, the commit that added the runner, before these runs),
   calls `mlx_lm.benchmark --model <repo> -p P -g G -n 5` for (P, G) in (128,128) (128,256) (256,128)
   (256,256) (512,128) and stores the "Averages:" line's prompt_tps as `ppP` and generation_tps as
   `tgG`, each run overwriting the key it shares with an earlier one. So `pp512` is the prompt rate of
   a 512-token prompt, `pp256` of (256,256), `pp128` of (128,256); `tg128` is the generation rate of
   128 tokens after a 512-token prompt (the last run writing it) and `tg256` of 256 tokens after 256.
   The JSON's `runtime` says "llama.cpp" / `parameters` n_gpu_layers 99: the collector's defaults,
   written for every file (the file sits under `mlx/` and its figures are those of the MLX runner).
   mlx-lm version not recorded. Taken: the catalog's models among the M5's MLX files (9 of 25, all
   mlx-community 4-bit conversions): Llama 3.1 8B, Mistral 7B v0.3, Qwen3 8B, DeepSeek-R1-Distill-Qwen
   7B, Gemma 3 4B / 12B / 27B, Mistral Small 3.1 24B (its text-only conversion) and Qwen3.5-35B-A3B,
   all five figures of each. These come from a fanless laptop: several prompt rates fall from 256 to
   512 tokens (Mistral 7B 544 -> 351 -> 391 tok/s over 128/256/512), the signature of thermal
   throttling within a run; rows say so.

   Left out: the same repository's llama.cpp (GGUF) files for the M5 (`.../gguf/*.json`, llama-bench
   pp512/tg128 with -fa 1 -ngl 99). Their decode is implausible for the chip: Llama 3.1 8B Q4_K_M
   (4.58 GB) at tg128 10.75 tok/s is 49 GB/s, 32% of the M5's 153 GB/s, while the MLX 4-bit run of
   the same model on the same machine decodes 28.31 tok/s, and Qwen3-8B Q4_K_M decodes slower on this
   M5 (9.14 tok/s) than the repository's M1 MacBook Air with 68 GB/s (11.02 tok/s). The files do not
   say which llama.cpp build ran (`"version": "unknown"`); a build on which Metal misbehaved on the
   M5 (llama.cpp's M5 tensor-API problems of early 2026, e.g. ollama/ollama#15849) is a likely cause,
   but none is shown, so the rows are not taken rather than taken and explained.

2. llama.cpp PR #16634 "metal : initial Metal4 tensor API support", comment by mweinbach, 2025-10-25
   ("Just ran it on M5, this is what I got. It does seem to be working! This branch: ..."): the
   llama.swiftui-style bench ("Heat up time: ... please wait...", then a pp 512 / tg 128 table) of
   `mistral-7b-v0.1.Q4_0.gguf` ("llama 7B Q4_0 | 3.83 GiB | 7.24 B | Metal") on the PR's branch:
   pp 512 608.05 ± 8.37 and tg 128 26.59 ± 0.88 t/s. The comment names the chip only ("M5": a 10-core
   GPU and 153 GB/s in every M5 product). Taken: those two cells (the comment's phi-2 and TinyLlama
   blocks are models outside the catalog). Mistral 7B v0.1 is mapped to the catalog's
   mistral-7b-v0.3 (same layers; vocabulary 32,000 vs 32,768), as mlx_more.csv does.

3. magicnight/Mac-MLX issue #24 "[benchmark] Qwen3.5-35B-A3B-4bit on Apple M5 Max" (2026-04-17), the
   app's auto-generated JSON: mlx-swift-lm 3.31.3 (Mac-MLX 0.3.5), "chip": "Apple M5 Max", 128 GB,
   macOS 26.4.1, "runs": 3; a 1,479-token prompt at promptTPS 2756.5669981190003 and 2,023 generated
   tokens at generationTPS 133.47814333534475 (ttftMs 536.5369319915771). The M5 Max's only rows with
   a catalog model and stated lengths found (the same tracker's other M5 Max issue is Gemma 4 E4B, not
   in the catalog). GPU core count not printed; the `apple-m5-max` profile is the 40-core part.

Set aside, not fitted (their error is reported under the M5's shipped transfer from the other Apple
chips, held out by device like the Jetson Thor's rows): fitted, they raised the held-out-by-device p90
of the devices profiled before issue 39 from 24.55% to 24.65% and made the throttled laptop's MLX rows a
donor of the M2 Ultra's and M3 Max's MLX transfers (SET_ASIDE gives the figures; round 29 of
docs/changelog-calibration.md). Setting them aside keeps every fitted profile as it was.

Not found (searched for this issue, see docs/hardware.md): the llama.cpp Apple Silicon scoreboard
(discussion #4167) with an M5 entry in any copy the public index holds (the willitrun scrape used by
apple_more.csv has no M5 row); M5 Pro / M5 Max figures with a model of the catalog and stated lengths
(mac-llm-bench's `results/m5/{pro,max}` hold no results at the commit; the M5 Max tables in PR #16634
are Qwen3.5 0.8B); Apple's "Exploring LLMs with MLX and the Neural Accelerators in the M5 GPU" prints
its time-to-first-token and generation results as charts (speed-ups "up to 4x" and "19-27%"), no
figure per model that a row could copy.

    python benchmarks/build_public_apple_m5.py          # (re)write the CSV
    python benchmarks/build_public_apple_m5.py --check  # exit 1 if the CSV differs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_public_new_devices_2026 import builder  # noqa: E402 (the corpus columns, one CLI)

OUT = Path(__file__).resolve().parent / "public" / "apple_m5.csv"
COMMIT = "5e9194811173ce32a2be067f781a67da153af734"
REPO = "https://github.com/enescingoz/mac-llm-bench/blob/" + COMMIT
RAW = "results/m5/base/raw/m5_10c-10g_32gb/mlx"
RUNNER = f"{REPO}/lib/run_bench_mlx.sh"
PR = "https://github.com/ggml-org/llama.cpp/pull/16634"
# Round 29 (docs/changelog-calibration.md): fitted, these rows moved the devices before them; kept in the
# corpus, not fitted, their error reported under the M5's shipped transfer (benchmarks/public_fidelity.md)
SET_ASIDE = ("Set aside: fitted, these 47 rows (the base M5's only rows) moved the held-out-by-device error of the "
             "1,234 rows of the devices profiled before issue 39 from 8.40 / 24.55% to 8.43 / 24.65% (median / p90, "
             "the B300 rows aside; round 29, docs/changelog-calibration.md): the M5's mlx fit became a donor of the "
             "other Apple chips' mlx transfers (M2 Ultra 8.5 / 11.6% -> 16.8 / 17.6%, M3 Max p90 14.7 -> 24.2%). ")

# The `speed` object of each file at COMMIT, as printed (key order as in the file)
MLX_SPEED = {
    "Meta-Llama-3.1-8B-Instruct-4bit":
        '{"pp128": 549.88, "tg128": 28.31, "tg256": 28.71, "pp256": 647.63, "pp512": 527.98}',
    "Mistral-7B-Instruct-v0.3-4bit":
        '{"pp128": 544.05, "tg128": 22.95, "tg256": 22.77, "pp256": 350.57, "pp512": 390.98}',
    "Qwen3-8B-4bit":
        '{"pp128": 527.31, "tg128": 24.0, "tg256": 27.59, "pp256": 583.3, "pp512": 404.96}',
    "DeepSeek-R1-Distill-Qwen-7B-4bit-mlx":
        '{"pp128": 585.41, "tg128": 26.17, "tg256": 29.7, "pp256": 679.84, "pp512": 462.27}',
    "gemma-3-4b-it-4bit":
        '{"pp128": 1016.01, "tg128": 53.27, "tg256": 53.55, "pp256": 1181.55, "pp512": 1325.32}',
    "gemma-3-12b-it-4bit":
        '{"pp128": 289.16, "tg128": 12.51, "tg256": 12.54, "pp256": 224.38, "pp512": 254.73}',
    "gemma-3-27b-it-4bit":
        '{"pp128": 89.11, "tg128": 5.46, "tg256": 5.54, "pp256": 103.87, "pp512": 113.31}',
    "Mistral-Small-3.1-Text-24B-Instruct-2503-4bit":
        '{"pp128": 98.88, "tg128": 6.9, "tg256": 6.96, "pp256": 118.0, "pp512": 131.89}',
    "Qwen3.5-35B-A3B-4bit":
        '{"pp128": 326.05, "tg128": 58.75, "tg256": 61.59, "pp256": 550.21, "pp512": 618.75}',
}
CATALOG = {
    "Meta-Llama-3.1-8B-Instruct-4bit": "llama-3.1-8b",
    "Mistral-7B-Instruct-v0.3-4bit": "mistral-7b-v0.3",
    "Qwen3-8B-4bit": "qwen3-8b",
    "DeepSeek-R1-Distill-Qwen-7B-4bit-mlx": "deepseek-r1-distill-qwen-7b",
    "gemma-3-4b-it-4bit": "gemma-3-4b",
    "gemma-3-12b-it-4bit": "gemma-3-12b",
    "gemma-3-27b-it-4bit": "gemma-3-27b",
    "Mistral-Small-3.1-Text-24B-Instruct-2503-4bit": "mistral-small-3.1-24b",
    "Qwen3.5-35B-A3B-4bit": "qwen3.5-35b-a3b",
}
# key -> (metric, prompt P and generation G of the mlx_lm.benchmark run whose figure the key keeps)
KEYS = {"pp128": ("pp", 128, 256), "pp256": ("pp", 256, 256), "pp512": ("pp", 512, 128),
        "tg128": ("tg", 512, 128), "tg256": ("tg", 256, 256)}
MLX_VARIANT = ("Apple M5, 10-core GPU, 32 GB, MacBook Air (fanless), on AC power, macOS 26.4 "
               "(the file's hardware object)")

# PR #16634, mweinbach 2025-10-25, the "This branch" table of mistral-7b-v0.1.Q4_0.gguf, as printed
PR_TABLE = """
| model | size | params | backend | test | t/s |
| --- | --- | --- | --- | --- | --- |
| llama 7B Q4_0 | 3.83 GiB | 7.24 B | Metal | pp 512 | 608.05 ± 8.37 |
| llama 7B Q4_0 | 3.83 GiB | 7.24 B | Metal | tg 128 | 26.59 ± 0.88 |
"""


def _mlx_rows() -> list[dict]:
    out = []
    for name, text in MLX_SPEED.items():
        speed = json.loads(text)
        model = CATALOG[name]
        path = f"{RAW}/{name}_4bit_ngl99.json"
        for key in ("pp128", "pp256", "pp512", "tg128", "tg256"):
            metric, p, g = KEYS[key]
            pp = metric == "pp"
            out.append({
                "row_id": f"mlx-m5-macllmbench-{model}-mlx4-{key}" + ("" if pp else f"-d{p}"),
                "source": f"{REPO}/{path}",
                "source_ref": (f"enescingoz/mac-llm-bench@{COMMIT[:8]}:{path} (speed.{key}); runner "
                               "lib/run_bench_mlx.sh at the same commit"),
                "engine": "mlx", "engine_version": "unknown (mlx-lm version not recorded in the file)",
                "backend": "", "device": "apple-m5", "device_variant": MLX_VARIANT, "n_devices": 1,
                "model": model, "quant": "mlx-4bit", "metric": metric, "batch": 1, "request_rate": "",
                "input_tokens": p if pp else 0, "output_tokens": 0 if pp else g, "depth": 0 if pp else p,
                "quantity": "prompt_tps" if pp else "decode_tps", "value": speed[key],
                "as_printed": f'"{key}": {speed[key]}',
                "derivation": "",
                "settings": f"tool=mlx_lm.benchmark --model {name} -p {p} -g {g} -n 5 (the 'Averages:' line)",
                "notes": (SET_ASIDE + f"mlx-community 4-bit conversion ({name}; group size not recorded in the file), "
                          "mapped to the catalog's " + model + ". "
                          + (f"Prompt tokens/s of a {p}-token prompt (the run with -g {g}, whose figure the runner "
                             f"stored last under {key}). " if pp else
                             f"Generation tokens/s of {g} tokens after a {p}-token prompt (the run whose figure the "
                             f"runner stored last under {key}). ")
                          + "A fanless MacBook Air: prompt rates that fall between 256 and 512 tokens in some files "
                          "show throttling during a run. Runner: " + RUNNER),
            })
    return out


def _pr_rows() -> list[dict]:
    out = []
    for ln in PR_TABLE.strip().splitlines()[2:]:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        test, tps = cells[4], cells[5]
        value = float(tps.split("±")[0])
        pp = test.startswith("pp")
        n = int(test.split()[1])
        out.append({
            "row_id": f"lcpp-metal-m5-pr16634-mweinbach-mistral7b-q4_0-{'pp' if pp else 'tg'}{n}",
            "source": PR,
            "source_ref": ("llama.cpp PR #16634 'metal : initial Metal4 tensor API support', comment by mweinbach "
                           "2025-10-25 ('Just ran it on M5 ... This branch:'), mistral-7b-v0.1.Q4_0.gguf table"),
            "engine": "llama.cpp", "engine_version": "PR #16634 branch as of 2025-10-25 (Metal4 tensor API)",
            "backend": "metal", "device": "apple-m5",
            "device_variant": "'M5' (product not named; every M5 has a 10-core GPU and 153 GB/s)",
            "n_devices": 1, "model": "mistral-7b-v0.3", "quant": "q4_0", "metric": "pp" if pp else "tg",
            "batch": 1, "request_rate": "", "input_tokens": n if pp else 0, "output_tokens": 0 if pp else n,
            "depth": 0, "quantity": "prompt_tps" if pp else "decode_tps", "value": value,
            "as_printed": ln.strip(), "derivation": "",
            "settings": "bench=llama.swiftui-style bench ('Heat up time: ... please wait...'); fa not stated",
            "notes": (SET_ASIDE + "Model file mistral-7b-v0.1.Q4_0.gguf ('llama 7B Q4_0', 7.24 B), mapped to the "
                      "catalog's mistral-7b-v0.3 (same layers; vocabulary 32,000 vs 32,768). The comment's "
                      "phi-2 and TinyLlama tables are models outside the catalog."),
        })
    return out


# Mac-MLX issue #24 (M5 Max), the fields of its JSON block as printed
MACMLX = "https://github.com/magicnight/Mac-MLX/issues/24"
MACMLX_JSON = """
{
  "completionTokens" : 2023,
  "engineID" : "mlx-swift-lm",
  "engineVersion" : "mlx-swift-lm 3.31.3",
  "generationTPS" : 133.47814333534475,
  "macMLXVersion" : "0.3.5",
  "modelID" : "Qwen3.5-35B-A3B-4bit",
  "promptTPS" : 2756.5669981190003,
  "promptTokens" : 1479,
  "runs" : 3,
  "system" : {"chip" : "Apple M5 Max", "macOSVersion" : "26.4.1", "ramGB" : 128},
  "ttftMs" : 536.5369319915771
}
"""
SET_ASIDE_MAX = ("Set aside: the M5 Max's only two rows (one prompt, one decode of one model, a Qwen3.5 hybrid MoE) "
                 "were not tried fitted: a group this small leaves the fit nothing to tell bandwidth from the "
                 "per-step floor (the four-row groups of rounds 25-26 leaked into other devices' transfers), so "
                 "they are reported under the M5 Max's shipped transfer like the base M5's rows (round 29, "
                 "docs/changelog-calibration.md). ")


def _macmlx_rows() -> list[dict]:
    d = json.loads(MACMLX_JSON)
    p, g = d["promptTokens"], d["completionTokens"]
    out = []
    for metric, key in (("pp", "promptTPS"), ("tg", "generationTPS")):
        pp = metric == "pp"
        out.append({
            "row_id": "mlx-m5max-macmlx24-qwen3.5-35b-a3b-mlx4-" + (f"pp{p}" if pp else f"tg{g}-d{p}"),
            "source": MACMLX,
            "source_ref": "magicnight/Mac-MLX issue #24 '[benchmark] Qwen3.5-35B-A3B-4bit on Apple M5 Max' (2026-04-17)",
            "engine": "mlx", "engine_version": d["engineVersion"], "backend": "", "device": "apple-m5-max",
            "device_variant": "Apple M5 Max, 128 GB, macOS 26.4.1 (the JSON's system object; GPU core count not printed)",
            "n_devices": 1, "model": "qwen3.5-35b-a3b", "quant": "mlx-4bit", "metric": metric, "batch": 1,
            "request_rate": "", "input_tokens": p if pp else 0, "output_tokens": 0 if pp else g,
            "depth": 0 if pp else p, "quantity": "prompt_tps" if pp else "decode_tps", "value": d[key],
            "as_printed": f'"{key}" : {d[key]!r} ("promptTokens" : {p}, "completionTokens" : {g})',
            "derivation": "",
            "settings": f"tool=Mac-MLX {d['macMLXVersion']} benchmark;runs={d['runs']}",
            "notes": (SET_ASIDE_MAX + "Model Qwen3.5-35B-A3B-4bit (an MLX 4-bit conversion; group size not printed). "
                      + ("Prompt tokens/s over the 1,479-token prompt (ttftMs 536.54 is the same prefill with its "
                         "overheads). " if pp else
                         "Generation tokens/s over the 2,023 completion tokens that followed the 1,479-token prompt. ")
                      + "Whether 'runs': 3 are averaged or the last is printed is not said."),
        })
    return out


def rows() -> list[dict]:
    return _mlx_rows() + _pr_rows() + _macmlx_rows()


render, main = builder(OUT, rows)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
