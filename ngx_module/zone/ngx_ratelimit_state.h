
/*
 * ngx-ratelimit: a local zone's key states kept across restarts and binary
 * upgrades, in its state file (ngx_ratelimit_state.c).
 */

#ifndef NGX_RATELIMIT_STATE_H
#define NGX_RATELIMIT_STATE_H


#include "ngx_ratelimit_types.h"


/* state_interval= when a zone does not say */
#define NGX_RATELIMIT_STATE_INTERVAL  60000


ngx_int_t ngx_ratelimit_state_param(ngx_conf_t *cf, ngx_str_t *value,
    ngx_str_t *zone, ngx_str_t *file, ngx_msec_t *interval);
void ngx_ratelimit_state_load(ngx_ratelimit_zone_t *zone,
    ngx_log_t *log);
ngx_int_t ngx_ratelimit_state_start(ngx_ratelimit_zone_t *zone,
    ngx_cycle_t *cycle);
void ngx_ratelimit_state_save(ngx_ratelimit_zone_t *zone,
    ngx_log_t *log);


#endif /* NGX_RATELIMIT_STATE_H */
