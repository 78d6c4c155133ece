"""Errors the report turns into one line and exit status 2 (bad input, missing Java)."""
from __future__ import annotations


class ReportInputError(Exception):
    """Bad input: nothing (or this part) can be reported. The message is one line."""
