
/*
 * ngx-ratelimit: a worker's connections to Redis, shared by the request
 * path (ngx_http_ratelimit_redis.c) and the connections' own handling
 * (ngx_http_ratelimit_redis_conn.c).
 */

#ifndef NGX_HTTP_RATELIMIT_REDIS_CONN_H
#define NGX_HTTP_RATELIMIT_REDIS_CONN_H

#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_http_ratelimit_redis.h"


#define NGX_HTTP_RATELIMIT_REDIS_RING      1024     /* requests in flight */
#define NGX_HTTP_RATELIMIT_REDIS_IN        65536    /* replies read at
                                                       once; each at most
                                                       RL_RESP_REPLY_MAX */
#define NGX_HTTP_RATELIMIT_REDIS_BACKOFF   100
#define NGX_HTTP_RATELIMIT_REDIS_BACKOFF_MAX  1000     /* Redis back: found
                                                       within a second */
#define NGX_HTTP_RATELIMIT_REDIS_NODES     32       /* cluster servers known */
#define NGX_HTTP_RATELIMIT_REDIS_ADDRS     8        /* addresses kept of a
                                                       server's host name */
#define NGX_HTTP_RATELIMIT_REDIS_SLOTS     16384
#define NGX_HTTP_RATELIMIT_REDIS_TLS_WHY   320      /* a TLS failure's line */
#define NGX_HTTP_RATELIMIT_REDIS_FAIL_WHY  96       /* a failure's reason */
/* a server that keeps failing the same way: said again so often */
#define NGX_HTTP_RATELIMIT_REDIS_FAIL_SAY  (60 * 1000)

#define NGX_HTTP_RATELIMIT_REDIS_DOWN        0
#define NGX_HTTP_RATELIMIT_REDIS_CONNECTING  1
#define NGX_HTTP_RATELIMIT_REDIS_READY       2
#define NGX_HTTP_RATELIMIT_REDIS_RESOLVING   3    /* its server's host name:
                                                     no socket yet */

/* the ring entries of commands sent for the connection itself: AUTH,
   SELECT, ASKING (OWN); FUNCTION LOAD (LOAD) */
#define NGX_HTTP_RATELIMIT_REDIS_OWN                                          \
    ((ngx_http_ratelimit_redis_wait_t *) &ngx_http_ratelimit_redis_own[0])
#define NGX_HTTP_RATELIMIT_REDIS_LOAD                                         \
    ((ngx_http_ratelimit_redis_wait_t *) &ngx_http_ratelimit_redis_own[1])
#define ngx_http_ratelimit_redis_is_own(w)                                    \
    ((w) == NGX_HTTP_RATELIMIT_REDIS_OWN                                      \
     || (w) == NGX_HTTP_RATELIMIT_REDIS_LOAD)

extern ngx_uint_t  ngx_http_ratelimit_redis_own[2];


typedef struct ngx_http_ratelimit_redis_node_s  ngx_http_ratelimit_redis_node_t;
typedef struct ngx_http_ratelimit_redis_conn_s  ngx_http_ratelimit_redis_conn_t;

/* The end of a connection's TLS handshake: why it failed, or NULL (the
   connection is ready).  TLS (ngx_http_ratelimit_redis_tls.c) lies below
   the connections and tells them through it. */
/* a server's host name resolved (why NULL), or not */
typedef void (*ngx_http_ratelimit_redis_resolved_pt)(
    ngx_http_ratelimit_redis_node_t *node, const char *why);

typedef void (*ngx_http_ratelimit_redis_tls_done_pt)(
    ngx_http_ratelimit_redis_conn_t *conn, const char *why);

struct ngx_http_ratelimit_redis_conn_s {
    ngx_http_ratelimit_redis_t        *redis;
    ngx_http_ratelimit_redis_node_t   *node;
    ngx_peer_connection_t              peer;
    ngx_uint_t                         state;
    ngx_msec_t                         retry_at;
    ngx_msec_t                         backoff;

