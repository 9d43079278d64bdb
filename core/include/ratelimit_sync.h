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
 * quota, and a count by ticks, sliding_window's (its units are journaled by
 * tick, Redis keeps the fleet's count of each tick of a key in a hash,
 * and answers the ticks of the window); rl_sync_rule_ok says why another
 * is refused.
 *
 * The journal has room for a fixed number of keys; half full, it is taken
 * before its interval (rl_sync_urgent).  A key that finds it full spends
 * locally and its units are counted as dropped (never sent).
 *
 * Each call has an id, the journal's random nonce and a sequence number,
 * given when its items are taken, and adds its units in Redis once: the
 * script sets a marker key named by the id, and a copy that finds the
 * marker there adds nothing (it answers the totals).  A call Redis does not
 * answer may still have reached it (a reply lost, a paused Redis that runs
 * it when it resumes), so its items go back to the journal with their id
 * (rl_sync_requeue) and are sent again as the same call, before any other
 * units, never merged with them.  Every function but rl_sync_size,
 * rl_sync_nonce, rl_sync_command, rl_sync_answer and rl_sync_rule_ok wants
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
   key of a count by ticks: its ticks + 1), and the integers of its keys' totals
   (the reply holds one more, first: what the call did). */
#define RL_SYNC_BATCH      128
#define RL_SYNC_REPLY_MAX  (2 * RL_SYNC_BATCH)
#define RL_SYNC_KEYS_MIN   64
#define RL_SYNC_KEYS_MAX   65536

/* How long a call may stay unanswered and still count: Redis runs no copy
   of it later than this after it was made (nor after its last window
   ended, and a second), so its marker lives no longer. */
#define RL_SYNC_DOUBT_MS   3600000

/* One key's units to send, as taken from the journal. */
typedef struct {
    uint64_t  tag;              /* the key's fingerprint in the table */
    uint64_t  call;             /* the call it was sent in, its number in
                                   the journal (0: units never sent) */
    int64_t   deadline;         /* the call's: Redis runs no copy of it from
                                   then on (ms since 1970, Redis's clock) */
    int64_t   end;              /* the window the units were spent in (a
                                   tick's: the last window holding it) */
    int64_t   tick;             /* a count by ticks: the tick they were
                                   spent in (-1: a count rule's window) */
    int64_t   period_ms;        /* a count by ticks: the rule's period, */
    uint32_t  units;
    uint32_t  next;             /* internal: the journal's chain */
    uint8_t   ticks;            /* a count by ticks: its ticks a window (0:
                                   a count of the whole window) */
    uint8_t   aligned;          /* a count rule's window is the same on
                                   every server (align=epoch, quota): its
                                   Redis key is named by its end */
    uint8_t   algorithm;        /* a count by ticks: the rule's, whose
                                   record folds the ticks in */
    uint16_t  block;            /* a count by ticks: its block's bytes */
    char      name[RL_REDIS_HASH_LEN]; /* its Redis key, after the prefix */
} rl_sync_item_t;

/* What Redis answered for an item: the fleet's window and its total (a
   count by ticks: ticks + 1 of them, one a tick of the window
   ending with the item's, oldest first, end the tick and total its
   count). */
typedef struct {
    int64_t   end;
    uint64_t  total;
} rl_sync_total_t;

/* A zone's exchange figures (ratelimit_stats's "sync"). */
typedef struct {
    uint64_t  exchanges;        /* exchanges done (every call answered) */
    uint64_t  keys;             /* keys sent, a call's once Redis took it
                                   (added, or found added by a copy) */
    uint64_t  units;            /* units sent, so */
    uint64_t  failures;         /* script calls Redis did not answer */
    uint64_t  dropped;          /* units that may be missing in Redis: the
                                   journal was full, or their call was
                                   given up or found too late */
    uint64_t  pending;          /* items in the journal now: keys' units
                                   not sent, and items of calls in doubt */
    int64_t   lag_ms;           /* the last exchange: from taking the
                                   journal to its last reply */
    int64_t   last_ms;          /* when it ended (ms since 1970); 0: never */
} rl_sync_figures_t;

/* Bytes of a journal with room for keys (RL_SYNC_KEYS_MIN..MAX) keys. */
RL_API size_t rl_sync_size(uint32_t keys);

/* Lays a journal out over size bytes of zeroed memory, with a random
   nonce for its calls' ids; 1 if mem already holds one of this size (kept
   across a reload, its nonce and calls too). */
RL_API int rl_sync_init(void *mem, size_t size, uint32_t keys);

/* The journal's nonce, the first half of its calls' ids (read without
   the lock: it never changes). */
