/*
 * ngx-ratelimit core: redis_sync, local decisions with a periodic exchange.
 *
 * A zone with redis_sync=TIME decides every request in its own table, as a
 * local zone does, and keeps beside the table a journal of the units each
 * key spent since the last exchange.  Every interval one process of the
 * server takes the journal (rl_sync_take), sends each key's units to Redis
 * in pipelined script calls (rl_sync_command: INCRBY on a counter per rule,
 * key and window, in a script), and folds the fleet's totals the replies
 * carry back into the table (rl_sync_answer judges a reply, rl_sync_apply
 * folds it): a key's count becomes the largest of what the server counted
 * and the fleet's total plus what the server spent since it sent.  Only
 * algorithms whose state is a count in a window merge so: fixed_window,
 * quota, and sliding_window, a count a tick (its units are journaled by
 * tick, Redis keeps the fleet's count of each tick of a key in a hash,
 * and answers the ticks of the window); rl_sync_rule_ok says why another
 * is refused.
 *
 * The journal has room for a fixed number of keys; half full, it is taken
 * before its interval (rl_sync_urgent).  A key that finds it full spends
 * locally and its units are counted as dropped (never sent).  A call Redis
 * does not answer gives its units back to the journal (rl_sync_requeue),
 * sent with the next exchange.  Every function but
 * rl_sync_size, rl_sync_command, rl_sync_answer and rl_sync_rule_ok wants
 * the zone's lock.
 */

#ifndef RATELIMIT_SYNC_H
#define RATELIMIT_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "ratelimit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Keys a script call carries at most (its reply: two integers a key, a
   sliding_window key's buckets + 1), and the integers of its reply. */
#define RL_SYNC_BATCH      128
#define RL_SYNC_REPLY_MAX  (2 * RL_SYNC_BATCH)
#define RL_SYNC_KEYS_MIN   64
#define RL_SYNC_KEYS_MAX   65536

/* One key's units to send, as taken from the journal. */
typedef struct {
    uint64_t  tag;              /* the key's fingerprint in the table */
    int64_t   end;              /* the window the units were spent in (a
                                   tick's: the last window holding it) */
    int64_t   tick;             /* sliding_window: the tick they were
                                   spent in (-1: a count rule's window) */
    int64_t   period_ms;        /* sliding_window: the rule's period, */
    uint32_t  units;
    uint32_t  next;             /* internal: the journal's chain */
    uint8_t   buckets;          /* sliding_window: its ticks a window (0: a
                                   count rule) */
    uint8_t   aligned;          /* a count rule's window is the same on
                                   every server (align=epoch, quota): its
                                   Redis key is named by its end */
    uint16_t  block;            /* sliding_window: its block's bytes */
    char      name[RL_REDIS_HASH_LEN]; /* its Redis key, after the prefix */
} rl_sync_item_t;

/* What Redis answered for an item: the fleet's window and its total (a
   sliding_window item: buckets + 1 of them, one a tick of the window
   ending with the item's, oldest first, end the tick and total its
   count). */
typedef struct {
    int64_t   end;
    uint64_t  total;
} rl_sync_total_t;

/* A zone's exchange figures (ratelimit_stats's "sync"). */
typedef struct {
    uint64_t  exchanges;        /* exchanges done (every call answered) */
    uint64_t  keys;             /* keys sent */
    uint64_t  units;            /* units sent */
    uint64_t  failures;         /* script calls Redis did not answer */
    uint64_t  dropped;          /* units never sent: the journal was full */
    uint64_t  pending;          /* keys waiting in the journal now */
    int64_t   lag_ms;           /* the last exchange: from taking the
                                   journal to its last reply */
    int64_t   last_ms;          /* when it ended (ms since 1970); 0: never */
} rl_sync_figures_t;

/* Bytes of a journal with room for keys (RL_SYNC_KEYS_MIN..MAX) keys. */
RL_API size_t rl_sync_size(uint32_t keys);

/* Lays a journal out over size bytes of zeroed memory; 1 if mem already
   holds one of this size (kept across a reload). */
RL_API int rl_sync_init(void *mem, size_t size, uint32_t keys);

