"""Synthetic traces: arrival processes x length distributions x sessions, seeded.

A `GenSpec` (pydantic; the YAML spec file of `infersim trace gen --spec`) describes the traffic;
`generate(spec)` turns it into a sorted list of `Request`s. The same spec and seed always give
the same requests (one `numpy.random.Generator`, draws in a fixed order).

Open-loop arrivals are a unit-rate renewal process mapped through the inverse cumulative rate:
if Λ(t) = ∫₀ᵗ rate(u) du, a point at operational time τ arrives at t = Λ⁻¹(τ) (the time-rescaling
theorem), so the same code gives a constant rate, a piecewise schedule and a daily curve. The
renewal gaps in operational time are Exponential(1) (Poisson), Gamma(shape=b, scale=1/b)
(burstiness b, coefficient of variation 1/sqrt(b)), or 1 (constant). At a constant rate r the
Gamma gaps are Gamma(b, 1/(r·b)), vLLM's `get_request` in `vllm/benchmarks/serve.py`
(burstiness 1 = Poisson, < 1 burstier, > 1 more regular).

Closed loop (`arrival.process: closed`): `clients` concurrent users; each client is a session
whose requests carry `think_s` (see `workloads.request.Request`): the next request goes out
think_s seconds after the previous response completes. Written `arrival_s` values are the
earliest possible send times (previous arrival + think time, as if responses were instant).

Multi-turn sessions (`sessions:`): turn k's prompt is the whole conversation so far (every earlier
prompt and answer) plus a new user message. Each turn carries `prefix_id` = the conversation and
`prefix_tokens` = its whole prompt; by the trace format's rule (requests with one prefix_id share
their first min(prefix_tokens) tokens) turn k+1 shares all of turn k's prompt.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal, Union

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.errors import ConfigError
from workloads.request import Request

_STRICT = ConfigDict(extra="forbid", frozen=True)


# ---- distributions ------------------------------------------------------------------------------


class Fixed(BaseModel):
    model_config = _STRICT
    dist: Literal["fixed"] = "fixed"
    value: float = Field(ge=0)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, float(self.value))


class Uniform(BaseModel):
    model_config = _STRICT
    dist: Literal["uniform"] = "uniform"
    low: float = Field(ge=0)
    high: float = Field(ge=0)

    @model_validator(mode="after")
    def _order(self):
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) is below low ({self.low})")
        return self

    def draw(self, rng, n):
        return rng.uniform(self.low, self.high, size=n)


class Normal(BaseModel):
    model_config = _STRICT
    dist: Literal["normal"] = "normal"
    mean: float = Field(ge=0)
    std: float = Field(ge=0)

    def draw(self, rng, n):
        return rng.normal(self.mean, self.std, size=n)


class LogNormal(BaseModel):
    """Lognormal given by the mean and standard deviation of the value itself (not of its log):
    sigma² = ln(1 + std²/mean²), mu = ln(mean) - sigma²/2."""

    model_config = _STRICT
    dist: Literal["lognormal"] = "lognormal"
    mean: float = Field(gt=0)
    std: float = Field(ge=0)

    def draw(self, rng, n):
        sigma2 = math.log1p((self.std / self.mean) ** 2)
        return rng.lognormal(math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2), size=n)


class Exponential(BaseModel):
    model_config = _STRICT
    dist: Literal["exponential"] = "exponential"
    mean: float = Field(ge=0)

    def draw(self, rng, n):
        return rng.exponential(self.mean, size=n)


Dist = Annotated[Union[Fixed, Uniform, Normal, LogNormal, Exponential], Field(discriminator="dist")]

_DIST_ARGS = {"fixed": ("value",), "uniform": ("low", "high"), "normal": ("mean", "std"),
              "lognormal": ("mean", "std"), "exponential": ("mean",)}
_DIST_CLASSES = {"fixed": Fixed, "uniform": Uniform, "normal": Normal, "lognormal": LogNormal,
                 "exponential": Exponential}


def parse_dist(text: str, *, option: str) -> Fixed | Uniform | Normal | LogNormal | Exponential:
    """'512' | 'fixed:512' | 'uniform:100,2000' | 'normal:500,100' | 'lognormal:800,600' | 'exponential:5'."""
    name, _, args = text.partition(":")
    if not args:
        try:
            return Fixed(value=float(name))
        except ValueError:
            args = ""
    if name not in _DIST_ARGS:
        raise ConfigError(f"unknown distribution {name!r} (use {', '.join(_DIST_ARGS)}, e.g. lognormal:800,600)",
                          field=option)
    parts = [a for a in args.split(",") if a.strip()]
    want = _DIST_ARGS[name]
    if len(parts) != len(want):
        raise ConfigError(f"{name} takes {len(want)} number(s): {name}:{','.join(want)}", field=option)
    try:
        nums = [float(p) for p in parts]
    except ValueError:
        raise ConfigError(f"not a number in {text!r}", field=option) from None
    try:
        return _DIST_CLASSES[name](**dict(zip(want, nums)))
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(x) for x in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{text!r}: {where + ': ' if where else ''}{msg}", field=option) from None


def _tokens(x: np.ndarray, max_tokens: int | None) -> np.ndarray:
    """Round draws to whole tokens, at least 1, at most `max_tokens`."""
    t = np.maximum(np.rint(x), 1).astype(np.int64)
    return np.minimum(t, max_tokens) if max_tokens is not None else t


# ---- arrival processes --------------------------------------------------------------------------


class RatePoint(BaseModel):
    model_config = _STRICT
    start_s: float = Field(ge=0)
    rate_per_s: float = Field(ge=0)


class Daily(BaseModel):
    """A smooth daily curve: rate(t) = low + (high - low) * (1 + cos(2π (t - peak_s) / period_s)) / 2.
    `period_s` < 86400 compresses a day (600 plays a day in ten minutes)."""

    model_config = _STRICT
    low_rate_per_s: float = Field(ge=0)
    high_rate_per_s: float = Field(gt=0)
    peak_s: float = Field(9 * 3600.0, ge=0, description="time of the peak, seconds into the period (9 am)")
    period_s: float = Field(86400.0, gt=0)

    def rate(self, t: np.ndarray) -> np.ndarray:
        phase = 2 * math.pi * (t - self.peak_s) / self.period_s
        return self.low_rate_per_s + (self.high_rate_per_s - self.low_rate_per_s) * (1 + np.cos(phase)) / 2


class Arrival(BaseModel):
    """When requests are sent: an open-loop process at a rate (constant, schedule or daily curve),
    or `closed`: `clients` users each waiting for an answer, then `think_s`, before the next."""

    model_config = _STRICT
    process: Literal["poisson", "gamma", "constant", "closed"] = "poisson"
    rate_per_s: float | None = Field(None, gt=0, description="constant rate (open loop); inf = all at t=0")
    burstiness: float = Field(1.0, gt=0, description="gamma shape; 1 = Poisson, < 1 burstier")
    schedule: list[RatePoint] | None = Field(None, description="piecewise-constant rate, by start time")
    daily: Daily | None = None
    clients: int | None = Field(None, ge=1, description="closed loop: concurrent users")
    think_s: Dist | None = Field(None, description="closed loop: think time between a response and the next request")
    ramp_s: float = Field(0.0, ge=0, description="closed loop: client i starts at i * ramp_s / clients")

    @model_validator(mode="after")
    def _one_rate(self):
        # options of the other loop would be ignored without a word: conflicts are errors
        if self.process != "closed" and self.clients is not None:
            raise ValueError(f"clients is the closed loop's user count; process {self.process} sends at a rate "
                             "(use process closed, or drop clients)")
        if self.rate_per_s == math.inf and self.process != "closed":
            return self
        if self.process == "closed":
            if self.clients is None:
                raise ValueError("process closed needs clients")
            given = [k for k in ("rate_per_s", "schedule", "daily") if getattr(self, k) is not None]
            if given:
                raise ValueError(f"a closed loop sends when answered: {', '.join(given)} would be ignored (drop it)")
            return self
        given = [k for k in ("rate_per_s", "schedule", "daily") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of rate_per_s, schedule, daily (got {', '.join(given) or 'none'})")
        if self.schedule is not None:
            starts = [p.start_s for p in self.schedule]
            if starts[0] != 0 or any(b <= a for a, b in zip(starts, starts[1:])):
                raise ValueError("schedule start_s must begin at 0 and increase")
        return self

    def _cumulative_rate(self, horizon_s: float) -> tuple[np.ndarray, np.ndarray]:
        """Knots (t, Λ(t)) of the piecewise-linear cumulative rate up to `horizon_s`."""
        if self.rate_per_s is not None:
            return np.array([0.0, horizon_s]), np.array([0.0, self.rate_per_s * horizon_s])
        if self.schedule is not None:
            points = [p for p in self.schedule if p.start_s < horizon_s]
            t = np.array([p.start_s for p in points] + [horizon_s])
            r = np.array([p.rate_per_s for p in points])
        else:
            # the daily curve, as piecewise-constant steps of 1/2000 of its period (rate at step midpoints)
            step = self.daily.period_s / 2000
            t = np.arange(0.0, horizon_s + step, step)
            r = self.daily.rate(t[:-1] + step / 2)
        lam = np.concatenate([[0.0], np.cumsum(r * np.diff(t))])
        return t, lam

    def open_loop_times(self, rng: np.random.Generator, n: int | None, duration_s: float | None) -> np.ndarray:
        """Arrival times of an open-loop process, first at 0: the first `n`, or all before `duration_s`."""
        if self.rate_per_s == math.inf:  # vLLM's --request-rate inf: everything at once
            return np.zeros(n if n is not None else 0)
        if duration_s is not None:
            t_knots, lam_knots = self._cumulative_rate(duration_s)
            lam_end = lam_knots[-1]
            if lam_end <= 0:
                raise ConfigError("the rate is 0 for the whole duration", field="arrival")
            chunks, total, drawn = [], 0.0, 0
            chunk = int(lam_end + 10 * math.sqrt(lam_end) + 16)
            while total < lam_end and (n is None or drawn < n):
                g = self._unit_gaps(rng, chunk)
                if not chunks:
                    g[0] = 0.0  # first request at t = 0, as vLLM's get_request yields before sleeping
                c = total + np.cumsum(g)
                chunks.append(c)
                total, drawn = float(c[-1]), drawn + chunk
            tau = np.concatenate(chunks)
            tau = tau[tau < lam_end]
        else:
            g = self._unit_gaps(rng, n)
            g[0] = 0.0
            tau = np.cumsum(g)
            horizon = float(tau[-1]) / self._mean_rate_guess() + 1.0
            for _ in range(64):  # grow the horizon until the cumulative rate covers every point
                t_knots, lam_knots = self._cumulative_rate(horizon)
                if lam_knots[-1] >= tau[-1]:
                    break
                horizon *= 2
            else:
                raise ConfigError("the rate stays 0: these requests would never arrive", field="arrival")
        # Λ is piecewise linear and non-decreasing; np.interp maps a level reached on a flat part
        # (rate 0) to the end of that part, when arrivals resume.
        times = np.interp(tau, lam_knots, t_knots)
        return times[:n] if n is not None else times

    def _mean_rate_guess(self) -> float:
        if self.rate_per_s is not None:
            return self.rate_per_s
        if self.schedule is not None:
            positive = [p.rate_per_s for p in self.schedule if p.rate_per_s > 0]
            return min(positive) if positive else 1.0
        return max(self.daily.low_rate_per_s, self.daily.high_rate_per_s / 50)

    def _unit_gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.process == "poisson":
            return rng.exponential(1.0, size=n)
        if self.process == "gamma":
            return rng.gamma(self.burstiness, 1.0 / self.burstiness, size=n)
        return np.ones(n)


# ---- lengths and sessions -----------------------------------------------------------------------


class Sessions(BaseModel):
    """Multi-turn conversations: `turns` per session; `think_s` between a turn and the next."""

    model_config = _STRICT
    # Illustrative defaults, not measured: no public trace we have records turns or think times.
    turns: Dist = Field(default_factory=lambda: Fixed(value=4))
    think_s: Dist = Field(default_factory=lambda: Exponential(mean=30.0))
    closed_loop: bool = Field(True, description="write think_s so the simulator waits for each answer")


class GenSpec(BaseModel):
    """Everything `infersim trace gen` needs. Give `requests`, `duration_s`, or both (first reached)."""

    model_config = _STRICT
    seed: int = 0
    requests: int | None = Field(None, ge=1)
    duration_s: float | None = Field(None, gt=0)
    arrival: Arrival = Field(default_factory=lambda: Arrival(rate_per_s=1.0))
    # Defaults: lognormals with the mean and std of the Azure LLM inference trace 2023, conversation
    # part (ContextTokens 1,154.7 +- 1,108.8, GeneratedTokens 211.1 +- 162.9; computed from
    # AzureLLMInferenceTrace_conv.csv, see ../shared/traces/SOURCES.md).
    prompt: Dist = Field(default_factory=lambda: LogNormal(mean=1155, std=1109),
                         description="prompt tokens; with sessions, the tokens of each new user message")
    output: Dist = Field(default_factory=lambda: LogNormal(mean=211, std=163), description="output tokens")
    lengths_from: str | None = Field(None, description="trace to draw (prompt, output) pairs from, jointly")
    lengths_format: str | None = None
    max_prompt_tokens: int | None = Field(None, ge=1)
    max_output_tokens: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1, description="client budget; outputs are clamped to it")
    system_prompt_tokens: int = Field(0, ge=0, description="a prefix shared by every request (prefix_id 'system')")
    sessions: Sessions | None = None

    @model_validator(mode="after")
    def _bounds(self):
        if self.requests is None and self.duration_s is None:
            raise ValueError("give requests or duration_s")
        if self.arrival.process == "closed" and self.requests is None:
            raise ValueError("a closed-loop trace needs requests (its duration depends on the server)")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens <= self.system_prompt_tokens:
            raise ValueError("max_prompt_tokens must exceed system_prompt_tokens (it bounds the whole prompt)")
        if self.arrival.rate_per_s == math.inf and self.requests is None:
            raise ValueError("rate inf (all at t=0) needs requests")
        return self

    @property
    def prompt_cap(self) -> int | None:
        """The cap on the drawn part of a prompt: max_prompt_tokens bounds the whole prompt,
        system prompt included."""
        return None if self.max_prompt_tokens is None else self.max_prompt_tokens - self.system_prompt_tokens


def load_spec(path: str | Path) -> dict:
    """The raw mapping of a YAML spec file (validated by `GenSpec` after CLI overrides are merged)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("no such spec file", file=path) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(f"invalid YAML: {getattr(exc, 'problem', exc)}", file=path,
                          line=mark.line + 1 if mark else None) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of spec fields", file=path)
    return data


