
/*
 * ngx-ratelimit: the types every file of redis/ shares: a zone's Redis
 * (its parameters, counters and this worker's servers), a call waiting for
 * its reply, a server and its connections.  It declares no function: a
 * file includes it through its own header, and the headers of the files
 * below it that it calls; a call back up goes through a function pointer
 * the lower file was given, its type here beside the field that holds it.
 */

#ifndef NGX_RATELIMIT_REDIS_TYPES_H
#define NGX_RATELIMIT_REDIS_TYPES_H


#include <ngx_event_connect.h>

#include "ngx_ratelimit_types.h"


/* on_redis_error= */
#define NGX_RATELIMIT_REDIS_LOCAL    0
#define NGX_RATELIMIT_REDIS_ALLOW    1
#define NGX_RATELIMIT_REDIS_DENY     2

/* latency buckets of ratelimit_stats, upper bounds in microseconds */
#define NGX_RATELIMIT_REDIS_BUCKETS  8
extern const ngx_uint_t  ngx_ratelimit_redis_bucket_us[];

/* counters in the zone: every worker adds, a reload keeps them (their
   list: RL_REDIS_COUNTERS) */
typedef struct {
#define NGX_RATELIMIT_REDIS_COUNTER(name, help)  ngx_atomic_t  name;
    RL_REDIS_COUNTERS(NGX_RATELIMIT_REDIS_COUNTER)
#undef NGX_RATELIMIT_REDIS_COUNTER
    ngx_atomic_t   latency[NGX_RATELIMIT_REDIS_BUCKETS + 1];
    ngx_atomic_t   latency_us;    /* sum */
    ngx_atomic_t   server;        /* the server's id in its leases' names,
                                     the same in all its workers: made by
                                     the first that needs it
                                     (ngx_ratelimit_redis_server_id),
                                     kept by a reload, and carried over to
                                     a zone made again by one */
} ngx_ratelimit_redis_stats_t;


/* answer: the core's reading of the script's answer (rl_redis_answer: the
   checks' decisions set), or NULL when Redis failed the call */
typedef void (*ngx_ratelimit_redis_done_pt)(
    ngx_ratelimit_redis_wait_t *w, rl_redis_answer_t *answer);

/* A call of another kind than the decision script's (redis_sync's
   exchange): how its command is written, and its reply read. */
typedef ngx_int_t (*ngx_ratelimit_redis_command_pt)(void *conn,
    ngx_ratelimit_redis_wait_t *w, ngx_uint_t eval);
typedef ngx_int_t (*ngx_ratelimit_redis_answer_pt)(
    ngx_ratelimit_redis_wait_t *w, rl_resp_t *reply,
    rl_redis_answer_t *a);

/* a call to Redis: a request waiting for it (owner: the request, opaque
   here; the wait in its pool), or none (owner NULL: a request's charges
   settled after it ended, the handler frees it; an exchange of redis_sync;
   a poll of the overrides) */
struct ngx_ratelimit_redis_wait_s {
    void                              *owner;
    ngx_log_t                         *log;      /* the owner's; NULL: the
                                                    cycle's */
    ngx_ratelimit_redis_done_pt        handler;
    ngx_ratelimit_redis_t             *redis;
    rl_request_t                      *rq;       /* its rules, keys, costs */
    ngx_uint_t                         call;     /* enum rl_redis_call */
    ngx_ratelimit_redis_command_pt     command;  /* NULL: the script's */
    ngx_ratelimit_redis_answer_pt      answer;   /* NULL: the script's */
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
    unsigned                           batched:1;  /* in conn's batch, not
                                                      written yet (slot: its
                                                      place there) */
};


/*
 * Concurrency's leases a request holds in Redis
 * (ngx_ratelimit_redis_settle.c): in its context, and in its worker's list
 * while it holds them.
 */
typedef struct {
    ngx_queue_t                        link;     /* in the list */
    rl_request_t                      *rq;       /* the request's checks */
    unsigned                           local:1;  /* admitted by
                                                    on_redis_error=local */
    unsigned                           sent:1;   /* sent to Redis (taken,
                                                    or restored) */
} ngx_ratelimit_lease_t;


/* A reply a connection read, handed up to whoever sent its call
   (ngx_ratelimit_redis.c: connections lie below the calls). */
typedef void (*ngx_ratelimit_redis_reply_pt)(void *conn,
    rl_resp_t *reply, ngx_str_t *raw);


/* lines of a kind, folded: one a second, the rest counted in a line a
   second */
typedef struct {
    ngx_msec_t                         second;
    ngx_uint_t                         folded;
    ngx_event_t                        event;
} ngx_ratelimit_redis_fold_t;


struct ngx_ratelimit_redis_s {
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
    ngx_resolver_t                   **resolver; /* the block's: it names
                                                    redis= and a cluster's
                                                    servers by host name */
    ngx_msec_t                        *resolver_timeout;

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
    ngx_ratelimit_redis_stats_t       *stats;    /* in the zone */
    void                              *refusals; /* in the zone, after the
                                                    stats (rl_refusals_*) */
    size_t                             refusals_size;

    /* set before the first connection (ngx_ratelimit_redis_send):
       each reply read (a call a lost connection will not answer is told
       by its own handler) */
    ngx_ratelimit_redis_reply_pt  reply;

    /* this worker's: the servers it knows (the first is redis=), and,
       with Redis Cluster, which serves each slot */
    void                             **nodes;
    ngx_uint_t                         nnodes;
    u_char                            *slots;
    ngx_ratelimit_redis_fold_t         refused;     /* replies refused */
    ngx_ratelimit_redis_fold_t         undelivered; /* charges not settled */
    void                              *free;        /* settles' blocks to
                                                       use again */
    ngx_uint_t                         nfree;
    /* concurrency's leases (ngx_ratelimit_redis_settle.c): this
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
    ngx_ratelimit_redis_fold_t         lease_lost;  /* leases that expired
                                                       before their end */
};


