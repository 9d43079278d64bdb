
/*
 * ngx-ratelimit: a zone's redis parameters read and checked
 * (ngx_ratelimit_redis_conf.c).
 */

#ifndef NGX_RATELIMIT_REDIS_CONF_H
#define NGX_RATELIMIT_REDIS_CONF_H


#include "ngx_ratelimit_redis.h"


/* Parses one redis parameter of ratelimit_zone into *redis (created on the
   first); NGX_DECLINED if param is not one. */
ngx_int_t ngx_ratelimit_redis_param(ngx_conf_t *cf,
    ngx_ratelimit_redis_t **redis, ngx_str_t *param, ngx_str_t *zone);

/* Checks the parameters together once the directive is read (conf: its
   block's, for its resolver). */
char *ngx_ratelimit_redis_finish(ngx_conf_t *cf, ngx_ratelimit_conf_t *conf,
    ngx_ratelimit_redis_t *redis, ngx_str_t *zone);


#endif /* NGX_RATELIMIT_REDIS_CONF_H */
