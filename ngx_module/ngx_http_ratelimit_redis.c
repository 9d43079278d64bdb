/*
 * ngx-ratelimit: Redis connections for zones declared with redis=.
 *
 * Each worker keeps redis_pool connections per zone, opened on first use
 * with nginx's event API (ngx_event_connect_peer: no blocking call, the
 * address resolved when the configuration is read).  Requests are
 * pipelined: a command is appended to a connection's output and a ring
 * remembers whose reply comes next.  A request waits on its own timer
 * (redis_timeout); when it fires, the connection is taken as stuck and
 * closed, and every request queued on it is decided by on_redis_error.  A
 * closed connection is opened again on a later request, after a backoff
 * that doubles from 100 ms to 5 s; meanwhile requests do not wait at all.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_sha1.h>

#include "ngx_http_ratelimit_redis.h"


#define NGX_HTTP_RATELIMIT_REDIS_RING      1024     /* requests in flight */
#define NGX_HTTP_RATELIMIT_REDIS_IN        65536    /* longest reply */
#define NGX_HTTP_RATELIMIT_REDIS_BACKOFF   100
#define NGX_HTTP_RATELIMIT_REDIS_BACKOFF_MAX  5000
#define NGX_HTTP_RATELIMIT_REDIS_NODES     32       /* cluster servers known */
#define NGX_HTTP_RATELIMIT_REDIS_SLOTS     16384

#define NGX_HTTP_RATELIMIT_REDIS_DOWN        0
#define NGX_HTTP_RATELIMIT_REDIS_CONNECTING  1
#define NGX_HTTP_RATELIMIT_REDIS_READY       2

/* the ring entry of a command sent for the connection itself (AUTH, SELECT) */
#define NGX_HTTP_RATELIMIT_REDIS_OWN                                          \
    ((ngx_http_ratelimit_redis_wait_t *) &ngx_http_ratelimit_redis_own)


typedef struct ngx_http_ratelimit_redis_node_s  ngx_http_ratelimit_redis_node_t;

typedef struct {
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
} ngx_http_ratelimit_redis_conn_t;


/* a Redis server and this worker's redis_pool connections to it */
struct ngx_http_ratelimit_redis_node_s {
    ngx_str_t                          name;     /* HOST:PORT */
    ngx_addr_t                        *addrs;
    ngx_uint_t                         naddrs;
    ngx_uint_t                         next;
    ngx_http_ratelimit_redis_conn_t    conns[1]; /* [pool] */
};


static ngx_http_ratelimit_redis_node_t *ngx_http_ratelimit_redis_node(
    ngx_http_ratelimit_redis_t *redis, ngx_str_t *name);
static ngx_http_ratelimit_redis_conn_t *ngx_http_ratelimit_redis_pick(
    ngx_http_ratelimit_redis_node_t *node);
static ngx_int_t ngx_http_ratelimit_redis_redirect(
    ngx_http_ratelimit_redis_wait_t *w, rl_resp_t *reply);
static ngx_int_t ngx_http_ratelimit_redis_connect(
    ngx_http_ratelimit_redis_conn_t *conn);
static void ngx_http_ratelimit_redis_fail(ngx_http_ratelimit_redis_conn_t *conn,
    const char *why, ngx_uint_t timeout);
static ngx_int_t ngx_http_ratelimit_redis_append(
    ngx_http_ratelimit_redis_conn_t *conn, ngx_http_ratelimit_redis_wait_t *w,
    ngx_uint_t eval);
static ngx_int_t ngx_http_ratelimit_redis_own_command(
    ngx_http_ratelimit_redis_conn_t *conn, const char *cmd, ngx_str_t *arg);
static void ngx_http_ratelimit_redis_push(ngx_http_ratelimit_redis_conn_t *conn,
    ngx_http_ratelimit_redis_wait_t *w);
static void ngx_http_ratelimit_redis_write_handler(ngx_event_t *wev);
static void ngx_http_ratelimit_redis_read_handler(ngx_event_t *rev);
static void ngx_http_ratelimit_redis_reply(
    ngx_http_ratelimit_redis_conn_t *conn, rl_resp_t *reply);
static void ngx_http_ratelimit_redis_timeout(ngx_event_t *ev);
static void ngx_http_ratelimit_redis_latency(ngx_http_ratelimit_redis_t *redis,
    ngx_http_ratelimit_redis_wait_t *w);
