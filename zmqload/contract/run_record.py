"""run.json as a type, `RunRecord`, read and written through the one codec (contract/codec.py,
store/record_files.py), never through string keys, so each field is named, typed and checked once,
here. docs/RECORDS.md's table is generated from these types (docs/ARCHITECTURE.md, "Records")."""

from __future__ import annotations

import os
from typing import Optional

import msgspec

from .workload import Slos, Workload
from .codec import Record
from .curve import Security
from .fates import AMBIGUOUS_TAIL, TailPlacement
from .ids import Role
from .keyed import Keyed
from .patterns import Attach
from .records import SCHEMA_VERSION
from .states import DrainEnd, DrainMode, RunStatus

RUN_FILE = "run.json"
"""A run directory's record: the file that makes a directory a run."""


# -- what the run was made of ------------------------------------------------------------------
class PatternFacts(Record):
    fanout: bool = False
    """Every consumer receives every message (pub-sub, proxy)."""
    binder: Role = Role.CONSUMER
    """Which side binds in the pattern's own topology (`topology`: what this run bound and connected)."""


class SideEndpoints(Record):
    """How one of zmqload's sides reached the other."""

    attach: Attach = Attach.CONNECT
    """Whether this side's sockets bound or connected."""
    endpoints: list[str] = []
    """Bound: each socket's endpoint, in worker order, as libzmq reported it (tcp ports resolved);
    connected: what every socket of the side connected to."""
    given: bool = False
    """Named by the run's options (--producers-connect ... --consumers-bind); false: zmqload chose."""


class Topology(Record):
    """Who bound and who connected, to what, and what sat between the producers and the consumers
    that zmqload does not see (a device of the user's)."""

    producers: SideEndpoints = msgspec.field(default_factory=SideEndpoints)
    consumers: SideEndpoints = msgspec.field(default_factory=SideEndpoints)
    proxy: list[str] = []
    """Pattern proxy: the endpoints zmqload's own proxy bound, front (producers) and back (consumers)."""
    device_in_path: bool = False
    """Both sides connected to a device of the user's: what it queued counts as queued and what it lost
    as dropped between zmqload's sockets (the fates cannot place a loss inside it)."""
    device: str = ""
    """What the pattern expects there (e.g. an XSUB|XPUB proxy); "" without a device."""
    note: str = ""
    """With a device: one line saying what zmqload cannot see of it."""


class PlacedWorker(Record):
    """Where one worker ran as a Spark task (--master)."""

    worker: str = ""
    """Its name: "p0", "c1"."""
    task: int = 0
    """Its task's partition in the barrier stage."""
    host: str = ""
    """The executor's host name."""
    address: str = ""
    """The host's address on the route to the driver: where a binder of it binds (unless the
    options name an address) and the other workers reach it."""
    executor: str = ""
    """The executor's address as Spark gives it (host:port of its block manager)."""
    executor_id: str = ""
    """Spark's executor id ("0", "1"; "driver" where tasks run in the driver, local[N])."""
    pid: int = 0
    """The task's process on that host."""
    cpus: int = 0
    """CPUs of that host."""
    libzmq: str = ""
    """The libzmq zmqload's engine used there."""
    clock_offset_ns: int = 0
    """That host's CLOCK_MONOTONIC minus the driver's, measured before t0 (the fastest of many
    ping-pongs over ZeroMQ): the task's stamps were moved onto the driver's clock by it, so every
    time in the records is on one clock."""
    clock_uncertainty_ns: int = 0
    """How far the true offset may lie from clock_offset_ns: half the fastest round trip. A one-way
    latency between two hosts is good to the sum of theirs; on one host to 0."""


class Placement(Record):
    """The workers as one Spark barrier stage (run --master): where each ran."""

    master: str = ""
    workers: list[PlacedWorker] = []

    def latency_uncertainty_ns(self) -> int:
        """How far a one-way latency may be off through the clocks: the largest sum of a producer's
        and a consumer's clock uncertainties (each task's clock was aligned on its own)."""
        by_role: dict[str, list[int]] = {"p": [], "c": []}
        for placed in self.workers:
            by_role.get(placed.worker[:1], []).append(placed.clock_uncertainty_ns)
        if not by_role["p"] or not by_role["c"]:
            return 0
        return max(by_role["p"]) + max(by_role["c"])


