/*
 * ngx-ratelimit core: the C API.
 *
 * Everything the nginx glue (and the tools) need: rule parsing and
 * validation, the pure algorithm transitions, and the shared-memory key
 * table.  No function here throws, allocates on the request path, or knows
 * about nginx.
 *
 * Time is always an integer number of milliseconds since the Unix epoch
 * (wall clock).  Every algorithm is jump-safe: a clock that steps backwards
 * never lets a key spend more than its limit.
 */

#ifndef RATELIMIT_H
#define RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RL_API __attribute__((visibility("default")))
#else
#define RL_API
#endif


/* ---- rules -------------------------------------------------------------- */

enum rl_algorithm {
    RL_GCRA = 0,
    RL_TOKEN_BUCKET,
    RL_FIXED_WINDOW,
    RL_SLIDING_WINDOW,
    RL_SLIDING_LOG,
    RL_LEAKY_BUCKET,
    RL_QUOTA,
    RL_CONCURRENCY,             /* requests in flight, not a rate */
    RL_ALGORITHM_COUNT
};

/* The algorithm of a rule without algorithm=. */
#define RL_ALGORITHM_DEFAULT  RL_GCRA

enum rl_align {
    RL_ALIGN_EPOCH = 0,     /* windows start at multiples of period, from
                               1970 */
    RL_ALIGN_FIRST          /* a key's window starts at its first request */
};

enum rl_abandoned {
    RL_ABANDONED_KEEP = 0,  /* abandoned=keep: the reservation stands */
    RL_ABANDONED_CHARGE     /* abandoned=charge: spends what charge= says */
};

enum rl_reset {
    RL_RESET_DAILY = 0,     /* quota: calendar days, weeks (from Monday),
                               months */
    RL_RESET_WEEKLY,
    RL_RESET_MONTHLY
};

#define RL_LIMIT_MAX      1000000000u          /* limit, burst, cost */
#define RL_LOG_LIMIT_MAX  10000u               /* sliding_log: a time a unit */
#define RL_BUCKETS_MAX    100u                 /* sliding_window */
#define RL_PERIOD_MAX_MS  (366LL * 86400000)   /* one (leap) year */
#define RL_LOG_PERIOD_MAX_MS 2147483647LL      /* sliding_log: 2^31 ms, 24.8d */
#define RL_UTC_OFFSET_MAX_MIN (14 * 60)
#define RL_NAME_MAX       64                   /* including the NUL */
#define RL_ERR_MAX        512                  /* enough for any message */
#define RL_RULES_MAX      32                   /* rules of one request */
#define RL_BAN_MAX_MS     RL_PERIOD_MAX_MS     /* ban= */
#define RL_CONCURRENCY_MAX 4096u               /* concurrency: slots a key */
#define RL_QUEUE_MAX      1024u                /*   and requests waiting */

typedef struct {
    uint32_t  algorithm;        /* enum rl_algorithm */
    uint32_t  limit;            /* cost units per period */
    uint32_t  burst;            /* gcra, token_bucket: capacity (limit) */
    uint32_t  cost;             /* constant cost (default 1) */
    int64_t   period_ms;        /* default 1000; quota: the current period */
    uint32_t  align;            /* fixed_window: enum rl_align */
    uint32_t  buckets;          /* sliding_window: sub-buckets (default 10) */
    int64_t   max_delay_ms;     /* leaky_bucket: longest delay (period) */
    uint32_t  delay;            /* leaky_bucket: requests over the pace
                                   served at once before the rest are
                                   delayed (0), as limit_req's delay= */
    uint32_t  reset;            /* quota: enum rl_reset */
    int32_t   utc_offset_min;   /* quota: calendar's offset from UTC */
    uint32_t  cost_var;         /* cost= is a $variable (the glue's) */
    uint32_t  zero_cost;        /* zero_cost=on: a cost variable's 0 looks
                                   without spending (else it counts as 1) */
    uint32_t  log_key;          /* log_key=on: log lines show the key, not
                                   its fingerprint */
    uint32_t  limit_var;        /* limit= is a $variable (the glue's):
                                   limit holds limit_default, and
                                   rl_rule_apply() a request's */
    uint32_t  burst_var;        /* burst= is a $variable */
    uint32_t  limit_max;        /* with a variable: the largest limit and
                                   burst it may give (sizes sliding_log's
                                   state) */
    uint32_t  charge;           /* charge= (the glue's value): admitted
                                   requests reserve cost, and what the
                                   value says is spent when they end
                                   (rl_request_end) */
    uint32_t  abandoned;        /* charge=: what a request its client
                                   abandoned (ended with 499) spends:
                                   RL_ABANDONED_KEEP what it reserved, or
                                   RL_ABANDONED_CHARGE its charge */
    int64_t   ban_ms;           /* ban=: a key this rule refuses is
                                   refused for so long (0: no ban) */
    int64_t   max_wait_ms;      /* concurrency: how long a request may
                                   wait for a slot (0: refused at once) */
    uint32_t  given;            /* internal: parameters set explicitly */
    char      name[RL_NAME_MAX];/* given by name=, or rl_rule_finish's */
    /* internal, derived from the above by rl_rule_finish() and
       rl_rule_apply(), so that no request works them out again: */
    uint32_t  block;            /* bytes of a key's block beyond the
                                   table's slot (rl_rule_block_size) */
    uint32_t  traits;           /* what the core tests of its algorithm */
    uint64_t  policy_quota;     /* the policy the headers advertise
                                   (rl_decision_t's quota and window_ms); */
    int64_t   policy_window_ms; /*   -1: the decision's own window (a
                                   window's period, a quota's calendar
                                   period) */
} rl_rule_t;

