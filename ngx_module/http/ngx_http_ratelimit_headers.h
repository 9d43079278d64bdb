
/*
 * ngx-ratelimit: the header filter, and the variables
 * (ngx_http_ratelimit_headers.c).
 */

#ifndef NGX_HTTP_RATELIMIT_HEADERS_H
#define NGX_HTTP_RATELIMIT_HEADERS_H


#include "ngx_http_ratelimit_types.h"


ngx_int_t ngx_http_ratelimit_headers_init(ngx_conf_t *cf, ngx_uint_t filter);
ngx_int_t ngx_http_ratelimit_add_variables(ngx_conf_t *cf);
u_char *ngx_http_ratelimit_number(u_char *p, uint64_t n);


#endif /* NGX_HTTP_RATELIMIT_HEADERS_H */
