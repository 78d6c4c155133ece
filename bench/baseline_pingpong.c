/* The yardstick for zmqload's added latency: a bare REQ/REP ping-pong, no recording.
 *
 *   baseline_pingpong ENDPOINT COUNT RATE SIZE
 *
 * Forks a REP echo server (binds) and runs a REQ client (connects) that makes 1,000 untimed
 * round trips and then COUNT timed ones of SIZE bytes; with RATE > 0 trip i starts at its
 * slot t0 + i / RATE (clock_nanosleep to an absolute CLOCK_MONOTONIC time, open loop like
 * zmqload's pacing; a late trip starts at once), with RATE = 0 back to back.
 * Prints "count p10_rtt_ns p50_rtt_ns p90_rtt_ns p99_rtt_ns": half of them is the one-way estimate.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "baseline_common.h"

#define WARMUP 1000

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s ENDPOINT COUNT RATE SIZE\n", argv[0]);
        return 2;
    }
    const char *endpoint = argv[1];
    long count = atol(argv[2]);
    double rate = atof(argv[3]);
    size_t size = (size_t)atol(argv[4]);
    int ready[2];
    if (pipe(ready))
        return 1;
    char *buf = calloc(size, 1);

    pid_t pid = fork();
    if (pid == 0) {                       /* echo server */
        void *ctx = zmq_ctx_new();
        void *rep = zmq_socket(ctx, ZMQ_REP);
        if (bind_or_say(rep, endpoint))
            return 1;
        if (signal_ready(ready[1]))
            return 1;
        for (long i = 0; i < count + WARMUP; i++) {
            int got = zmq_recv(rep, buf, size, 0);
            if (got < 0 || zmq_send(rep, buf, (size_t)got, 0) < 0)
                return 1;
        }
        zmq_close(rep);
        zmq_ctx_term(ctx);
        return 0;
    }

    void *ctx;
    void *req = connect_when_ready(ready[0], &ctx, ZMQ_REQ, endpoint);
    if (!req)
        return 1;
    for (long i = 0; i < WARMUP; i++)
        if (zmq_send(req, buf, size, 0) < 0 || zmq_recv(req, buf, size, 0) < 0)
            return 1;
    int64_t *rtt = malloc((size_t)count * sizeof *rtt);
    int64_t t0 = now_ns();
    for (long i = 0; i < count; i++) {
        if (rate > 0) {
            int64_t slot = t0 + (int64_t)((double)i * 1e9 / rate);
            struct timespec ts = {slot / 1000000000LL, slot % 1000000000LL};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        }
        int64_t start = now_ns();
        if (zmq_send(req, buf, size, 0) < 0 || zmq_recv(req, buf, size, 0) < 0)
            return 1;
        rtt[i] = now_ns() - start;
    }
    int status;
    waitpid(pid, &status, 0);
    print_percentiles(rtt, count);
    zmq_close(req);
    zmq_ctx_term(ctx);
    free(rtt);
    free(buf);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
