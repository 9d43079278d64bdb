
/*
 * ngx-ratelimit: a zone's overrides, its file, and the removal of expired
 * ones (ngx_ratelimit_overrides.c); a Redis zone's, taken from Redis and
 * written there (ngx_ratelimit_overrides_redis.c).
 */

#ifndef NGX_RATELIMIT_OVERRIDES_H
#define NGX_RATELIMIT_OVERRIDES_H


#include "ngx_ratelimit_redis.h"


/* a wait's call: an overrides call (enum rl_redis_call's, and redis_sync's
   NGX_RATELIMIT_REDIS_SYNC, after) */
#define NGX_RATELIMIT_REDIS_OVERRIDES  65


/* A call of a zone's overrides to Redis: its wait first. */
typedef struct {
    ngx_ratelimit_redis_wait_t        w;
    ngx_ratelimit_zone_t             *zone;
    rl_overrides_call_t               call;
    rl_request_t                      rq;       /* the hash's key, for a */
    rl_check_t                        check;    /*   Cluster's slot */
    char                              target[RL_OVERRIDES_TARGET_MAX];
} ngx_ratelimit_overrides_call_t;


/*
 * A write of the key API's, in Redis, waiting until this server's copy
 * holds the version it made (ngx_ratelimit_overrides_await): handler
 * is called with NGX_OK, or NGX_ERROR when the copy could not be taken
 * (Redis did not answer, or it holds another hash now).
 */
typedef struct ngx_ratelimit_overrides_wait_s
    ngx_ratelimit_overrides_wait_t;

typedef void (*ngx_ratelimit_overrides_taken_pt)(
    ngx_ratelimit_overrides_wait_t *aw, ngx_int_t rc);

struct ngx_ratelimit_overrides_wait_s {
    ngx_queue_t                       queue;
    uint64_t                          version;
    ngx_uint_t                        polls;    /* answered since */
    ngx_ratelimit_overrides_taken_pt  handler;
};


/* A worker's taking of Redis's overrides (a Redis zone's). */
struct ngx_ratelimit_overrides_poll_s {
    ngx_ratelimit_overrides_call_t    oc;
    rl_override_t                    *list;     /* read so far */
    size_t                            n;
    uint64_t                          first;    /* its first page's version */
    uint64_t                          first_id; /*   and hash */
    rl_overrides_stats_t              known;    /* the copy when it was
                                                   asked for */
    ngx_uint_t                        bad;      /* fields skipped, */
    ngx_uint_t                        full;     /*   and for want of room */
    char                              why[RL_ERR_MAX]; /* the first's */
    int64_t                           expiries; /* expiries seen until */
    ngx_queue_t                       waiting;  /* writes waiting */
    unsigned                          busy:1;
    unsigned                          again:1;  /* asked for while busy */
};


/* a Redis zone's: how often each server asks for Redis's overrides'
   version (a change applies on every server within about this) */
#define NGX_RATELIMIT_OVERRIDES_POLL  250

/* overrides= when a zone does not say */
#define NGX_RATELIMIT_OVERRIDES_DEFAULT  1000


ngx_int_t ngx_ratelimit_overrides_param(ngx_conf_t *cf,
    ngx_str_t *value, ngx_str_t *zone, ngx_uint_t *n, ngx_str_t *file);
size_t ngx_ratelimit_overrides_bytes(ngx_ratelimit_zone_t *zone);
void ngx_ratelimit_overrides_attach(ngx_ratelimit_zone_t *zone,
    u_char *mem, ngx_log_t *log);
void ngx_ratelimit_overrides_load(ngx_ratelimit_zone_t *zone,
    ngx_log_t *log);
rl_override_rule_t *ngx_ratelimit_overrides_rules(
    ngx_ratelimit_zone_t *zone, rl_override_rule_t *out, ngx_uint_t *n);
ngx_int_t ngx_ratelimit_overrides_start(ngx_ratelimit_zone_t *zone,
    ngx_cycle_t *cycle);
void ngx_ratelimit_overrides_changed(ngx_ratelimit_zone_t *zone);
void ngx_ratelimit_overrides_poll(ngx_ratelimit_zone_t *zone,
    int64_t now);
void ngx_ratelimit_overrides_await(ngx_ratelimit_zone_t *zone,
    ngx_ratelimit_overrides_wait_t *aw, uint64_t version);
void ngx_ratelimit_overrides_unwait(
    ngx_ratelimit_overrides_wait_t *aw);
ngx_int_t ngx_ratelimit_overrides_send(ngx_ratelimit_zone_t *zone,
    ngx_ratelimit_overrides_call_t *oc,
    ngx_ratelimit_redis_done_pt done);


#endif /* NGX_RATELIMIT_OVERRIDES_H */