class Libzmq(Record):
    """A libzmq file and what it is (--libzmq; `zmqload info` lists the ones it finds)."""

    choice: str = ""
    """What --libzmq said: pyzmq, system or the path given."""
    file: str = ""
    """The file the dynamic linker opened."""
    version: str = ""
    sha256: str = ""
    """Of the file's bytes: two runs ran the same library when these agree."""
    capabilities: list[str] = []
    """What zmq_has says it was built with, of ipc, pgm, tipc, norm, curve, gssapi, draft."""


class Versions(Record, Keyed):
    zmqload: str = ""
    libzmq: str = ""
    """The libzmq the run's engine ran (--libzmq): the one measured."""
    pyzmq: str = ""
    pyzmq_libzmq: str = ""
    """The libzmq bundled with pyzmq (control sockets, the plain-pyzmq checks)."""
    python: str = ""
    numpy: str = ""
    pyarrow: str = ""


class Host(Record):
    hostname: str = ""
    platform: str = ""
    machine: str = ""
    cpus: Optional[int] = None
    python_executable: str = ""


class ClockPair(Record):
    """A (realtime, monotonic) pair read together, so runs of several hosts can be aligned."""

    source: str = "CLOCK_MONOTONIC"
    realtime_ns: int = 0
    monotonic_ns: int = 0
    pair_uncertainty_ns: int = 0
    stamps: str = "clock_gettime"
    """How the loops stamp each message: "tsc" (anchored per slice) or "clock_gettime"."""


class Schedule(Record):
    """The open-loop schedule: t_intended = t0_ns + seq * 1e9 / rate_per_producer."""

    t0_ns: int = 0
    rate_per_producer: int = 0
    fanout: bool = False


class Salvaged(Record):
    """Workers whose figures were rebuilt from their records (runner/salvage.py)."""

    workers: list[str] = []
    died: list[str] = []
    """Workers that ended without their final (killed, failed): what they held is `unknown`."""
    converted_rows: dict[str, int] = {}
    removed_rows: dict[str, int] = {}
    reasons: list[str] = []


class Reset(Record):
    """One connection reset of --reset-at, as it was made (runner/resets.py)."""

    t_ns: int = 0
    """When the kernel had aborted the connections (`ss -K` returned): CLOCK_MONOTONIC ns, the
    records' clock; the mark of the `dropped_reset` rule (contract/fates.py reset_region)."""
    took_ns: int = 0
    """How long the abort took from the moment it was asked for (`t_ns - took_ns`: ss started; a few
    ms, more under load)."""
    at_s: float = 0.0
    """The same time in seconds after the schedule's start (t0_ns), as --reset-at counts."""
    connections: int = 0
    """tcp connections of the run's data sockets it aborted."""


class Restart(Record):
    """One restart of --restart, as it was made (runner/restarts.py)."""

    worker: str = ""
    """The worker restarted ("c0", "p0"); its new process's records are named with the generation
    ("c0.g1": parts `part-c0.g1-*`, samples, spill)."""
    generation: int = 0
    """The new process's generation: 1 for the first restart of that worker."""
    mode: str = ""
    """--restart-mode: how the old process ended (kill: SIGKILL; close: a clean close and exit;
    freeze: SIGSTOP, then SIGKILL as the new one started)."""
    at_s: float = 0.0
    """When the old process was ended (killed, frozen, or told to close: its exit may take a while),
    in seconds after the schedule's start (t0_ns); it had stopped recording just before."""
    t_ns: int = 0
    """The same time on the records' clock (CLOCK_MONOTONIC ns)."""
    gap_ms: int = 0
    """--restart-gap-ms: how long it was kept down (from its exit) before the new process started."""
    t_up_ns: int = 0
    """When the new process was up, as it said: bound, or connected (it knew the schedule from its
    start); 0: never."""
    first_seq: int = 0
    """A producer's: the seq its new process went on from (the first its ended one did not try);
    0 for a consumer."""
    down_ns: int = 0
    """t_up_ns - t_ns: how long the worker was away: a close's wait for the old process to exit,
    the gap, then the new process binding or connecting (it was started with the run and waited,
    zmqload imported; docs/DEPLOYS.md measures it)."""
    lost: int = 0
    """Messages lost at this restart (`dropped_restart` in its regions, counted in every view of
    every stream: the first restart of overlapping ones counts what they share)."""
    t_first_recv_ns: int = 0
    """Recovery: the first message the new process received (0: none)."""
    first_recv_after_up_ns: int = 0
    """t_first_recv_ns - t_up_ns: how long until the flow reached the new process (0: none came)."""
    backlog_drained_after_up_ns: int = 0
    """Recovery: from t_up_ns to the last arrival at the new process of a message sent before it was
    up (what the restart held back: a connecting PUSH queues for the peer it lost); 0: none was."""

    @property
    def recovery_ns(self) -> Optional[int]:
        """How long until the flow was back, from t_up_ns: what the restart held back drained, or,
        when it held nothing back, the first arrival; None: nothing arrived (--slo-recovery-ms
        judges it broken)."""
        if not self.t_first_recv_ns:
            return None
        return self.backlog_drained_after_up_ns or self.first_recv_after_up_ns


