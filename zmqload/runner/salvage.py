"""A worker's final figures rebuilt from its Parquet parts and the raw chunks left in its `_spill/`,
when its final never came (killed, crashed, full disk) or came with rows unconverted. A chunk that
cannot be converted is removed and counted."""

from __future__ import annotations

import dataclasses
import errno
import glob
import os
import shutil
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Union

import numpy as np
import pyarrow.parquet as pq

from ..contract.workload import Workload
from ..contract import control, run_record
from ..store import bitmaps
from ..contract.ids import Role, WorkerId
from ..contract.wire import SendStatus
from ..contract.sizes import message_bytes
from ..store.size_files import sizes_of
from ..measure.histogram import Histogram
from ..contract.part_files import PART_NAME
from ..store.parquet_parts import part_files
from .parquet_writer import (
    PAGE_SEQS,
    ForeignRecorder,
    PagedFlags,
    PartWriter,
    RecvConverter,
    SeenMap,
    SendConverter,
    is_write_error,
    spill_columns_of,
)


@dataclass
class Salvage:
    """What salvaging one run's workers did (said in the run's error line and run.json)."""

    converted_rows: dict[str, int] = field(default_factory=dict)  # worker -> raw rows converted now
    removed_rows: dict[str, int] = field(
        default_factory=dict
    )  # worker -> raw rows removed unconverted
    reasons: list[str] = field(default_factory=list)

    def note(self) -> str:
        """'' or one clause for the error line."""
        removed = sum(self.removed_rows.values())
        if not removed:
            return ""
        return f"{removed:,} unconverted rows removed from _spill/ ({'; '.join(sorted(set(self.reasons)))})"

    def record(self, rebuilt: Iterable[WorkerId], died: Iterable[WorkerId]) -> run_record.Salvaged:
        """run.json's `salvaged`: every worker rebuilt, those that died, and the rows."""
        return run_record.Salvaged(
            workers=sorted(str(n) for n in rebuilt),
            died=sorted(str(n) for n in died),
            converted_rows=dict(self.converted_rows),
            removed_rows=dict(self.removed_rows),
            reasons=sorted(set(self.reasons)),
        )


def record_kind(worker: WorkerId) -> str:
    return "sends" if worker.role is Role.PRODUCER else "recvs"


def remove_partial_parts(run_dir: str, name: str) -> None:
    """Parts a dead writer left under their temporary name (never whole)."""
    for tmp in glob.glob(
        os.path.join(run_dir, "*", f".{PART_NAME.format(worker=name, index='*')}.tmp")
    ):
        os.remove(tmp)


Converter = Union[SendConverter, RecvConverter]
Final = Union[control.ProducerFinal, control.ConsumerFinal]


def _converter(
    run_dir: str, worker: WorkerId, w: Workload, t0_ns: int, t_drain_ns: int, name: str
) -> tuple[Converter, dict[str, Any], PartWriter]:
    """The converter the worker's process `name` itself used, its raw columns and its parts' writer."""
    if worker.role is Role.PRODUCER:
        from ..contract import patterns

        send = SendConverter(
            run_dir,
            name,
            worker.index,
            sizes_of(w.size, w.payload),
            w.rate,
            t0_ns,
            w.compression,
            patterns.get(w.pattern).round_trip,
            parts=w.parts,
        )
        return send, send.columns(), send.sends
    recv = RecvConverter(run_dir, name, worker.index, w.rate, 1024, w.compression)
    if w.topology.consumers_alone:  # its foreign rows go where the consumer itself puts them
        recv.foreign = ForeignRecorder(run_dir, name, worker.index, w.compression)
    recv.t0_ns = t0_ns
    recv.t_drain_ns = t_drain_ns or RecvConverter.NO_DRAIN
    return recv, dict(RecvConverter.COLUMNS), recv.recvs


