
/*
 * ngx-ratelimit: the nginx glue's shared types.
 *
 * The glue evaluates nginx values (keys, costs, charges), takes the zones'
 * locks and applies what the core decides (core/include/ratelimit.h: every
 * algorithm, the rule parser, the key table, the decision of a whole
 * request).  Which file holds what, and how they depend on each other:
 * docs/architecture.md.
 */

#ifndef NGX_HTTP_RATELIMIT_MODULE_H
#define NGX_HTTP_RATELIMIT_MODULE_H


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ratelimit.h"
#include "ratelimit_render.h"
#include "ngx_http_ratelimit_redis.h"
#include "ngx_http_ratelimit_sync.h"


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


typedef struct {
    ngx_str_t                    name;      /* as declared */
    ngx_slab_pool_t             *shpool;    /* its mutex is the zone's lock */
    size_t                       size;      /* of the shared memory */
    void                        *table;     /* rl table inside the zone */
    ngx_array_t                  blobs;     /* uint32_t: its rules' blocks */
    ngx_array_t                  rules;     /* ngx_http_ratelimit_rule_t *:
                                               the rules naming it */
    u_char                      *file;      /* where it is declared */
    ngx_uint_t                   line;
    ngx_http_ratelimit_redis_t  *redis;     /* NULL: decided in the zone */
    ngx_http_ratelimit_sync_t   *sync;      /* redis_sync: decided in the
                                               zone, exchanged with Redis */
    ngx_flag_t                   stats_full_logged; /* in this worker */
} ngx_http_ratelimit_zone_t;


typedef struct {
    ngx_shm_zone_t              *shm_zone;  /* data: the zone */
    rl_rule_t                    rule;
    uint64_t                     identity;
    ngx_str_t                    name;      /* rule.name */
    ngx_str_t                    limit_text; /* rule.limit, in decimal */
    ngx_http_complex_value_t     key;
    ngx_int_t                    key_index; /* a key that is one variable */
    ngx_flag_t                   key_shared; /* and the rule before's: its
                                               value is taken from it */
    ngx_http_complex_value_t    *cost;      /* NULL: rule.cost */
    ngx_http_complex_value_t    *limit;     /* limit=$var; NULL: rule.limit */
    ngx_http_complex_value_t    *burst;     /* burst=$var; NULL: rule.burst */
    ngx_http_complex_value_t    *charge;    /* charge=, spent as the request
                                               ends; NULL: none */
    ngx_int_t                    stats;     /* its counters in the zone, or
                                               ..._STATS_UNKNOWN */

    /* this worker's */
    ngx_msec_t                   log_second; /* ngx_http_ratelimit_log_line */
    ngx_uint_t                   log_lines;
    ngx_uint_t                   log_level;
    ngx_msec_t                   bad_second; /* ngx_http_ratelimit_log_bad */
    ngx_uint_t                   folded[3]; /* rejections, delays, bad
                                               values */
} ngx_http_ratelimit_rule_t;


