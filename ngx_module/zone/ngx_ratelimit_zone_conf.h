
/*
 * ngx-ratelimit: the ratelimit_zone directive, and the checks of a block's
 * zones once its configuration is read (ngx_ratelimit_zone_conf.c).
 */


#ifndef NGX_RATELIMIT_ZONE_CONF_H
#define NGX_RATELIMIT_ZONE_CONF_H


#include "ngx_ratelimit_zone.h"


char *ngx_ratelimit_zone_declare(ngx_conf_t *cf, ngx_ratelimit_conf_t *conf);
ngx_int_t ngx_ratelimit_zone_name(ngx_conf_t *cf, const char *directive,
    ngx_str_t *name);
ngx_int_t ngx_ratelimit_zones_init(ngx_conf_t *cf, ngx_ratelimit_conf_t *conf);


#endif /* NGX_RATELIMIT_ZONE_CONF_H */
