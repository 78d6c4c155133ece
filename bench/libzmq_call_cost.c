/* What the engine's call into libzmq through its dlopen table (csrc/zl_libzmq.h) costs beside a
 * call linked at build time (through the PLT): the same libzmq function called 10^6 times each
 * way, counted by callgrind, one loop at a time:
 *   cc -O2 -o /tmp/call_cost bench/libzmq_call_cost.c -lzmq -ldl
 *   valgrind --tool=callgrind --toggle-collect=linked ... /tmp/call_cost
 *   valgrind --tool=callgrind --toggle-collect=through_table ... /tmp/call_cost */
#include <dlfcn.h>
#include <stdio.h>
#include <zmq.h>

#define CALLS 1000000

static size_t (*table_msg_size)(const zmq_msg_t *);

size_t __attribute__((noinline)) linked(zmq_msg_t *m)
{
    size_t s = 0;
    for (int i = 0; i < CALLS; i++)
        s += zmq_msg_size(m);
    return s;
}

size_t __attribute__((noinline)) through_table(zmq_msg_t *m)
{
    size_t s = 0;
    for (int i = 0; i < CALLS; i++)
        s += table_msg_size(m);
    return s;
}

int main(void)
{
    void *lib = dlopen("libzmq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return 1;
    table_msg_size = (size_t (*)(const zmq_msg_t *))dlsym(lib, "zmq_msg_size");
    zmq_msg_t m;
    zmq_msg_init_size(&m, 64);
    printf("%zu %zu\n", linked(&m), through_table(&m));
    zmq_msg_close(&m);
    return 0;
}
