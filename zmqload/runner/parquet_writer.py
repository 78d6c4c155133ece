"""Chunked record buffers: spilled raw to `_spill/` and reused at once, then converted by a
background thread at the lowest priority into Parquet parts and running statistics (histograms,
seen- and drained-maps) (docs/ARCHITECTURE.md, "Recording stays off the measured path")."""

from __future__ import annotations

import errno
import json
import os
import queue
import shutil
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Optional, Union

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from ..store import bitmaps
from ..contract.part_files import part_name
from ..contract.records import FOREIGN, RECVS, REPLIES, SAMPLES, SENDS
from ..contract.sizes import Sizes, message_bytes
from ..contract.wire import FOREIGN_STREAM, SEQ_BITS, SEQ_MASK, SendStatus
from ..contract.records import SCHEMA_VERSION as SCHEMA_VERSION
from ..errors import RunError

SPILL_EVERY_S = 1.0
"""A partly filled chunk is spilled after this long, so a worker killed mid-run loses at
most its last second of records (or one chunk), not a whole chunk."""

HOLD_BACKLOG_BYTES = 256 << 20
"""While a loop runs, the converter waits until this much raw chunk data is spilled (about
9.6M received messages): unpaced loops fill both cores of a small machine, and a converter
running beside them took ~1,300 instructions per message (valgrind) from the thing being
measured; beside a paced loop, its conversions compete for the GIL and the CPUs at a
slice's end and delay the next receive (p99 at 10k msg/s over tcp 328 -> 223 us without
them, docs/BENCHMARKS.md, "Engine throughput"). Beyond it, the converter runs (nice 19)
so that disk use stays bounded."""

SLOT_PREFIX = "slot-"
"""A spill file written before the loop and not yet holding records (readers of the spill
take `*.raw` only). On a VM, the first write into a page the guest has not touched lately
costs a host fault per page (~15 ms per 7 MB chunk here against ~1.5 ms into pages in use:
a third of an unpaced receive loop's CPU); a slot's pages are touched before the span, and
each spill overwrites them in place (docs/BENCHMARKS.md, "Engine throughput"). A chunk converted while the
loop still runs becomes a slot again instead of being deleted."""


def held_spill_bytes(rows: int, row_bytes: int, chunk_rows: int) -> int:
    """Raw spill a worker holds while its converter waits: its rows, up to HOLD_BACKLOG_BYTES
    (a whole chunk where one is larger). Its slots are prepared for this much."""
    return min(rows * row_bytes, max(HOLD_BACKLOG_BYTES, chunk_rows * row_bytes))


# The writers' pyarrow schemas, derived from the one statement in zmqload.contract.records.
SENDS_SCHEMA = SENDS.arrow
RECVS_SCHEMA = RECVS.arrow
REPLIES_SCHEMA = REPLIES.arrow
SAMPLES_SCHEMA = SAMPLES.arrow


def intended_times(t0_ns: int, seqs: np.ndarray, rate: int, t_sent: np.ndarray) -> np.ndarray:
    """The shared open-loop schedule (same integer formula as csrc/zl_clock.h);
    unpaced runs have no schedule, so the intended time is the actual send time."""
    if rate <= 0:
        return t_sent
    return t0_ns + (seqs * 1_000_000_000) // rate


def free_bytes(directory: str) -> int:
    """Bytes free for an unprivileged writer in directory's file system (-1 if unknown)."""
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return -1


def write_error(exc: OSError, directory: str, needed: int) -> RunError:
    """An I/O error while recording, as the one line the user sees: which directory, what
    was needed, what was free. Keeps the errno (ENOSPC, EIO, ...)."""
    free = free_bytes(directory)
    if exc.errno is None and 0 <= free < needed:  # numpy and pyarrow drop the errno: ask the disk
        exc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    reason = exc.strerror or str(exc) or type(exc).__name__
    error = RunError(
        f"cannot write records to {directory}: {reason} (needed {needed:,} bytes, "
        f"{'unknown' if free < 0 else format(free, ',')} bytes free)"
    )
    error.errno = exc.errno  # type: ignore[attr-defined]
    return error


WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG)
"""Errors of the disk itself while recording (not of zmqload): the run fails with one line."""


def is_write_error(exc: BaseException) -> bool:
    return getattr(exc, "errno", None) in WRITE_ERRNOS


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, default=str)
        f.write("\n")
    os.replace(tmp, path)


