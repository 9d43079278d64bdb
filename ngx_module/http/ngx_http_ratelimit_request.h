
/*
 * ngx-ratelimit: a request's context, and its end
 * (ngx_http_ratelimit_request.c).
 */

#ifndef NGX_HTTP_RATELIMIT_REQUEST_H
#define NGX_HTTP_RATELIMIT_REQUEST_H


#include "ngx_http_ratelimit_types.h"


ngx_http_ratelimit_ctx_t *ngx_http_ratelimit_new_ctx(ngx_http_request_t *r);
ngx_http_ratelimit_ctx_t *ngx_http_ratelimit_find_ctx(ngx_http_request_t *r);
ngx_int_t ngx_http_ratelimit_keep_checks(ngx_http_ratelimit_ctx_t *ctx);
ngx_int_t ngx_http_ratelimit_end_handler(ngx_http_request_t *r);
void ngx_http_ratelimit_end(ngx_http_ratelimit_ctx_t *ctx,
    ngx_uint_t charges);


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


#endif /* NGX_HTTP_RATELIMIT_REQUEST_H */
