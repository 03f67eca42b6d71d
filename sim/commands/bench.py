"""`infersim bench serve`: `vllm bench serve` (or AIPerf / genai-perf / GuideLLM) against the simulator.

The flags are vLLM's, parsed as vLLM parses them: with argparse (vLLM's `FlexibleArgumentParser`
also takes `--flag_name` for `--flag-name`), the same names, types and defaults as
vllm/benchmarks/serve.py `add_cli_args` and the dataset parser, so a `vllm bench serve` command
line runs here unchanged once its server flags become infersim's (`--hw --model --quant --engine`
and `infersim run`'s engine options, read from `run`'s own declarations). Flags that only address
a server or shape the request body (`--host`, `--port`, `--base-url`, `--endpoint`, `--tokenizer`,
sampling parameters, ...) are accepted and change nothing. A bad value is one line on stderr,
exit status 2 (argparse would print its usage and exit 2; the usage is left out).

For `--client aiperf|genai-perf` AIPerf's own names work too: `--concurrency` (= --max-concurrency),
`--request-count` (--num-prompts), `--warmup-request-count` (--num-warmups),
`--synthetic-input-tokens-mean` / `--isl` (--random-input-len), `--output-tokens-mean` / `--osl`
(--random-output-len).
"""

from __future__ import annotations

import argparse
import json
import sys
import typing
from pathlib import Path

import typer

from sim.commands.engine_flags import add_engine_arguments
from sim.errors import ConfigError

INF = float("inf")

#: vLLM flags that address a server or shape request bodies: accepted, no effect on a simulation
_INERT = {"--base-url": str, "--host": str, "--port": int, "--endpoint": str, "--tokenizer": str,
          "--tokenizer-mode": str, "--served-model-name": str, "--logprobs": int, "--request-id-prefix": str,
          "--ready-check-timeout-sec": int, "--top-p": float, "--top-k": int, "--min-p": float,
          "--temperature": float, "--frequency-penalty": float, "--presence-penalty": float,
          "--repetition-penalty": float, "--extra-body": json.loads, "--probe-request-rate": float}
_INERT_FLAGS = ("--disable-tqdm", "--trust-remote-code", "--insecure", "--profile", "--skip-tokenizer-init",
                "--use-beam-search")


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one-line `ConfigError`s (exit 2, no usage dump)."""

    def error(self, message: str) -> typing.NoReturn:
        raise ConfigError(message)


def _flexible(args: list[str]) -> list[str]:
    """vLLM's FlexibleArgumentParser: `--flag_name[=v]` is `--flag-name[=v]`."""
    out = []
    for a in args:
        if a.startswith("--"):
            key, eq, val = a.partition("=")
            a = key.replace("_", "-") + eq + val
        out.append(a)
    return out


def build_parser() -> argparse.ArgumentParser:
    """vLLM's `vllm bench serve` flags that change what is measured, plus infersim's deployment."""
    p = _Parser(prog="infersim bench serve", description="vllm bench serve, run against the simulator.",
                allow_abbrev=False)
    d = p.add_argument_group("dataset (vllm/benchmarks/datasets)")
    d.add_argument("--dataset-name", type=str, default="random", help="random or sharegpt")
    d.add_argument("--dataset-path", type=str, default=None, help="ShareGPT JSON (sharegpt)")
    d.add_argument("--num-prompts", "--request-count", dest="num_prompts", type=int, default=1000)
    d.add_argument("--random-input-len", "--synthetic-input-tokens-mean", "--isl", dest="random_input_len", type=int,
                   default=1024)
    d.add_argument("--random-output-len", "--output-tokens-mean", "--osl", dest="random_output_len", type=int,
                   default=128)
    d.add_argument("--random-range-ratio", type=float, default=0.0)
    d.add_argument("--random-prefix-len", type=int, default=0)
    d.add_argument("--sharegpt-output-len", type=int, default=None)
    d.add_argument("--input-len", type=int, default=None, help="maps to --random-input-len")
    d.add_argument("--output-len", type=int, default=None, help="maps to --random-output-len, --sharegpt-output-len")
    c = p.add_argument_group("client (vllm/benchmarks/serve.py)")
    c.add_argument("--backend", type=str, default="openai")
    c.add_argument("--label", type=str, default=None)
    c.add_argument("--request-rate", type=float, default=INF)
    c.add_argument("--burstiness", type=float, default=1.0)
    c.add_argument("--max-concurrency", "--concurrency", dest="max_concurrency", type=int, default=None)
    c.add_argument("--num-warmups", "--warmup-request-count", dest="num_warmups", type=int, default=0)
    c.add_argument("--ignore-eos", action="store_true")
    c.add_argument("--percentile-metrics", type=str, default=None)
    c.add_argument("--metric-percentiles", type=str, default="99")
    c.add_argument("--goodput", nargs="+", default=None)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--ramp-up-strategy", type=str, default=None, choices=["linear", "exponential"])
    c.add_argument("--ramp-up-start-rps", type=int, default=None)
    c.add_argument("--ramp-up-end-rps", type=int, default=None)
    c.add_argument("--save-result", action="store_true")
    c.add_argument("--save-detailed", action="store_true")
    c.add_argument("--append-result", action="store_true")
    c.add_argument("--metadata", metavar="KEY=VALUE", nargs="*")
    c.add_argument("--result-dir", type=str, default=None)
    c.add_argument("--result-filename", type=str, default=None)
    for flag, kind in _INERT.items():
        c.add_argument(flag, type=kind, default=None, help=argparse.SUPPRESS)
    for flag in _INERT_FLAGS:
        c.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    c.add_argument("--header", nargs="*", help=argparse.SUPPRESS)
    s = p.add_argument_group("deployment (infersim)")
    s.add_argument("--hw", default="h100-sxm", help="hardware profile name or YAML file")
    s.add_argument("--model", default="llama-3.1-8b", help="catalog name, *.gguf file or HF config.json")
    s.add_argument("--quant", default=None, help="quantization (default: the engine's)")
    s.add_argument("--engine", default="vllm", help="engine preset name or YAML file")
    s.add_argument("--engine-file", default=None, help="YAML of engine fields to override")
    s.add_argument("--efficiency-from", default=None, help="profile whose efficiencies replace --hw's")
    add_engine_arguments(p, "engine options (as `infersim run` takes them)")
    t = p.add_argument_group("other clients (sim.bench.tools)")
    t.add_argument("--client", default="vllm", choices=["vllm", "aiperf", "genai-perf", "guidellm"],
                   help="whose load pattern and result format (default vllm)")
    t.add_argument("--guidellm-profile", default="sweep",
                   choices=["sweep", "synchronous", "throughput", "concurrent", "constant", "poisson"])
    t.add_argument("--guidellm-rate", type=str, default=None,
                   help="sweep: number of benchmarks (10); concurrent: streams; constant/poisson: req/s (comma list)")
    t.add_argument("--json", dest="as_json", action="store_true", help="print the result JSON instead of the block")
    return p