/* Results of rl_rule_param. */
#define RL_OK        0
#define RL_ERROR    -1
#define RL_DECLINED  1   /* zone=, key=, or cost=, limit= or burst= with a
                            $variable: the caller's business */

RL_API void rl_rule_init(rl_rule_t *rule);

/*
 * Parses one "name=value" parameter of the ratelimit directive.  On RL_ERROR
 * err holds a message naming the parameter, the value and what is allowed.
 */
RL_API int rl_rule_param(rl_rule_t *rule, const char *param, size_t len,
    char *err, size_t errlen);

/* Checks the parameters together, fills defaults and the derived name. */
RL_API int rl_rule_finish(rl_rule_t *rule, char *err, size_t errlen);

/*
 * The rule as it applies to one request whose limit= or burst= is a
 * variable, from the variables' values (ignored for a parameter that is
 * constant): out is the rule with that limit and burst.  A value that is
 * not an integer from 1 to limit_max, or too large for the period (the
 * 2^61 bound of rl_rule_finish), is never unlimited: a limit falls back to
 * limit_default, a burst to the limit applied (a burst= not given follows
 * the limit applied).  Returns RL_OK, or RL_DECLINED when a value was not
 * valid: err then says which, and what applies instead.
 */
RL_API int rl_rule_apply(const rl_rule_t *rule, const char *limit,
    size_t limit_len, const char *burst, size_t burst_len, rl_rule_t *out,
    char *err, size_t errlen);

/*
 * A request's cost from the value of cost=$var: a non-negative integer; 0
 * only with zero_cost=on (else 0 would be a free pass for whoever sets the
 * variable).  Anything else counts as 1: RL_DECLINED, and err says why.
 */
RL_API int rl_rule_cost(const rl_rule_t *rule, const char *value, size_t len,
    uint64_t *cost, char *err, size_t errlen);

/*
 * A request's charge from the value of charge= when it ends: a
 * non-negative integer (one too large for 64 bits is as large as can be:
 * the debt's bound caps it).  Anything else, an empty value too, charges
 * the request's cost: RL_DECLINED, and err says why.
 */
RL_API int rl_rule_charge(const char *value, size_t len, uint64_t cost,
    uint64_t *units, char *err, size_t errlen);

/*
 * Parses whitespace-separated parameters (as written in the directive) and
 * finishes the rule; zone= and key= are accepted and ignored, charge= sets
 * rule->charge (the caller gives each request's charge).  For tools.
 */
RL_API int rl_rule_parse(rl_rule_t *rule, const char *text, char *err,
    size_t errlen);

/*
 * The identity that keys a rule's state in a table: rules with the same
 * identity and key share state.  It is the rule's name and algorithm; a
 * derived name also takes in the key expression, so two unnamed rules
 * differing only in their key never share state.
 */
RL_API uint64_t rl_rule_identity(const rl_rule_t *rule, const char *key_expr,
    size_t key_expr_len);

/* Parses an nginx-style time ("500ms", "1m30s", "2h", "7d"; bare = s). */
RL_API int rl_parse_time_ms(const char *s, size_t len, int64_t *ms);

/*
 * Bytes a client chose (a key, a value, a name), made safe for a log line:
 * printable ASCII as it is, but '"', '\' and every other byte as \xNN; at
 * most max bytes of data, then "..." if there were more.  Writes at most
 * RL_ESCAPED_MAX(max) bytes (no NUL); returns how many.
 */
#define RL_ESCAPED_MAX(max)  ((max) * 4 + 3)
RL_API size_t rl_escape(char *out, const void *data, size_t len, size_t max);

/*
 * What the name of a rule (name=) or of a zone (ratelimit_zone) may be: it
 * appears as it is in headers, log lines, JSON, Prometheus labels and the key
 * API's paths.  rl_name_valid() is 1 for such a name of len bytes, else 0.
 */
#define RL_NAME_EXPECTED  "1 to 63 letters, digits, \"_\", \"-\" or \".\""

RL_API int rl_name_valid(const char *name, size_t len);

/* The words a rule is written with: an algorithm's name ("gcra", ...), a
   quota's reset ("daily", ...); "?" for a value that is none. */
RL_API const char *rl_algorithm_name(uint32_t algorithm);
RL_API const char *rl_reset_name(uint32_t reset);


/* ---- digests ------------------------------------------------------------ */

/* SHA-256 of len bytes (FIPS 180-4): the dashboard's CSP hashes its script. */
RL_API void rl_sha256(const void *data, size_t len, uint8_t out[32]);

