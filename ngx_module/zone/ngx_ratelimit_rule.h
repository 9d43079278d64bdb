
/*
 * ngx-ratelimit: the part of a rule its zone knows, as a protocol's
 * ratelimit directive reads it (ngx_ratelimit_rule.c).
 */


#ifndef NGX_RATELIMIT_RULE_H
#define NGX_RATELIMIT_RULE_H


#include "ngx_ratelimit_zone_conf.h"


ngx_int_t ngx_ratelimit_rule_param(ngx_conf_t *cf, ngx_str_t *value,
    ngx_str_t *zone, ngx_str_t *key);
ngx_int_t ngx_ratelimit_rule_name(ngx_conf_t *cf, ngx_ratelimit_rule_t *rule,
    char *name);
void ngx_ratelimit_rule_key(ngx_ratelimit_rule_t *rule, ngx_str_t *key);
ngx_int_t ngx_ratelimit_rule_zone(ngx_conf_t *cf, ngx_ratelimit_conf_t *conf,
    ngx_ratelimit_rule_t *rule, ngx_str_t *zone, ngx_array_t *rules);

/* A parameter of a ratelimit directive that is the protocol's to read. */
typedef ngx_int_t (*ngx_ratelimit_param_pt)(ngx_conf_t *cf,
    ngx_ratelimit_rule_t *rule, ngx_str_t *value);

char *ngx_ratelimit_rule_off(ngx_conf_t *cf, ngx_array_t *rules,
    ngx_flag_t *off, size_t size);
void *ngx_ratelimit_rule_new(ngx_conf_t *cf, ngx_array_t *rules,
    ngx_flag_t off, size_t size);
ngx_int_t ngx_ratelimit_rule_read(ngx_conf_t *cf, ngx_ratelimit_rule_t *rule,
    ngx_str_t *zone, ngx_str_t *key, ngx_ratelimit_param_pt param);
uint64_t ngx_ratelimit_rule_cost(ngx_ratelimit_rule_t *rule,
    ngx_str_t *value, char *err);
const rl_rule_t *ngx_ratelimit_rule_applied(ngx_pool_t *pool,
    ngx_ratelimit_rule_t *rule, ngx_str_t *limit, ngx_str_t *burst,
    char *err);
void ngx_ratelimit_rule_unkeyed(ngx_conf_t *cf, ngx_ratelimit_rule_t *rule,
    ngx_str_t *key, ngx_uint_t variables);


#endif /* NGX_RATELIMIT_RULE_H */
