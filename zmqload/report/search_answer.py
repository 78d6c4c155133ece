"""The capacity search's answer, as the report opens with it.

`zmqload capacity` writes `capacity-search.json` beside its probes' run directories
(docs/CAPACITY.md). A report over such a directory starts with one sentence per searched
setting: the max sustainable rate, its bracket, what broke above it (the measured value of
the first broken SLO), the cause read from the failing probe's figures (issue 12: drops while
the consumers kept up -> a larger HWM; consumers falling behind -> the consumer, with what its
simulated work allows), and at the answer the p99, the queue peak by place and the consumer's
memory. The sentence restates the search's own figures; it computes nothing new.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Any

from ..analysis.capacity import KEEPS_UP, fmt_rate
from ..contract.derived import work_ceiling
from ..patterns import PATTERNS

FILE = "capacity-search.json"


def load(paths: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The searches under the report's input paths (the path itself or one level below),
    and a warning for each file that cannot be read."""
    docs, warnings = [], []
    seen = set()
    for path in paths:
        for f in sorted({os.path.join(path, FILE), *glob.glob(os.path.join(path, "*", FILE))}):
            real = os.path.realpath(f)
            if real in seen or not os.path.isfile(f):
                continue
            seen.add(real)
            try:
                with open(f) as fh:
                    doc = json.load(fh)
                if not isinstance(doc.get("searches"), list):
                    raise ValueError("no 'searches' list")
                docs.append(doc)
            except (OSError, ValueError, AttributeError) as e:
                warnings.append(f"capacity search {f} skipped: {e}")
    return docs, warnings


def slo_p99_us(docs: list[dict[str, Any]]) -> float | None:
    """The p99 SLO the searches used (the strictest, if they differ), or None."""
    given = [d["slos"]["slo_p99_us"] for d in docs if (d.get("slos") or {}).get("slo_p99_us")]
    return min(given) if given else None


# Named by the setting's head ('pub-sub tcp 256 B'), never as grouping keys of their own.
HEAD = ("pattern", "transport", "size")


def head(search: dict[str, Any]) -> str:
    """'pub-sub tcp 256 B': the pattern, transport and size of the searched setting."""
    w = search.get("workload") or {}
    return f"{w.get('pattern', '?')} {w.get('transport', '?')} {w.get('size', '?')} B"


def keys(search: dict[str, Any]) -> dict[str, Any]:
    """What this combination's search varied, beyond the head: {'rcvhwm': 100}."""
    return {k: v for k, v in (search.get("values") or {}).items() if k not in HEAD}


def setting(search: dict[str, Any]) -> str:
    """'pub-sub tcp 256 B, rcvhwm=100': the pattern, transport, size, what the search varied and
    the HWMs it set (they decide whether bursts drop)."""
    w = search.get("workload") or {}
    values = keys(search)
    varied = ", ".join(f"{k}={v}" for k, v in values.items())
    hwms = ", ".join(f"{k.upper()} {w[k]:,}" for k in ("sndhwm", "rcvhwm")
                     if w.get(k) is not None and k not in values)
    return head(search) + "".join(f", {part}" for part in (varied, hwms) if part)


def _probe_at(search: dict[str, Any], rate: float | None, passed: bool) -> dict[str, Any] | None:
    """The last probe at `rate` with that outcome (a re-run counts over the first one)."""
    if rate is None:
        return None
    found = None
    for p in search.get("probes") or ():
        if p.get("rate") == rate and bool(p.get("passed")) == passed:
            found = p
    return found


def _mib(kb: float | None, decimals: int = 0) -> str:
    return "-" if kb is None else f"{kb / 1024:,.{decimals}f} MiB"


def _consumer_load(search: dict[str, Any], rate: float) -> float:
    """Messages per second each consumer must take at `rate` per producer."""
    w = search.get("workload") or {}
    producers, consumers = search.get("producers") or 1, w.get("consumers") or 1
    pattern = PATTERNS.get(w.get("pattern") or "")      # unknown in a foreign file: the load is shared
    return rate * producers / (1 if pattern and pattern.fanout else consumers)


