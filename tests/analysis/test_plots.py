"""What the report's plots show (issue 14 item 6), asserted on the figures' data: edge
windows are not dips, a short run gets enough windows, offered stays visible over achieved,
queue axes count whole messages in a fitting byte unit, loss-vs-HWM joins only the points
of one setup. Synthetic counts here; real runs through Spark at the end."""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import numpy as np
import pytest

from zmqload.analysis import metrics
from zmqload.analysis.summary_row import SummaryRow
from zmqload.analysis.verdict_group import VerdictGroup
from zmqload.contract.fates import TailPlacement
from zmqload.contract.run_record import Drain, RunRecord
from zmqload.contract.states import DrainEnd
from zmqload.report import plots

W = 100_000_000  # 100 ms


def _rates(
    times: dict[str, np.ndarray], window_ns: int = W, run: str = "r"
) -> tuple[list[dict], SummaryRow]:
    """Rates rows (as analysis.rates) and the run row's spans from message times per series."""
    rows: dict[int, dict] = {}
    for k, t in times.items():
        w, n = np.unique(t // window_ns, return_counts=True)
        for wi, ni in zip(w.tolist(), n.tolist()):
            rows.setdefault(
                wi, {"run": run, "stream": 0, "window": wi, "offered": 0, "sent": 0, "received": 0}
            )[k] = ni
    keys = {"offered": "intended", "sent": "send", "received": "recv"}
    span = {f"t_first_{keys[k]}_ns": int(t.min()) for k, t in times.items()}
    span.update({f"t_last_{keys[k]}_ns": int(t.max()) for k, t in times.items()})
    return sorted(rows.values(), key=lambda r: r["window"]), SummaryRow.of({"run": run, **span})


def _paced(rate: float, seconds: float, start_ns: int, lag_ns: int = 0) -> np.ndarray:
    return start_ns + lag_ns + (np.arange(int(rate * seconds)) * 1e9 / rate).astype(np.int64)


@pytest.mark.parametrize(
    "start_in_window, seconds", [(0.37, 3.0), (0.03, 3.0), (0.97, 1.21), (0.5, 0.6)]
)
def test_edge_windows_are_not_dips_or_spikes(start_in_window, seconds):
    """A steady 50k/s run starting and ending mid-window: every drawn window within 1% of
    50k/s for every series (the old rule drew the edges at the covered fraction: 37% -> 63%)."""
    start = 10**12 + int(start_in_window * W)
    t = _paced(50_000, seconds, start)
    rates, span = _rates({"offered": t, "sent": t + 20_000, "received": t + 300_000})
    data = plots.throughput_series(rates, "r", W, span, t0_ns=start)
    assert set(data["series"]) == {"offered", "sent", "received"}
    for name, (edges, values) in data["series"].items():
        assert len(edges) == len(values) + 1 and np.all(np.diff(edges) > 0)
        assert min(values) >= 0.99 * 50_000 and max(values) <= 1.01 * 50_000, (
            name,
            min(values),
            max(values),
        )
        # the windows cover the series' span, and no more than half a window beyond
        assert (
            edges[0]
            <= (
                span.column(
                    f"t_first_{ {'offered': 'intended', 'sent': 'send', 'received': 'recv'}[name] }_ns"
                )
                - start
            )
            / 1e9
            + 1e-9
        )


def test_a_gap_inside_the_run_is_drawn_as_zero():
    t = _paced(10_000, 2.0, 10**12)
    t = t[(t < 10**12 + 500_000_000) | (t >= 10**12 + 800_000_000)]  # nothing for 0.3 s
    rates, span = _rates({"offered": t, "sent": t, "received": t})
    edges, values = plots.throughput_series(rates, "r", W, span)["series"]["received"]
    assert sum(1 for v in values if v == 0) == 3 and len(values) == 20


def test_long_runs_are_drawn_in_whole_merged_windows():
    t = _paced(1000, 1000.0, 10**12 + 5)  # 10,000 windows of 100 ms
    rates, span = _rates({"offered": t, "sent": t, "received": t})
    data = plots.throughput_series(rates, "r", W, span)
    edges, values = data["series"]["offered"]
    assert len(values) <= plots.MOST_STEPS and data["window_ns"] % W == 0
    assert min(values) >= 0.99 * 1000 and max(values) <= 1.01 * 1000


def test_one_message_and_one_window():
    t = np.array([10**12 + 7], dtype=np.int64)
    rates, span = _rates({"offered": t, "sent": t, "received": t})
    data = plots.throughput_series(rates, "r", W, span)
    for edges, values in data["series"].values():
        assert values == [pytest.approx(10.0)]  # one message in a 100 ms window
        assert edges[1] - edges[0] == pytest.approx(0.1)
    assert plots.throughput(rates, "r", W, span)  # renders


@pytest.mark.parametrize("rate", [0.5, 3e9])
def test_tiny_and_huge_rates_keep_their_value_and_short_labels(rate):
    seconds = 20.0 if rate < 1 else 1e-3
    t = _paced(rate, seconds, 10**12, 0)
    rates, span = _rates(
        {"offered": t, "sent": t, "received": t}, window_ns=W if rate < 1 else 10_000
    )
    data = plots.throughput_series(rates, "r", W if rate < 1 else 10_000, span)
    values = data["series"]["received"][1]
    assert np.mean(values) == pytest.approx(rate, rel=0.15)
    fig = plots.throughput_figure(data)
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels and all(len(x) <= 5 for x in labels), labels
    plt.close(fig)


def test_offered_is_drawn_on_top_and_dashed_when_lines_coincide():
    t = _paced(20_000, 1.0, 10**12 + 1234)
    rates, span = _rates({"offered": t, "sent": t, "received": t})
    fig = plots.throughput_figure(plots.throughput_series(rates, "r", W, span))
    artists = {a.get_label(): a for a in fig.axes[0].patches}
    offered = artists["offered (by intended time)"]
    assert offered.get_zorder() > max(
        a.get_zorder() for k, a in artists.items() if a is not offered
    )
    assert offered.get_linestyle() not in ("-", "solid")
    plt.close(fig)


def test_si_labels_have_three_digits_at_most():
    assert (
        plots._si(3358220.4) == "3.36M" and plots._si(1500) == "1.5k" and plots._si(0.25) == "0.25"
    )
    assert plots._si(125_000) == "125k"


@pytest.mark.parametrize(
    "peak, size, unit",
    [
        (1, 64, "bytes"),
        (32, 64, "KiB"),
        (0, 64, "bytes"),
        (3, 1_000_000, "MiB"),
        (5000, 1_000_000, "GiB"),
    ],
)
def test_queue_axis_counts_whole_messages_in_a_fitting_unit(peak, size, unit):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, peak])
    plots.messages_axis(ax, peak, size)
    fig.canvas.draw()
    ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks
    secondary = [a for a in fig.axes[0].child_axes]
    assert secondary and secondary[0].get_ylabel().startswith(unit)
    plt.close(fig)


