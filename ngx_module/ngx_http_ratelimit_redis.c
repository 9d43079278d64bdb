/*
 * ngx-ratelimit: requests decided in Redis.
 *
 * A request's rules go to Redis in one script call (the core writes it,
 * rl_redis_command), on a connection of the server that holds its key's
 * slot; its reply comes back to the request (rl_redis_decide, in the
 * handler).  A request waits on its own timer (redis_timeout); when it
 * fires, the connection is taken as stuck and closed, and every request
 * queued on it is decided by on_redis_error.  Redis Cluster's MOVED and
 * ASK replies are followed.
 */

#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_http_ratelimit_redis_conn.h"


static ngx_int_t ngx_http_ratelimit_redis_redirect(
    ngx_http_ratelimit_redis_wait_t *w, rl_resp_t *reply);
static void ngx_http_ratelimit_redis_timeout(ngx_event_t *ev);
static void ngx_http_ratelimit_redis_latency(ngx_http_ratelimit_redis_t *redis,
    ngx_http_ratelimit_redis_wait_t *w);
static ngx_msec_t ngx_http_ratelimit_redis_now_us(void);


const ngx_uint_t  ngx_http_ratelimit_redis_bucket_us[] = {
    250, 500, 1000, 2500, 5000, 10000, 25000, 50000
};


