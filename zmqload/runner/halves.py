"""Split halves (`--role producer` and `--role consumer` of one --run-name, one host) joined into
the run `run=NAME`: the consumer half's records rescheduled with the producer half's t0 and rate,
every figure rebuilt from the records and reconciled as any run's."""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
from typing import Sequence

import msgspec

import numpy as np
import pyarrow.parquet as pq

from ..contract import control, ids
from ..contract import run_record as rr
from ..store import record_files
from ..store.parquet_parts import part_files
from ..contract.records import RECVS
from ..contract.states import RunStatus
from ..contract.workload import Workload
from ..errors import ConfigError, RecordError
from .collect import build_result
from .run_file import finish_records
from .parquet_writer import intended_times
from .salvage import consumer_final, producer_final
from .state import RunState

LINKED = ("sends", "samples")  # parts a joined run takes as they are (hard links where it can)
NOT_IN_SENDS = ("last_errno", "interrupted", "blocked_sends", "blocked_ns", "unanswered")
"""A producer's counters its sends/ records do not hold (the rest are rebuilt from them)."""


def join_found(paths: Sequence[str]) -> list[str]:
    """`paths` with every pair of halves among them (run directories, or parents of run=*/) joined:
    a half given by itself is replaced by the joined run; a parent's joined run is found in it."""
    out: list[str] = []
    for path in paths:
        if record_files.is_run_dir(path):
            half = _half_of(path)
            if half is None:
                out.append(path)
                continue
            producer, consumer = _pair(os.path.dirname(os.path.abspath(path)), half[0])
            out.append(join(producer, consumer) if producer and consumer else path)
            continue
        for name in _half_names(path):
            producer, consumer = _pair(path, name)
            if producer and consumer:
                join(producer, consumer)
        out.append(path)
    return list(dict.fromkeys(out))


def _half_of(run_dir: str) -> tuple[str, str] | None:
    """(run name, role) of a half's directory, or None for a whole run."""
    return rr.half_of(os.path.basename(os.path.normpath(run_dir)))


def _half_names(parent: str) -> set[str]:
    return {
        half[0]
        for d in glob.glob(os.path.join(parent, "run=*"))
        if (half := _half_of(d)) is not None
    }


def _pair(parent: str, name: str) -> tuple[str | None, str | None]:
    dirs = [os.path.join(parent, rr.run_dir_name(name, role)) for role in ("producer", "consumer")]
    producer, consumer = (d if record_files.is_run_dir(d) else None for d in dirs)
    return producer, consumer


def join(producer_dir: str, consumer_dir: str) -> str:
    """The joined run of two halves (made again when a half is newer than it). Returns its directory."""
    p, c = _read(producer_dir, "producer"), _read(consumer_dir, "consumer")
    parent = os.path.dirname(os.path.abspath(producer_dir))
    joined_dir = os.path.join(parent, rr.run_dir_name(p.run_id))
    halves = rr.Halves(
        producer=os.path.basename(producer_dir),
        consumer=os.path.basename(consumer_dir),
        finished_at=[p.finished_at or "", c.finished_at or ""],
    )
    if record_files.is_run_dir(joined_dir):
        try:
            existing = record_files.read_run(joined_dir)
        except RecordError:
            existing = None
        if existing is None or existing.halves is None:
            raise ConfigError(
                "PATH",
                f"{joined_dir} exists and is not the join of {halves.producer} and "
                f"{halves.consumer}; accepted: halves whose run name no other run has",
            )
        if existing.halves == halves:
            return joined_dir
    if p.host.hostname != c.host.hostname:
        raise ConfigError(
            "PATH",
            f"the halves of run {p.run_id} ran on {p.host.hostname} and {c.host.hostname}: "
            "their clocks are not aligned; accepted: halves made on one host",
        )
    w = _joined_workload(p.workload, c.workload)
    shutil.rmtree(joined_dir, ignore_errors=True)
    os.makedirs(joined_dir)
    for kind in LINKED:
        for half in (producer_dir, consumer_dir):
            for part in part_files(half, kind):
                _link(part, os.path.join(joined_dir, kind, os.path.basename(part)))
    for part in part_files(consumer_dir, "recvs"):
        _rescheduled(
            part, os.path.join(joined_dir, "recvs", os.path.basename(part)), p.t0_ns, w.rate
        )
    state = RunState(ids.producers(w.producers), ids.consumers(w.consumers))
    state.t0_ns = p.t0_ns
    # each half's restarts (--restart): a restarted worker's processes' records are joined
    state.restarts = sorted([*p.restarts, *c.restarts], key=lambda r: r.t_ns)
    for restart in state.restarts:
        restarted = ids.WorkerId.parse(restart.worker)
        state.incarnations.setdefault(restarted, [str(restarted)]).append(
            ids.incarnation(restarted, restart.generation)
        )
    for entry in p.producers:
        worker = ids.WorkerId(ids.Role.PRODUCER, entry.worker)
        state.final[worker] = _producer(joined_dir, worker, w, entry, state.names(worker))
    for c_entry in c.consumers:
        worker = ids.WorkerId(ids.Role.CONSUMER, c_entry.worker)
        state.final[worker] = _consumer(joined_dir, worker, w, c_entry, state.names(worker))
    state.drain = (
        msgspec.structs.replace(c.drain) if c.drain is not None else None
    )  # the join's own
    statuses = (p.status, c.status)
    status = next(
        (s for s in (RunStatus.FAILED, RunStatus.INTERRUPTED) if s in statuses), RunStatus.COMPLETE
    )
    record = msgspec.structs.replace(
        p,
        workload=w,
        halves=halves,
        status=RunStatus.RUNNING,
        topology=_topology(p.topology, c.topology),
        worker_pids={**p.worker_pids, **c.worker_pids},
    )
    result = build_result(state, w, p.run_id, joined_dir, status.value, p.versions)
    errors = [
        f"{role} half: {r.error}" for role, r in (("producer", p), ("consumer", c)) if r.error
    ]
    finish_records(joined_dir, record, state, w, result, "; ".join(errors) or None)
    return joined_dir