def _capacity_and_rows(spec):
    """Groups as capacity.capacity_table names them, and run rows: spec = [(run, rcvhwm, delay, rate, lost)]."""
    groups: dict = {}
    rows = []
    for run, hwm, delay, rate, lost in spec:
        key = (hwm, delay)
        g = groups.setdefault(
            key,
            VerdictGroup(
                group=f"rcvhwm={hwm}, delay={delay}",
                keys={"rcvhwm": hwm, "consumer_delay_us": delay},
                key_names=["rcvhwm", "consumer_delay_us"],
                run_ids=[],
            ),
        )
        g.run_ids.append(run)
        rows.append(
            SummaryRow(
                run=run,
                rate_per_producer=rate,
                producers=1,
                expected=10_000,
                lost=lost,
                dropped_sender=0,
                offered_rate=rate,
            )
        )
    return rows, list(groups.values())


def test_loss_vs_hwm_joins_only_one_setups_points():
    rows, capacity = _capacity_and_rows(
        [
            ("a", 10, 30, 20_000, 0),
            ("b", 1000, 30, 20_000, 0),  # setup 1: two HWMs
            ("c", 100, 20, 3_358_220, 0),  # setup 2: one point, under setup 1's line
            ("d", None, 0, 50_000, 5),
            ("e", 10, 30, 40_000, 40),
        ]
    )
    data = plots.loss_vs_hwm_series(rows, capacity)
    assert data["labels"] == ["rcvhwm=10", "rcvhwm=100", "rcvhwm=1000", "rcvhwm=default"]
    by_name = data["series"]
    assert len(by_name) == 4
    setup1 = [
        pts for name, pts in by_name.items() if "consumer_delay_us=30" in name and "20.0k" in name
    ]
    assert setup1 == [[(0, 0.0), (2, 0.0)]]
    assert all(len({x for x, _ in pts}) == len(pts) for pts in by_name.values())
    assert not any(re.search(r"\d\.\d{3,}", name) for name in by_name), list(by_name)
    assert any("3.36M/s" in name for name in by_name)
    assert plots.loss_vs_hwm(rows, capacity)


