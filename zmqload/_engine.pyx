# cython: language_level=3, cdivision=True
# boundscheck, wraparound and initializedcheck come from setup.py: off in the release build,
# on in the checked ZMQLOAD_DEBUG=1 build (a directive here would override both).
"""The compiled core: thin libzmq sockets and the per-message send/receive loops.

Everything per message happens here with the GIL released: no Python object is touched
and nothing is allocated. The loops run in *slices*: they return to Python when the
caller's record chunk is full or the slice's deadline passes, so the Python side can hand
full chunks to the Parquet writer, sample counters, show progress and react to Ctrl-C or a
stop command without the hot loop ever looking at Python state.
"""

from libc.stdint cimport int8_t, int32_t, int64_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

from zmqload._libzmq cimport *
from zmqload.errors import engine_error as _engine_error

# --- constants exposed to Python -------------------------------------------------------
# The C statement of the contract (csrc/zl_wire.h), exported so that tests/test_contract.py
# can check zmqload/contract/wire.py against it.

HEADER_SIZE = ZL_HEADER_SIZE
SEQ_BITS = ZL_SEQ_BITS
SEQ_MASK = ZL_SEQ_MASK
WARMUP_STREAM = ZL_WARMUP_STREAM
MAX_STREAMS = ZL_MAX_STREAMS
MAX_TOPIC_WIDTH = ZL_MAX_TOPIC_WIDTH
WIRE_SEQ_BITS = ZL_WIRE_SEQ_BITS
FOREIGN_STREAM = ZL_FOREIGN_STREAM
LOOKBACK_NS = ZL_LOOKBACK_NS
FUTURE_NS = ZL_FUTURE_NS
MAX_RATE = ZL_MAX_RATE
STATUS_OK, STATUS_EAGAIN, STATUS_TIMEOUT, STATUS_ERROR = ZL_ST_OK, ZL_ST_EAGAIN, ZL_ST_TIMEOUT, ZL_ST_ERROR
SEND_MODES = {"block": ZL_MODE_BLOCK, "dontwait": ZL_MODE_DONTWAIT, "timeout": ZL_MODE_TIMEOUT}
SPIN_BELOW_NS = ZL_SPIN_BELOW_NS    # a paced Sender spins through waits this short (0: sleeps only)
SLICE_SIGNAL = zl_slice_signal_number()    # ends a Receiver's slice (csrc/zl_slice_timer.h)
if SLICE_SIGNAL < 0:
    SLICE_SIGNAL = None

SOCKET_TYPES = {
    "PAIR": ZMQ_PAIR, "PUB": ZMQ_PUB, "SUB": ZMQ_SUB, "REQ": ZMQ_REQ, "REP": ZMQ_REP,
    "DEALER": ZMQ_DEALER, "ROUTER": ZMQ_ROUTER, "PULL": ZMQ_PULL, "PUSH": ZMQ_PUSH,
    "XPUB": ZMQ_XPUB, "XSUB": ZMQ_XSUB,
}
SOCKET_OPTION_IDS = {
    "SNDHWM": ZMQ_SNDHWM, "RCVHWM": ZMQ_RCVHWM, "LINGER": ZMQ_LINGER,
    "SNDBUF": ZMQ_SNDBUF, "RCVBUF": ZMQ_RCVBUF, "IMMEDIATE": ZMQ_IMMEDIATE,
    "SNDTIMEO": ZMQ_SNDTIMEO, "RCVTIMEO": ZMQ_RCVTIMEO,
    "REQ_RELAXED": ZMQ_REQ_RELAXED, "REQ_CORRELATE": ZMQ_REQ_CORRELATE,
    "CONFLATE": ZMQ_CONFLATE, "EVENTS": ZMQ_EVENTS,
    "CURVE_SERVER": ZMQ_CURVE_SERVER, "MECHANISM": ZMQ_MECHANISM,
    "ROUTER_MANDATORY": ZMQ_ROUTER_MANDATORY, "ROUTER_HANDOVER": ZMQ_ROUTER_HANDOVER,
    "XPUB_NODROP": ZMQ_XPUB_NODROP, "HEARTBEAT_IVL": ZMQ_HEARTBEAT_IVL,
    "HEARTBEAT_TTL": ZMQ_HEARTBEAT_TTL, "HEARTBEAT_TIMEOUT": ZMQ_HEARTBEAT_TIMEOUT,
}
HANDSHAKE_EVENTS = {    # zmq_socket_monitor's events of a security handshake, by the name a line shows
    "handshake failed": ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL, "protocol error": ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL,
    "authentication refused": ZMQ_EVENT_HANDSHAKE_FAILED_AUTH, "succeeded": ZMQ_EVENT_HANDSHAKE_SUCCEEDED,
}
LIBZMQ_NUMBERS = {     # the rest of csrc/zl_libzmq.h's ABI numbers, for tests/test_libzmq.py to check
    "ROUTING_ID": ZMQ_ROUTING_ID, "SUBSCRIBE": ZMQ_SUBSCRIBE, "RCVMORE": ZMQ_RCVMORE, "FD": ZMQ_FD,
    "LAST_ENDPOINT": ZMQ_LAST_ENDPOINT, "IO_THREADS": ZMQ_IO_THREADS, "MAX_SOCKETS": ZMQ_MAX_SOCKETS,
    "DONTWAIT": ZMQ_DONTWAIT, "SNDMORE": ZMQ_SNDMORE, "POLLIN": ZMQ_POLLIN, "POLLOUT": ZMQ_POLLOUT,
    "ETERM": ETERM, "EFSM": EFSM, "EHOSTUNREACH": EHOSTUNREACH, "EAGAIN": EAGAIN, "EINTR": EINTR,
}
MSG_T_SIZE = sizeof(zmq_msg_t)
BYTES_OPTION_IDS = {    # set with Socket.set_option_bytes: keys as 40 z85 characters (or 32 raw bytes)
    "CURVE_PUBLICKEY": ZMQ_CURVE_PUBLICKEY, "CURVE_SECRETKEY": ZMQ_CURVE_SECRETKEY,
    "CURVE_SERVERKEY": ZMQ_CURVE_SERVERKEY,
}


