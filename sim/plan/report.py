"""Self-contained HTML reports (plotly.js inlined, so they open offline) for sweeps and plans."""

from __future__ import annotations

import html
import os
from typing import Any

import pandas as pd
import plotly.graph_objects as go

_ID_FIELDS = ["trace", "hw", "model", "quant", "engine"]
_NOT_OPTIONS = {"index", "key", "status", "error", "concurrency", "rate_scale", "rate_rps", "offered_rps",
                "seed", "overrides", "config_json"}


def pareto_front(points: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Rows no other row beats on both `x` and `y` (lower is better on both), sorted by `x`."""
    pts = points.dropna(subset=[x, y]).sort_values([x, y], kind="stable")
    keep, best_y = [], float("inf")
    for idx, yv in zip(pts.index, pts[y]):
        if yv < best_y:
            keep.append(idx)
            best_y = yv
    return pts.loc[keep]


def option_columns(ok: pd.DataFrame) -> list[str]:
    """What distinguishes one option from another: run fields and overrides that vary, not load."""
    override_cols: list[str] = []
    if "overrides" in ok:
        import json

        for text in ok["overrides"].dropna().unique():
            override_cols += [c for c in json.loads(text) if c not in override_cols]
    cols = [c for c in _ID_FIELDS + override_cols if c in ok and c not in _NOT_OPTIONS]
    varying = [c for c in cols if ok[c].astype(str).nunique() > 1]
    return varying


def _label(row: pd.Series, cols: list[str]) -> str:
    if not cols:
        return "all"
    parts = []
    for c in cols:
        v = row[c]
        v = os.path.basename(str(v)) if c == "trace" else v
        parts.append(f"{v}" if c in ("hw", "engine", "model", "quant") else f"{c}={v}")
    return " · ".join(str(p) for p in parts)


def _with_load(ok: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """A `load` column: concurrency (users) where given, else the offered request rate."""
    ok = ok.copy()
    conc = pd.to_numeric(ok.get("concurrency"), errors="coerce")
    rate = pd.to_numeric(ok.get("offered_rps"), errors="coerce")
    ok["load"] = conc.where(conc.notna(), rate)
    if conc.notna().all():
        title = "concurrency (users)"
    elif conc.isna().all() and rate.notna().all():
        title = "offered load (requests/s)"
    elif conc.isna().all() and rate.isna().all():
        ok["load"] = pd.to_numeric(ok.get("throughput_requests_per_s"), errors="coerce")
        title = "achieved requests/s (trace replayed as recorded)"
    else:
        title = "load (users where concurrency is set, else requests/s)"
    return ok, title


def _line_figure(ok: pd.DataFrame, y: str, title: str, x_title: str, y_title: str, *, log_y: bool = False) -> go.Figure:
    fig = go.Figure()
    for label, g in ok.groupby("option", sort=False):
        g = g.sort_values("load")
        fig.add_trace(go.Scatter(x=g["load"], y=g[y], mode="lines+markers", name=str(label)))
    fig.update_layout(title=title, xaxis_title=x_title, yaxis_title=y_title, template="plotly_white",
                      height=420, legend_title_text="option")
    if log_y:
        fig.update_yaxes(type="log")
    return fig


def _table_html(df: pd.DataFrame, columns: list[str]) -> str:
    cols = [c for c in columns if c in df]
    view = df[cols].copy()
    for c in cols:
        if pd.api.types.is_float_dtype(view[c]):
            view[c] = view[c].map(lambda v: "" if pd.isna(v) else f"{v:.4g}")
    return view.to_html(index=False, escape=True, na_rep="", classes="results", border=0)


_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}}
table.results{{border-collapse:collapse;font-size:12px}}table.results td,table.results th{{padding:2px 8px;
border-bottom:1px solid #ddd;text-align:right}}.note{{color:#555}}.err{{color:#a00}}</style></head>
<body><h1>{title}</h1>{body}</body></html>"""


def _page(title: str, sections: list[str | go.Figure]) -> str:
    parts, js_included = [], False
    for s in sections:
        if isinstance(s, go.Figure):
            parts.append(s.to_html(full_html=False, include_plotlyjs=not js_included))
            js_included = True
        else:
            parts.append(s)
    return _PAGE.format(title=html.escape(title), body="\n".join(parts))


def sweep_report(frame: pd.DataFrame, *, title: str = "infersim sweep") -> str:
    """Throughput, TTFT p90 and TPOT p90 against load per option, KV use, a cost-vs-latency Pareto
    view and the table of every combination (failed ones with their error)."""
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame.iloc[0:0]
    failed = frame[frame["status"] != "ok"] if "status" in frame else frame
    sections: list[str | go.Figure] = [
        f"<p class='note'>{len(frame)} combinations: {len(ok)} simulated, {len(failed)} failed.</p>"]
    if not ok.empty:
        ok, x_title = _with_load(ok)
        opts = option_columns(ok)
        ok["option"] = ok.apply(lambda r: _label(r, opts), axis=1)
        sections.append(_line_figure(ok, "throughput_output_tok_s", "Output throughput vs load", x_title, "output tokens/s"))
        sections.append(_line_figure(ok, "ttft_s_p90", "TTFT p90 vs load", x_title, "TTFT p90 (s)", log_y=True))
        sections.append(_line_figure(ok, "tpot_s_p90", "TPOT p90 vs load", x_title, "TPOT p90 (s)"))
        if "kv_peak_used_fraction" in ok:
            sections.append(_line_figure(ok, "kv_peak_used_fraction", "Peak KV-cache use vs load", x_title,
                                         "peak KV used / capacity"))
        sections.append(_pareto_figure(ok))
    sections.append("<h2>All combinations</h2>")
    sections.append(_table_html(frame, ["index", "status", "verdict_text", "slo_met", "slo_misses", "hw", "engine", "model", "quant", "concurrency",
                                        "offered_rps", "throughput_output_tok_s", "ttft_s_p90", "tpot_s_p90",
                                        "e2e_s_p90", "kv_peak_used_fraction", "kv_preemptions",
                                        "requests_rejected", "cost_rental_usd_per_million_output_tokens",
                                        "cost_ownership_usd_per_million_output_tokens", "overrides", "key"]))
    if not failed.empty:
        sections.append("<h2>Failed combinations</h2><ul>" + "".join(
            f"<li class='err'>#{int(r['index'])} {html.escape(str(r['hw']))} {html.escape(str(r['engine']))}: "
            f"{html.escape(str(r['error']))}</li>" for _, r in failed.iterrows()) + "</ul>")
    return _page(title, sections)


def _pareto_figure(ok: pd.DataFrame) -> go.Figure:
    """Cost per million output tokens (rental; ownership where no rental price) vs TTFT p90."""
    cost_col = "cost_rental_usd_per_million_output_tokens"
    kind = "rental"
    if cost_col not in ok or ok[cost_col].isna().all():
        cost_col, kind = "cost_ownership_usd_per_million_output_tokens", "ownership"
    fig = go.Figure()
    if cost_col not in ok or ok[cost_col].isna().all():
        fig.update_layout(title="Cost vs latency: no profile in this sweep has a price")
        return fig
    for label, g in ok.groupby("option", sort=False):
        fig.add_trace(go.Scatter(x=g[cost_col], y=g["ttft_s_p90"], mode="markers", name=str(label),
                                 text=[f"load {v:g}" for v in g["load"]],
                                 hovertemplate="%{text}<br>$%{x:.3g}/M tok<br>TTFT p90 %{y:.3g} s"))
    front = pareto_front(ok, cost_col, "ttft_s_p90")
    fig.add_trace(go.Scatter(x=front[cost_col], y=front["ttft_s_p90"], mode="lines", name="Pareto front",
                             line={"dash": "dot", "color": "black", "shape": "hv"}))
    fig.update_layout(title=f"Cost ({kind}, $ per million output tokens at the run's throughput) vs TTFT p90",
                      xaxis_title=f"{kind} $ / million output tokens", yaxis_title="TTFT p90 (s)",
                      template="plotly_white", height=460)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig


def plan_report(plan: dict[str, Any]) -> str:
    """Ranked candidates, max rate vs target, costs, and every probe of the rate search."""
    cands = plan["candidates"]
    labels = [" / ".join(str(c.get(k)) for k in ("hw", "engine", "model", "quant") if c.get(k)) for c in cands]
    slo = plan["slo"]
    sections: list[str | go.Figure] = [
        f"<p>Workload: {html.escape(str(plan['workload']['trace']))} ({plan['workload']['requests']} requests, "
        f"native rate {plan['workload']['native_rate_rps']:.4g} req/s, mean output "
        f"{plan['workload']['mean_output_tokens']:.1f} tokens). SLO: {html.escape(plan['slo_text'])}. "
        f"Target: {plan['target_rps']:g} req/s.</p>",
        f"<p class='note'>Search: {html.escape(plan['search']['method'])}.<br>Costs: "
        f"{html.escape(plan['assumptions']['text'])}<br>Workload searched: "
        f"{html.escape(str(plan['workload'].get('text', '')))}</p>",
    ]
    rows = []
    for rank_i, (c, label) in enumerate(zip(cands, labels), start=1):
        cost = c.get("cost_per_million_output_tokens") or {}
        iv, rr = c.get("max_rate_interval_rps"), c.get("replicas_range")
        rows.append({"rank": rank_i, "candidate": label, "max rate req/s": c.get("max_rate_rps"),
                     "uncertainty req/s": f"{iv[0]:.4g}-{iv[1]:.4g}" if iv else "",
                     "first failing req/s": c.get("first_failing_rate_rps"), "replicas": c.get("replicas"),
                     "replicas range": f"{rr[0]}-{rr[1]}" if rr else "",
                     "verdict at max rate": (c.get("at_max_rate") or {}).get("verdict", ""),
                     "rental $/M tok": cost.get("rental"), "ownership $/M tok": cost.get("ownership"),
                     "simulations": c.get("simulations"), "note": c.get("error") or c.get("note") or ""})
    sections.append(_table_html(pd.DataFrame(rows), list(rows[0]) if rows else []))

    fig = go.Figure(go.Bar(x=labels, y=[c.get("max_rate_rps") or 0 for c in cands], name="max rate / replica",
                           text=[f"{c.get('replicas') or '-'} replicas" for c in cands], textposition="outside"))
    fig.update_layout(title="Highest request rate one replica sustains within the SLO",
                      yaxis_title="requests/s", template="plotly_white", height=420)
    sections.append(fig)

    fig = go.Figure()
    for kind in ("rental", "ownership"):
        fig.add_trace(go.Bar(x=labels, y=[(c.get("cost_per_million_output_tokens") or {}).get(kind) for c in cands],
                             name=kind))
    fig.update_layout(title=f"Cost per million output tokens at {plan['target_rps']:g} req/s", barmode="group",
                      yaxis_title="$ / million output tokens", template="plotly_white", height=420)
    sections.append(fig)

    metric, slo_value, unit = ("ttft_p90_s", slo.get("ttft_p90_s"), "TTFT p90 (s)")
    if slo_value is None:
        metric, slo_value, unit = ("tpot_p90_s", slo.get("tpot_p90_s"), "TPOT p90 (s)")
    fig = go.Figure()
    for c, label in zip(cands, labels):
        probes = c.get("probes") or []
        fig.add_trace(go.Scatter(
            x=[p["rate_rps"] for p in probes], y=[p[metric] for p in probes], mode="markers", name=label,
            marker={"symbol": ["circle" if p["passed"] else "x" for p in probes], "size": 9},
            text=[p["reason"] or "pass" for p in probes], hovertemplate="%{x:.4g} req/s: %{text}"))
    if slo_value is not None:
        fig.add_hline(y=slo_value, line_dash="dash", annotation_text="SLO")
    fig.update_layout(title="Every replay of the rate search (o pass, x fail)", xaxis_title="request rate (req/s)",
                      yaxis_title=unit, template="plotly_white", height=460)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    sections.append(fig)
    return _page(plan.get("title") or "infersim plan", sections)
