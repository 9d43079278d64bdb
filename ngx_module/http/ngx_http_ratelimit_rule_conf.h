
/*
 * ngx-ratelimit: the ratelimit directive in the http block
 * (ngx_http_ratelimit_rule_conf.c).
 */


#ifndef NGX_HTTP_RATELIMIT_RULE_CONF_H
#define NGX_HTTP_RATELIMIT_RULE_CONF_H


#include "ngx_http_ratelimit_types.h"


char *ngx_http_ratelimit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);


#endif /* NGX_HTTP_RATELIMIT_RULE_CONF_H */
