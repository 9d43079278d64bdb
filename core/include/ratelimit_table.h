/*
 * ngx-ratelimit core: the shared-memory key table, for the zone's
 * owner (its layout, its figures, its rules' counters), and the key API
 * (a key's state read or reset, the keys a rule refuses most).
 */

#ifndef RATELIMIT_TABLE_H
#define RATELIMIT_TABLE_H

#include "ratelimit_rule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the shared-memory key table ---------------------------------------- */

typedef struct {
    uint64_t  size;             /* bytes of the block */
    uint64_t  capacity;         /* key slots */
    uint64_t  keys;             /* slots in use */
    uint64_t  evictions;        /* keys dropped to make room */
    uint64_t  live_evictions;   /* of those, keys not yet back to full budget
                                   (what they owe goes into the summary) */
    uint64_t  summary_refusals; /* requests of keys not in the table refused
                                   because of what the summary says they owe */
    uint64_t  summary_bytes;    /* the eviction summary's share of the block */
    uint64_t  blocks;           /* blocks for larger states (sliding_window,
                                   sliding_log) */
    uint64_t  blocks_used;
} rl_table_stats_t;

/*
 * A table's layout depends on its size, on the sizes of the blocks its
 * rules' states need beyond the slot: rl_state_size(rule) - sizeof
 * (rl_state_t) for each rule using it (0 for most algorithms, which can be
 * left out), and on how its rules stack (rl_table_stack).  With no block,
 * every byte goes to key slots.
 */

/* The smallest block a table without blocks accepts. */
RL_API size_t rl_table_min_size(void);

/* RL_OK if a table of size bytes can hold these block sizes; else err. */
RL_API int rl_table_plan(size_t size, const uint32_t *blob_sizes, size_t n,
    char *err, size_t errlen);

/* The same for a table whose rules have `names` names to count (their
   counters' room is part of the table: rl_table_rule_room), and whose keys
   with a block take slots16 sixteenths of a slot for each block: the rules
   stacked on a zone in a location that has a rule with a block, that rule
   included (16: such rules stand alone; 0: not known).  The buckets get
   what those slots take beside the blocks, between a third and two thirds
   of the room buckets and blocks share. */
RL_API int rl_table_plan_names(size_t size, const uint32_t *blob_sizes,
    size_t n, size_t names, uint32_t slots16, char *err, size_t errlen);

/* slots16 for a zone whose locations stack, where one of the zone's rules
   keeps a block, `slots` rules of the zone in all (one a slot), `blocks`
   of them with a block: summed over those locations. */
RL_API uint32_t rl_table_stack(uint64_t slots, uint64_t blocks);

/*
 * Lays a fresh table out over mem (64-byte aligned, size bytes), with a new
 * random hash secret, or the 16 bytes of secret when not NULL (tests).  The
 * size bytes of mem must all be zero, as fresh shared memory is (the kernel
 * hands out zeroed pages): only the header is written, and the rest of the
 * table is touched as keys arrive, so a large zone costs memory only as it
 * fills.
 */
RL_API int rl_table_init(void *mem, size_t size, const uint32_t *blob_sizes,
    size_t n, const uint8_t *secret, char *err, size_t errlen);

/* The same, with room for the counters of `names` rule names and a quarter
   more (names a reload adds to a zone it keeps), RL_RULE_STATS_MAX at
   least, and buckets for the stack slots16 (rl_table_plan_names). */
RL_API int rl_table_init_names(void *mem, size_t size,
    const uint32_t *blob_sizes, size_t n, size_t names, uint32_t slots16,
    const uint8_t *secret, char *err, size_t errlen);

/* 1 if mem holds a table of exactly this layout (kept across reload): the
   room for names and the stack it was laid out for are its own, whatever
   the configuration says now. */
RL_API int rl_table_valid(const void *mem, size_t size,
    const uint32_t *blob_sizes, size_t n);

RL_API void rl_table_get_stats(const void *mem, rl_table_stats_t *st);

/* Bytes of the table holding something (slots and blocks in use). */
RL_API uint64_t rl_table_bytes_used(const void *mem);

/*
 * Per-rule counters, kept in the table (so all workers add to them and a
 * reload keeps them), counted by rule name, found by name through an index
 * (no name is compared with every other): room for the names the table was
 * laid out for (rl_table_init_names) and a quarter more, RL_RULE_STATS_MAX
 * at least.
 */