static ngx_msec_t ngx_http_ratelimit_redis_now_us(void);


static ngx_uint_t  ngx_http_ratelimit_redis_own;

const ngx_uint_t  ngx_http_ratelimit_redis_bucket_us[] = {
    250, 500, 1000, 2500, 5000, 10000, 25000, 50000
};


/* ---- configuration ---------------------------------------------------- */

ngx_int_t
ngx_http_ratelimit_redis_param(ngx_conf_t *cf,
    ngx_http_ratelimit_redis_t **redisp, ngx_str_t *param, ngx_str_t *zone)
{
    u_char                      *eq;
    ngx_int_t                    n;
    ngx_str_t                    name, value;
    ngx_url_t                    u;
    ngx_http_ratelimit_redis_t  *redis;

    eq = ngx_strlchr(param->data, param->data + param->len, '=');
    if (eq == NULL) {
        return NGX_DECLINED;
    }

    name.data = param->data;
    name.len = eq - param->data;
    value.data = eq + 1;
    value.len = param->data + param->len - value.data;

    if (!(name.len == 5 && ngx_strncmp(name.data, "redis", 5) == 0)
        && !(name.len > 6 && ngx_strncmp(name.data, "redis_", 6) == 0)
        && !(name.len == 14
             && ngx_strncmp(name.data, "on_redis_error", 14) == 0))
    {
        return NGX_DECLINED;
    }

    redis = *redisp;

    if (redis == NULL) {
        redis = ngx_pcalloc(cf->pool, sizeof(ngx_http_ratelimit_redis_t));
        if (redis == NULL) {
            return NGX_ERROR;
        }

        redis->timeout = NGX_CONF_UNSET_MSEC;
        redis->pool = NGX_CONF_UNSET_UINT;
        redis->db = NGX_CONF_UNSET_UINT;
        redis->on_error = NGX_CONF_UNSET_UINT;
        *redisp = redis;
    }

    if (name.len == 5) {
        ngx_memzero(&u, sizeof(ngx_url_t));
        u.url = value;
        u.no_resolve = 0;

        if (value.len == 0 || ngx_parse_url(cf->pool, &u) != NGX_OK
            || u.no_port || u.naddrs == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit_zone\" directive: invalid "
                               "\"%V\" of zone \"%V\": %s; expected "
                               "redis=HOST:PORT", param, zone,
                               u.err ? u.err : (u.no_port ? "no port"
                                                          : "no address"));
            return NGX_ERROR;
        }

        redis->server = value;
        redis->addrs = u.addrs;
        redis->naddrs = u.naddrs;
        return NGX_OK;
    }

    if (name.len == 13 && ngx_strncmp(name.data, "redis_timeout", 13) == 0) {
        n = ngx_parse_time(&value, 0);

        if (n == NGX_ERROR || n < 1 || n > 60000) {
            goto invalid;
        }

        redis->timeout = (ngx_msec_t) n;
        return NGX_OK;
    }

    if (name.len == 10 && ngx_strncmp(name.data, "redis_pool", 10) == 0) {
        n = ngx_atoi(value.data, value.len);

        if (n == NGX_ERROR || n < 1 || n > 64) {
            goto invalid;
        }

        redis->pool = n;
        return NGX_OK;
    }

    if (name.len == 14 && ngx_strncmp(name.data, "redis_password", 14) == 0) {
        if (value.len == 0) {
            goto invalid;
        }

        redis->password = value;
        return NGX_OK;
    }

    if (name.len == 8 && ngx_strncmp(name.data, "redis_db", 8) == 0) {
        n = ngx_atoi(value.data, value.len);

        if (n == NGX_ERROR || n > 65535) {
            goto invalid;
        }

        redis->db = n;
        return NGX_OK;
    }

    if (name.len == 12 && ngx_strncmp(name.data, "redis_prefix", 12) == 0) {
        if (value.len > 256) {
            goto invalid;
        }

        redis->prefix = value;
        return NGX_OK;
    }

    if (name.len == 13 && ngx_strncmp(name.data, "redis_cluster", 13) == 0) {
        if (value.len == 2 && ngx_strncmp(value.data, "on", 2) == 0) {
            redis->cluster = 1;

        } else if (value.len == 3 && ngx_strncmp(value.data, "off", 3) == 0) {
            redis->cluster = 0;

        } else {
            goto invalid;
        }

        return NGX_OK;
    }

    if (name.len == 14) {   /* on_redis_error */
        if (value.len == 5 && ngx_strncmp(value.data, "local", 5) == 0) {
            redis->on_error = NGX_HTTP_RATELIMIT_REDIS_LOCAL;

        } else if (value.len == 5 && ngx_strncmp(value.data, "allow", 5) == 0) {
            redis->on_error = NGX_HTTP_RATELIMIT_REDIS_ALLOW;

        } else if (value.len == 4 && ngx_strncmp(value.data, "deny", 4) == 0) {
            redis->on_error = NGX_HTTP_RATELIMIT_REDIS_DENY;

        } else {
            goto invalid;
        }

        return NGX_OK;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"ratelimit_zone\" directive: unknown parameter "
                       "\"%V\" of zone \"%V\": expected redis=, "
                       "redis_timeout=, redis_pool=, redis_password=, "
                       "redis_db=, redis_prefix=, redis_cluster= or "
                       "on_redis_error=",
                       param, zone);
    return NGX_ERROR;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"ratelimit_zone\" directive: invalid \"%V\" of zone "
                       "\"%V\": expected redis_timeout=1ms..60s, "
                       "redis_pool=1..64, a non-empty redis_password, "
                       "redis_db=0..65535, redis_prefix of at most 256 bytes "
                       "(with no braces in a cluster), redis_cluster=on|off, "
                       "on_redis_error=local|allow|deny", param, zone);
    return NGX_ERROR;
}


