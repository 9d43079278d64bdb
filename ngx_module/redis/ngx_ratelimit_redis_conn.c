/*
 * ngx-ratelimit: a worker's connections to Redis, for zones declared with
 * redis=.
 *
 * Each worker keeps redis_pool connections per server, opened on first use
 * with nginx's event API (ngx_event_connect_peer: no blocking call; a
 * server's addresses are ngx_ratelimit_redis_node.c's).  Requests are
 * pipelined: a command is appended to a connection's output and a ring
 * remembers whose reply comes next.  A closed connection is opened again on
 * a later request (or exchange, or lease's tick), after a backoff that
 * doubles from 100 ms to 1 s, so that a Redis that answers again is found
 * within a second, and one that does not is tried once a second a
 * connection; meanwhile requests do not wait at all.
 */

#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ratelimit_redis_conn.h"
#include "ngx_ratelimit_redis_node.h"
#include "ngx_ratelimit_redis_tls.h"


static ngx_int_t ngx_ratelimit_redis_connect(
    ngx_ratelimit_redis_conn_t *conn);
static ngx_int_t ngx_ratelimit_redis_open(
    ngx_ratelimit_redis_conn_t *conn);
static ngx_int_t ngx_ratelimit_redis_connect_named(
    ngx_ratelimit_redis_conn_t *conn);
static void ngx_ratelimit_redis_resolved(
    ngx_ratelimit_redis_node_t *node, const char *why);
static void ngx_ratelimit_redis_write_handler(ngx_event_t *wev);
static void ngx_ratelimit_redis_read_handler(ngx_event_t *rev);
static void ngx_ratelimit_redis_drop(ngx_connection_t *c);
static void ngx_ratelimit_redis_answering(
    ngx_ratelimit_redis_conn_t *conn);
static const char *ngx_ratelimit_redis_errno(const char *what,
    ngx_err_t err);
#if (NGX_SSL)
static void ngx_ratelimit_redis_tls_done(
    ngx_ratelimit_redis_conn_t *conn, const char *why);
static void ngx_ratelimit_redis_ready(
    ngx_ratelimit_redis_conn_t *conn);
#endif
static void ngx_ratelimit_redis_refuse(
    ngx_ratelimit_redis_conn_t *conn, long used, u_char *data,
    size_t len);
static ngx_uint_t ngx_ratelimit_redis_kind(
    ngx_ratelimit_redis_wait_t *w);
static void ngx_ratelimit_redis_fail_log(
    ngx_ratelimit_redis_conn_t *conn, const char *why);


ngx_uint_t  ngx_ratelimit_redis_own[2];


/*
 * Round robin over a server's connections that can take a request: open,
 * or due to be opened again; not one whose ring is full.
 */

ngx_ratelimit_redis_conn_t *
ngx_ratelimit_redis_pick(ngx_ratelimit_redis_node_t *node)
{
    ngx_uint_t                   i, pool;
    ngx_ratelimit_redis_conn_t  *conn;

    pool = node->conns[0].redis->pool;

    /* a connection with a batch to write takes the next decision too */

    for (i = 0; i < pool; i++) {
        conn = &node->conns[i];

        if (conn->nbatch > 0
            && conn->count + conn->nbatch < NGX_RATELIMIT_REDIS_RING)
        {
            return conn;
        }
    }

    for (i = 0; i < pool; i++) {
        conn = &node->conns[(node->next + i) % pool];

        if (conn->count + conn->nbatch >= NGX_RATELIMIT_REDIS_RING
            || (conn->state == NGX_RATELIMIT_REDIS_DOWN
                && ((ngx_msec_int_t) (ngx_current_msec - conn->retry_at) < 0
                    || ngx_ratelimit_redis_connect(conn) != NGX_OK)))
        {
            continue;
        }

        node->next++;
        return conn;
    }

    node->next++;
    return NULL;
}