# -- how it ended ------------------------------------------------------------------------------
class Drain(Record, Keyed):
    mode: Optional[DrainMode] = None
    """--drain, or `none` with --close-order consumer-first; null: the run ended before its drain."""
    ended: Optional[DrainEnd] = None
    """complete: all arrived; idle: nothing for --drain-timeout-ms; limit: --drain-limit-s; none;
    null: the run ended before its drain."""
    t_start_ns: int = 0
    t_end_ns: int = 0
    completed: bool = False
    """The drain showed the queues empty (`DrainEnd.completed`) and the run completed."""
    tail_placement: Optional[TailPlacement] = None
    """Where a message missing after the last arrival was lost (contract/fates.py): the rule the
    report applies too."""
    tail_placement_why: str = ""
    dropped_tail_ambiguous: int = msgspec.field(default=0, name=AMBIGUOUS_TAIL)
    """The part of dropped_tail whose place the run cannot tell (ambiguous)."""
    device_in_path: bool = False
    """A device of the user's sat between the producers and the consumers (`topology`): a message
    dropped between zmqload's sockets may have been dropped inside it; the placement above is
    zmqload's own sockets' rule."""

    @property
    def seconds(self) -> float:
        return max(0, self.t_end_ns - self.t_start_ns) / 1e9


class WorkerEntry(Record, Keyed):
    """What every worker reports of itself and of its recording."""

    worker: int = 0
    """Its index among the workers of its role."""
    errors: int = 0
    interrupted: bool = False
    parts: int = 0
    """Parquet parts written."""
    max_rss_kb: int = 0
    unconverted_rows: int = 0
    """Rows its converter could not write (counted in the run's error)."""
    writer_cpu_s: float = 0.0
    """CPU seconds of its converter thread."""


class ProducerEntry(WorkerEntry):
    """One producer's counters, send times (ns) and close / term timings."""

    attempted: int = 0
    """Messages it tried to send (each got a seq)."""
    sent: int = 0
    """Accepted by libzmq."""
    eagain: int = 0
    timeout: int = 0
    last_errno: int = 0
    t_first_send_ns: int = 0
    t_last_send_ns: int = 0
    blocked_sends: int = 0
    """Sends that found the socket full (pushback)."""
    blocked_ns: int = 0
    """Time those sends waited for room."""
    unanswered: int = 0
    """req-rep: requests with no reply within --reply-timeout-ms (no replies/ record)."""
    close_ns: int = 0
    """How long zmq_close blocked."""
    bytes_sent: int = 0
    """Bytes of the messages libzmq accepted, every frame (the size rule, contract/sizes.py)."""
    term_ns: int = 0
    """How long zmq_ctx_term blocked."""


class ConsumerEntry(WorkerEntry):
    """One consumer's counters and receive times (ns)."""

    received: int = 0
    """Messages received, duplicates included."""
    warmups: int = 0
    foreign: int = 0
    """Messages that are not this run's: without zmqload's header (its check) or, counted in
    `implausible` too, with one this run cannot have sent (docs/RECORDS.md, "Which messages are
    zmqload's")."""
    implausible: int = 0
    """Of `foreign`: headers with a valid check naming a producer the run lacks, a send time outside
    it, or a seq beyond what its producers could have sent by then."""
    t_first_recv_ns: int = 0
    t_last_recv_ns: int = 0
    t_drain_ns: int = 0
    """When this consumer began draining (0: never)."""
    frame_mismatches: int = 0
    """Messages whose frame count was not --parts (counted with --parts > 1 and --role consumer)."""
    bytes_received: int = 0
    """Bytes of zmqload's messages received, duplicates included: each one's first frame as received
    (recvs' size) times --parts."""
    size_mismatches: int = 0
    """Messages received at another first-frame size than the size rule's for their seq (contract/sizes.py;
    counted where zmqload's producers ran: not in a consumer half)."""