char *
ngx_http_ratelimit_redis_finish(ngx_conf_t *cf,
    ngx_http_ratelimit_redis_t *redis, ngx_str_t *zone)
{
    size_t         len;
    u_char         digest[20];
    const char    *script;
    ngx_sha1_t     sha1;

    if (redis->server.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: zone \"%V\" has "
                           "Redis parameters but no redis=HOST:PORT", zone);
        return NGX_CONF_ERROR;
    }

    ngx_conf_init_msec_value(redis->timeout, 50);
    ngx_conf_init_uint_value(redis->pool, 2);
    ngx_conf_init_uint_value(redis->db, 0);
    ngx_conf_init_uint_value(redis->on_error, NGX_HTTP_RATELIMIT_REDIS_LOCAL);

    if (redis->prefix.data == NULL) {
        ngx_str_set(&redis->prefix, "ratelimit:");
    }

    /* a brace in the prefix would take the place of the keys' hash tag */

    if (redis->cluster
        && (ngx_strlchr(redis->prefix.data,
                        redis->prefix.data + redis->prefix.len, '{')
            || ngx_strlchr(redis->prefix.data,
                           redis->prefix.data + redis->prefix.len, '}')))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: invalid "
                           "\"redis_prefix=%V\" of zone \"%V\": a Redis "
                           "Cluster zone's prefix may not hold \"{\" or \"}\"",
                           &redis->prefix, zone);
        return NGX_CONF_ERROR;
    }

    if (redis->cluster && redis->db) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: \"redis_db=%ui\" "
                           "of zone \"%V\": Redis Cluster has database 0 "
                           "only", redis->db, zone);
        return NGX_CONF_ERROR;
    }

    /* EVALSHA names the script by its SHA-1 */

    script = rl_redis_script(&len);
    ngx_sha1_init(&sha1);
    ngx_sha1_update(&sha1, script, len);
    ngx_sha1_final(digest, &sha1);
    ngx_hex_dump(redis->sha, digest, sizeof(digest));

    return NGX_CONF_OK;
}


/* ---- sending ---------------------------------------------------------- */

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


/*
 * Round robin over a server's connections that can take a request: open,
 * or due to be opened again; not one whose ring is full.
 */

static ngx_http_ratelimit_redis_conn_t *
ngx_http_ratelimit_redis_pick(ngx_http_ratelimit_redis_node_t *node)
{
    ngx_uint_t                        i, pool;
    ngx_http_ratelimit_redis_conn_t  *conn;

    pool = node->conns[0].redis->pool;

    for (i = 0; i < pool; i++) {
        conn = &node->conns[(node->next + i) % pool];

        if (conn->count == NGX_HTTP_RATELIMIT_REDIS_RING
            || (conn->state == NGX_HTTP_RATELIMIT_REDIS_DOWN
                && ((ngx_msec_int_t) (ngx_current_msec - conn->retry_at) < 0
                    || ngx_http_ratelimit_redis_connect(conn) != NGX_OK)))
        {
            continue;
        }

        node->next++;
        return conn;
    }

    node->next++;
    return NULL;
}