ngx_int_t
ngx_http_ratelimit_redis_send(ngx_http_ratelimit_redis_t *redis,
    ngx_http_ratelimit_redis_wait_t *w)
{
    ngx_uint_t                        node;
    ngx_http_ratelimit_redis_conn_t  *conn;

    w->redis = redis;

    if (redis->nnodes == 0) {
        /* this worker's servers, for its lifetime: the first is redis= */
        if (redis->nodes == NULL) {
            redis->nodes = ngx_calloc(NGX_HTTP_RATELIMIT_REDIS_NODES
                                      * sizeof(void *), ngx_cycle->log);
        }

        if (redis->cluster && redis->slots == NULL) {
            redis->slots = ngx_calloc(NGX_HTTP_RATELIMIT_REDIS_SLOTS,
                                      ngx_cycle->log);
        }

        if (redis->nodes == NULL || (redis->cluster && redis->slots == NULL)
            || ngx_http_ratelimit_redis_node(redis, &redis->server) == NULL)
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

    conn = ngx_http_ratelimit_redis_pick(redis->nodes[node]);

    if (conn == NULL) {
        return NGX_DECLINED;   /* backing off, or overloaded */
    }

    if (ngx_http_ratelimit_redis_append(conn, w, 0) != NGX_OK) {
        return NGX_DECLINED;
    }

    w->start = ngx_http_ratelimit_redis_now_us();
    w->timer.handler = ngx_http_ratelimit_redis_timeout;
    w->timer.data = w;
    w->timer.log = w->request->connection->log;
    ngx_add_timer(&w->timer, redis->timeout);   /* a graceful exit waits */

    return NGX_OK;
}


void
ngx_http_ratelimit_redis_cancel(ngx_http_ratelimit_redis_wait_t *w)
{
    ngx_http_ratelimit_redis_conn_t  *conn = w->conn;

    if (conn != NULL && conn->ring[w->slot] == w) {
        conn->ring[w->slot] = NULL;   /* its reply is read and dropped */
    }

    w->conn = NULL;

    if (w->timer.timer_set) {
        ngx_del_timer(&w->timer);
    }
}


ngx_int_t
ngx_http_ratelimit_redis_append(ngx_http_ratelimit_redis_conn_t *conn,
    ngx_http_ratelimit_redis_wait_t *w, ngx_uint_t eval)
{
    size_t                       slen;
    const char                  *script;
    ngx_http_ratelimit_redis_t  *redis = conn->redis;

    if (eval) {
        script = rl_redis_script(&slen);

    } else {
        script = (const char *) redis->sha;
        slen = sizeof(redis->sha);
    }

    if (ngx_http_ratelimit_redis_reserve(conn,
            rl_redis_command_size(w->rq->n, redis->prefix.len, slen))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    conn->out_len += rl_redis_command((char *) conn->out + conn->out_len,
                                      script, slen, eval,
                                      (const char *) redis->prefix.data,
                                      redis->prefix.len, (int) redis->cluster,
                                      w->rq, -1);

    ngx_http_ratelimit_redis_push(conn, w);

    return NGX_OK;
}


void
ngx_http_ratelimit_redis_reply(ngx_http_ratelimit_redis_conn_t *conn,
    rl_resp_t *reply)
{
    ngx_connection_t                 *c;
    ngx_http_ratelimit_redis_t       *redis = conn->redis;
    ngx_http_ratelimit_redis_wait_t  *w;

    w = conn->ring[conn->head];
    conn->ring[conn->head] = NULL;
    conn->head = (conn->head + 1) % NGX_HTTP_RATELIMIT_REDIS_RING;
    conn->count--;

    if (w == NGX_HTTP_RATELIMIT_REDIS_OWN) {
        if (reply->type == RL_RESP_ERROR) {
            ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                          "ratelimit: redis %V refused AUTH, SELECT or ASKING: "
                          "%*s", &conn->node->name, reply->str_len, reply->str);
            (void) ngx_atomic_fetch_add(&redis->stats->errors, 1);
            ngx_http_ratelimit_redis_fail(conn, "refused", 0);
        }

        return;
    }

    conn->backoff = NGX_HTTP_RATELIMIT_REDIS_BACKOFF;   /* it answers */

    if (w == NULL) {
        return;   /* its request timed out or went away */
    }

    w->conn = NULL;

    if (reply->type == RL_RESP_ERROR && redis->cluster
        && ngx_http_ratelimit_redis_redirect(w, reply) == NGX_OK)
    {
        return;
    }

    /* not loaded (first use, a restarted Redis, SCRIPT FLUSH): EVAL loads
       the script and runs it, once */

    if (reply->type == RL_RESP_ERROR && !w->retried
        && reply->str_len >= 8 && ngx_strncmp(reply->str, "NOSCRIPT", 8) == 0)
    {
        w->retried = 1;

        if (ngx_http_ratelimit_redis_append(conn, w, 1) == NGX_OK) {
            return;
        }
    }

    if (w->timer.timer_set) {
        ngx_del_timer(&w->timer);
    }

    ngx_http_ratelimit_redis_latency(redis, w);

    if (reply->type == RL_RESP_ERROR) {
        ngx_log_error(NGX_LOG_ERR, w->request->connection->log, 0,
                      "ratelimit: redis %V: %*s", &conn->node->name,
                      reply->str_len, reply->str);
        (void) ngx_atomic_fetch_add(&redis->stats->errors, 1);
        reply = NULL;
    }

    c = w->request->connection;
    w->handler(w, reply);
    ngx_http_run_posted_requests(c);
}


/*
 * Redis Cluster: "MOVED <slot> <ip>:<port>" (the slot is served there from
 * now on: remembered, and the call sent there) or "ASK <slot> <ip>:<port>"
 * (this once: ASKING, then the call).  At most 4 redirections a request.
 */

static ngx_int_t
ngx_http_ratelimit_redis_redirect(ngx_http_ratelimit_redis_wait_t *w,
    rl_resp_t *reply)
{
    u_char                           *p, *last, *sp;
    ngx_int_t                         slot;
    ngx_str_t                         name;
    ngx_uint_t                        ask, i;
    ngx_http_ratelimit_redis_t       *redis = w->redis;
    ngx_http_ratelimit_redis_conn_t  *conn;
    ngx_http_ratelimit_redis_node_t  *node;

    p = (u_char *) reply->str;
    last = p + reply->str_len;

    if (reply->str_len > 6 && ngx_strncmp(p, "MOVED ", 6) == 0) {
        ask = 0;
        p += 6;

    } else if (reply->str_len > 4 && ngx_strncmp(p, "ASK ", 4) == 0) {
        ask = 1;
        p += 4;

    } else {
        return NGX_DECLINED;
    }

    sp = ngx_strlchr(p, last, ' ');

    if (sp == NULL || w->redirects == 4) {
        return NGX_DECLINED;
    }

    slot = ngx_atoi(p, sp - p);
    name.data = sp + 1;
    name.len = last - name.data;

    if (slot == NGX_ERROR || slot >= NGX_HTTP_RATELIMIT_REDIS_SLOTS
        || name.len == 0)
    {
        return NGX_DECLINED;
    }

    node = ngx_http_ratelimit_redis_node(redis, &name);
    if (node == NULL) {
        return NGX_DECLINED;
    }

    if (!ask) {
        for (i = 0; redis->nodes[i] != node; i++) { /* void */ }
        redis->slots[slot] = (u_char) i;
    }

    conn = ngx_http_ratelimit_redis_pick(node);

    if (conn == NULL
        || (ask && ngx_http_ratelimit_redis_own_command(conn, "ASKING", NULL)
                   != NGX_OK)
        || ngx_http_ratelimit_redis_append(conn, w, w->retried) != NGX_OK)
    {
        return NGX_DECLINED;
    }

    w->redirects++;

    return NGX_OK;
}


/* A request waited redis_timeout: the connection is taken as stuck. */

static void
ngx_http_ratelimit_redis_timeout(ngx_event_t *ev)
{
    ngx_connection_t                 *c;
    ngx_http_ratelimit_redis_conn_t  *conn;
    ngx_http_ratelimit_redis_wait_t  *w = ev->data;

    conn = w->conn;
    w->timed_out = 1;

    (void) ngx_atomic_fetch_add(&w->redis->stats->timeouts, 1);

    ngx_http_ratelimit_redis_cancel(w);

    if (conn != NULL && conn->state != NGX_HTTP_RATELIMIT_REDIS_DOWN) {
        ngx_http_ratelimit_redis_fail(conn, "timed out", 1);
    }

    c = w->request->connection;
    w->handler(w, NULL);
    ngx_http_run_posted_requests(c);
}


static void
ngx_http_ratelimit_redis_latency(ngx_http_ratelimit_redis_t *redis,
    ngx_http_ratelimit_redis_wait_t *w)
{
    ngx_uint_t  b;
    ngx_msec_t  us;

    us = ngx_http_ratelimit_redis_now_us() - w->start;

    for (b = 0; b < NGX_HTTP_RATELIMIT_REDIS_BUCKETS; b++) {
        if (us <= ngx_http_ratelimit_redis_bucket_us[b]) {
            break;
        }
    }

    (void) ngx_atomic_fetch_add(&redis->stats->latency[b], 1);
    (void) ngx_atomic_fetch_add(&redis->stats->latency_us, us);
}


/* A monotonic clock in microseconds: nginx's own clock has milliseconds. */

static ngx_msec_t
ngx_http_ratelimit_redis_now_us(void)
{
    struct timespec  ts;

    (void) clock_gettime(CLOCK_MONOTONIC, &ts);

    return (ngx_msec_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
