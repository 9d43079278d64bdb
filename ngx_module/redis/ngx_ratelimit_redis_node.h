
/*
 * ngx-ratelimit: the servers a worker knows and their addresses, a host name
 * resolved with the http block's resolver (ngx_ratelimit_redis_node.c).
 */

#ifndef NGX_RATELIMIT_REDIS_NODE_H
#define NGX_RATELIMIT_REDIS_NODE_H


#include "ngx_ratelimit_redis_types.h"


ngx_ratelimit_redis_node_t *ngx_ratelimit_redis_node(
    ngx_ratelimit_redis_t *redis, ngx_str_t *name);
ngx_int_t ngx_ratelimit_redis_resolve(
    ngx_ratelimit_redis_node_t *node,
    ngx_ratelimit_redis_resolved_pt done, const char **why);


#endif /* NGX_RATELIMIT_REDIS_NODE_H */