#define NGX_RATELIMIT_REDIS_RING      1024     /* requests in flight */
#define NGX_RATELIMIT_REDIS_IN        65536    /* replies read at
                                                       once; each at most
                                                       RL_RESP_REPLY_MAX */
#define NGX_RATELIMIT_REDIS_BACKOFF   100
#define NGX_RATELIMIT_REDIS_BACKOFF_MAX  1000     /* Redis back: found
                                                       within a second */
#define NGX_RATELIMIT_REDIS_NODES     32       /* cluster servers known */
#define NGX_RATELIMIT_REDIS_ADDRS     8        /* addresses kept of a
                                                       server's host name */
#define NGX_RATELIMIT_REDIS_SLOTS     16384
#define NGX_RATELIMIT_REDIS_TLS_WHY   320      /* a TLS failure's line */
#define NGX_RATELIMIT_REDIS_FAIL_WHY  96       /* a failure's reason */
#define NGX_RATELIMIT_REDIS_SHOWN     128      /* bytes of a reply
                                                       shown in a log line,
                                                       escaped (the rest
                                                       cut) */
/* a server that keeps failing the same way: said again so often */
#define NGX_RATELIMIT_REDIS_FAIL_SAY  (60 * 1000)

#define NGX_RATELIMIT_REDIS_DOWN        0
#define NGX_RATELIMIT_REDIS_CONNECTING  1
#define NGX_RATELIMIT_REDIS_READY       2
#define NGX_RATELIMIT_REDIS_RESOLVING   3    /* its server's host name:
                                                     no socket yet */

/* the ring entries of commands sent for the connection itself: AUTH,
   SELECT, ASKING (OWN); FUNCTION LOAD (LOAD) */
#define NGX_RATELIMIT_REDIS_OWN                                               \
    ((ngx_ratelimit_redis_wait_t *) &ngx_ratelimit_redis_own[0])
#define NGX_RATELIMIT_REDIS_LOAD                                              \
    ((ngx_ratelimit_redis_wait_t *) &ngx_ratelimit_redis_own[1])
#define ngx_ratelimit_redis_is_own(w)                                         \
    ((w) == NGX_RATELIMIT_REDIS_OWN                                           \
     || (w) == NGX_RATELIMIT_REDIS_LOAD)

extern ngx_uint_t  ngx_ratelimit_redis_own[2];


typedef struct ngx_ratelimit_redis_node_s  ngx_ratelimit_redis_node_t;
typedef struct ngx_ratelimit_redis_conn_s  ngx_ratelimit_redis_conn_t;

/* A server's host name resolved (why NULL), or not: the addresses
   (ngx_ratelimit_redis_node.c) lie below the connections and tell
   them through it. */
typedef void (*ngx_ratelimit_redis_resolved_pt)(
    ngx_ratelimit_redis_node_t *node, const char *why);

/* The end of a connection's TLS handshake: why it failed, or NULL (the
   connection is ready).  TLS (ngx_ratelimit_redis_tls.c) lies below
   the connections and tells them through it. */
typedef void (*ngx_ratelimit_redis_tls_done_pt)(
    ngx_ratelimit_redis_conn_t *conn, const char *why);

struct ngx_ratelimit_redis_conn_s {
    ngx_ratelimit_redis_t             *redis;
    ngx_ratelimit_redis_node_t        *node;
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
    ngx_ratelimit_redis_wait_t        *ring[NGX_RATELIMIT_REDIS_RING];
    /* the ring's entries the reply to a command answers, at its first's
       slot: 1, or a batch's requests */
    u_char                             answers[NGX_RATELIMIT_REDIS_RING];

    /* decisions to be written in one call (a batch), once the worker's
       events of this cycle are handled, or when it is full */
    ngx_ratelimit_redis_wait_t        *batch[RL_REDIS_BATCH_MAX];
    ngx_uint_t                         nbatch;
    size_t                             batch_bytes;
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
       said since (ngx_ratelimit_redis_fail_log) */
    u_char                             failing[
                                           NGX_RATELIMIT_REDIS_FAIL_WHY];
    ngx_msec_t                         failing_said;
    ngx_uint_t                         failures;
    ngx_uint_t                         folded;
    unsigned                           replied:1;    /* since connected */
    unsigned                           tls_cert_asked:1;  /* and none */
    unsigned                           quiet:1;      /* a failure logged
                                                        already */
    ngx_ratelimit_redis_tls_done_pt    tls_done;
};


/* a Redis server and this worker's redis_pool connections to it */
struct ngx_ratelimit_redis_node_s {
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
    ngx_ratelimit_redis_resolved_pt    done;  /* at the end of it */
    ngx_str_t                          tls_name; /* NUL-terminated */
    ngx_addr_t                         addr[NGX_RATELIMIT_REDIS_ADDRS];
    ngx_sockaddr_t                     sockaddr[NGX_RATELIMIT_REDIS_ADDRS];
#if (NGX_SSL)
    ngx_ssl_session_t                 *session;  /* TLS, to resume */
#endif
    /* the TLS failure logged, until a reply is read */
    u_char                             tls_error[
                                           NGX_RATELIMIT_REDIS_TLS_WHY];
    ngx_ratelimit_redis_conn_t    conns[1]; /* [pool] */
};


#endif /* NGX_RATELIMIT_REDIS_TYPES_H */
