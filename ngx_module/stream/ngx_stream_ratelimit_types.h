
/*
 * ngx-ratelimit: the stream module's types: its configuration (a server's
 * rules, the stream block's), a rule's values nginx evaluates for each
 * session, a session's context.  It calls nothing, and includes only the
 * shared types (common/ngx_ratelimit_types.h) and nginx's: each file of
 * stream/ includes it through its own header.
 */

#ifndef NGX_STREAM_RATELIMIT_TYPES_H
#define NGX_STREAM_RATELIMIT_TYPES_H


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_stream.h>

#include "ngx_ratelimit_types.h"
#include "ngx_ratelimit_redis_types.h"


typedef struct {
    ngx_ratelimit_rule_t         common;    /* first: a check's data is
                                               both (ngx_ratelimit_rule_of) */
    ngx_stream_complex_value_t  *key;
    ngx_stream_complex_value_t  *cost;      /* NULL: rule.cost */
    ngx_stream_complex_value_t  *limit;     /* limit=$var; NULL: rule.limit */
    ngx_stream_complex_value_t  *burst;     /* burst=$var; NULL: rule.burst */
    unsigned                     late:1;    /* reads $ssl_*: decided once
                                               ssl and ssl_preread ran */
} ngx_stream_ratelimit_rule_t;


typedef struct {
    ngx_array_t                  rules;     /* ngx_stream_ratelimit_rule_t */
    ngx_uint_t                   combine;
    ngx_flag_t                   dry_run;
    ngx_uint_t                   log_level;
    ngx_flag_t                   off;       /* "ratelimit off" here */
    ngx_flag_t                   late;      /* a rule reads $ssl_*: decided
                                               as the content phase starts */
    ngx_flag_t                   ends;      /* a rule holds slots until the
                                               session ends (concurrency) */
    ngx_stream_content_handler_pt  content; /* late: the server's own
                                               content handler */
} ngx_stream_ratelimit_srv_conf_t;


typedef struct {
    ngx_ratelimit_conf_t         common;    /* what its zones are given */
} ngx_stream_ratelimit_main_conf_t;


/*
 * A session's context, in its pool: its decision, what $ratelimit_status
 * and $ratelimit_rule show, and, while it is delayed, waits for Redis, or
 * until it ends, its checks (a concurrency rule's slots and leases are
 * given back by the pool's cleanup, however the session ends).
 */
typedef struct {
    ngx_stream_session_t        *session;
    ngx_uint_t                   status;    /* enum rl_status; 0: not
                                               decided */
    ngx_stream_ratelimit_rule_t *rule;      /* binding rule, or NULL */
    ngx_event_t                  delay;     /* a delayed session's timer */
    ngx_event_t                  resume;    /* Redis answered: it goes on */
    ngx_int_t                    rc;        /* what the handler returns
                                               once Redis decided */
    ngx_ratelimit_redis_wait_t  *redis;     /* its call to Redis */
    int64_t                      redis_sent; /* when it was sent, and the */
    uint32_t                     redis_epoch; /* refusals' epoch then */
    ngx_uint_t                   decided_by; /* NGX_RATELIMIT_BY_* */
    ngx_ratelimit_lease_t        lease;     /* with leased */
    unsigned                     delayed:1; /* held by its timer */
    unsigned                     refund:1;  /* give back if it ends held */
    unsigned                     ends:1;    /* holds slots until it ends */
    unsigned                     kept:1;    /* checks in its pool, and its
                                               cleanup added */
    unsigned                     redis_waiting:1;
    unsigned                     leased:1;  /* holds leases in Redis */
    unsigned                     here:1;    /* holds slots in its server's
                                               zone while Redis decides */
    rl_request_t                 rq;
    rl_rule_room_t               room;
} ngx_stream_ratelimit_ctx_t;


extern ngx_module_t  ngx_stream_ratelimit_module;


/* The rule a check is of. */
#define ngx_stream_ratelimit_rule_of(check)                                   \
    ((ngx_stream_ratelimit_rule_t *) (check)->data)


#endif /* NGX_STREAM_RATELIMIT_TYPES_H */
