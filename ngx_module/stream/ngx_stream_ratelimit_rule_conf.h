
/*
 * ngx-ratelimit: the ratelimit directive in the stream block
 * (ngx_stream_ratelimit_rule_conf.c).
 */

#ifndef NGX_STREAM_RATELIMIT_RULE_CONF_H
#define NGX_STREAM_RATELIMIT_RULE_CONF_H


#include "ngx_stream_ratelimit_types.h"


char *ngx_stream_ratelimit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);


#endif /* NGX_STREAM_RATELIMIT_RULE_CONF_H */
