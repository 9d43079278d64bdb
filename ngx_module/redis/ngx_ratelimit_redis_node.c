
/*
 * ngx-ratelimit: the Redis servers a worker knows, redis= and the masters a
 * cluster's redirections name, and their addresses: an address as given; a
 * host name resolved with the http block's resolver, again at each
 * connection (nginx's resolver answers from its cache while the answer is
 * valid: valid=, else its TTL), its last addresses kept when the resolver
 * fails.  The connections (ngx_ratelimit_redis_conn.c) start a
 * resolution and hear of its end through the handler they give.
 */

#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ratelimit_redis_node.h"


static ngx_uint_t ngx_ratelimit_redis_named(
    ngx_ratelimit_redis_t *redis);
static void ngx_ratelimit_redis_answer(ngx_resolver_ctx_t *ctx);


/*
 * The server named HOST:PORT, known already or added: redis= when the
 * worker starts (its addresses resolved with the configuration, and again
 * at each connection if it is a host name and the http block has a
 * resolver); from a cluster's MOVED or ASK, an address, or a host name
 * resolved with that resolver at each connection.
 */

ngx_ratelimit_redis_node_t *
ngx_ratelimit_redis_node(ngx_ratelimit_redis_t *redis,
    ngx_str_t *name)
{
    u_char                      *colon, *p;
    ngx_int_t                    port;
    ngx_uint_t                   i;
    ngx_addr_t                   addr;
    ngx_ratelimit_redis_node_t  *node;

    for (i = 0; i < redis->nnodes; i++) {
        node = redis->nodes[i];

        if (node->name.len == name->len
            && ngx_strncmp(node->name.data, name->data, name->len) == 0)
        {
            return node;
        }
    }

    if (redis->nnodes == NGX_RATELIMIT_REDIS_NODES) {
        return NULL;
    }

    /* the name, then the host name NUL-terminated */
    node = ngx_calloc(sizeof(ngx_ratelimit_redis_node_t)
                      + (redis->pool - 1)
                        * sizeof(ngx_ratelimit_redis_conn_t)
                      + 2 * name->len + 1,
                      ngx_cycle->log);
    if (node == NULL) {
        return NULL;
    }

    node->name.data = (u_char *) &node->conns[redis->pool];
    node->name.len = name->len;
    ngx_memcpy(node->name.data, name->data, name->len);
    node->tls_name = redis->tls_name;

    if (redis->nnodes == 0) {
        node->addrs = redis->addrs;
        node->naddrs = redis->naddrs;

        if (ngx_ratelimit_redis_named(redis)) {
            /* resolved again at each connection: a failover that moves
               the name (a managed primary endpoint) is followed */
            p = node->name.data + name->len;
            node->host.data = p;
            node->host.len = redis->host.len;
            *ngx_cpymem(p, redis->host.data, redis->host.len) = '\0';
            node->port = ngx_inet_get_port(redis->addrs[0].sockaddr);
        }

    } else if (ngx_parse_addr_port(ngx_cycle->pool, &addr, name->data,
                                   name->len)
               == NGX_OK)
    {
        /* the parsed address, in this node's own memory */
        ngx_memcpy(&node->sockaddr[0], addr.sockaddr, addr.socklen);
        node->addr[0].sockaddr = &node->sockaddr[0].sockaddr;
        node->addr[0].socklen = addr.socklen;
        node->addrs = node->addr;
        node->naddrs = 1;

    } else {
        colon = ngx_strlchr(name->data, name->data + name->len, ':');
        port = colon ? ngx_atoi(colon + 1, name->data + name->len - colon - 1)
                     : NGX_ERROR;

        if (port < 1 || port > 65535 || colon == name->data) {
            ngx_free(node);
            return NULL;
        }

        p = node->name.data + name->len;
        node->host.data = p;
        node->host.len = colon - name->data;
        *ngx_cpymem(p, name->data, node->host.len) = '\0';
        node->port = (in_port_t) port;
        node->addrs = node->addr;

        if (redis->tls_name_host) {
            node->tls_name = node->host;
        }
    }

    for (i = 0; i < redis->pool; i++) {
        node->conns[i].redis = redis;
        node->conns[i].node = node;
        node->conns[i].backoff = NGX_RATELIMIT_REDIS_BACKOFF;
    }

    redis->nodes[redis->nnodes++] = node;

    return node;
}


