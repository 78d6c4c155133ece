/* The yardstick for measuring through a device: libzmq's own XSUB|XPUB proxy, and a bare
 * PUB -> SUB pair through it, no recording.
 *
 *   baseline_device device FRONT BACK
 *       XSUB binds FRONT (publishers connect), XPUB binds BACK (subscribers connect), zmq_proxy
 *       between them, HWM 0 (no limit) on both, until killed. The device a user writes in C.
 *   baseline_device pair FRONT BACK COUNT SIZE
 *       Forks a SUB (connects BACK, subscribes to everything, RCVHWM 0) and a PUB (connects
 *       FRONT, SNDHWM 0). Until the subscription has crossed the device, the PUB sends 1-byte
 *       probes every ms; once the SUB has one it says so down a pipe, and the PUB sends COUNT
 *       messages of SIZE bytes. With no HWM anywhere nothing is dropped: the SUB counts COUNT.
 *       Prints "msgs elapsed_ns" from the first data send to the last receive (CLOCK_MONOTONIC,
 *       the span zmqload reports as throughput).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "baseline_common.h"

static int run_device(const char *front, const char *back)
{
    void *ctx = zmq_ctx_new();
    void *xsub = zmq_socket(ctx, ZMQ_XSUB), *xpub = zmq_socket(ctx, ZMQ_XPUB);
    int zero = 0;
    zmq_setsockopt(xsub, ZMQ_RCVHWM, &zero, sizeof zero);
    zmq_setsockopt(xpub, ZMQ_SNDHWM, &zero, sizeof zero);
    if (bind_or_say(xsub, front) || bind_or_say(xpub, back))
        return 1;
    printf("ready\n");
    fflush(stdout);
    zmq_proxy(xsub, xpub, NULL);          /* until the process is killed */
    return 0;
}

static int run_pair(const char *front, const char *back, long count, size_t size)
{
    int subscribed[2], result[2];
    if (pipe(subscribed) || pipe(result))
        return 1;
    pid_t pid = fork();
    if (pid == 0) {                       /* the subscriber */
        void *ctx = zmq_ctx_new();
        void *sub = zmq_socket(ctx, ZMQ_SUB);
        int zero = 0;
        zmq_setsockopt(sub, ZMQ_RCVHWM, &zero, sizeof zero);
        zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
        if (zmq_connect(sub, back))
            return 1;
        char *buf = malloc(size + 1);
        int told = 0;
        for (long got = 0; got < count;) {
            int rc = zmq_recv(sub, buf, size, 0);
            if (rc < 0)
                return 1;
            if (rc == 1) {                /* a probe: the subscription is through */
                if (!told && signal_ready(subscribed[1]))
                    return 1;
                told = 1;
                continue;
            }
            got++;
        }
        int64_t last = now_ns();
        if (write(result[1], &last, sizeof last) != sizeof last)
            return 1;
        zmq_close(sub);
        zmq_ctx_term(ctx);
        return 0;
    }
    void *ctx = zmq_ctx_new();
    void *pub = zmq_socket(ctx, ZMQ_PUB);
    int zero = 0;
    zmq_setsockopt(pub, ZMQ_SNDHWM, &zero, sizeof zero);
    if (zmq_connect(pub, front))
        return 1;
    /* probes until the subscriber has one (it may also get a few after: it skips them) */
    for (;;) {
        zmq_send(pub, "p", 1, 0);
        fd_set fds;
        FD_ZERO(&fds);
        FD_SET(subscribed[0], &fds);
        struct timeval wait = {0, 1000};
        if (select(subscribed[0] + 1, &fds, NULL, NULL, &wait) > 0)
            break;
    }
    int64_t span;
    if (send_then_span(pub, size, count, result[0], &span))
        return 1;
    int status;
    waitpid(pid, &status, 0);
    printf("%ld %lld\n", count, (long long)span);
    zmq_close(pub);
    zmq_ctx_term(ctx);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "device") == 0)
        return run_device(argv[2], argv[3]);
    if (argc == 6 && strcmp(argv[1], "pair") == 0)
        return run_pair(argv[2], argv[3], atol(argv[4]), (size_t)atol(argv[5]));
    fprintf(stderr, "usage: %s device FRONT BACK | pair FRONT BACK COUNT SIZE\n", argv[0]);
    return 2;
}