def convert_spill(
    run_dir: str,
    worker: WorkerId,
    w: Workload,
    t0_ns: int,
    t_drain_ns: int,
    salvage: Salvage,
    name: str | None = None,
    first_seq: int = 0,
) -> None:
    """Turn the raw chunks a worker's process (`name`: its records' name, the worker's own by
    default) left in _spill/ into Parquet parts (numbered after its whole ones: chunk k is part
    k), then remove them; drop what cannot be converted. `first_seq`: a restarted producer's new
    process's first (--restart)."""
    name = name or str(worker)
    spill_dir = os.path.join(run_dir, "_spill", name)
    remove_partial_parts(run_dir, name)
    chunks = sorted(glob.glob(os.path.join(spill_dir, "*.raw")))
    if chunks:
        convert, columns, writer = _converter(run_dir, worker, w, t0_ns, t_drain_ns, name)
        existing = part_files(run_dir, record_kind(worker), name)
        writer.parts = len(existing)
        if isinstance(convert, SendConverter):  # seqs go on from the rows already written
            convert.first_seq = first_seq + sum(
                pq.ParquetFile(p).metadata.num_rows for p in existing
            )
        dtypes = [(column, np.dtype(dtype)) for column, dtype in columns.items()]
        failed = False
        for path in chunks:
            index = int(os.path.basename(path).split(".")[0])
            if index < len(existing):  # converted, but its worker died before removing it
                os.remove(path)
                continue
            read = None if failed else spill_columns_of(path, dtypes)
            if read is None:
                rows = os.path.getsize(path) // sum(d.itemsize for _, d in dtypes)
                salvage.removed_rows[name] = salvage.removed_rows.get(name, 0) + rows
                salvage.reasons.append(
                    "disk full" if failed else "a chunk cut short when its worker died"
                )
                os.remove(path)
                continue
            chunk, rows = read
            try:
                convert(chunk, rows)
            except Exception as exc:
                if not is_write_error(exc):
                    raise
                failed = True
                remove_partial_parts(run_dir, name)
                salvage.removed_rows[name] = salvage.removed_rows.get(name, 0) + rows
                salvage.reasons.append(
                    "disk full" if getattr(exc, "errno", None) == errno.ENOSPC else str(exc)
                )
            else:
                salvage.converted_rows[name] = salvage.converted_rows.get(name, 0) + rows
            os.remove(path)
    shutil.rmtree(spill_dir, ignore_errors=True)
    try:
        os.rmdir(os.path.join(run_dir, "_spill"))
    except OSError:
        pass  # another worker's chunks are still there, or it is gone already


def _read(path: str, columns: list[str]) -> dict[str, np.ndarray]:
    table = pq.read_table(path, columns=columns)
    return {c: table.column(c).to_numpy() for c in columns}


def _salvage_maps(run_dir: str, name: str) -> str:
    """The prefix of the maps a salvage rebuilds for worker `name`, in the run's maps directory
    (removed with it once the figures are made), with none of an earlier salvage left."""
    prefix = os.path.join(run_dir, bitmaps.MAPS_DIR, f"salvaged-{name}")
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    for old in glob.glob(glob.escape(prefix) + ".*"):
        os.remove(old)
    return prefix


def producer_final(
    run_dir: str,
    worker: WorkerId,
    w: Workload,
    close_ns: int = 0,
    names: list[str] | None = None,
) -> control.ProducerFinal:
    """A producer's final from its sends/ parts (one row per attempt, seqs from 0), a part at a
    time: its accepted-map goes to a file through paged flags, so an hour-long producer's
    hundreds of millions of rows are never held at once. `names`: the records' names of each of
    its processes in order (--restart: "p0", "p0.g1"), joined into one account."""
    from ..contract import patterns

    parts = [p for name in names or [str(worker)] for p in part_files(run_dir, "sends", name)]
    ok = PagedFlags(PAGE_SEQS, _salvage_maps(run_dir, str(worker)) + ".ok")
    lateness = (
        Histogram()
    )  # as the producer's own converter keeps it (zmqload.measure.schedule_keeping)
    first_frames = attempted = sent = 0
    by_status = dict.fromkeys((SendStatus.EAGAIN, SendStatus.TIMEOUT, SendStatus.ERROR), 0)
    t_first, t_last = np.iinfo(np.int64).max, 0
    for part in parts:
        cols = _read(part, ["seq", "status", "t_sent_ns", "t_intended_ns", "size"])
        if not len(cols["seq"]):
            continue
        accepted = cols["status"] == SendStatus.OK
        first_frames += int(cols["size"].sum(dtype=np.int64, where=accepted))
        fresh = cols["seq"][accepted]
        sent += len(fresh) - int(np.count_nonzero(ok.get(fresh)))
        ok.set(fresh)
        attempted = max(attempted, int(cols["seq"].max()) + 1)
        for status in by_status:
            by_status[status] += int(np.count_nonzero(cols["status"] == status))
        t_first, t_last = (
            min(t_first, int(cols["t_sent_ns"].min())),
            max(t_last, int(cols["t_sent_ns"].max())),
        )
        lateness.record(cols["t_sent_ns"] - cols["t_intended_ns"])
    rtt = None
    if patterns.get(w.pattern).round_trip:
        hist = Histogram()
        for part in [
            p for name in names or [str(worker)] for p in part_files(run_dir, "replies", name)
        ]:
            cols = _read(part, ["t_intended_ns", "t_reply_ns"])
            hist.record(cols["t_reply_ns"] - cols["t_intended_ns"])
        rtt = hist.to_payload()
    counters = control.SendCounters(
        attempted=attempted,
        sent=sent,
        eagain=by_status[SendStatus.EAGAIN],
        timeout=by_status[SendStatus.TIMEOUT],
        errors=by_status[SendStatus.ERROR],
        t_first_send_ns=t_first if attempted else 0,
        t_last_send_ns=t_last,
        interrupted=True,
    )
    return control.ProducerFinal(
        counters,
        ok.packed(attempted),
        close_ns=close_ns,
        parts=len(parts),
        rtt=rtt,
        lateness=lateness.to_payload(),
        bytes_sent=message_bytes(first_frames, w.parts),
    )