def cause(search: dict[str, Any], failing: dict[str, Any] | None) -> str | None:
    """What limited the answer, from the lowest failing probe. The consumers fell behind when they
    received less than KEEPS_UP of the offered rate until the drain, or the search's own
    --min-achieved or backlog check broke: they are the limit, said with what their simulated
    work allows. Drops while they kept up are bursts overflowing the HWM; a p99 breach while
    they kept up is queueing. None when nothing says."""
    if not failing:
        return None
    slos = [b.get("slo") for b in failing.get("breaches") or ()]
    f = failing.get("figures") or {}
    achieved, hi = f.get("achieved"), failing.get("rate")
    w = search.get("workload") or {}
    hwm = f"SNDHWM {_hwm(w.get('sndhwm'))}, RCVHWM {_hwm(w.get('rcvhwm'))}"
    # The receive rate until the drain (throughput_msgs) decides: achieved counts what the fast
    # drain read, and a queue that filled in the first half and then dropped (or only grew into
    # latency) need not break the backlog check.
    offered_rate, received_rate = f.get("offered_rate"), f.get("throughput_msgs")
    slow = bool(offered_rate and received_rate is not None and received_rate < KEEPS_UP * offered_rate)
    fell_behind = slow or "min-achieved" in slos or "backlog" in slos
    if slos and slos[0] == "max-loss" and not fell_behind and achieved is not None:
        rate = f"{fmt_rate(received_rate)}, " if received_rate is not None else ""
        return (f"limited by drops at the HWM while the consumer kept up on average (at {fmt_rate(hi)} it "
                f"received {rate}{achieved:.2%} of the offered load, no growing backlog; {hwm}): bursts "
                f"overflow the pipes, a larger HWM absorbs them")
    delay = w.get("consumer_delay_us")
    if fell_behind:
        took = f"took {fmt_rate(received_rate)} of the {fmt_rate(offered_rate)} offered" if slow else ""
        if not delay:
            return "limited by the consumer (it fell behind" + (f": {took})" if took else ")")
        ceiling, consumers = work_ceiling(delay), w.get("consumers") or 1
        text = (f"limited by the consumer, doing {delay:g} us of work per message (at most {fmt_rate(ceiling)} "
                f"each, {consumers} consumer{'s' * (consumers > 1)})")
        if hi and _consumer_load(search, hi) < 0.8 * ceiling:
            # the work alone would carry this load: the consumer's share of the CPU did not
            text += (f", and it fell behind at {fmt_rate(_consumer_load(search, hi))} per consumer"
                     + (f" ({took})" if took else "") + ", below what its work alone allows (it shares the CPU "
                     "with the producers and libzmq's I/O threads)")
        return text
    if slos == ["slo-p99-us"]:
        return "limited by latency: p99 over the SLO while nothing was lost and no backlog grew (queueing)"
    return None


def _hwm(value: Any) -> str:
    return "default" if value is None else f"{value:,}"


def sentence(search: dict[str, Any]) -> str:
    """One sentence: the answer and why it is there."""
    name = setting(search)
    lo, hi = (list(search.get("bracket") or []) + [None, None])[:2]
    producers = search.get("producers") or 1
    if search.get("generator_limited"):
        probe: dict[str, Any] = next((p for p in search.get("probes") or () if p.get("generator_limited")), {})
        reached = (probe.get("figures") or {}).get("reached_rate")
        return (f"{name}: no capacity measured: the load generator could not keep its schedule at "
                f"{fmt_rate(probe.get('rate'))} (it reached {fmt_rate(reached)}, without pushback from the "
                f"sockets); add --producers to offer more load.")
    if not search.get("converged"):
        return f"{name}: no answer: {search.get('reason') or 'the search did not converge'}."
    rate = search.get("max_sustainable_rate")
    total = f" per producer ({fmt_rate(rate * producers)} in total)" if producers > 1 and rate else ""
    failing = _probe_at(search, hi, passed=False)
    why = cause(search, failing)
    parts = [f"{name}: {fmt_rate(rate)} sustainable{total} (bracket {fmt_rate(lo)} - {fmt_rate(hi)})"
             + (f", {why}" if why else "")]
    breaches = (failing or {}).get("breaches") or []
    if breaches:
        parts.append(f"above it at {fmt_rate(hi)}: {breaches[0].get('text') or breaches[0].get('slo')}")
    delay = (search.get("workload") or {}).get("consumer_delay_us")
    if delay and not (why or "").startswith("limited by the consumer"):
        consumers = (search.get("workload") or {}).get("consumers") or 1
        parts.append(f"each consumer does {delay:g} us of work per message "
                     f"(at most {fmt_rate(work_ceiling(delay))} each, {consumers} consumer{'s' * (consumers > 1)})")
    at = (_probe_at(search, rate, passed=True) or {}).get("figures") or {}
    if at:
        peak = at.get("queue_peak") or {}
        parts.append(f"at that rate p99 {at.get('p99_us', 0) or 0:,.0f} us, queue peak {peak.get('messages', 0):,} "
                     f"messages ({peak.get('kernel_messages', 0):,} in kernel buffers, "
                     f"{peak.get('libzmq_messages', 0):,} in libzmq), consumer RSS {_mib(at.get('consumer_max_rss_kb'))}")
    return "; ".join(parts) + "."


def probe_rows(search: dict[str, Any]) -> list[dict[str, Any]]:
    """The probes in the order run, for the report's table."""
    rows = []
    for p in search.get("probes") or ():
        f = p.get("figures") or {}
        rows.append({"rate": p.get("rate"), "passed": bool(p.get("passed")), "confirm": bool(p.get("confirm")),
                     "achieved": f.get("achieved"), "loss_ratio": f.get("loss_ratio"), "p99_us": f.get("p99_us"),
                     "failed_slo": p.get("failed_slo"), "run_dir": p.get("run_dir")})
    return rows


# What a search ended with, as the table says it: only a converged search has a capacity.
CONVERGED, GENERATOR_LIMITED, NO_ANSWER = "converged", "generator limited", "no answer"


