/*
 * ngx-ratelimit core: bandwidth, a byte rate per key shared by all of the
 * key's responses in flight (ratelimit_bandwidth): its parameters parsed
 * and checked, the grant of a slice (a pure transition on the key's
 * state), and the key's entry in a zone's table (its state, its
 * connections in flight, its rule's figures).
 *
 * The key's state is one instant, its "theoretical arrival time" (TAT) in
 * microseconds, as GCRA keeps for requests but counted in bytes: a slice
 * of b bytes moves it to max(TAT, now) + b / rate, and may be sent once
 * the TAT before it is at most burst / rate ahead of now.  Every slice is
 * granted, now or at a later instant: the connections of a key are served
 * in the order they asked, each its slice in turn.
 */

#ifndef RATELIMIT_BANDWIDTH_H
#define RATELIMIT_BANDWIDTH_H

#include "ratelimit_table.h"

#ifdef __cplusplus
extern "C" {
#endif

/* the directions of a rule: toward the client (a response's body, a
   proxied session's bytes from its upstream), from it (a request's body, a
   session's bytes to its upstream), or both, each direction a slice of its
   own from the one key */
#define RL_BANDWIDTH_OUT   0
#define RL_BANDWIDTH_IN    1
#define RL_BANDWIDTH_BOTH  2

/* the fastest rate and the largest burst a rule takes: 100 GB/s, 100 GB */
#define RL_BANDWIDTH_MAX  (100ull * 1024 * 1024 * 1024)

/* what a slice is, in bytes: rate / 10 (a tenth of a second of the rate),
   within these bounds */
#define RL_BANDWIDTH_SLICE_MIN  (4 * 1024)
#define RL_BANDWIDTH_SLICE_MAX  (64 * 1024 * 1024)

typedef struct {
    char      name[RL_NAME_MAX]; /* name=, or "bandwidth" */
    uint64_t  rate;              /* bytes a second; 0: rate= from a
                                    variable (rate_text) */
    uint64_t  burst;             /* bytes an idle key may send at once
                                    beyond its slice */
    uint64_t  after;             /* bytes of each response (or session's
                                    direction) sent before the rule
                                    applies, not counted (limit_rate_after) */
    uint32_t  direction;         /* RL_BANDWIDTH_OUT, _IN or _BOTH */
    uint32_t  rate_varies;       /* rate= is a variable ($...), its value
                                    read for each request */
    uint32_t  seen;              /* parameters given, a bit each: name=
                                    is RL_BANDWIDTH_NAMED */
} rl_bandwidth_rule_t;

#define RL_BANDWIDTH_NAMED  8

/* A size in nginx's units: bytes, or k, m, g (1024 each, either case).
   RL_OK, or RL_ERROR if it is not one from 1 to RL_BANDWIDTH_MAX. */
RL_API int rl_bandwidth_size(const char *text, size_t len, uint64_t *out);

/* A rule made empty, its name "bandwidth". */
RL_API void rl_bandwidth_init(rl_bandwidth_rule_t *rule);

/* One "name=value" parameter (rate=, burst=, after=, direction=, name=); RL_OK,
   or RL_ERROR with a message naming the parameter and what it takes.
   rate=$var: rate_varies set, rate 0. */
RL_API int rl_bandwidth_param(rl_bandwidth_rule_t *rule, const char *param,
    size_t len, char *err, size_t errlen);

/* The rule's parameters checked together (rate= given). */
RL_API int rl_bandwidth_finish(rl_bandwidth_rule_t *rule, char *err,
    size_t errlen);

/* The slice a connection asks for at a rate: a tenth of a second of it,
   from RL_BANDWIDTH_SLICE_MIN to RL_BANDWIDTH_SLICE_MAX bytes. */
RL_API uint64_t rl_bandwidth_slice(uint64_t rate);

/* What a flow asks for when it may pass nothing more: the `held` bytes
   it waits to pass beyond `avail` (granted already), at least a
   hundredth of a second of the rate (a flow's waits are timers that tick
   in milliseconds: smaller asks, one a tick, would cap the rate) and at
   most a slice; a flow of datagrams (whole) at least its next one, which
   goes whole.  What is granted and not passed when the flow ends is given
   back (rl_bandwidth_close). */
RL_API uint64_t rl_bandwidth_ask(uint64_t rate, uint64_t held, uint64_t avail,
    int whole);

/* The key's state after a slice of `bytes` (the pure transition), and
   how long from now the slice waits (0: it may be sent now). */
typedef struct {
    int64_t   tat_us;
    int64_t   wait_us;
} rl_bandwidth_grant_t;

RL_API rl_bandwidth_grant_t rl_bandwidth_grant(int64_t tat_us, int64_t now_us,
    uint64_t bytes, uint64_t rate, uint64_t burst);

/* The key's state after `bytes` of a slice granted were not sent (its
   connection ended): they are given back, never to before now, nor to
   before the key's state before the slice was granted. */
RL_API int64_t rl_bandwidth_give_back(int64_t tat_us, int64_t now_us,
    uint64_t bytes, uint64_t rate);


/* ---- a key in a zone's table (the caller holds the zone's lock) ------- */

/* A bandwidth rule's key in a table: its tag (never a request rule's:
   the identity is of "bandwidth", the rule's name and its key as
   written). */
RL_API uint64_t rl_bandwidth_identity(const char *name, const char *key,
    size_t key_len);

/* A connection starts sending for the key: counted in flight, the key's
   and its rule's (counted in `slot`, rl_table_rule_slot; -1: none). */
RL_API void rl_bandwidth_open(void *table, int slot, uint64_t tag,
    int64_t now_us);

/* A slice of `bytes` for the key at `rate` and `burst`: the time it waits
   from now, in microseconds (0: send now).  The rule's figures (counted
   in slot) add the bytes. */
RL_API int64_t rl_bandwidth_take(void *table, int slot, uint64_t tag,
    int64_t now_us, uint64_t bytes, uint64_t rate, uint64_t burst);

/* A connection ends: `unsent` bytes of its last slice given back, and it
   leaves the key's connections in flight. */
RL_API void rl_bandwidth_close(void *table, int slot, uint64_t tag,
    int64_t now_us, uint64_t unsent, uint64_t rate);

/* A connection of the rule starts (delta 1) or stops (-1) waiting for its
   slice: the rule's delayed connections. */
RL_API void rl_bandwidth_count_delayed(void *table, int slot, int delta);

typedef struct {
    int32_t   held;             /* the table holds the key */
    uint32_t  connections;      /* in flight now */
    int64_t   ahead_us;         /* how far its state is ahead of now: the
                                   wait of its next slice beyond burst */
} rl_bandwidth_peek_t;

/* The key as the key API shows it. */
RL_API void rl_bandwidth_peek(const void *table, uint64_t tag, int64_t now_us,
    rl_bandwidth_peek_t *out);

/* The rule's bytes a second in rules' figures copied at now_ms
   (rl_table_rule_stats): the last whole second's, 0 for a rule idle since
   before it. */
RL_API void rl_bandwidth_rates(rl_rule_stats_t *stats, size_t n,
    int64_t now_ms);

#ifdef __cplusplus
}
#endif

#endif /* RATELIMIT_BANDWIDTH_H */