cdef inline object _error(str what):
    cdef int err = zmq_errno()
    return _engine_error(err, what, zmq_strerror(err).decode())


def _clock_is_ticks():
    """The loops stamp through the TSC only where the kernel's CLOCK_MONOTONIC is the TSC
    (csrc/zl_clock.h): then the kernel has found it synchronised across CPUs."""
    if not ZL_HAVE_TICKS:
        return False
    try:
        with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
            return f.read().strip() == "tsc"
    except OSError:
        return False


cdef zl_stamp_clock _IMPORT_CLOCK     # every loop's clock starts from this first anchor
memset(&_IMPORT_CLOCK, 0, sizeof(_IMPORT_CLOCK))
_IMPORT_CLOCK.enabled = _clock_is_ticks()
zl_stamp_anchor(&_IMPORT_CLOCK)
TICK_STAMPS = bool(_IMPORT_CLOCK.enabled)


def stamp_brackets(int n, long long gap_ns):
    """(clock, stamp, clock, rate, error bound) read back to back, one per `gap_ns` of sleep,
    each after a new anchor as a loop's slice starts: the loops' stamps against the clock
    (tests)."""
    cdef zl_stamp_clock clock = _IMPORT_CLOCK
    out = []
    cdef long long before, stamp, after, error
    for _ in range(n):
        with nogil:
            zl_stamp_anchor(&clock)
            zl_wait_until(zl_now_ns() + gap_ns, ZL_SPIN_BELOW_NS)
            before = zl_now_ns()
            stamp = zl_stamp(&clock)
            error = zl_stamp_error_ns(&clock, zl_ticks())
            after = zl_now_ns()
        out.append((before, stamp, after, clock.ns_per_tick, error))
    return out


# --- which libzmq (csrc/zl_libzmq.h) ---------------------------------------------------

def load_libzmq(str path):
    """Opens the libzmq at `path` (a file, or a name the dynamic linker resolves) for every call of
    this process's engine. Once per process: ValueError, one line saying why, for a file that is not
    a libzmq 4.x or when one is loaded already (libzmq_file says which)."""
    cdef char err[512]
    if zl_libzmq_load(path.encode(), err, sizeof(err)) != 0:
        raise ValueError(err.decode(errors="replace"))


def libzmq_file():
    """The file of the libzmq this process's engine runs, None before one is loaded."""
    cdef const char *name = zl_libzmq_file()
    return None if name == NULL else name.decode(errors="replace")


def probe_libzmq(str path, capabilities):
    """(version, file, {capability: zmq_has}) of the libzmq at `path`, without loading it for the
    engine; ValueError, one line, for a file that is not a libzmq 4.x."""
    cdef int version[3]
    cdef char file[4096]
    cdef char err[512]
    encoded = [c.encode() for c in capabilities]
    cdef int n = len(encoded)
    cdef const char **names = <const char **>malloc(max(n, 1) * sizeof(char *))
    cdef int *answers = <int *>calloc(max(n, 1), sizeof(int))
    try:
        for i in range(n):
            names[i] = encoded[i]
        if zl_libzmq_probe(path.encode(), version, names, answers, n, file, sizeof(file), err, sizeof(err)) != 0:
            raise ValueError(err.decode(errors="replace"))
        return ((version[0], version[1], version[2]), file.decode(errors="replace"),
                {c: bool(answers[i]) for i, c in enumerate(capabilities)})
    finally:
        free(names)
        free(answers)


cdef inline int _need_libzmq() except -1:
    # The first use in a process that chose none (a script, a test) runs pyzmq's libzmq.
    if not zl_libzmq_loaded():
        from zmqload.libzmq import load_default
        load_default()
    return 0


def libzmq_version():
    """Version of the libzmq the engine runs, as (major, minor, patch)."""
    cdef int major, minor, patch
    _need_libzmq()
    zmq_version(&major, &minor, &patch)
    return (major, minor, patch)


def has(str capability):
    """zmq_has: whether this libzmq was built with a capability ("curve": with libsodium)."""
    _need_libzmq()
    return zmq_has(capability.encode()) == 1


def curve_keypair():
    """A new CURVE key pair (public, secret), each 40 z85 characters; EngineError (ENOTSUP)
    when this libzmq has no CURVE."""
    cdef char public[41]
    cdef char secret[41]
    _need_libzmq()
    if zmq_curve_keypair(public, secret) != 0:
        raise _error("zmq_curve_keypair")
    return public[:40], secret[:40]


def now_ns():
    """CLOCK_MONOTONIC in nanoseconds, moved onto the reference host's clock by the offset
    set (set_clock_offset): the clock of every timestamp in the records."""
    return zl_now_ns()


def set_clock_offset(long long offset_ns):
    """This host's CLOCK_MONOTONIC minus the reference host's (runner/clocks.py): from here
    on every stamp of this process is on the reference clock. Once per process, before its
    loops: the loops' first anchor is taken again, so no tick rate spans the change."""
    global zl_clock_offset_ns
    zl_clock_offset_ns = offset_ns
    cdef int enabled = _IMPORT_CLOCK.enabled
    memset(&_IMPORT_CLOCK, 0, sizeof(_IMPORT_CLOCK))
    _IMPORT_CLOCK.enabled = enabled
    zl_stamp_anchor(&_IMPORT_CLOCK)