RL_API uint64_t rl_sync_nonce(const void *sync);

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
 * one exchanging), into out (room for the journal's keys), and returns how
 * many items (0: nothing, or not due, then *due is 0).  Items whose window
 * is over are left out (they count for nothing).
 *
 * If the journal holds calls in doubt (given back by rl_sync_requeue),
 * only those are taken, by call in the order of their numbers, each with
 * its items in their order: each is sent again as it was (an item whose
 * window is over left out), and the units spent since wait in the journal
 * for an exchange after them.  A call in doubt for RL_SYNC_DOUBT_MS is
 * given up (Redis would not run it): its units are counted as dropped.
 * Otherwise the units spent since the last exchange are taken, the
 * journal emptied, and the items numbered by call, as rl_sync_batch cuts
 * them.
 */
RL_API size_t rl_sync_take(void *sync, int64_t now_ms, int64_t interval_ms,
    rl_sync_item_t *out, int *due);

/* Gives items of calls Redis did not answer back to the journal, each
   with its call: they are sent again as that call. */
RL_API void rl_sync_requeue(void *sync, const rl_sync_item_t *items,
    size_t n);

/* Records an exchange's end (lag) or a failed call, and units of calls
   that Redis refused as too late (dropped), for the figures. */
RL_API void rl_sync_record(void *sync, size_t keys, uint64_t units,
    uint64_t failures, uint64_t dropped, int64_t lag_ms, int64_t now_ms);

RL_API void rl_sync_get_figures(const void *sync, rl_sync_figures_t *out);

/* The script of an exchange's calls, and the bytes a call of n items
   takes at most. */
RL_API const char *rl_sync_script(size_t *len);
RL_API size_t rl_sync_command_size(size_t n, size_t prefix_len,
    size_t script_len);

/*
 * One script call for n items of one call (at most RL_SYNC_BATCH):
 * EVALSHA (eval: EVAL with the text), the call's marker (prefix, "c:", and
 * 32 hex digits of the nonce and the call's number), the items' Redis
 * keys (prefix, "s:", the name, and for an aligned item ":" and its
 * window's end), now, the call's deadline, then each item's units, window
 * end, tick and kind (a count by ticks: its ticks a window; -1 aligned,
 * 0 not).
 * Returns the bytes written.
 */
RL_API size_t rl_sync_command(char *buf, const char *script,
    size_t script_len, int eval, const char *prefix, size_t prefix_len,
    uint64_t nonce, const rl_sync_item_t *items, size_t n, int64_t now_ms);

/* How many of the n items go in one call: items of one call only, at most
   RL_SYNC_BATCH, their reply at most RL_SYNC_REPLY_MAX integers (at least
   one item). */
RL_API size_t rl_sync_batch(const rl_sync_item_t *items, size_t n);

/* The totals a reply to a call for n items carries (room for totals). */
RL_API size_t rl_sync_totals(const rl_sync_item_t *items, size_t n);

/* What a call's copy did in Redis (its reply's first integer). */
#define RL_SYNC_ADDED    1      /* added its units */
#define RL_SYNC_SEEN     0      /* found its marker: a copy added them */
#define RL_SYNC_LATE    -1      /* past its deadline: added nothing */

/*
 * Judges a reply to a call for n items: what the call did (RL_SYNC_ADDED,
 * _SEEN or _LATE, into *status), then exactly 1 integer an aligned item
 * (the total of its window), 2 another count item (the window's end within
 * a year of now, the total) and ticks + 1 an item of a count by ticks
 * (its ticks' counts), each total at most
 * RL_LIMIT_MAX times 4 (RL_REDIS_DECIDED, totals set), NOSCRIPT, or
 * failed (why says so).
 */
RL_API int rl_sync_answer(const rl_resp_t *r, const rl_sync_item_t *items,
    size_t n, int64_t now_ms, rl_sync_total_t *totals, int *status,
    char *why, size_t whylen);

/*
 * Folds the fleet's totals into the table: a key whose count is below the
 * fleet's total plus what it spent here since (the journal's units for it
 * not yet sent) counts that much; a fleet window that is over changes
 * nothing.  A key (a tick) with units in a call in doubt is not folded:
 * Redis may or may not hold them, and a count never goes down in its
 * window, so the key keeps its own count until that call is answered.
 * A key of a count by ticks is folded tick by tick so, by its
 * algorithm's record (sliding_window: its ring's cached sum made again
 * from the counters).
 */
RL_API void rl_sync_apply(void *sync, void *table,
    const rl_sync_item_t *items, const rl_sync_total_t *totals, size_t n,
    int64_t now_ms);

#ifdef __cplusplus
}
#endif

#endif /* RATELIMIT_SYNC_H */