void
ngx_ratelimit_redis_close(ngx_ratelimit_redis_t *redis)
{
    ngx_uint_t                   i, j;
    ngx_ratelimit_redis_node_t  *node;

    for (i = 0; i < redis->nnodes; i++) {
        node = redis->nodes[i];

        for (j = 0; j < redis->pool; j++) {
            if (node->conns[j].peer.connection) {
                ngx_ratelimit_redis_drop(node->conns[j].peer.connection);
                node->conns[j].peer.connection = NULL;
            }

            node->conns[j].state = NGX_RATELIMIT_REDIS_DOWN;
        }

#if (NGX_SSL)
        ngx_ratelimit_redis_tls_forget(node);
#endif
    }
}


/* A connection closed, its TLS freed without waiting for the server. */

static void
ngx_ratelimit_redis_drop(ngx_connection_t *c)
{
    ngx_pool_t  *pool;

#if (NGX_SSL)
    if (c->ssl) {
        c->ssl->no_wait_shutdown = 1;
        c->ssl->no_send_shutdown = 1;
        (void) ngx_ssl_shutdown(c);
    }
#endif

    pool = c->pool;

    ngx_close_connection(c);

    if (pool) {
        ngx_destroy_pool(pool);
    }
}


/*
 * A connection opened: its AUTH and SELECT queued, then its server's host
 * name resolved (a cluster's server so named) or its socket connected.
 */

static ngx_int_t
ngx_ratelimit_redis_connect(ngx_ratelimit_redis_conn_t *conn)
{
    u_char                  dbs[NGX_INT_T_LEN];
    ngx_str_t               db, auth[2];
    ngx_uint_t              first;
    ngx_ratelimit_redis_t  *redis = conn->redis;

    if (conn->in == NULL) {
        conn->in = ngx_alloc(NGX_RATELIMIT_REDIS_IN, ngx_cycle->log);
        if (conn->in == NULL) {
            return NGX_ERROR;
        }
    }

    (void) ngx_atomic_fetch_add(&redis->stats->reconnects, 1);

    conn->state = NGX_RATELIMIT_REDIS_CONNECTING;
    conn->out_len = 0;
    conn->out_sent = 0;
    conn->in_len = 0;
    conn->head = 0;
    conn->count = 0;
    conn->pushed = 0;
    conn->loaded = 0;
    conn->replied_at = ngx_current_msec;
    conn->scripts = 0;   /* FCALL first: the server may have been upgraded */

    db.data = dbs;
    db.len = ngx_sprintf(dbs, "%ui", redis->db) - dbs;

    /* AUTH [user] password: an ACL user, or the default user */
    auth[0] = redis->user;
    auth[1] = redis->password;
    first = redis->user.len ? 0 : 1;

    if ((redis->password.len
         && ngx_ratelimit_redis_own_command(conn, "AUTH", &auth[first],
                                            2 - first)
            != NGX_OK)
        || (redis->db
            && ngx_ratelimit_redis_own_command(conn, "SELECT", &db, 1)
               != NGX_OK))
    {
        ngx_ratelimit_redis_fail(conn, "out of memory", 0);
        return NGX_ERROR;
    }

    if (conn->node->host.len) {
        return ngx_ratelimit_redis_connect_named(conn);
    }

    return ngx_ratelimit_redis_open(conn);
}


/* The socket connected (or connecting) to one of its server's addresses. */

