
/*
 * ngx-ratelimit: ratelimit_bandwidth, a byte rate per key shared by every
 * response of the key in flight (ngx_http_ratelimit_bandwidth.c): a module
 * of its own in the same object, with its directive, its body filter and
 * its variable.
 */

#ifndef NGX_HTTP_RATELIMIT_BANDWIDTH_H
#define NGX_HTTP_RATELIMIT_BANDWIDTH_H


#include "ngx_http_ratelimit_types.h"


extern ngx_module_t  ngx_http_ratelimit_bandwidth_module;


#endif /* NGX_HTTP_RATELIMIT_BANDWIDTH_H */