class Fates(Record):
    """How many expected messages ended in each fate (contract/fates.py): they sum to `expected`."""

    delivered: int = 0
    drained: int = 0
    dropped_start: int = 0
    dropped_mid: int = 0
    dropped_tail: int = 0
    dropped_reset: int = 0
    """Lost across a connection reset (--reset-at); 0 in runs recorded before it."""
    dropped_restart: int = 0
    """Lost at a worker's restart (--restart); 0 in runs recorded before it."""
    stranded: int = 0
    unknown: int = 0


class FateCounts(Fates):
    """One consumer's fates of a fan-out stream."""

    dropped_tail_ambiguous: int = 0


class MessageCounts(Fates):
    """Counts of a stream or of the run: what was offered, accepted, expected and received."""

    attempted: int = 0
    sent: int = 0
    expected: int = 0
    received: int = 0
    unique_received: int = 0
    duplicates: int = 0
    reordered: int = 0
    lost: int = 0
    dropped: int = 0
    """dropped_start + dropped_mid + dropped_tail + dropped_reset + dropped_restart."""


class StreamEntry(MessageCounts):
    """One producer's stream: its counts, fates and the missing seq ranges."""

    stream: int = 0
    missing_ranges: dict[str, list[list[int]]] = {}
    """Per consumer index (fan-out) or "all": [first, last] seq ranges, at most 20."""
    dropped_tail_ambiguous: int = 0
    fates_by_consumer: Optional[dict[str, FateCounts]] = None
    """Fan-out only: the fates seen by each consumer."""
    holes: Optional[int] = None
    """--role consumer: seqs below the highest received (per consumer with fan-out) that never arrived,
    a lower bound of the loss (missing_ranges lists them); null in other runs, whose fates say it all."""
    beyond: Optional[int] = None
    """--role consumer: arrivals whose seq lay past 8,388,608 + 256 x the stream's arrivals so far
    (docs/RECORDS.md "Foreign messages"): received and recorded, but in no seq accounting (unique,
    duplicates, holes); null in other runs."""


class TopicConsumer(Record):
    """One consumer's account of one topic."""

    consumer: int = 0
    subscribed: bool = False
    expected: int = 0
    """The topic's sent messages if the consumer subscribed to it, else 0: not its to receive."""
    received: int = 0
    """Distinct messages of the topic it received."""
    lost: int = 0
    """expected - received."""


class TopicEntry(Record):
    """--topics: one topic, over every stream (contract/topics.py: which seq carries which topic)."""

    topic: str = ""
    sent: int = 0
    """Messages of the topic the producers' sockets accepted."""
    consumers: list[TopicConsumer] = []


class Counters(MessageCounts):
    """The run's message counts (RunResult.COUNTERS)."""

    eagain: int = 0
    timeout: int = 0
    errors: int = 0
    bytes_sent: int = 0
    """Bytes of the messages libzmq accepted, every frame: the producers' bytes_sent."""
    bytes_received: int = 0
    """Bytes of zmqload's messages received, every frame, duplicates included: the consumers' bytes_received."""


class QueuePeak(Record, omit_defaults=True):
    """The queue's deepest point (zmqload.measure.queue_depth): all None (written {}) with no samples."""

    messages: Optional[int] = None
    at_s: Optional[float] = None
    kernel_messages: Optional[int] = None
    libzmq_messages: Optional[int] = None
    kernel_bytes: Optional[int] = None
    kernel_peak_bytes: Optional[int] = None
    rss_kb_at_peak_producer: Optional[int] = None
    rss_kb_at_peak_consumer: Optional[int] = None
    rss_kb_at_peak_proxy: Optional[int] = None


class LatencySummary(Record):
    """Percentiles of one latency histogram, in ns (None: nothing received)."""

    p50: Optional[int] = None
    p90: Optional[int] = None
    p99: Optional[int] = None
    p99_9: Optional[int] = msgspec.field(default=None, name="p99.9")
    p99_99: Optional[int] = msgspec.field(default=None, name="p99.99")
    max: Optional[int] = None


class GeneratorVerdict(Record, Keyed):
    """Whether the producers kept their open-loop schedule (zmqload.measure.schedule_keeping)."""

    generator_limited: bool = False
    scheduled_rate: int = 0
    reached_rate: Optional[float] = None
    lag_ms: Optional[float] = None
    blocked_ms: Optional[float] = None
    lateness_p90_ms: Optional[float] = None
    scheduled_messages: Optional[int] = None
    t0_ns: int = 0