typedef struct {
    ngx_array_t                  rules;     /* ngx_http_ratelimit_rule_t */
    ngx_uint_t                   combine;
    ngx_uint_t                   status_code;
    ngx_uint_t                   grpc_status; /* of a refused gRPC call;
                                               0: off, answered as HTTP */
    ngx_uint_t                   headers;
    ngx_flag_t                   dry_run;
    ngx_uint_t                   log_level;
    ngx_flag_t                   off;       /* "ratelimit off" here */
    ngx_flag_t                   api_write; /* ratelimit_api write=on;
                                               NGX_CONF_UNSET: no API */
    ngx_flag_t                   ends;      /* a rule here settles when a
                                               request ends: charge=, or
                                               concurrency */
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


typedef struct {
    ngx_array_t                  zone_refs; /* ngx_http_ratelimit_zone_ref_t */
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
    unsigned                     charged_set:1;
    unsigned                     grpc:2;    /* refused, and answered as a
                                               gRPC call: rl_grpc_kind */
    uint64_t                     charged;   /* $ratelimit_charged */
    ngx_http_request_t          *request;   /* the main request */

    /* the request as the core decides it (its inputs written, its
       outputs the core's); its checks are in the request's pool while it
       waits (for Redis, or delayed) */
    rl_request_t                 rq;
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
    /* spare */
    ngx_http_ratelimit_ctx_t    *next_free;
};


/* What a zone's snapshot holds besides its figures (stats.c). */
#define NGX_HTTP_RATELIMIT_SNAPSHOT_COUNTERS  0x01  /* its rules' counters */
#define NGX_HTTP_RATELIMIT_SNAPSHOT_TOPS      0x02  /*   and top keys */
#define NGX_HTTP_RATELIMIT_SNAPSHOT_RULES     0x04  /* its rules' settings */


extern ngx_module_t  ngx_http_ratelimit_module;


/* ngx_http_ratelimit_handler.c */
ngx_int_t ngx_http_ratelimit_handler(ngx_http_request_t *r);

/* ngx_http_ratelimit_request.c */
ngx_http_ratelimit_ctx_t *ngx_http_ratelimit_new_ctx(ngx_http_request_t *r);
ngx_http_ratelimit_ctx_t *ngx_http_ratelimit_find_ctx(ngx_http_request_t *r);
ngx_int_t ngx_http_ratelimit_keep_checks(ngx_http_ratelimit_ctx_t *ctx);
ngx_int_t ngx_http_ratelimit_end_handler(ngx_http_request_t *r);
void ngx_http_ratelimit_end(ngx_http_ratelimit_ctx_t *ctx,
    ngx_uint_t charges);

/* ngx_http_ratelimit_wait.c */
ngx_int_t ngx_http_ratelimit_delay(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
ngx_int_t ngx_http_ratelimit_wait(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, ngx_http_ratelimit_retry_pt retry);
void ngx_http_ratelimit_wait_wake(void);
void ngx_http_ratelimit_wait_leave(ngx_http_ratelimit_ctx_t *ctx);

/* ngx_http_ratelimit_grpc.c */
char *ngx_http_ratelimit_grpc_status(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_uint_t ngx_http_ratelimit_grpc_kind(ngx_http_request_t *r,
    ngx_http_ratelimit_loc_conf_t *rlcf, size_t *type_len);
ngx_int_t ngx_http_ratelimit_grpc_answer(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);

/* ngx_http_ratelimit_log.c */
void ngx_http_ratelimit_log_verdict(ngx_http_request_t *r, ngx_uint_t level,
    rl_request_t *rq, ngx_uint_t waited);
#if (NGX_DEBUG)
void ngx_http_ratelimit_debug_decision(ngx_http_request_t *r,
    rl_request_t *rq);
void ngx_http_ratelimit_debug_end(ngx_http_request_t *r, rl_request_t *rq,
    int freed, ngx_uint_t charges);
#endif
void ngx_http_ratelimit_log_bad(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule, const char *what);
ngx_int_t ngx_http_ratelimit_log_init(ngx_conf_t *cf,
    ngx_http_ratelimit_main_conf_t *rmcf);
u_char *ngx_http_ratelimit_escape_key(u_char *p, const u_char *data,
    size_t len);
ngx_log_t *ngx_http_ratelimit_request_log(ngx_http_request_t *r,
    ngx_log_t *log);

/* ngx_http_ratelimit_zone.c */
char *ngx_http_ratelimit_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_ratelimit_zone_name(ngx_conf_t *cf, const char *directive,
    ngx_str_t *name);
ngx_shm_zone_t *ngx_http_ratelimit_lookup_zone(ngx_list_t *shared_memory,
    ngx_str_t *name);
ngx_int_t ngx_http_ratelimit_zones_init(ngx_conf_t *cf,
    ngx_http_ratelimit_main_conf_t *rmcf);
void ngx_http_ratelimit_claim_stats(ngx_http_ratelimit_zone_t *zone,
    ngx_uint_t lock);
int ngx_http_ratelimit_counters(ngx_log_t *log,
    ngx_http_ratelimit_rule_t *rule);
ngx_http_ratelimit_rule_t *ngx_http_ratelimit_zone_rule(
    ngx_http_ratelimit_zone_t *zone, ngx_str_t *name);
void ngx_http_ratelimit_top(ngx_http_ratelimit_zone_t *zone, int slot,
    rl_top_t *top);
ngx_http_ratelimit_zone_t *ngx_http_ratelimit_next_zone(ngx_cycle_t *cycle,
    ngx_list_part_t **part, ngx_uint_t *i);
void ngx_http_ratelimit_lock_all(rl_request_t *rq, ngx_uint_t lock);

/* ngx_http_ratelimit_headers.c */
ngx_int_t ngx_http_ratelimit_headers_init(ngx_conf_t *cf, ngx_uint_t filter);
ngx_int_t ngx_http_ratelimit_add_variables(ngx_conf_t *cf);
u_char *ngx_http_ratelimit_number(u_char *p, uint64_t n);

/* ngx_http_ratelimit_stats.c */
char *ngx_http_ratelimit_stats(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_ratelimit_answer_headers(ngx_http_request_t *r,
    ngx_str_t *cache);
ngx_int_t ngx_http_ratelimit_add_headers(ngx_http_request_t *r,
    ngx_keyval_t *headers, ngx_uint_t n);
ngx_int_t ngx_http_ratelimit_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *type, u_char *data, size_t len);
ngx_int_t ngx_http_ratelimit_send_json(ngx_http_request_t *r,
    ngx_uint_t status, u_char *data, size_t len);
ngx_int_t ngx_http_ratelimit_snapshot(ngx_http_request_t *r, ngx_uint_t what,
    rl_stats_snapshot_t *s);
ngx_int_t ngx_http_ratelimit_zone_snapshot(ngx_http_request_t *r,
    ngx_http_ratelimit_zone_t *zone, ngx_uint_t what, rl_zone_snapshot_t *z);
ngx_int_t ngx_http_ratelimit_top_view(ngx_http_request_t *r,
    ngx_http_ratelimit_zone_t *zone, ngx_http_ratelimit_rule_t *rule, int slot,
    rl_top_t *top, rl_top_view_t *v);

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

/* ngx_http_ratelimit_api.c */
char *ngx_http_ratelimit_api(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);


/* A function kept out of its caller, so that a caller's common path does
   not set up the frame of its rare one. */
#if (defined __GNUC__)
#define NGX_HTTP_RATELIMIT_NOINLINE  __attribute__((noinline))
#else
#define NGX_HTTP_RATELIMIT_NOINLINE
#endif


/* The rule a check is of. */
#define ngx_http_ratelimit_rule_of(check)                                     \
    ((ngx_http_ratelimit_rule_t *) (check)->data)

/* The zone a rule names. */
#define ngx_http_ratelimit_zone_of(rule)                                      \
    ((ngx_http_ratelimit_zone_t *) (rule)->shm_zone->data)


/*
 * Locks the zones a request uses: most requests use one, locked here
 * without a call, its mutex returned for ngx_http_ratelimit_unlock();
 * several, by ngx_http_ratelimit_lock_all (NULL returned).
 */

static ngx_inline ngx_shmtx_t *
ngx_http_ratelimit_lock(rl_request_t *rq)
{
    ngx_shmtx_t  *mutex;

    if (rq->locks != 1) {
        ngx_http_ratelimit_lock_all(rq, 1);
        return NULL;
    }

    mutex = &ngx_http_ratelimit_zone_of(ngx_http_ratelimit_rule_of(
                &rq->checks[rq->order[0]]))->shpool->mutex;

    ngx_shmtx_lock(mutex);

    return mutex;
}


static ngx_inline void
ngx_http_ratelimit_unlock(rl_request_t *rq, ngx_shmtx_t *mutex)
{
    if (mutex != NULL) {
        ngx_shmtx_unlock(mutex);

    } else {
        ngx_http_ratelimit_lock_all(rq, 0);
    }
}


/*
 * A request's context, on its main request: after an internal redirect or
 * a finalizing filter, which clear module contexts, it is found again.
 */

static ngx_inline ngx_http_ratelimit_ctx_t *
ngx_http_ratelimit_get_ctx(ngx_http_request_t *r)
{
    ngx_http_ratelimit_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r->main, ngx_http_ratelimit_module);

    if (ctx != NULL || !(r->main->internal || r->main->filter_finalize)) {
        return ctx;
    }

    return ngx_http_ratelimit_find_ctx(r);
}


#endif /* NGX_HTTP_RATELIMIT_MODULE_H */
