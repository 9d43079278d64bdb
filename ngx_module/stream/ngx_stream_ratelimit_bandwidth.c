
/*
 * ngx-ratelimit: ratelimit_bandwidth in the stream block, a byte rate per
 * key shared by every session of the key in flight, in each direction of
 * a proxied session (docs/stream.md, "Bandwidth").  A module of its own in
 * the stream module's object: its directive and its filter.
 *
 * The filter sits in front of nginx's write filter (ngx_stream_top_filter,
 * which the proxy calls for each direction) and passes a direction's bytes
 * on in slices the core grants (zone/ngx_ratelimit_bandwidth.c).  What it
 * holds keeps the proxy's buffer busy, so the proxy stops reading from
 * that side until the bytes are passed: the sender is held back by TCP's
 * own window, as proxy_download_rate holds it.  A slice granted for later
 * waits on a timer of the direction's own; when it fires, the direction's
 * write event is posted, and the proxy calls the filter again.  A UDP
 * session's datagrams are paced whole: one waits, or goes, never cut.
 */


#include "ngx_stream_ratelimit_bandwidth.h"
#include "ngx_ratelimit_bandwidth.h"


/* c->buffered: the filter holds bytes (a bit no module of nginx 1.22 to
   1.31 uses: the write filter's is 0x10, the low level's 0x0f) */
#define NGX_STREAM_RATELIMIT_BANDWIDTH_BUFFERED  0x40


/* a rule: the part any protocol's is, and its values compiled */
typedef struct {
    ngx_ratelimit_bw_rule_t      bw;
    ngx_stream_complex_value_t  *key;
    ngx_stream_complex_value_t  *rate;      /* rate=$var; NULL: rule.rate */
} ngx_stream_ratelimit_bw_rule_t;


typedef struct {
    ngx_array_t                 *rules;     /* ngx_stream_ratelimit_bw_rule_t;
                                               NULL: not given here; empty:
                                               "off" */
} ngx_stream_ratelimit_bw_srv_conf_t;


typedef struct {
    ngx_array_t                  rules;     /* every rule's pointer: the
                                               checks once the configuration
                                               is read */
} ngx_stream_ratelimit_bw_main_conf_t;


/* a direction: to the upstream ([0], "in") or from it ([1], "out") */
typedef struct {
    ngx_ratelimit_bw_flow_t      flow;
    ngx_event_t                  wake;      /* its slice is due */
    ngx_stream_session_t        *session;
    ngx_uint_t                   from_upstream;
} ngx_stream_ratelimit_bw_dir_t;


typedef struct {
    ngx_ratelimit_bw_keys_t      keys;
    ngx_stream_ratelimit_bw_dir_t  dir[2];
} ngx_stream_ratelimit_bw_ctx_t;


