
/*
 * ngx-ratelimit: the key API's shared parts (ngx_http_ratelimit_api.c reads
 * a request, ngx_http_ratelimit_api_keys.c answers it, and
 * ngx_http_ratelimit_api_redis.c asks Redis for a zone with redis=).
 */

#ifndef NGX_HTTP_RATELIMIT_API_H
#define NGX_HTTP_RATELIMIT_API_H


#include "ngx_http_ratelimit_module.h"


/* The longest key, after %-decoding, that the API looks up. */
#define NGX_HTTP_RATELIMIT_API_KEY_MAX  4096

#define NGX_HTTP_RATELIMIT_API_ZONES    0
#define NGX_HTTP_RATELIMIT_API_ZONE     1
#define NGX_HTTP_RATELIMIT_API_KEYS     2
#define NGX_HTTP_RATELIMIT_API_TOP      3


/* What a request asks for. */
typedef struct {
    ngx_uint_t                   resource;  /* NGX_HTTP_RATELIMIT_API_* */
    ngx_str_t                    zone_name;
    ngx_http_ratelimit_zone_t   *zone;
    ngx_str_t                    key;       /* decoded; data NULL: none */
    ngx_str_t                    rule;
    uint64_t                     fingerprint;
    ngx_uint_t                   has_fingerprint;
    ngx_int_t                    rc;        /* of a response sent already */
} ngx_http_ratelimit_api_req_t;


/* A state of a key that a lookup reads or a reset clears: a rule's. */
typedef struct {
    ngx_http_ratelimit_rule_t   *rule;
    uint64_t                     tag;
    uint64_t                     cost;
    rl_peek_t                    peek;      /* Redis: held if not back to
                                               full budget, never owed */
    int                          reset;     /* RL_RESET_* (Redis: held) */
} ngx_http_ratelimit_api_state_t;


/* ngx_http_ratelimit_api.c */
void ngx_http_ratelimit_api_fingerprint(ngx_http_ratelimit_writer_t *w,
    uint64_t tag);
void ngx_http_ratelimit_api_field(ngx_http_ratelimit_writer_t *w,
    const char *name, uint64_t n);
ngx_int_t ngx_http_ratelimit_api_send(ngx_http_request_t *r,
    ngx_uint_t status, ngx_http_ratelimit_writer_t *w);
ngx_int_t ngx_http_ratelimit_api_error(ngx_http_request_t *r,
    ngx_uint_t status, const char *fmt, ...);

/* ngx_http_ratelimit_api_keys.c */
ngx_int_t ngx_http_ratelimit_api_zones(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
ngx_int_t ngx_http_ratelimit_api_keys(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
ngx_int_t ngx_http_ratelimit_api_top(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
ngx_int_t ngx_http_ratelimit_api_answer(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, ngx_array_t *states);
void ngx_http_ratelimit_api_log_reset(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, ngx_http_ratelimit_api_state_t *st);

/* ngx_http_ratelimit_api_redis.c */
ngx_int_t ngx_http_ratelimit_api_redis(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, ngx_array_t *states);


#endif /* NGX_HTTP_RATELIMIT_API_H */