static ngx_int_t
ngx_ratelimit_redis_open(ngx_ratelimit_redis_conn_t *conn)
{
    ngx_int_t               rc;
    ngx_addr_t             *addr;
    ngx_connection_t       *c;
    ngx_peer_connection_t  *pc;
    ngx_ratelimit_redis_t  *redis = conn->redis;

    /* a name with several addresses: the connections spread over them */
    addr = &conn->node->addrs[(conn - conn->node->conns)
                              % conn->node->naddrs];

    pc = &conn->peer;
    ngx_memzero(pc, sizeof(ngx_peer_connection_t));
    pc->sockaddr = addr->sockaddr;
    pc->socklen = addr->socklen;
    pc->name = &conn->node->name;
    pc->get = ngx_event_get_peer;
    pc->log_error = NGX_ERROR_ERR;

    /* what nginx and OpenSSL say of a connection's failure (connect(),
       recv(), a handshake) is in the module's own line, folded while it
       repeats (ngx_ratelimit_redis_fail_log), not at each of the
       reconnections of a server that is down */
    if (redis->conn_log.file == NULL) {
        redis->conn_log = *ngx_cycle->log;
        redis->conn_log.log_level = NGX_LOG_ALERT;
    }

    pc->log = &redis->conn_log;

    rc = ngx_event_connect_peer(pc);

    if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED) {
        ngx_ratelimit_redis_fail(conn, rc == NGX_DECLINED
                                  ? ngx_ratelimit_redis_errno(
                                        "connect() failed", ngx_socket_errno)
                                  : "cannot connect", 0);
        return NGX_ERROR;
    }

    c = pc->connection;
    c->data = conn;

    c->read->handler = ngx_ratelimit_redis_read_handler;
    c->write->handler = ngx_ratelimit_redis_write_handler;
    c->read->log = c->log;
    c->write->log = c->log;

    conn->state = NGX_RATELIMIT_REDIS_CONNECTING;

    if (rc == NGX_AGAIN || redis->ssl) {
        c->write->cancelable = 1;
        ngx_add_timer(c->write, redis->timeout);

        if (rc != NGX_AGAIN) {
            /* connected at once: the TLS handshake starts from an event */
            ngx_post_event(c->write, &ngx_posted_events);
        }

        return NGX_OK;
    }

    conn->state = NGX_RATELIMIT_REDIS_READY;

    if (conn->out_len) {
        /* what was queued while its host name resolved */
        ngx_post_event(c->write, &ngx_posted_events);
    }

    return NGX_OK;
}


/*
 * A connection to a server named by host name: it waits for the name's
 * resolution only if the name has no address yet; else it is opened to the
 * last addresses meanwhile, and the answer serves the next connection (a
 * resolver that is slow or away delays no connection, as nginx's upstreams
 * with resolve).
 */