def consumer_final(
    run_dir: str, worker: WorkerId, w: Workload, t_drain_ns: int, names: list[str] | None = None
) -> control.ConsumerFinal:
    """A consumer's final from its recvs/ parts, a part at a time: seen- and drained-maps (paged to
    files), histograms. `names`: the records' names of each of its processes in order (--restart:
    "c0", "c0.g1"), joined into one account; its own name alone by default."""
    parts = [p for name in names or [str(worker)] for p in part_files(run_dir, "recvs", name)]
    streams: dict[int, SeenMap] = {}
    lat_i, lat_s = Histogram(), Histogram()
    received, first, last, first_frames = 0, 0, 0, 0
    drain_from = t_drain_ns or RecvConverter.NO_DRAIN
    for part in parts:  # in arrival order, as the worker added them
        cols = _read(part, ["stream", "seq", "t_intended_ns", "t_sent_ns", "t_recv_ns", "size"])
        if not len(cols["seq"]):
            continue
        received += len(cols["seq"])
        first_frames += int(cols["size"].sum(dtype=np.int64))
        first = int(cols["t_recv_ns"][0]) if not first else first
        last = int(cols["t_recv_ns"][-1])
        lat_i.record(cols["t_recv_ns"] - cols["t_intended_ns"])
        lat_s.record(cols["t_recv_ns"] - cols["t_sent_ns"])
        in_drain = cols["t_recv_ns"] >= drain_from
        for s in np.unique(cols["stream"]):
            mine = cols["stream"] == s
            arrived = streams.get(int(s))
            if arrived is None:  # paged to files like the consumer's own (bounded memory)
                arrived = streams[int(s)] = SeenMap(
                    PAGE_SEQS,
                    _salvage_maps(run_dir, f"{worker}-s{int(s)}"),
                    untrusted=w.topology.consumers_alone,
                )
            arrived.add(cols["seq"][mine], in_drain[mine])
    seen = []
    for stream, m in sorted(streams.items()):
        seen_map, drained_map = m.packed()
        seen.append(
            control.StreamSeen(
                stream, m.unique, m.duplicates, m.reordered, seen_map, drained_map, m.beyond
            )
        )
    return control.ConsumerFinal(
        received,
        0,
        0,
        0,
        first,
        last,
        t_drain_ns,
        lat_i.to_payload(),
        lat_s.to_payload(),
        seen,
        len(parts),
        interrupted=True,
        bytes_received=message_bytes(first_frames, w.parts),
    )


def _streams(final: Any) -> list[control.StreamSeen]:
    return list(final.streams) if isinstance(final, control.ConsumerFinal) else []


