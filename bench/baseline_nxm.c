/* The yardstick for N producers x M consumers: bare PUSH -> PULL over tcp loopback, no recording.
 *
 *   baseline_nxm BASE_PORT N M COUNT_PER_PRODUCER SIZE [PLACEMENT]
 *
 * Forks M receiver processes, receiver j binding a PULL on tcp://127.0.0.1:(BASE_PORT + j),
 * then N sender processes, each with one PUSH socket per receiver (connected to it), sending
 * COUNT_PER_PRODUCER messages of SIZE bytes round-robin over its sockets (message i to
 * receiver i % M, as a PUSH connected to all M would spread them), then a 1-byte end marker
 * on every socket. A receiver counts data messages until it has N end markers (each sits
 * behind its sender's data on one connection, so all of that sender's data came first).
 * Every process has its own context with one I/O thread, as zmqload's workers do.
 *
 * PLACEMENT (optional): two CPU numbers, e.g. "01": every sender process on the first, every
 * receiver process on the second, each with its libzmq I/O thread (pinned before its context
 * starts it), as zmqload's --cpu-placement auto places workers that outnumber the CPUs.
 * Without it the scheduler places them.
 *
 * Prints "msgs elapsed_ns first_ns last_ns": msgs received in total, elapsed from the earliest
 * first send (first_ns) to the latest last receive (last_ns) on CLOCK_MONOTONIC (one host, so
 * the values compare; they go back to the parent through a pipe). Exit 1 if any process
 * failed or the receivers counted a different total.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "baseline_common.h"

struct report { int64_t kind, msgs, t; };   /* kind 0: sender's first send, 1: receiver's last receive */

/* Pin this process's thread, and the I/O thread its context starts later, to `cpu` (< 0: not). */
static void pin(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

static int receiver(int port, int n, size_t size, int ready_fd, int result_fd, int cpu)
{
    pin(cpu);
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", port);
    void *ctx = zmq_ctx_new();
    void *pull = zmq_socket(ctx, ZMQ_PULL);
    if (bind_or_say(pull, endpoint))
        return 1;
    if (signal_ready(ready_fd))
        return 1;
    char *buf = malloc(size);
    int64_t msgs = 0;
    int ends = 0;
    while (ends < n) {
        int got = zmq_recv(pull, buf, size, 0);
        if (got < 0)
            return 1;
        if (got == 1)
            ends++;
        else
            msgs++;
    }
    struct report r = {1, msgs, now_ns()};
    if (write(result_fd, &r, sizeof r) != sizeof r)
        return 1;
    zmq_close(pull);
    zmq_ctx_term(ctx);
    free(buf);
    return 0;
}

static int sender(int base_port, int m, long count, size_t size, int result_fd, int cpu)
{
    pin(cpu);
    void *ctx = zmq_ctx_new();
    void **push = calloc((size_t)m, sizeof *push);
    for (int j = 0; j < m; j++) {
        char endpoint[64];
        snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", base_port + j);
        push[j] = zmq_socket(ctx, ZMQ_PUSH);
        if (zmq_connect(push[j], endpoint) != 0)
            return 1;
    }
    char *buf = calloc(size, 1);
    usleep(100000);                       /* let the connections come up, as zmqload's warm-up does */
    struct report r = {0, 0, now_ns()};
    int j = 0;
    for (long i = 0; i < count; i++) {
        if (zmq_send(push[j], buf, size, 0) < 0)
            return 1;
        if (++j == m)
            j = 0;
    }
    for (j = 0; j < m; j++)
        if (zmq_send(push[j], buf, 1, 0) < 0)
            return 1;
    if (write(result_fd, &r, sizeof r) != sizeof r)
        return 1;
    for (j = 0; j < m; j++)
        zmq_close(push[j]);               /* linger -1: everything queued still goes out */
    zmq_ctx_term(ctx);
    free(buf);
    free(push);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 6 && !(argc == 7 && strlen(argv[6]) == 2)) {
        fprintf(stderr, "usage: %s BASE_PORT N M COUNT_PER_PRODUCER SIZE [PLACEMENT, e.g. 01]\n", argv[0]);
        return 2;
    }
    int base_port = atoi(argv[1]), n = atoi(argv[2]), m = atoi(argv[3]);
    long count = atol(argv[4]);
    size_t size = (size_t)atol(argv[5]);
    int sender_cpu = argc == 7 ? argv[6][0] - '0' : -1, receiver_cpu = argc == 7 ? argv[6][1] - '0' : -1;
    if (n < 1 || m < 1 || count < 1 || size < 2) {
        fprintf(stderr, "N, M, COUNT >= 1 and SIZE >= 2 (1-byte messages are end markers)\n");
        return 2;
    }
    int ready[2], result[2];
    if (pipe(ready) || pipe(result))
        return 1;
    for (int j = 0; j < m; j++)
        if (fork() == 0)
            return receiver(base_port + j, n, size, ready[1], result[1], receiver_cpu);
    for (int j = 0; j < m; j++) {
        if (await_ready(ready[0]))
            return 1;
    }
    for (int i = 0; i < n; i++)
        if (fork() == 0)
            return sender(base_port, m, count, size, result[1], sender_cpu);

    int64_t first = INT64_MAX, last = INT64_MIN, msgs = 0;
    for (int k = 0; k < n + m; k++) {
        struct report r;
        if (read(result[0], &r, sizeof r) != sizeof r)
            return 1;
        if (r.kind == 0 && r.t < first)
            first = r.t;
        if (r.kind == 1) {
            msgs += r.msgs;
            if (r.t > last)
                last = r.t;
        }
    }
    int status, failed = 0;
    while (wait(&status) > 0)
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    printf("%lld %lld %lld %lld\n", (long long)msgs, (long long)(last - first), (long long)first, (long long)last);
    return failed || msgs != (int64_t)n * count;
}
