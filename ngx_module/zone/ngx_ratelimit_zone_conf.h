
/*
 * ngx-ratelimit: the ratelimit_zone directive and the checks of a
 * configuration's zones (ngx_http_ratelimit_zone_conf.c).
 */


#ifndef NGX_HTTP_RATELIMIT_ZONE_CONF_H
#define NGX_HTTP_RATELIMIT_ZONE_CONF_H


#include "ngx_ratelimit_zone.h"


char *ngx_http_ratelimit_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_ratelimit_zone_name(ngx_conf_t *cf, const char *directive,
    ngx_str_t *name);
ngx_int_t ngx_http_ratelimit_zones_init(ngx_conf_t *cf,
    ngx_http_ratelimit_main_conf_t *rmcf);


#endif /* NGX_HTTP_RATELIMIT_ZONE_CONF_H */
