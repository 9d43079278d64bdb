
/*
 * ngx-ratelimit: the nginx glue's shared types, and the clocks.  It calls
 * nothing and includes none of the glue's headers: each file of the glue
 * includes it, its own header, and the headers of the files below it that
 * it calls (tools/glue-layers says which are below which).
 *
 * The glue evaluates nginx values (keys, costs, charges), takes the zones'
 * locks and applies what the core decides (core/include/ratelimit.h: every
 * algorithm, the rule parser, the key table, the decision of a whole
 * request).  Which file holds what: docs/architecture.md.
 */

#ifndef NGX_HTTP_RATELIMIT_TYPES_H
#define NGX_HTTP_RATELIMIT_TYPES_H


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ratelimit.h"
#include "ratelimit_render.h"
#include "ratelimit_sync.h"


/* Redis zones' (ngx_http_ratelimit_redis.h), and redis_sync's
   (ngx_http_ratelimit_sync.h) */
typedef struct ngx_http_ratelimit_redis_s       ngx_http_ratelimit_redis_t;
typedef struct ngx_http_ratelimit_redis_wait_s  ngx_http_ratelimit_redis_wait_t;
typedef struct ngx_http_ratelimit_sync_s        ngx_http_ratelimit_sync_t;
typedef struct ngx_http_ratelimit_overrides_poll_s
    ngx_http_ratelimit_overrides_poll_t;


/* $ratelimit_decided_by: where the decision was taken */
#define NGX_HTTP_RATELIMIT_BY_LOCAL          1
#define NGX_HTTP_RATELIMIT_BY_REDIS          2
#define NGX_HTTP_RATELIMIT_BY_FALLBACK_LOCAL 3
#define NGX_HTTP_RATELIMIT_BY_FALLBACK_ALLOW 4
#define NGX_HTTP_RATELIMIT_BY_FALLBACK_DENY  5
#define NGX_HTTP_RATELIMIT_BY_REDIS_CACHED   6

/* ratelimit_headers */
#define NGX_HTTP_RATELIMIT_HEADERS_LEGACY    0x01
#define NGX_HTTP_RATELIMIT_HEADERS_IETF      0x02

/* ratelimit_log_level off */
#define NGX_HTTP_RATELIMIT_LOG_OFF           0

/* A rule whose counters in its zone a worker has not looked up yet. */
#define NGX_HTTP_RATELIMIT_STATS_UNKNOWN     (-2)

/* Bytes of a key shown in log lines (and by the key API), and of the most
   that ngx_http_ratelimit_escape_key writes. */
#define NGX_HTTP_RATELIMIT_KEY_LOG_MAX       64
#define NGX_HTTP_RATELIMIT_KEY_ESCAPED                                        \
    RL_ESCAPED_MAX(NGX_HTTP_RATELIMIT_KEY_LOG_MAX)

/* Log folding, per worker: the keys remembered, and lines a rule may write
   in a second before the rest are only counted. */
#define NGX_HTTP_RATELIMIT_FOLD_KEYS         1024
#define NGX_HTTP_RATELIMIT_FOLD_LINES        10


typedef struct ngx_http_ratelimit_rule_s  ngx_http_ratelimit_rule_t;


/* A failure that repeats on a timer (a zone's file that cannot be
   written), in a process: said once, its repeats counted
   (ngx_http_ratelimit_log_written). */
typedef struct {
    ngx_uint_t                   failures;  /* since its first line; 0:
                                               not failing */
    ngx_uint_t                   folded;    /* since its last line */
    ngx_err_t                    err;       /* its last line's */
    ngx_msec_t                   said;      /* when */
} ngx_http_ratelimit_repeat_t;