def test_auto_window_gives_short_runs_enough_windows():
    assert metrics.window_ns_for(None, [0.6]) == 20_000_000  # 30 windows, not 6
    assert metrics.window_ns_for(None, [0.6, 60.0]) == 20_000_000
    assert metrics.window_ns_for(None, [10.0]) == 100_000_000
    assert metrics.window_ns_for(None, [0.005]) == 1_000_000
    assert metrics.window_ns_for(None, [None]) == 100_000_000
    assert metrics.window_ns_for(250, [0.6]) == 250_000_000  # --window-ms wins


@pytest.fixture(scope="module")
def real_analysis(spark, tmp_path_factory):
    """Real libzmq runs through the real Spark analysis: a paced run that keeps up, a 0.6 s
    unpaced one, and an ipc run whose queue holds a message or two."""
    import zmqload
    from zmqload.analysis import analyze, discover_runs

    out = str(tmp_path_factory.mktemp("plots"))
    zmqload.run(pattern="push-pull", rate=5000, duration=1.0, size=64, out=out, run_name="paced")
    zmqload.run(
        pattern="push-pull", duration=0.6, count=50_000_000, size=64, out=out, run_name="short"
    )
    zmqload.run(
        pattern="push-pull",
        transport="ipc",
        rate=2000,
        duration=1.0,
        size=64,
        out=out,
        run_name="ipc",
    )
    runs, _ = discover_runs(out)
    return analyze(spark, runs), {r.run_id: r for r in runs}


def test_real_paced_run_draws_no_dip(real_analysis):
    """A run that kept up: no drawn window of the offered schedule off 5000/s, edges included
    (the old plot drew the first and last windows at the fraction they covered); sent and
    received windows carry exactly the run's messages (rate x time covered) and sit at the
    offered rate in the median (single 10 ms windows swing on a busy 2-core machine)."""
    analysis, runs = real_analysis
    info = runs["paced"]
    row = {r.run: r for r in analysis.run_rows()}["paced"]
    assert row.lost == 0 and not info.record.summary.generator_limited
    data = plots.throughput_series(
        analysis.rates, "paced", analysis.window_ns, row, info.record.t0_ns
    )
    offered_edges, offered = data["series"]["offered"]
    assert min(offered) >= 0.98 * 5000 and max(offered) <= 1.02 * 5000
    assert offered_edges[0] == pytest.approx(0.0, abs=1e-3)  # t0 is the first scheduled send
    for name, count in (("offered", row.attempted), ("sent", row.sent), ("received", row.received)):
        edges, values = data["series"][name]
        assert sum(v * (b - a) for v, a, b in zip(values, edges, edges[1:])) == pytest.approx(
            count, rel=1e-6
        )
        assert np.median(values) >= 0.9 * 5000, (name, values)


def test_real_short_run_gets_enough_windows(real_analysis):
    analysis, runs = real_analysis
    assert analysis.window_ns <= 20_000_000
    row = {r.run: r for r in analysis.run_rows()}["short"]
    values = plots.throughput_series(analysis.rates, "short", analysis.window_ns, row)["series"][
        "received"
    ][1]
    assert len(values) >= 25


def test_real_ipc_queue_axis_has_whole_messages_and_bytes(real_analysis):
    analysis, runs = real_analysis
    rows = [d for d in analysis.depth if d["run"] == "ipc" and d["stream"] == metrics.ALL]
    peak = max(d["depth"] for d in rows)
    fig, ax = plt.subplots()
    plots.messages_axis(ax, peak, rows[0]["mean_size"])
    fig.canvas.draw()
    ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    assert all(float(t).is_integer() for t in ticks)
    assert ax.child_axes[0].get_ylabel().split()[0] in (
        "bytes",
        "KiB",
    )  # 64 B messages, a small queue
    plt.close(fig)
    assert plots.queue_depth(analysis.depth, "ipc", analysis.window_ns)
    assert plots.queue_split(
        analysis.depth, "ipc", runs["ipc"].path, runs["ipc"].record, analysis.window_ns
    )


def test_the_queue_split_follows_the_transport():
    """Only tcp connections have their kernel queues sampled (zmqload.runner.kernel_queues): an ipc run's
    depth is not called 'kernel tcp buffers', an inproc run's has no kernel part."""
    assert plots.split_parts("tcp") == ("kernel tcp buffers", "libzmq pipes")
    for transport in ("ipc", "inproc"):
        (only,) = plots.split_parts(transport)
        assert "tcp" not in only.split(" (")[0] and "libzmq pipes" in only
    assert (
        "unix-socket" in plots.split_parts("ipc")[0]
        and "kernel" not in plots.split_parts("inproc")[0].split(" (")[0]
    )


