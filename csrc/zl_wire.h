/* The 16-byte wire header at the start of every zmqload message (docs/RECORDS.md).
 *
 *   offset 0: u64 little-endian  stream << 48 | seq
 *   offset 8: i64 little-endian  t_sent_ns (CLOCK_MONOTONIC)
 *
 * With topics (--topics), the first frame starts with the message's topic, a fixed number of
 * bytes per run (SUB filters match a prefix of the first frame), and the header follows it:
 * offset W, W = the run's topic width, at most ZL_MAX_TOPIC_WIDTH.
 *
 * Also the engine's per-message send statuses and send modes. zmqload/contract/wire.py
 * states the same values for Python; tests/test_contract.py checks they agree.
 *
 * The intended send time is not carried: it follows from seq and the run's shared
 * schedule, which keeps 16-byte messages possible.
 */
#ifndef ZL_WIRE_H
#define ZL_WIRE_H

#include <stdint.h>
#include <string.h>

#define ZL_HEADER_SIZE 16
#define ZL_SEQ_BITS 48
#define ZL_SEQ_MASK ((1ULL << ZL_SEQ_BITS) - 1)
/* Stream id reserved for warm-up messages sent before the measured run starts. */
#define ZL_WARMUP_STREAM 0xFFFFULL
/* Stream id the receiver records a foreign message under (--role consumer): one without
 * zmqload's header, its seq the low bits of nothing (0) and its t_sent 0. A message is
 * zmqload's when it is at least a header long, names a stream below ZL_MAX_STREAMS, and was
 * sent (by its header) no later than ZL_FOREIGN_SLACK_NS after it arrived and no earlier than
 * ZL_FOREIGN_AGE_NS before: one host's monotonic clock, so a random 16 bytes pass by chance
 * about once in 2^58 (docs/RECORDS.md "Foreign messages"). */
#define ZL_FOREIGN_STREAM 0xFFFEULL
#define ZL_FOREIGN_AGE_NS 3600000000000LL
#define ZL_FOREIGN_SLACK_NS 1000000LL
/* The widest topic before the header: the receiver reads topic and header into 64 bytes. */
#define ZL_MAX_TOPIC_WIDTH 48
/* Producers per run: the receiver marks each producer's warm-up in one 64-bit mask. */
#define ZL_MAX_STREAMS 64

/* Per-message status codes in the sends records (docs/RECORDS.md). */
enum zl_send_status { ZL_ST_OK = 0, ZL_ST_EAGAIN = 1, ZL_ST_TIMEOUT = 2, ZL_ST_ERROR = 3 };

/* What a send does at HWM: wait (retried in SNDTIMEO-sized steps), drop at once (EAGAIN),
 * or drop after the timeout given to the Sender (TIMEOUT, --sndtimeo-ms). */
enum zl_send_mode { ZL_MODE_BLOCK = 0, ZL_MODE_DONTWAIT = 1, ZL_MODE_TIMEOUT = 2 };

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define ZL_LE64(x) __builtin_bswap64(x)
#else
#define ZL_LE64(x) (x)
#endif

static inline void zl_put_header(char *buf, uint64_t stream, uint64_t seq, int64_t t_sent_ns)
{
    uint64_t word = ZL_LE64((stream << ZL_SEQ_BITS) | (seq & ZL_SEQ_MASK));
    uint64_t t = ZL_LE64((uint64_t)t_sent_ns);
    memcpy(buf, &word, 8);
    memcpy(buf + 8, &t, 8);
}

static inline void zl_put_t_sent(char *buf, int64_t t_sent_ns)
{
    uint64_t t = ZL_LE64((uint64_t)t_sent_ns);
    memcpy(buf + 8, &t, 8);
}

static inline uint64_t zl_get_word(const char *buf)
{
    uint64_t word;
    memcpy(&word, buf, 8);
    return ZL_LE64(word);
}

static inline int64_t zl_get_t_sent(const char *buf)
{
    uint64_t t;
    memcpy(&t, buf + 8, 8);
    return (int64_t)ZL_LE64(t);
}

/* A reply of a service (req-rep) echoes its request when it begins with the request's whole
 * 16-byte header (a REP that sends the request back, or puts the header before its own payload);
 * any other reply is matched by order: REQ has one request in flight, so a reply answers the
 * request just sent whatever it carries (docs/RECORDS.md "A service of yours"). */
static inline int zl_reply_echoes(const char *reply, int reply_len, const char *request)
{
    return reply_len >= ZL_HEADER_SIZE && memcmp(reply, request, ZL_HEADER_SIZE) == 0;
}

#endif