static ngx_int_t
ngx_ratelimit_redis_connect_named(ngx_ratelimit_redis_conn_t *conn)
{
    ngx_int_t    rc;
    const char  *why;

    conn->state = NGX_RATELIMIT_REDIS_RESOLVING;

    rc = ngx_ratelimit_redis_resolve(conn->node,
                                     ngx_ratelimit_redis_resolved,
                                     &why);

    if (conn->state != NGX_RATELIMIT_REDIS_RESOLVING) {
        /* answered from the resolver's cache: opened, or failed */
        return conn->state == NGX_RATELIMIT_REDIS_DOWN ? NGX_ERROR
                                                            : NGX_OK;
    }

    if (conn->node->naddrs) {
        return ngx_ratelimit_redis_open(conn);
    }

    if (rc != NGX_OK) {
        ngx_ratelimit_redis_fail(conn, why, 0);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* A server's host name resolved, or not (why): its connections waiting go
   on, to its addresses if it has any. */

static void
ngx_ratelimit_redis_resolved(ngx_ratelimit_redis_node_t *node,
    const char *why)
{
    ngx_uint_t                   i;
    ngx_ratelimit_redis_conn_t  *conn;

    for (i = 0; i < node->conns[0].redis->pool; i++) {
        conn = &node->conns[i];

        if (conn->state != NGX_RATELIMIT_REDIS_RESOLVING) {
            continue;
        }

        if (node->naddrs == 0) {
            ngx_ratelimit_redis_fail(conn, why, 0);

        } else {
            (void) ngx_ratelimit_redis_open(conn);
        }
    }
}


#if (NGX_SSL)

/* The TLS handshake is over: failed (why), or the connection is ready. */

static void
ngx_ratelimit_redis_tls_done(ngx_ratelimit_redis_conn_t *conn,
    const char *why)
{
    if (why != NULL) {
        ngx_ratelimit_redis_fail(conn, why, 0);
        return;
    }

    ngx_ratelimit_redis_ready(conn);
}


/* TLS established: the commands queued meanwhile go. */

static void
ngx_ratelimit_redis_ready(ngx_ratelimit_redis_conn_t *conn)
{
    ngx_connection_t  *c = conn->peer.connection;

    c->read->handler = ngx_ratelimit_redis_read_handler;
    c->write->handler = ngx_ratelimit_redis_write_handler;
    conn->state = NGX_RATELIMIT_REDIS_READY;

    if (c->read->ready) {
        ngx_post_event(c->read, &ngx_posted_events);
    }

    ngx_ratelimit_redis_write_handler(c->write);
}

#endif


/* ---- events ----------------------------------------------------------- */

static void
ngx_ratelimit_redis_write_handler(ngx_event_t *wev)
{
    int                          err;
    ssize_t                      n;
    socklen_t                    len;
    ngx_connection_t            *c;
    ngx_ratelimit_redis_conn_t  *conn;

    c = wev->data;
    conn = c->data;

    if (wev->timedout) {
        ngx_ratelimit_redis_fail(conn, "connect timed out", 1);
        return;
    }

    if (conn->state == NGX_RATELIMIT_REDIS_CONNECTING) {
        if (!wev->ready) {
            return;
        }

        err = 0;
        len = sizeof(int);

        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, (void *) &err, &len)
            == -1)
        {
            err = ngx_socket_errno;
        }

        if (err) {
            ngx_ratelimit_redis_fail(conn,
                ngx_ratelimit_redis_errno("connect() failed", err), 0);
            return;
        }

#if (NGX_SSL)
        if (conn->redis->ssl) {
            ngx_ratelimit_redis_tls_start(conn,
                                            ngx_ratelimit_redis_tls_done);
            return;
        }
#endif

        if (wev->timer_set) {
            ngx_del_timer(wev);
        }

        conn->state = NGX_RATELIMIT_REDIS_READY;
    }

    if (conn->nbatch > 0
        && ngx_ratelimit_redis_batch_write(conn) != NGX_OK)
    {
        ngx_ratelimit_redis_fail(conn, "no memory for a batch", 0);
        return;
    }

    while (conn->out_sent < conn->out_len) {
        n = c->send(c, conn->out + conn->out_sent,
                    conn->out_len - conn->out_sent);

        if (n == NGX_AGAIN) {
            break;
        }

        if (n == NGX_ERROR) {
            ngx_ratelimit_redis_lost(conn,
                ngx_ratelimit_redis_errno("send() failed",
                                          ngx_socket_errno));
            return;
        }

        conn->out_sent += n;
    }

    if (ngx_handle_write_event(wev, 0) != NGX_OK) {
        ngx_ratelimit_redis_fail(conn, "event error", 0);
    }
}


static void
ngx_ratelimit_redis_read_handler(ngx_event_t *rev)
{
    long                         used;
    size_t                       off;
    ssize_t                      n;
    ngx_str_t                    raw;
    rl_resp_t                    reply;
    ngx_connection_t            *c;
    ngx_ratelimit_redis_conn_t  *conn;

    c = rev->data;
    conn = c->data;

    for ( ;; ) {
        n = c->recv(c, conn->in + conn->in_len,
                    NGX_RATELIMIT_REDIS_IN - conn->in_len);

        if (n == NGX_AGAIN) {
            break;
        }

        if (n == 0 || n == NGX_ERROR) {
            ngx_ratelimit_redis_lost(conn, n == 0
                ? "connection closed"
                : ngx_ratelimit_redis_errno("recv() failed",
                                            ngx_socket_errno));
            return;
        }

        conn->in_len += n;
        off = 0;

        for ( ;; ) {
            used = rl_resp_parse((char *) conn->in + off, conn->in_len - off,
                                 &reply);
            if (used <= 0) {
                break;
            }

            raw.data = conn->in + off;
            raw.len = used;
            off += used;

            conn->replied = 1;
            conn->replied_at = ngx_current_msec;
            conn->node->tls_error[0] = '\0';   /* TLS works: log the next */

            if (conn->failures) {
                ngx_ratelimit_redis_answering(conn);
            }

            if (conn->count == 0) {
                ngx_ratelimit_redis_fail(conn, "unexpected reply", 0);
                return;
            }

            conn->redis->reply(conn, &reply, &raw);

            if (conn->state == NGX_RATELIMIT_REDIS_DOWN) {
                return;
            }
        }

        if (used < 0) {
            ngx_ratelimit_redis_refuse(conn, used, conn->in + off,
                                       conn->in_len - off);
            return;
        }

        /* what is left is less than RL_RESP_REPLY_MAX: there is room */

        if (off) {
            ngx_memmove(conn->in, conn->in + off, conn->in_len - off);
            conn->in_len -= off;
        }
    }

    if (ngx_handle_read_event(rev, 0) != NGX_OK) {
        ngx_ratelimit_redis_fail(conn, "event error", 0);
    }
}