#define RL_RULE_STATS_MAX  64

enum rl_outcome {
    RL_OUTCOME_ALLOWED = 0,        /* passed, and spent at this rule */
    RL_OUTCOME_REJECTED,           /* rejected, this rule denying */
    RL_OUTCOME_DELAYED,            /* delayed by this rule */
    RL_OUTCOME_DRY_RUN_REJECTED,   /* would have been rejected by it */
    RL_OUTCOME_EXEMPT,             /* its key was empty */
    RL_OUTCOMES
};

typedef struct {
    char      name[RL_NAME_MAX];
    uint64_t  count[RL_OUTCOMES];
    uint64_t  charged;          /* charge=: units charged as requests ended */
    uint64_t  debts;            /*   requests whose charge left the key in
                                     debt */
    uint64_t  in_flight;        /* concurrency: slots held now, */
    uint64_t  peak;             /*   the most held at once, */
    uint64_t  waited;           /*   requests that waited for a slot */
    uint64_t  bans;             /* ban=: bans started, */
    uint64_t  dry_run_bans;     /*   and refusals of a dry run that would
                                     have started one (none is stored) */
    uint64_t  overridden;       /* requests that met an override */
    uint64_t  overrides;        /* overrides held naming the rule
                                   (rl_overrides_count) */
    uint64_t  limit_now;        /* adaptive: the limit of the key that
                                   moved its limit last (a rule of one
                                   key, key=backend_a: that key's), */
    uint64_t  baseline_us;      /*   its baseline latency, */
    uint64_t  recent_us;        /*   its last interval's typical latency */
    uint64_t  bytes;            /* bandwidth: bytes granted, */
    uint64_t  bytes_per_second; /*   in the last whole second
                                     (rl_bandwidth_rates), */
    uint64_t  connections;      /*   connections sending now, */
    uint64_t  delayed_now;      /*   of those, waiting for their slice */
    uint64_t  second;           /*   the second bytes were last granted
                                     in (since the epoch), */
    uint64_t  second_bytes;     /*   bytes granted in it, and in the */
    uint64_t  previous_bytes;   /*   second before it */
} rl_rule_stats_t;

/* The counters of rule `name`, claimed on first use; -1 when all are taken.
   The caller holds the table's lock. */
RL_API int rl_table_rule_slot(void *mem, const char *name);

/* Adds one to a rule's outcome (rl_decide counts its requests' outcomes).
   The caller holds the table's lock: the counters are written under it,
   with no atomic add, and read without it. */
RL_API void rl_table_count(void *mem, int slot, int outcome);

/* Room for so many rule names' counters. */
RL_API size_t rl_table_rule_room(const void *mem);

/* Rule names counted so far (read without the lock: it only grows). */
RL_API size_t rl_table_rules_counted(const void *mem);

/* Copies up to max rules' counters; returns how many. */
RL_API size_t rl_table_rule_stats(const void *mem, rl_rule_stats_t *out,
    size_t max);



/* ---- the key API: a key's state, its reset, the keys refused most ------ */

/*
 * What support staff ask of a zone (ratelimit_api): how a key stands under
 * a rule, and lifting it; and who a rule refuses most.  Every function here
 * wants the table's lock, as a request does (the caller takes it, in a
 * worker), except rl_table_tag.
 */

/* A rule's key in a table, hashed as a request's is: its fingerprint. */
RL_API uint64_t rl_table_tag(const void *mem, uint64_t identity,
    const void *key, size_t key_len);

