
/*
 * ngx-ratelimit: the charges of a request decided in Redis, sent when it
 * ends (ngx_http_ratelimit_redis_settle.c).
 */

#ifndef NGX_HTTP_RATELIMIT_REDIS_SETTLE_H
#define NGX_HTTP_RATELIMIT_REDIS_SETTLE_H


#include "ngx_http_ratelimit_redis.h"


/*
 * Sends the charges of a request that ended, decided in Redis: the checks
 * that settle one (rl_check_charges, a charge known), copied, in one script
 * call on the worker's connections, without waiting for the reply.
 */
void ngx_http_ratelimit_redis_settle(ngx_http_ratelimit_redis_t *redis,
    rl_request_t *rq);


#endif /* NGX_HTTP_RATELIMIT_REDIS_SETTLE_H */
