/* The yardstick for zmqload's engine: a minimal PUSH -> PULL over one libzmq, no recording.
 *
 *   baseline_pushpull ENDPOINT COUNT SIZE [PLACEMENT]
 *
 * Forks a PULL receiver (binds) and a PUSH sender (connects); the sender stamps nothing,
 * the receiver only counts. Prints "msgs elapsed_ns" where elapsed runs from the first send
 * to the last receive on CLOCK_MONOTONIC (the same span zmqload reports as throughput).
 *
 * PLACEMENT (optional, for finding what the two throughput modes are): four CPU numbers,
 * e.g. "0011", for the sender's thread, the sender's libzmq I/O thread, the receiver's
 * thread and the receiver's I/O thread. Without it the scheduler places all four.
 *
 * BASELINE_CURVE=1 in the environment: CURVE between the two, the PULL (it binds) the server,
 * both key pairs made before the fork so the sender knows the server's public key.
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

/* Pin the calling thread to `cpu` and the I/O thread that `ctx` will start to `io_cpu`
 * (the I/O thread starts with the first socket, so this runs before it). */
static void place(void *ctx, const char *placement, int which)
{
    if (placement == NULL)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(placement[2 * which] - '0', &set);
    sched_setaffinity(0, sizeof set, &set);
    zmq_ctx_set(ctx, ZMQ_THREAD_AFFINITY_CPU_ADD, placement[2 * which + 1] - '0');
}

int main(int argc, char **argv)
{
    if (argc != 4 && !(argc == 5 && strlen(argv[4]) == 4)) {
        fprintf(stderr, "usage: %s ENDPOINT COUNT SIZE [PLACEMENT, e.g. 0011]\n", argv[0]);
        return 2;
    }
    const char *placement = argc == 5 ? argv[4] : NULL;
    const char *endpoint = argv[1];
    long count = atol(argv[2]);
    size_t size = (size_t)atol(argv[3]);
    int ready[2], result[2];
    if (pipe(ready) || pipe(result))
        return 1;
    const char *curve_env = getenv("BASELINE_CURVE");
    int curve = curve_env != NULL && strcmp(curve_env, "1") == 0;
    char server_public[41], server_secret[41], client_public[41], client_secret[41];
    if (curve && (zmq_curve_keypair(server_public, server_secret) || zmq_curve_keypair(client_public, client_secret))) {
        fprintf(stderr, "zmq_curve_keypair: %s\n", zmq_strerror(zmq_errno()));
        return 1;
    }
    int one = 1;

    pid_t pid = fork();
    if (pid == 0) {                       /* receiver */
        void *ctx = zmq_ctx_new();
        place(ctx, placement, 1);
        void *pull = zmq_socket(ctx, ZMQ_PULL);
        if (curve && (zmq_setsockopt(pull, ZMQ_CURVE_SERVER, &one, sizeof one)
                      || zmq_setsockopt(pull, ZMQ_CURVE_SECRETKEY, server_secret, 40)))
            return 1;
        if (bind_or_say(pull, endpoint))
            return 1;
        if (signal_ready(ready[1]))
            return 1;
        char *buf = malloc(size);
        int64_t last = 0;
        for (long i = 0; i < count; i++) {
            if (zmq_recv(pull, buf, size, 0) < 0)
                return 1;
        }
        last = now_ns();
        if (write(result[1], &last, sizeof last) != sizeof last)
            return 1;
        zmq_close(pull);
        zmq_ctx_term(ctx);
        free(buf);
        return 0;
    }

    if (await_ready(ready[0]))
        return 1;
    void *ctx = zmq_ctx_new();
    place(ctx, placement, 0);
    void *push = zmq_socket(ctx, ZMQ_PUSH);
    if (curve && (zmq_setsockopt(push, ZMQ_CURVE_SERVERKEY, server_public, 40)
                  || zmq_setsockopt(push, ZMQ_CURVE_PUBLICKEY, client_public, 40)
                  || zmq_setsockopt(push, ZMQ_CURVE_SECRETKEY, client_secret, 40)))
        return 1;
    if (zmq_connect(push, endpoint) != 0)
        return 1;
    usleep(100000);                       /* let the connection come up, as zmqload's warm-up does */
    int64_t span;
    if (send_then_span(push, size, count, result[0], &span))
        return 1;
    int status;
    waitpid(pid, &status, 0);
    zmq_close(push);
    zmq_ctx_term(ctx);
    printf("%ld %lld\n", count, (long long)span);
    return 0;
}
