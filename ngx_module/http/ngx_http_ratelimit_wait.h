
/*
 * ngx-ratelimit: requests held: on timers, delayed by a shaping rule or
 * waiting for a slot; or waiting for Redis (ngx_http_ratelimit_wait.c).
 */

#ifndef NGX_HTTP_RATELIMIT_WAIT_H
#define NGX_HTTP_RATELIMIT_WAIT_H


#include "ngx_http_ratelimit_types.h"
#include "ngx_ratelimit_redis_types.h"


ngx_int_t ngx_http_ratelimit_delay(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
ngx_int_t ngx_http_ratelimit_wait(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, ngx_http_ratelimit_retry_pt retry);
void ngx_http_ratelimit_wait_wake(void);
void ngx_http_ratelimit_wait_leave(ngx_http_ratelimit_ctx_t *ctx);
void ngx_http_ratelimit_redis_owner(ngx_ratelimit_redis_wait_t *w,
    ngx_http_request_t *r);
void ngx_http_ratelimit_redis_answered(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer, ngx_ratelimit_redis_done_pt done);


#endif /* NGX_HTTP_RATELIMIT_WAIT_H */