def _read(run_dir: str, role: str) -> rr.RunRecord:
    try:
        record = record_files.read_run(run_dir)
    except RecordError as exc:
        raise ConfigError(
            "PATH", f"cannot read {exc}; accepted: the halves' run directories"
        ) from None
    if record.workload.role != role:
        raise ConfigError(
            "PATH",
            f"{run_dir} is not a {role} half (its --role is {record.workload.role}); accepted: "
            f"the run directory of a --role {role} run with the same --run-name",
        )
    if record.status is RunStatus.RUNNING:
        raise ConfigError(
            "PATH",
            f"{run_dir} is still running; accepted: halves that have ended "
            "(`zmqload repair` finishes one whose controller died)",
        )
    return record


def _joined_workload(producer: Workload, consumer: Workload) -> Workload:
    """One run's workload: the producer half's options, the consumer half's for its side."""
    values = producer.to_dict()
    theirs = consumer.to_dict()
    values.update(
        {name: theirs[name] for name in Workload.CONSUMER_OPTIONS if name != "join_delay_ms"}
    )
    values.update(
        role="both",
        consumers_bind=theirs["consumers_bind"],
        consumers_connect=theirs["consumers_connect"],
        conflate=_conflate(producer.conflate, consumer.conflate),
    )
    try:
        return Workload.from_dict(values)
    except ConfigError as exc:
        raise ConfigError(
            "PATH", f"the halves of run {producer.run_name} cannot be one run: {exc}"
        ) from None


def _conflate(producers: str, consumers: str) -> str:
    sides = {
        s for s, on in (("producers", producers != "off"), ("consumers", consumers != "off")) if on
    }
    return "both" if len(sides) == 2 else sides.pop() if sides else "off"


def _link(source: str, target: str) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another file system, or one without hard links
        shutil.copyfile(source, target)


def _rescheduled(source: str, target: str, t0_ns: int, rate: int) -> None:
    """A consumer half's recvs part with the producer half's intended send times."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    table = pq.read_table(source)
    seq, t_sent = table.column("seq").to_numpy(), table.column("t_sent_ns").to_numpy()
    intended = intended_times(t0_ns, seq, rate, t_sent)
    table = table.set_column(
        table.schema.get_field_index("t_intended_ns"),
        "t_intended_ns",
        [np.asarray(intended, np.int64)],
    )
    pq.write_table(table.cast(RECVS.arrow), target)


def _producer(
    run_dir: str, worker: ids.WorkerId, w: Workload, entry: rr.ProducerEntry, names: list[str]
) -> control.ProducerFinal:
    """From its sends records (of each of its processes: `names`), with what only the half's
    run.json holds (pushback, close timings)."""
    final = producer_final(run_dir, worker, w, entry.close_ns, names)
    counters = dataclasses.replace(
        final.counters, **{name: getattr(entry, name) for name in NOT_IN_SENDS}
    )
    return dataclasses.replace(
        final,
        counters=counters,
        term_ns=entry.term_ns,
        max_rss_kb=entry.max_rss_kb,
        writer_cpu_s=entry.writer_cpu_s,
    )


def _consumer(
    run_dir: str, worker: ids.WorkerId, w: Workload, entry: rr.ConsumerEntry, names: list[str]
) -> control.ConsumerFinal:
    final = consumer_final(run_dir, worker, w, entry.t_drain_ns, names)
    return dataclasses.replace(
        final,
        foreign=entry.foreign,
        errors=entry.errors,
        interrupted=entry.interrupted,
        max_rss_kb=entry.max_rss_kb,
        writer_cpu_s=entry.writer_cpu_s,
        frame_mismatches=entry.frame_mismatches,
    )


def _topology(producer: rr.Topology | None, consumer: rr.Topology | None) -> rr.Topology | None:
    if producer is None or consumer is None:
        return producer or consumer
    return msgspec.structs.replace(producer, consumers=consumer.consumers)