def status(search: dict[str, Any]) -> str:
    if search.get("generator_limited"):
        return GENERATOR_LIMITED
    return CONVERGED if search.get("converged") else NO_ANSWER


def answer_probe(search: dict[str, Any]) -> dict[str, Any] | None:
    """The probe the answer stands on: the last pass at the max sustainable rate (its re-run)."""
    if status(search) != CONVERGED:
        return None
    return _probe_at(search, search.get("max_sustainable_rate"), passed=True)


def run_id(run_dir: str | None) -> str | None:
    """The run id of a probe's run directory (runs/run=<id>), as the report names its runs."""
    if not run_dir:
        return None
    base = os.path.basename(os.path.normpath(run_dir))
    return base[len("run="):] if base.startswith("run=") else base


def table_row(search: dict[str, Any], search_id: str | None = None) -> dict[str, Any]:
    """One row of "max sustainable rate by HWM, with its memory and latency cost": the grouping
    keys, the answer and its bracket, the SLO that broke above it, and at the answer probe its
    p99 / p99.9, queue peak by place and the consumer's peak RSS. Figures as the search wrote
    them (capacity-search.json), unrounded; None where there is no answer."""
    lo, hi = (list(search.get("bracket") or []) + [None, None])[:2]
    probe = answer_probe(search)
    at = (probe or {}).get("figures") or {}
    peak = at.get("queue_peak") or {}
    state = status(search)
    return {"search_id": search_id, "setting": head(search), "keys": keys(search),
            "producers": search.get("producers") or 1, "status": state,
            "reason": None if state == CONVERGED else (search.get("reason") or state),
            "max_sustainable_rate": search.get("max_sustainable_rate") if state == CONVERGED else None,
            "bracket": [lo, hi], "failed_slo": search.get("failed_slo"),
            "answer_run": run_id(probe.get("run_dir")) if probe else None,
            "p99_us": at.get("p99_us"), "p99_9_us": at.get("p99_9_us"),
            "queue_peak_messages": peak.get("messages"), "queue_peak_kernel_messages": peak.get("kernel_messages"),
            "queue_peak_libzmq_messages": peak.get("libzmq_messages"),
            "consumer_max_rss_kb": at.get("consumer_max_rss_kb")}


def table(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows, one per searched combination of every search among the inputs."""
    return [table_row(s, doc.get("search_id")) for doc in docs for s in doc["searches"]]


def key_names(rows: list[dict[str, Any]]) -> list[str]:
    """The grouping keys of the table's rows, in the order the searches name them."""
    return list(dict.fromkeys(k for r in rows for k in r["keys"]))


def key_cell(row: dict[str, Any], name: str) -> str:
    """A grouping key's value in the table: 'default' when unset, '-' when not varied there."""
    if name not in row["keys"]:
        return "-"
    value = row["keys"][name]
    return "default" if value is None else str(value)


def _count(n: Any) -> str:
    return "-" if n is None else f"{n:,.0f}"


def cells(row: dict[str, Any]) -> dict[str, str]:
    """A table row as text, the same in the HTML and the Markdown report: rates in msg/s per
    producer as the search ran them (exact), latency in whole us, RSS in MiB."""
    lo, hi = row["bracket"]
    rate = row["max_sustainable_rate"]
    if row["status"] == CONVERGED:
        answer = f"{_count(rate)}" + (f" ({_count(rate * row['producers'])} in total)" if row["producers"] > 1 else "")
    elif row["status"] == GENERATOR_LIMITED:
        answer = "no capacity: the load generator was the limit (add --producers)"
    else:
        answer = f"no capacity: {row['reason']}"
    peak = row["queue_peak_messages"]
    return {"setting": row["setting"], "max_sustainable_rate": answer, "bracket": f"{_count(lo)} - {_count(hi)}",
            "failed_slo": row["failed_slo"] or "-", "p99_us": _count(row["p99_us"]),
            "p99_9_us": _count(row["p99_9_us"]),
            "queue_peak": "-" if peak is None else (f"{_count(peak)} ({_count(row['queue_peak_kernel_messages'])} / "
                                                    f"{_count(row['queue_peak_libzmq_messages'])})"),
            "consumer_rss": _mib(row["consumer_max_rss_kb"], 1), "answer_run": row["answer_run"] or "-"}


TABLE_TITLE = "Max sustainable rate by HWM, with its memory and latency cost"
# (cells() key, column heading); the grouping keys go between the setting and the answer.
TABLE_COLUMNS = (("setting", "setting"), ("max_sustainable_rate", "max sustainable rate (msg/s per producer)"),
                 ("bracket", "bracket [highest pass - lowest fail]"), ("failed_slo", "failed SLO above it"),
                 ("p99_us", "p99 at it (us)"), ("p99_9_us", "p99.9 at it (us)"),
                 ("queue_peak", "queue peak, msgs (kernel / libzmq)"), ("consumer_rss", "consumer peak RSS"),
                 ("answer_run", "answer probe"))