def test_a_drain_burst_does_not_flatten_the_run():
    """A slow subscriber's drain (fast, a few ms) must not set the scale: the run at 50k/s
    stays readable and the peak is named."""
    t = _paced(50_000, 3.0, 10**12)
    burst = 10**12 + 3_000_000_000 + np.arange(20_000) * 600  # 20k messages in 12 ms
    rates, span = _rates(
        {"offered": t, "sent": t, "received": np.concatenate([t + 1000, burst])}, 10_000_000
    )
    data = plots.throughput_series(rates, "r", 10_000_000, span)
    top, peak = plots.y_top(data)
    assert 50_000 < top < 200_000
    assert peak and peak[0] == "received" and peak[1] > 1e6


@pytest.mark.parametrize(
    "placement, tail",
    [
        ("mid-run", "dropped_mid"),
        ("at-close", "dropped_tail"),
        ("ambiguous", plots.AMBIGUOUS_LABEL),
        (None, "dropped_tail"),
    ],
)
def test_fates_over_time_places_the_tail_by_the_runs_rule(placement, tail):
    """Messages lost after the last arrival are drawn as the run's fates count them: mid-run
    after an after-drain close, ambiguous for a PUB closed at once (docs/RECORDS.md)."""
    rows = [
        {"window": w, "sent": 10, "delivered_sent": a, "received": a}
        for w, a in [(0, 0), (1, 10), (2, 7), (3, 10), (4, 0), (5, 0)]
    ]
    meta = RunRecord(
        drain=Drain(ended=DrainEnd.IDLE, tail_placement=placement and TailPlacement(placement))
    )
    lost, windows, _ = plots.lost_by_place(rows, meta, copies=1)
    assert windows == [0, 1, 2, 3, 4, 5]
    expected = {"dropped_start": {0: 10}, "dropped_mid": {2: 3}}
    expected.setdefault(tail, {}).update({4: 10, 5: 10})
    assert dict(lost) == expected
    meta.drain.ended = DrainEnd.LIMIT  # cut short: none of it can be told apart
    lost, _, _ = plots.lost_by_place(rows, meta, copies=1)
    assert dict(lost) == {"stranded or dropped": {0: 10, 2: 3, 4: 10, 5: 10}}


def test_with_connection_resets_a_mid_run_loss_is_not_called_a_full_pipes():
    """A send window between arrivals in a run with resets may hold a reset's losses or a full pipe's:
    drawn as either (the fates table tells them apart by seq)."""
    from zmqload.contract.run_record import Reset

    rows = [
        {"window": w, "sent": 10, "delivered_sent": a, "received": a}
        for w, a in [(0, 10), (1, 4), (2, 10)]
    ]
    meta = RunRecord(
        drain=Drain(ended=DrainEnd.IDLE), resets=[Reset(t_ns=1, at_s=0.1, took_ns=1, connections=1)]
    )
    lost, _, _ = plots.lost_by_place(rows, meta, copies=1)
    assert dict(lost) == {plots.MID_OR_RESET_LABEL: {1: 6}}


# -- a page a person reads at a glance (issue 26 item 3) -------------------------------------------
@pytest.mark.parametrize(
    "us, text",
    [
        (812.4, "812 µs"),
        (9_999.0, "9,999 µs"),
        (50_000.0, "50 ms"),
        (197_123.0, "197 ms"),
        (1_234_567.0, "1.23 s"),
        (2.5, "2.5 µs"),
        (None, "-"),
    ],
)
def test_latency_reads_in_ms_above_10000_us(us, text):
    """A p99 of 50,000 µs reads '50 ms' in a table, never '50k' (microseconds)."""
    assert plots.fmt_us(us) == text


@pytest.mark.parametrize(
    "lo, hi, unit",
    [(1_500.0, 120_000.0, "ms"), (20.0, 900.0, "µs"), (300_000.0, 9e6, "s"), (5.0, 5e5, "ms")],
)
def test_a_latency_axis_says_one_unit(lo, hi, unit):
    """Every tick of a latency axis in the same unit (it read '100 ms, 10 ms, 5,000 µs')."""
    from matplotlib.ticker import LogLocator

    fig, ax = plots.plt.subplots()
    ax.set_yscale("log")
    ax.plot([0, 1], [lo, hi])
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(plots.LatencyTicks())
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    plots.plt.close(fig)
    assert len(labels) >= 2 and {label.split(" ")[1] for label in labels} == {unit}, labels


