
/*
 * ngx-ratelimit: redis_tls=on: the TLS context, a connection's handshake,
 * its failures (ngx_ratelimit_redis_tls.c).
 */

#ifndef NGX_RATELIMIT_REDIS_TLS_H
#define NGX_RATELIMIT_REDIS_TLS_H


#include "ngx_ratelimit_redis_types.h"


/* The TLS context of a zone with redis_tls=on, made when the configuration
   is read. */
char *ngx_ratelimit_redis_tls_conf(ngx_conf_t *cf,
    ngx_ratelimit_redis_t *redis);

#if (NGX_SSL)
void ngx_ratelimit_redis_tls_start(ngx_ratelimit_redis_conn_t *conn,
    ngx_ratelimit_redis_tls_done_pt done);
void ngx_ratelimit_redis_tls_forget(ngx_ratelimit_redis_node_t *node);
#endif
void ngx_ratelimit_redis_tls_failed(ngx_ratelimit_redis_conn_t *conn,
    const char *why, ngx_uint_t precise);


#endif /* NGX_RATELIMIT_REDIS_TLS_H */