/* ---- decisions ---------------------------------------------------------- */

typedef struct {
    int32_t   allowed;          /* 1: admitted, 0: denied */
    int32_t   never;            /* denied because cost exceeds what the rule
                                   can ever admit */
    uint64_t  remaining;        /* cost-1 requests admissible right after this
                                   decision (a delayed one: after its delay) */
    int64_t   reset_ms;         /* ms until the key is back to full budget
                                   (a delayed request: from its release) */
    int64_t   retry_after_ms;   /* denied: ms until this cost is admissible
                                   (never: until full budget); 0 if allowed */
    int64_t   delay_ms;         /* leaky_bucket: hold the request this long */
    int64_t   available_ms;     /* ms until more units are available (the
                                   IETF RateLimit's t): allowed, until
                                   remaining next grows, or the key is back
                                   to full budget if sooner (0 at full
                                   budget); denied, retry_after_ms (never:
                                   reset_ms) */
    uint64_t  quota;            /* the policy's quota: the most remaining
                                   can show (limit; gcra, token_bucket:
                                   burst; leaky_bucket: what a rested key
                                   admits at once or delayed) */
    int64_t   banned_ms;        /* denied by a ban (ban=): ms until it ends
                                   (retry_after_ms then says the same) */
    int32_t   queued;           /* concurrency: not admitted yet, waiting
                                   for a slot in the key's queue */
    int64_t   window_ms;        /* the policy's window: period, the current
                                   calendar period of a quota, or the time
                                   a paced rule takes to restore its quota.
                                   quota and window_ms are the policy in
                                   rl_transition()'s decision and in the
                                   binding check's of a request; another
                                   check's has no quota and its period */
} rl_decision_t;

/*
 * The head of a key's state, stored inline in the table's slot.  t is the
 * instant (ms) from which the key is certainly back to full budget: the
 * table may drop a key whose t is in the past without losing anything.  n
 * is the algorithm's.  sliding_window and sliding_log keep the rest of
 * their state in a block of the zone (rl_state_size() - sizeof head bytes).
 */
typedef struct {
    int64_t   t;
    uint32_t  n;
} rl_state_t;

/* Bytes of one key's whole state: the head, then the block if any. */
RL_API size_t rl_state_size(const rl_rule_t *rule);

/*
 * The pure transition on a key's whole state (rl_state_size() bytes, all
 * zero for a key never seen): the decision for spending cost at now, and,
 * when apply is set and the request is admitted, the new state written in
 * place.  A denial never changes the state.  Returns 1 if the state changed.
 */
RL_API int rl_transition(const rl_rule_t *rule, void *state, int64_t now_ms,
    uint64_t cost, int apply, rl_decision_t *d);


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
 * A table's layout depends on its size and on the sizes of the blocks its
 * rules' states need beyond the slot: rl_state_size(rule) - sizeof
 * (rl_state_t) for each rule using it (0 for most algorithms, which can be
 * left out).  With none, every byte goes to key slots.
 */

/* The smallest block a table without blocks accepts. */
RL_API size_t rl_table_min_size(void);

/* Key slots a table of size bytes without blocks holds. */
RL_API uint64_t rl_table_capacity_for(size_t size);

/* RL_OK if a table of size bytes can hold these block sizes; else err. */
RL_API int rl_table_plan(size_t size, const uint32_t *blob_sizes, size_t n,
    char *err, size_t errlen);

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

/* 1 if mem holds a table of exactly this layout (kept across reload). */
RL_API int rl_table_valid(const void *mem, size_t size,
    const uint32_t *blob_sizes, size_t n);

RL_API void rl_table_get_stats(const void *mem, rl_table_stats_t *st);

/* Bytes of the table holding something (slots and blocks in use). */
RL_API uint64_t rl_table_bytes_used(const void *mem);

/*
 * Per-rule counters, kept in the table (so all workers add to them and a
 * reload keeps them), counted by rule name: up to RL_RULE_STATS_MAX names.
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
    uint64_t  estimate;         /* charge=: what an admission reserves at
                                   most (rl_check_t.reserved): the largest
                                   of the rule's last RL_CHARGES_EPOCH to
                                   twice as many charges */
} rl_rule_stats_t;

/* charge=: a rule's estimate is the largest charge of its last two epochs
   of so many charges. */
#define RL_CHARGES_EPOCH  8

/* The counters of rule `name`, claimed on first use; -1 when all are taken.
   The caller holds the table's lock. */
RL_API int rl_table_rule_slot(void *mem, const char *name);

/* Adds one to a rule's outcome (rl_decide counts its requests' outcomes).
   The caller holds the table's lock: the counters are written under it,
   with no atomic add, and read without it. */
RL_API void rl_table_count(void *mem, int slot, int outcome);

/* Copies up to max rules' counters; returns how many. */
RL_API size_t rl_table_rule_stats(const void *mem, rl_rule_stats_t *out,
    size_t max);


/* ---- deciding a request ------------------------------------------------- */

