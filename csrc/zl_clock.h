/* Monotonic clock and open-loop pacing helpers for the engine loops.
 *
 * CLOCK_MONOTONIC is shared by every process on one host, so a t_sent stamped by a
 * producer process and a t_recv stamped by a consumer process are directly comparable.
 */
#ifndef ZL_CLOCK_H
#define ZL_CLOCK_H

#include <stdint.h>
#include <time.h>
#include <sched.h>
#include <errno.h>

static inline int64_t zl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The producer's pacing: sleep through long waits, spin through short ones: the kernel's wake-up latency
 * (tens of microseconds) would otherwise make rates above ~20k msg/s unreachable. */
#define ZL_SPIN_BELOW_NS 80000LL
#define ZL_YIELD_ABOVE_NS 4000LL

static inline int64_t zl_wait_until(int64_t due_ns)
{
    int64_t now = zl_now_ns();
    while (now < due_ns) {
        int64_t left = due_ns - now;
        if (left > ZL_SPIN_BELOW_NS) {
            int64_t target = due_ns - ZL_SPIN_BELOW_NS / 2;
            struct timespec ts;
            ts.tv_sec = target / 1000000000LL;
            ts.tv_nsec = target % 1000000000LL;
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        } else if (left > ZL_YIELD_ABOVE_NS) {
            /* Let the other side of a 2-core loopback run while we wait. */
            sched_yield();
        }
        now = zl_now_ns();
    }
    return now;
}

/* Simulated work (the consumer's --consumer-delay-us) until due_ns. Work is CPU time: spin on
 * the clock, never yield. zl_wait_until's sched_yield would hand the core to another runnable
 * thread (a pacing producer, libzmq's I/O threads) in the middle of the "work", so a message
 * would cost more than asked. Work longer than ZL_WORK_SLEEP_ABOVE_NS sleeps until its last
 * ZL_SPIN_BELOW_NS and spins the rest: at <= 1k msg/s a kernel wake-up that late is rare and
 * a few percent at most, and a consumer spinning milliseconds per message would take a whole
 * core from the I/O threads being measured (such work stands for waiting on something
 * downstream, which does not hold a core either). */
#define ZL_WORK_SLEEP_ABOVE_NS 1000000LL

static inline int64_t zl_work_until(int64_t due_ns)
{
    int64_t now = zl_now_ns();
    if (due_ns - now > ZL_WORK_SLEEP_ABOVE_NS) {
        int64_t target = due_ns - ZL_SPIN_BELOW_NS;
        struct timespec ts;
        ts.tv_sec = target / 1000000000LL;
        ts.tv_nsec = target % 1000000000LL;
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        now = zl_now_ns();
    }
    while (now < due_ns)
        now = zl_now_ns();
    return now;
}

/* Scheduled time of message `seq` on an open-loop schedule of `rate` msg/s from t0.
 * Integer arithmetic so that producers, consumers and Spark all get the same value. */
static inline int64_t zl_intended_ns(int64_t t0_ns, int64_t seq, int64_t rate)
{
    return t0_ns + (int64_t)(((__int128)seq * 1000000000LL) / rate);
}

#endif