static char *ngx_stream_ratelimit_bandwidth(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static void *ngx_stream_ratelimit_bw_create_main_conf(ngx_conf_t *cf);
static void *ngx_stream_ratelimit_bw_create_srv_conf(ngx_conf_t *cf);
static char *ngx_stream_ratelimit_bw_merge_srv_conf(ngx_conf_t *cf,
    void *parent, void *child);
static ngx_stream_complex_value_t *ngx_stream_ratelimit_bw_value(
    ngx_conf_t *cf, ngx_str_t *value);
static ngx_int_t ngx_stream_ratelimit_bw_init(ngx_conf_t *cf);
static ngx_int_t ngx_stream_ratelimit_bw_filter(ngx_stream_session_t *s,
    ngx_chain_t *in, ngx_uint_t from_upstream);
static ngx_int_t ngx_stream_ratelimit_bw_send(ngx_stream_session_t *s,
    ngx_stream_ratelimit_bw_dir_t *dir, ngx_connection_t *c);
static ngx_stream_ratelimit_bw_ctx_t *ngx_stream_ratelimit_bw_start(
    ngx_stream_session_t *s, ngx_stream_ratelimit_bw_srv_conf_t *bscf);
static ngx_int_t ngx_stream_ratelimit_bw_rate(ngx_stream_session_t *s,
    ngx_stream_ratelimit_bw_rule_t *rule, uint64_t *rate);
static void ngx_stream_ratelimit_bw_wake(ngx_event_t *ev);
static void ngx_stream_ratelimit_bw_cleanup(void *data);


static ngx_command_t  ngx_stream_ratelimit_bw_commands[] = {

    { ngx_string("ratelimit_bandwidth"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_1MORE,
      ngx_stream_ratelimit_bandwidth,
      NGX_STREAM_SRV_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_stream_module_t  ngx_stream_ratelimit_bw_module_ctx = {
    NULL,                                  /* preconfiguration */
    ngx_stream_ratelimit_bw_init,          /* postconfiguration */

    ngx_stream_ratelimit_bw_create_main_conf, /* create main configuration */
    NULL,                                  /* init main configuration */

    ngx_stream_ratelimit_bw_create_srv_conf, /* create server configuration */
    ngx_stream_ratelimit_bw_merge_srv_conf /* merge server configuration */
};


ngx_module_t  ngx_stream_ratelimit_bandwidth_module = {
    NGX_MODULE_V1,
    &ngx_stream_ratelimit_bw_module_ctx,   /* module context */
    ngx_stream_ratelimit_bw_commands,      /* module directives */
    NGX_STREAM_MODULE,                     /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_stream_filter_pt  ngx_stream_next_filter;


static void *
ngx_stream_ratelimit_bw_create_main_conf(ngx_conf_t *cf)
{
    ngx_stream_ratelimit_bw_main_conf_t  *bmcf;

    bmcf = ngx_pcalloc(cf->pool, sizeof(ngx_stream_ratelimit_bw_main_conf_t));
    if (bmcf == NULL) {
        return NULL;
    }

    if (ngx_array_init(&bmcf->rules, cf->pool, 4,
                       sizeof(ngx_stream_ratelimit_bw_rule_t *))
        != NGX_OK)
    {
        return NULL;
    }

    return bmcf;
}


static void *
ngx_stream_ratelimit_bw_create_srv_conf(ngx_conf_t *cf)
{
    /*
     * set by ngx_pcalloc():
     *
     *     conf->rules = NULL;
     */

    return ngx_pcalloc(cf->pool, sizeof(ngx_stream_ratelimit_bw_srv_conf_t));
}


/* rules are inherited only by a server that has none, as in http */

static char *
ngx_stream_ratelimit_bw_merge_srv_conf(ngx_conf_t *cf, void *parent,
    void *child)
{
    ngx_stream_ratelimit_bw_srv_conf_t  *prev = parent;
    ngx_stream_ratelimit_bw_srv_conf_t  *conf = child;

    if (conf->rules == NULL) {
        conf->rules = prev->rules;
    }

    return NGX_CONF_OK;
}


/*
 * ratelimit_bandwidth zone=Z key=K rate=R [burst=B] [after=A]
 *     [direction=in|out|both] [name=N];
 * ratelimit_bandwidth off;
 * in stream and server.
 */

static char *
ngx_stream_ratelimit_bandwidth(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_stream_ratelimit_bw_srv_conf_t *bscf = conf;

    char                                 *rv;
    ngx_stream_ratelimit_bw_rule_t       *rule, **ref;
    ngx_stream_ratelimit_bw_main_conf_t  *bmcf;

    rv = ngx_ratelimit_bw_directive(cf, &bscf->rules,
                                    sizeof(ngx_stream_ratelimit_bw_rule_t),
                                    (ngx_ratelimit_bw_rule_t **) &rule);
    if (rv != NGX_CONF_OK || rule == NULL) {
        return rv;
    }

    rule->key = ngx_stream_ratelimit_bw_value(cf, &rule->bw.key);
    if (rule->key == NULL) {
        return NGX_CONF_ERROR;
    }

    if (rule->bw.rate.len) {
        rule->rate = ngx_stream_ratelimit_bw_value(cf, &rule->bw.rate);
        if (rule->rate == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    bmcf = ngx_stream_conf_get_module_main_conf(cf,
                                        ngx_stream_ratelimit_bandwidth_module);
    ref = ngx_array_push(&bmcf->rules);
    if (ref == NULL) {
        return NGX_CONF_ERROR;
    }

    *ref = rule;

    return NGX_CONF_OK;
}


/* A value nginx evaluates for each session, compiled. */

static ngx_stream_complex_value_t *
ngx_stream_ratelimit_bw_value(ngx_conf_t *cf, ngx_str_t *value)
{
    ngx_stream_compile_complex_value_t  ccv;

    ngx_memzero(&ccv, sizeof(ngx_stream_compile_complex_value_t));
    ccv.cf = cf;
    ccv.value = value;
    ccv.complex_value = ngx_palloc(cf->pool,
                                   sizeof(ngx_stream_complex_value_t));
    if (ccv.complex_value == NULL
        || ngx_stream_compile_complex_value(&ccv) != NGX_OK)
    {
        return NULL;
    }

    return ccv.complex_value;
}


/* Once the configuration is read: each rule's zone checked
   (ngx_ratelimit_bw_check).  The filter is set only when a rule is. */

static ngx_int_t
ngx_stream_ratelimit_bw_init(ngx_conf_t *cf)
{
    ngx_uint_t                             i;
    ngx_stream_ratelimit_bw_rule_t       **rules;
    ngx_stream_ratelimit_bw_main_conf_t   *bmcf;

    bmcf = ngx_stream_conf_get_module_main_conf(cf,
                                        ngx_stream_ratelimit_bandwidth_module);
    rules = bmcf->rules.elts;

    for (i = 0; i < bmcf->rules.nelts; i++) {
        if (ngx_ratelimit_bw_check(cf, &rules[i]->bw, "stream") != NGX_OK) {
            return NGX_ERROR;
        }
    }

    if (bmcf->rules.nelts) {
        ngx_stream_next_filter = ngx_stream_top_filter;
        ngx_stream_top_filter = ngx_stream_ratelimit_bw_filter;
    }

    return NGX_OK;
}


/*
 * The filter: a direction's bytes held, and passed on as its slices are
 * granted.  The session's keys are read when its first bytes come, either
 * way.
 */

static ngx_int_t
ngx_stream_ratelimit_bw_filter(ngx_stream_session_t *s, ngx_chain_t *in,
    ngx_uint_t from_upstream)
{
    ngx_connection_t                    *c;
    ngx_stream_ratelimit_bw_ctx_t       *ctx;
    ngx_stream_ratelimit_bw_dir_t       *dir;
    ngx_stream_ratelimit_bw_srv_conf_t  *bscf;

    ctx = ngx_stream_get_module_ctx(s, ngx_stream_ratelimit_bandwidth_module);

    if (ctx == NULL) {
        bscf = ngx_stream_get_module_srv_conf(s,
                                        ngx_stream_ratelimit_bandwidth_module);

        if (bscf->rules == NULL || bscf->rules->nelts == 0 || in == NULL) {
            return ngx_stream_next_filter(s, in, from_upstream);
        }

        ctx = ngx_stream_ratelimit_bw_start(s, bscf);
        if (ctx == NULL) {
            return NGX_ERROR;
        }
    }

    dir = &ctx->dir[from_upstream ? 1 : 0];

    if (dir->flow.mask == 0) {
        return ngx_stream_next_filter(s, in, from_upstream);
    }

    c = from_upstream ? s->connection : s->upstream->peer.connection;

    if (in && ngx_chain_add_copy(c->pool, &dir->flow.in, in) != NGX_OK) {
        return NGX_ERROR;
    }

    if (dir->wake.timer_set) {
        /* its slice is not due yet */
        c->buffered |= NGX_STREAM_RATELIMIT_BANDWIDTH_BUFFERED;
        return NGX_AGAIN;
    }

    ngx_ratelimit_bw_awake(&dir->flow);

    return ngx_stream_ratelimit_bw_send(s, dir, c);
}


/* What the direction's slices allow passed on, and its next slice asked
   for while it holds bytes and the socket takes them. */

static ngx_int_t
ngx_stream_ratelimit_bw_send(ngx_stream_session_t *s,
    ngx_stream_ratelimit_bw_dir_t *dir, ngx_connection_t *c)
{
    ngx_int_t     rc;
    ngx_msec_t    delay;
    ngx_chain_t  *out, **last;

    for ( ;; ) {
        out = NULL;
        last = &out;

        if (ngx_ratelimit_bw_pass(c->pool, &dir->flow, &last) != NGX_OK) {
            return NGX_ERROR;
        }

        /* the write filter refuses to be called with nothing to write */

        if (out == NULL
            && !(c->buffered & ~NGX_STREAM_RATELIMIT_BANDWIDTH_BUFFERED))
        {
            rc = NGX_OK;

        } else {
            rc = ngx_stream_next_filter(s, out, dir->from_upstream);
            if (rc == NGX_ERROR) {
                return NGX_ERROR;
            }

            ngx_ratelimit_bw_sent(&dir->flow);
        }

        if (dir->flow.in == NULL) {
            c->buffered &= ~NGX_STREAM_RATELIMIT_BANDWIDTH_BUFFERED;
            return rc;
        }

        c->buffered |= NGX_STREAM_RATELIMIT_BANDWIDTH_BUFFERED;

        /* the next slice once what was passed is written: a peer that
           reads slowly reserves nothing it cannot take */

        if (rc == NGX_AGAIN) {
            return NGX_AGAIN;
        }

        if (ngx_ratelimit_bw_grant(&dir->flow, &delay) != NGX_OK) {
            ngx_add_timer(&dir->wake, delay);
            return NGX_AGAIN;
        }
    }
}


/* A session's context: its rules' keys and rates, counted in flight, and
   the directions each paces. */

static ngx_stream_ratelimit_bw_ctx_t *
ngx_stream_ratelimit_bw_start(ngx_stream_session_t *s,
    ngx_stream_ratelimit_bw_srv_conf_t *bscf)
{
    uint64_t                         rate;
    ngx_str_t                        key;
    ngx_uint_t                       i, k, d;
    ngx_buf_tag_t                    tag;
    ngx_pool_cleanup_t              *cln;
    ngx_stream_ratelimit_bw_ctx_t   *ctx;
    ngx_stream_ratelimit_bw_rule_t  *rules;

    ctx = ngx_pcalloc(s->connection->pool,
                      sizeof(ngx_stream_ratelimit_bw_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    ngx_stream_set_ctx(s, ctx, ngx_stream_ratelimit_bandwidth_module);

    tag = (ngx_buf_tag_t) &ngx_stream_ratelimit_bandwidth_module;
    rules = bscf->rules->elts;

    for (i = 0; i < bscf->rules->nelts; i++) {
        if (ngx_stream_complex_value(s, rules[i].key, &key) != NGX_OK) {
            return NULL;
        }

        if (key.len == 0) {
            continue;       /* exempt, as a request rule's empty key */
        }

        if (ngx_stream_ratelimit_bw_rate(s, &rules[i], &rate) != NGX_OK) {
            continue;
        }

        k = ngx_ratelimit_bw_add(&ctx->keys, &rules[i].bw, &key, rate);

        for (d = 0; d < 2; d++) {
            if (rules[i].bw.rule.direction == RL_BANDWIDTH_BOTH
                || rules[i].bw.rule.direction
                   == (d ? RL_BANDWIDTH_OUT : RL_BANDWIDTH_IN))
            {
                ngx_ratelimit_bw_flow_add(&ctx->dir[d].flow, &ctx->keys, k,
                                          tag);
            }
        }
    }

    if (ctx->keys.n == 0) {
        return ctx;
    }

    for (d = 0; d < 2; d++) {
        ctx->dir[d].session = s;
        ctx->dir[d].from_upstream = d;
        ctx->dir[d].flow.whole = (s->connection->type == SOCK_DGRAM);
        ctx->dir[d].wake.handler = ngx_stream_ratelimit_bw_wake;
        ctx->dir[d].wake.data = &ctx->dir[d];
        ctx->dir[d].wake.log = s->connection->log;
    }

    cln = ngx_pool_cleanup_add(s->connection->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    ngx_ratelimit_bw_open(&ctx->keys);

    cln->handler = ngx_stream_ratelimit_bw_cleanup;
    cln->data = ctx;

    return ctx;
}


/* A rule's rate for the session: NGX_DECLINED if rate=$var is no size
   (the rule does not apply; an empty value is a plan without a rate,
   said nowhere). */

static ngx_int_t
ngx_stream_ratelimit_bw_rate(ngx_stream_session_t *s,
    ngx_stream_ratelimit_bw_rule_t *rule, uint64_t *rate)
{
    ngx_str_t  value;

    *rate = rule->bw.rule.rate;

    if (rule->rate == NULL) {
        return NGX_OK;
    }

    if (ngx_stream_complex_value(s, rule->rate, &value) != NGX_OK) {
        return NGX_DECLINED;
    }

    if (rl_bandwidth_size((char *) value.data, value.len, rate) == RL_OK) {
        return NGX_OK;
    }

    if (value.len) {
        ngx_ratelimit_bw_log_bad(s->connection->log, &rule->bw, value.len);
    }

    return NGX_DECLINED;
}


/*
 * A direction's slice is due: its write event posted, so that the proxy
 * calls the filter again (it does while the connection is buffered).
 */

static void
ngx_stream_ratelimit_bw_wake(ngx_event_t *ev)
{
    ngx_connection_t               *c;
    ngx_stream_session_t           *s;
    ngx_stream_ratelimit_bw_dir_t  *dir;

    dir = ev->data;
    s = dir->session;

    c = dir->from_upstream ? s->connection
                           : (s->upstream ? s->upstream->peer.connection
                                          : NULL);

    if (c == NULL || c->write == NULL) {
        return;
    }

    ngx_post_event(c->write, &ngx_posted_events);
}


/* The session ends: its keys' connections, and what it was granted and
   did not send given back. */

static void
ngx_stream_ratelimit_bw_cleanup(void *data)
{
    ngx_stream_ratelimit_bw_ctx_t  *ctx = data;

    ngx_uint_t  d;

    for (d = 0; d < 2; d++) {
        if (ctx->dir[d].wake.timer_set) {
            ngx_del_timer(&ctx->dir[d].wake);
        }

        ngx_ratelimit_bw_awake(&ctx->dir[d].flow);
    }

    ngx_ratelimit_bw_close(&ctx->keys);
}