/*
 * A request is checked against every rule that applies to it, and decided
 * as a whole: rl_request_hash() outside the locks, then, holding the lock
 * of every table involved, rl_decide() decides each rule, combines them,
 * commits all that consume or none, and concludes (the verdict, the rule
 * the response's headers describe, the delay, each rule's outcome to
 * count).  Redis-decided requests are concluded by rl_redis_answer() from
 * the script's reply instead.  nginx and ratelimit-replay call these.
 */

enum rl_combine {
    RL_COMBINE_ALL = 0,         /* every rule must allow */
    RL_COMBINE_ANY              /* one allowing rule is enough */
};

/*
 * What the caller does with a request once it is decided (out of
 * rl_decide(), rl_redis_answer() and rl_request_fail()), a dry run
 * included: it passes; it is held for delay_ms first; it is refused; or it
 * waits for a slot (RL_VERDICT_QUEUED).
 */
enum rl_action {
    RL_ACTION_PASS = 0,
    RL_ACTION_DELAY,
    RL_ACTION_REFUSE,
    RL_ACTION_WAIT
};

/* What became of a request, as $ratelimit_status shows it (0: nothing yet,
   or the request's zones could not decide it and it passed or was refused
   without a decision to describe: no binding rule then). */
enum rl_status {
    RL_STATUS_NONE = 0,
    RL_STATUS_PASSED,
    RL_STATUS_DELAYED,
    RL_STATUS_REJECTED,
    RL_STATUS_DELAYED_DRY_RUN,
    RL_STATUS_REJECTED_DRY_RUN,
    RL_STATUS_EXEMPT
};

enum rl_verdict {
    RL_VERDICT_PASSED = 0,
    RL_VERDICT_DELAYED,         /* admitted, to be held delay_ms first */
    RL_VERDICT_REJECTED,
    RL_VERDICT_EXEMPT,          /* every rule's key was empty */
    RL_VERDICT_QUEUED           /* waits for a slot (concurrency with
                                   max_wait): decide it again, with the
                                   same checks, when one may be free */
};

typedef struct {
    void                *table;     /* in: a table's memory */
    const rl_rule_t     *rule;      /* in */
    uint64_t             identity;  /* in: rl_rule_identity() */
    const void          *key;       /* in: key bytes (any length); none
                                       (key_len 0): the rule does not
                                       apply, the request is exempt */
    size_t               key_len;
    uint64_t             cost;      /* in */
    void                *data;      /* in: the caller's (its rule) */
    int                  counters;  /* in: its rule's counters in the table
                                       (rl_table_rule_slot()) plus 1, where
                                       its outcome counts, and its
                                       refusals among the top keys; 0:
                                       not counted */
    /* (the inputs above; a caller may zero the fields from here on) */
    uint64_t             tag;       /* out of rl_request_hash() */
    rl_decision_t        decision;  /* out of rl_decide(): this rule's */
    int                  outcome;   /* out: enum rl_outcome to count for
                                       the rule, or -1 */
    rl_state_t           before;    /* out: the head before */
    rl_state_t           after;     /*   and after a commit (for a refund) */
    int64_t              at;        /*   and the time it decided at */
    uint64_t             reserved;  /* out: what an admission spends when
                                       it is decided: the cost; for a rule
                                       with charge=, the larger of the cost
                                       and the rule's estimate of a charge,
                                       at most what the key has left (the
                                       request's end gives it back and
                                       spends the charge) */
    int32_t              banning;   /* out: this refusal starts a ban
                                       (ban=; a dry run's would, and
                                       stores none) */
    uint64_t             charge;    /* in, for rl_request_end(): the units
                                       a charge= rule spends (RL_NO_CHARGE:
                                       none, the reservation stands) */
    uint64_t             charged;   /* out of rl_request_end(): units spent
                                       (the charge, capped) */
    uint32_t             slot;      /* concurrency: the slot the request
                                       holds, plus 1 (0: none); */
    uint32_t             ticket;    /*   its place in the key's queue while
                                       it waits (0: none).  Both out of
                                       rl_decide(), in to the next
                                       rl_decide() of a waiting request
                                       and to rl_request_end() */
    int32_t              capped;    /*   the charge exceeded the debt bound */
    int32_t              in_debt;   /*   the key owes more than its budget */
} rl_check_t;

typedef struct {
    rl_check_t          *checks;    /* in: one for each rule, in order */
    size_t               n;         /* in: at most RL_RULES_MAX */
    int                  combine;   /* in: enum rl_combine */
    int                  dry_run;   /* in: decide and commit what is
                                       admitted, but the caller neither
                                       rejects nor delays (outcomes say
                                       so) */
    int                  verdict;   /* out: enum rl_verdict (a dry run's:
                                       what it would have been) */
    size_t               binding;   /* out: the check the response's
                                       headers describe: the fewest
                                       remaining when passed, the longest
                                       delay when delayed, the longest
                                       wait when rejected; the first of
                                       equals; n: none (exempt, or a
                                       request no zone decided) */
    int                  action;    /* out: enum rl_action */
    int                  status;    /* out: enum rl_status */
    int64_t              delay_ms;  /* out: RL_VERDICT_DELAYED; QUEUED: the
                                       longest it may wait (max_wait) */
    uint32_t             holder;    /* in: who holds the slots it takes
                                       (concurrency): a process id */
    int                (*alive)(uint32_t holder);  /* in: 0 if a holder
                                       no longer exists: its slots and
                                       places are given back; NULL: every
                                       holder is */
    int                  last;      /* in: it may wait no longer: a
                                       decision that would queue it
                                       refuses it, and it leaves the
                                       queues */
    uint8_t              order[RL_RULES_MAX]; /* out of rl_request_hash():
                                       one check of each table the request
                                       uses, in the order to lock them (by
                                       address, so that two requests never
                                       wait for each other); */
    uint32_t             locks;     /*   how many (0: exempt from every
                                       rule) */
} rl_request_t;

