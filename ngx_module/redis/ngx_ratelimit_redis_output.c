
/*
 * ngx-ratelimit: what a connection to Redis sends: its output made room
 * for, a connection's own commands (AUTH, SELECT, FUNCTION LOAD), a call
 * pushed with the ring that remembers whose reply comes next, and the
 * decisions a worker sends in one cycle of its events written as one call
 * (a batch).  The connections themselves: ngx_ratelimit_redis_conn.c.
 */

#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ratelimit_redis_conn.h"


/* Makes room for len more bytes of output. */

ngx_int_t
ngx_ratelimit_redis_reserve(ngx_ratelimit_redis_conn_t *conn,
    size_t len)
{
    size_t   cap;
    u_char  *out;

    if (conn->out_sent == conn->out_len) {
        conn->out_sent = 0;
        conn->out_len = 0;
    }

    if (conn->out_len + len <= conn->out_cap) {
        return NGX_OK;
    }

    cap = ngx_max(conn->out_cap * 2, conn->out_len + len);
    cap = ngx_max(cap, 16384);

    out = ngx_alloc(cap, ngx_cycle->log);
    if (out == NULL) {
        return NGX_ERROR;
    }

    if (conn->out) {
        ngx_memcpy(out, conn->out, conn->out_len);
        ngx_free(conn->out);
    }

    conn->out = out;
    conn->out_cap = cap;

    return NGX_OK;
}


/* A command of the connection's own (AUTH, SELECT, ASKING), with n args. */

ngx_int_t
ngx_ratelimit_redis_own_command(ngx_ratelimit_redis_conn_t *conn,
    const char *cmd, ngx_str_t *args, ngx_uint_t n)
{
    u_char      *p;
    size_t       len;
    ngx_uint_t   i;

    len = 64 + ngx_strlen(cmd);

    for (i = 0; i < n; i++) {
        len += 32 + args[i].len;
    }

    if (ngx_ratelimit_redis_reserve(conn, len) != NGX_OK) {
        return NGX_ERROR;
    }

    p = conn->out + conn->out_len;
    p = ngx_sprintf(p, "*%ui\r\n$%uz\r\n%s\r\n", n + 1, ngx_strlen(cmd), cmd);

    for (i = 0; i < n; i++) {
        p = ngx_sprintf(p, "$%uz\r\n%V\r\n", args[i].len, &args[i]);
    }

    conn->out_len = p - conn->out;

    ngx_ratelimit_redis_push(conn, NGX_RATELIMIT_REDIS_OWN);

    return NGX_OK;
}


/* The script's library sent on the connection (FUNCTION LOAD): the calls
   sent after it find it. */

ngx_int_t
ngx_ratelimit_redis_load(ngx_ratelimit_redis_conn_t *conn)
{
    if (ngx_ratelimit_redis_reserve(conn, rl_redis_load_size())
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    conn->out_len += rl_redis_load_command((char *) conn->out + conn->out_len,
                                           (const char *) conn->redis->sha);

    ngx_ratelimit_redis_push(conn, NGX_RATELIMIT_REDIS_LOAD);
    conn->loaded = conn->pushed;

    return NGX_OK;
}


void
ngx_ratelimit_redis_push(ngx_ratelimit_redis_conn_t *conn,
    ngx_ratelimit_redis_wait_t *w)
{
    ngx_uint_t  slot;

    slot = (conn->head + conn->count++) % NGX_RATELIMIT_REDIS_RING;
    conn->ring[slot] = w;
    conn->answers[slot] = 1;
    conn->pushed++;

    if (!ngx_ratelimit_redis_is_own(w)) {
        w->conn = conn;
        w->slot = slot;
        w->seq = conn->pushed;
    }

    /* written once this event cycle is over: all commands in one send */

    if (conn->state == NGX_RATELIMIT_REDIS_READY
        && !conn->peer.connection->write->posted)
    {
        ngx_post_event(conn->peer.connection->write, &ngx_posted_events);
    }
}


/*
 * A decision joins the connection's batch: the decisions sent on it in
 * this cycle of the worker's events go to Redis in one call, written just
 * before the connection's output is sent (or when the batch is full), each
 * answered to its own request.  NGX_ERROR as ngx_ratelimit_redis_batch_write.
 */

ngx_int_t
ngx_ratelimit_redis_batch(ngx_ratelimit_redis_conn_t *conn,
    ngx_ratelimit_redis_wait_t *w)
{
    if (!rl_redis_batch_takes(&conn->batch_bytes, conn->nbatch, w->rq)) {
        if (ngx_ratelimit_redis_batch_write(conn) != NGX_OK) {
            return NGX_ERROR;
        }

        (void) rl_redis_batch_takes(&conn->batch_bytes, 0, w->rq);
    }

    w->conn = conn;
    w->slot = conn->nbatch;
    w->batched = 1;
    conn->batch[conn->nbatch++] = w;

    if (conn->state == NGX_RATELIMIT_REDIS_READY
        && !conn->peer.connection->write->posted)
    {
        ngx_post_event(conn->peer.connection->write, &ngx_posted_events);
    }

    return NGX_OK;
}


/* The batch written: one call for its decisions (a request gone while it
   waited is left out), its ring's entries answered by one reply.
   NGX_ERROR: no memory for it; the caller fails the connection, and with
   it the decisions batched. */

ngx_int_t
ngx_ratelimit_redis_batch_write(ngx_ratelimit_redis_conn_t *conn)
{
    size_t                       len;
    ngx_uint_t                   i, n, first, via;
    ngx_ratelimit_redis_t       *redis = conn->redis;
    ngx_ratelimit_redis_wait_t  *w;
    const rl_request_t          *rqs[RL_REDIS_BATCH_MAX];

    n = 0;

    for (i = 0; i < conn->nbatch; i++) {
        w = conn->batch[i];

        if (w != NULL) {
            conn->batch[n] = w;
            rqs[n++] = w->rq;
        }
    }

    conn->nbatch = n;
    conn->batch_bytes = 0;

    if (n == 0) {
        return NGX_OK;
    }

    via = conn->scripts ? RL_REDIS_EVALSHA : RL_REDIS_FCALL;

    len = n == 1 ? rl_redis_command_size(rqs[0]->n, redis->prefix.len,
                                         sizeof(redis->sha))
                 : rl_redis_batch_size(rqs, n, redis->prefix.len,
                                       sizeof(redis->sha));

    if (ngx_ratelimit_redis_reserve(conn, len) != NGX_OK) {
        return NGX_ERROR;   /* the caller fails the connection */
    }

    if (n == 1) {
        conn->out_len += rl_redis_command((char *) conn->out + conn->out_len,
                                          (const char *) redis->sha,
                                          sizeof(redis->sha), (int) via,
                                          RL_REDIS_DECIDE,
                                          (const char *) redis->prefix.data,
                                          redis->prefix.len, 0, rqs[0], -1);

    } else {
        conn->out_len += rl_redis_batch_command(
                             (char *) conn->out + conn->out_len,
                             (const char *) redis->sha, sizeof(redis->sha),
                             (int) via, (const char *) redis->prefix.data,
                             redis->prefix.len, rqs, n, -1);
    }

    first = (conn->head + conn->count) % NGX_RATELIMIT_REDIS_RING;
    conn->nbatch = 0;

    for (i = 0; i < n; i++) {
        w = conn->batch[i];
        w->batched = 0;
        w->via = via;
        ngx_ratelimit_redis_push(conn, w);
    }

    conn->answers[first] = (u_char) n;

    return NGX_OK;
}
