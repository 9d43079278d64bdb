
/*
 * ngx-ratelimit: a worker's connections to Redis: picked, written, failed
 * and closed (ngx_ratelimit_redis_conn.c), for the calls of
 * ngx_ratelimit_redis.c and redis_sync's exchanges.
 */

#ifndef NGX_RATELIMIT_REDIS_CONN_H
#define NGX_RATELIMIT_REDIS_CONN_H

#include "ngx_ratelimit_redis_types.h"


ngx_ratelimit_redis_conn_t *ngx_ratelimit_redis_pick(
    ngx_ratelimit_redis_node_t *node);
ngx_int_t ngx_ratelimit_redis_reserve(
    ngx_ratelimit_redis_conn_t *conn, size_t len);
ngx_int_t ngx_ratelimit_redis_own_command(
    ngx_ratelimit_redis_conn_t *conn, const char *cmd, ngx_str_t *args,
    ngx_uint_t n);
ngx_int_t ngx_ratelimit_redis_load(ngx_ratelimit_redis_conn_t *conn);
void ngx_ratelimit_redis_push(ngx_ratelimit_redis_conn_t *conn,
    ngx_ratelimit_redis_wait_t *w);
ngx_int_t ngx_ratelimit_redis_batch(ngx_ratelimit_redis_conn_t *conn,
    ngx_ratelimit_redis_wait_t *w);
ngx_int_t ngx_ratelimit_redis_batch_write(ngx_ratelimit_redis_conn_t *conn);
void ngx_ratelimit_redis_fail(ngx_ratelimit_redis_conn_t *conn,
    const char *why, ngx_uint_t timeout);
void ngx_ratelimit_redis_lost(ngx_ratelimit_redis_conn_t *conn,
    const char *why);

/* Closes this worker's connections (at exit). */
void ngx_ratelimit_redis_close(ngx_ratelimit_redis_t *redis);

#endif /* NGX_RATELIMIT_REDIS_CONN_H */
