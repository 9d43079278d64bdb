/*
 * ngx-ratelimit: requests decided in Redis.
 *
 * A request's rules go to Redis in one script call (the core writes it,
 * rl_redis_command), on a connection of the server that holds its key's
 * slot: FCALL of the script's library, which Redis keeps set up between
 * calls, or where a connection finds no FCALL (Redis 6, an ACL user not
 * allowed it or FUNCTION LOAD) the script, EVALSHA.  The core judges its
 * reply (rl_redis_answer: the script's answer in range, the script not
 * loaded, no FCALL, a redirection, or a failure), and this file acts on
 * that: the request gets its decisions, the library is loaded (FUNCTION
 * LOAD, once a connection) or the script sent with EVAL, the call sent
 * again as a script, Redis Cluster's MOVED and ASK are followed, or the
 * request is decided by
 * on_redis_error, with a line in the log (folded); a replica's READONLY
 * (its primary failed over) also closes the connection, so that the next
 * one reaches the primary (redis= resolved again).  A request waits on its
 * own timer (redis_timeout); when it fires, the connection is taken as
 * stuck and closed, and every request queued on it is decided by
 * on_redis_error.  The key API's calls (a peek, a reset) go the same way,
 * and so do the charges of a request that ended, with no request waiting
 * (ngx_ratelimit_redis_settle.c).
 */

#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ratelimit_redis.h"
#include "ngx_ratelimit_redis_conn.h"
#include "ngx_ratelimit_redis_node.h"


static ngx_int_t ngx_ratelimit_redis_append(
    ngx_ratelimit_redis_conn_t *conn, ngx_ratelimit_redis_wait_t *w,
    ngx_uint_t eval);
static ngx_int_t ngx_ratelimit_redis_unloaded(
    ngx_ratelimit_redis_conn_t *conn, ngx_ratelimit_redis_wait_t *w,
    const char **why);
static void ngx_ratelimit_redis_as_scripts(
    ngx_ratelimit_redis_conn_t *conn, const char *why);
static void ngx_ratelimit_redis_log_reply(
    ngx_ratelimit_redis_conn_t *conn, ngx_uint_t level, const char *why,
    rl_resp_t *reply, ngx_str_t *raw);
static void ngx_ratelimit_redis_own_reply(
    ngx_ratelimit_redis_conn_t *conn, ngx_ratelimit_redis_wait_t *w,
    rl_resp_t *reply, ngx_str_t *raw);
static void ngx_ratelimit_redis_reply(void *c, rl_resp_t *reply,
    ngx_str_t *raw);
static void ngx_ratelimit_redis_answered(ngx_ratelimit_redis_conn_t *conn,
    ngx_ratelimit_redis_wait_t *w, rl_resp_t *reply, ngx_str_t *raw);
static ngx_int_t ngx_ratelimit_redis_redirect(
    ngx_ratelimit_redis_wait_t *w, rl_redis_answer_t *a);
static void ngx_ratelimit_redis_log_folded(ngx_event_t *ev);
static void ngx_ratelimit_redis_timeout(ngx_event_t *ev);
static void ngx_ratelimit_redis_latency(ngx_ratelimit_redis_t *redis,
    ngx_ratelimit_redis_wait_t *w);
static ngx_msec_t ngx_ratelimit_redis_now_us(void);


const ngx_uint_t  ngx_ratelimit_redis_bucket_us[] = {
    250, 500, 1000, 2500, 5000, 10000, 25000, 50000
};


