
/*
 * ngx-ratelimit: the stream module's variables
 * (ngx_stream_ratelimit_variables.c).
 */

#ifndef NGX_STREAM_RATELIMIT_VARIABLES_H
#define NGX_STREAM_RATELIMIT_VARIABLES_H


#include "ngx_stream_ratelimit_types.h"


ngx_int_t ngx_stream_ratelimit_add_variables(ngx_conf_t *cf);


#endif /* NGX_STREAM_RATELIMIT_VARIABLES_H */
