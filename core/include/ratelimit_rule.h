/*
 * ngx-ratelimit core: a rule, for whoever writes one (the directive, the
 * tools): its parameters parsed and checked, its identity, its names; and
 * the pure transition of its algorithm on a key's state, the decision it
 * gives.  The rest of the C API: ratelimit_table.h (the shared-memory key
 * table, the key API), ratelimit_request.h (a request decided as a whole,
 * settled when it ends; a refused gRPC call's answer), ratelimit_redis.h
 * (Redis zones), ratelimit_render.h (what the stats and the key API
 * answer), ratelimit_sync.h (redis_sync); ratelimit.h includes them all.
 *
 * No function of the C API throws, allocates on the request path, or knows
 * about nginx.  Time is always an integer number of milliseconds since the
 * Unix epoch (wall clock).  Every algorithm is jump-safe: a clock that
 * steps backwards never lets a key spend more than its limit.
 */

#ifndef RATELIMIT_RULE_H
#define RATELIMIT_RULE_H

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
    RL_ADAPTIVE,                /* requests in flight, the limit following
                                   the upstream's latency */
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
#define RL_KEY_ADDR_BINARY 1                  /* $binary_remote_addr */
#define RL_KEY_ADDR_TEXT   2                  /* $remote_addr */
#define RL_NAME_MAX       64                   /* including the NUL */
#define RL_ERR_MAX        512                  /* enough for any message */
#define RL_RULES_MAX      32                   /* rules of one request */
#define RL_BAN_MAX_MS     RL_PERIOD_MAX_MS     /* ban= */
#define RL_CONCURRENCY_MAX 4096u               /* concurrency: slots a key */
#define RL_QUEUE_MAX      1024u                /*   and requests waiting */
#define RL_LEASE_DEFAULT_MS 30000              /*   a slot's lease in Redis */

typedef struct {
    uint32_t  algorithm;        /* enum rl_algorithm */
    uint32_t  limit;            /* cost units per period */
    uint32_t  burst;            /* gcra, token_bucket: capacity (limit) */
    uint32_t  cost;             /* constant cost (default 1) */
    int64_t   period_ms;        /* default 1000; quota: the current period */
    uint32_t  limit_max;        /* with a variable: the largest limit and
                                   burst it may give (sizes sliding_log's
                                   state) */
    uint8_t   cost_var;         /* cost= is a $variable (the glue's) */
    uint8_t   zero_cost;        /* zero_cost=on: a cost variable's 0 looks
                                   without spending (else it counts as 1) */
    uint8_t   log_key;          /* log_key=on: log lines show the key, not
                                   its fingerprint */
    uint8_t   limit_var;        /* limit= is a $variable (the glue's):
                                   limit holds limit_default, and
                                   rl_rule_apply() a request's */
    uint8_t   burst_var;        /* burst= is a $variable */
    uint8_t   charge;           /* charge= (the glue's value): admitted
                                   requests reserve cost, and what the
                                   value says is spent when they end
                                   (rl_request_end) */
    uint8_t   abandoned;        /* charge=: what a request its client
                                   abandoned (ended with 499) spends:
                                   RL_ABANDONED_KEEP what it reserved, or
                                   RL_ABANDONED_CHARGE its charge */
    uint8_t   key_addr;         /* the key is the client's address (the
                                   glue's): RL_KEY_ADDR_BINARY or
                                   RL_KEY_ADDR_TEXT; 0: another key.  An
                                   override of an address range applies
                                   to such a rule only */
    uint64_t  keyed;            /* rl_rule_keyed() of its key expression
                                   (the glue's): an override of every
                                   rule's key applies to the rules keyed
                                   on the expression it names only */
    int64_t   ban_ms;           /* ban=: a key this rule refuses is
                                   refused for so long (0: no ban) */
    uint64_t  own[5];           /* the parameters of the algorithm's own
                                   (buckets=, max_delay=, reset=, ...): a
                                   block its file declares and reads
                                   (core/src/algorithms/algorithm.h) */
    uint64_t  given;            /* internal: parameters set explicitly */
    const char *name;           /* given by name=, or rl_rule_finish's:
                                   NUL-terminated, up to RL_NAME_MAX bytes,
                                   written in the room rl_rule_init was
                                   given; the caller may point it at a
                                   copy once the rule is finished (nginx
                                   keeps a name at its length) */
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
    int64_t   horizon_ms;       /* the furthest ahead of the clock a key's
                                   t can be under the rule as it is (its
                                   longest wait, with a charge's debt):
                                   a state found further ahead is read as
                                   this far (a file from a clock that ran
                                   ahead, a rule relaxed since) */
    struct rl_classes_s *classes; /* concurrency, adaptive: priority= and
                                   its classes (ratelimit_classes.h), in
                                   memory the rule's reader gives before
                                   its parameters are parsed; NULL: none */
} rl_rule_t;

/* Results of rl_rule_param. */
#define RL_OK        0
#define RL_ERROR    -1
#define RL_DECLINED  1   /* zone=, key=, or cost=, limit= or burst= with a
                            $variable: the caller's business */

/*
 * A rule with every parameter at its default, its name to be written in
 * `name` (RL_NAME_MAX bytes, kept as long as the rule is, or until the
 * caller points rule->name at a copy).
 */
RL_API void rl_rule_init(rl_rule_t *rule, char name[RL_NAME_MAX]);

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
 * rule->charge (the caller gives each request's charge); the rule's name
 * is written in `name`, as rl_rule_init's.  For tools and tests.
 */
RL_API int rl_rule_parse(rl_rule_t *rule, char name[RL_NAME_MAX],
    const char *text, char *err, size_t errlen);

/*
 * The identity that keys a rule's state in a table: rules with the same
 * identity and key share state.  It is the rule's name and algorithm; a
 * derived name also takes in the key expression, so two unnamed rules
 * differing only in their key never share state.
 */
RL_API uint64_t rl_rule_identity(const rl_rule_t *rule, const char *key_expr,
    size_t key_expr_len);

/*
 * What stands for a rule's key expression (as written: "$http_x_api_key")
 * in rl_rule_t.keyed: the same for the same text on every server, never 0.
 */
RL_API uint64_t rl_rule_keyed(const char *key_expr, size_t key_expr_len);

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

#ifdef __cplusplus
}
#endif

#endif /* RATELIMIT_RULE_H */
