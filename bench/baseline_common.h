/* What the bare C yardsticks in bench/ share (none of it is zmqload's: csrc/ is not used, so
 * the yardsticks stay independent of the code they measure). Header-only: each baseline is
 * compiled alone by bench/paired.py build_c. */
#ifndef BASELINE_COMMON_H
#define BASELINE_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static inline int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Bind, or say why on stderr: 0 or -1. */
static inline int bind_or_say(void *sock, const char *endpoint)
{
    if (zmq_bind(sock, endpoint) == 0)
        return 0;
    fprintf(stderr, "bind %s: %s\n", endpoint, zmq_strerror(zmq_errno()));
    return -1;
}

/* The forked side that binds tells the other it may connect: one byte down a pipe. */
static inline int signal_ready(int fd)
{
    char byte = 1;
    return write(fd, &byte, 1) == 1 ? 0 : -1;
}

static inline int await_ready(int fd)
{
    char byte;
    return read(fd, &byte, 1) == 1 ? 0 : -1;
}

/* The connecting side, once the binding side is ready: a socket of `type` in a new context
 * (returned in *ctx), connected to `endpoint`; NULL if any step fails. */
static inline void *connect_when_ready(int ready_fd, void **ctx, int type, const char *endpoint)
{
    if (await_ready(ready_fd))
        return NULL;
    *ctx = zmq_ctx_new();
    void *sock = zmq_socket(*ctx, type);
    return sock && zmq_connect(sock, endpoint) == 0 ? sock : NULL;
}

/* Sorts `values` and prints "count p10 p50 p90 p99" (ns) on stdout. */
static inline void print_percentiles(int64_t *values, long count)
{
    qsort(values, (size_t)count, sizeof *values, cmp_i64);
    printf("%ld %lld %lld %lld %lld\n", count, (long long)values[count / 10], (long long)values[count / 2],
           (long long)values[count * 9 / 10], (long long)values[count * 99 / 100]);
}

/* Sends `count` messages of `size` zero bytes on `sock`, then reads the receiver's last-receive
 * time from `result_fd`: *span_ns is from the first send to it. 0, or -1 if a step failed. */
static inline int send_then_span(void *sock, size_t size, long count, int result_fd, int64_t *span_ns)
{
    char *buf = calloc(size, 1);
    int64_t first = now_ns(), last;
    for (long i = 0; i < count; i++) {
        if (zmq_send(sock, buf, size, 0) < 0)
            return -1;
    }
    free(buf);
    if (read(result_fd, &last, sizeof last) != sizeof last)
        return -1;
    *span_ns = last - first;
    return 0;
}

#endif
