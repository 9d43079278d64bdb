
/*
 * ngx-ratelimit: requests held on timers: delayed by a shaping rule, or
 * waiting for a slot (ngx_http_ratelimit_wait.c).
 */

#ifndef NGX_HTTP_RATELIMIT_WAIT_H
#define NGX_HTTP_RATELIMIT_WAIT_H


#include "ngx_ratelimit_types.h"


ngx_int_t ngx_http_ratelimit_delay(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
ngx_int_t ngx_http_ratelimit_wait(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, ngx_http_ratelimit_retry_pt retry);
void ngx_http_ratelimit_wait_wake(void);
void ngx_http_ratelimit_wait_leave(ngx_http_ratelimit_ctx_t *ctx);


#endif /* NGX_HTTP_RATELIMIT_WAIT_H */