typedef struct {
    int32_t        held;        /* the table holds the key's state */
    int32_t        owed;        /* not held, and the eviction summary says
                                   it owes: the state is the one a request
                                   would be restored to */
    rl_decision_t  look;        /* a look now (cost 0): remaining, reset */
    rl_decision_t  next;        /* the next request of cost `cost`, decided
                                   and not spent: allowed (or refused, with
                                   retry_after_ms), delay_ms */
    int64_t        banned_ms;   /* the key is banned (ban=) this much
                                   longer; 0: not banned */
    uint32_t       in_flight;   /* concurrency: slots held, */
    uint32_t       waiting;     /*   requests waiting for one, */
    int32_t        fleet;       /*   in_flight is the fleet's (a Redis
                                     zone), and */
    uint32_t       in_flight_here; /* this server's share of it */
    uint32_t       limit_now;   /* adaptive: the limit now, */
    uint32_t       baseline_us; /*   the upstream's latency without
                                     queueing, as learned (0: none yet), */
    uint32_t       recent_us;   /*   its typical latency over the last
                                     interval */
    uint32_t       class_in_flight[8]; /* a rule with priority classes:
                                     each class's slots held, */
    uint32_t       class_waiting[8];   /*   its requests waiting, */
    uint32_t       class_kept[8];      /*   and the slots its share keeps
                                     now (of the slots open) */
} rl_peek_t;

/*
 * The key's state as a request of the rule would find it (the table, or
 * what the eviction summary restores), read without spending anything.
 */
RL_API void rl_table_peek(void *mem, const rl_rule_t *rule, uint64_t tag,
    uint64_t cost, int64_t now_ms, rl_peek_t *out);

#define RL_RESET_HELD       1   /* the table held the key: forgotten */
#define RL_RESET_FORGIVEN   2   /* the eviction summary said it owed: the
                                   one of its cells whose debt ends first
                                   was cleared (forgiving the other evicted
                                   keys counted in it too) */
#define RL_RESET_UNBANNED   4   /* its ban (ban=) was lifted */

/*
 * Makes a key fresh: its state is forgotten, and a request of it finds
 * nothing owed in the eviction summary either (a key there is restored
 * from the least of its cells, so clearing one is enough).  Its entries in
 * the top keys are taken off the list (their refusals stay counted, under
 * no key).  Returns RL_RESET_* flags, 0 if the key had nothing.
 */
RL_API int rl_table_reset(void *mem, uint64_t tag, int64_t now_ms);

/*
 * The keys a rule refuses most: in the zone, for each rule name counted
 * (rl_table_rule_slot), a Space-Saving summary of RL_TOP_ENTRIES keys for
 * each epoch of RL_TOP_EPOCH_MS (from the Unix epoch), the current one and
 * the one before.  A request refused (or refused in a dry run) counts for
 * each rule that refused it, under the lock its decision holds.  A key
 * refused more than refusals / RL_TOP_ENTRIES times in the window is always
 * listed; a key's count is at most `error` above its refusals.  Keys in
 * clear are kept (RL_TOP_KEY_MAX bytes) only for a rule that logs keys in
 * clear (log_key=on).  A zone has room for the summaries of so many rules
 * (a share of its size, see README); a rule without room has none.
 */
#define RL_TOP_ENTRIES   32
#define RL_TOP_EPOCH_MS  60000
#define RL_TOP_KEY_MAX   31

enum rl_top_state {
    RL_TOP_NONE = 0,            /* no refusal since the zone was made */
    RL_TOP_KEPT,
    RL_TOP_NO_ROOM              /* the zone's room for them is taken */
};

typedef struct {
    uint64_t  tag;              /* the key's fingerprint */
    uint64_t  refused;          /* refusals in the window, at most error
                                   more than the key's own */
    uint64_t  error;
    uint32_t  key_len;          /* bytes of key kept (log_key=on), */
    uint32_t  key_cut;          /*   and 1 if the key was longer */
    uint8_t   key[RL_TOP_KEY_MAX];
    int64_t   banned_ms;        /* banned (ban=) this much longer, or 0 */
} rl_top_key_t;

typedef struct {
    int32_t        state;       /* enum rl_top_state */
    int32_t        keys;        /* entries keep their keys in clear */
    int32_t        kib;         /* a bandwidth rule's: counts are KiB
                                   granted, not refusals */
    uint64_t       refusals;    /* every refusal in the window (KiB) */
    int64_t        since_ms;    /* the window: from since_ms until now */
    size_t         n;
    rl_top_key_t   top[2 * RL_TOP_ENTRIES];  /* most refused first */
} rl_top_t;

/* The top keys of the rule counted in `slot` (rl_table_rule_slot()). */
RL_API void rl_table_top(const void *mem, int slot, int64_t now_ms,
    rl_top_t *out);

#ifdef __cplusplus
}
#endif

#endif /* RATELIMIT_TABLE_H */