/* Hashes every key with its table's secret, and orders the tables to lock
   (order, locks); needs no lock. */
RL_API void rl_request_hash(rl_request_t *rq);

/*
 * A request its zones could not decide (a Redis zone whose server does not
 * answer, with on_redis_error=allow or deny): it passes, or is refused (a
 * dry run: passes), with no binding rule and no outcome counted.
 */
RL_API void rl_request_fail(rl_request_t *rq, int refuse);

/*
 * The Retry-After of a decision, in whole seconds as the headers, the
 * variables and the key API show it: 0 for an admission, or a refusal
 * with no time to wait for (a concurrency slot); else its wait rounded up,
 * at least 1.
 */
RL_API uint64_t rl_retry_after_seconds(const rl_decision_t *d);

/* Milliseconds as whole seconds, rounded up (headers never promise too
   early); 0 for none. */
RL_API uint64_t rl_seconds(int64_t ms);

/*
 * The RateLimit-Policy field of n rules (the IETF draft, revision 10): each
 * rule's policy, "name";q=QUOTA;w=SECONDS (no w for a policy with no
 * window: concurrency), ", " between, as at now_ms.  Writes at most cap
 * bytes, whole items only (RL_POLICY_ITEM_MAX a rule is always enough);
 * returns how many.
 */
#define RL_POLICY_ITEM_MAX  (RL_NAME_MAX + 64)
RL_API size_t rl_policy_field(const rl_rule_t *const *rules, size_t n,
    int64_t now_ms, char *out, size_t cap);

/* 1 if a rule's policy is the same for every request (no variable limit
   or burst, no monthly quota): the field can be written once. */
RL_API int rl_rule_policy_fixed(const rl_rule_t *rule);

/* Decides and commits the request; returns its verdict (see above). */
RL_API int rl_decide(rl_request_t *rq, int64_t now_ms);

/*
 * Gives back what an admitted request reserved, when it is abandoned before
 * it was served (a delayed request whose client left, or that another module
 * finalized): each rule's state moves back by the request's cost, never to
 * before now_ms (gcra, token_bucket, leaky_bucket: the requests queued
 * behind keep their slots, the next one waits only for those), and a window
 * uncounts it if it still holds it.  Call it once per request.  The caller
 * holds the locks.
 */
RL_API void rl_request_refund(rl_request_t *rq, int64_t now_ms);

/*
 * The end of a request (nginx's log phase), whatever ended it: each
 * concurrency rule's slot it holds, and its place in a queue, are given
 * back (returns the slots freed, for the requests waiting for them); and
 * each check of a rule with charge= that admitted it gives back the cost
 * it reserved and spends its charge instead (RL_NO_CHARGE: the reservation
 * stands),
 * even beyond the key's budget: the key then owes (is in debt) and is
 * refused until time repays it.  A key owes at most one limit beyond an
 * empty budget: a larger charge is capped there, and `capped` says so.  A
 * request refused, or not admitted by the rule (combine any), is never
 * charged.  Call it once per request; the caller holds the locks
 * (rq->order).
 */
#define RL_NO_CHARGE  UINT64_MAX
RL_API int rl_request_end(rl_request_t *rq, int64_t now_ms);

/* 1 if rl_request_end() spends a charge for this check (its rule has
   charge= and admitted the request) when its charge is given. */
RL_API int rl_check_charges(const rl_check_t *check);

/*
 * 1 if a request that ended so spends its charge= value for this check
 * (evaluate it then); 0 if what it reserved stands (RL_NO_CHARGE): a check
 * that charges nothing, or a request its client abandoned (abandoned: it
 * ended with 499, the client gone before the response) of a rule with
 * abandoned=keep, the default, so that a client cannot make its attempts
 * free by leaving before their answer.
 */
RL_API int rl_check_charge_wanted(const rl_check_t *check, int abandoned);

/* 1 if the rule's requests hold slots while they run (requests in flight,
   algorithm=concurrency): its request's end gives them back. */
RL_API int rl_rule_holds_slots(const rl_rule_t *rule);

/* Bytes of the block a rule's state needs beyond the table's slot (0 for
   most algorithms): what a table's layout is planned from. */
RL_API uint32_t rl_rule_block_size(const rl_rule_t *rule);


/* ---- gRPC: a refused call answered in gRPC's terms ---------------------- */