/* RL_OK if the rule's state merges as a count; else err says why not. */
RL_API int rl_sync_rule_ok(const rl_rule_t *rule, char *err, size_t errlen);

/*
 * Notes what a decided request spent in table (checks of that table only,
 * admitted and spending: RL_OUTCOME_ALLOWED) in the journal.  Returns 1 if
 * the journal is to be taken now (rl_sync_urgent).
 */
RL_API int rl_sync_note(void *sync, const void *table, const rl_request_t *rq,
    int64_t now_ms);

/*
 * 1 if the journal is half full and Redis took the last exchange's calls:
 * an exchange is due before its interval, so that keys still to come find
 * room (a flood of distinct keys drops only what comes faster than
 * exchanges take it).  Read without the lock.
 */
RL_API int rl_sync_urgent(const void *sync);

/*
 * Takes the exchange of this interval if it is due (now_ms past the last
 * one's interval_ms, or rl_sync_urgent; the caller's process is then the
 * one exchanging):
 * copies the journal's keys whose windows are not over into out (room for
 * the journal's keys), empties it, and returns how many (0: nothing, or
 * not due, then *due is 0).
 */
RL_API size_t rl_sync_take(void *sync, int64_t now_ms, int64_t interval_ms,
    rl_sync_item_t *out, int *due);

/* Gives the units of items Redis did not take back to the journal. */
RL_API void rl_sync_requeue(void *sync, const rl_sync_item_t *items,
    size_t n);

/* Records an exchange's end (lag) or a failed call, for the figures. */
RL_API void rl_sync_record(void *sync, size_t keys, uint64_t units,
    uint64_t failures, int64_t lag_ms, int64_t now_ms);

RL_API void rl_sync_get_figures(const void *sync, rl_sync_figures_t *out);

/* The script of an exchange's calls, and the bytes a call of n items
   takes at most. */
RL_API const char *rl_sync_script(size_t *len);
RL_API size_t rl_sync_command_size(size_t n, size_t prefix_len,
    size_t script_len);

/*
 * One script call for n items (at most RL_SYNC_BATCH): EVALSHA (eval: EVAL
 * with the text), the items' Redis keys (prefix, "s:", the name, and for
 * an aligned item ":" and its window's end), now, then each item's units,
 * window end, tick and kind (sliding_window: its buckets; -1 aligned, 0
 * not).  Returns the bytes written.
 */
RL_API size_t rl_sync_command(char *buf, const char *script,
    size_t script_len, int eval, const char *prefix, size_t prefix_len,
    const rl_sync_item_t *items, size_t n, int64_t now_ms);

/* How many of the n items go in one call: at most RL_SYNC_BATCH, their
   reply at most RL_SYNC_REPLY_MAX integers (at least one item). */
RL_API size_t rl_sync_batch(const rl_sync_item_t *items, size_t n);

/* The totals a reply to a call for n items carries (room for totals). */
RL_API size_t rl_sync_totals(const rl_sync_item_t *items, size_t n);

/*
 * Judges a reply to a call for n items: exactly 1 integer an aligned item
 * (the total of its window), 2 another count item (the window's end within
 * a year of now, the total) and buckets + 1 a sliding_window item (its
 * ticks' counts), each total at most
 * RL_LIMIT_MAX times 4 (RL_REDIS_DECIDED, totals set), NOSCRIPT, or
 * failed (why says so).
 */
RL_API int rl_sync_answer(const rl_resp_t *r, const rl_sync_item_t *items,
    size_t n, int64_t now_ms, rl_sync_total_t *totals, char *why,
    size_t whylen);

/*
 * Folds the fleet's totals into the table: a key whose count is below the
 * fleet's total plus what it spent here since (the journal's units for it)
 * counts that much; a fleet window that is over changes nothing.  A
 * sliding_window key's ring is folded tick by tick so (its cached sum
 * made again from the counters).
 */
RL_API void rl_sync_apply(void *sync, void *table,
    const rl_sync_item_t *items, const rl_sync_total_t *totals, size_t n,
    int64_t now_ms);

#ifdef __cplusplus
}
#endif

#endif /* RATELIMIT_SYNC_H */
