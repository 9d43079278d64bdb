
/*
 * ngx-ratelimit: the key API's states read or reset in Redis
 * (ngx_http_ratelimit_api_redis.c).
 */

#ifndef NGX_HTTP_RATELIMIT_API_REDIS_H
#define NGX_HTTP_RATELIMIT_API_REDIS_H


#include "ngx_http_ratelimit_api_keys.h"


ngx_int_t ngx_http_ratelimit_api_redis_override(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, const rl_override_rule_t *rule);
ngx_int_t ngx_http_ratelimit_api_redis(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);


#endif /* NGX_HTTP_RATELIMIT_API_REDIS_H */
