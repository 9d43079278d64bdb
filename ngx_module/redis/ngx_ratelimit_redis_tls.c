
/*
 * ngx-ratelimit: TLS to Redis (redis_tls=on), with nginx's own OpenSSL
 * layer.
 *
 * The context is made when the configuration is read (the CA, the client
 * certificate, the session cache), and freed with the configuration's pool.
 * A connection's handshake runs on the event loop after its TCP connect,
 * within the same redis_timeout; the server's certificate is checked once
 * the handshake is over: trusted (redis_tls_ca, or the system's CAs), and
 * holding redis_tls_name (default the host of redis=; an address is
 * checked as an address, and not sent as SNI).  Every server of a Redis
 * Cluster is checked against that same name (a cluster's certificate
 * names the cluster), except one a redirection named by host name when
 * redis_tls_name is not given: that one is checked against its own name.
 * The session of each server's last handshake is offered on
 * the next, so a reconnection resumes it.
 *
 * A TLS failure closes the connection like any other (on_redis_error
 * decides meanwhile, the backoff applies) and says why in one line; the
 * same failure again on the same server is counted (tls_failures) but not
 * logged again until a reply is read there.
 */

#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ratelimit_redis_tls.h"


#if (NGX_SSL)

static void ngx_ratelimit_redis_tls_handshaked(ngx_connection_t *c);
static ngx_int_t ngx_ratelimit_redis_tls_name_ok(ngx_connection_t *c,
    ngx_str_t *name);
static ngx_uint_t ngx_ratelimit_redis_tls_is_addr(ngx_str_t *name);
static void ngx_ratelimit_redis_tls_save(ngx_connection_t *c);
static void ngx_ratelimit_redis_tls_info(const ngx_ssl_conn_t *ssl,
    int where, int ret);
static const char *ngx_ratelimit_redis_tls_alert(ngx_int_t alert);
static int ngx_ratelimit_redis_tls_no_cert(ngx_ssl_conn_t *ssl,
    X509 **x509, EVP_PKEY **pkey);


