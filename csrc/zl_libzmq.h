/* The part of libzmq's stable 4.x C API the engine uses, declared here once, and the table of
 * function pointers through which the engine calls whichever libzmq a run asks for
 * (`--libzmq`): the library is opened with dlopen when a process first needs it, not linked at
 * build time. The build needs no zmq.h and the extension links to no libzmq.
 *
 * The numbers below are libzmq 4.x's ABI, the same in every 4.x zmq.h that has them (the
 * handshake events since 4.3); tests/test_libzmq.py checks each against pyzmq's constants. `zmq_msg_t` is 64 bytes aligned
 * on a pointer, as in every 4.x release. One translation unit includes this file (the engine's
 * generated C), so the table is a static there.
 */
#ifndef ZL_LIBZMQ_H
#define ZL_LIBZMQ_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE    /* dladdr's Dl_info; Python.h, included first by the engine, defines it too */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* socket types */
#define ZMQ_PAIR 0
#define ZMQ_PUB 1
#define ZMQ_SUB 2
#define ZMQ_REQ 3
#define ZMQ_REP 4
#define ZMQ_DEALER 5
#define ZMQ_ROUTER 6
#define ZMQ_PULL 7
#define ZMQ_PUSH 8
#define ZMQ_XPUB 9
#define ZMQ_XSUB 10

/* socket options */
#define ZMQ_ROUTING_ID 5
#define ZMQ_SUBSCRIBE 6
#define ZMQ_SNDBUF 11
#define ZMQ_RCVBUF 12
#define ZMQ_RCVMORE 13
#define ZMQ_FD 14
#define ZMQ_EVENTS 15
#define ZMQ_LINGER 17
#define ZMQ_SNDHWM 23
#define ZMQ_RCVHWM 24
#define ZMQ_RCVTIMEO 27
#define ZMQ_SNDTIMEO 28
#define ZMQ_LAST_ENDPOINT 32
#define ZMQ_ROUTER_MANDATORY 33
#define ZMQ_IMMEDIATE 39
#define ZMQ_MECHANISM 43
#define ZMQ_CURVE_SERVER 47
#define ZMQ_CURVE_PUBLICKEY 48
#define ZMQ_CURVE_SECRETKEY 49
#define ZMQ_CURVE_SERVERKEY 50
#define ZMQ_REQ_CORRELATE 52
#define ZMQ_REQ_RELAXED 53
#define ZMQ_CONFLATE 54
#define ZMQ_ROUTER_HANDOVER 56
#define ZMQ_XPUB_NODROP 69
#define ZMQ_HEARTBEAT_IVL 75
#define ZMQ_HEARTBEAT_TTL 76
#define ZMQ_HEARTBEAT_TIMEOUT 77

/* context options */
#define ZMQ_IO_THREADS 1
#define ZMQ_MAX_SOCKETS 2

/* send/recv flags, poll events */
#define ZMQ_DONTWAIT 1
#define ZMQ_SNDMORE 2
#define ZMQ_POLLIN 1
#define ZMQ_POLLOUT 2

/* monitor events of a security handshake */
#define ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL 0x0800
#define ZMQ_EVENT_HANDSHAKE_SUCCEEDED 0x1000
#define ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL 0x2000
#define ZMQ_EVENT_HANDSHAKE_FAILED_AUTH 0x4000

/* libzmq's own error numbers, above the system's */
#define ZL_ZMQ_HAUSNUMERO 156384712
#define EFSM (ZL_ZMQ_HAUSNUMERO + 51)
#define ETERM (ZL_ZMQ_HAUSNUMERO + 53)

typedef struct zmq_msg_t {
    _Alignas(void *) unsigned char bytes[64];
} zmq_msg_t;

typedef struct zmq_pollitem_t {
    void *socket;
    int fd;
    short events;
    short revents;
} zmq_pollitem_t;

/* Every function the engine calls: one row each (name, return type, parameters). The table's
 * fields are f_<name>: pasted with ##, so the macros below never expand inside it. */