def test_loss_vs_hwm_needs_two_hwm_settings():
    """The demo: a search at one HWM beside an unpaced run at libzmq's default (no offered rate):
    one HWM among the paced runs, no axis to draw (it drew seven markers on one category)."""
    rows, capacity = _capacity_and_rows(
        [
            (f"p{i}", 1000, 20, rate, lost)
            for i, (rate, lost) in enumerate([(1000, 0), (2000, 0), (4000, 0), (8000, 30)])
        ]
    )
    rows.append(
        SummaryRow(
            run="max",
            rate_per_producer=None,
            producers=1,
            expected=10_000,
            lost=0,
            dropped_sender=0,
            offered_rate=7.14e6,
        )
    )
    capacity.append(
        VerdictGroup(
            group="rcvhwm=default",
            keys={"rcvhwm": None, "consumer_delay_us": 0},
            key_names=["rcvhwm", "consumer_delay_us"],
            run_ids=["max"],
        )
    )
    assert (
        plots.loss_vs_hwm_series(rows, capacity) is None
        and plots.loss_vs_hwm(rows, capacity) is None
    )


def test_an_unpaced_run_has_no_offered_line():
    t = _paced(1_000_000, 0.5, 10**12)
    rates, span = _rates({"offered": t, "sent": t, "received": t + 5000}, 10_000_000)
    assert "offered" in plots.throughput_series(rates, "r", 10_000_000, span)["series"]
    png = plots.throughput(rates, "r", 10_000_000, span, paced=False)
    paced = plots.throughput(rates, "r", 10_000_000, span)
    assert png and paced and png != paced
    fig = plots.throughput_figure(
        {
            "window_ns": 10_000_000,
            "series": {
                k: v
                for k, v in plots.throughput_series(rates, "r", 10_000_000, span)["series"].items()
                if k != "offered"
            },
        }
    )
    assert [p.get_label() for p in fig.axes[0].patches] == ["achieved send", "received"]
    plt.close(fig)


def test_probes_at_one_rate_are_drawn_apart():
    """A re-run at the answer's rate (and a retry) no longer hides under the first probe there."""
    xs = plots.spread_equal([1000.0, 2000.0, 4757.0, 4757.0, 5657.0, 4757.0])
    at = [xs[i] for i in (2, 3, 5)]
    assert len(set(at)) == 3 and all(abs(x / 4757 - 1) < 0.05 for x in at)
    assert at[0] < at[1] < at[2] and xs[2] * xs[5] == pytest.approx(
        4757.0**2
    )  # centred on the rate
    assert [xs[i] for i in (0, 1, 4)] == [1000.0, 2000.0, 5657.0]


def test_equal_hwms_are_one_line_and_different_ones_differ_in_dash():
    (line,) = plots.hwm_lines(1000, 1000)
    assert line[:2] == ("SNDHWM = RCVHWM", 1000)
    snd, rcv = plots.hwm_lines(10, 1000)
    assert snd[0] == "SNDHWM" and rcv[0] == "RCVHWM" and snd[2]["ls"] != rcv[2]["ls"]
    assert [n for n, _, _ in plots.hwm_lines(None, 1000)] == ["RCVHWM"] and plots.hwm_lines(
        None, None
    ) == []


def test_time_plots_name_the_window_they_draw():
    """Merged windows (a long run) are named in the title as drawn, not as the analysis window."""
    t = _paced(1000, 1000.0, 10**12 + 5)
    rates, span = _rates({"offered": t, "sent": t, "received": t})
    data = plots.throughput_series(rates, "r", W, span)
    fig = plots.throughput_figure(data)
    assert f"({plots.duration_text(data['window_ns'])} windows;" in fig.axes[0].get_title()
    assert data["window_ns"] != W
    plt.close(fig)


def test_a_figure_is_cropped_as_savefigs_tight_crop():
    """The page's PNG of a figure with what the crop is for (a legend below the axes, a second
    y axis on the right) is byte for byte matplotlib's bbox_inches="tight" PNG of it."""
    import base64
    import io

    def figure():
        t = _paced(1000, 2.0, 10**12)
        rates, span = _rates({"offered": t, "sent": t, "received": t})
        fig = plots.throughput_figure(plots.throughput_series(rates, "r", W, span))
        plots.messages_axis(fig.axes[0], 1234, 256)  # adds the queued bytes' axis on the right
        return fig

    tight = io.BytesIO()
    fig = figure()
    fig.savefig(tight, format="png", dpi=plots.DPI, bbox_inches="tight")
    plt.close(fig)
    ours = base64.b64decode(plots._png(figure()))
    assert ours[:8] == b"\x89PNG\r\n\x1a\n" and ours == tight.getvalue()
