
/*
 * ngx-ratelimit: the key API's request, a key's states read or reset in the
 * zone, each reset logged, and the answer (ngx_http_ratelimit_api_keys.c).
 */

#ifndef NGX_HTTP_RATELIMIT_API_KEYS_H
#define NGX_HTTP_RATELIMIT_API_KEYS_H


#include "ngx_http_ratelimit_types.h"


/* A request, in its pool. */
typedef struct {
    rl_api_request_t             in;        /* what it asks (the core's) */
    ngx_http_ratelimit_zone_t   *zone;      /* in.zone's */
    ngx_array_t                 *states;    /* rl_key_state_t, data: the
                                               ngx_http_ratelimit_rule_t */
} ngx_http_ratelimit_api_req_t;



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


#endif /* NGX_HTTP_RATELIMIT_API_KEYS_H */
