"""Fit the cost model to published measurements of hardware infersim cannot touch.

The corpus (`calibrate.public_corpus`, `benchmarks/public/*.csv`) holds what people measured:
llama-bench pp/tg, llama-batched-bench tables, TensorRT-LLM's offline throughput tables, vLLM and
SGLang latency and serving runs. Each row is turned into the iterations the engine ran
(`row_shape`), priced with the cost model's own formulas (`sim.cost.roofline.CostModel.predict_times`,
the same code the simulator calls), and the free parameters of one (device, kernel family) are
fitted to all of that group's rows at once:

    bandwidth          sustained / datasheet memory bandwidth                 (decode)
    compute[class]     sustained / datasheet matmul FLOP/s per weight class   (prefill, big batches)
                       classes: f16 (fp16/bf16), fp8, int8, fp4 (nvfp4/mxfp4), gguf (llama.cpp's
                       quantized MMQ/MMVQ kernels), mlx, int4wo (AWQ/GPTQ)
    attention          attention FLOP/s / datasheet bf16 peak                  (long prompts, depth)
    floor_ms           device-side cost per engine iteration: kernel launches and the gaps
                       between them, which set the pace of small-batch decode on big GPUs
    seq_ms             device-side cost per sequence per iteration: per-sequence kernel work the
                       roofline leaves out (sampling, rope/norm of its rows, per-sequence attention
                       launches, the imperfect overlap of compute and memory as a batch grows)

Kernel families share kernels, so they share these numbers: `ggml` (llama.cpp, Ollama, LM Studio's
llama.cpp runtime), `mlx` (mlx-lm, LM Studio's MLX runtime), `torch` (vLLM, SGLang, TGI) and
`trtllm`. Each engine keeps its own software overheads (EngineConfig.iteration_overhead_ms).

The fit is `scipy.optimize.least_squares` on log(predicted / measured) — a relative error, so a
70B row and a 1B row weigh the same — plus weak log-normal priors that hold a parameter the group's
rows cannot see (no fp8 rows: no fp8 efficiency to learn) at a generic value; a parameter the rows
do see moves freely. A device with no rows of a family gets the parameters of its nearest
devices (`transfer`): same generation and memory class, then same vendor and memory class, then —
for matmul-side parameters — every device of the vendor, for memory-side ones the same generation
(`_tier`; between Apple chips the memory side goes by package, Max with Max, Ultra with Ultra); matmul efficiencies travel as shares of the peak the family's kernels can reach
(`achievable_share`), all-reduce latency as a multiple of the link's own; and it says so.

Held-out error (`cross_validate`): leave-one-device-out (each device predicted from the others
only, through `transfer`: the error a user of an unmeasured device should expect) and
leave-one-source-out (each source predicted from the rest: the error when a new benchmark of a
measured device comes in). The shipped error bands come from these held-out residuals.

Rows are modelled only where the row says what ran. A row without the prompt or output length it
measured, or whose quantity this module cannot replay (ITL of a multi-step scheduler, a Poisson
serving run without lengths), is reported as excluded with its reason, never silently dropped.

The code, by job (each module's docstring says more):

    calibrate/public/corpus.py      `PublicCorpus`: rows, micro-benchmarks and the cross-device choices
    calibrate/public/params.py      GroupParams, priors and bounds, kernel families (`engine_family`)
    calibrate/public/era.py         which llama.cpp era a row ran (`row_is_current`)
    calibrate/public/replay.py      the objects a row is replayed with, iteration builders, `predict`
    calibrate/public/replayers.py   one replayer per benchmark kind (`REPLAYERS`), `row_shape`, `prepare`
    calibrate/public/fitting.py     `fit_group`, `fit_all`, `fit_matvec_alu`, `fit_routing`
    calibrate/public/microbench.py  device micro-benchmarks as transfer anchors
    calibrate/public/transfer.py    `_tier`, `achievable_share`, `transfer`
    calibrate/public/validate.py    `cross_validate`, `error_bands`
    calibrate/public/profiles.py    `params_for`, `profile_entries`, `render_block`, `write_profile_block`

One fit: `corpus = PublicCorpus.load()`, `prepared = prepare(corpus.rows, corpus)`,
`fit_routing(prepared, corpus)`, `fit_matvec_alu(prepared, corpus)` (both set their choice on the
corpus), `v = cross_validate(prepared, corpus)`, `profile_entries(v)`
(calibrate/public_report.py `run_public_fit`). No step keeps state between calls: the corpus is
passed to each. This module re-exports the modules' names, so `from calibrate.public_fit import ...`
keeps working.
"""

from __future__ import annotations

from calibrate.public.corpus import (  # noqa: F401
    corpus_or_default,
    PublicCorpus,
)
from calibrate.public.params import (  # noqa: F401
    BOUNDS,
    engine_family,
    GroupParams,
    PRIOR_ATTENTION,
    PRIOR_BANDWIDTH,
    PRIOR_COMPUTE,
    PRIOR_FLOOR_MS,
    PRIOR_HALF_ROWS,
    PRIOR_LATENCY_US_SIGMA,
    PRIOR_SEQ_MS,
    robust_loss,
    ROBUST_SCALE,
    ROW_SIGMA,
)
from calibrate.public.era import (  # noqa: F401
    CURRENT_BUILD,
    CURRENT_PR,
    current_share,
    CURRENT_YEAR,
    ERA_TIERS,
    row_is_current,
)
from calibrate.public.replay import (  # noqa: F401
    cost_params,
    Excluded,
    _objects,
    predict,
    predict_with,
    routing_key,
    row_flash_attention,
    row_mmq_tiles,
    _row_objects,
    Shape,
    SYNTHETIC_SUFFIX,
)
from calibrate.public.replayers import (  # noqa: F401
    OUTLIER_MARK,
    prepare,
    Prepared,
    replay_batched,
    replay_generation,
    replay_offline,
    replay_prompt,
    replay_serving,
    replayer,
    REPLAYERS,
    row_shape,
    RowContext,
    SET_ASIDE_MARK,
    trtllm_bench_limits,
)
from calibrate.public.fitting import (  # noqa: F401
    fit_all,
    fit_group,
    fit_matvec_alu,
    fit_routing,
    MATVEC_GRID,
    PIN_INFO,
    POOL_GRID,
)
from calibrate.public.microbench import (  # noqa: F401
    allreduce_step_latency_us,
    ANCHOR_KERNEL,
    bandwidth_anchor,
    bandwidth_shares,
    compute_anchor,
    COMPUTE_ANCHOR_CLASSES,
    COMPUTE_ANCHOR_FAMILIES,
    matmul_shares,
)
from calibrate.public.transfer import (  # noqa: F401
    achievable_share,
    ATTENTION_CLASS,
    device_package,
    device_traits,
    GEFORCE_GGML_SHARE,
    SPREAD_FLOOR,
    SPREAD_POWER,
    _tier,
    TIER_DECAY,
    transfer,
    UNPINNED_TIERS,
)
from calibrate.public.validate import (  # noqa: F401
    BAND_MIN_ROWS,
    cross_validate,
    _err,
    error_bands,
    KINDS,
    _stats,
    Validation,
)
from calibrate.public.profiles import (  # noqa: F401
    BLOCK_END,
    BLOCK_START,
    families_for,
    LEND_ATTENTION_INFO,
    params_for,
    profile_entries,
    render_block,
    write_profile_block,
)
