/*
 * ngx-ratelimit: zones declared with redis=: their types, and a call sent
 * and its reply read (ngx_http_ratelimit_redis.c).  The core writes the
 * command and reads the reply; the connections are
 * ngx_http_ratelimit_redis_conn.c's.
 */

#ifndef NGX_HTTP_RATELIMIT_REDIS_H
#define NGX_HTTP_RATELIMIT_REDIS_H

#include "ngx_http_ratelimit_types.h"


/* on_redis_error= */
#define NGX_HTTP_RATELIMIT_REDIS_LOCAL    0
#define NGX_HTTP_RATELIMIT_REDIS_ALLOW    1
#define NGX_HTTP_RATELIMIT_REDIS_DENY     2

/* latency buckets of ratelimit_stats, upper bounds in microseconds */
#define NGX_HTTP_RATELIMIT_REDIS_BUCKETS  8
extern const ngx_uint_t  ngx_http_ratelimit_redis_bucket_us[];

/* counters in the zone: every worker adds, a reload keeps them (their
   list: RL_REDIS_COUNTERS) */
typedef struct {
#define NGX_HTTP_RATELIMIT_REDIS_COUNTER(name, help)  ngx_atomic_t  name;
    RL_REDIS_COUNTERS(NGX_HTTP_RATELIMIT_REDIS_COUNTER)
#undef NGX_HTTP_RATELIMIT_REDIS_COUNTER
    ngx_atomic_t   latency[NGX_HTTP_RATELIMIT_REDIS_BUCKETS + 1];
    ngx_atomic_t   latency_us;    /* sum */
    ngx_atomic_t   server;        /* the server's id in its leases' names,
                                     the same in all its workers: made by
                                     the first that needs it
                                     (ngx_http_ratelimit_redis_server_id),
                                     kept by a reload, and carried over to
                                     a zone made again by one */
} ngx_http_ratelimit_redis_stats_t;


/* answer: the core's reading of the script's answer (rl_redis_answer: the
   checks' decisions set), or NULL when Redis failed the call */
typedef void (*ngx_http_ratelimit_redis_done_pt)(
    ngx_http_ratelimit_redis_wait_t *w, rl_redis_answer_t *answer);

/* A call of another kind than the decision script's (redis_sync's
   exchange): how its command is written, and its reply read. */
typedef ngx_int_t (*ngx_http_ratelimit_redis_command_pt)(void *conn,
    ngx_http_ratelimit_redis_wait_t *w, ngx_uint_t eval);
typedef ngx_int_t (*ngx_http_ratelimit_redis_answer_pt)(
    ngx_http_ratelimit_redis_wait_t *w, rl_resp_t *reply,
    rl_redis_answer_t *a);

/* a request waiting for Redis, in the request's pool; or a request's
   charges being settled after it ended (request NULL: the handler frees it) */
struct ngx_http_ratelimit_redis_wait_s {
    ngx_http_request_t                *request;
    ngx_http_ratelimit_redis_done_pt   handler;
    ngx_http_ratelimit_redis_t        *redis;
    rl_request_t                      *rq;       /* its rules, keys, costs */
    ngx_uint_t                         call;     /* enum rl_redis_call */
    ngx_http_ratelimit_redis_command_pt  command;  /* NULL: the script's */
    ngx_http_ratelimit_redis_answer_pt   answer;   /* NULL: the script's */
    void                              *conn;     /* while queued */
    ngx_uint_t                         slot;
    ngx_uint_t                         seq;      /* its place on conn (the
                                                    connection's pushed) */
    ngx_msec_t                         start;
    ngx_msec_t                         timeout;  /* 0: redis_timeout */
    ngx_event_t                        timer;
    unsigned                           via:2;    /* enum rl_redis_via: as
                                                    last sent */
    unsigned                           loaded:1; /* the library sent for it */
    unsigned                           retried:1;  /* sent with EVAL */
    unsigned                           timed_out:1;
    unsigned                           redirects:3;  /* MOVED, ASK */
};


/* A reply a connection read, handed up to whoever sent its call
   (ngx_http_ratelimit_redis.c: connections lie below the calls). */
typedef void (*ngx_http_ratelimit_redis_reply_pt)(void *conn,
    rl_resp_t *reply, ngx_str_t *raw);


/* lines of a kind, folded: one a second, the rest counted in a line a
   second */
typedef struct {
    ngx_msec_t                         second;
    ngx_uint_t                         folded;
    ngx_event_t                        event;
} ngx_http_ratelimit_redis_fold_t;


