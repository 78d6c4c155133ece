/* A second yardstick for zmqload's added latency: the same one-way trip zmqload times, in bare C.
 *
 *   baseline_oneway ENDPOINT COUNT RATE SIZE [sleep|spin]
 *
 * Forks a PULL receiver (binds); the parent's PUSH (connects) sends 1,000 untimed messages,
 * then COUNT of SIZE bytes, message i at its slot t0 + i / RATE (open loop like zmqload's
 * pacing), each carrying the
 * CLOCK_MONOTONIC time read just before its zmq_send in its first 8 bytes. The receiver
 * takes t_recv after each zmq_recv and prints "count p10_ns p50_ns p90_ns p99_ns" of t_recv - t_sent:
 * what zmqload's t_recv_ns - t_sent_ns measures, with nothing recorded.
 *
 * How the sender waits for a slot moves the trip's p50 on a VM by more than the 2 us asked
 * (docs/BENCHMARKS.md, "One-way latency"), so both ways are here: `sleep` (the default) clock_nanosleeps to
 * the slot; `spin` waits as zmqload's producer does (csrc/zl_clock.h, written out again here):
 * with more than 80 us left it sleeps to 40 us before the slot, then it spins, calling
 * sched_yield while more than 4 us are left.
 */
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

#define WARMUP 1000

static void wait_until(int64_t due, int spin)
{
    int64_t now = now_ns();
    while (now < due) {
        if (!spin || due - now > 80000) {
            int64_t target = spin ? due - 40000 : due;
            struct timespec ts = {target / 1000000000LL, target % 1000000000LL};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        } else if (due - now > 4000) {
            sched_yield();
        }
        now = now_ns();
    }
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: %s ENDPOINT COUNT RATE SIZE [sleep|spin]\n", argv[0]);
        return 2;
    }
    int spin = argc == 6 && strcmp(argv[5], "spin") == 0;
    if (argc == 6 && !spin && strcmp(argv[5], "sleep") != 0) {
        fprintf(stderr, "the pacing must be sleep or spin\n");
        return 2;
    }
    const char *endpoint = argv[1];
    long count = atol(argv[2]);
    double rate = atof(argv[3]);
    size_t size = (size_t)atol(argv[4]);
    if (size < sizeof(int64_t) || rate <= 0) {
        fprintf(stderr, "SIZE must be >= 8 and RATE > 0\n");
        return 2;
    }
    int ready[2];
    if (pipe(ready))
        return 1;
    char *buf = calloc(size, 1);

    pid_t pid = fork();
    if (pid == 0) {                       /* receiver */
        void *ctx = zmq_ctx_new();
        void *pull = zmq_socket(ctx, ZMQ_PULL);
        if (bind_or_say(pull, endpoint))
            return 1;
        if (signal_ready(ready[1]))
            return 1;
        int64_t *lat = malloc((size_t)count * sizeof *lat);
        for (long i = 0; i < count + WARMUP; i++) {
            if (zmq_recv(pull, buf, size, 0) < 0)
                return 1;
            int64_t t_recv = now_ns();
            if (i >= WARMUP) {
                int64_t t_sent;
                memcpy(&t_sent, buf, sizeof t_sent);
                lat[i - WARMUP] = t_recv - t_sent;
            }
        }
        print_percentiles(lat, count);
        zmq_close(pull);
        zmq_ctx_term(ctx);
        return 0;
    }

    void *ctx;
    void *push = connect_when_ready(ready[0], &ctx, ZMQ_PUSH, endpoint);
    if (!push)
        return 1;
    for (long i = 0; i < WARMUP; i++)
        if (zmq_send(push, buf, size, 0) < 0)
            return 1;
    int64_t t0 = now_ns() + 10000000LL;   /* the warm-up drained */
    for (long i = 0; i < count; i++) {
        int64_t slot = t0 + (int64_t)((double)i * 1e9 / rate);
        wait_until(slot, spin);
        int64_t t_sent = now_ns();
        memcpy(buf, &t_sent, sizeof t_sent);
        if (zmq_send(push, buf, size, 0) < 0)
            return 1;
    }
    int status;
    waitpid(pid, &status, 0);
    zmq_close(push);
    zmq_ctx_term(ctx);
    free(buf);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
