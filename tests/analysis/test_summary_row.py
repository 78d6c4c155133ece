"""The summary row (zmqload/analysis/summary_row.py): its flat form is summary.parquet's columns,
in their order, and reads back into the same row."""

from __future__ import annotations

import pytest

from zmqload.analysis.pipeline import LATENCY_COLUMNS, SUMMARY_COLUMNS
from zmqload.analysis.summary_row import ALL, Percentiles, SummaryRow


def test_the_flat_form_is_the_summary_files_columns_in_order():
    assert tuple(SummaryRow(run="r").columns()) == SUMMARY_COLUMNS


def test_a_row_reads_back_from_its_flat_form():
    columns = {name: i for i, name in enumerate(SUMMARY_COLUMNS)}
    columns.update(run="r", consumer=ALL, stream=ALL)
    row = SummaryRow.of(columns)
    assert row.columns() == columns
    assert row.latency_intended.p99 == columns["latency_intended_p99_us"]
    assert all(row.column(name) == value for name, value in columns.items())
    assert SummaryRow.of(row.columns()) == row


def test_a_part_of_the_flat_form_leaves_the_rest_unknown():
    row = SummaryRow.of({"run": "r", "stall_max_us": 5.0, "lost": 3})
    assert row.stall == Percentiles(max=5.0) and row.lost == 3 and row.received is None
    assert row.is_run_total and row.round_trip == Percentiles()
    with pytest.raises(ValueError, match="lost_start"):
        SummaryRow.of({"run": "r", "lost_start": 1})
    with pytest.raises(KeyError):
        row.column("lost_start")


def test_blanked_columns_become_unknown_and_nothing_else_changes():
    row = SummaryRow(run="r", lost=3, sent=10, stall=Percentiles(p50=1.0, max=2.0))
    blank = row.blanked(["lost", *(c for c in LATENCY_COLUMNS if c.startswith("stall_"))])
    assert blank == SummaryRow(run="r", sent=10)


def test_the_judged_p99_is_a_services_round_trip_else_the_latency_from_intended_send():
    row = SummaryRow(
        run="r", latency_intended=Percentiles(p99=7.0), round_trip=Percentiles(p99=9.0)
    )
    assert (row.judged_p99_us, row.judged_p99_column) == (7.0, "latency_intended_p99_us")
    served = SummaryRow(
        run="r", serves=True, latency_intended=Percentiles(p99=7.0), round_trip=Percentiles(p99=9.0)
    )
    assert (served.judged_p99_us, served.judged_p99_column) == (9.0, "round_trip_p99_us")