def arrow_table(columns: Mapping[str, Union[np.ndarray, list[str]]], schema: pa.Schema) -> pa.Table:
    """`pa.table(columns, schema=schema)` built from the columns' own buffers. pyarrow's
    conversions of numpy arrays and lists import pandas when it is installed, which added
    ~50 MB to a worker's peak RSS (hiding a backlog's memory from its figures) and its import
    time to the end of every run."""
    arrays = []
    for field in schema:
        values = columns[field.name]
        if pa.types.is_string(field.type):
            encoded = [str(v).encode() for v in values]
            data = b"".join(encoded)
            ends = np.cumsum([len(v) for v in encoded], dtype=np.int32)
            offsets = np.concatenate(([0], ends)).astype(np.int32)
            buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        elif pa.types.is_boolean(field.type):  # Arrow packs booleans 8 to a byte
            bits = np.packbits(np.asarray(values, dtype=bool), bitorder="little")
            buffers = [None, pa.py_buffer(bits)]
        else:
            column = np.ascontiguousarray(values, dtype=field.type.to_pandas_dtype())
            buffers = [None, pa.py_buffer(column)]
        arrays.append(pa.Array.from_buffers(field.type, len(values), buffers))
    return pa.Table.from_arrays(arrays, schema=schema)


class PartWriter:
    """Writes tables as numbered Parquet parts in one directory, atomically."""

    def __init__(self, directory: str, prefix: str, schema: pa.Schema, compression: str):
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.prefix = prefix
        self.schema = schema
        self.compression = None if compression == "none" else compression
        self.parts = 0
        self.rows = 0

    def write(self, columns: Mapping[str, Union[np.ndarray, list[str]]]) -> None:
        table = arrow_table(columns, self.schema)
        name = part_name(self.prefix, self.parts)
        tmp = os.path.join(
            self.directory, f".{name}.tmp"
        )  # (salvage.remove_partial_parts finds it)
        try:
            # Delta encoding suits these columns (timestamps and seqs rise, ids are constant):
            # measured 2.2x faster to write than dictionary+snappy and several times smaller.
            pq.write_table(
                table,
                tmp,
                compression=self.compression,
                use_dictionary=False,
                column_encoding={
                    f.name: "DELTA_BINARY_PACKED"
                    for f in self.schema
                    if pa.types.is_integer(f.type) and f.type.bit_width >= 32
                },
            )
            os.replace(tmp, os.path.join(self.directory, name))
        except OSError as exc:
            _remove(tmp)
            raise write_error(exc, self.directory, table.nbytes) from None
        self.parts += 1
        self.rows += table.num_rows


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def spill_columns_of(
    spill_file: str, columns: list[tuple[str, np.dtype]]
) -> tuple[dict[str, np.ndarray], int] | None:
    """A raw spill chunk read back: ({column: array}, rows), or None when the file is not
    a whole chunk (its writer died while writing it). Columns are stored one after another."""
    size = os.path.getsize(spill_file)
    row_bytes = sum(dtype.itemsize for _, dtype in columns)
    if size % row_bytes:
        return None
    rows = size // row_bytes
    chunk = {}
    with open(spill_file, "rb") as f:
        for name, dtype in columns:
            chunk[name] = np.fromfile(f, dtype=dtype, count=rows)
    return chunk, rows