def clock_offset_ns():
    """The offset set_clock_offset set (0 unless set)."""
    return zl_clock_offset_ns


def intended_ns(long long t0_ns, long long seq, long long rate):
    """Scheduled send time of message `seq` (the formula both ends and Spark share)."""
    if rate <= 0:
        raise ValueError("rate must be > 0 for a schedule")
    return zl_intended_ns(t0_ns, seq, rate)


# --- context and socket -------------------------------------------------------------

cdef class Context:
    """A libzmq context. `term()` reports how long termination blocked (linger at work)."""
    cdef void *handle

    def __cinit__(self, int io_threads=1):
        _need_libzmq()
        self.handle = zmq_ctx_new()
        if self.handle == NULL:
            raise _error("zmq_ctx_new")
        if zmq_ctx_set(self.handle, ZMQ_IO_THREADS, io_threads) != 0:
            raise _error("zmq_ctx_set(ZMQ_IO_THREADS)")

    @property
    def closed(self):
        return self.handle == NULL

    def term(self):
        """Terminate the context; returns nanoseconds spent blocked in zmq_ctx_term."""
        cdef long long start, end
        cdef int rc
        if self.handle == NULL:
            return 0
        start = zl_now_ns()
        with nogil:
            rc = zmq_ctx_term(self.handle)
            while rc != 0 and zmq_errno() == EINTR:
                rc = zmq_ctx_term(self.handle)
        end = zl_now_ns()
        self.handle = NULL
        return end - start

    def __dealloc__(self):
        # Deliberately no zmq_ctx_term here: it can block forever on unsent messages.
        pass


cdef class Socket:
    """A libzmq socket with just what the loops and the control plane need."""
    cdef void *handle
    cdef readonly Context context
    cdef readonly int socket_type

    def __cinit__(self, Context context not None, int socket_type):
        if context.handle == NULL:
            raise ValueError("context is terminated")
        self.context = context
        self.socket_type = socket_type
        self.handle = zmq_socket(context.handle, socket_type)
        if self.handle == NULL:
            raise _error("zmq_socket")

    cdef inline void *_live(self) except NULL:
        if self.handle == NULL:
            raise ValueError("socket is closed")
        return self.handle

    def set_option(self, int option, int value):
        if zmq_setsockopt(self._live(), option, &value, sizeof(int)) != 0:
            raise _error(f"zmq_setsockopt({option}, {value})")

    def set_option_bytes(self, int option, bytes value not None):
        if zmq_setsockopt(self._live(), option, <const char *>value, len(value)) != 0:
            raise _error(f"zmq_setsockopt({option}, {len(value)} bytes)")

    def get_option(self, int option):
        cdef int value = 0
        cdef size_t size = sizeof(int)
        if zmq_getsockopt(self._live(), option, &value, &size) != 0:
            raise _error(f"zmq_getsockopt({option})")
        return value

    def subscribe(self, bytes prefix=b""):
        if zmq_setsockopt(self._live(), ZMQ_SUBSCRIBE, <const char *>prefix, len(prefix)) != 0:
            raise _error("zmq_setsockopt(ZMQ_SUBSCRIBE)")

    def set_routing_id(self, bytes routing_id):
        if zmq_setsockopt(self._live(), ZMQ_ROUTING_ID, <const char *>routing_id, len(routing_id)) != 0:
            raise _error("zmq_setsockopt(ZMQ_ROUTING_ID)")

    def bind(self, str endpoint):
        """Bind and return the resolved endpoint (a tcp port of 0 or * becomes the real one)."""
        cdef bytes ep = endpoint.encode()
        if zmq_bind(self._live(), ep) != 0:
            raise _error(f"bind {endpoint}")
        return self.last_endpoint()

    def connect(self, str endpoint):
        cdef bytes ep = endpoint.encode()
        if zmq_connect(self._live(), ep) != 0:
            raise _error(f"connect {endpoint}")

    def monitor(self, endpoint, int events=0):
        """zmq_socket_monitor: `events` of this socket to a PAIR libzmq binds at the inproc
        `endpoint` (two frames each: event and value, the peer's endpoint); None stops it."""
        cdef bytes ep
        if endpoint is None:
            rc = zmq_socket_monitor(self._live(), NULL, 0)
        else:
            ep = endpoint.encode()
            rc = zmq_socket_monitor(self._live(), ep, events)
        if rc != 0:
            raise _error(f"zmq_socket_monitor {endpoint}")

    def last_endpoint(self):
        cdef char buf[1024]
        cdef size_t size = sizeof(buf)
        if zmq_getsockopt(self._live(), ZMQ_LAST_ENDPOINT, buf, &size) != 0:
            raise _error("zmq_getsockopt(ZMQ_LAST_ENDPOINT)")
        return buf[:size - 1].decode() if size > 0 else ""

    def close(self, linger_ms=None):
        """Close (optionally setting LINGER first); returns nanoseconds zmq_close blocked."""
        cdef long long start, end
        cdef int linger
        if self.handle == NULL:
            return 0
        if linger_ms is not None:
            linger = int(linger_ms)
            # A terminating context refuses options (ETERM), and still needs the socket closed.
            if zmq_setsockopt(self.handle, ZMQ_LINGER, &linger, sizeof(int)) != 0 and zmq_errno() != ETERM:
                raise _error(f"zmq_setsockopt(ZMQ_LINGER, {linger})")
        start = zl_now_ns()
        with nogil:
            zmq_close(self.handle)
        end = zl_now_ns()
        self.handle = NULL
        return end - start

    def send_bytes(self, const unsigned char[::1] data, bint dontwait=False, bint more=False):
        """Send one frame from Python (control-plane use, not the hot path).
        Returns False on EAGAIN."""
        cdef int flags = (ZMQ_DONTWAIT if dontwait else 0) | (ZMQ_SNDMORE if more else 0)
        cdef int rc
        cdef void *sock = self._live()
        cdef const unsigned char *ptr = &data[0] if data.shape[0] else NULL
        cdef size_t n = data.shape[0]
        while True:
            with nogil:
                rc = zmq_send(sock, ptr, n, flags)
            if rc >= 0:
                return True
            if zmq_errno() == EAGAIN:
                return False
            if zmq_errno() != EINTR:
                raise _error("zmq_send")

    def poll_in(self, long timeout_ms):
        """True if a message can be received within timeout_ms."""
        cdef zmq_pollitem_t item
        cdef int rc
        item.socket = self._live()
        item.fd = 0
        item.events = ZMQ_POLLIN
        item.revents = 0
        with nogil:
            rc = zmq_poll(&item, 1, timeout_ms)
        if rc < 0:
            if zmq_errno() == EINTR:
                return False
            raise _error("zmq_poll")
        return (item.revents & ZMQ_POLLIN) != 0

    def recv_bytes(self, long timeout_ms=-1):
        """Receive one frame from Python, or None if nothing came within timeout_ms."""
        cdef zmq_msg_t msg
        cdef int rc
        cdef void *sock = self._live()
        if timeout_ms >= 0 and not self.poll_in(timeout_ms):
            return None
        zmq_msg_init(&msg)
        try:
            while True:
                with nogil:
                    rc = zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT if timeout_ms >= 0 else 0)
                if rc >= 0:
                    return (<char *>zmq_msg_data(&msg))[:zmq_msg_size(&msg)]
                if zmq_errno() == EAGAIN:
                    return None
                if zmq_errno() != EINTR:
                    raise _error("zmq_msg_recv")
        finally:
            zmq_msg_close(&msg)


