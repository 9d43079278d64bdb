
/*
 * ngx-ratelimit: a zone's overrides, its file, and the removal of expired
 * ones (ngx_http_ratelimit_overrides.c).
 */

#ifndef NGX_HTTP_RATELIMIT_OVERRIDES_H
#define NGX_HTTP_RATELIMIT_OVERRIDES_H


#include "ngx_http_ratelimit_types.h"


/* overrides= when a zone does not say */
#define NGX_HTTP_RATELIMIT_OVERRIDES_DEFAULT  1000


ngx_int_t ngx_http_ratelimit_overrides_param(ngx_conf_t *cf,
    ngx_str_t *value, ngx_str_t *zone, ngx_uint_t *n, ngx_str_t *file);
size_t ngx_http_ratelimit_overrides_bytes(ngx_http_ratelimit_zone_t *zone);
void ngx_http_ratelimit_overrides_attach(ngx_http_ratelimit_zone_t *zone,
    u_char *mem, ngx_log_t *log);
void ngx_http_ratelimit_overrides_load(ngx_http_ratelimit_zone_t *zone,
    ngx_log_t *log);
rl_override_rule_t *ngx_http_ratelimit_overrides_rules(
    ngx_http_ratelimit_zone_t *zone, rl_override_rule_t *out, ngx_uint_t *n);
rl_override_rule_t *ngx_http_ratelimit_overrides_rule(
    rl_override_rule_t *rules, ngx_uint_t n, const char *name);
ngx_int_t ngx_http_ratelimit_overrides_start(ngx_http_ratelimit_zone_t *zone,
    ngx_cycle_t *cycle);
void ngx_http_ratelimit_overrides_changed(ngx_http_ratelimit_zone_t *zone);


#endif /* NGX_HTTP_RATELIMIT_OVERRIDES_H */
