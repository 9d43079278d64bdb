
/*
 * ngx-ratelimit: the preaccess handler: a request decided
 * (ngx_http_ratelimit_handler.c).
 */

#ifndef NGX_HTTP_RATELIMIT_HANDLER_H
#define NGX_HTTP_RATELIMIT_HANDLER_H


#include "ngx_http_ratelimit_types.h"


ngx_int_t ngx_http_ratelimit_handler(ngx_http_request_t *r);


#endif /* NGX_HTTP_RATELIMIT_HANDLER_H */