def with_received(
    final: control.ProducerFinal, seen_maps: list[bitmaps.Bits], path: str
) -> control.ProducerFinal:
    """A dead producer's accepted-map extended by the seqs its consumers received: those
    were evidently sent, though their send records died with the producer. Merged a piece
    at a time into the file `path`."""
    c = final.counters
    own_bytes = (c.attempted + 7) // 8
    merged = bitmaps.BitsWriter(path)
    sent, top = 0, -1  # top: the highest seq received
    for lo, hi in bitmaps.pieces(max([own_bytes] + [bitmaps.nbytes(m) for m in seen_maps])):
        own = bitmaps.piece(final.sent_ok_map, lo, min(hi, own_bytes))
        if (
            len(own) and own_bytes <= hi and c.attempted % 8
        ):  # bits past the attempted seqs are not its own
            own[-1] &= np.uint8((0xFF << (8 - c.attempted % 8)) & 0xFF)
        received = np.zeros(hi - lo, np.uint8)
        for m in seen_maps:
            received |= bitmaps.piece(m, lo, hi)
        if (last := np.flatnonzero(received)).size:
            top = (lo + int(last[-1])) * 8 + int(
                np.flatnonzero(np.unpackbits(received[last[-1] : last[-1] + 1]))[-1]
            )
        received[: len(own)] |= own
        sent += int(np.unpackbits(received).sum())
        merged.append(received)
    attempted = max(c.attempted, top + 1)
    with open(path, "r+b") as f:  # the map of attempted seqs: no bytes past them
        f.truncate((attempted + 7) // 8)
    counters = dataclasses.replace(c, attempted=attempted, sent=sent, interrupted=True)
    return dataclasses.replace(final, counters=counters, sent_ok_map=merged.done())


def salvage_run(
    run_dir: str,
    w: Workload,
    t0_ns: int,
    producers: list[WorkerId],
    consumers: list[WorkerId],
    finals: dict[WorkerId, Any],
    drain_started_ns: dict[WorkerId, int],
    incarnations: Mapping[WorkerId, list[str]] | None = None,
    first_seqs: Mapping[str, int] | None = None,
) -> tuple[dict[WorkerId, Final], set[WorkerId], Salvage]:
    """Finals for every worker whose own is missing or incomplete (unconverted rows),
    rebuilt from disk after converting what waits in _spill/. Returns (new finals by
    worker, the workers that died, what was done). `finals`: the finals that came (a restarted
    worker's: its last process's). `incarnations`: a restarted worker's records' names, one per
    process in order (--restart): each ended process's spill is converted, and the worker's final
    joins the records of them all. `first_seqs`: a restarted producer's processes' first seqs, by
    their names (run.json restarts[].first_seq)."""
    salvage = Salvage()
    rebuilt: dict[WorkerId, Final] = {}
    dead = {n for n in producers + consumers if n not in finals}
    for worker in producers + consumers:
        final = finals.get(worker)
        names = (incarnations or {}).get(worker, [str(worker)])
        restarted = len(names) > 1
        if (
            final is not None
            and not restarted
            and not final.unconverted_rows
            and not glob.glob(os.path.join(run_dir, "_spill", str(worker), "*"))
        ):
            continue
        t_drain = (
            drain_started_ns.get(worker, 0) if final is None else getattr(final, "t_drain_ns", 0)
        )
        starts = first_seqs or {}
        for name in names[:-1]:  # an ended process's rows: spilled as it held, maybe unconverted
            convert_spill(run_dir, worker, w, t0_ns, 0, salvage, name, starts.get(name, 0))
        convert_spill(
            run_dir, worker, w, t0_ns, t_drain, salvage, names[-1], starts.get(names[-1], 0)
        )
        if worker.role is Role.PRODUCER:
            sends = producer_final(run_dir, worker, w, names=names)
            # a live producer's own counters are complete; only its map lacked chunks (a restarted
            # one's are its last process's: the records' join, with its pushback and close)
            counters = (
                dataclasses.replace(
                    final.counters,
                    **{
                        name: getattr(sends.counters, name)
                        for name in ("attempted", "sent", "eagain", "timeout", "errors")
                    },
                    t_first_send_ns=sends.counters.t_first_send_ns,
                )
                if final is not None and restarted
                else None
            )
            rebuilt[worker] = (
                sends
                if final is None
                else dataclasses.replace(
                    final,
                    counters=counters or final.counters,
                    sent_ok_map=sends.sent_ok_map,
                    parts=sends.parts,
                    lateness=sends.lateness,
                    unconverted_rows=0,
                    rtt=sends.rtt if restarted else final.rtt,
                    bytes_sent=sends.bytes_sent if restarted else final.bytes_sent,
                )
            )
        else:
            recvs = consumer_final(run_dir, worker, w, t_drain, names)
            rebuilt[worker] = (
                recvs
                if final is None
                else dataclasses.replace(
                    final,
                    received=recvs.received,
                    streams=recvs.streams,
                    parts=recvs.parts,
                    latency_intended=recvs.latency_intended,
                    latency_sent=recvs.latency_sent,
                    unconverted_rows=0,
                    # a restarted worker's: from its first process's first message
                    t_first_recv_ns=recvs.t_first_recv_ns if restarted else final.t_first_recv_ns,
                    bytes_received=recvs.bytes_received if restarted else final.bytes_received,
                )
            )
    for worker in producers:
        if worker in dead:
            seen_maps = [
                s.seen_map
                for c in consumers
                for s in _streams(rebuilt.get(c, finals.get(c)))
                if s.stream == worker.index
            ]
            dead_final = rebuilt[worker]
            assert isinstance(dead_final, control.ProducerFinal)
            rebuilt[worker] = with_received(
                dead_final, seen_maps, _salvage_maps(run_dir, f"{worker}-with-received") + ".ok"
            )
    try:
        os.rmdir(os.path.join(run_dir, "_spill"))
    except OSError:
        pass
    return rebuilt, dead, salvage
