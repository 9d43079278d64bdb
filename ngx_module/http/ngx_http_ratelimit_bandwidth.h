
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

/* The key API's view of a zone's bandwidth rules. */
ngx_uint_t ngx_http_ratelimit_bandwidth_rule(ngx_ratelimit_zone_t *zone,
    ngx_str_t *name);
ngx_int_t ngx_http_ratelimit_bandwidth_states(ngx_ratelimit_zone_t *zone,
    rl_api_request_t *in, ngx_array_t *states);


#endif /* NGX_HTTP_RATELIMIT_BANDWIDTH_H */
