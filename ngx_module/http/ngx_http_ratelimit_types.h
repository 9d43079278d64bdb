
/*
 * ngx-ratelimit: the HTTP module's types: its configuration (a location's
 * rules, the http block's), a rule's values nginx evaluates for each
 * request, a request's context.  It calls nothing, and includes only the
 * shared types (common/ngx_ratelimit_types.h, redis/'s for a lease) and
 * nginx's: each file of http/ and api/ includes it through its own header.
 */

#ifndef NGX_HTTP_RATELIMIT_TYPES_H
#define NGX_HTTP_RATELIMIT_TYPES_H


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ratelimit_types.h"
#include "ngx_ratelimit_redis_types.h"


/* ratelimit_headers */
#define NGX_HTTP_RATELIMIT_HEADERS_LEGACY    0x01
#define NGX_HTTP_RATELIMIT_HEADERS_IETF      0x02

/* ratelimit_log_level off */
#define NGX_HTTP_RATELIMIT_LOG_OFF           0


/* A rule's values nginx evaluates for each request, each NULL where the
   rule has none (most rules: so they are apart from the rule). */
typedef struct {
    ngx_http_complex_value_t    *cost;      /* NULL: rule.cost */
    ngx_http_complex_value_t    *limit;     /* limit=$var; NULL: rule.limit */
    ngx_http_complex_value_t    *burst;     /* burst=$var; NULL: rule.burst */
    ngx_http_complex_value_t    *charge;    /* charge=, spent as the request
                                               ends; NULL: none */
    ngx_http_complex_value_t    *priority;  /* priority=$var: the class;
                                               NULL: none */
    ngx_http_complex_value_t    *fair;      /* fair=$var: the tenant;
                                               NULL: none */
    int32_t                      priority_index; /* one variable each */
    int32_t                      fair_index;     /* (NGX_ERROR: another
                                               value) */
} ngx_http_ratelimit_rule_vars_t;


typedef struct {
    ngx_ratelimit_rule_t         common;    /* first: a check's data is
                                               both (ngx_ratelimit_rule_of) */
    ngx_http_complex_value_t    *key;       /* shared by the rules of the
                                               same key */
    ngx_http_ratelimit_rule_vars_t  *vars;  /* NULL: none */
    int32_t                      key_index; /* a key that is one variable,
                                               or NGX_ERROR (the same as
                                               the rule before's: its value
                                               is taken from it) */
} ngx_http_ratelimit_rule_t;


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


/* A rule's key as written, and compiled: rules of the same key share it. */
typedef struct {
    ngx_str_t                    text;
    ngx_http_complex_value_t    *cv;
} ngx_http_ratelimit_key_t;

/* keys remembered while the configuration is read */
#define NGX_HTTP_RATELIMIT_KEYS_SHARED  8


typedef struct {
    ngx_ratelimit_conf_t         common;    /* what its zones are given */
    ngx_http_ratelimit_key_t     keys[NGX_HTTP_RATELIMIT_KEYS_SHARED];
    ngx_uint_t                   nkeys;     /* compiled: the last ones */
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
    ngx_uint_t                   decided_by; /* NGX_RATELIMIT_BY_* */

    ngx_http_ratelimit_rule_t   *rule;      /* binding rule, or NULL */
    const rl_rule_t             *applied;   /* its parameters as applied to
                                               the request (limit=$var) */

    ngx_ratelimit_redis_wait_t  *redis; /* while Redis decides */
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
    uint32_t                     klass;     /* its class (priority=) */
    uint32_t                     shed;      /* why it was not admitted
                                               (enum rl_shed) */
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
    ngx_ratelimit_lease_t        lease;     /* in its worker's leases of
                                               the zone's Redis */
    /* spare */
    ngx_http_ratelimit_ctx_t    *next_free;
};


extern ngx_module_t  ngx_http_ratelimit_module;


/* The rule a check is of. */
#define ngx_http_ratelimit_rule_of(check)                                     \
    ((ngx_http_ratelimit_rule_t *) (check)->data)


#endif /* NGX_HTTP_RATELIMIT_TYPES_H */