typedef struct {
    ngx_str_t                    name;      /* as declared */
    ngx_slab_pool_t             *shpool;    /* its mutex is the zone's lock */
    size_t                       size;      /* of the shared memory */
    void                        *table;     /* rl table inside the zone */
    ngx_array_t                  blobs;     /* uint32_t: its rules' blocks */
    uint64_t                     stack_slots;  /* its rules in locations
                                               where one keeps a block,
                                               and those with a block:
                                               the stack its table plans
                                               for (rl_table_stack) */
    uint64_t                     stack_blocks;
    ngx_array_t                  rules;     /* ngx_http_ratelimit_rule_t *:
                                               the rules naming it */
    ngx_http_ratelimit_rule_t  **names;     /* its first rule of each name,
                                               sorted by name */
    ngx_uint_t                   nnames;
    int32_t                     *slots;     /* this worker's: each name's
                                               counters in the table, or
                                               ..._STATS_UNKNOWN (apart from
                                               the rules, so that a worker
                                               writes none of the
                                               configuration's pages) */
    u_char                      *file;      /* where it is declared */
    ngx_uint_t                   line;
    ngx_cycle_t                 *cycle;     /* of its configuration */
    ngx_http_ratelimit_redis_t  *redis;     /* NULL: decided in the zone */
    ngx_http_ratelimit_sync_t   *sync;      /* redis_sync: decided in the
                                               zone, exchanged with Redis */
    ngx_flag_t                   stats_full_logged; /* in this worker */
    ngx_flag_t                   planned;   /* its layout checked */
    ngx_uint_t                   overrides; /* overrides=: room for so many */
    ngx_str_t                    overrides_file; /* overrides_file=; empty:
                                               none */
    void                        *store;     /* the overrides' store, after
                                               the table (NULL: none) */
    ngx_event_t                  overrides_event; /* this worker's timer:
                                               the file written, expired
                                               overrides removed */
    rl_override_rule_t          *override_rules; /* this worker's: its
                                               rules, a name once */
    ngx_uint_t                   override_nrules;
    ngx_http_ratelimit_redis_t  *overrides_redis; /* a Redis or redis_sync
                                               zone's Redis, where its
                                               overrides are */
    ngx_http_ratelimit_overrides_poll_t  *poll;  /* this worker's taking
                                               of them */
    ngx_http_ratelimit_repeat_t  overrides_failing; /* this process's
                                               writes of the file */
    int64_t                      overrides_checked; /* this worker's timer:
                                               expiries seen until */
    ngx_str_t                    state_file; /* state=; empty: none */
    ngx_msec_t                   state_interval; /* state_interval= */
    ngx_event_t                  state_event; /* worker 0's timer: the
                                               state file written */
    ngx_msec_t                   state_written; /* when, by this worker */
    ngx_flag_t                   state_upgrade; /* an upgrade seen (the
                                               pid file's .oldbin) */
    ngx_http_ratelimit_repeat_t  state_failing; /* this process's writes */
} ngx_http_ratelimit_zone_t;


/* A rule's log lines in a worker: written, and folded. */
typedef struct ngx_http_ratelimit_rule_log_s  ngx_http_ratelimit_rule_log_t;

struct ngx_http_ratelimit_rule_log_s {
    ngx_http_ratelimit_rule_t      *rule;
    ngx_http_ratelimit_rule_log_t  *next;   /* the worker's rules that
                                               logged (rmcf->logged) */
    ngx_msec_t                   log_second; /* ngx_http_ratelimit_log_line */
    ngx_uint_t                   log_lines;
    ngx_uint_t                   log_level;
    ngx_msec_t                   bad_second; /* ngx_http_ratelimit_log_bad */
    ngx_uint_t                   folded[3]; /* rejections, delays, bad
                                               values */
};


/* A rule's values nginx evaluates for each request, each NULL where the
   rule has none (most rules: so they are apart from the rule). */
typedef struct {
    ngx_http_complex_value_t    *cost;      /* NULL: rule.cost */
    ngx_http_complex_value_t    *limit;     /* limit=$var; NULL: rule.limit */
    ngx_http_complex_value_t    *burst;     /* burst=$var; NULL: rule.burst */
    ngx_http_complex_value_t    *charge;    /* charge=, spent as the request
                                               ends; NULL: none */
} ngx_http_ratelimit_rule_vars_t;


struct ngx_http_ratelimit_rule_s {
    ngx_shm_zone_t              *shm_zone;  /* data: the zone */
    rl_rule_t                    rule;
    uint64_t                     identity;
    ngx_str_t                    name;      /* rule.name */
    ngx_http_complex_value_t    *key;       /* shared by the rules of the
                                               same key */
    ngx_http_ratelimit_rule_vars_t  *vars;  /* NULL: none */
    int32_t                      key_index; /* a key that is one variable,
                                               or NGX_ERROR (the same as
                                               the rule before's: its value
                                               is taken from it) */
    uint32_t                     name_index; /* its name among its zone's
                                               (zone->names, zone->slots) */

    /* this worker's, once the rule logs (a configuration may hold
       thousands of rules that never do) */
    ngx_http_ratelimit_rule_log_t  *log;
};


/* ratelimit_status, ratelimit_grpc_status not given: the refusing rule's
   (429, or 503 for an overload: rl_request_refusal) */
#define NGX_HTTP_RATELIMIT_BY_RULE  1000


