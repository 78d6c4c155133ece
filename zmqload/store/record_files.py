"""The record files on disk: run.json, capacity-search.json and a sweep's file read and written
through the one codec (contract/codec.py: bytes to records and back, strictly and versioned),
written atomically. Every reader and writer of a record goes through `read_run`/`write_run`,
`read_search`/`write_search` or `read_sweep`/`write_sweep`, never through string keys into a dict."""

from __future__ import annotations

import os
from typing import TypeVar

import msgspec

from ..contract.codec import decode, encode, unversioned_message
from ..contract.run_record import RunRecord, run_path
from ..contract.search_record import RESULT_FILE, SearchRecord, search_path
from ..contract.sweep_record import SweepRecord
from ..errors import RecordError

R = TypeVar("R", bound=msgspec.Struct)


def write_atomic(path: str, record: msgspec.Struct) -> None:
    """Write a record through a temporary file renamed over `path`: a reader (or a run killed
    mid-write) sees the old record or the new one, never half of one."""
    data = encode(record)
    tmp = os.path.join(os.path.dirname(path) or ".", "." + os.path.basename(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read(path: str, kind: type[R], unversioned: str = "") -> R:
    """A record file; RecordError (one line naming the file) when missing or not a record."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise RecordError(f"{path}: no such file") from None
    except OSError as exc:
        raise RecordError(f"{path}: unreadable ({exc.strerror or exc})") from None
    return decode(data, kind, path, unversioned)


# -- run.json ------------------------------------------------------------------------------------
def is_run_dir(path: str) -> bool:
    """Whether `path` is a run directory: it holds run.json (contract.run_record.RUN_FILE)."""
    return os.path.isfile(run_path(path))


def read_run(run_dir: str) -> RunRecord:
    """The record of the run in `run_dir`."""
    return read(run_path(run_dir), RunRecord, "not a zmqload run (no schema_version)")


def write_run(run_dir: str, record: RunRecord) -> None:
    write_atomic(run_path(run_dir), record)


# -- capacity-search.json ------------------------------------------------------------------------
def read_search(path: str) -> SearchRecord:
    """The record of the search in `path` (a capacity-search.json, or the --out directory
    holding it); RecordError (one line naming the file) when it is not one this zmqload reads."""
    if os.path.isdir(path):
        path = search_path(path)
    return read(path, SearchRecord, unversioned_message(RESULT_FILE, "run the search again"))


def write_search(out: str, record: SearchRecord) -> None:
    write_atomic(search_path(out), record)


# -- a sweep's file ------------------------------------------------------------------------------
def read_sweep(path: str) -> SweepRecord:
    """The sweep file at `path`; RecordError (one line naming the file) when it is not one this
    zmqload reads."""
    return read(path, SweepRecord, unversioned_message("sweep file", "run the sweep again"))


def write_sweep(path: str, record: SweepRecord) -> None:
    write_atomic(path, record)
