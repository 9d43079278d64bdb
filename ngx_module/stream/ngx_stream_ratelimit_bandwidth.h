
/*
 * ngx-ratelimit: ratelimit_bandwidth in the stream block, a byte rate per
 * key shared by the key's sessions in each direction
 * (ngx_stream_ratelimit_bandwidth.c): a module of its own in the stream
 * module's object, with its directive and its filter.
 */

#ifndef NGX_STREAM_RATELIMIT_BANDWIDTH_H
#define NGX_STREAM_RATELIMIT_BANDWIDTH_H


#include "ngx_stream_ratelimit_types.h"


extern ngx_module_t  ngx_stream_ratelimit_bandwidth_module;


#endif /* NGX_STREAM_RATELIMIT_BANDWIDTH_H */
