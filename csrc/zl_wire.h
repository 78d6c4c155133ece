/* The 16-byte wire header at the start of every zmqload message (docs/RECORDS.md).
 *
 *   offset 0: u64 little-endian  seq (bits 0-39), check low byte (40-47), stream (48-55),
 *                                check high byte (56-63)
 *   offset 8: i64 little-endian  t_sent_ns (CLOCK_MONOTONIC)
 *
 * `check` is zl_check of the other fields and the run's header key: 16 bits that zeros, small
 * integers, text and stale buffers do not carry by accident, and that a peer without the key of a
 * run of zmqload's own forges once in 65,536 tries. A receiver stores the word without it
 * (stream << 48 | seq: the records' layout), so ZL_SEQ_BITS stays the records' split.
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
/* On the wire seq has 40 bits (a trillion messages per producer), the stream 8. */
#define ZL_WIRE_SEQ_BITS 40
#define ZL_WIRE_SEQ_MASK ((1ULL << ZL_WIRE_SEQ_BITS) - 1)
/* Stream id reserved for warm-up messages sent before the measured run starts. */
#define ZL_WARMUP_STREAM 0xFFULL
/* Stream id the receiver records a foreign message under: seq 0, t_sent 0. */
#define ZL_FOREIGN_STREAM 0xFFFEULL
/* The widest topic before the header: the receiver reads topic and header into 64 bytes. */
#define ZL_MAX_TOPIC_WIDTH 48
/* Producers per run: the receiver marks each producer's warm-up in one 64-bit mask. */
#define ZL_MAX_STREAMS 64

/* Plausibility (zl_classify): a message of the run was sent no earlier than ZL_LOOKBACK_NS before
 * its receiver started, no later than ZL_FUTURE_NS after it arrived (clocks of a placed run agree
 * to well within that), and its seq s no earlier than s / rate after the run's origin, where rate
 * is the run's pace or, unpaced or unknown, ZL_MAX_RATE (3x the fastest producer measured). */
#define ZL_LOOKBACK_NS 60000000000LL
#define ZL_FUTURE_NS 1000000000LL
#define ZL_MAX_RATE (1LL << 25)

/* What a received first frame is. */
enum zl_kind { ZL_FOREIGN = 0, ZL_OURS = 1, ZL_WARMUP = 2, ZL_IMPLAUSIBLE = 3 };

/* What a receiver accepts: its run's key and producers, and the run's clock and pace. */
typedef struct {
    uint64_t key;           /* the run's header key (0: the public key, for producers of yours) */
    uint64_t streams;       /* producers: streams 0 .. streams - 1 */
    int64_t t_floor_ns;     /* nothing of the run was sent earlier */
    int64_t t_origin_ns;    /* seq 0's earliest send: the run's t0, else t_floor_ns */
    int64_t rate;           /* msg/s per producer at most */
} zl_expect;
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

/* 16 bits of the other 12 header bytes and the key: multiply-xorshift, 0x5A5A for all zeros. */
static inline uint64_t zl_check(uint64_t stream, uint64_t seq, int64_t t_sent_ns, uint64_t key)
{
    uint64_t h = (((stream & 0xFFULL) << ZL_SEQ_BITS) | (seq & ZL_WIRE_SEQ_MASK)) ^ key;
    h ^= (uint64_t)t_sent_ns * 0x9E3779B97F4A7C15ULL;
    h *= 0xC2B2AE3D27D4EB4FULL;
    return ((h >> 48) ^ 0x5A5AULL) & 0xFFFFULL;
}

static inline void zl_put_header(char *buf, uint64_t stream, uint64_t seq, int64_t t_sent_ns, uint64_t key)
{
    uint64_t check = zl_check(stream, seq, t_sent_ns, key);
    uint64_t word = ZL_LE64((seq & ZL_WIRE_SEQ_MASK) | ((check & 0xFFULL) << ZL_WIRE_SEQ_BITS)
                            | ((stream & 0xFFULL) << ZL_SEQ_BITS) | ((check >> 8) << 56));
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

/* Whether a first frame (after its topic) is a message of this run (docs/RECORDS.md, "Which
 * messages are zmqload's"): ZL_OURS with *word = stream << 48 | seq, ZL_WARMUP with *word's seq
 * the producer, ZL_FOREIGN without zmqload's header, ZL_IMPLAUSIBLE with a header this run cannot
 * have sent (a stream it lacks, a send time outside it, a seq beyond its pace). */
static inline int zl_classify(const char *head, int len, int64_t now_ns, const zl_expect *e, uint64_t *word)
{
    uint64_t w, stream, seq;
    int64_t t, since;
    if (len < ZL_HEADER_SIZE)
        return ZL_FOREIGN;
    w = zl_get_word(head);
    t = zl_get_t_sent(head);
    stream = (w >> ZL_SEQ_BITS) & 0xFFULL;
    seq = w & ZL_WIRE_SEQ_MASK;
    if ((((w >> ZL_WIRE_SEQ_BITS) & 0xFFULL) | ((w >> 56) << 8)) != zl_check(stream, seq, t, e->key))
        return ZL_FOREIGN;
    *word = (stream << ZL_SEQ_BITS) | seq;
    if (t < e->t_floor_ns || t > now_ns + ZL_FUTURE_NS)
        return ZL_IMPLAUSIBLE;
    if (stream == ZL_WARMUP_STREAM)
        return seq < e->streams ? ZL_WARMUP : ZL_IMPLAUSIBLE;
    if (stream >= e->streams)
        return ZL_IMPLAUSIBLE;
    since = t - e->t_origin_ns + ZL_FUTURE_NS;
    if (since < 0 || (unsigned __int128)seq * 1000000000ULL > (unsigned __int128)since * (uint64_t)e->rate)
        return ZL_IMPLAUSIBLE;
    return ZL_OURS;
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