/*
 * A refused gRPC call gets a gRPC answer (ratelimit_grpc_status), not an
 * HTTP error that gRPC would read as UNAVAILABLE and retry at once: a
 * Trailers-Only response (HTTP 200, no body) whose grpc-status says why,
 * grpc-message what happened and when to come back, and
 * grpc-retry-pushback-ms the wait (gRFC A6: a client with a retry policy
 * waits exactly that, a negative value tells it not to retry, none lets it
 * use its own backoff).  gRPC-Web carries the same trailers in its body.
 */

enum rl_grpc_kind {
    RL_GRPC_NONE = 0,           /* not a gRPC call */
    RL_GRPC_NATIVE,             /* application/grpc[+fmt] */
    RL_GRPC_WEB,                /* application/grpc-web[+fmt] */
    RL_GRPC_WEB_TEXT            /* application/grpc-web-text[+fmt]: the
                                   body is base64 */
};

#define RL_GRPC_STATUS_MIN         1    /* CANCELLED */
#define RL_GRPC_STATUS_MAX         16   /* UNAUTHENTICATED */
#define RL_GRPC_RESOURCE_EXHAUSTED 8    /* the default */

/*
 * What a request is: a gRPC call is a POST (post set) whose Content-Type is
 * application/grpc, application/grpc-web or application/grpc-web-text (any
 * case), alone or with a "+format" suffix, then optional parameters (";"),
 * as gRPC's PROTOCOL-HTTP2 and PROTOCOL-WEB write them.  *type_len is the
 * length of the type with its suffix (no parameters): the response's
 * Content-Type.  Any other request, a GET too (a 200 of a GET could be
 * cached), is RL_GRPC_NONE.
 */
RL_API int rl_grpc_kind(int post, const char *content_type, size_t len,
    size_t *type_len);

#define RL_GRPC_MESSAGE_MAX   256
#define RL_GRPC_PUSHBACK_MAX  12

typedef struct {
    char    message[RL_GRPC_MESSAGE_MAX];   /* grpc-message, percent-encoded */
    size_t  message_len;
    char    pushback[RL_GRPC_PUSHBACK_MAX]; /* grpc-retry-pushback-ms */
    size_t  pushback_len;                   /*   0: none */
} rl_grpc_answer_t;

/*
 * The answer to a refused call, from the binding rule's decision (NULL: a
 * refusal with no decision, on_redis_error=deny): "rate limit exceeded,
 * retry in N s" (N: Retry-After's seconds) with the exact wait in ms as the
 * pushback; a wait beyond a signed 32-bit pushback (24.8 days), or a cost
 * the rule can never admit, "-1": do not retry; no time to wait for (a
 * concurrency slot; no decision), no pushback: the client's own backoff.
 * No key, no limit, no name of a rule.
 */
RL_API void rl_grpc_answer(const rl_decision_t *d, rl_grpc_answer_t *out);

/*
 * len bytes percent-encoded as grpc-message must be: every byte but
 * printable ASCII (0x20-0x7e) and '%' itself as %XX.  Writes at most 3 * len
 * bytes; returns how many.
 */
RL_API size_t rl_grpc_percent_encode(char *out, const void *in, size_t len);

/*
 * The body of a refused gRPC-Web call (kind RL_GRPC_WEB or
 * RL_GRPC_WEB_TEXT): one trailers frame (flags 0x80, a 32-bit big-endian
 * length, then "grpc-status: S\r\n" and the answer's grpc-message and
 * grpc-retry-pushback-ms as lines of an HTTP/1 header block), in base64 for
 * RL_GRPC_WEB_TEXT.  Writes at most RL_GRPC_WEB_BODY_MAX bytes; returns how
 * many.
 */
#define RL_GRPC_WEB_BODY_MAX  512
RL_API size_t rl_grpc_web_body(char *out, int kind, unsigned status,
    const rl_grpc_answer_t *a);


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
    uint32_t       waiting;     /*   requests waiting for one */
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
    uint64_t       refusals;    /* every refusal in the window */
    int64_t        since_ms;    /* the window: from since_ms until now */
    size_t         n;
    rl_top_key_t   top[2 * RL_TOP_ENTRIES];  /* most refused first */
} rl_top_t;

/* The top keys of the rule counted in `slot` (rl_table_rule_slot()). */
RL_API void rl_table_top(const void *mem, int slot, int64_t now_ms,
    rl_top_t *out);

/*
 * Counts a request decided elsewhere (rl_redis_answer()) as rl_decide()
 * counts its own: each rule's outcome in its counters, and a refusal among
 * the keys its rules refuse most.  The caller holds the locks.
 */
RL_API void rl_request_count(rl_request_t *rq, int64_t now_ms);

/*
 * Counts what a request's end charged elsewhere (a settle's reply, judged by
 * rl_redis_answer()) as rl_request_end() counts its own: each settled
 * check's units, and whether it left its key in debt, in its rule's
 * counters.  The caller holds the locks.
 */
RL_API void rl_request_count_charges(const rl_request_t *rq);


/* ---- Redis: fleet-wide limits ------------------------------------------- */