/*
 * The server named HOST:PORT, known already or added: redis= when the
 * worker starts; IP:PORT from a cluster's MOVED or ASK (no DNS then).
 */

static ngx_http_ratelimit_redis_node_t *
ngx_http_ratelimit_redis_node(ngx_http_ratelimit_redis_t *redis,
    ngx_str_t *name)
{
    ngx_uint_t                        i;
    ngx_addr_t                       *addr;
    ngx_http_ratelimit_redis_node_t  *node;

    for (i = 0; i < redis->nnodes; i++) {
        node = redis->nodes[i];

        if (node->name.len == name->len
            && ngx_strncmp(node->name.data, name->data, name->len) == 0)
        {
            return node;
        }
    }

    if (redis->nnodes == NGX_HTTP_RATELIMIT_REDIS_NODES) {
        return NULL;
    }

    node = ngx_calloc(sizeof(ngx_http_ratelimit_redis_node_t)
                      + (redis->pool - 1)
                        * sizeof(ngx_http_ratelimit_redis_conn_t)
                      + name->len + sizeof(void *) + sizeof(ngx_addr_t)
                      + NGX_SOCKADDRLEN,
                      ngx_cycle->log);
    if (node == NULL) {
        return NULL;
    }

    node->name.data = (u_char *) &node->conns[redis->pool];
    node->name.len = name->len;
    ngx_memcpy(node->name.data, name->data, name->len);

    if (redis->nnodes == 0) {
        node->addrs = redis->addrs;
        node->naddrs = redis->naddrs;

    } else {
        addr = (ngx_addr_t *) ngx_align_ptr(node->name.data + name->len,
                                            sizeof(void *));
        addr->sockaddr = (struct sockaddr *) (addr + 1);

        if (ngx_parse_addr_port(ngx_cycle->pool, addr, name->data,
                                name->len)
            != NGX_OK)
        {
            ngx_free(node);
            return NULL;
        }

        /* the parsed address, in this node's own memory */
        ngx_memcpy(addr + 1, addr->sockaddr, addr->socklen);
        addr->sockaddr = (struct sockaddr *) (addr + 1);
        node->addrs = addr;
        node->naddrs = 1;
    }

    for (i = 0; i < redis->pool; i++) {
        node->conns[i].redis = redis;
        node->conns[i].node = node;
        node->conns[i].backoff = NGX_HTTP_RATELIMIT_REDIS_BACKOFF;
    }

    redis->nodes[redis->nnodes++] = node;

    return node;
}


