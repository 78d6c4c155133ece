"""The report's bad-input error, re-exported: it is zmqload.errors.ReportInputError (exit 2)."""

from ..errors import ReportInputError

__all__ = ["ReportInputError"]
