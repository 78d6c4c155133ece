"""The report's `dropped_reset` (Spark over the records, analysis/pipeline.py reset_drops) against
run.json's (packed maps, measure/reset_regions.py) on real runs with --reset-at: round robin, fan-out
and two producers, per run, stream and consumer; and the resets drawn on the report's time axes."""

from __future__ import annotations

import pytest

import zmqload
from zmqload.analysis import analyze, discover_runs
from zmqload.analysis.metrics import ALL
from zmqload.contract.fates import FATES
from zmqload.store.record_files import read_run

RESETS = "0.4,1.0"


@pytest.fixture(scope="module")
def reset_runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("resets"))
    common = dict(out=out, transport="tcp", duration=1.5, reset_at=RESETS)
    results = [
        # a slow consumer: a backlog in flight at each reset
        zmqload.run(
            pattern="push-pull", rate=20_000, consumer_delay_us=80, run_name="slow", **common
        ),
        # two producers round robin to two consumers: one connection each way, the lowest high
        zmqload.run(
            pattern="push-pull",
            rate=10_000,
            producers=2,
            consumers=2,
            consumer_delay_us=150,
            run_name="round-robin",
            **common,
        ),
        # fan-out: each subscriber its own view (a PUB also drops at its HWM: both kinds apart)
        zmqload.run(
            pattern="pub-sub",
            rate=20_000,
            consumers=2,
            consumer_delay_us=80,
            run_name="fanout",
            **common,
        ),
    ]
    return out, {r.run_id: r for r in results}


@pytest.mark.slow  # a Spark session or many runs: out of make test-fast, in make test
def test_report_places_the_reset_drops_as_the_run_did(spark, reset_runs):
    out, results = reset_runs
    runs, _ = discover_runs(out)
    analysis = analyze(spark, runs)
    assert all(r.dropped_reset > 0 for r in results.values())  # every view kind has reset drops
    for row in (r.columns() for r in analysis.summary):
        result = results[row["run"]]
        if row["consumer"] == ALL and row["stream"] == ALL:
            expected = {f: getattr(result, f) for f in FATES}
        else:
            stream = next(s for s in result.streams if s["stream"] == row["stream"])
            expected = (
                stream["fates_by_consumer"][row["consumer"]]
                if row["consumer"] != ALL
                else {f: stream[f] for f in FATES}
            )
        assert {f: row[f] for f in FATES} == {f: expected[f] for f in FATES}, (
            row["run"],
            row["consumer"],
            row["stream"],
        )


def test_resets_are_marked_on_the_time_axes(reset_runs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zmqload.report.plots import RESET_STYLE, mark_resets

    _, results = reset_runs
    record = read_run(results["slow"].run_dir)
    fig, ax = plt.subplots()
    mark_resets(ax, record)
    lines = [line for line in ax.get_lines() if line.get_linestyle() == RESET_STYLE["ls"]]
    assert [line.get_xdata()[0] for line in lines] == [r.at_s for r in record.resets]
    assert len(lines) == 2 and ax.get_legend_handles_labels()[1] == ["connection reset"]
    plt.close(fig)