# --- the hot loops ----------------------------------------------------------------------

cdef class Sender:
    """One producer's open-loop send schedule, run slice by slice.

    Each call to run_slice() fills rows of the caller's chunk (one row per send attempt:
    t_sent_ns and status; seq is the chunk's first seq + row) and returns the row count.
    """
    cdef void *sock
    cdef Socket socket
    cdef char *buf
    cdef char *pad                      # frames 2..parts: zeros
    cdef char *topics                   # --topics: the topic of seq is slot seq % topic_slots
    cdef long long topic_slots
    cdef int topic_width                # bytes of topic before the header (0: no topics)
    cdef int size
    # --size A:B, @FILE, --payload (contract/sizes.py): seq s sends entry s mod table_n, table_sizes
    # bytes from block + table_offsets (a payload's header room and record; else zeros at 0)
    cdef Py_ssize_t table_n
    cdef int *table_sizes
    cdef long long *table_offsets
    cdef char *block
    cdef int parts
    cdef int mode
    cdef uint64_t stream
    cdef uint64_t key                   # the run's header key (zl_wire.h zl_check)
    cdef long long rate, t0_ns, end_ns, timeout_ns, blocked_since, spin_below_ns
    cdef readonly long long next_seq, count
    cdef readonly long long sent, eagain, timeouts, errors
    cdef readonly long long t_first_send_ns, t_last_send_ns
    # Pushback: sends that found the socket full (block / timeout modes) and the time they
    # waited. Read on the blocked path only, so a send that does not block costs nothing more.
    cdef readonly long long blocked_sends, blocked_ns
    # Round trips without a reply within reply_timeout_ns (0: wait forever): recorded with t_reply 0,
    # and the next request sent (the REQ socket must have REQ_RELAXED and REQ_CORRELATE set).
    cdef readonly long long unanswered
    cdef long long reply_timeout_ns
    cdef readonly int last_errno
    cdef readonly bint finished
    cdef bint round_trip, awaiting_reply
    cdef long long pending_t_sent
    cdef const char *pending_header     # the request awaiting its reply: its header (buf or a table entry)
    cdef char reply[64]
    cdef zl_stamp_clock clock

    def __cinit__(self, Socket socket not None, int stream, int size, long long count,
                  long long rate, long long t0_ns, long long end_ns=0,
                  str mode="block", long long timeout_ns=0, bint round_trip=False,
                  long long spin_below_ns=ZL_SPIN_BELOW_NS, long long reply_timeout_ns=0, int parts=1,
                  bytes topics=b"", int topic_width=0,
                  const int32_t[::1] sizes=None, const unsigned char[::1] body=None,
                  unsigned long long key=0, long long first_seq=0):
        _check_topic_width(topic_width)
        if topic_width and (len(topics) == 0 or len(topics) % topic_width):
            raise ValueError("topics must be whole topics of topic_width bytes")
        if size < ZL_HEADER_SIZE + topic_width:
            raise ValueError(f"size must be >= {ZL_HEADER_SIZE + topic_width} (topic and header)")
        if topic_width and body is not None:
            raise ValueError("a payload's records follow the header: no topic before it")
        if parts < 1 or (parts > 1 and round_trip):
            raise ValueError("parts must be >= 1, and 1 with a round trip")
        if mode not in SEND_MODES:
            raise ValueError(f"unknown send mode {mode!r}")
        if spin_below_ns < 0:
            raise ValueError("spin_below_ns must be >= 0")
        if reply_timeout_ns < 0:
            raise ValueError("reply_timeout_ns must be >= 0")
        if first_seq < 0:
            raise ValueError("first_seq must be >= 0")
        self.socket = socket
        self.sock = socket._live()
        if sizes is not None and sizes.shape[0] > 0:
            self._table(sizes, body)
            size = max(size, max(sizes))        # the pad frames' room
        elif body is not None:
            raise ValueError("a body needs its sizes")
        self.buf = <char *>calloc(size, 1)
        self.pad = <char *>calloc(size, 1) if parts > 1 else NULL
        self.topics = <char *>calloc(len(topics), 1) if topic_width else NULL
        if self.buf == NULL or (parts > 1 and self.pad == NULL) or (topic_width and self.topics == NULL):
            raise MemoryError()
        if topic_width:
            memcpy(self.topics, <const char *>topics, len(topics))
            self.topic_slots = len(topics) // topic_width
        self.topic_width = topic_width
        self.size = size
        self.parts = parts
        self.stream = stream
        self.key = key
        self.count = count
        self.rate = rate
        self.t0_ns = t0_ns
        self.end_ns = end_ns
        self.mode = SEND_MODES[mode]
        self.timeout_ns = timeout_ns
        self.round_trip = round_trip
        self.reply_timeout_ns = reply_timeout_ns
        self.spin_below_ns = spin_below_ns
        # a restarted producer's new process goes on where its ended one held (--restart)
        self.next_seq = first_seq
        self.clock = _IMPORT_CLOCK

    cdef _table(self, const int32_t[::1] sizes, const unsigned char[::1] body):
        cdef Py_ssize_t i, n = sizes.shape[0]
        cdef long long at = 0, largest = 0
        for i in range(n):
            if sizes[i] < ZL_HEADER_SIZE:
                raise ValueError(f"size must be >= {ZL_HEADER_SIZE}")
            at += sizes[i]
            largest = max(largest, sizes[i])
        if body is not None and body.shape[0] != at:
            raise ValueError("the body must hold every entry, back to back")
        self.table_sizes = <int *>malloc(n * sizeof(int))
        self.table_offsets = <long long *>calloc(n, sizeof(long long))
        self.block = <char *>calloc(body.shape[0] if body is not None else largest, 1)
        if self.table_sizes == NULL or self.table_offsets == NULL or self.block == NULL:
            raise MemoryError()
        at = 0
        for i in range(n):
            self.table_sizes[i] = sizes[i]
            if body is not None:
                self.table_offsets[i] = at
                at += sizes[i]
        if body is not None:
            memcpy(self.block, &body[0], body.shape[0])
        self.table_n = n

    def __dealloc__(self):
        free(self.buf)
        free(self.pad)
        free(self.topics)
        free(self.table_sizes)
        free(self.table_offsets)
        free(self.block)

    def run_slice(self, long long[::1] t_sent not None, signed char[::1] status not None,
                  Py_ssize_t row, long long slice_end_ns, long long[::1] t_reply=None,
                  signed char[::1] echoed=None):
        """Send until the chunk is full, the slice deadline passes, or the run is done.
        Returns the next free row. A blocked send is retried in the next slice.
        Round trip (REQ): each send waits for its reply, whose arrival time goes to t_reply (0: no
        reply within reply_timeout_ns) and whether it echoed the request's header to echoed
        (zl_wire.h zl_reply_echoes; else it was matched by order)."""
        cdef Py_ssize_t capacity = t_sent.shape[0]
        cdef long long now, due
        cdef int rc, err, flags, st, n
        cdef char *msg
        cdef Py_ssize_t entry
        # block / timeout: each message is first offered without waiting, so a full socket
        # (pushback) is seen as EAGAIN and only then waited for with SNDTIMEO.
        flags = ZMQ_DONTWAIT if self.mode == ZL_MODE_DONTWAIT else 0
        if status.shape[0] < capacity:
            raise ValueError("status column shorter than t_sent column")
        if self.round_trip and (t_reply is None or t_reply.shape[0] < capacity
                                or echoed is None or echoed.shape[0] < capacity):
            raise ValueError("round trip needs t_reply and echoed columns as long as t_sent")
        # Per slice, not per message: a socket closed since the last slice raises here
        # instead of handing libzmq a freed handle.
        self.sock = self.socket._live()
        with nogil:
            zl_stamp_anchor(&self.clock)
            while row < capacity and not self.finished:
                if self.awaiting_reply:
                    rc = zmq_recv(self.sock, self.reply, sizeof(self.reply), 0)
                    if rc < 0:
                        err = zmq_errno()
                        if err == EINTR:
                            continue
                        if err == EAGAIN:
                            now = zl_now_ns()
                            if self.reply_timeout_ns and now - self.pending_t_sent >= self.reply_timeout_ns:
                                self.awaiting_reply = False
                                self.unanswered += 1
                                t_sent[row] = self.pending_t_sent
                                status[row] = ZL_ST_OK
                                t_reply[row] = 0
                                echoed[row] = 0
                                row += 1
                                self.next_seq += 1
                            if now >= slice_end_ns:
                                break
                            continue
                        self.errors += 1
                        self.last_errno = err
                        self.finished = True
                        break
                    now = zl_stamp(&self.clock)
                    self.awaiting_reply = False
                    t_sent[row] = self.pending_t_sent
                    status[row] = ZL_ST_OK
                    t_reply[row] = now
                    echoed[row] = zl_reply_echoes(self.reply, rc, self.pending_header)
                    row += 1
                    self.next_seq += 1
                    if now >= slice_end_ns:
                        break
                    continue
                if self.next_seq >= self.count:
                    self.finished = True
                    break
                if self.rate > 0:
                    due = zl_intended_ns(self.t0_ns, self.next_seq, self.rate)
                    if due > slice_end_ns:
                        zl_wait_until(slice_end_ns, self.spin_below_ns)
                        break
                    now = zl_wait_until(due, self.spin_below_ns)
                else:
                    now = zl_stamp(&self.clock)
                if self.end_ns and now >= self.end_ns:
                    self.finished = True
                    break
                msg, n = self.buf, self.size
                if self.table_n:
                    entry = self.next_seq % self.table_n
                    msg, n = self.block + self.table_offsets[entry], self.table_sizes[entry]
                if self.topic_width:
                    memcpy(msg, self.topics + (self.next_seq % self.topic_slots) * self.topic_width,
                           self.topic_width)
                zl_put_header(msg + self.topic_width, self.stream, <uint64_t>self.next_seq, now, self.key)
                rc = zmq_send(self.sock, msg, n,
                              (flags if self.blocked_since else ZMQ_DONTWAIT) | (ZMQ_SNDMORE if self.parts > 1 else 0))
                if rc >= 0 and self.parts > 1:
                    rc = self._send_rest(n)
                if rc >= 0:
                    st = ZL_ST_OK
                    self.sent += 1
                    if self.blocked_since:
                        self.blocked_ns += zl_now_ns() - self.blocked_since
                    self.blocked_since = 0
                    if self.t_first_send_ns == 0:
                        self.t_first_send_ns = now
                    self.t_last_send_ns = now
                    if self.round_trip:
                        self.awaiting_reply = True
                        self.pending_t_sent = now
                        self.pending_header = msg + self.topic_width
                        continue
                else:
                    err = zmq_errno()
                    if err == EINTR:
                        continue
                    if err == EAGAIN and self.mode == ZL_MODE_DONTWAIT:
                        st = ZL_ST_EAGAIN
                        self.eagain += 1
                    elif err == EAGAIN:
                        # block / timeout modes wait in SNDTIMEO-sized steps so that the
                        # loop can come back to Python (stop, progress) while blocked.
                        if self.blocked_since == 0:
                            self.blocked_since = now
                            self.blocked_sends += 1
                        if self.mode == ZL_MODE_TIMEOUT and zl_now_ns() - self.blocked_since >= self.timeout_ns:
                            st = ZL_ST_TIMEOUT
                            self.timeouts += 1
                            self.blocked_ns += zl_now_ns() - self.blocked_since
                            self.blocked_since = 0
                        elif zl_now_ns() >= slice_end_ns:
                            break
                        else:
                            continue
                    else:
                        st = ZL_ST_ERROR
                        self.errors += 1
                        self.last_errno = err
                        if err == ETERM:
                            self.finished = True
                t_sent[row] = now
                status[row] = st
                row += 1
                self.next_seq += 1
                if now >= slice_end_ns:
                    break
        return row

    cdef int _send_rest(self, int size) noexcept nogil:
        """Frames 2..parts of a message whose first frame was accepted, each `size` bytes: libzmq
        counts a message against the HWM at its first frame, so these do not wait (0, or -1 with
        errno set)."""
        cdef int frame = 1
        cdef int rc
        while frame < self.parts:
            rc = zmq_send(self.sock, self.pad, size, ZMQ_SNDMORE if frame < self.parts - 1 else 0)
            if rc < 0:
                if zmq_errno() == EINTR:
                    continue
                return -1
            frame += 1
        return 0

    @property
    def attempted(self):
        return self.next_seq

    def stop(self):
        """Mark the schedule finished (stop command or interrupt)."""
        self.finished = True