def build_spec(data: dict, *, file: str | Path | None = None) -> GenSpec:
    """Validate a spec mapping; the first problem becomes a ConfigError naming the field.

    An unknown (often misspelled) field is reported before the "Field required" it causes."""
    try:
        return GenSpec.model_validate(data)
    except ValidationError as exc:
        errs = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        first = errs[0]
        msg = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        loc = ".".join(str(x) for x in first["loc"]) or None
        raise ConfigError(msg + more, file=file, field=loc) from None


class _Lengths:
    """Draws (prompt, output) token pairs: independently from two distributions, or jointly as
    whole rows of an existing trace (its empirical joint distribution)."""

    def __init__(self, spec: GenSpec, rng: np.random.Generator):
        self.spec, self.rng = spec, rng
        self.pairs = None
        if spec.lengths_from:
            from workloads.importers import read_source  # an importer reads any supported trace

            src = read_source(spec.lengths_from, spec.lengths_format)
            self.pairs = (src.prompt_tokens, src.output_tokens)

    def draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        s = self.spec
        if self.pairs is not None:
            idx = self.rng.integers(0, len(self.pairs[0]), size=n)
            p, o = self.pairs[0][idx].astype(float), self.pairs[1][idx].astype(float)
        else:
            p, o = s.prompt.draw(self.rng, n), s.output.draw(self.rng, n)
        caps = [c for c in (s.max_output_tokens, s.max_tokens) if c is not None]
        return _tokens(p, s.prompt_cap), _tokens(o, min(caps) if caps else None)