class ForeignSummary(Record):
    """--role consumer: the messages without zmqload's header (contract/wire.py), from foreign/."""

    messages: int = 0
    bytes: int = 0
    span_s: float = 0.0
    """From the first foreign arrival to the last."""
    rate_msgs: float = 0.0
    """(messages - 1) / span_s: arrivals over the intervals between them."""
    gap_ns: dict[str, Optional[int]] = {}
    """Time between arrivals: p50, p99, max."""


class ServiceSummary(Record):
    """A service of yours (req-rep with --role producer): its answers, from replies/ (zmqload.measure.service)."""

    requests: int = 0
    """Requests sent (accepted by the REQ socket)."""
    answered: int = 0
    """Requests answered: `echoed` + `by_order`; each has a replies/ record and a round trip."""
    unanswered: int = 0
    """Requests with no answer within --reply-timeout-ms (producers[].unanswered summed)."""
    echoed: int = 0
    """Answers that began with the request's 16-byte header (replies/ `echoed`)."""
    by_order: int = 0
    """Answers without it, matched by order: REQ has one request in flight per connection."""
    t_last_reply_ns: int = 0
    span_s: float = 0.0
    """From the first request sent to the last answer."""
    answer_rate: float = 0.0
    """Answers per second over `span_s`."""


class SizeFacts(Record):
    """The run's message sizes (contract/sizes.py): the message with seq s takes table entry s mod `entries`."""

    spec: str = ""
    """As given: "64", "64:1024", "@FILE", or "payload FILE" (--payload)."""
    kind: str = "fixed"
    """fixed, uniform, file or payload."""
    entries: int = 1
    min: int = 0
    """Bytes of the first frame, header included (a message is --parts times it)."""
    max: int = 0
    mean: float = 0.0
    """Over the table's entries."""
    seed: Optional[int] = None
    """uniform: the seed of numpy's PCG64 that drew the table (the same table every run)."""


class Summary(Record):
    """The run's figures (RunResult.FIGURES)."""

    queue_peak: QueuePeak = msgspec.field(default_factory=QueuePeak)
    elapsed_s: float = 0.0
    send_rate: float = 0.0
    throughput_msgs: float = 0.0
    throughput_mb: float = 0.0
    loss_ratio: float = 0.0
    latency_intended_ns: LatencySummary = msgspec.field(default_factory=LatencySummary)
    latency_sent_ns: LatencySummary = msgspec.field(default_factory=LatencySummary)
    round_trip_ns: Optional[LatencySummary] = None
    generator_limited: bool = False
    generator: GeneratorVerdict = msgspec.field(default_factory=GeneratorVerdict)
    foreign: Optional[ForeignSummary] = None
    """--role consumer: the foreign messages; null in other runs."""
    service: Optional[ServiceSummary] = None
    """A service of yours (req-rep with --role producer): its answers; null in other runs."""
    sizes: Optional[SizeFacts] = None
    """The message sizes; null in runs recorded before them and in --role consumer runs."""


class Halves(Record):
    """A run joined from its halves (runner/halves.py): their directories, and when each ended
    (a half made again makes the join again)."""

    producer: str = ""
    consumer: str = ""
    finished_at: list[str] = []


HALF_SUFFIX = "-half"


def run_dir_name(run_id: str, role: str = "both") -> str:
    """A run's directory name: run=<run_id>; a half's (--role producer / consumer) run=<run_id>.<role>-half,
    so that the two halves of one --run-name and the run joined from them lie side by side."""
    return f"run={run_id}" + ("" if role == "both" else f".{role}{HALF_SUFFIX}")


def half_of(dir_name: str) -> tuple[str, str] | None:
    """(run_id, role) of a half's directory name, or None for a whole run's."""
    if not dir_name.startswith("run=") or not dir_name.endswith(HALF_SUFFIX):
        return None
    run_id, _, role = dir_name[4 : -len(HALF_SUFFIX)].rpartition(".")
    return (run_id, role) if run_id and role in ("producer", "consumer") else None