cdef class Receiver:
    """One consumer's receive loop, run slice by slice.

    Records per message: the header word (stream << 48 | seq), t_sent_ns from the header,
    t_recv_ns and the size. Only what zl_wire.h's zl_classify calls a message of this run (the
    key, producers, clock and pace given to `expect`) is received; warm-ups are counted, not
    recorded; anything else is `foreign` (`implausible` of them: a header this run cannot have
    sent), and with `record_foreign` (--role consumer, where the producer is the user's) recorded
    under ZL_FOREIGN_STREAM with seq 0 and t_sent 0. `delay_ns` simulates work per message.

    The receive blocks without a timeout and a timer of the thread's own interrupts it at the
    slice's end (csrc/zl_slice_timer.h: a receive timeout costs each wake-up microseconds);
    where that timer cannot be had, ZMQ_RCVTIMEO of the slice's length ends the wait instead.
    """
    cdef void *sock
    cdef Socket socket
    cdef zl_slice_timer timer
    cdef int rcvtimeo_ms                # the value this loop last set (-2: not yet)
    cdef readonly bint slice_timer      # the last slice ended by the timer, not by RCVTIMEO
    cdef char buf[64]                   # the topic (--topics), then the header
    cdef int topic_width
    cdef char scratch[256]
    cdef public long long delay_ns      # the drain sets it to 0 (fast drain)
    cdef int envelope_frames
    cdef readonly long long received, warmups, foreign, implausible, errors
    cdef zl_expect expected             # what a message of this run is (zl_classify)
    cdef readonly long long frame_mismatches    # messages of another frame count than `parts`
    cdef int parts                      # frames per message (--parts); the first holds the header
    cdef readonly unsigned long long warmup_mask   # bit k: a warm-up from producer k arrived
    cdef readonly long long t_first_recv_ns, t_last_recv_ns
    cdef readonly int last_errno
    cdef readonly bint terminated
    cdef bint echo
    cdef readonly bint record_foreign
    cdef zl_stamp_clock clock

    def __cinit__(self, Socket socket not None, long long delay_ns=0, int envelope_frames=0,
                  bint echo=False, bint record_foreign=False, int parts=1, int topic_width=0):
        _check_topic_width(topic_width)
        self.topic_width = topic_width
        self.socket = socket
        self.sock = socket._live()
        memset(&self.timer, 0, sizeof(self.timer))
        self.rcvtimeo_ms = -2
        self.delay_ns = delay_ns
        self.envelope_frames = envelope_frames
        self.echo = echo
        self.record_foreign = record_foreign
        if parts < 1:
            raise ValueError("parts must be >= 1")
        self.parts = parts
        self.clock = _IMPORT_CLOCK
        self.expect()

    def expect(self, unsigned long long key=0, int streams=ZL_MAX_STREAMS, long long t_origin_ns=0,
               long long rate=0):
        """What a message of this run is (zl_wire.h zl_classify): the run's header key, its
        producers, the time its seq 0 could first be sent (0: ZL_LOOKBACK_NS before this receiver
        was made, as every bound unknown) and their pace (0: unpaced or unknown, ZL_MAX_RATE).
        Called again when the run's t0 is known."""
        if streams < 1 or streams > ZL_MAX_STREAMS:
            raise ValueError(f"streams must be 1 to {ZL_MAX_STREAMS}")
        if self.expected.t_floor_ns == 0:
            self.expected.t_floor_ns = zl_now_ns() - ZL_LOOKBACK_NS
        self.expected.key = key
        self.expected.streams = streams
        self.expected.t_origin_ns = t_origin_ns if t_origin_ns > 0 else self.expected.t_floor_ns
        self.expected.rate = rate if 0 < rate < ZL_MAX_RATE else ZL_MAX_RATE

    def __dealloc__(self):
        zl_slice_timer_free(&self.timer)

    def run_slice(self, unsigned long long[::1] words not None, long long[::1] t_sent not None,
                  long long[::1] t_recv not None, int[::1] size not None,
                  Py_ssize_t row, long long slice_end_ns):
        """Receive until the chunk is full, the slice deadline passes or the socket's
        RCVTIMEO expires with nothing to read. Returns the next free row."""
        cdef Py_ssize_t capacity = words.shape[0]
        cdef long long now
        cdef int rc = -1, err, frames, kind
        cdef uint64_t word = 0
        cdef long long every
        cdef const char *head = self.buf + self.topic_width
        if t_sent.shape[0] < capacity or t_recv.shape[0] < capacity or size.shape[0] < capacity:
            raise ValueError("record columns differ in length")
        self.sock = self.socket._live()     # as in Sender.run_slice
        every = max(slice_end_ns - zl_now_ns(), 1_000_000)
        self.slice_timer = zl_slice_timer_start(&self.timer, zl_host_ns(slice_end_ns), every) == 0
        self._set_rcvtimeo(-1 if self.slice_timer else <int>((every + 999_999) // 1_000_000))
        with nogil:
            zl_stamp_anchor(&self.clock)
            while row < capacity:
                rc = self._envelope() if self.envelope_frames else 0
                while rc == 0:      # mid-message after an envelope, a signal must not lose the frame
                    rc = zmq_recv(self.sock, self.buf, ZL_HEADER_SIZE + self.topic_width, 0)
                    if rc >= 0 or self.envelope_frames == 0 or zmq_errno() != EINTR:
                        break
                    rc = 0
                if rc < 0 and rc != _SHORT_ENVELOPE:
                    err = zmq_errno()
                    if err == EINTR:    # the slice timer, or a signal of someone else's
                        if zl_now_ns() >= slice_end_ns:
                            break
                        continue
                    if err != EAGAIN:
                        self.errors += 1
                        self.last_errno = err
                        if err == ETERM:
                            self.terminated = True
                    break
                now = zl_stamp(&self.clock)
                # the rest of a multipart message, counted (read only where frames may be many, or
                # a ROUTER's envelope is read anyway: a check of ZMQ_RCVMORE per message costs the
                # single-frame loop its speed)
                frames = (self._rest_of_message() if self.parts > 1 or self.record_foreign or self.envelope_frames
                          else 1)
                if rc == _SHORT_ENVELOPE:
                    kind = ZL_FOREIGN
                    rc = 0
                else:
                    kind = zl_classify(head, rc - self.topic_width, now, &self.expected, &word)
                if kind == ZL_WARMUP:       # a single frame whatever --parts
                    self.warmups += 1
                    self.warmup_mask |= (<unsigned long long>1) << (word & (ZL_MAX_STREAMS - 1))
                    if now >= slice_end_ns:
                        break
                    continue
                if kind != ZL_OURS:
                    self.foreign += 1
                    self.implausible += kind == ZL_IMPLAUSIBLE
                    if self.record_foreign:
                        self.frame_mismatches += frames != self.parts
                        words[row] = ZL_FOREIGN_STREAM << ZL_SEQ_BITS
                        t_sent[row] = 0
                        t_recv[row] = now
                        size[row] = rc
                        row += 1
                    if now >= slice_end_ns:
                        break
                    continue
                self.frame_mismatches += frames != self.parts
                words[row] = word       # without the check (stream << 48 | seq: the records' word)
                t_sent[row] = zl_get_t_sent(head)
                t_recv[row] = now
                size[row] = rc
                row += 1
                self.received += 1
                if self.t_first_recv_ns == 0:
                    self.t_first_recv_ns = now
                self.t_last_recv_ns = now
                if self.delay_ns:
                    now = zl_work_until(now + self.delay_ns)   # busy, no yield: zl_clock.h
                if self.echo:
                    # REP: the reply carries the request's header back (after the work).
                    while zmq_send(self.sock, self.buf, ZL_HEADER_SIZE, 0) < 0:
                        err = zmq_errno()
                        if err != EINTR and err != EAGAIN:
                            self.errors += 1
                            self.last_errno = err
                            break
                if now >= slice_end_ns:
                    break
            zl_slice_timer_stop(&self.timer)
        return row

    cdef int _envelope(self) noexcept nogil:
        """Reads the routing frames a ROUTER puts before the message: 0, -1 with errno set, or
        _SHORT_ENVELOPE when the message ended among them (a peer's message of fewer frames: its
        last frame was read, so the next receive starts a message, never the middle of one)."""
        cdef int frame = 0
        cdef int more = 1
        cdef size_t more_size
        while frame < self.envelope_frames:
            if zmq_recv(self.sock, self.scratch, sizeof(self.scratch), 0) < 0:
                if frame == 0 or zmq_errno() != EINTR:
                    return -1
                continue
            frame += 1
            more_size = sizeof(more)
            if zmq_getsockopt(self.sock, ZMQ_RCVMORE, &more, &more_size) != 0 or not more:
                return _SHORT_ENVELOPE
        return 0

    cdef int _rest_of_message(self) noexcept nogil:
        """Reads the frames after the header's; returns the message's frame count."""
        cdef int frames = 1
        cdef int more = 1
        cdef size_t more_size
        while True:
            more_size = sizeof(more)
            if zmq_getsockopt(self.sock, ZMQ_RCVMORE, &more, &more_size) != 0 or not more:
                return frames
            if zmq_recv(self.sock, self.scratch, sizeof(self.scratch), 0) < 0:
                if zmq_errno() == EINTR:
                    continue
                return frames
            frames += 1

    cdef _set_rcvtimeo(self, int ms):
        if ms != self.rcvtimeo_ms:
            if zmq_setsockopt(self.sock, ZMQ_RCVTIMEO, &ms, sizeof(ms)) != 0:
                raise _error("zmq_setsockopt(RCVTIMEO)")
            self.rcvtimeo_ms = ms


cdef enum:
    _SHORT_ENVELOPE = -2     # Receiver._envelope: the message ended among its routing frames


cdef _check_topic_width(int topic_width):
    if topic_width < 0 or topic_width > ZL_MAX_TOPIC_WIDTH:
        raise ValueError(f"topic_width {topic_width}: topics are 0 to {ZL_MAX_TOPIC_WIDTH} bytes (zl_wire.h)")


def warmup_message(int producer, int size, bytes topic=b"", unsigned long long key=0):
    """A warm-up message (stream 0xFFFF, seq = producer index, the run's header key), sent before
    the run starts so that the controller knows every consumer hears every producer; with topics,
    behind `topic`."""
    _check_topic_width(len(topic))
    cdef bytearray msg = bytearray(max(size, ZL_HEADER_SIZE + len(topic)))
    msg[:len(topic)] = topic
    zl_put_header(<char *>msg + len(topic), ZL_WARMUP_STREAM, producer, zl_now_ns(), key)
    return bytes(msg)


def header(unsigned long long stream, unsigned long long seq, long long t_sent_ns, unsigned long long key=0):
    """The 16-byte header zl_put_header writes (for tests and tools: the C statement of the rule)."""
    cdef char buf[ZL_HEADER_SIZE]
    zl_put_header(buf, stream, seq, t_sent_ns, key)
    return buf[:ZL_HEADER_SIZE]


def classify(bytes head, long long now_ns, unsigned long long key=0, int streams=ZL_MAX_STREAMS,
             long long t_floor_ns=0, long long t_origin_ns=0, long long rate=0):
    """zl_classify of a first frame after its topic: (kind, word), kind one of "foreign", "ours",
    "warmup", "implausible" (for tests: the receiver's rule, without a socket)."""
    cdef zl_expect e
    cdef uint64_t word = 0
    e.key, e.streams, e.t_floor_ns = key, streams, t_floor_ns
    e.t_origin_ns = t_origin_ns if t_origin_ns > 0 else t_floor_ns
    e.rate = rate if 0 < rate < ZL_MAX_RATE else ZL_MAX_RATE
    kind = zl_classify(head, len(head), now_ns, &e, &word)
    return ("foreign", "ours", "warmup", "implausible")[kind], word


def proxy(Socket frontend not None, Socket backend not None, Socket control not None):
    """Run zmq_proxy_steerable until TERMINATE arrives on `control` (GIL released)."""
    cdef int rc
    cdef void *f = frontend._live()
    cdef void *b = backend._live()
    cdef void *c = control._live()
    with nogil:
        rc = zmq_proxy_steerable(f, b, NULL, c)
    return rc


# --- off the hot path: whole-chunk helpers for the writer thread ----------------------------

cdef extern from *:
    int __builtin_clzll(unsigned long long) nogil


def histogram_add(const long long[::1] values not None, long long[::1] counts not None):
    """Add values into the log-linear buckets of zmqload.measure.histogram (same layout) and
    return (min, max, sum). One pass, GIL released: the numpy version takes ~8 passes."""
    cdef Py_ssize_t i, n = values.shape[0]
    cdef Py_ssize_t last = counts.shape[0] - 1
    cdef long long v, lo, hi, total = 0
    cdef long long shift, index
    if n == 0:
        return None, None, 0
    lo = hi = values[0]
    with nogil:
        for i in range(n):
            v = values[i]
            if v < lo:
                lo = v
            if v > hi:
                hi = v
            total += v
            if v < 0:
                v = 0
            if v < 256:
                index = v
            else:
                shift = (64 - __builtin_clzll(<unsigned long long>v)) - 8
                if shift > 47:
                    shift = 47
                index = (shift + 1) * 128 + ((v >> shift) - 128)
            if index > last:
                index = last
            counts[index] += 1
    return lo, hi, total