def generate(spec: GenSpec) -> list[Request]:
    """The requests a spec describes, sorted by arrival (ids 0, 1, ... in that order)."""
    rng = np.random.default_rng(spec.seed)
    lengths = _Lengths(spec, rng)
    if spec.arrival.process == "closed":
        rows = _closed_loop(spec, rng, lengths)
    elif spec.sessions is not None:
        rows = _open_sessions(spec, rng, lengths)
    else:
        t = spec.arrival.open_loop_times(rng, spec.requests, spec.duration_s)
        p, o = lengths.draw(len(t))
        rows = [dict(arrival_s=float(t[i]), prompt=int(p[i]), output=int(o[i])) for i in range(len(t))]
    # microsecond resolution keeps the files short and exactly reproducible
    for r in rows:
        r["arrival_s"] = round(r["arrival_s"], 6)
    rows.sort(key=lambda r: r["arrival_s"])  # stable: a session's turns keep their order
    if spec.requests is not None:
        rows = rows[: spec.requests]
    if spec.duration_s is not None:
        rows = [r for r in rows if r["arrival_s"] < spec.duration_s]
    return [_to_request(i, r, spec) for i, r in enumerate(rows)]


def _to_request(i: int, r: dict, spec: GenSpec) -> Request:
    """A generated row as a Request. A system prompt is prepended to every prompt; it is the shared
    prefix ('system') of requests that have no conversation prefix, and part of a conversation's."""
    sys_tokens = spec.system_prompt_tokens
    if "prefix_id" in r:
        prefix_id, prefix_tokens = r["prefix_id"], r["prefix_tokens"] + sys_tokens
    elif sys_tokens:
        prefix_id, prefix_tokens = "system", sys_tokens
    else:
        prefix_id, prefix_tokens = None, 0
    return Request(
        id=str(i), arrival_s=r["arrival_s"], prompt_tokens=r["prompt"] + sys_tokens, output_tokens=r["output"],
        max_tokens=spec.max_tokens if spec.max_tokens is not None else r["output"],
        session_id=r.get("session"), prefix_id=prefix_id, prefix_tokens=prefix_tokens, think_s=r.get("think_s"),
    )


