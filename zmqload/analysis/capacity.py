"""Capacity planning across the runs of a sweep, from the per-run summary rows.

Runs are grouped by what a user would tune or cannot change (pattern, transport, message
size, high-water marks); within a group they are ordered by offered rate. Plain Python on
a handful of rows: the heavy lifting is already aggregated by Spark.
"""
from __future__ import annotations

import re
from collections import defaultdict

GROUP_KEYS = ("pattern", "transport", "size", "sndhwm", "rcvhwm", "proxy_sndhwm", "proxy_rcvhwm")
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
          "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}


def parse_bytes(text) -> int:
    """'64MiB' -> 67108864, '1GiB', '500MB', '1e6', '4096' -> bytes. ValueError otherwise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 64MiB, 1GiB, 500MB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def fmt_bytes(n) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit, f in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= f:
            return f"{n / f:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_rate(r) -> str:
    if r is None:
        return "-"
    if r >= 1e6:
        return f"{r / 1e6:.2f}M/s"
    if r >= 1e3:
        return f"{r / 1e3:.1f}k/s"
    return f"{r:.0f}/s"


def hwm_label(row) -> str:
    parts = [f"SNDHWM={_v(row.get('sndhwm'))}", f"RCVHWM={_v(row.get('rcvhwm'))}"]
    if row.get("proxy_sndhwm") is not None or row.get("proxy_rcvhwm") is not None:
        parts.append(f"proxy {_v(row.get('proxy_sndhwm'))}/{_v(row.get('proxy_rcvhwm'))}")
    return " ".join(parts)


def _v(x):
    return "default" if x is None else x


def offered(row):
    """Offered rate of a run: the schedule's (rate x producers) if paced, else what was attempted."""
    r = row.get("offered_rate")
    if row.get("rate_per_producer"):
        r = row["rate_per_producer"] * (row.get("producers") or 1)
    return r


def is_clean(row, slo_p99_us) -> bool:
    p99 = row.get("latency_intended_p99_us")
    return (not row.get("interrupted") and (row.get("lost") or 0) == 0 and (row.get("dropped_sender") or 0) == 0
            and (row.get("errors") or 0) == 0 and (row.get("received") or 0) > 0
            and p99 is not None and p99 <= slo_p99_us)


def capacity_table(run_rows: list[dict], slo_p99_us: float = 1000.0) -> list[dict]:
    """One row per group: highest clean offered rate, the knee, peak queued memory there."""
    groups = defaultdict(list)
    for r in run_rows:
        if r.get("received") is None and r.get("attempted") is None:
            continue
        groups[tuple(r.get(k) for k in GROUP_KEYS)].append(r)
    table = []
    for key, rows in groups.items():
        rows = sorted(rows, key=lambda r: offered(r) or 0)
        clean = [r for r in rows if is_clean(r, slo_p99_us)]
        best = max(clean, key=lambda r: offered(r) or 0) if clean else None
        knee, why = None, None
        base_p99 = next((r.get("latency_intended_p99_us") for r in rows if r.get("latency_intended_p99_us")), None)
        for r in rows:
            reasons = []
            if (r.get("lost") or 0) or (r.get("dropped_sender") or 0):
                reasons.append("loss starts")
            p99 = r.get("latency_intended_p99_us")
            if p99 is not None and p99 > slo_p99_us:
                reasons.append("p99 over SLO")
            elif p99 is not None and base_p99 and p99 > 4 * base_p99 and r is not rows[0]:
                reasons.append("p99 rises 4x")
            o, a = offered(r), r.get("recv_rate")
            if o and a and a < 0.95 * o * (r.get("consumers") if r.get("fanout") else 1):
                reasons.append("achieved < 95% of offered")
            if reasons:
                knee, why = r, ", ".join(reasons)
                break
        g = dict(zip(GROUP_KEYS, key))
        g.update({
            "hwm": hwm_label(g), "runs": len(rows),
            "rates_tested": [offered(r) for r in rows],
            "max_clean_rate": offered(best) if best else None,
            "max_clean_run": best["run"] if best else None,
            "p99_at_max_us": best.get("latency_intended_p99_us") if best else None,
            "peak_queued_bytes_at_max": best.get("queued_bytes_max") if best else None,
            "knee_rate": offered(knee) if knee else None, "knee_reason": why,
            "max_achieved_rate": max((r.get("recv_rate") or 0) for r in rows) or None,
        })
        table.append(g)
    table.sort(key=lambda g: tuple(str(g.get(k)) for k in GROUP_KEYS))
    return table


def recommend(table: list[dict], memory_budget: int | None = None, target_rate: float | None = None,
              slo_p99_us: float = 1000.0) -> list[str]:
    """Plain-words recommendations, one per (pattern, transport, size)."""
    by = defaultdict(list)
    for g in table:
        by[(g["pattern"], g["transport"], g["size"])].append(g)
    out = []
    budget_txt = f" within {fmt_bytes(memory_budget)}" if memory_budget else ""
    for (pattern, transport, size), gs in sorted(by.items(), key=lambda kv: tuple(map(str, kv[0]))):
        what = f"{pattern} over {transport}, {size} B messages"
        target = target_rate or max((g["max_clean_rate"] or 0) for g in gs) or None
        fits = [g for g in gs if g["max_clean_rate"] and target and g["max_clean_rate"] >= target * 0.999
                and (memory_budget is None or (g["peak_queued_bytes_at_max"] or 0) <= memory_budget)]
        if not target:
            worst = gs[0]
            out.append(f"{what}: no tested rate was free of loss with p99 under {slo_p99_us:g} us "
                       f"(first trouble at {fmt_rate(worst['knee_rate'])}: {worst['knee_reason'] or 'no data'}); "
                       f"test lower rates or larger HWM.")
            continue
        if fits:
            pick = min(fits, key=lambda g: (g["peak_queued_bytes_at_max"] or 0))
            knee = f"; trouble starts at {fmt_rate(pick['knee_rate'])} ({pick['knee_reason']})" if pick["knee_rate"] else ""
            out.append(f"{what}: {pick['hwm']} carries {fmt_rate(target)} with zero loss and p99 "
                       f"{pick['p99_at_max_us']:.0f} us (SLO {slo_p99_us:g} us), peak queued "
                       f"{fmt_bytes(pick['peak_queued_bytes_at_max'])}{budget_txt}{knee}.")
        else:
            cands = [g for g in gs if g["max_clean_rate"] and (memory_budget is None or
                     (g["peak_queued_bytes_at_max"] or 0) <= memory_budget)]
            if cands:
                best = max(cands, key=lambda g: g["max_clean_rate"])
                out.append(f"{what}: no tested HWM setting carries {fmt_rate(target)} cleanly{budget_txt}; "
                           f"the best is {best['hwm']} at {fmt_rate(best['max_clean_rate'])} "
                           f"(peak queued {fmt_bytes(best['peak_queued_bytes_at_max'])}).")
            else:
                out.append(f"{what}: nothing tested stays{budget_txt} at a clean rate; raise the budget or lower the rate.")
    return out