/*
 * Bytes that are not RESP, or a reply longer than RL_RESP_REPLY_MAX: the
 * connection is dropped, and the line says so with the bytes escaped and
 * cut (whatever answers on Redis's port chose them).
 */

static void
ngx_ratelimit_redis_refuse(ngx_ratelimit_redis_conn_t *conn,
    long used, u_char *data, size_t len)
{
    u_char  *p;
    u_char   why[64 + RL_ESCAPED_MAX(NGX_RATELIMIT_REDIS_SHOWN)];

    if (used == RL_RESP_TOO_LONG) {
        p = ngx_sprintf(why, "reply longer than %d bytes: \"",
                        RL_RESP_REPLY_MAX);

    } else {
        p = ngx_cpymem(why, "reply is not RESP: \"",
                       sizeof("reply is not RESP: \"") - 1);
    }

    p += rl_escape((char *) p, data, len, NGX_RATELIMIT_REDIS_SHOWN);
    *p++ = '"';
    *p = '\0';

    ngx_ratelimit_redis_fail(conn, (char *) why, 0);
}


/*
 * A connection reset or closed.  Over TLS, before any reply, or with an
 * alert from the server, it is taken as TLS's failure (TLS 1.3 tells a
 * client that its certificate is missing or refused only after the
 * handshake): said once while it repeats.
 */

void
ngx_ratelimit_redis_lost(ngx_ratelimit_redis_conn_t *conn,
    const char *why)
{
#if (NGX_SSL)
    if (conn->peer.connection->ssl
        && (!conn->replied || conn->tls_alert > 0))   /* not close_notify */
    {
        ngx_ratelimit_redis_tls_failed(conn, conn->replied
            ? why : "TLS: the connection was lost before the first reply", 0);
        return;
    }
#endif

    ngx_ratelimit_redis_fail(conn, why, 0);
}


/*
 * The line of a connection lost: why, and what becomes of the calls it
 * leaves unanswered, by kind (a request's decision, a call of the key API
 * or a charge, an exchange of redis_sync: ngx_ratelimit_redis_kind).
 */

static ngx_uint_t
ngx_ratelimit_redis_kind(ngx_ratelimit_redis_wait_t *w)
{
    if (w->command != NULL) {
        return 2;   /* a call of another kind: redis_sync's exchange */
    }

    return w->call == RL_REDIS_DECIDE && w->owner != NULL ? 0 : 1;
}


/*
 * A connection's failure, said at error.  A server that is down fails each
 * connection once a second (its back-off): while a connection fails the
 * same way, a failure is counted, not said, but for a line a minute with
 * the count; its first reply read after failures says how many (notice).
 */

static void
ngx_ratelimit_redis_fail_log(ngx_ratelimit_redis_conn_t *conn,
    const char *why)
{
    u_char                      *p, *last, line[256];
    ngx_uint_t                   i, k, count[3];
    ngx_ratelimit_redis_wait_t  *w;

    if (conn->failures++ != 0
        && ngx_strncmp(conn->failing, why, sizeof(conn->failing) - 1) == 0
        && ngx_current_msec - conn->failing_said
           < NGX_RATELIMIT_REDIS_FAIL_SAY)
    {
        conn->folded++;
        return;
    }

    static const char  *fate[3] = {
        "requests decided by on_redis_error",
        "key API calls or charges failed",
        "exchange calls kept for the next exchange"
    };

    ngx_memzero(count, sizeof(count));

    for (i = 0; i < conn->count; i++) {
        w = conn->ring[(conn->head + i) % NGX_RATELIMIT_REDIS_RING];

        if (w != NULL && !ngx_ratelimit_redis_is_own(w)) {
            count[ngx_ratelimit_redis_kind(w)]++;
        }
    }

    for (i = 0; i < conn->nbatch; i++) {
        if (conn->batch[i] != NULL) {
            count[0]++;
        }
    }

    p = line;
    last = line + sizeof(line);

    for (k = 0; k < 3; k++) {
        if (count[k]) {
            p = ngx_slprintf(p, last, ", %ui %s", count[k], fate[k]);
        }
    }

    if (conn->folded) {
        p = ngx_slprintf(p, last, " (after %ui more failures not logged "
                         "one by one)", conn->folded);
    }

    ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                  "ratelimit: redis %V: %s%*s, reconnecting in %M ms",
                  &conn->node->name, why, p - line, line, conn->backoff);

    (void) ngx_cpystrn(conn->failing, (u_char *) why, sizeof(conn->failing));
    conn->failing_said = ngx_current_msec;
    conn->folded = 0;
}