class ChunkPipeline:
    """One chunk the engine fills, spilled raw to disk when full; a low-priority thread
    turns spilled chunks into records.

    Everything costly (deriving columns, histograms, seen-maps, Parquet encoding) happens
    in the converter thread at the lowest CPU priority, and only once the loop is over
    (close() or release(); before, only when HOLD_BACKLOG_BYTES of raw chunks wait), so it
    takes nothing from the loops being measured; the hand-over itself is a raw write of the
    chunk's bytes into a spill file prepared before the loop (SLOT_PREFIX: page cache speed,
    `expected_rows` tells how many to prepare). Memory stays one chunk per worker
    plus the converter's working set, however long the run and however far behind the
    converter is. `process(chunk, rows)` runs on the converter thread.
    """

    def __init__(
        self,
        columns: Mapping[str, npt.DTypeLike],
        rows: int,
        process: Callable[[dict[str, np.ndarray], int], None],
        spill_dir: str,
        expected_rows: int = 0,
    ):
        self.capacity = rows
        self.columns = [(name, np.dtype(dtype)) for name, dtype in columns.items()]
        # written through once here: the first touch of a page costs a fault (~4 us on this
        # VM), 1,800 of them in a 7 MB chunk, which would otherwise land in the loop's span
        self.current = {name: np.empty(rows, dtype=dtype) for name, dtype in self.columns}
        for column in self.current.values():
            column.fill(0)
        self.row = 0
        self.spill_dir = spill_dir
        os.makedirs(spill_dir, exist_ok=True)
        self._spilled = 0
        self._spilled_at = time.monotonic()
        self._pending: queue.Queue[Optional[tuple[str, int]]] = queue.Queue()
        self._released = threading.Event()  # set: the converter may run (HOLD_BACKLOG_BYTES)
        self._row_bytes = sum(d.itemsize for _, d in self.columns)
        self._chunk_bytes = rows * self._row_bytes
        self._process = process
        self.error: BaseException | None = None
        self.writer_cpu_s = 0.0  # CPU time the converter spent (recording overhead)
        self._slots = self._prepare_slots(expected_rows)
        self._thread = threading.Thread(target=self._convert, name="zmqload-writer", daemon=True)
        self._thread.start()

    def _prepare_slots(self, expected_rows: int) -> list[str]:
        """Spill files for the first `expected_rows` rows (up to the held backlog's bound:
        past it, the converter frees pages as fast as spills take them), written before the
        loop so that its spills write into pages already in use (SLOT_PREFIX). Best effort:
        a disk without room for them gets fewer."""
        left = held_spill_bytes(expected_rows, self._row_bytes, self.capacity)
        slots: list[str] = []
        zeros = np.zeros(min(left, self._chunk_bytes), np.uint8)
        while left > 0:
            path = os.path.join(self.spill_dir, f"{SLOT_PREFIX}{len(slots):06d}")
            try:
                with open(path, "wb") as f:
                    zeros[: min(left, len(zeros))].tofile(f)
            except OSError:
                _remove(path)
                break
            slots.append(path)
            left -= len(zeros)
        slots.reverse()  # pop() takes them in order
        return slots

    def advance(self, row: int) -> None:
        """The engine filled rows up to `row`; spill the chunk when it is full."""
        self.row = row
        if row >= self.capacity or (row and time.monotonic() - self._spilled_at >= SPILL_EVERY_S):
            self._spill()

    def spill_now(self) -> None:
        """Spill the rows so far, however few (a consumer about to be killed: --restart)."""
        if self.row:
            self._spill()

    def release(self) -> None:
        """Let the converter run before close()."""
        self._released.set()

    def _spill(self) -> None:
        if self.error is not None:
            raise self.error
        path = os.path.join(self.spill_dir, f"{self._spilled:06d}.raw")
        slot = self._slots.pop() if self._slots else None
        written = slot or path
        try:
            with open(written, "r+b" if slot else "wb") as f:
                for name, _ in self.columns:
                    self.current[name][: self.row].tofile(f)
                f.truncate()
            if slot:  # a chunk becomes readable whole or not at all
                os.replace(slot, path)
        except OSError as exc:
            _remove(written)  # a partial chunk is unreadable; its rows are lost with the disk
            raise write_error(exc, self.spill_dir, self.row * self._row_bytes) from None
        self._spilled_at = time.monotonic()
        self._pending.put((path, self.row))
        self._spilled += 1
        self.row = 0

    def close(self, abandon_after_s: float | None = None) -> int:
        """Spill what is left and wait for the converter. With abandon_after_s (after an
        interrupt), stop converting after that long; returns the rows left unconverted
        (their raw spill files stay in the hidden spill directory)."""
        self._loop_over = True
        if self.row:
            self._spill()
        self._stop_at = None if abandon_after_s is None else time.monotonic() + abandon_after_s
        self._released.set()
        self._pending.put(None)
        self._thread.join()
        while self._slots:
            _remove(self._slots.pop())
        if self.error is not None:
            raise self.error
        left = self.unconverted_rows
        if not left:
            try:
                os.rmdir(self.spill_dir)
                os.rmdir(os.path.dirname(self.spill_dir))
            except OSError:
                pass
        return left

    unconverted_rows = 0
    _stop_at: float | None = None
    _loop_over = False
    _recycled = 0

    def _convert(self) -> None:
        try:  # the lowest priority for this thread only (Linux: a thread id is a pid)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):
            pass
        while True:
            item = self._pending.get()
            # spilled chunks counted as full: the bound holds however the chunks were cut
            while (
                not self._released.wait(0.05)
                and (self._pending.qsize() + 1) * self._chunk_bytes < HOLD_BACKLOG_BYTES
            ):
                pass
            if item is None:
                self.writer_cpu_s = time.thread_time()
                return
            path, rows = item
            if self.error is not None or (
                self._stop_at is not None and time.monotonic() > self._stop_at
            ):
                self.unconverted_rows += rows
                continue
            try:
                chunk = {}
                with open(path, "rb") as f:
                    for name, dtype in self.columns:
                        chunk[name] = np.fromfile(f, dtype=dtype, count=rows)
                self._process(chunk, rows)
                # the part is whole (renamed into place): only now may its raw chunk go; while
                # the loop spills (past the held backlog's bound), as a slot for the next spill
                if self._loop_over:
                    os.remove(path)
                else:
                    slot = os.path.join(self.spill_dir, f"{SLOT_PREFIX}r{self._recycled:06d}")
                    os.replace(path, slot)
                    self._recycled += 1
                    self._slots.append(slot)
            except BaseException as exc:  # reported to the loop thread at the next spill
                self.error = exc


