
/*
 * ngx-ratelimit: the headers and bytes of the module's own answers
 * (ngx_http_ratelimit_answer.c).
 */

#ifndef NGX_HTTP_RATELIMIT_ANSWER_H
#define NGX_HTTP_RATELIMIT_ANSWER_H


#include "ngx_http_ratelimit_types.h"


ngx_int_t ngx_http_ratelimit_get_only(ngx_http_request_t *r, ngx_str_t *cache);
ngx_int_t ngx_http_ratelimit_answer_headers(ngx_http_request_t *r,
    ngx_str_t *cache);
ngx_int_t ngx_http_ratelimit_add_headers(ngx_http_request_t *r,
    ngx_keyval_t *headers, ngx_uint_t n);
ngx_int_t ngx_http_ratelimit_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *type, u_char *data, size_t len);
ngx_int_t ngx_http_ratelimit_send_json(ngx_http_request_t *r,
    ngx_uint_t status, u_char *data, size_t len);
ngx_int_t ngx_http_ratelimit_send_rendered(ngx_http_request_t *r, char *data,
    size_t len);


#endif /* NGX_HTTP_RATELIMIT_ANSWER_H */
