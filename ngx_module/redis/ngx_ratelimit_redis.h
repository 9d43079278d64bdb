/*
 * ngx-ratelimit: a zone's call to Redis sent, and its reply read and handed
 * to whoever sent it (ngx_ratelimit_redis.c).  The core writes the
 * command and reads the reply; the connections are
 * ngx_ratelimit_redis_conn.c's.
 */

#ifndef NGX_RATELIMIT_REDIS_H
#define NGX_RATELIMIT_REDIS_H

#include "ngx_ratelimit_redis_types.h"


/*
 * Sends w's request to Redis.  NGX_OK: queued, w->handler will be called
 * from an event (never from here).  NGX_DECLINED: Redis is not reachable
 * now (reconnecting later): decide by on_redis_error at once.
 */
ngx_int_t ngx_ratelimit_redis_send(ngx_ratelimit_redis_t *redis,
    ngx_ratelimit_redis_wait_t *w);

/* Forgets a request that goes away while it waits. */
void ngx_ratelimit_redis_cancel(ngx_ratelimit_redis_wait_t *w);

/* This server's id in its leases' names (the zone's; made if none yet). */
uint64_t ngx_ratelimit_redis_server_id(ngx_ratelimit_redis_t *redis);

/* 1 if a line of this kind may be written now; else it is counted, and
   written as a count within a second (what: "replies refused", ...). */
ngx_uint_t ngx_ratelimit_redis_log_now(ngx_ratelimit_redis_t *redis,
    ngx_ratelimit_redis_fold_t *fold);

#endif /* NGX_RATELIMIT_REDIS_H */
