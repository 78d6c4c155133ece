/* The end of a receive slice, delivered to the receiving thread as a signal.
 *
 * A blocking zmq_recv with ZMQ_RCVTIMEO arms a kernel timer for each wait and cancels it at
 * each wake-up; on the development VM that made every paced message over ipc arrive 4-8 us
 * later than a receive without a timeout (docs/BENCHMARKS.md 1.7, bare C both ways). So the
 * receive loop blocks without a timeout, and one POSIX timer of its own thread interrupts the
 * wait (EINTR) at the slice's end, then again every `every_ns` (a signal that lands just
 * before the wait began is followed by another). The handler does nothing and the signal is
 * private to the engine: SIGRTMIN + ZL_SLICE_SIGNAL_OFFSET, taken only while no one else has
 * a handler for it. Linux only (SIGEV_THREAD_ID); where any step fails, start returns -1 and
 * the caller keeps ZMQ_RCVTIMEO.
 */
#ifndef ZL_SLICE_TIMER_H
#define ZL_SLICE_TIMER_H

#include <stdint.h>
#include <string.h>
#include <signal.h>
#include <time.h>

#if defined(__linux__) && defined(SIGEV_THREAD_ID)
#include <unistd.h>
#include <sys/syscall.h>
#define ZL_HAVE_SLICE_TIMER 1
#else
#define ZL_HAVE_SLICE_TIMER 0
#endif

#define ZL_SLICE_SIGNAL_OFFSET 5

/* The signal's number, -1 where there is no slice timer. */
static inline int zl_slice_signal_number(void)
{
#if ZL_HAVE_SLICE_TIMER
    return SIGRTMIN + ZL_SLICE_SIGNAL_OFFSET;
#else
    return -1;
#endif
}

typedef struct {
#if ZL_HAVE_SLICE_TIMER
    timer_t id;
#endif
    long tid;           /* the thread the timer signals; 0: no timer made */
    int armed;
} zl_slice_timer;

#if ZL_HAVE_SLICE_TIMER
static void zl_slice_signal_noop(int sig)
{
    (void)sig;
}

/* The signal, with the do-nothing handler installed (no SA_RESTART: the blocked receive must
 * return); -1 where someone else handles it. Checked as each timer is made (the caller holds
 * the GIL: one thread at a time). */
static int zl_slice_signal(void)
{
    int sig = zl_slice_signal_number();
    struct sigaction old, sa;
    if (sigaction(sig, NULL, &old) != 0)
        return -1;
    if (old.sa_flags & SA_SIGINFO)
        return -1;
    if (old.sa_handler == zl_slice_signal_noop)
        return sig;
    if (old.sa_handler != SIG_DFL)
        return -1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = zl_slice_signal_noop;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, NULL) == 0 ? sig : -1;
}
#endif

/* Arm the calling thread's timer: first at end_ns (CLOCK_MONOTONIC), then every every_ns.
 * 0 if armed, -1 if the caller must fall back to ZMQ_RCVTIMEO. */
static inline int zl_slice_timer_start(zl_slice_timer *t, int64_t end_ns, int64_t every_ns)
{
#if ZL_HAVE_SLICE_TIMER
    long tid = (long)syscall(SYS_gettid);
    if (t->tid != tid) {
        struct sigevent sev;
        int sig = zl_slice_signal();
        if (sig < 0)
            return -1;
        if (t->tid != 0)
            timer_delete(t->id);
        t->tid = 0;
        memset(&sev, 0, sizeof sev);
        sev.sigev_notify = SIGEV_THREAD_ID;
        sev.sigev_signo = sig;
        sev._sigev_un._tid = (pid_t)tid;
        if (timer_create(CLOCK_MONOTONIC, &sev, &t->id) != 0)
            return -1;
        t->tid = tid;
    }
    struct itimerspec when;
    when.it_value.tv_sec = end_ns / 1000000000LL;
    when.it_value.tv_nsec = end_ns % 1000000000LL;
    when.it_interval.tv_sec = every_ns / 1000000000LL;
    when.it_interval.tv_nsec = every_ns % 1000000000LL;
    if (timer_settime(t->id, TIMER_ABSTIME, &when, NULL) != 0)
        return -1;
    t->armed = 1;
    return 0;
#else
    (void)t; (void)end_ns; (void)every_ns;
    return -1;
#endif
}

static inline void zl_slice_timer_stop(zl_slice_timer *t)
{
#if ZL_HAVE_SLICE_TIMER
    if (t->armed) {
        struct itimerspec off;
        memset(&off, 0, sizeof off);
        timer_settime(t->id, 0, &off, NULL);
        t->armed = 0;
    }
#else
    (void)t;
#endif
}

static inline void zl_slice_timer_free(zl_slice_timer *t)
{
#if ZL_HAVE_SLICE_TIMER
    zl_slice_timer_stop(t);
    if (t->tid != 0)
        timer_delete(t->id);
    t->tid = 0;
#else
    (void)t;
#endif
}

#endif