struct ngx_http_ratelimit_redis_s {
    ngx_str_t                          server;   /* HOST:PORT, for logs */
    ngx_str_t                          zone;     /* its name, for logs */
    ngx_addr_t                        *addrs;
    ngx_uint_t                         naddrs;
    ngx_msec_t                         timeout;
    ngx_uint_t                         pool;
    ngx_str_t                          host;     /* of redis=, bare */
    ngx_str_t                          user;     /* ACL: AUTH user pass */
    ngx_str_t                          password;
    ngx_str_t                          password_file;
    ngx_uint_t                         db;
    ngx_str_t                          prefix;
    ngx_uint_t                         on_error;
    ngx_flag_t                         cluster;
    ngx_http_core_loc_conf_t          *core;     /* the http block's: its
                                                    resolver names a
                                                    cluster's servers */

    ngx_flag_t                         tls;
    ngx_uint_t                         tls_verify;
    ngx_str_t                          tls_ca;
    ngx_str_t                          tls_name;  /* NUL-terminated */
    ngx_flag_t                         tls_name_host; /* not given: a server
                                                     reached by host name is
                                                     checked against that */
    ngx_str_t                          tls_cert;
    ngx_str_t                          tls_key;
    void                              *ssl;       /* ngx_ssl_t, made with
                                                     the configuration */
    ngx_log_t                          conn_log;  /* the worker's, for its
                                                     connections: nginx's
                                                     own lines not written */
    ngx_uint_t                         given;    /* parameters, by index */
    u_char                             sha[40];  /* the script's SHA-1 */
    ngx_http_ratelimit_redis_stats_t  *stats;    /* in the zone */
    void                              *refusals; /* in the zone, after the
                                                    stats (rl_refusals_*) */
    size_t                             refusals_size;

    /* set before the first connection (ngx_http_ratelimit_redis_send):
       each reply read, and each call a lost connection will not answer */
    ngx_http_ratelimit_redis_reply_pt  reply;
    ngx_http_ratelimit_redis_done_pt   unanswered;

    /* this worker's: the servers it knows (the first is redis=), and,
       with Redis Cluster, which serves each slot */
    void                             **nodes;
    ngx_uint_t                         nnodes;
    u_char                            *slots;
    ngx_http_ratelimit_redis_fold_t    refused;     /* replies refused */
    ngx_http_ratelimit_redis_fold_t    undelivered; /* charges not settled */
    void                              *free;        /* settles' blocks to
                                                       use again */
    ngx_uint_t                         nfree;
    /* concurrency's leases (ngx_http_ratelimit_redis_settle.c): this
       worker's requests holding them, renewed together on a timer */
    ngx_queue_t                        leases;
    ngx_event_t                        renew;
    ngx_msec_t                         renew_ms;    /* its interval */
    ngx_uint_t                         restore_calls; /* of the round of
                                                       restores sent last,
                                                       not yet answered */
    ngx_uint_t                         restore_round;
    unsigned                           restoring:1; /* Redis failed a call:
                                                       every lease written
                                                       again, a round each
                                                       tick, until a round
                                                       is answered whole */
    unsigned                           restore_failed:1; /* a call failed
                                                       since the round */
    uint64_t                           lease_server; /* stats->server,
                                                       as this worker read it */
    uint64_t                           lease_owner; /* names this worker's
                                                       leases in the fleet */
    uint32_t                           lease_next;
    ngx_http_ratelimit_redis_fold_t    lease_lost;  /* leases that expired
                                                       before their end */
};


/*
 * Sends w's request to Redis.  NGX_OK: queued, w->handler will be called
 * from an event (never from here).  NGX_DECLINED: Redis is not reachable
 * now (reconnecting later): decide by on_redis_error at once.
 */
ngx_int_t ngx_http_ratelimit_redis_send(ngx_http_ratelimit_redis_t *redis,
    ngx_http_ratelimit_redis_wait_t *w);

/* Closes this worker's connections (at exit). */
void ngx_http_ratelimit_redis_close(ngx_http_ratelimit_redis_t *redis);

/* Bytes of a reply shown in a log line, escaped (the rest cut). */
#define NGX_HTTP_RATELIMIT_REDIS_SHOWN    128

/* Forgets a request that goes away while it waits. */
void ngx_http_ratelimit_redis_cancel(ngx_http_ratelimit_redis_wait_t *w);

/* This server's id in its leases' names (the zone's; made if none yet). */
uint64_t ngx_http_ratelimit_redis_server_id(ngx_http_ratelimit_redis_t *redis);

/* 1 if a line of this kind may be written now; else it is counted, and
   written as a count within a second (what: "replies refused", ...). */
ngx_uint_t ngx_http_ratelimit_redis_log_now(ngx_http_ratelimit_redis_t *redis,
    ngx_http_ratelimit_redis_fold_t *fold);

#endif /* NGX_HTTP_RATELIMIT_REDIS_H */
