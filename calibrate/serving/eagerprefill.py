"""The eager-prefill term's ship rule (sim.cost.eager_prefill; EngineConfig.eager_prefill_moe_layer_us;
issue 38, session 44). Written down, with the protocol below, before any replay with the term was seen.

The term's value is not fitted: it is the cited one (`sim.cost.eager_prefill.CITED_US_PER_MOE_LAYER`,
1425 us per MoE layer, from sgl-project/sglang PR #12160's eager DeepSeek-V3 forward of one new token,
82.6 ms). The only decision the serving rows make is on or off for SGLang's preset, by this rule:

Protocol. `python benchmarks/serving_fit.py --curves sglang --jobs 1` twice: with the SGLang preset's
`eager_prefill_moe_layer_us` 0 (before) and at the cited value (after). Its "held out by source" line is
the yardstick: every SGLang source predicted with the fitted fields (the per-release front end, the
per-layer floor, the shipped scales and rules) fitted on the other sources, so the front end that
absorbed part of the unloaded TTFT excess is refitted beside the term in every fold.

Rule. The term ships on iff, held out by source on those rows,
  (a) TTFT p50 median |error| falls by at least `MIN_TTFT_GAIN_PT` points, and
  (b) TTFT p99 median |error| rises by at most `MAX_OTHER_LOSS_PT` x 2 points, and
  (c) TPOT/ITL and output-throughput median |error| each rise by at most `MAX_OTHER_LOSS_PT` points.
Otherwise the preset keeps 0 (off) and the term stays available as an engine field (as
sim.cost.split_kv did). No other value is tried: a value chosen by looking at these figures would be
tuned to the number reported."""

from __future__ import annotations

from sim.cost.eager_prefill import CITED_US_PER_MOE_LAYER

MIN_TTFT_GAIN_PT = 2.0
MAX_OTHER_LOSS_PT = 1.0


def ships(before: dict[str, float], after: dict[str, float]) -> bool:
    """The rule above on held-out-by-source median |error| [%] per metric (ttft_p50, ttft_p99, tpot_itl,
    output_tps) without (`before`) and with (`after`) the term."""
    return (after["ttft_p50"] <= before["ttft_p50"] - MIN_TTFT_GAIN_PT
            and after["ttft_p99"] <= before["ttft_p99"] + 2 * MAX_OTHER_LOSS_PT
            and after["tpot_itl"] <= before["tpot_itl"] + MAX_OTHER_LOSS_PT
            and after["output_tps"] <= before["output_tps"] + MAX_OTHER_LOSS_PT)


def shipped_value(before: dict[str, float], after: dict[str, float]) -> float:
    """The SGLang preset's eager_prefill_moe_layer_us by the rule: the cited value, or 0."""
    return round(CITED_US_PER_MOE_LAYER) if ships(before, after) else 0.0
