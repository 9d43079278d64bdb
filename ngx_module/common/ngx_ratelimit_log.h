
/*
 * ngx-ratelimit: folded log lines, and the debug lines
 * (ngx_http_ratelimit_log.c).
 */

#ifndef NGX_HTTP_RATELIMIT_LOG_H
#define NGX_HTTP_RATELIMIT_LOG_H


#include "ngx_ratelimit_types.h"


void ngx_http_ratelimit_log_verdict(ngx_http_request_t *r, ngx_uint_t level,
    rl_request_t *rq, ngx_uint_t waited);
#if (NGX_DEBUG)
void ngx_http_ratelimit_debug_decision(ngx_http_request_t *r,
    rl_request_t *rq);
void ngx_http_ratelimit_debug_end(ngx_http_request_t *r, rl_request_t *rq,
    int freed, ngx_uint_t charges);
#endif
void ngx_http_ratelimit_log_bad(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule, const char *what);
void ngx_cdecl ngx_http_ratelimit_log_written(ngx_log_t *log,
    ngx_http_ratelimit_repeat_t *rp, ngx_int_t rc, ngx_err_t err,
    const char *fmt, ...);
ngx_int_t ngx_http_ratelimit_log_init(ngx_conf_t *cf,
    ngx_http_ratelimit_main_conf_t *rmcf);
u_char *ngx_http_ratelimit_escape_key(u_char *p, const u_char *data,
    size_t len);
ngx_log_t *ngx_http_ratelimit_request_log(ngx_http_request_t *r,
    ngx_log_t *log);


#endif /* NGX_HTTP_RATELIMIT_LOG_H */