static char *
ngx_ratelimit_redis_tls_file(ngx_conf_t *cf,
    ngx_ratelimit_redis_t *redis, const char *param, ngx_str_t *file)
{
    ngx_str_t  full;

    full = *file;

    if (ngx_conf_full_name(cf->cycle, &full, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (access((char *) full.data, R_OK) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           "\"ratelimit_zone\" directive: \"%s=%V\" of zone "
                           "\"%V\": cannot read \"%V\"", param, file,
                           &redis->zone, &full);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


char *
ngx_ratelimit_redis_tls_conf(ngx_conf_t *cf,
    ngx_ratelimit_redis_t *redis)
{
    ngx_str_t            cert, key, ca;
    ngx_ssl_t           *ssl;
    ngx_pool_cleanup_t  *cln;

    if ((redis->tls_ca.len
         && ngx_ratelimit_redis_tls_file(cf, redis, "redis_tls_ca",
                                         &redis->tls_ca) != NGX_CONF_OK)
        || (redis->tls_cert.len
            && (ngx_ratelimit_redis_tls_file(cf, redis, "redis_tls_cert",
                                             &redis->tls_cert)
                != NGX_CONF_OK
                || ngx_ratelimit_redis_tls_file(cf, redis,
                                                "redis_tls_key",
                                                &redis->tls_key)
                   != NGX_CONF_OK)))
    {
        return NGX_CONF_ERROR;
    }

    ssl = ngx_pcalloc(cf->pool, sizeof(ngx_ssl_t));
    if (ssl == NULL) {
        return NGX_CONF_ERROR;
    }

    ssl->log = cf->log;

    if (ngx_ssl_create(ssl, NGX_SSL_TLSv1_2|NGX_SSL_TLSv1_3, NULL) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        ngx_ssl_cleanup_ctx(ssl);
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_ssl_cleanup_ctx;
    cln->data = ssl;

    /* a command appended while a write waits moves the output buffer */
    SSL_CTX_set_mode(ssl->ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);

    if (redis->tls_cert.len) {
        cert = redis->tls_cert;
        key = redis->tls_key;

        if (ngx_ssl_certificate(cf, ssl, &cert, &key, NULL) != NGX_OK) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit_zone\" directive: "
                               "\"redis_tls_cert=%V\" and \"redis_tls_key=%V\" "
                               "of zone \"%V\": not a PEM certificate and its "
                               "key (the line above says why)",
                               &redis->tls_cert, &redis->tls_key,
                               &redis->zone);
            return NGX_CONF_ERROR;
        }
    }

    if (redis->tls_cert.len == 0) {
        SSL_CTX_set_client_cert_cb(ssl->ctx,
                                   ngx_ratelimit_redis_tls_no_cert);
    }

    /* the verification's result is read after the handshake (a certificate
       not trusted does not end the handshake), so the log can say why */

    ca = redis->tls_ca;

    if (ngx_ssl_trusted_certificate(cf, ssl, &ca, 100) != NGX_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: \"redis_tls_ca=%V\" "
                           "of zone \"%V\": not PEM certificates (the line "
                           "above says why)", &redis->tls_ca, &redis->zone);
        return NGX_CONF_ERROR;
    }

    if (redis->tls_ca.len == 0 && redis->tls_verify
        && SSL_CTX_set_default_verify_paths(ssl->ctx) != 1)
    {
        ngx_ssl_error(NGX_LOG_EMERG, cf->log, 0,
                      "SSL_CTX_set_default_verify_paths() failed");
        return NGX_CONF_ERROR;
    }

    if (ngx_ssl_client_session_cache(cf, ssl, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    redis->ssl = ssl;

    return NGX_CONF_OK;
}


/*
 * The TCP connection is up: the handshake starts, on nginx's handlers
 * until it is over (the connect timer still runs).
 */

void
ngx_ratelimit_redis_tls_start(ngx_ratelimit_redis_conn_t *conn,
    ngx_ratelimit_redis_tls_done_pt done)
{
    ngx_int_t               rc;
    ngx_connection_t       *c = conn->peer.connection;
    ngx_ratelimit_redis_t  *redis = conn->redis;

    conn->tls_done = done;
    conn->tls_alert = -1;
    conn->tls_alert_sent = -1;
    conn->tls_cert_asked = 0;

    /* for the TLS state: destroyed when the connection is dropped */
    c->pool = ngx_create_pool(256, c->log);

    if (c->pool == NULL
        || ngx_ssl_create_connection(redis->ssl, c, NGX_SSL_CLIENT) != NGX_OK)
    {
        done(conn, "cannot start TLS");
        return;
    }

    SSL_set_info_callback(c->ssl->connection,
                          ngx_ratelimit_redis_tls_info);

    if (!ngx_ratelimit_redis_tls_is_addr(&conn->node->tls_name)
        && SSL_set_tlsext_host_name(c->ssl->connection,
                                    (char *) conn->node->tls_name.data)
           == 0)
    {
        done(conn, "cannot set TLS SNI");
        return;
    }

    c->ssl->save_session = ngx_ratelimit_redis_tls_save;

    if (conn->node->session
        && ngx_ssl_set_session(c, conn->node->session) != NGX_OK)
    {
        done(conn, "cannot set TLS session");
        return;
    }

    rc = ngx_ssl_handshake(c);

    if (rc == NGX_AGAIN) {
        if (!c->write->timer_set) {
            ngx_add_timer(c->write, redis->timeout);
        }

        c->ssl->handler = ngx_ratelimit_redis_tls_handshaked;
        return;
    }

    ngx_ratelimit_redis_tls_handshaked(c);
}


static void
ngx_ratelimit_redis_tls_handshaked(ngx_connection_t *c)
{
    long                         rc;
    u_char                      *p;
    u_char                       why[NGX_RATELIMIT_REDIS_TLS_WHY];
    ngx_ratelimit_redis_t       *redis;
    ngx_ratelimit_redis_conn_t  *conn;

    conn = c->data;
    redis = conn->redis;

    if (!c->ssl->handshaked) {
        ngx_ratelimit_redis_tls_failed(conn, c->write->timedout
                                                  || c->read->timedout
                                                  ? "TLS handshake timed out "
                                                    "(is it Redis's tls-port?)"
                                                  : "TLS handshake failed", 0);
        return;
    }

    if (redis->tls_verify) {
        rc = SSL_get_verify_result(c->ssl->connection);

        if (rc != X509_V_OK) {
            p = ngx_slprintf(why, why + sizeof(why) - 1,
                             "TLS: the server's certificate is not trusted "
                             "(%s) by %s%V", X509_verify_cert_error_string(rc),
                             redis->tls_ca.len ? "redis_tls_ca=" : "the "
                             "system's CAs", &redis->tls_ca);
            *p = '\0';
            ngx_ratelimit_redis_tls_failed(conn, (char *) why, 1);
            return;
        }

        if (ngx_ratelimit_redis_tls_name_ok(c, &conn->node->tls_name)
            != NGX_OK)
        {
            p = ngx_slprintf(why, why + sizeof(why) - 1,
                             "TLS: the server's certificate does not name "
                             "\"%V\" (%s)", &conn->node->tls_name,
                             conn->node->tls_name.data == redis->tls_name.data
                             ? "redis_tls_name" : "its host name");
            *p = '\0';
            ngx_ratelimit_redis_tls_failed(conn, (char *) why, 1);
            return;
        }
    }

    if (SSL_session_reused(c->ssl->connection)) {
        (void) ngx_atomic_fetch_add(&redis->stats->tls_resumed, 1);
    }

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    conn->tls_done(conn, NULL);
}


/*
 * An address is checked against the certificate's IP addresses; a name
 * against its DNS names (nginx's check).
 */

static ngx_int_t
ngx_ratelimit_redis_tls_name_ok(ngx_connection_t *c, ngx_str_t *name)
{
    int    rc;
    X509  *cert;

    if (!ngx_ratelimit_redis_tls_is_addr(name)) {
        return ngx_ssl_check_host(c, name);
    }

    cert = SSL_get_peer_certificate(c->ssl->connection);
    if (cert == NULL) {
        return NGX_ERROR;
    }

    rc = X509_check_ip_asc(cert, (char *) name->data, 0);
    X509_free(cert);

    return rc == 1 ? NGX_OK : NGX_ERROR;
}


static ngx_uint_t
ngx_ratelimit_redis_tls_is_addr(ngx_str_t *name)
{
    return ngx_inet_addr(name->data, name->len) != INADDR_NONE
           || ngx_strlchr(name->data, name->data + name->len, ':') != NULL;
}


/* A session the server gave (TLS 1.3: after the handshake), for the next
   connection to the same server. */

static void
ngx_ratelimit_redis_tls_save(ngx_connection_t *c)
{
    ngx_ssl_session_t           *session;
    ngx_ratelimit_redis_conn_t  *conn = c->data;

    session = ngx_ssl_get_session(c);
    if (session == NULL) {
        return;
    }

    if (conn->node->session) {
        ngx_ssl_free_session(conn->node->session);
    }

    conn->node->session = session;
}


/* The last alerts from the server and to it, which say why a handshake or
   a read failed. */

static void
ngx_ratelimit_redis_tls_info(const ngx_ssl_conn_t *ssl, int where,
    int ret)
{
    ngx_connection_t            *c;
    ngx_ratelimit_redis_conn_t  *conn;

    if (!(where & SSL_CB_ALERT)) {
        return;
    }

    c = ngx_ssl_get_connection((ngx_ssl_conn_t *) ssl);
    conn = c->data;

    if (where & SSL_CB_READ) {
        conn->tls_alert = ret & 0xff;

    } else {
        conn->tls_alert_sent = ret & 0xff;
    }
}


/*
 * The server asks for a client certificate and none is configured: sent
 * without one (a server that wants one says so after a TLS 1.3 handshake,
 * by an alert that a reset may lose), and remembered for the log.
 */

static int
ngx_ratelimit_redis_tls_no_cert(ngx_ssl_conn_t *ssl, X509 **x509,
    EVP_PKEY **pkey)
{
    ngx_connection_t            *c;
    ngx_ratelimit_redis_conn_t  *conn;

    c = ngx_ssl_get_connection(ssl);
    conn = c->data;
    conn->tls_cert_asked = 1;

    return 0;
}


/* An alert's description; OpenSSL's table lacks TLS 1.3's (RFC 8446). */

static const char *
ngx_ratelimit_redis_tls_alert(ngx_int_t alert)
{
    switch (alert) {
    case 109:
        return "missing extension";
    case 116:
        return "certificate required (redis_tls_cert=, redis_tls_key=)";
    case 120:
        return "no application protocol";
    default:
        return SSL_alert_desc_string_long((int) alert);
    }
}


/* At the worker's exit. */

void
ngx_ratelimit_redis_tls_forget(ngx_ratelimit_redis_node_t *node)
{
    if (node->session) {
        ngx_ssl_free_session(node->session);
        node->session = NULL;
    }
}

#else


char *
ngx_ratelimit_redis_tls_conf(ngx_conf_t *cf,
    ngx_ratelimit_redis_t *redis)
{
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"ratelimit_zone\" directive: \"redis_tls=on\" of "
                       "zone \"%V\": this nginx is built without SSL (its "
                       "configure had no --with-http_ssl_module)",
                       &redis->zone);
    return NGX_CONF_ERROR;
}

#endif


/*
 * A TLS failure (or a connection lost before its first reply over TLS):
 * the line says why, once while the same failure repeats on this server.
 * Once one is logged, a failure that says nothing more precise (a send or
 * a read failed, no alert known) is counted but not logged either.
 */

void
ngx_ratelimit_redis_tls_failed(ngx_ratelimit_redis_conn_t *conn,
    const char *why, ngx_uint_t precise)
{
    u_char                      *p;
    u_char                       line[NGX_RATELIMIT_REDIS_TLS_WHY];
    ngx_ratelimit_redis_node_t  *node = conn->node;

    p = ngx_slprintf(line, line + sizeof(line) - 1, "%s", why);

#if (NGX_SSL)
    if (precise) {
        /* the certificate's check: nothing to add */

    } else if (conn->tls_cert_asked) {
        p = ngx_slprintf(p, line + sizeof(line) - 1,
                         " (the server asked for a client certificate, and "
                         "none is configured: redis_tls_cert=, "
                         "redis_tls_key=)");
        precise = 1;

    } else if (conn->tls_alert > 0) {
        p = ngx_slprintf(p, line + sizeof(line) - 1,
                         " (the server sent TLS alert %i, \"%s\")",
                         conn->tls_alert,
                         ngx_ratelimit_redis_tls_alert(conn->tls_alert));
        precise = 1;

    } else if (conn->tls_alert_sent > 0) {
        p = ngx_slprintf(p, line + sizeof(line) - 1,
                         " (nginx sent TLS alert %i, \"%s\": is it Redis's "
                         "tls-port?)", conn->tls_alert_sent,
                         ngx_ratelimit_redis_tls_alert(
                             conn->tls_alert_sent));
        precise = 1;
    }
#endif

    *p = '\0';

    (void) ngx_atomic_fetch_add(&conn->redis->stats->tls_failures, 1);

    if (ngx_strcmp(node->tls_error, line) == 0
        || (node->tls_error[0] && !precise))
    {
        conn->quiet = 1;

    } else {
        ngx_memcpy(node->tls_error, line, p - line + 1);
    }

    conn->tls_done(conn, (char *) line);
}