void
ngx_http_ratelimit_redis_close(ngx_http_ratelimit_redis_t *redis)
{
    ngx_uint_t                        i, j;
    ngx_http_ratelimit_redis_node_t  *node;

    for (i = 0; i < redis->nnodes; i++) {
        node = redis->nodes[i];

        for (j = 0; j < redis->pool; j++) {
            if (node->conns[j].peer.connection) {
                ngx_close_connection(node->conns[j].peer.connection);
                node->conns[j].peer.connection = NULL;
            }

            node->conns[j].state = NGX_HTTP_RATELIMIT_REDIS_DOWN;
        }
    }
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


static ngx_int_t
ngx_http_ratelimit_redis_connect(ngx_http_ratelimit_redis_conn_t *conn)
{
    u_char                       dbs[NGX_INT_T_LEN];
    ngx_int_t                    rc;
    ngx_str_t                    db;
    ngx_addr_t                  *addr;
    ngx_connection_t            *c;
    ngx_peer_connection_t       *pc;
    ngx_http_ratelimit_redis_t  *redis = conn->redis;

    /* a name with several addresses: the connections spread over them */
    addr = &conn->node->addrs[(conn - conn->node->conns)
                              % conn->node->naddrs];

    pc = &conn->peer;
    ngx_memzero(pc, sizeof(ngx_peer_connection_t));
    pc->sockaddr = addr->sockaddr;
    pc->socklen = addr->socklen;
    pc->name = &conn->node->name;
    pc->get = ngx_event_get_peer;
    pc->log = ngx_cycle->log;
    pc->log_error = NGX_ERROR_ERR;

    if (conn->in == NULL) {
        conn->in = ngx_alloc(NGX_HTTP_RATELIMIT_REDIS_IN, ngx_cycle->log);
        if (conn->in == NULL) {
            return NGX_ERROR;
        }
    }

    (void) ngx_atomic_fetch_add(&redis->stats->reconnects, 1);

    rc = ngx_event_connect_peer(pc);

    if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED) {
        ngx_http_ratelimit_redis_fail(conn, "cannot connect", 0);
        return NGX_ERROR;
    }

    c = pc->connection;
    c->data = conn;
    c->read->handler = ngx_http_ratelimit_redis_read_handler;
    c->write->handler = ngx_http_ratelimit_redis_write_handler;
    c->read->log = c->log;
    c->write->log = c->log;

    conn->state = NGX_HTTP_RATELIMIT_REDIS_CONNECTING;
    conn->out_len = 0;
    conn->out_sent = 0;
    conn->in_len = 0;
    conn->head = 0;
    conn->count = 0;

    db.data = dbs;
    db.len = ngx_sprintf(dbs, "%ui", redis->db) - dbs;

    if ((redis->password.len
         && ngx_http_ratelimit_redis_own_command(conn, "AUTH", &redis->password)
            != NGX_OK)
        || (redis->db
            && ngx_http_ratelimit_redis_own_command(conn, "SELECT", &db)
               != NGX_OK))
    {
        ngx_http_ratelimit_redis_fail(conn, "out of memory", 0);
        return NGX_ERROR;
    }

    if (rc == NGX_AGAIN) {
        c->write->cancelable = 1;
        ngx_add_timer(c->write, redis->timeout);
        return NGX_OK;
    }

    conn->state = NGX_HTTP_RATELIMIT_REDIS_READY;
    return NGX_OK;
}


/* Makes room for len more bytes of output. */

