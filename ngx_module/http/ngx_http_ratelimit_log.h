
/*
 * ngx-ratelimit: a request's log lines, and its log
 * (ngx_http_ratelimit_log.c).
 */

#ifndef NGX_HTTP_RATELIMIT_LOG_H
#define NGX_HTTP_RATELIMIT_LOG_H


#include "ngx_http_ratelimit_types.h"
#include "ngx_ratelimit_log.h"


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
ngx_log_t *ngx_http_ratelimit_request_log(ngx_http_request_t *r,
    ngx_log_t *log);


#endif /* NGX_HTTP_RATELIMIT_LOG_H */
