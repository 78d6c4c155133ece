/* libzmq's own inproc throughput: PUSH -> PULL over inproc:// between two threads sharing one
 * context, no recording (the yardstick for zmqload --transport inproc, whose workers are
 * threads of one process).
 *
 *   baseline_inproc COUNT SIZE
 *
 * Prints "msgs elapsed_ns first_ns last_ns", elapsed from the first send (first_ns) to the last
 * receive (last_ns) on CLOCK_MONOTONIC.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "baseline_common.h"

static void *ctx;
static long count;
static size_t size;
static int64_t last;

static void *receive(void *pull)
{
    char *buf = malloc(size);
    for (long i = 0; i < count; i++)
        if (zmq_recv(pull, buf, size, 0) < 0)
            exit(1);
    last = now_ns();
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s COUNT SIZE\n", argv[0]);
        return 2;
    }
    count = atol(argv[1]);
    size = (size_t)atol(argv[2]);
    ctx = zmq_ctx_new();
    void *pull = zmq_socket(ctx, ZMQ_PULL);
    if (zmq_bind(pull, "inproc://baseline") != 0)
        return 1;
    void *push = zmq_socket(ctx, ZMQ_PUSH);
    if (zmq_connect(push, "inproc://baseline") != 0)
        return 1;
    pthread_t thread;
    pthread_create(&thread, NULL, receive, pull);
    char *buf = calloc(size, 1);
    usleep(100000);
    int64_t first = now_ns();
    for (long i = 0; i < count; i++)
        if (zmq_send(push, buf, size, 0) < 0)
            return 1;
    pthread_join(thread, NULL);
    printf("%ld %lld %lld %lld\n", count, (long long)(last - first), (long long)first, (long long)last);
    zmq_close(push);
    zmq_close(pull);
    zmq_ctx_term(ctx);
    free(buf);
    return 0;
}