PAGE_SEQS = 1 << 23
"""Seqs per page of a SeenMap's flags (one byte each while in memory: 8 MiB)."""

MIN_PAGE_SEQS = 1 << 20
"""The smallest page (1 MiB of flags, made lazily): the pages of a small run."""

KEEP_PAGES = 2
"""Pages a file-backed SeenMap keeps in memory (the newest used); the rest wait packed in its file.
Arrivals come in seq order per connection, so two pages take in a chunk that straddles a page end."""


class PagedFlags:
    """A flag per seq in pages of PAGE_SEQS: with a file, at most KEEP_PAGES in memory (the rest
    packed in it), so a consumer's memory does not grow with the run; without, all in memory."""

    def __init__(self, page_seqs: int, path: str | None = None):
        self.page_seqs = page_seqs  # a multiple of 8: a page is whole bytes of the file
        self.path = path
        self.pages: dict[int, np.ndarray] = {}  # page -> flags, least recently used first
        self.stored: set[int] = set()

    def _page(self, k: int) -> np.ndarray:
        page = self.pages.pop(k, None)
        if page is None:
            page = np.zeros(self.page_seqs, bool)
            if k in self.stored and self.path is not None:
                lo = k * self.page_seqs // 8
                page[:] = np.unpackbits(
                    bitmaps.piece(self.path, lo, lo + self.page_seqs // 8)
                ).view(bool)
        self.pages[k] = page
        return page

    def _groups(self, seqs: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray | slice]]:
        """(page, which of seqs fall in it), a page at a time."""
        if not len(seqs):
            return
        pages = seqs // self.page_seqs
        lo, hi = int(pages.min()), int(pages.max())
        for k in [lo] if lo == hi else np.unique(pages).tolist():
            yield self._page(k), (slice(None) if lo == hi else pages == k)

    def get(self, seqs: np.ndarray) -> np.ndarray:
        out = np.zeros(len(seqs), bool)
        for page, mine in self._groups(seqs):
            out[mine] = page[seqs[mine] % self.page_seqs]
        self._evict(KEEP_PAGES)
        return out

    def set(self, seqs: np.ndarray) -> None:
        for page, mine in self._groups(seqs):
            page[seqs[mine] % self.page_seqs] = True
        self._evict(KEEP_PAGES)

    def flush(self) -> None:
        """Every page in memory written to the file (a reader of the file sees them)."""
        self._evict(0)

    def _evict(self, keep: int) -> None:
        if self.path is None:
            return
        while len(self.pages) > keep:
            k = next(iter(self.pages))
            with open(self.path, "r+b" if os.path.exists(self.path) else "wb") as f:
                f.seek(k * self.page_seqs // 8)
                np.packbits(self.pages.pop(k)).tofile(f)
            self.stored.add(k)

    def packed(self, n: int) -> bitmaps.Bits:
        """The flags of seqs below n as a packed map: its file (written out), or an array."""
        if self.path is None:
            pages = [
                self.pages.get(k, np.zeros(self.page_seqs, bool))
                for k in range(-(-n // self.page_seqs))
            ]
            return np.packbits(np.concatenate(pages)[:n]) if pages else np.zeros(0, np.uint8)
        self._evict(0)
        with open(self.path, "ab") as f:
            f.truncate((n + 7) // 8)  # the bits past n of the last byte are clear: never set
        return self.path


BEHIND_ROWS = 1 << 20
"""Seqs an untrusted SeenMap holds behind its newest pages before it sets them (8 MiB)."""

UNTRUSTED_SPAN = 1 << 23
SPAN_PER_ROW = 256
"""An untrusted SeenMap (a producer of the user's) places a seq only below UNTRUSTED_SPAN +
SPAN_PER_ROW x the stream's arrivals so far: its map is at most 1 MiB + 32 bytes per arrival, so
seqs scattered over all a pace allows cost what was received (a producer that lost 99.6% of its
messages still fits); the rest are counted `beyond`, never a bit."""


class SeenMap:
    """Which seqs of one stream arrived: exact unique / duplicate / missing accounting,
    and which seqs first arrived in the drain (after the producers were done). With `path`
    (a file name without suffix), the flags are paged to `path.seen` / `path.drained`. Pages hold
    `expected` seqs, from MIN_PAGE_SEQS (a short guess must not make a long run page for ever) up
    to PAGE_SEQS."""

    def __init__(self, expected: int, path: str | None = None, untrusted: bool = False):
        self.page_seqs = min(PAGE_SEQS, -(-max(expected, MIN_PAGE_SEQS) // 8) * 8)
        self.seen = PagedFlags(self.page_seqs, path and path + ".seen")
        self.drained: PagedFlags | None = None  # made at the first drained arrival
        self.path = path
        self.unique = 0
        self.duplicates = 0
        self.reordered = 0
        self.max_seq = -1
        # a producer of the user's (--role consumer) may scatter seqs over every page its pace
        # allows: those behind the newest pages wait here and are set bit by bit in the map's file
        # in one pass, so a message costs the same wherever its seq falls (no drained-map: no
        # fates to give)
        self.untrusted = untrusted
        self.behind: list[np.ndarray] = []
        self.behind_rows = 0
        self.rows = 0
        self.beyond = 0  # untrusted: arrivals past the span their count allows (not in the map)

    def add(self, seqs: np.ndarray, in_drain: np.ndarray | None = None) -> None:
        """seqs in arrival order; in_drain[i]: seqs[i] arrived during the drain."""
        if len(seqs) == 0:
            return
        if self.untrusted:  # the map spans at most SPAN_PER_ROW seqs per arrival so far
            self.rows += len(seqs)
            placed = seqs < UNTRUSTED_SPAN + SPAN_PER_ROW * self.rows
            if not placed.all():
                self.beyond += int(np.count_nonzero(~placed))
                seqs = seqs[placed]
                if not len(seqs):
                    return
        top = int(seqs.max())
        running_max = np.maximum.accumulate(seqs)
        prior_max = np.concatenate(([self.max_seq], running_max[:-1]))
        self.reordered += int(np.count_nonzero(seqs < prior_max))
        self.max_seq = max(self.max_seq, top)
        if self.untrusted:
            behind = seqs // self.page_seqs < self.max_seq // self.page_seqs - 1
            if behind.any():
                self.behind.append(seqs[behind])
                self.behind_rows += int(np.count_nonzero(behind))
                seqs = seqs[~behind]
                if self.behind_rows >= BEHIND_ROWS:
                    self._set_behind()
            self._set(seqs)
            return
        if in_drain is not None and in_drain.any():
            # a seq counts as drained only if its first arrival was in the drain
            if self.drained is None:
                self.drained = PagedFlags(self.page_seqs, self.path and self.path + ".drained")
            fresh = seqs[in_drain]
            fresh = fresh[~self.seen.get(fresh)]
            # an earlier (pre-drain) row of this very chunk may have brought it already
            early = seqs[~in_drain]
            if len(early):
                fresh = fresh[~np.isin(fresh, early)]
            self.drained.set(fresh)
        self._set(seqs)

    def _set(self, seqs: np.ndarray) -> None:
        if not len(seqs):
            return
        if len(seqs) == 1 or bool(np.all(seqs[1:] > seqs[:-1])):
            distinct = seqs
        else:
            distinct = np.unique(seqs)
        new = len(distinct) - int(np.count_nonzero(self.seen.get(distinct)))
        self.seen.set(distinct)
        self.unique += new
        self.duplicates += len(seqs) - new

    def _set_behind(self) -> None:
        """The seqs held behind, set bit by bit in the map's file (its pages in memory written out
        first), so the cost follows the seqs, not the pages they fall on."""
        if not self.behind:
            return
        held = np.concatenate(self.behind)
        self.behind, self.behind_rows = [], 0
        distinct = np.unique(held)
        if self.seen.path is None:
            self._set(held)
            return
        self.seen.flush()
        self.seen.stored.update(np.unique(distinct // self.page_seqs).tolist())
        with open(self.seen.path, "r+b" if os.path.exists(self.seen.path) else "w+b") as f:
            if os.fstat(f.fileno()).st_size < int(distinct[-1]) // 8 + 1:
                f.truncate(int(distinct[-1]) // 8 + 1)  # a hole where nothing was written
            flags = np.memmap(f, np.uint8, "r+")
            at, bit = distinct >> 3, (np.uint8(0x80) >> (distinct & 7).astype(np.uint8))
            new = (flags[at] & bit) == 0
            np.bitwise_or.at(flags, at, bit)
            flags.flush()
            del flags
        fresh = int(np.count_nonzero(new))
        self.unique += fresh
        self.duplicates += len(held) - fresh

    def packed(self) -> tuple[bitmaps.Bits, bitmaps.Bits]:
        """(seen, drained) as packed maps up to the highest seq seen (a map without a drained
        arrival is empty)."""
        self._set_behind()
        n = self.max_seq + 1
        drained = self.drained.packed(n) if self.drained is not None else np.zeros(0, np.uint8)
        return self.seen.packed(n), drained


SAMPLE_BLOCK_ROWS = 16_384
"""Samples a worker holds before writing them as a part (about 5 minutes at one per 20 ms slice)."""


class Samples:
    """Counters over time from one worker, held in fixed numpy columns and written a block at a
    time: a worker's memory does not step with the samples (a list of Python tuples did, by 13-21 MB
    in both workers at their 65,536th sample of an hour-long run: its first flush)."""

    COLUMNS = ("t_ns", "messages", "dropped", "tcp_sendq_bytes", "tcp_recvq_bytes", "rss_kb")

    def __init__(self, writer: PartWriter, role: str, worker: int):
        self.writer, self.role, self.worker = writer, role, worker
        self.block = np.empty((len(self.COLUMNS), SAMPLE_BLOCK_ROWS), np.int64)
        self.rows = 0

    def add(
        self,
        t_ns: int,
        messages: int,
        dropped: int,
        sendq: int = -1,
        recvq: int = -1,
        rss_kb: int = -1,
    ) -> None:
        self.block[:, self.rows] = (t_ns, messages, dropped, sendq, recvq, rss_kb)
        self.rows += 1
        if self.rows == SAMPLE_BLOCK_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        n = self.rows
        columns = dict(zip(self.COLUMNS, self.block[:, :n]))
        self.writer.write(
            dict(columns, role=[self.role] * n, worker=np.full(n, self.worker, np.int32))
        )
        self.rows = 0


class SendConverter:
    """Turns the sender's raw chunks (t_sent, status[, t_reply]) into sends records, the
    packed map of seqs the socket accepted (into the run's maps directory with `maps`, else in
    memory), and (req-rep) replies records and round trips."""

    def __init__(
        self,
        run_dir: str,
        name: str,
        stream: int,
        sizes: Sizes,
        rate: int,
        t0_ns: int,
        compression: str,
        round_trip: bool,
        maps: bool = False,
        parts: int = 1,
        first_seq: int = 0,
    ):
        from ..measure.histogram import Histogram

        self.stream, self.sizes, self.rate, self.t0_ns, self.parts = (
            stream,
            sizes,
            rate,
            t0_ns,
            parts,
        )
        self.bytes_sent = 0  # of the messages the socket accepted, every frame (contract/sizes.py)
        self.sends = PartWriter(os.path.join(run_dir, "sends"), name, SENDS_SCHEMA, compression)
        self.replies = (
            PartWriter(os.path.join(run_dir, "replies"), name, REPLIES_SCHEMA, compression)
            if round_trip
            else None
        )
        self.rtt = Histogram()
        self.lateness = (
            Histogram()
        )  # t_sent - t_intended of every attempt (zmqload.measure.schedule_keeping)
        self.ok_bits = bitmaps.BitsWriter(
            os.path.join(run_dir, bitmaps.MAPS_DIR, f"{name}.ok") if maps else None
        )
        # accepted-flags past the last whole byte; a restarted producer's new process (--restart)
        # starts at first_seq: the seqs below are not its own
        self._ok_carry = np.zeros(first_seq, bool)
        self.first_seq = first_seq

    def columns(self) -> dict[str, npt.DTypeLike]:
        """The engine's raw columns: send time and status (and, round trips, the reply time and
        whether the reply echoed the request's header)."""
        columns: dict[str, npt.DTypeLike] = {"t_sent": np.int64, "status": np.int8}
        return (
            dict(columns, t_reply=np.int64, echoed=np.int8) if self.replies is not None else columns
        )

    def __call__(self, chunk: dict[str, np.ndarray], rows: int) -> None:
        seqs = np.arange(self.first_seq, self.first_seq + rows, dtype=np.int64)
        self.first_seq += rows
        t_sent, status = chunk["t_sent"][:rows], chunk["status"][:rows]
        # chunks spilled on time need not hold whole bytes of flags: carry the rest over
        accepted = status == SendStatus.OK
        size = self.sizes.of(seqs)
        self.bytes_sent += message_bytes(int(size.sum(dtype=np.int64, where=accepted)), self.parts)
        ok = np.concatenate([self._ok_carry, accepted])
        whole = len(ok) // 8 * 8
        self.ok_bits.append(np.packbits(ok[:whole]))
        self._ok_carry = ok[whole:]
        t_intended = intended_times(self.t0_ns, seqs, self.rate, t_sent)
        self.lateness.record(t_sent - t_intended)
        stream = np.full(rows, self.stream, np.int32)
        if self.replies is not None:
            t_reply = chunk["t_reply"][:rows]
            answered = t_reply > 0  # 0: no reply within --reply-timeout-ms (unanswered)
            self.rtt.record((t_reply - t_intended)[answered])
            self.replies.write(
                {
                    "stream": stream[answered],
                    "seq": seqs[answered],
                    "t_intended_ns": t_intended[answered],
                    "t_sent_ns": t_sent[answered],
                    "t_reply_ns": t_reply[answered],
                    "echoed": chunk["echoed"][:rows][answered] != 0,
                }
            )
        self.sends.write(
            {
                "stream": stream,
                "seq": seqs,
                "t_intended_ns": t_intended,
                "t_sent_ns": t_sent,
                "status": status,
                "size": size,
            }
        )

    def sent_ok_map(self) -> bitmaps.Bits:
        self.ok_bits.append(np.packbits(self._ok_carry))
        self._ok_carry = np.zeros(0, bool)
        return self.ok_bits.done()


class ForeignRecorder:
    """A consumer's foreign messages (--role consumer: rows the engine marked FOREIGN_STREAM) taken
    out of its chunks into foreign/ parts, with their bytes, first and last arrival and the gaps
    between arrivals (a histogram, so the rates and stalls of a user's producer can be told)."""

    def __init__(self, run_dir: str, name: str, consumer: int, compression: str):
        from ..measure.histogram import Histogram

        self.consumer = consumer
        self.writer = PartWriter(os.path.join(run_dir, "foreign"), name, FOREIGN.arrow, compression)
        self.gaps = Histogram()
        self.bytes = self.t_first_ns = self.t_last_ns = 0

    def add(self, t_recv: np.ndarray, size: np.ndarray) -> None:
        """Foreign messages in arrival order: their records, and the gaps since the one before."""
        self.writer.write(
            {
                "consumer": np.full(len(t_recv), self.consumer, np.int32),
                "t_recv_ns": t_recv,
                "size": size,
            }
        )
        self.gaps.record(
            np.diff(t_recv, prepend=self.t_last_ns) if self.t_last_ns else np.diff(t_recv)
        )
        self.t_first_ns = self.t_first_ns or int(t_recv[0])
        self.t_last_ns = int(t_recv[-1])
        self.bytes += int(size.sum(dtype=np.int64))


class RecvConverter:
    """Turns the receiver's raw chunks (header word, t_sent, t_recv, size) into recvs
    records, latency histograms and per-stream seen-maps. `t0_ns` and `t_drain_ns` are
    set by the consumer when it learns them; a chunk converted before the drain began
    holds only rows received before it (rows are spilled before they are converted)."""

    COLUMNS = {"words": np.uint64, "t_sent": np.int64, "t_recv": np.int64, "size": np.int32}
    NO_DRAIN = np.iinfo(np.int64).max

    def __init__(
        self,
        run_dir: str,
        name: str,
        consumer: int,
        rate: int,
        expected: int,
        compression: str,
        maps: bool = False,
    ):
        from ..measure.histogram import Histogram

        self.consumer, self.rate, self.expected = consumer, rate, expected
        # with `maps`, the seen- and drained-maps are paged to files (the run's maps directory)
        self.maps_prefix = os.path.join(run_dir, bitmaps.MAPS_DIR, name) if maps else None
        self.t0_ns = 0
        self.t_drain_ns = self.NO_DRAIN
        self.recvs = PartWriter(os.path.join(run_dir, "recvs"), name, RECVS_SCHEMA, compression)
        self.latency_intended = Histogram()
        self.latency_sent = Histogram()
        self.streams: dict[int, SeenMap] = {}
        self.first_frame_bytes = 0  # of zmqload's messages received, duplicates included
        self.expected_sizes: Optional[Sizes] = None  # the producers' (not known to a consumer half)
        self.size_mismatches = 0
        self.foreign: Optional[ForeignRecorder] = None  # --role consumer: set by the consumer

    def live_latency(
        self, chunk: dict[str, np.ndarray], lo: int, hi: int, intended: Any, sent: Any
    ) -> None:
        """--metrics: rows lo..hi of the receiver's chunk, not converted yet, into the live
        histograms `intended` and `sent` (the consumer's thread; the same rule as __call__'s)."""
        words = chunk["words"][lo:hi]
        kept = (words >> np.uint64(SEQ_BITS)).astype(np.int32) != FOREIGN_STREAM
        seq = (words[kept] & np.uint64(SEQ_MASK)).astype(np.int64)
        t_sent, t_recv = chunk["t_sent"][lo:hi][kept], chunk["t_recv"][lo:hi][kept]
        intended.record(t_recv - intended_times(self.t0_ns, seq, self.rate, t_sent))
        sent.record(t_recv - t_sent)

    def __call__(self, chunk: dict[str, np.ndarray], rows: int) -> None:
        words = chunk["words"][:rows]
        stream = (words >> np.uint64(SEQ_BITS)).astype(np.int32)
        foreign = stream == FOREIGN_STREAM if self.foreign is not None else None
        if foreign is not None and foreign.any():  # written apart: the rest are zmqload's messages
            assert self.foreign is not None
            self.foreign.add(chunk["t_recv"][:rows][foreign], chunk["size"][:rows][foreign])
            kept = ~foreign
            chunk = {name: column[:rows][kept] for name, column in chunk.items()}
            words, stream, rows = chunk["words"], stream[kept], len(chunk["words"])
            if not rows:
                return
        seq = (words & np.uint64(SEQ_MASK)).astype(np.int64)
        t_sent, t_recv = chunk["t_sent"][:rows], chunk["t_recv"][:rows]
        t_intended = intended_times(self.t0_ns, seq, self.rate, t_sent)
        self.latency_intended.record(t_recv - t_intended)
        self.latency_sent.record(t_recv - t_sent)
        in_drain = t_recv >= self.t_drain_ns
        one_stream = stream.min() == stream.max()
        for s in stream[:1] if one_stream else np.unique(stream):
            seen = self.streams.get(int(s))
            if seen is None:
                path = self.maps_prefix and f"{self.maps_prefix}-s{int(s)}"
                if path:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                seen = self.streams[int(s)] = SeenMap(
                    self.expected, path, untrusted=self.foreign is not None
                )
            mine = slice(None) if one_stream else (stream == s)
            seen.add(seq[mine], in_drain[mine])
        size = chunk["size"][:rows]
        self.first_frame_bytes += int(size.sum(dtype=np.int64))
        if self.expected_sizes is not None:
            self.size_mismatches += int(np.count_nonzero(size != self.expected_sizes.of(seq)))
        self.recvs.write(
            {
                "consumer": np.full(rows, self.consumer, np.int32),
                "stream": stream,
                "seq": seq,
                "t_intended_ns": t_intended,
                "t_sent_ns": t_sent,
                "t_recv_ns": t_recv,
                "size": size,
            }
        )