typedef struct {
    ngx_array_t                  rules;     /* ngx_http_ratelimit_rule_t */
    ngx_uint_t                   combine;
    ngx_uint_t                   status_code; /* BY_RULE: not given */
    ngx_uint_t                   grpc_status; /* of a refused gRPC call;
                                               0: off, answered as HTTP;
                                               BY_RULE: not given */
    ngx_uint_t                   headers;
    ngx_flag_t                   dry_run;
    ngx_uint_t                   log_level;
    ngx_flag_t                   off;       /* "ratelimit off" here */
    ngx_flag_t                   api_write; /* ratelimit_api write=on;
                                               NGX_CONF_UNSET: no API */
    ngx_flag_t                   ends;      /* a rule here settles when a
                                               request ends: charge=, or
                                               concurrency */
    ngx_flag_t                   slots;     /*   concurrency */
    ngx_flag_t                   policy_each; /* each request writes its
                                               RateLimit-Policy (a rule's
                                               policy depends on it) */
    ngx_str_t                    policy;    /* RateLimit-Policy, when the
                                               same for every request */
} ngx_http_ratelimit_loc_conf_t;


/* A rule naming a zone, as the directive was read. */
typedef struct {
    ngx_shm_zone_t              *shm_zone;
    u_char                      *file;
    ngx_uint_t                   line;
    ngx_array_t                 *rules;     /* the rule: rules->elts[index] */
    ngx_uint_t                   index;
} ngx_http_ratelimit_zone_ref_t;


/* A rule and key logged lately, in a worker. */
typedef struct {
    ngx_http_ratelimit_rule_t   *rule;
    uint64_t                     tag;
    ngx_msec_t                   at;
} ngx_http_ratelimit_fold_t;


/* A rule's key as written, and compiled: rules of the same key share it. */
typedef struct {
    ngx_str_t                    text;
    ngx_http_complex_value_t    *cv;
} ngx_http_ratelimit_key_t;

/* keys remembered while the configuration is read */
#define NGX_HTTP_RATELIMIT_KEYS_SHARED  8


typedef struct {
    ngx_array_t                  zone_refs; /* ngx_http_ratelimit_zone_ref_t,
                                               while the configuration is
                                               read (its temporary pool) */
    ngx_http_ratelimit_rule_log_t  *logged; /* this worker's rules that
                                               logged */
    ngx_http_ratelimit_key_t     keys[NGX_HTTP_RATELIMIT_KEYS_SHARED];
    ngx_uint_t                   nkeys;     /* compiled: the last ones */
    ngx_http_ratelimit_fold_t   *fold;      /* [NGX_HTTP_RATELIMIT_FOLD_KEYS] */
    ngx_event_t                  fold_event;
    ngx_flag_t                   ends;      /* some rule settles when a
                                               request ends: the log phase's
                                               handler is set */
} ngx_http_ratelimit_main_conf_t;


typedef struct ngx_http_ratelimit_ctx_s  ngx_http_ratelimit_ctx_t;

/* Decides a request waiting for a slot again (last: it may wait no longer). */
typedef void (*ngx_http_ratelimit_retry_pt)(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, ngx_uint_t last);

/*
 * Per request, on r->main; found again after internal redirects (its
 * pool's cleanup).  The worker's, reused (ngx_http_ratelimit_request.c):
 * a new context is zeroed up to `rq`; the fields from there on are written
 * before they are read (when decided; with the binding rule; when it
 * waits).
 */
struct ngx_http_ratelimit_ctx_s {
    ngx_pool_cleanup_t           cleanup;   /* in r->main's pool */
    ngx_uint_t                   status;    /* enum rl_status */
    ngx_uint_t                   headers;   /* mode of the checking location */
    ngx_uint_t                   decided_by; /* NGX_HTTP_RATELIMIT_BY_* */

    ngx_http_ratelimit_rule_t   *rule;      /* binding rule, or NULL */
    const rl_rule_t             *applied;   /* its parameters as applied to
                                               the request (limit=$var) */

    ngx_http_ratelimit_redis_wait_t  *redis; /* while Redis decides */
    int64_t                      redis_sent; /* when it was sent, and the */
    uint32_t                     redis_epoch; /* refusals' epoch then */
    ngx_int_t                    rc;        /* the handler's, once decided */

    unsigned                     headers_done:1;
    unsigned                     finalized:1; /* headers sent again after a
                                                 filter finalized */
    unsigned                     delayed:1;  /* delayed, not yet released */
    unsigned                     refund:1;   /* give back if abandoned */
    unsigned                     redis_waiting:1;
    unsigned                     resume:1;   /* the handler returns rc */
    unsigned                     kept:1;     /* rq.checks in the pool */
    unsigned                     ends:1;     /* its rules settle when it
                                                ends (charge=, concurrency) */
    unsigned                     ended:1;    /* and have */
    unsigned                     in_wait:1;  /* waiting for a slot */
    unsigned                     leased:1;   /* holds leases in Redis
                                                (concurrency), in its
                                                worker's list */
    unsigned                     lease_local:1; /* admitted by
                                                on_redis_error=local */
    unsigned                     lease_sent:1; /* its leases sent to Redis
                                                (taken, or restored) */
    unsigned                     here:1;     /* holds slots in its server's
                                                zone (a Redis zone's
                                                concurrency) */
    unsigned                     charged_set:1;
    unsigned                     grpc:2;    /* refused, and answered as a
                                               gRPC call: rl_grpc_kind */
    uint64_t                     charged;   /* $ratelimit_charged */
    ngx_http_request_t          *request;   /* the main request */
    uint32_t                     override;  /* $ratelimit_override: the
                                               override a check met
                                               (rl_check_t's), 0: none */

