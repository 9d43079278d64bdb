
/*
 * ngx-ratelimit: folded log lines, a key made safe to show, and a failure
 * that repeats on a timer (ngx_ratelimit_log.c).
 */

#ifndef NGX_RATELIMIT_LOG_H
#define NGX_RATELIMIT_LOG_H


#include "ngx_ratelimit_types.h"


extern ngx_str_t  ngx_ratelimit_status_names[];

void ngx_ratelimit_log_verdict(ngx_log_t *log, ngx_uint_t level,
    rl_request_t *rq, ngx_uint_t waited);
ngx_uint_t ngx_ratelimit_log_line(ngx_ratelimit_rule_t *rule,
    rl_check_t *check, ngx_uint_t level);
void ngx_ratelimit_log_check(ngx_log_t *log, ngx_uint_t level,
    const char *what, rl_check_t *check);
void ngx_ratelimit_log_bad(ngx_log_t *log, ngx_ratelimit_rule_t *rule,
    const char *what);
void ngx_cdecl ngx_ratelimit_log_written(ngx_log_t *log,
    ngx_ratelimit_repeat_t *rp, ngx_int_t rc, ngx_err_t err,
    const char *fmt, ...);
ngx_int_t ngx_ratelimit_log_init(ngx_conf_t *cf, ngx_ratelimit_conf_t *conf);
u_char *ngx_ratelimit_escape_key(u_char *p, const u_char *data,
    size_t len);


#endif /* NGX_RATELIMIT_LOG_H */
