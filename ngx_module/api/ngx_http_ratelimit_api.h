
/*
 * ngx-ratelimit: ratelimit_api: a request read (by the core), its zone and
 * rule found, the zones and top keys answered; a key's states by
 * ngx_http_ratelimit_api_redis.c (in Redis) and
 * ngx_http_ratelimit_api_keys.c (in the zone) (ngx_http_ratelimit_api.c).
 */

#ifndef NGX_HTTP_RATELIMIT_API_H
#define NGX_HTTP_RATELIMIT_API_H


#include "ngx_http_ratelimit_types.h"


char *ngx_http_ratelimit_api(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);


#endif /* NGX_HTTP_RATELIMIT_API_H */
