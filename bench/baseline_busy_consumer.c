/* The yardstick for a consumer's simulated work: libzmq only, no zmqload code.
 *
 *   baseline_busy_consumer PATTERN ENDPOINT COUNT SIZE DELAY_US WAIT HWM RATE
 *
 * PATTERN push-pull or pub-sub; the producer (forked, connects) sends COUNT messages of SIZE
 * bytes (>= 8), blocking (a PUB drops at its HWM), unpaced (RATE 0) or on an open-loop
 * schedule of RATE msg/s kept by spinning on the clock; each message carries its intended
 * send time (unpaced: its send time). The consumer (binds) stamps each receive
 * on CLOCK_MONOTONIC and then waits DELAY_US: WAIT "spin" busy-waits on the clock (work is
 * CPU time), "yield" calls sched_yield() while waiting (what zmqload's pacing wait does between
 * 4 and 80 us). HWM sets SNDHWM and RCVHWM (0 = libzmq's default). It stops after COUNT
 * receives or 1 s with nothing to read, and prints
 *   "received median_gap_ns p10_gap_ns p90_gap_ns msgs_per_s latency_p50_ns latency_p99_ns"
 * over the gaps between consecutive receives (the consumer's real time per message while
 * there is always a message waiting), received / (last - first receive), and the latency
 * from the intended send time (one CLOCK_MONOTONIC for both processes).
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

int main(int argc, char **argv)
{
    if (argc != 9 || atol(argv[4]) < 8) {
        fprintf(stderr, "usage: %s push-pull|pub-sub ENDPOINT COUNT SIZE(>=8) DELAY_US spin|yield HWM RATE\n",
                argv[0]);
        return 2;
    }
    int pubsub = strcmp(argv[1], "pub-sub") == 0;
    const char *endpoint = argv[2];
    long count = atol(argv[3]);
    size_t size = (size_t)atol(argv[4]);
    int64_t delay_ns = (int64_t)(atof(argv[5]) * 1000);
    int yield = strcmp(argv[6], "yield") == 0;
    int hwm = atoi(argv[7]);
    int64_t rate = atol(argv[8]);
    int ready[2];
    if (pipe(ready))
        return 1;

    pid_t pid = fork();
    if (pid == 0) {                       /* producer */
        if (await_ready(ready[0]))
            return 1;
        void *ctx = zmq_ctx_new();
        void *out = zmq_socket(ctx, pubsub ? ZMQ_PUB : ZMQ_PUSH);
        if (hwm)
            zmq_setsockopt(out, ZMQ_SNDHWM, &hwm, sizeof hwm);
        if (zmq_connect(out, endpoint) != 0)
            return 1;
        char *buf = calloc(size, 1);
        usleep(300000);                   /* let the connection (and subscription) come up */
        int64_t t0 = now_ns();
        for (long i = 0; i < count; i++) {
            int64_t due = rate ? t0 + (int64_t)((__int128)i * 1000000000LL / rate) : now_ns();
            while (now_ns() < due)
                ;
            memcpy(buf, &due, sizeof due);
            if (zmq_send(out, buf, size, 0) < 0)
                return 1;
        }
        int linger = 0;
        zmq_setsockopt(out, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(out);
        zmq_ctx_term(ctx);
        return 0;
    }

    void *ctx = zmq_ctx_new();
    void *in = zmq_socket(ctx, pubsub ? ZMQ_SUB : ZMQ_PULL);
    if (hwm)
        zmq_setsockopt(in, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (pubsub)
        zmq_setsockopt(in, ZMQ_SUBSCRIBE, "", 0);
    int timeout = 1000;
    zmq_setsockopt(in, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    if (bind_or_say(in, endpoint))
        return 1;
    if (signal_ready(ready[1]))
        return 1;
    char *buf = malloc(size);
    int64_t *t = malloc(sizeof(int64_t) * (size_t)count);
    int64_t *lat = malloc(sizeof(int64_t) * (size_t)count);
    long n = 0;
    while (n < count && zmq_recv(in, buf, size, 0) >= 0) {
        int64_t now = now_ns(), intended;
        memcpy(&intended, buf, sizeof intended);
        lat[n] = now - intended;
        t[n++] = now;
        int64_t due = now + delay_ns;
        while (now < due) {
            if (yield && due - now > 4000)
                sched_yield();
            now = now_ns();
        }
    }
    int status;
    waitpid(pid, &status, 0);
    if (n < 3) {
        fprintf(stderr, "received %ld\n", n);
        return 1;
    }
    double msgs_per_s = (double)(n - 1) / ((double)(t[n - 1] - t[0]) / 1e9);
    for (long i = 0; i + 1 < n; i++)
        t[i] = t[i + 1] - t[i];
    qsort(t, (size_t)(n - 1), sizeof(int64_t), cmp_i64);
    qsort(lat, (size_t)n, sizeof(int64_t), cmp_i64);
    printf("%ld %lld %lld %lld %.0f %lld %lld\n", n, (long long)t[(n - 1) / 2], (long long)t[(n - 1) / 10],
           (long long)t[(n - 1) * 9 / 10], msgs_per_s, (long long)lat[n / 2], (long long)lat[n * 99 / 100]);
    zmq_close(in);
    zmq_ctx_term(ctx);
    free(buf);
    free(t);
    free(lat);
    return 0;
}