/*
 * A zone with redis= decides its rules in Redis, with one script call per
 * request (core/src/redis/ratelimit.lua, the transitions above in Lua).  The
 * glue owns the connections; the core writes the command and reads the
 * reply, so the fleet's servers all build the same keys and arguments.
 */

/* The script's text. */
RL_API const char *rl_redis_script(size_t *len);

/*
 * RL_OK if the rule's arithmetic stays exact in Redis's Lua (doubles, exact
 * below 2^53): limit (burst) x (period + max_delay) at most 2^50.  Else err.
 */
#define RL_REDIS_UNITS_MAX  (1ULL << 50)
RL_API int rl_redis_rule_ok(const rl_rule_t *rule, char *err, size_t errlen);

/*
 * The key naming a rule's state for a key: prefix, then 32 hex characters
 * of SHA-256(identity, key); no key bytes are stored in Redis.  For Redis
 * Cluster (cluster set), a hash tag of 16 hex characters of SHA-256(key)
 * comes between, "{...}", so that every rule's state for one key value is
 * in one slot.  Returns the length written.
 */
#define RL_REDIS_HASH_LEN  32
#define RL_REDIS_TAG_LEN   18
RL_API size_t rl_redis_key(char *out, const char *prefix, size_t prefix_len,
    int cluster, uint64_t identity, const void *key, size_t key_len);

/* Redis Cluster's slot of a Redis key (CRC16 of its hash tag, or of all
   of it), and the slot of the keys rl_redis_command writes for a key. */
RL_API unsigned rl_redis_slot(const char *rkey, size_t len);
RL_API unsigned rl_redis_key_slot(const void *key, size_t key_len);

/* Bytes rl_redis_command writes at most. */
RL_API size_t rl_redis_command_size(size_t n, size_t prefix_len,
    size_t script_len);

/*
 * What a call of the script does: decide the request (an admission spends,
 * a refusal may ban, as in a local zone); settle the charges of a request
 * that ended (the checks rl_request_end() would settle: each gives back
 * the cost it reserved, from its after.t and at, and spends its charge,
 * even into debt); or, for the key API, decide each check on its state as
 * it is without writing anything (peek: a ban shows, and refuses a cost),
 * or delete each check's state and ban (reset).
 */
enum rl_redis_call {
    RL_REDIS_DECIDE = 0,
    RL_REDIS_PEEK,
    RL_REDIS_RESET,
    RL_REDIS_SETTLE
};

/*
 * Writes one RESP command calling the script (enum rl_redis_call) for the
 * request's checks that apply (a key; a settle's: those that settle a
 * charge), with its combine: EVALSHA with script = the script's SHA-1 in
 * hex, or (eval set) EVAL with the script's text.  The keys are each
 * check's state, then the ban of each check whose rule has ban= (named as
 * rl_redis_key() names a state, under another identity).  now_ms < 0 lets
 * the script read Redis's TIME; tests pass their own clock.  Returns the
 * bytes written.
 */
RL_API size_t rl_redis_command(char *buf, const char *script, size_t script_len,
    int eval, int call, const char *prefix, size_t prefix_len, int cluster,
    const rl_request_t *rq, int64_t now_ms);

enum rl_resp_type {
    RL_RESP_STATUS = '+',
    RL_RESP_ERROR = '-',
    RL_RESP_INTEGER = ':',
    RL_RESP_BULK = '$',
    RL_RESP_ARRAY = '*'
};

#define RL_RESP_ITEMS_MAX  (2 + 12 * RL_RULES_MAX)

/* The longest reply taken: the script's longest answer (RL_RULES_MAX
   rules) is under 8 KB. */
#define RL_RESP_REPLY_MAX  16384
#define RL_RESP_TOO_LONG   (-2)

typedef struct {
    int          type;          /* enum rl_resp_type */
    int64_t      integer;       /* INTEGER; BULK, ARRAY: length (-1: nil) */
    const char  *str;           /* STATUS, ERROR, BULK: into the buffer */
    size_t       str_len;
    size_t       nitems;        /* ARRAY: integer items kept in items */
    int          integers;      /* ARRAY: 1 if every item is an integer */
    int64_t      items[RL_RESP_ITEMS_MAX];
} rl_resp_t;

/*
 * Parses the reply at p: returns the bytes it takes, 0 if more are needed,
 * -1 if the bytes are not RESP (or nest deeper than 8), RL_RESP_TOO_LONG if
 * the reply is longer than RL_RESP_REPLY_MAX bytes (or a bulk string or an
 * array says it will be): the caller drops the connection.
 */
RL_API long rl_resp_parse(const char *p, size_t len, rl_resp_t *r);

/* What a reply is (rl_redis_answer), for the glue to act on. */
enum rl_redis_kind {
    RL_REDIS_DECIDED = 0,       /* the script's answer, its shape and every
                                   value within what the rules can produce:
                                   the checks' decisions are set (a decided
                                   request is concluded, verdict); or "+OK"
                                   to a connection's own command */
    RL_REDIS_REDIRECT,          /* Redis Cluster's MOVED or ASK */
    RL_REDIS_NOSCRIPT,          /* the script is not loaded: call it again
                                   with EVAL */
    RL_REDIS_FAILED,            /* anything else: why says what */
    RL_REDIS_READONLY           /* failed, by a replica (READONLY): the
                                   primary failed over, the connection is to
                                   be opened again (to the host name's new
                                   address) */
};

