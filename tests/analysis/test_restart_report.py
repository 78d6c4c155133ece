"""The report's `dropped_restart` (Spark over the records, analysis/pipeline.py restart_regions)
against run.json's (packed maps, measure/restart_regions.py) on real runs with --restart: round robin
(a PULL that binds), fan-out (a SUB that connects) and a PUB that binds, per run, stream and
consumer."""

from __future__ import annotations

import pytest

import zmqload
from zmqload.analysis import analyze, discover_runs
from zmqload.analysis.metrics import ALL
from zmqload.contract.fates import FATES


@pytest.fixture(scope="module")
def restart_runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("restarts"))
    # the producers sleep between sends and the consumers do no work: the CPUs are left to the new
    # processes' start (~0.5 s, more on a loaded machine), and the flow goes on after it
    common = dict(out=out, rate=5_000, duration=2.2, restart_gap_ms=100, pacing="sleep")
    results = [
        zmqload.run(pattern="push-pull", consumers=2, restart="c0@0.4", run_name="pull", **common),
        zmqload.run(
            pattern="pub-sub",
            transport="ipc",
            consumers=2,
            restart="c1@0.4",
            run_name="sub",
            **common,
        ),
        zmqload.run(
            pattern="pub-sub",
            consumers=2,
            restart="p0@0.4",
            run_name="pub",
            **dict(common, duration=3.2),
        ),
    ]
    return out, {r.run_id: r for r in results}


@pytest.mark.slow  # a Spark session: out of make test-fast, in make test
def test_report_places_the_restart_drops_as_the_run_did(spark, restart_runs):
    out, results = restart_runs
    runs, _ = discover_runs(out)
    analysis = analyze(spark, runs)
    assert all(r.dropped_restart > 0 for r in results.values())
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
        # not dropped_mid: the report places a restart's loss under its own fate, as the run did
        assert {f: row[f] for f in FATES} == {f: expected[f] for f in FATES}, (
            row["run"],
            row["consumer"],
            row["stream"],
        )


def test_restarts_are_marked_on_the_time_axes(restart_runs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zmqload.report.plots import RESTART_STYLE, mark_restarts
    from zmqload.store.record_files import read_run

    _, results = restart_runs
    for result in results.values():
        record = read_run(result.run_dir)
        fig, ax = plt.subplots()
        mark_restarts(ax, record)
        lines = [line for line in ax.get_lines() if line.get_linestyle() == RESTART_STYLE["ls"]]
        assert [line.get_xdata()[0] for line in lines] == [r.at_s for r in record.restarts]
        assert len(lines) == 1 and ax.get_legend_handles_labels()[1] == ["restart"]
        plt.close(fig)