# -- the record --------------------------------------------------------------------------------
class RunRecord(Record):
    """One run's run.json (docs/RECORDS.md). Written `running` at the start, again when the
    schedule is set, and once more at the end; fields of the end are None / empty before."""

    schema_version: int = SCHEMA_VERSION
    """The records' schema version (contract.records.SCHEMA_VERSION, the Parquet parts' too)."""
    run_id: str = ""
    """The run's name: --run-name, or time-pattern-transport-id; its directory is run=<run_id>."""
    status: RunStatus = RunStatus.RUNNING
    """How the run ended; `running` while it runs (and when its controller died)."""
    error: Optional[str] = None
    """Why a failed run failed (one line), else null."""
    workload: Workload = msgspec.field(default_factory=Workload)
    """The validated workload, every option with its default filled in."""
    pattern: PatternFacts = msgspec.field(default_factory=PatternFacts)
    """What the pattern implies for accounting."""
    security: Security = Security.NULL
    """libzmq's security mechanism on every data socket of the run: `curve` (--curve on; the keys
    are never recorded, the server's public key only in the user's --curve-server-key file) or
    `null` (none, libzmq's default; also in runs recorded before this field)."""
    slos: Optional[Slos] = None
    """The SLOs the run was judged by when it was made (`run --max-loss ...`, a capacity
    probe); None: made without any."""
    versions: Versions = msgspec.field(default_factory=Versions)
    """Versions of zmqload, both libzmqs, pyzmq, Python, numpy and pyarrow."""
    libzmq: Optional[Libzmq] = None
    """The libzmq the run ran (--libzmq); null in runs recorded before this field."""
    host: Host = msgspec.field(default_factory=Host)
    """The machine the run ran on."""
    clock: ClockPair = msgspec.field(default_factory=ClockPair)
    started_at: str = ""
    """ISO-8601 UTC."""
    finished_at: Optional[str] = None
    """ISO-8601 UTC; null while running."""
    warnings: list[str] = []
    """Said before the run started (the disk holds less than the run is expected to write)."""
    schedule: Optional[Schedule] = None
    """Written when the schedule is set, so an operator and `zmqload repair` find the run's parts."""
    controller_pid: Optional[int] = None
    worker_pids: dict[str, int] = {}
    """Worker name ("p0", "c1") -> process id (inproc workers are threads: none)."""
    cpu_placement: dict[str, int] = {}
    """Worker name -> CPU; {} when the scheduler placed them."""
    control_dir: Optional[str] = None
    """The run's private control and ipc socket files, removed at its end."""
    topology: Optional[Topology] = None
    """Which side bound and which connected, to what; whether a device of the user's sat between
    them. Written when the schedule is set and at the end (a run that failed before its start: as far as
    it got); null before, and in runs recorded before it."""
    placement: Optional[Placement] = None
    """With --master: where each worker ran (its stage's tasks); null for processes of this host
    (worker_pids)."""
    halves: Optional[Halves] = None
    """Present only in a run joined from a producer half and a consumer half (`report` joins them)."""
    resets: list[Reset] = []
    """--reset-at: each reset made, in order (one due after the producers finished is not made)."""
    restarts: list[Restart] = []
    """--restart: each restart made, in order (one due after the producers finished is not made)."""
    salvaged: Optional[Salvaged] = None
    """Present only when some worker's figures were rebuilt from its records."""
    drain: Optional[Drain] = None
    """How the drain went, and the tail rule; null until the run has ended."""
    producers: list[ProducerEntry] = []
    consumers: list[ConsumerEntry] = []
    counters: Optional[Counters] = None
    """Null until the run has ended."""
    streams: list[StreamEntry] = []
    topics: list[TopicEntry] = []
    """--topics: per topic, what was sent and each consumer's account of it; [] without topics."""
    summary: Optional[Summary] = None
    """Null until the run has ended."""

    # -- derived, each rule once -------------------------------------------------------------
    @property
    def fanout(self) -> bool:
        return self.schedule.fanout if self.schedule is not None else self.pattern.fanout

    @property
    def cut_short(self) -> bool:
        """Running (its controller died) or interrupted: figures cover what was recorded."""
        return self.status.cut_short

    @property
    def died(self) -> dict[Role, set[int]]:
        """The workers that died in the run (salvaged.died), by role."""
        from .ids import WorkerId

        out: dict[Role, set[int]] = {role: set() for role in Role}
        for worker in map(WorkerId.parse, self.salvaged.died if self.salvaged else ()):
            out[worker.role].add(worker.index)
        return out

    @property
    def t0_ns(self) -> int:
        return self.schedule.t0_ns if self.schedule is not None else 0

    @property
    def mean_size(self) -> float:
        """A message's mean first-frame bytes: summary.sizes' mean (runs recorded before it: a fixed --size)."""
        facts = self.summary.sizes if self.summary is not None else None
        size = self.workload.size
        return facts.mean if facts is not None else float(size if isinstance(size, int) else 0)


# -- where it is (read and written by store/record_files.py) -----------------------------------
def run_path(run_dir: str) -> str:
    return os.path.join(run_dir, RUN_FILE)
