
/*
 * ngx-ratelimit: ratelimit_stats, a zone's snapshot, and the answers of the
 * module's own locations (ngx_http_ratelimit_stats.c).
 */

#ifndef NGX_HTTP_RATELIMIT_STATS_H
#define NGX_HTTP_RATELIMIT_STATS_H


#include "ngx_ratelimit_types.h"


char *ngx_http_ratelimit_stats(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_ratelimit_get_only(ngx_http_request_t *r, ngx_str_t *cache);
ngx_int_t ngx_http_ratelimit_answer_headers(ngx_http_request_t *r,
    ngx_str_t *cache);
ngx_int_t ngx_http_ratelimit_add_headers(ngx_http_request_t *r,
    ngx_keyval_t *headers, ngx_uint_t n);
ngx_int_t ngx_http_ratelimit_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *type, u_char *data, size_t len);
ngx_int_t ngx_http_ratelimit_send_json(ngx_http_request_t *r,
    ngx_uint_t status, u_char *data, size_t len);
ngx_int_t ngx_http_ratelimit_snapshot(ngx_http_request_t *r, ngx_uint_t what,
    rl_stats_snapshot_t *s);
ngx_int_t ngx_http_ratelimit_zone_snapshot(ngx_http_request_t *r,
    ngx_http_ratelimit_zone_t *zone, ngx_uint_t what, rl_zone_snapshot_t *z);
ngx_int_t ngx_http_ratelimit_top_view(ngx_http_request_t *r,
    ngx_http_ratelimit_zone_t *zone, ngx_http_ratelimit_rule_t *rule, int slot,
    rl_top_t *top, rl_top_view_t *v);


#endif /* NGX_HTTP_RATELIMIT_STATS_H */
