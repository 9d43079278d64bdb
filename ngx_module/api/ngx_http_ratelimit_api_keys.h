
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
    ngx_ratelimit_zone_t        *zone;      /* in.zone's */
    ngx_array_t                 *states;    /* rl_key_state_t, data: the
                                               ngx_ratelimit_rule_t */
    rl_override_t                ov;        /* overrides: the one asked */
    ngx_str_t                    body;      /*   PUT's */
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

/* Who asked for a write, for its log line (at most so many bytes). */
#define NGX_HTTP_RATELIMIT_WHO_MAX                                            \
    (NGX_RATELIMIT_KEY_ESCAPED + NGX_SOCKADDR_STRLEN + 96)
char *ngx_http_ratelimit_api_who(ngx_http_request_t *r, u_char *who);

/* An override read, written or removed (q->ov): its answer, its log line. */
ngx_int_t ngx_http_ratelimit_api_send_overrides(ngx_http_request_t *r,
    rl_overrides_view_t *v);
ngx_int_t ngx_http_ratelimit_api_override_answer(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
void ngx_http_ratelimit_api_log_override(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);


#endif /* NGX_HTTP_RATELIMIT_API_KEYS_H */
