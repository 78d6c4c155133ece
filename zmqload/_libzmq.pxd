from libc.stdint cimport uint64_t
# The parts of libzmq's C API that the engine uses, as csrc/zl_libzmq.h declares them: calls go
# through a table filled with dlopen when a process first needs libzmq (the run's --libzmq).

cdef extern from "zl_libzmq.h" nogil:
    enum:
        ZMQ_PAIR, ZMQ_PUB, ZMQ_SUB, ZMQ_REQ, ZMQ_REP, ZMQ_DEALER, ZMQ_ROUTER
        ZMQ_PULL, ZMQ_PUSH, ZMQ_XPUB, ZMQ_XSUB
        ZMQ_SNDHWM, ZMQ_RCVHWM, ZMQ_LINGER, ZMQ_SNDBUF, ZMQ_RCVBUF, ZMQ_IMMEDIATE
        ZMQ_SNDTIMEO, ZMQ_RCVTIMEO, ZMQ_SUBSCRIBE, ZMQ_LAST_ENDPOINT, ZMQ_ROUTING_ID
        ZMQ_REQ_RELAXED, ZMQ_REQ_CORRELATE, ZMQ_CONFLATE
        ZMQ_ROUTER_MANDATORY, ZMQ_ROUTER_HANDOVER, ZMQ_XPUB_NODROP
        ZMQ_HEARTBEAT_IVL, ZMQ_HEARTBEAT_TTL, ZMQ_HEARTBEAT_TIMEOUT
        ZMQ_CURVE_SERVER, ZMQ_CURVE_PUBLICKEY, ZMQ_CURVE_SECRETKEY, ZMQ_CURVE_SERVERKEY, ZMQ_MECHANISM
        ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL, ZMQ_EVENT_HANDSHAKE_SUCCEEDED
        ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
        ZMQ_RCVMORE, ZMQ_EVENTS, ZMQ_FD
        ZMQ_IO_THREADS, ZMQ_MAX_SOCKETS
        ZMQ_DONTWAIT, ZMQ_SNDMORE
        ZMQ_POLLIN, ZMQ_POLLOUT
        EAGAIN, EINTR, ETERM, EFSM, EHOSTUNREACH

    ctypedef struct zmq_msg_t:
        pass

    ctypedef struct zmq_pollitem_t:
        void *socket
        int fd
        short events
        short revents

    void zmq_version(int *major, int *minor, int *patch)
    int zmq_has(const char *capability)
    int zmq_curve_keypair(char *z85_public_key, char *z85_secret_key)
    int zmq_errno()
    const char *zmq_strerror(int errnum)

    void *zmq_ctx_new()
    int zmq_ctx_term(void *context)
    int zmq_ctx_set(void *context, int option, int optval)
    int zmq_ctx_get(void *context, int option)

    void *zmq_socket(void *context, int type)
    int zmq_close(void *socket)
    int zmq_setsockopt(void *socket, int option_name, const void *option_value, size_t option_len)
    int zmq_getsockopt(void *socket, int option_name, void *option_value, size_t *option_len)
    int zmq_bind(void *socket, const char *endpoint)
    int zmq_connect(void *socket, const char *endpoint)
    int zmq_socket_monitor(void *socket, const char *endpoint, int events)

    int zmq_send(void *socket, const void *buf, size_t len, int flags)
    int zmq_recv(void *socket, void *buf, size_t len, int flags)

    int zmq_msg_init(zmq_msg_t *msg)
    int zmq_msg_recv(zmq_msg_t *msg, void *socket, int flags)
    int zmq_msg_close(zmq_msg_t *msg)
    size_t zmq_msg_size(const zmq_msg_t *msg)
    void *zmq_msg_data(zmq_msg_t *msg)

    int zmq_poll(zmq_pollitem_t *items, int nitems, long timeout)
    int zmq_proxy_steerable(void *frontend, void *backend, void *capture, void *control)

    int zl_libzmq_loaded()
    int zl_libzmq_load(const char *path, char *err, size_t err_len)
    const char *zl_libzmq_file()
    int zl_libzmq_probe(const char *path, int *version, const char **names, int *has, int n,
                        char *file, size_t file_len, char *err, size_t err_len)


cdef extern from "zl_slice_timer.h" nogil:
    ctypedef struct zl_slice_timer:
        pass
    int zl_slice_signal_number()
    int zl_slice_timer_start(zl_slice_timer *t, long long end_ns, long long every_ns)
    void zl_slice_timer_stop(zl_slice_timer *t)
    void zl_slice_timer_free(zl_slice_timer *t)


cdef extern from "zl_clock.h" nogil:
    enum:
        ZL_HAVE_TICKS
    ctypedef struct zl_stamp_clock:
        int enabled
        double ns_per_tick
    long long zl_clock_offset_ns
    long long zl_now_ns()
    long long zl_host_ns(long long ns)
    void zl_stamp_anchor(zl_stamp_clock *c)
    long long zl_stamp(zl_stamp_clock *c)
    long long zl_stamp_error_ns(const zl_stamp_clock *c, long long ticks)
    long long zl_ticks()
    enum:
        ZL_SPIN_BELOW_NS
    long long zl_wait_until(long long due_ns, long long spin_below_ns)
    long long zl_work_until(long long due_ns)
    long long zl_intended_ns(long long t0_ns, long long seq, long long rate)


cdef extern from "zl_wire.h" nogil:
    enum:
        ZL_HEADER_SIZE
        ZL_SEQ_BITS
        ZL_WIRE_SEQ_BITS
        ZL_MAX_STREAMS
        ZL_MAX_TOPIC_WIDTH
        ZL_ST_OK, ZL_ST_EAGAIN, ZL_ST_TIMEOUT, ZL_ST_ERROR
        ZL_MODE_BLOCK, ZL_MODE_DONTWAIT, ZL_MODE_TIMEOUT
        ZL_FOREIGN, ZL_OURS, ZL_WARMUP, ZL_IMPLAUSIBLE
    unsigned long long ZL_SEQ_MASK
    unsigned long long ZL_WIRE_SEQ_MASK
    unsigned long long ZL_WARMUP_STREAM
    unsigned long long ZL_FOREIGN_STREAM
    long long ZL_LOOKBACK_NS
    long long ZL_FUTURE_NS
    long long ZL_MAX_RATE
    ctypedef struct zl_expect:
        unsigned long long key
        unsigned long long streams
        long long t_floor_ns
        long long t_origin_ns
        long long rate
    unsigned long long zl_check(unsigned long long stream, unsigned long long seq, long long t_sent_ns,
                                unsigned long long key)
    void zl_put_header(char *buf, unsigned long long stream, unsigned long long seq, long long t_sent_ns,
                       unsigned long long key)
    void zl_put_t_sent(char *buf, long long t_sent_ns)
    unsigned long long zl_get_word(const char *buf)
    int zl_reply_echoes(const char *reply, int reply_len, const char *request)
    long long zl_get_t_sent(const char *buf)
    int zl_classify(const char *head, int len, long long now_ns, const zl_expect *e, uint64_t *word)