ngx_int_t
ngx_ratelimit_redis_send(ngx_ratelimit_redis_t *redis,
    ngx_ratelimit_redis_wait_t *w)
{
    ngx_uint_t                   node;
    ngx_ratelimit_redis_conn_t  *conn;

    w->redis = redis;

    if (redis->nnodes == 0) {
        redis->reply = ngx_ratelimit_redis_reply;

        /* this worker's servers, for its lifetime: the first is redis= */
        if (redis->nodes == NULL) {
            redis->nodes = ngx_calloc(NGX_RATELIMIT_REDIS_NODES
                                      * sizeof(void *), ngx_cycle->log);
        }

        if (redis->cluster && redis->slots == NULL) {
            redis->slots = ngx_calloc(NGX_RATELIMIT_REDIS_SLOTS,
                                      ngx_cycle->log);
        }

        if (redis->nodes == NULL || (redis->cluster && redis->slots == NULL)
            || ngx_ratelimit_redis_node(redis, &redis->server) == NULL)
        {
            return NGX_DECLINED;
        }
    }

    /* a cluster's slot: every rule's key has the first key's hash tag
       (the location's rules share their key, see the configuration) */

    node = redis->cluster
           ? redis->slots[rl_redis_key_slot(w->rq->checks[0].key,
                                            w->rq->checks[0].key_len)]
           : 0;

    conn = ngx_ratelimit_redis_pick(redis->nodes[node]);

    if (conn == NULL) {
        return NGX_DECLINED;   /* backing off, or overloaded */
    }

    if (ngx_ratelimit_redis_append(conn, w, 0) != NGX_OK) {
        return NGX_DECLINED;
    }

    w->start = ngx_ratelimit_redis_now_us();
    w->timer.handler = ngx_ratelimit_redis_timeout;
    w->timer.data = w;
    w->timer.log = w->log ? w->log : ngx_cycle->log;

    /* not cancelable: a graceful exit waits for the reply */
    ngx_add_timer(&w->timer, w->timeout ? w->timeout : redis->timeout);

    /* (a call of another kind, redis_sync's exchange, has no request) */
    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, w->timer.log, 0,
                   "ratelimit redis: call %ui for %uz rule(s) sent to %V, "
                   "%ui waiting on its connection",
                   w->call, w->rq ? w->rq->n : 0, &conn->node->name,
                   conn->count);

    return NGX_OK;
}


void
ngx_ratelimit_redis_cancel(ngx_ratelimit_redis_wait_t *w)
{
    ngx_ratelimit_redis_conn_t  *conn = w->conn;

    if (conn != NULL && w->batched) {
        conn->batch[w->slot] = NULL;  /* left out of its batch */

    } else if (conn != NULL && conn->ring[w->slot] == w) {
        conn->ring[w->slot] = NULL;   /* its reply is read and dropped */
    }

    w->conn = NULL;
    w->batched = 0;

    if (w->timer.timer_set) {
        ngx_del_timer(&w->timer);
    }
}