#define ZL_LIBZMQ_FUNCTIONS(F)                                                                  \
    F(zmq_version, void, (int *major, int *minor, int *patch))                                  \
    F(zmq_has, int, (const char *capability))                                                   \
    F(zmq_curve_keypair, int, (char *z85_public_key, char *z85_secret_key))                     \
    F(zmq_errno, int, (void))                                                                   \
    F(zmq_strerror, const char *, (int errnum))                                                 \
    F(zmq_ctx_new, void *, (void))                                                              \
    F(zmq_ctx_term, int, (void *context))                                                       \
    F(zmq_ctx_set, int, (void *context, int option, int optval))                                \
    F(zmq_ctx_get, int, (void *context, int option))                                            \
    F(zmq_socket, void *, (void *context, int type))                                            \
    F(zmq_close, int, (void *socket))                                                           \
    F(zmq_setsockopt, int, (void *socket, int option, const void *value, size_t len))           \
    F(zmq_getsockopt, int, (void *socket, int option, void *value, size_t *len))                \
    F(zmq_bind, int, (void *socket, const char *endpoint))                                      \
    F(zmq_connect, int, (void *socket, const char *endpoint))                                   \
    F(zmq_socket_monitor, int, (void *socket, const char *endpoint, int events))                \
    F(zmq_send, int, (void *socket, const void *buf, size_t len, int flags))                    \
    F(zmq_recv, int, (void *socket, void *buf, size_t len, int flags))                          \
    F(zmq_msg_init, int, (zmq_msg_t *msg))                                                      \
    F(zmq_msg_recv, int, (zmq_msg_t *msg, void *socket, int flags))                             \
    F(zmq_msg_close, int, (zmq_msg_t *msg))                                                     \
    F(zmq_msg_size, size_t, (const zmq_msg_t *msg))                                             \
    F(zmq_msg_data, void *, (zmq_msg_t *msg))                                                   \
    F(zmq_poll, int, (zmq_pollitem_t *items, int nitems, long timeout))                         \
    F(zmq_proxy_steerable, int, (void *frontend, void *backend, void *capture, void *control))

#define ZL_FIELD(name, ret, params) ret (*f_##name) params;
typedef struct zl_libzmq_table {
    ZL_LIBZMQ_FUNCTIONS(ZL_FIELD)
} zl_libzmq_table;
#undef ZL_FIELD

static zl_libzmq_table zl_libzmq;
static void *zl_libzmq_handle = NULL;

/* The engine's calls go through the table; the call sites read as libzmq's own names. */
#define zmq_version (zl_libzmq.f_zmq_version)
#define zmq_has (zl_libzmq.f_zmq_has)
#define zmq_curve_keypair (zl_libzmq.f_zmq_curve_keypair)
#define zmq_errno (zl_libzmq.f_zmq_errno)
#define zmq_strerror (zl_libzmq.f_zmq_strerror)
#define zmq_ctx_new (zl_libzmq.f_zmq_ctx_new)
#define zmq_ctx_term (zl_libzmq.f_zmq_ctx_term)
#define zmq_ctx_set (zl_libzmq.f_zmq_ctx_set)
#define zmq_ctx_get (zl_libzmq.f_zmq_ctx_get)
#define zmq_socket (zl_libzmq.f_zmq_socket)
#define zmq_close (zl_libzmq.f_zmq_close)
#define zmq_setsockopt (zl_libzmq.f_zmq_setsockopt)
#define zmq_getsockopt (zl_libzmq.f_zmq_getsockopt)
#define zmq_bind (zl_libzmq.f_zmq_bind)
#define zmq_connect (zl_libzmq.f_zmq_connect)
#define zmq_socket_monitor (zl_libzmq.f_zmq_socket_monitor)
#define zmq_send (zl_libzmq.f_zmq_send)
#define zmq_recv (zl_libzmq.f_zmq_recv)
#define zmq_msg_init (zl_libzmq.f_zmq_msg_init)
#define zmq_msg_recv (zl_libzmq.f_zmq_msg_recv)
#define zmq_msg_close (zl_libzmq.f_zmq_msg_close)
#define zmq_msg_size (zl_libzmq.f_zmq_msg_size)
#define zmq_msg_data (zl_libzmq.f_zmq_msg_data)
#define zmq_poll (zl_libzmq.f_zmq_poll)
#define zmq_proxy_steerable (zl_libzmq.f_zmq_proxy_steerable)