    u_char                            *out;
    size_t                             out_len;
    size_t                             out_sent;
    size_t                             out_cap;

    u_char                            *in;
    size_t                             in_len;

    ngx_uint_t                         head;
    ngx_uint_t                         count;
    ngx_http_ratelimit_redis_wait_t   *ring[NGX_HTTP_RATELIMIT_REDIS_RING];
    ngx_msec_t                         replied_at;  /* the last reply read,
                                                       or when connected */
    ngx_uint_t                         pushed;  /* commands, since connected */
    ngx_uint_t                         loaded;  /* pushed when the library
                                                   was last sent (FUNCTION
                                                   LOAD), or 0 */
    unsigned                           scripts:1;  /* the server calls the
                                                      script (EVALSHA): no
                                                      FCALL, or no library */

    ngx_int_t                          tls_alert;   /* the last TLS alert
                                                        received, or -1 */
    ngx_int_t                          tls_alert_sent;
    /* failures since its last reply: the one said, when, and those not
       said since (ngx_http_ratelimit_redis_fail_log) */
    u_char                             failing[
                                           NGX_HTTP_RATELIMIT_REDIS_FAIL_WHY];
    ngx_msec_t                         failing_said;
    ngx_uint_t                         failures;
    ngx_uint_t                         folded;
    unsigned                           replied:1;    /* since connected */
    unsigned                           tls_cert_asked:1;  /* and none */
    unsigned                           quiet:1;      /* a failure logged
                                                        already */
    ngx_http_ratelimit_redis_tls_done_pt  tls_done;
};


/* a Redis server and this worker's redis_pool connections to it */
struct ngx_http_ratelimit_redis_node_s {
    ngx_str_t                          name;     /* HOST:PORT */
    ngx_addr_t                        *addrs;
    ngx_uint_t                         naddrs;
    ngx_uint_t                         next;
    /* a server named by host name (redis=, with a resolver in the http
       block; a cluster's, cluster-preferred-endpoint-type hostname):
       resolved again at each connection; empty for an address */
    ngx_str_t                          host;     /* NUL-terminated */
    in_port_t                          port;
    unsigned                           resolving:1;
    ngx_http_ratelimit_redis_resolved_pt  done;  /* at the end of it */
    ngx_str_t                          tls_name; /* NUL-terminated */
    ngx_addr_t                         addr[NGX_HTTP_RATELIMIT_REDIS_ADDRS];
    ngx_sockaddr_t                     sockaddr[NGX_HTTP_RATELIMIT_REDIS_ADDRS];
#if (NGX_SSL)
    ngx_ssl_session_t                 *session;  /* TLS, to resume */
#endif
    /* the TLS failure logged, until a reply is read */
    u_char                             tls_error[
                                           NGX_HTTP_RATELIMIT_REDIS_TLS_WHY];
    ngx_http_ratelimit_redis_conn_t    conns[1]; /* [pool] */
};


ngx_http_ratelimit_redis_conn_t *ngx_http_ratelimit_redis_pick(
    ngx_http_ratelimit_redis_node_t *node);
ngx_int_t ngx_http_ratelimit_redis_reserve(
    ngx_http_ratelimit_redis_conn_t *conn, size_t len);
ngx_int_t ngx_http_ratelimit_redis_own_command(
    ngx_http_ratelimit_redis_conn_t *conn, const char *cmd, ngx_str_t *args,
    ngx_uint_t n);
ngx_int_t ngx_http_ratelimit_redis_load(ngx_http_ratelimit_redis_conn_t *conn);
void ngx_http_ratelimit_redis_push(ngx_http_ratelimit_redis_conn_t *conn,
    ngx_http_ratelimit_redis_wait_t *w);
void ngx_http_ratelimit_redis_fail(ngx_http_ratelimit_redis_conn_t *conn,
    const char *why, ngx_uint_t timeout);
void ngx_http_ratelimit_redis_lost(ngx_http_ratelimit_redis_conn_t *conn,
    const char *why);

#endif /* NGX_HTTP_RATELIMIT_REDIS_CONN_H */