static ngx_int_t
ngx_http_ratelimit_redis_reserve(ngx_http_ratelimit_redis_conn_t *conn,
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


static ngx_int_t
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


/* A command of the connection's own (AUTH, SELECT, ASKING): arg may be NULL. */

static ngx_int_t
ngx_http_ratelimit_redis_own_command(ngx_http_ratelimit_redis_conn_t *conn,
    const char *cmd, ngx_str_t *arg)
{
    u_char  *p;
    size_t   len;

    len = ngx_strlen(cmd);

    if (ngx_http_ratelimit_redis_reserve(conn,
                                         64 + len + (arg ? arg->len : 0))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    p = conn->out + conn->out_len;
    p = ngx_sprintf(p, "*%d\r\n$%uz\r\n%s\r\n", arg ? 2 : 1, len, cmd);

    if (arg) {
        p = ngx_sprintf(p, "$%uz\r\n%V\r\n", arg->len, arg);
    }

    conn->out_len = p - conn->out;

    ngx_http_ratelimit_redis_push(conn, NGX_HTTP_RATELIMIT_REDIS_OWN);

    return NGX_OK;
}


static void
ngx_http_ratelimit_redis_push(ngx_http_ratelimit_redis_conn_t *conn,
    ngx_http_ratelimit_redis_wait_t *w)
{
    ngx_uint_t  slot;

    slot = (conn->head + conn->count++) % NGX_HTTP_RATELIMIT_REDIS_RING;
    conn->ring[slot] = w;

    if (w != NGX_HTTP_RATELIMIT_REDIS_OWN) {
        w->conn = conn;
        w->slot = slot;
    }

    /* written once this event cycle is over: all commands in one send */

    if (conn->state == NGX_HTTP_RATELIMIT_REDIS_READY
        && !conn->peer.connection->write->posted)
    {
        ngx_post_event(conn->peer.connection->write, &ngx_posted_events);
    }
}


/* ---- events ----------------------------------------------------------- */

static void
ngx_http_ratelimit_redis_write_handler(ngx_event_t *wev)
{
    int                               err;
    ssize_t                           n;
    socklen_t                         len;
    ngx_connection_t                 *c;
    ngx_http_ratelimit_redis_conn_t  *conn;

    c = wev->data;
    conn = c->data;

    if (wev->timedout) {
        ngx_http_ratelimit_redis_fail(conn, "connect timed out", 1);
        return;
    }

    if (conn->state == NGX_HTTP_RATELIMIT_REDIS_CONNECTING) {
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
            ngx_http_ratelimit_redis_fail(conn, strerror(err), 0);
            return;
        }

        if (wev->timer_set) {
            ngx_del_timer(wev);
        }

        conn->state = NGX_HTTP_RATELIMIT_REDIS_READY;
    }

    while (conn->out_sent < conn->out_len) {
        n = c->send(c, conn->out + conn->out_sent,
                    conn->out_len - conn->out_sent);

        if (n == NGX_AGAIN) {
            break;
        }

        if (n == NGX_ERROR) {
            ngx_http_ratelimit_redis_fail(conn, "send failed", 0);
            return;
        }

        conn->out_sent += n;
    }

    if (ngx_handle_write_event(wev, 0) != NGX_OK) {
        ngx_http_ratelimit_redis_fail(conn, "event error", 0);
    }
}


static void
ngx_http_ratelimit_redis_read_handler(ngx_event_t *rev)
{
    long                              used;
    size_t                            off;
    ssize_t                           n;
    rl_resp_t                         reply;
    ngx_connection_t                 *c;
    ngx_http_ratelimit_redis_conn_t  *conn;

    c = rev->data;
    conn = c->data;

    for ( ;; ) {
        n = c->recv(c, conn->in + conn->in_len,
                    NGX_HTTP_RATELIMIT_REDIS_IN - conn->in_len);

        if (n == NGX_AGAIN) {
            break;
        }

        if (n == 0 || n == NGX_ERROR) {
            ngx_http_ratelimit_redis_fail(conn, n == 0 ? "connection closed"
                                                       : "recv failed", 0);
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

            off += used;

            if (conn->count == 0) {
                ngx_http_ratelimit_redis_fail(conn, "unexpected reply", 0);
                return;
            }

            ngx_http_ratelimit_redis_reply(conn, &reply);

            if (conn->state == NGX_HTTP_RATELIMIT_REDIS_DOWN) {
                return;
            }
        }

        if (used < 0) {
            ngx_http_ratelimit_redis_fail(conn, "reply is not RESP", 0);
            return;
        }

        if (off) {
            ngx_memmove(conn->in, conn->in + off, conn->in_len - off);
            conn->in_len -= off;
        }

        if (conn->in_len == NGX_HTTP_RATELIMIT_REDIS_IN) {
            ngx_http_ratelimit_redis_fail(conn, "reply too long", 0);
            return;
        }
    }

    if (ngx_handle_read_event(rev, 0) != NGX_OK) {
        ngx_http_ratelimit_redis_fail(conn, "event error", 0);
    }
}


static void
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


/*
 * Closes a connection, to be opened again after the backoff, and hands
 * every request queued on it to its handler with no reply.
 */

static void
ngx_http_ratelimit_redis_fail(ngx_http_ratelimit_redis_conn_t *conn,
    const char *why, ngx_uint_t timeout)
{
    ngx_uint_t                        i, n;
    ngx_connection_t                 *c;
    ngx_http_ratelimit_redis_t       *redis = conn->redis;
    ngx_http_ratelimit_redis_wait_t  *w, *failed[NGX_HTTP_RATELIMIT_REDIS_RING];

    ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                  "ratelimit: redis %V: %s, %ui requests decided by "
                  "on_redis_error, reconnecting in %M ms", &conn->node->name,
                  why, conn->count, conn->backoff);

    if (conn->peer.connection) {
        ngx_close_connection(conn->peer.connection);
        conn->peer.connection = NULL;
    }

    conn->state = NGX_HTTP_RATELIMIT_REDIS_DOWN;
    conn->retry_at = ngx_current_msec + conn->backoff;
    conn->backoff = ngx_min(conn->backoff * 2,
                            NGX_HTTP_RATELIMIT_REDIS_BACKOFF_MAX);

    n = 0;

    for (i = 0; i < conn->count; i++) {
        w = conn->ring[(conn->head + i) % NGX_HTTP_RATELIMIT_REDIS_RING];

        if (w != NULL && w != NGX_HTTP_RATELIMIT_REDIS_OWN) {
            w->conn = NULL;
            failed[n++] = w;
        }
    }

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

        c = w->request->connection;
        w->handler(w, NULL);
        ngx_http_run_posted_requests(c);
    }
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