static int zl_libzmq_loaded(void) { return zl_libzmq_handle != NULL; }

/* Opens `path` and fills the table. 0 on success; otherwise -1 and one line in `err` (what is
 * wrong with the file: not loadable, a function it lacks, not a libzmq 4.x). Nothing changes on
 * failure, and a process keeps the first library it loaded. */
static int zl_libzmq_load(const char *path, char *err, size_t err_len) {
    zl_libzmq_table t;
    void *handle;
    const char *why;
    int major = 0, minor = 0, patch = 0;

    if (zl_libzmq_handle != NULL) {
        snprintf(err, err_len, "a libzmq is already loaded in this process");
        return -1;
    }
    handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        why = dlerror();
        snprintf(err, err_len, "cannot load it: %s", why ? why : "unknown reason");
        return -1;
    }
#define ZL_BIND(name, ret, params)                                                              \
    *(void **)(&t.f_##name) = dlsym(handle, #name);                                                 \
    if (t.f_##name == NULL) {                                                                       \
        snprintf(err, err_len, "it has no %s: not a libzmq 4.x", #name);                        \
        dlclose(handle);                                                                        \
        return -1;                                                                              \
    }
    ZL_LIBZMQ_FUNCTIONS(ZL_BIND)
#undef ZL_BIND
    t.f_zmq_version(&major, &minor, &patch);
    if (major != 4) {
        snprintf(err, err_len, "it is libzmq %d.%d.%d: zmqload runs libzmq 4.x", major, minor, patch);
        dlclose(handle);
        return -1;
    }
    zl_libzmq = t;
    zl_libzmq_handle = handle;
    return 0;
}

/* The file the dynamic linker actually opened for the table (a name like "libzmq.so.5" is
 * resolved through the linker's search path): NULL when nothing is loaded. */
static const char *zl_libzmq_file(void) {
    Dl_info info;
    if (zl_libzmq_handle == NULL || dladdr(*(void **)(&zl_libzmq.f_zmq_version), &info) == 0)
        return NULL;
    return info.dli_fname;
}

/* What a library is without loading it for the engine: its version, the file the linker opened
 * (in `file`) and, for each of `n` capability names, zmq_has's answer (in `has`). 0 on success;
 * otherwise -1 and one line in `err`, as zl_libzmq_load. */
static int zl_libzmq_probe(const char *path, int version[3], const char *const *names, int *has, int n,
                           char *file, size_t file_len, char *err, size_t err_len) {
    void (*version_fn)(int *, int *, int *);
    int (*has_fn)(const char *);
    Dl_info info;
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char *why;
    int i;

    if (handle == NULL) {
        why = dlerror();
        snprintf(err, err_len, "cannot load it: %s", why ? why : "unknown reason");
        return -1;
    }
    *(void **)(&version_fn) = dlsym(handle, "zmq_version");
    *(void **)(&has_fn) = dlsym(handle, "zmq_has");
    if (version_fn == NULL || has_fn == NULL) {
        snprintf(err, err_len, "it has no %s: not a libzmq 4.x", version_fn == NULL ? "zmq_version" : "zmq_has");
        dlclose(handle);
        return -1;
    }
    version_fn(&version[0], &version[1], &version[2]);
    for (i = 0; i < n; i++)
        has[i] = has_fn(names[i]) == 1;
    file[0] = 0;
    if (dladdr(*(void **)(&version_fn), &info) != 0 && info.dli_fname != NULL)
        snprintf(file, file_len, "%s", info.dli_fname);
    dlclose(handle);
    return 0;
}

#endif