static ngx_int_t
ngx_ratelimit_redis_append(ngx_ratelimit_redis_conn_t *conn,
    ngx_ratelimit_redis_wait_t *w, ngx_uint_t eval)
{
    size_t                  slen;
    const char             *script;
    ngx_ratelimit_redis_t  *redis = conn->redis;

    if (w->command != NULL) {
        w->via = eval ? RL_REDIS_EVAL : RL_REDIS_EVALSHA;
        return w->command(conn, w, eval);
    }

    /* a decision goes in the connection's batch; not with Redis Cluster,
       whose requests' keys lie in other slots */

    if (!eval && w->call == RL_REDIS_DECIDE && !redis->cluster) {
        if (ngx_ratelimit_redis_batch(conn, w) != NGX_OK) {
            ngx_ratelimit_redis_fail(conn, "no memory for a batch", 0);
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    w->via = eval ? RL_REDIS_EVAL
                  : conn->scripts ? RL_REDIS_EVALSHA : RL_REDIS_FCALL;

    if (eval) {
        script = rl_redis_script(&slen);

    } else {
        script = (const char *) redis->sha;
        slen = sizeof(redis->sha);
    }

    if (ngx_ratelimit_redis_reserve(conn,
            rl_redis_command_size(w->rq->n, redis->prefix.len, slen))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    conn->out_len += rl_redis_command((char *) conn->out + conn->out_len,
                                      script, slen, (int) w->via, (int) w->call,
                                      (const char *) redis->prefix.data,
                                      redis->prefix.len, (int) redis->cluster,
                                      w->rq, -1);

    ngx_ratelimit_redis_push(conn, w);

    return NGX_OK;
}


/* The reply to a connection's own command: AUTH, SELECT, ASKING (OWN),
   which only "+OK" answers; FUNCTION LOAD (LOAD). */

static void
ngx_ratelimit_redis_own_reply(ngx_ratelimit_redis_conn_t *conn,
    ngx_ratelimit_redis_wait_t *w, rl_resp_t *reply, ngx_str_t *raw)
{
    rl_redis_answer_t  a;

    if (w == NGX_RATELIMIT_REDIS_LOAD) {
        if (rl_redis_load_answer(reply, &a) != RL_REDIS_DECIDED) {
            ngx_ratelimit_redis_log_reply(conn, NGX_LOG_WARN,
                "FUNCTION LOAD refused", reply, raw);
            ngx_ratelimit_redis_as_scripts(conn, a.why);
        }

        return;
    }

    if (rl_redis_answer(NULL, 0, reply, &a) != RL_REDIS_DECIDED) {
        ngx_ratelimit_redis_log_reply(conn, NGX_LOG_ERR,
            "refused AUTH, SELECT or ASKING", reply, raw);
        (void) ngx_atomic_fetch_add(&conn->redis->stats->errors, 1);
        ngx_ratelimit_redis_fail(conn, "refused", 0);
    }
}


static void
ngx_ratelimit_redis_reply(void *c, rl_resp_t *reply, ngx_str_t *raw)
{
    long                         off, used;
    ngx_str_t                    item_raw;
    rl_resp_t                    item;
    ngx_uint_t                   i, n;
    ngx_ratelimit_redis_conn_t  *conn = c;
    ngx_ratelimit_redis_wait_t  *w, *batch[RL_REDIS_BATCH_MAX];

    n = conn->answers[conn->head];
    batch[0] = conn->ring[conn->head];

    for (i = 0; i < n; i++) {
        batch[i] = conn->ring[conn->head];
        conn->ring[conn->head] = NULL;
        conn->head = (conn->head + 1) % NGX_RATELIMIT_REDIS_RING;
        conn->count--;
    }

    w = batch[0];

    if (ngx_ratelimit_redis_is_own(w)) {
        ngx_ratelimit_redis_own_reply(conn, w, reply, raw);
        return;
    }

    conn->backoff = NGX_RATELIMIT_REDIS_BACKOFF;   /* it answers */

    if (n == 1) {
        ngx_ratelimit_redis_answered(conn, w, reply, raw);
        return;
    }

    /* a batch: each answer to its request, or an error to each */

    off = rl_resp_batch((char *) raw->data, raw->len, n);

    for (i = 0; i < n; i++) {
        used = off < 0 ? -1 : rl_resp_parse((char *) raw->data + off,
                                            raw->len - (size_t) off, &item);

        if (used <= 0) {
            off = -1;
            ngx_ratelimit_redis_answered(conn, batch[i], reply, raw);
            continue;
        }

        item_raw.data = raw->data + off;
        item_raw.len = used;
        off += used;

        ngx_ratelimit_redis_answered(conn, batch[i], &item, &item_raw);
    }
}


/* A reply to one call: its request decided, or the call sent again
   (NOSCRIPT, no FCALL, a redirection), or failed. */

static void
ngx_ratelimit_redis_answered(ngx_ratelimit_redis_conn_t *conn,
    ngx_ratelimit_redis_wait_t *w, rl_resp_t *reply, ngx_str_t *raw)
{
    ngx_int_t               kind;
    const char             *why;
    rl_redis_answer_t       a;
    ngx_ratelimit_redis_t  *redis = conn->redis;

    if (w == NULL) {
        return;   /* its request timed out or went away */
    }

    w->conn = NULL;

    kind = w->answer != NULL
           ? w->answer(w, reply, &a)
           : rl_redis_answer(w->rq, (int) w->call, reply, &a);
    why = a.why;

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, w->timer.log, 0,
                   "ratelimit redis: reply from %V to call %ui: %s, "
                   "after %M us",
                   &conn->node->name, w->call,
                   kind == RL_REDIS_DECIDED ? "decided"
                   : kind == RL_REDIS_REDIRECT ? "redirected"
                   : kind == RL_REDIS_NOSCRIPT ? "no script"
                   : kind == RL_REDIS_NO_FUNCTIONS ? "no FCALL" : "refused",
                   ngx_ratelimit_redis_now_us() - w->start);

    switch (kind) {

    case RL_REDIS_REDIRECT:
        if (redis->cluster
            && ngx_ratelimit_redis_redirect(w, &a) == NGX_OK)
        {
            return;
        }

        why = redis->cluster ? "a redirection not followed (the fifth, or "
                               "to a server not known and not an address)"
                             : "a redirection, but redis_cluster is off";
        break;

    case RL_REDIS_NOSCRIPT:

        /* not loaded (first use, a restarted Redis, FUNCTION FLUSH,
           SCRIPT FLUSH) */

        if (ngx_ratelimit_redis_unloaded(conn, w, &why) == NGX_OK) {
            return;
        }

        break;

    case RL_REDIS_NO_FUNCTIONS:

        /* Redis 6, or a user not allowed FCALL: the script instead */

        ngx_ratelimit_redis_as_scripts(conn, a.why);

        if (w->via == RL_REDIS_FCALL
            && ngx_ratelimit_redis_append(conn, w, 0) == NGX_OK)
        {
            return;
        }

        why = "FCALL refused, and the call not sent again as a script";
        break;

    default:
        break;
    }

    if (w->timer.timer_set) {
        ngx_del_timer(&w->timer);
    }

    ngx_ratelimit_redis_latency(redis, w);

    if (kind != RL_REDIS_DECIDED) {
        ngx_ratelimit_redis_log_reply(conn,
            reply->type == RL_RESP_ERROR ? NGX_LOG_ERR : NGX_LOG_WARN, why,
            reply, raw);
        (void) ngx_atomic_fetch_add(&redis->stats->errors, 1);
    }

    w->handler(w, kind == RL_REDIS_DECIDED ? &a : NULL);

    if (kind == RL_REDIS_READONLY
        && conn->state != NGX_RATELIMIT_REDIS_DOWN)
    {
        /* a replica now: the next connection finds the primary (a host
           name resolved again) */
        ngx_ratelimit_redis_fail(conn, "a replica (READONLY): the "
                                 "primary failed over", 0);
    }
}


/*
 * A call whose script Redis does not have.  Called as a function (FCALL):
 * the library is sent on the connection (FUNCTION LOAD) and the call sent
 * again after it; a call sent before a load on its connection is only sent
 * again (the load comes before it now), as a script (EVALSHA) if the
 * connection found it cannot load the library; a call not found after its
 * own load fails.  Called as a script (EVALSHA): sent again with EVAL,
 * once.
 */

static ngx_int_t
ngx_ratelimit_redis_unloaded(ngx_ratelimit_redis_conn_t *conn,
    ngx_ratelimit_redis_wait_t *w, const char **why)
{
    if (w->via == RL_REDIS_FCALL) {

        if (!conn->scripts && conn->loaded <= w->seq) {
            if (w->loaded) {
                *why = "the function not found, after the library was sent";
                return NGX_DECLINED;
            }

            if (ngx_ratelimit_redis_load(conn) != NGX_OK) {
                *why = "the function not found, and no room to send the "
                       "library";
                return NGX_ERROR;
            }

            w->loaded = 1;
        }

        /* FCALL again, or EVALSHA where the library could not be loaded */

        if (ngx_ratelimit_redis_append(conn, w, 0) != NGX_OK) {
            *why = "the function not found, and no room to call it again";
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    if (w->retried) {
        *why = "NOSCRIPT, after the script was sent with EVAL";
        return NGX_DECLINED;
    }

    w->retried = 1;

    if (ngx_ratelimit_redis_append(conn, w, 1) != NGX_OK) {
        *why = "NOSCRIPT, and no room to send the script with EVAL";
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* A connection that cannot call the library (no FCALL, or the library not
   loaded) calls the script from now on, until it is opened again. */

static void
ngx_ratelimit_redis_as_scripts(ngx_ratelimit_redis_conn_t *conn,
    const char *why)
{
    if (conn->scripts) {
        return;
    }

    conn->scripts = 1;

    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "ratelimit: redis %V: %s: the script called with EVALSHA "
                  "on this connection, set up at each call (Redis 7 and "
                  "FCALL and FUNCTION LOAD allowed: once)",
                  &conn->node->name, why);
}


/*
 * A reply refused: one line a second for a zone in a worker, saying why
 * and showing the reply (an error's text, else its bytes) escaped and cut,
 * since whatever answers on Redis's port chose it; the rest are counted,
 * and written as a count once a second.  Not in a request's log context,
 * whose request line may hold a key.
 */

static void
ngx_ratelimit_redis_log_reply(ngx_ratelimit_redis_conn_t *conn,
    ngx_uint_t level, const char *why, rl_resp_t *reply, ngx_str_t *raw)
{
    ngx_ratelimit_redis_t  *redis = conn->redis;
    size_t                  n;
    u_char                       shown[RL_ESCAPED_MAX(
                                           NGX_RATELIMIT_REDIS_SHOWN)];

    if (!ngx_ratelimit_redis_log_now(redis, &redis->refused)) {
        return;
    }

    if (reply->type == RL_RESP_ERROR) {
        n = rl_escape((char *) shown, reply->str, reply->str_len,
                      NGX_RATELIMIT_REDIS_SHOWN);

    } else {
        n = rl_escape((char *) shown, raw->data, raw->len,
                      NGX_RATELIMIT_REDIS_SHOWN);
    }

    ngx_log_error(level, ngx_cycle->log, 0,
                  "ratelimit: redis %V: %s: \"%*s\"", &conn->node->name,
                  why, n, shown);
}


/*
 * The server's id, one for all its workers: read from the zone, or made by
 * the first worker that needs it (compare and set: whichever worker wins,
 * they all read the same one).
 */

uint64_t
ngx_ratelimit_redis_server_id(ngx_ratelimit_redis_t *redis)
{
    ngx_atomic_uint_t  id;

    id = redis->stats->server;

    if (id == 0) {
        id = (ngx_atomic_uint_t) rl_redis_server_id();

        if (id == 0) {
            id = 1;
        }

        (void) ngx_atomic_cmp_set(&redis->stats->server, 0, id);
        id = redis->stats->server;
    }

    return (uint64_t) id;
}


ngx_uint_t
ngx_ratelimit_redis_log_now(ngx_ratelimit_redis_t *redis,
    ngx_ratelimit_redis_fold_t *fold)
{
    ngx_msec_t  now;

    now = ngx_current_msec;

    if (fold->second != 0 && (ngx_msec_int_t) (now - fold->second) < 1000) {
        fold->folded++;

        if (!fold->event.timer_set) {
            fold->event.handler = ngx_ratelimit_redis_log_folded;
            fold->event.data = redis;
            fold->event.log = ngx_cycle->log;
            fold->event.cancelable = 1;
            ngx_add_timer(&fold->event, 1000);
        }

        return 0;
    }

    fold->second = now;

    return 1;
}


static void
ngx_ratelimit_redis_log_folded(ngx_event_t *ev)
{
    const char                  *what;
    ngx_ratelimit_redis_t       *redis = ev->data;
    ngx_ratelimit_redis_fold_t  *fold;

    if (ev == &redis->refused.event) {
        fold = &redis->refused;
        what = "replies refused";

    } else if (ev == &redis->lease_lost.event) {
        fold = &redis->lease_lost;
        what = "requests' leases expired before their end";

    } else {
        fold = &redis->undelivered;
        what = "charges not delivered";
    }

    if (fold->folded == 0) {
        return;
    }

    ngx_log_error(NGX_LOG_WARN, ev->log, 0,
                  "ratelimit: redis %V: %ui more %s in zone \"%V\" "
                  "(repeats not logged one by one)", &redis->server,
                  fold->folded, what, &redis->zone);

    fold->folded = 0;
}


/*
 * Redis Cluster, a redirection the core read: MOVED (the slot is served
 * there from now on: remembered, and the call sent there) or ASK (this
 * once: ASKING, then the call).  At most 4 redirections a request.  The
 * server is named as in redis=, "[IPv6]:port" for an IPv6 address.
 */

static ngx_int_t
ngx_ratelimit_redis_redirect(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *a)
{
    u_char                            buf[RL_REDIS_HOST_MAX
                                          + sizeof("[]:65535")];
    ngx_str_t                    name;
    ngx_uint_t                   i, v6;
    ngx_ratelimit_redis_t       *redis = w->redis;
    ngx_ratelimit_redis_conn_t  *conn;
    ngx_ratelimit_redis_node_t  *node;

    if (w->redirects == 4) {
        return NGX_DECLINED;
    }

    v6 = ngx_strlchr((u_char *) a->host, (u_char *) a->host + a->host_len,
                     ':')
         != NULL;

    name.data = buf;
    name.len = ngx_sprintf(buf, v6 ? "[%*s]:%ui" : "%*s:%ui", a->host_len,
                           a->host, (ngx_uint_t) a->port)
               - buf;

    node = ngx_ratelimit_redis_node(redis, &name);
    if (node == NULL) {
        return NGX_DECLINED;
    }

    if (!a->ask) {
        for (i = 0; redis->nodes[i] != node; i++) { /* void */ }
        redis->slots[a->slot] = (u_char) i;
    }

    conn = ngx_ratelimit_redis_pick(node);

    if (conn == NULL
        || (a->ask
            && ngx_ratelimit_redis_own_command(conn, "ASKING", NULL, 0)
               != NGX_OK)
        || ngx_ratelimit_redis_append(conn, w, w->retried) != NGX_OK)
    {
        return NGX_DECLINED;
    }

    w->redirects++;

    return NGX_OK;
}


/*
 * A call waited redis_timeout (or its own time): the connection is taken
 * as stuck.  A call of its own time (an exchange's, which nothing waits
 * for) waits on while the calls before it on its connection are answered:
 * Redis is slow then, not stuck; it fails once the connection has been
 * silent that long.
 */

static void
ngx_ratelimit_redis_timeout(ngx_event_t *ev)
{
    ngx_msec_t                   silent;
    ngx_ratelimit_redis_conn_t  *conn;
    ngx_ratelimit_redis_wait_t  *w = ev->data;

    conn = w->conn;

    if (w->timeout && conn != NULL
        && conn->state == NGX_RATELIMIT_REDIS_READY)
    {
        silent = ngx_current_msec - conn->replied_at;

        if (silent < w->timeout) {
            ngx_add_timer(&w->timer, w->timeout - silent);
            return;
        }
    }

    w->timed_out = 1;

    (void) ngx_atomic_fetch_add(&w->redis->stats->timeouts, 1);

    ngx_ratelimit_redis_cancel(w);

    if (conn != NULL && conn->state != NGX_RATELIMIT_REDIS_DOWN) {
        ngx_ratelimit_redis_fail(conn, "timed out", 1);
    }

    w->handler(w, NULL);
}


static void
ngx_ratelimit_redis_latency(ngx_ratelimit_redis_t *redis,
    ngx_ratelimit_redis_wait_t *w)
{
    ngx_uint_t  b;
    ngx_msec_t  us;

    us = ngx_ratelimit_redis_now_us() - w->start;

    for (b = 0; b < NGX_RATELIMIT_REDIS_BUCKETS; b++) {
        if (us <= ngx_ratelimit_redis_bucket_us[b]) {
            break;
        }
    }

    (void) ngx_atomic_fetch_add(&redis->stats->latency[b], 1);
    (void) ngx_atomic_fetch_add(&redis->stats->latency_us, us);
}


/* A monotonic clock in microseconds: nginx's own clock has milliseconds. */

static ngx_msec_t
ngx_ratelimit_redis_now_us(void)
{
    struct timespec  ts;

    (void) clock_gettime(CLOCK_MONOTONIC, &ts);

    return (ngx_msec_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