    /* the request as the core decides it (its inputs written, its
       outputs the core's); its checks are in the request's pool while it
       waits (for Redis, or delayed) */
    rl_request_t                 rq;
    /* the rule a limit override makes, as the last request the context
       served left it (zeroed when allocated): the core makes it again
       only when the override changed */
    rl_rule_room_t               room;
    /* with override */
    const rl_rule_t             *override_rule; /* its check's rule */
    ngx_str_t                    override_key;  /*   and key */
    /* with rule */
    rl_decision_t                decision;  /* binding rule's decision */
    uint64_t                     tag;       /* binding rule's key, hashed */
    ngx_str_t                    policy;    /* RateLimit-Policy */
    /* the header filter's */
    u_char                       values[3 * NGX_INT64_LEN]; /* of the
                                               X-RateLimit-* headers */
    /* with in_wait */
    ngx_queue_t                  wait_link; /* in this worker's waiting
                                               requests */
    ngx_msec_t                   wait_until; /* its max_wait is over */
    ngx_http_ratelimit_retry_pt  retry;     /* decides it again */
    /* with leased */
    ngx_queue_t                  lease_link; /* in its worker's leases of
                                               the zone's Redis */
    /* spare */
    ngx_http_ratelimit_ctx_t    *next_free;
};


/* What a zone's snapshot holds besides its figures (stats.c). */
#define NGX_HTTP_RATELIMIT_SNAPSHOT_COUNTERS  0x01  /* its rules' counters */
#define NGX_HTTP_RATELIMIT_SNAPSHOT_TOPS      0x02  /*   and top keys */
#define NGX_HTTP_RATELIMIT_SNAPSHOT_RULES     0x04  /* its rules' settings */


extern ngx_module_t  ngx_http_ratelimit_module;


/*
 * The clock the core decides on: nginx's cached wall-clock time, in ms
 * (the handler's comment says why wall time).
 */

static ngx_inline int64_t
ngx_http_ratelimit_now(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (int64_t) tp->sec * 1000 + tp->msec;
}


/*
 * The clock of the refusals a Redis zone remembers (rl_refusals_*): the
 * system's monotonic clock, the same in every worker, read now (nginx's
 * cached time may be behind: a refusal would be served past its end).
 */

static ngx_inline int64_t
ngx_http_ratelimit_monotonic_ms(void)
{
    struct timespec  ts;

    (void) clock_gettime(CLOCK_MONOTONIC, &ts);

    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


/* ngx_str_t as the core's rl_str_t */
#define ngx_http_ratelimit_rl_str(s)                                          \
    ((rl_str_t) { (const char *) (s)->data, (s)->len })

/* A function kept out of its caller, so that a caller's common path does
   not set up the frame of its rare one. */
#if (defined __GNUC__)
#define NGX_HTTP_RATELIMIT_NOINLINE  __attribute__((noinline))
#else
#define NGX_HTTP_RATELIMIT_NOINLINE
#endif


/*
 * Bytes zeroed a word at a time (from a word), unrolled where their number
 * is a constant: a few 16-byte stores where ngx_memzero's "rep stosq" runs
 * a step a word (a request's context and each check's outputs, on every
 * request).  The words may alias the fields they overwrite.
 */
#if (defined __GNUC__)

typedef uint64_t  ngx_http_ratelimit_word_t __attribute__((__may_alias__));

static ngx_inline void
ngx_http_ratelimit_zero(void *p, size_t size)
{
    size_t                      i;
    ngx_http_ratelimit_word_t  *w;

    w = p;

#if (__GNUC__ >= 8 || defined __clang__)
#pragma GCC unroll 64
#endif
    for (i = 0; i < size / sizeof(ngx_http_ratelimit_word_t); i++) {
        w[i] = 0;
    }

    for (i = size - size % sizeof(ngx_http_ratelimit_word_t); i < size; i++) {
        ((u_char *) p)[i] = 0;
    }
}

#else
#define ngx_http_ratelimit_zero(p, size)  ngx_memzero(p, size)
#endif


/* The rule a check is of. */
#define ngx_http_ratelimit_rule_of(check)                                     \
    ((ngx_http_ratelimit_rule_t *) (check)->data)

/* The zone a rule names. */
#define ngx_http_ratelimit_zone_of(rule)                                      \
    ((ngx_http_ratelimit_zone_t *) (rule)->shm_zone->data)



#endif /* NGX_HTTP_RATELIMIT_TYPES_H */
