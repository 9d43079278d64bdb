
/*
 * ngx-ratelimit: the key API's shared parts.  The files depend downward:
 * ngx_http_ratelimit_api.c reads a request (through the core) and answers
 * zones and top; ngx_http_ratelimit_api_redis.c reads or resets a key of a
 * zone with redis= in Redis; ngx_http_ratelimit_api_keys.c in the zone, and
 * answers what both found.
 */

#ifndef NGX_HTTP_RATELIMIT_API_H
#define NGX_HTTP_RATELIMIT_API_H


#include "ngx_http_ratelimit_module.h"


/* A request, in its pool. */
typedef struct {
    rl_api_request_t             in;        /* what it asks (the core's) */
    ngx_http_ratelimit_zone_t   *zone;      /* in.zone's */
    ngx_array_t                 *states;    /* rl_key_state_t, data: the
                                               ngx_http_ratelimit_rule_t */
} ngx_http_ratelimit_api_req_t;


/* ngx_http_ratelimit_api_redis.c */
ngx_int_t ngx_http_ratelimit_api_redis(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);

/* ngx_http_ratelimit_api_keys.c */
ngx_int_t ngx_http_ratelimit_api_keys(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
ngx_int_t ngx_http_ratelimit_api_states(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
ngx_int_t ngx_http_ratelimit_api_answer(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
ngx_int_t ngx_http_ratelimit_api_fail(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, int error);
void ngx_http_ratelimit_api_log_reset(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, rl_key_state_t *st);


#endif /* NGX_HTTP_RATELIMIT_API_H */