/*
 * redis= is a host name (not an address, not a unix socket), and the http
 * block has a resolver: nginx's own, not the one the configuration was
 * read with.
 */

static ngx_uint_t
ngx_ratelimit_redis_named(ngx_ratelimit_redis_t *redis)
{
    ngx_resolver_t  *r = *redis->resolver;

    return redis->naddrs > 0
           && redis->addrs[0].sockaddr->sa_family != AF_UNIX
           && redis->host.len > 0
           && ngx_inet_addr(redis->host.data, redis->host.len) == INADDR_NONE
           && ngx_strlchr(redis->host.data,
                          redis->host.data + redis->host.len, ':') == NULL
           && r != NULL && r->connections.nelts > 0;
}


/*
 * A resolution of node's host name, one at a time: NGX_OK if under way or
 * over (done is called at its end, before this returns when the resolver
 * answers from its cache); NGX_ERROR if none can start (why says why).
 */

ngx_int_t
ngx_ratelimit_redis_resolve(ngx_ratelimit_redis_node_t *node,
    ngx_ratelimit_redis_resolved_pt done, const char **why)
{
    ngx_resolver_ctx_t     *ctx;
    ngx_ratelimit_redis_t  *redis = node->conns[0].redis;

    node->done = done;

    if (node->resolving) {
        return NGX_OK;
    }

    ctx = *redis->resolver ? ngx_resolve_start(*redis->resolver, NULL)
                           : NGX_NO_RESOLVER;

    if (ctx == NGX_NO_RESOLVER) {
        *why = "a host name, and no resolver in the http block to resolve it";
        return NGX_ERROR;
    }

    if (ctx == NULL) {
        *why = "out of memory";
        return NGX_ERROR;
    }

    ctx->name = node->host;
    ctx->handler = ngx_ratelimit_redis_answer;
    ctx->data = node;
    ctx->timeout = *redis->resolver_timeout != NGX_CONF_UNSET_MSEC
                   ? *redis->resolver_timeout : 30000;
    ctx->cancelable = 1;

    node->resolving = 1;

    if (ngx_resolve_name(ctx) != NGX_OK) {   /* it freed ctx */
        node->resolving = 0;
        *why = "cannot resolve its host name";
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* The resolver's answer: the name's addresses, or the last ones kept. */

static void
ngx_ratelimit_redis_answer(ngx_resolver_ctx_t *ctx)
{
    u_char                       why[NGX_MAXHOSTNAMELEN + 64];
    ngx_uint_t                   i, n;
    ngx_ratelimit_redis_node_t  *node = ctx->data;

    node->resolving = 0;
    n = ctx->state == NGX_OK
        ? ngx_min(ctx->naddrs, NGX_RATELIMIT_REDIS_ADDRS) : 0;

    for (i = 0; i < n; i++) {
        ngx_memcpy(&node->sockaddr[i], ctx->addrs[i].sockaddr,
                   ctx->addrs[i].socklen);
        ngx_inet_set_port(&node->sockaddr[i].sockaddr, node->port);
        node->addr[i].sockaddr = &node->sockaddr[i].sockaddr;
        node->addr[i].socklen = ctx->addrs[i].socklen;
    }

    if (n) {
        node->addrs = node->addr;
        node->naddrs = n;
    }

    *ngx_slprintf(why, why + sizeof(why) - 1, "cannot resolve \"%V\": %s",
                  &node->host, ctx->state ? ngx_resolver_strerror(ctx->state)
                                          : "no address") = '\0';

    ngx_resolve_name_done(ctx);

    if (n == 0 && node->naddrs) {
        /* the resolver fails: the name's last addresses are the best
           guess (for redis=, those the configuration was read with) */
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "ratelimit: redis %V: %s, connecting to its last "
                      "address", &node->name, why);
    }

    node->done(node, n ? NULL : (char *) why);
}
