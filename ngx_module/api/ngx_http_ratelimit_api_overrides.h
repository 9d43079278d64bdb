
/*
 * ngx-ratelimit: the key API's overrides: written, read, listed, removed,
 * each write logged (ngx_http_ratelimit_api_overrides.c).
 */

#ifndef NGX_HTTP_RATELIMIT_API_OVERRIDES_H
#define NGX_HTTP_RATELIMIT_API_OVERRIDES_H


#include "ngx_http_ratelimit_api_keys.h"


ngx_int_t ngx_http_ratelimit_api_body(ngx_http_request_t *r,
    ngx_str_t *body);
ngx_int_t ngx_http_ratelimit_api_overrides(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);


#endif /* NGX_HTTP_RATELIMIT_API_OVERRIDES_H */
