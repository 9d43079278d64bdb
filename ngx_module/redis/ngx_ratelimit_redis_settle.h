
/*
 * ngx-ratelimit: the charges of a request decided in Redis, sent when it
 * ends (ngx_ratelimit_redis_settle.c).
 */

#ifndef NGX_RATELIMIT_REDIS_SETTLE_H
#define NGX_RATELIMIT_REDIS_SETTLE_H


#include "ngx_ratelimit_redis.h"


/*
 * Sends the charges of a request that ended, decided in Redis: the checks
 * that settle one (rl_check_charges, a charge known), copied, in one script
 * call on the worker's connections, without waiting for the reply.
 */
void ngx_ratelimit_redis_settle(ngx_ratelimit_redis_t *redis,
    rl_request_t *rq);

/* Concurrency's leases: named before a request's call; held (1) by a
   request that took any, in the worker's list that the renewals' timer
   walks, or kept (1) by one on_redis_error=local admitted, to be written
   into Redis; released when it ends (lease NULL: its call failed, and it
   is not in the list).  A failed call of the zone puts the worker's leases
   in restore (leases_lost): written into Redis again until it took them
   all. */
void ngx_ratelimit_redis_lease_prepare(ngx_ratelimit_redis_t *redis,
    rl_request_t *rq);
ngx_uint_t ngx_ratelimit_redis_lease_hold(ngx_ratelimit_redis_t *redis,
    rl_request_t *rq, ngx_ratelimit_lease_t *lease);
ngx_uint_t ngx_ratelimit_redis_lease_keep(ngx_ratelimit_redis_t *redis,
    rl_request_t *rq, ngx_ratelimit_lease_t *lease);
void ngx_ratelimit_redis_lease_release(ngx_ratelimit_redis_t *redis,
    rl_request_t *rq, ngx_ratelimit_lease_t *lease);
void ngx_ratelimit_redis_leases_lost(ngx_ratelimit_redis_t *redis);

/* Whether a request of the zone is decided without a call: by an override
   its keys meet in the copy of Redis's the zone holds (a refusal, or an
   exemption from every rule), or by a refusal Redis gave that the zone
   remembers and that refuses it still (counted); or it is sent (SEND). */
#define NGX_RATELIMIT_REDIS_SEND      0
#define NGX_RATELIMIT_REDIS_OVERRIDE  1
#define NGX_RATELIMIT_REDIS_REMEMBERED 2

ngx_uint_t ngx_ratelimit_redis_known(ngx_ratelimit_zone_t *zone,
    rl_request_t *rq);

/* A request of the zone decided without a local decision (by_redis: in
   Redis, its answer noted among the refusals remembered from epoch and
   sent; else from a refusal remembered or an override the zone holds),
   counted in the zone under its lock; here: whether it holds slots in the
   zone for its call, and the return, whether it holds them still (a check
   that took no lease gives its slot back). */
ngx_uint_t ngx_ratelimit_redis_counted(ngx_ratelimit_zone_t *zone,
    rl_request_t *rq, ngx_uint_t by_redis, uint32_t epoch, int64_t sent,
    ngx_uint_t here);

/* Redis failed a request's call, or could not take it: counted, the
   worker's leases restored, the slots the call held in the zone (here)
   given back for a local decision to take its own. */
void ngx_ratelimit_redis_failed(ngx_ratelimit_zone_t *zone,
    rl_request_t *rq, ngx_uint_t here);


#endif /* NGX_RATELIMIT_REDIS_SETTLE_H */