/*
 * A reply's reset_ms, retry_after_ms and available_ms may exceed what the
 * rule produces on a steady clock by this much: Redis's clock may step back
 * (a failover to a server whose clock is behind).
 */
#define RL_REDIS_CLOCK_SLACK_MS  60000

/* The longest host name or address a redirection may give. */
#define RL_REDIS_HOST_MAX  255

typedef struct {
    int          kind;          /* enum rl_redis_kind */
    int          verdict;       /* DECIDED, RL_REDIS_DECIDE: enum
                                   rl_verdict */
    uint32_t     found;         /* DECIDED, RL_REDIS_RESET: bit i set if
                                   check i had a state, */
    uint32_t     unbanned;      /*   and if its ban (ban=) was lifted */
    unsigned     slot;          /* REDIRECT: the slot, */
    int          ask;           /*   ASK (this once) or MOVED (from now
                                   on), */
    const char  *host;          /*   and the server: an address or a name
                                   of letters, digits, ".", "-", "_" and
                                   ":", into the reply, */
    size_t       host_len;
    unsigned     port;
    char         why[RL_ERR_MAX]; /* FAILED: what is wrong, in words and
                                   numbers (never the reply's bytes) */
} rl_redis_answer_t;

/*
 * Classifies a reply to a call of the script (enum rl_redis_call) for rq,
 * or, with rq NULL, to a connection's own command (AUTH, SELECT, ASKING),
 * which only "+OK" answers.  The script's answer must have exactly the
 * items of the call, integers, each in range for its check's rule (the
 * rule as applied to the request): remaining at most what the rule can show
 * (its burst, limit, or what a shaper admits), reset, Retry-After and t
 * within what the algorithm can produce (a debt's and a ban's included,
 * plus RL_REDIS_CLOCK_SLACK_MS), Retry-After exactly when refused, a delay
 * only from leaky_bucket and at most max_delay, the rule's window, flags 0
 * or 1, never exactly when the cost exceeds what the rule admits, a ban
 * only of a ban= rule, at most ban= and refusing, the script's clock a time
 * (ms from 1970, at most RL_REDIS_UNITS_MAX) and the head's t after a
 * commit exactly for the checks that commit, after that clock by at most
 * what the algorithm waits, and the request's answer as its combine makes
 * it of the rules'.  A decided request's checks get their decisions, and
 * at and after.t (what settling a charge gives back).  A settle's answer:
 * for each check it settles, the units charged (at most the charge sent,
 * and a limit past the rule's capacity), the key in debt (only if
 * charged), capped (whenever less than the charge was spent): in each
 * check's charged, in_debt and capped.  Returns out->kind.
 */
RL_API int rl_redis_answer(rl_request_t *rq, int call, const rl_resp_t *r,
    rl_redis_answer_t *out);

/*
 * Refusals remembered (core/src/redis/refusals.cpp): a zone with redis=
 * keeps, in its shared memory, what Redis refused until when, so that a
 * spent key's requests are refused at once, with the same headers, without
 * a round trip, and never one Redis would have admitted.  A fixed array
 * (rl_refusals_size() bytes, zeroed: empty), entries named by a keyed hash
 * of the request's checks (their keys' tags, rules and parameters as
 * applied), written under the zone's lock and read without it.  Times are
 * the caller's monotonic clock in ms, the same in every process.
 *
 * Before sending a request to Redis, the caller reads the epoch and its
 * clock; when Redis refused it, rl_refusals_store() with both and the clock
 * as the reply came; the next request: rl_refusals_find() first.  A key
 * reset (the key API) calls rl_refusals_forget(): every entry of the zone,
 * and every reply still on its way, is forgotten.
 */
#define RL_REFUSALS_REFRESH_MS  1000   /* an entry is served so long at
                                          most after Redis's answer: what a
                                          reset on another server may wait */
RL_API size_t rl_refusals_size(size_t zone_size);
RL_API uint32_t rl_refusals_epoch(const void *cache);

/* 1: rq (hashed: rl_request_hash) is refused from the cache, concluded as
   rl_redis_answer() concludes a refusal; 0: ask Redis. */
RL_API int rl_refusals_find(const void *cache, size_t size, rl_request_t *rq,
    int64_t now_ms);

/* Remembers rq's refusal, as Redis answered it, if it is sound for every
   request of the same checks with costs no smaller until some instant
   after now_ms, and returns 1; any other answer of Redis for the same
   checks forgets their entry (it spent more than the entry knows).  The
   caller holds the zone's lock. */
RL_API int rl_refusals_store(void *cache, size_t size, const rl_request_t *rq,
    uint32_t epoch, int64_t sent_ms, int64_t now_ms);

RL_API void rl_refusals_forget(void *cache);

#ifdef __cplusplus
}
#endif

#endif /* RATELIMIT_H */