def _floats(text: str, flag: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(f"'{text}' is not a comma-separated list of numbers", field=flag) from None


def _goodput(pairs: list[str] | None) -> dict[str, float]:
    """vLLM's `parse_goodput`: KEY:VALUE pairs, value in ms."""
    out = {}
    for pair in pairs or []:
        try:
            k, v = pair.split(":")
            out[k] = float(v)
        except ValueError:
            raise ConfigError(f"invalid service level objective '{pair}': give KEY:VALUE pairs, the value in "
                              "milliseconds", field="--goodput") from None
    return out


def client_from_args(a: argparse.Namespace):
    """A `ServeClient` from parsed flags, with vLLM's mappings (`--input-len` / `--output-len`)."""
    from sim.bench.serve import ServeClient

    if a.input_len is not None:
        a.random_input_len = a.input_len
    if a.output_len is not None:
        a.random_output_len = a.output_len
        a.sharegpt_output_len = a.output_len
    if a.num_warmups < 0:
        raise ConfigError(f"must be >= 0, got {a.num_warmups}", field="--num-warmups")
    return ServeClient(
        dataset_name=a.dataset_name, dataset_path=a.dataset_path, num_prompts=a.num_prompts,
        request_rate=a.request_rate, burstiness=a.burstiness, max_concurrency=a.max_concurrency,
        random_input_len=a.random_input_len, random_output_len=a.random_output_len,
        random_range_ratio=a.random_range_ratio, random_prefix_len=a.random_prefix_len,
        sharegpt_output_len=a.sharegpt_output_len,
        # vLLM forces ignore_eos for the random dataset on OpenAI-compatible backends
        ignore_eos=a.ignore_eos or a.dataset_name == "random",
        percentile_metrics=tuple((a.percentile_metrics or "ttft,tpot,itl").split(",")),
        metric_percentiles=_floats(a.metric_percentiles, "--metric-percentiles"),
        goodput=_goodput(a.goodput), seed=a.seed, num_warmups=a.num_warmups,
        ramp_up_strategy=a.ramp_up_strategy, ramp_up_start_rps=a.ramp_up_start_rps,
        ramp_up_end_rps=a.ramp_up_end_rps, backend=a.backend, label=a.label,
    ).check()


def deployment_from_args(a: argparse.Namespace):
    """A `Deployment` from --hw/--model/--quant/--engine and the engine options."""
    from sim.bench.serve import Deployment
    from sim.catalog.engine_options import ENGINE_OPTIONS, overrides_from

    overrides = overrides_from({o.param: getattr(a, o.param) for o in ENGINE_OPTIONS})
    return Deployment(hw=a.hw, model=a.model, quant=a.quant, engine=a.engine, engine_file=a.engine_file,
                      overrides=overrides, efficiency_from=a.efficiency_from)


def _metadata(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"invalid metadata '{item}': use KEY=VALUE", field="--metadata")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def serve(ctx: typer.Context) -> None:
    """`vllm bench serve` against the simulator: the same flags, console block and result JSON."""
    args = _flexible(list(ctx.args))
    parser = build_parser()
    if "-h" in args or "--help" in args:
        typer.echo(parser.format_help())
        return
    a = parser.parse_args(args)
    client = client_from_args(a)
    deployment = deployment_from_args(a)
    if a.client != "vllm":
        return run_tool_cli(a, client, deployment)
    from sim.bench.serve import console_block, result_filename, result_json, run_client

    meta = _metadata(a.metadata)
    result = run_client(client, deployment)
    if meta:  # vLLM puts --metadata keys right after num_prompts
        keys = list(result)
        at = keys.index("num_prompts") + 1
        result = {**{k: result[k] for k in keys[:at]}, **meta, **{k: result[k] for k in keys[at:]}}
    saved = result_json(result, detailed=a.save_detailed)
    if a.as_json:
        sys.stdout.write(json.dumps(saved, indent=2) + "\n")
    else:
        typer.echo(console_block(result, client))
        _print_band(result, client)
    if a.save_result or a.append_result:
        path = result_filename(client, deployment.model, result["date"], result_filename=a.result_filename,
                               result_dir=a.result_dir)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a+" if a.append_result else "w", encoding="utf-8") as f:
                if a.append_result and f.tell() != 0:
                    f.write("\n")
                json.dump(saved, f)
        except OSError as e:
            raise ConfigError(f"cannot write the result: {e.strerror}", file=path, field="--result-filename") from None
        typer.echo(f"wrote {path}", err=True)


def _print_band(result: dict, client) -> None:
    """The expected error of these figures under load (sim.catalog.accuracy.serving_error: bands from
    the serving corpus held out by source), on stderr so the block stays vLLM's."""
    import math

    from sim.catalog.accuracy import describe_serving, serving_error

    info = result.get("infersim") or {}
    engine = info.get("engine") or ""
    if not engine or not info.get("hw"):
        return
    rate = client.request_rate if math.isfinite(client.request_rate) else None
    conc = client.max_concurrency if client.max_concurrency else (client.num_prompts if rate is None else None)
    typer.echo(describe_serving(serving_error(engine, info["hw"], concurrency=conc, rate=rate)), err=True)


# ---- the CLI (`infersim bench serve --client ...`) -------------------------------------------------------------
def run_tool_cli(a, client, deployment) -> None:
    """Write the tool's result files into --result-dir (default: ./artifacts/infersim-<tool>) and
    print where, with the headline figures."""
    from sim.bench.tools import aiperf_csv, aiperf_records, run_aiperf, run_guidellm

    out_dir = Path(a.result_dir or f"artifacts/infersim-{a.client}")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the folder: {e.strerror}", file=out_dir, field="--result-dir") from None
    if a.client == "guidellm":
        rates = _floats(a.guidellm_rate, "--guidellm-rate") if a.guidellm_rate else None
        res = run_guidellm(client, deployment, profile=a.guidellm_profile, rates=rates)
        path = out_dir / (a.result_filename or "benchmarks.json")
        path.write_text(json.dumps(res, indent=2) + "\n")
        for b in res["benchmarks"]:
            m = b["metrics"]
            s = b["config"]["strategy"]
            load = s.get("rate", s.get("streams"))
            typer.echo(f"{s['type_']:<12} {'' if load is None else format(load, '.4g'):>8}  "
                       f"req/s {m['requests_per_second']['successful']['mean']:8.2f}  "
                       f"out tok/s {m['output_tokens_per_second']['successful']['mean']:9.1f}  "
                       f"TTFT p50 {m['time_to_first_token_ms']['successful']['median']:8.1f} ms  "
                       f"ITL p50 {m['inter_token_latency_ms']['successful']['median']:6.2f} ms")
        typer.echo(f"wrote {path}", err=True)
        return
    export, t = run_aiperf(client, deployment, tool=a.client)
    stem = "profile_export_aiperf" if a.client == "aiperf" else "profile_export_genai_perf"
    (out_dir / f"{stem}.json").write_text(json.dumps(export, indent=2) + "\n")
    (out_dir / f"{stem}.csv").write_text(aiperf_csv(export, a.client))
    if a.client == "aiperf":
        with open(out_dir / "profile_export.jsonl", "w") as f:
            for rec in aiperf_records(t):
                f.write(json.dumps(rec) + "\n")
    typer.echo(aiperf_csv(export, a.client).rstrip())
    typer.echo(f"wrote {out_dir}/{stem}.json, {stem}.csv", err=True)


app = typer.Typer(help="Benchmark clients replayed on the simulator.", no_args_is_help=True,
                  rich_markup_mode=None, add_completion=False)
app.command("serve", help="vllm bench serve against the simulator (its flags, console block and JSON); "
            "`infersim bench serve --help` lists the flags.",
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})(serve)


def register(root: typer.Typer) -> None:
    """Attach `infersim bench`."""
    root.add_typer(app, name="bench", help="Benchmark clients (vllm bench serve, AIPerf, GuideLLM) on the simulator.")


__all__ = ["build_parser", "register", "serve"]
