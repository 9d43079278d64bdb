
/*
 * ngx-ratelimit: a session decided (ngx_stream_ratelimit_handler.c).
 */

#ifndef NGX_STREAM_RATELIMIT_HANDLER_H
#define NGX_STREAM_RATELIMIT_HANDLER_H


#include "ngx_stream_ratelimit_types.h"


ngx_int_t ngx_stream_ratelimit_handler(ngx_stream_session_t *s);
void ngx_stream_ratelimit_content(ngx_stream_session_t *s);


#endif /* NGX_STREAM_RATELIMIT_HANDLER_H */