def _conversation(spec: GenSpec, lengths: _Lengths, sid: str, start_s: float, n_turns: int,
                  think: np.ndarray, closed: bool) -> list[dict]:
    """One conversation's turns. Turn k's prompt = all earlier prompts and answers + a new message;
    the conversation ends early when the prompt would pass max_prompt_tokens.

    Every turn names the conversation as its prefix with its whole prompt as prefix_tokens (the
    prompt *is* the conversation so far), so turn k+1 shares turn k's whole prompt with it."""
    new_msg, out = lengths.draw(n_turns)
    rows, history, t = [], 0, start_s
    cap = spec.prompt_cap
    for k in range(n_turns):
        prompt = history + int(new_msg[k])
        if k and cap is not None and prompt > cap:
            break
        row = dict(arrival_s=t, prompt=prompt, output=int(out[k]), session=sid)
        if n_turns > 1:
            row.update(prefix_id=sid, prefix_tokens=prompt)
        if k and closed:
            row["think_s"] = round(float(think[k]), 6)
        rows.append(row)
        history = prompt + int(out[k])
        if k + 1 < n_turns:
            t += float(think[k + 1])
    return rows


def _open_sessions(spec: GenSpec, rng, lengths: _Lengths) -> list[dict]:
    """Open-loop session starts (the arrival process), each followed by its turns."""
    ses = spec.sessions
    # `requests` session starts are always enough (every session has >= 1 turn); the caller keeps
    # the first `requests` rows by time.
    starts = spec.arrival.open_loop_times(rng, spec.requests, spec.duration_s)
    rows = []
    next_check = spec.requests or 0
    for j, t0 in enumerate(starts):
        # Later sessions start at or after t0: once `requests` rows come no later than t0, the
        # first `requests` rows by time are settled. Checked as the row count grows by half, so
        # the checks cost O(rows) in all.
        if spec.requests is not None and len(rows) >= next_check:
            if np.count_nonzero(np.fromiter((r["arrival_s"] for r in rows), float, len(rows)) <= t0) >= spec.requests:
                break
            next_check = int(len(rows) * 1.5) + 1
        n_turns = int(_tokens(ses.turns.draw(rng, 1), None)[0])
        think = np.maximum(ses.think_s.draw(rng, n_turns), 0.0)
        rows += _conversation(spec, lengths, f"s{j}", float(t0), n_turns, think, ses.closed_loop)
    return rows


