
/*
 * ngx-ratelimit: ratelimit_stats (ngx_http_ratelimit_stats.c).
 */

#ifndef NGX_HTTP_RATELIMIT_STATS_H
#define NGX_HTTP_RATELIMIT_STATS_H


#include "ngx_http_ratelimit_types.h"


char *ngx_http_ratelimit_stats(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* NGX_HTTP_RATELIMIT_STATS_H */
