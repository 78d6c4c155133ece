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

#endif
