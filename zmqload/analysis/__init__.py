"""Spark analysis of zmqload run records: pure DataFrame -> DataFrame metric functions
(`metrics`), run discovery and loading (`runs`), the report job (`pipeline`), capacity
planning (`capacity`), and the session / Java helpers. Imports nothing of zmqload but the
pure data modules zmqload.contract and zmqload.errors: never the compiled engine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ReportInputError
from .javacheck import check_java
from .runs import RunInfo, discover_runs, load_records

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .pipeline import Analysis

__all__ = [
    "ReportInputError",
    "RunInfo",
    "check_java",
    "discover_runs",
    "load_records",
    "get_spark",
    "analyze",
]


def get_spark(master: str | None = None, **kw: Any) -> SparkSession:
    from .session import get_spark as _get

    return _get(master, **kw)


def analyze(spark: SparkSession, runs: list[RunInfo], **kw: Any) -> Analysis:
    from .pipeline import analyze as _analyze

    return _analyze(spark, runs, **kw)
