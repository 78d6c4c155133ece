/* Monotonic clock and open-loop pacing helpers for the engine loops.
 *
 * CLOCK_MONOTONIC is shared by every process on one host, so a t_sent stamped by a
 * producer process and a t_recv stamped by a consumer process are directly comparable.
 * Across hosts (run --master) a process's clock is moved onto the reference host's by the
 * offset measured before t0 (runner/clocks.py): every stamp, deadline and t0 of the
 * engine is then on that one clock; only the kernel's absolute sleeps and timers are given
 * this host's own time back (zl_host_ns).
 */
#ifndef ZL_CLOCK_H
#define ZL_CLOCK_H

#include <stdint.h>
#include <time.h>
#include <sched.h>
#include <errno.h>

/* This host's CLOCK_MONOTONIC minus the reference host's; 0 on the reference host and in
 * every run of one host. Set once per process before its loops (_engine.set_clock_offset). */
static int64_t zl_clock_offset_ns = 0;

static inline int64_t zl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec - zl_clock_offset_ns;
}

/* A time on the reference clock as this host's CLOCK_MONOTONIC: what the kernel's
 * absolute deadlines (clock_nanosleep, timer_settime) are given. */
static inline int64_t zl_host_ns(int64_t ns)
{
    return ns + zl_clock_offset_ns;
}

/* The loops' per-message stamps. Where the kernel's clock is itself the TSC (x86-64,
 * clocksource "tsc", synchronised across CPUs), a stamp is CLOCK_MONOTONIC computed from one
 * unfenced rdtsc (~8 ns) instead of a vDSO clock_gettime (~25 ns here, with its fence a
 * quarter of an unpaced loop's CPU per message): the ns of the slice's anchor, read with
 * clock_gettime at the slice's start, plus the ticks since at the rate measured between
 * two anchors at least ZL_RATE_BASE_NS apart (so NTP's slewing is followed; an anchor is
 * good to ~15 ns, so a stamp 20 ms past its anchor to ~6 ns). Until such a pair exists
 * (a loop's first base is an anchor taken when the engine is imported), and where ticks are
 * not the clock, a stamp is clock_gettime itself. Stamps never go backwards within a loop.
 * The ticks since the anchor are scaled by an integer multiply (the rate in 32.32 fixed point,
 * 0.01 ns off over a 20 ms slice), not through a double: a sender's stamp goes into the header
 * its zmq_send copies at once, so the conversion's latency is the send's; 1.04x unpaced
 * msg/s at 16 B here (docs/BENCHMARKS.md 1.9). */
#if defined(__x86_64__)
#include <x86intrin.h>
static inline int64_t zl_ticks(void) { return (int64_t)__rdtsc(); }
#define ZL_HAVE_TICKS 1
#else
static inline int64_t zl_ticks(void) { return 0; }
#define ZL_HAVE_TICKS 0
#endif

#define ZL_RATE_BASE_NS 50000000LL

typedef struct {
    int enabled;                    /* ticks are the clock (set once from the clocksource) */
    int64_t anchor_ns, anchor_ticks;
    int64_t base_ns, base_ticks;    /* the older anchor of the rate's pair */
    double ns_per_tick;             /* 0: no rate yet, stamps read the clock */
    int64_t mult;                   /* ns_per_tick in 32.32 fixed point: the stamp's integer multiply */
    int64_t anchor_width, base_width;   /* ticks between the reads around each anchor's clock */
    double rate_error;              /* the rate's relative error bound from its pair's widths */
    int64_t last;
} zl_stamp_clock;

static inline void zl_stamp_anchor(zl_stamp_clock *c)
{
    if (!c->enabled)
        return;
    /* The tightest of three readings: the first after a sleep finds the clock's data cold,
     * and one read across a preemption would misplace the anchor. */
    int64_t t = 0, ns = 0, width = INT64_MAX;
    for (int i = 0; i < 3; i++) {
        int64_t t0 = zl_ticks();
        int64_t n = zl_now_ns();
        int64_t t1 = zl_ticks();
        if (t1 - t0 < width) {
            width = t1 - t0;
            t = t0 + width / 2;
            ns = n;
        }
    }
    if (c->base_ticks == 0) {
        c->base_ns = ns;
        c->base_ticks = t;
        c->base_width = width;
    } else if (ns - c->base_ns >= ZL_RATE_BASE_NS && t > c->base_ticks) {
        c->ns_per_tick = (double)(ns - c->base_ns) / (double)(t - c->base_ticks);
        c->mult = (int64_t)(c->ns_per_tick * 4294967296.0 + 0.5);
        c->rate_error = (double)(c->base_width + width) / 2.0 / (double)(t - c->base_ticks);
        c->base_ns = ns;
        c->base_ticks = t;
        c->base_width = width;
    }
    c->anchor_ns = ns;
    c->anchor_ticks = t;
    c->anchor_width = width;
}

static inline int64_t zl_stamp(zl_stamp_clock *c)
{
    int64_t ns;
    if (c->ns_per_tick == 0)
        ns = zl_now_ns();
    else
        ns = c->anchor_ns + (int64_t)(((__int128)(zl_ticks() - c->anchor_ticks) * c->mult) >> 32);
    if (ns < c->last)
        ns = c->last;
    c->last = ns;
    return ns;
}

/* How far a stamp taken at `ticks` can lie from the clock, given the clock's rate has not
 * changed since the rate's pair: the anchor pairs its clock reading with the middle of the
 * ticks read around it (off by up to half their width), the rate carries its pair's widths
 * over the ticks since the anchor, and the stamp is truncated to whole ns. 0 where a stamp
 * is a clock reading itself. What the tests hold every stamp to. */
static inline int64_t zl_stamp_error_ns(const zl_stamp_clock *c, int64_t ticks)
{
    if (c->ns_per_tick == 0)
        return 0;
    double elapsed = (double)(ticks - c->anchor_ticks);
    if (elapsed < 0)
        elapsed = -elapsed;
    return (int64_t)(((double)c->anchor_width / 2.0 + elapsed * c->rate_error) * c->ns_per_tick) + 2;
}

/* The producer's pacing: sleep through long waits, spin through short ones: the kernel's wake-up latency
 * (tens of microseconds) would otherwise put every send that late, and rates above ~20k msg/s out of step.
 * With spin_below_ns 0 it sleeps to the due time itself (--pacing sleep): each send as late as the kernel
 * wakes the thread, as an application's sleeping sender; the spin changes how the kernel places the other
 * side's wake-ups, and with it the one-way latency (docs/BENCHMARKS.md 1.7). */
#define ZL_SPIN_BELOW_NS 80000LL
#define ZL_YIELD_ABOVE_NS 4000LL

static inline int64_t zl_wait_until(int64_t due_ns, int64_t spin_below_ns)
{
    int64_t now = zl_now_ns();
    while (now < due_ns) {
        int64_t left = due_ns - now;
        if (left > spin_below_ns) {
            int64_t target = zl_host_ns(due_ns - spin_below_ns / 2);
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
        int64_t target = zl_host_ns(due_ns - ZL_SPIN_BELOW_NS);
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