/* A connection's first reply read after failures: their end, said. */

static void
ngx_ratelimit_redis_answering(ngx_ratelimit_redis_conn_t *conn)
{
    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "ratelimit: redis %V: answering again, after %ui failures "
                  "of a connection", &conn->node->name, conn->failures);

    conn->failures = 0;
    conn->folded = 0;
    conn->failing[0] = '\0';
}


/*
 * Why a socket call failed, as nginx says it: "what (errno: text)", in a
 * buffer that lasts until the next call (ngx_ratelimit_redis_fail
 * copies what it keeps).
 */

static const char *
ngx_ratelimit_redis_errno(const char *what, ngx_err_t err)
{
    static u_char  why[NGX_RATELIMIT_REDIS_FAIL_WHY];

    *ngx_slprintf(why, why + sizeof(why) - 1, "%s (%d: %s)", what, err,
                  strerror(err)) = '\0';

    return (const char *) why;
}


/*
 * Closes a connection, to be opened again after the backoff, and hands
 * every request queued on it to its handler with no reply.
 */

void
ngx_ratelimit_redis_fail(ngx_ratelimit_redis_conn_t *conn,
    const char *why, ngx_uint_t timeout)
{
    ngx_uint_t                   i, n;
    ngx_ratelimit_redis_t       *redis = conn->redis;
    ngx_ratelimit_redis_wait_t  *w, *failed[NGX_RATELIMIT_REDIS_RING
                                          + RL_REDIS_BATCH_MAX];

    if (!conn->quiet) {
        ngx_ratelimit_redis_fail_log(conn, why);
    }

    conn->quiet = 0;
    conn->replied = 0;
    conn->tls_alert = -1;

    if (conn->peer.connection) {
        ngx_ratelimit_redis_drop(conn->peer.connection);
        conn->peer.connection = NULL;
    }

    conn->state = NGX_RATELIMIT_REDIS_DOWN;
    conn->retry_at = ngx_current_msec + conn->backoff;
    conn->backoff = ngx_min(conn->backoff * 2,
                            NGX_RATELIMIT_REDIS_BACKOFF_MAX);

    n = 0;

    for (i = 0; i < conn->count; i++) {
        w = conn->ring[(conn->head + i) % NGX_RATELIMIT_REDIS_RING];

        if (w != NULL && !ngx_ratelimit_redis_is_own(w)) {
            w->conn = NULL;
            failed[n++] = w;
        }
    }

    for (i = 0; i < conn->nbatch; i++) {
        w = conn->batch[i];

        if (w != NULL) {
            w->conn = NULL;
            w->batched = 0;
            failed[n++] = w;
        }
    }

    conn->nbatch = 0;
    conn->batch_bytes = 0;
    conn->head = 0;
    conn->count = 0;
    conn->out_len = 0;
    conn->out_sent = 0;
    conn->in_len = 0;

    for (i = 0; i < n; i++) {
        w = failed[i];

        if (w->timer.timer_set) {
            ngx_del_timer(&w->timer);
        }

        (void) ngx_atomic_fetch_add(timeout ? &redis->stats->timeouts
                                            : &redis->stats->errors, 1);

        w->handler(w, NULL);
    }
}
