
/*
 * ngx-ratelimit: the zones' snapshots (ngx_ratelimit_snapshot.c).
 */

#ifndef NGX_RATELIMIT_SNAPSHOT_H
#define NGX_RATELIMIT_SNAPSHOT_H


#include "ngx_ratelimit_types.h"
#include "ngx_ratelimit_redis_types.h"


ngx_int_t ngx_ratelimit_snapshot(ngx_pool_t *pool, ngx_uint_t what,
    rl_stats_snapshot_t *s);
ngx_int_t ngx_ratelimit_zone_snapshot(ngx_pool_t *pool,
    ngx_ratelimit_zone_t *zone, ngx_uint_t what, rl_zone_snapshot_t *z);
ngx_int_t ngx_ratelimit_top_view(ngx_pool_t *pool, ngx_ratelimit_zone_t *zone,
    ngx_ratelimit_rule_t *rule, int slot, rl_top_t *top, rl_top_view_t *v);


#endif /* NGX_RATELIMIT_SNAPSHOT_H */