def _closed_loop(spec: GenSpec, rng, lengths: _Lengths) -> list[dict]:
    """`clients` users (session ids c0, c1, ...), each sending ceil(requests / clients) requests
    one after another, think_s after each response.

    With `sessions`, a user's requests form conversations (the prefix is the conversation so far);
    without, a user's requests are independent (no shared prefix)."""
    a = spec.arrival
    think_dist = a.think_s or Fixed(value=0)
    turns_dist = spec.sessions.turns if spec.sessions is not None else None
    per_client = -(-spec.requests // a.clients)
    rows = []
    for c in range(a.clients):
        sid = f"c{c}"
        t = a.ramp_s * c / a.clients
        made, conv = 0, 0
        while made < per_client:
            n_turns = per_client if turns_dist is None else int(_tokens(turns_dist.draw(rng, 1), None)[0])
            n_turns = min(n_turns, per_client - made)
            think = np.maximum(think_dist.draw(rng, n_turns), 0.0)
            if turns_dist is None:
                p, o = lengths.draw(n_turns)
                turns = []
                for k in range(n_turns):
                    t += float(think[k]) if k else 0.0
                    turns.append(dict(arrival_s=t, prompt=int(p[k]), output=int(o[k])))
                    if k:
                        turns[-1]["think_s"] = round(float(think[k]), 6)
            else:
                if made:
                    t += float(think[0])  # think[0]: the pause before this conversation's first turn
                turns = _conversation(spec, lengths, f"{sid}.{conv}", t, n_turns, think, True)
            if made:
                turns[0]["think_s"] = round(float(think[0]), 6)
            for row in turns:
                row["session"] = sid  # the client is the closed-loop session; prefix_id names the conversation
            rows += turns
            made += len(turns)
            t = turns[-1]["arrival_s"]
            conv += 1
    return rows
