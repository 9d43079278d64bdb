
/*
 * ngx-ratelimit: ratelimit_bandwidth, a byte rate per key shared by every
 * response of the key in flight, across connections, HTTP/2 streams and
 * workers (docs/algorithms.md, "Bandwidth").  A module of its own in the
 * same object: its directive, its body filter, its variable.
 *
 * The body filter passes a response on in slices the core grants
 * (rl_bandwidth_take, one locked call a slice in the key's zone): a slice
 * granted now is passed at once; one granted for later waits on the
 * connection's write timer, as limit_rate's wait does (the write event
 * delayed: ngx_http_writer resumes the response when it fires).  What the
 * filter holds it passes in pieces: buffers of its own over a part of the
 * original's bytes (memory or file), the original marked sent only once
 * its last piece is, so that an upstream's buffers are not reused early.
 */


#include "ngx_http_ratelimit_bandwidth.h"
#include "ngx_http_ratelimit_log.h"
#include "ngx_ratelimit_zone_conf.h"


/* c->buffered: the filter holds bytes (a bit no other module of nginx
   1.22 to 1.31 uses; the HTTP modules' range is 0xf0) */
#define NGX_HTTP_RATELIMIT_BANDWIDTH_BUFFERED  0x40

/* rules a location may have */
#define NGX_HTTP_RATELIMIT_BANDWIDTH_RULES     8


/* a rule: its zone, name, identity and log lines in common, as a
   request rule's (ngx_ratelimit_rule_t; its rl_rule_t unused) */
typedef struct {
    ngx_ratelimit_rule_t         common;
    ngx_http_complex_value_t    *key;
    ngx_http_complex_value_t    *rate;      /* rate=$var; NULL: rule.rate */
    rl_bandwidth_rule_t          rule;
    ngx_str_t                    zone_name;
    u_char                      *file;      /* where it is written */
    ngx_uint_t                   line;
} ngx_http_ratelimit_bw_rule_t;


typedef struct {
    ngx_array_t                 *rules;     /* ngx_http_ratelimit_bw_rule_t;
                                               NULL: not given here; empty:
                                               "off" */
} ngx_http_ratelimit_bw_loc_conf_t;


typedef struct {
    ngx_array_t                  rules;     /* every rule's pointer: the
                                               checks once the configuration
                                               is read, the key API */
} ngx_http_ratelimit_bw_main_conf_t;


/* a rule as applied to a request: its key's entry, its rate */
typedef struct {
    ngx_ratelimit_zone_t        *zone;
    uint64_t                     tag;
    uint64_t                     rate;
    uint64_t                     burst;
    char                        *name;      /* its rule's */
    int                          slot;      /* its counters, or -1 */
    unsigned                     waiting:1; /* its slice is not due yet */
} ngx_http_ratelimit_bw_key_t;


typedef struct {
    ngx_http_request_t          *request;
    ngx_chain_t                 *in;        /* held: bytes not yet passed */
    off_t                        offset;    /* of in->buf, passed already */
    ngx_chain_t                 *busy;      /* pieces passed, not yet sent */
    ngx_chain_t                 *free;      /* pieces to use again */
    uint64_t                     credit;    /* granted, not yet passed */
    uint64_t                     slice;
    uint64_t                     rate;      /* the tightest rule's, for
                                               $ratelimit_bandwidth_rate */
    ngx_uint_t                   nkeys;
    ngx_http_ratelimit_bw_key_t  keys[NGX_HTTP_RATELIMIT_BANDWIDTH_RULES];
    unsigned                     waiting:1; /* for a slice granted later */
} ngx_http_ratelimit_bw_ctx_t;


static char *ngx_http_ratelimit_bandwidth(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_ratelimit_bw_param(ngx_conf_t *cf,
    ngx_http_ratelimit_bw_rule_t *rule, ngx_str_t *value, ngx_str_t *key);
static ngx_http_complex_value_t *ngx_http_ratelimit_bw_value(ngx_conf_t *cf,
    ngx_str_t *value);
static void *ngx_http_ratelimit_bw_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_ratelimit_bw_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_ratelimit_bw_merge_loc_conf(ngx_conf_t *cf,
    void *parent, void *child);
static ngx_int_t ngx_http_ratelimit_bw_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_ratelimit_bw_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_ratelimit_bw_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_http_ratelimit_bw_ctx_t *ngx_http_ratelimit_bw_start(
    ngx_http_request_t *r, ngx_http_ratelimit_bw_loc_conf_t *blcf);
static void ngx_http_ratelimit_bw_log_bad(ngx_http_request_t *r,
    ngx_http_ratelimit_bw_rule_t *rule, size_t len);
static void ngx_http_ratelimit_bw_cleanup(void *data);
static ngx_int_t ngx_http_ratelimit_bw_grant(ngx_http_request_t *r,
    ngx_http_ratelimit_bw_ctx_t *ctx);
static ngx_int_t ngx_http_ratelimit_bw_pass(ngx_http_request_t *r,
    ngx_http_ratelimit_bw_ctx_t *ctx, ngx_chain_t ***last);
static void ngx_http_ratelimit_bw_sent(ngx_http_ratelimit_bw_ctx_t *ctx);
static void ngx_http_ratelimit_bw_awake(ngx_http_ratelimit_bw_ctx_t *ctx);
static ngx_int_t ngx_http_ratelimit_bw_rate_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


static ngx_command_t  ngx_http_ratelimit_bw_commands[] = {

    { ngx_string("ratelimit_bandwidth"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_ratelimit_bandwidth,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_ratelimit_bw_module_ctx = {
    ngx_http_ratelimit_bw_add_variables,   /* preconfiguration */
    ngx_http_ratelimit_bw_init,            /* postconfiguration */

    ngx_http_ratelimit_bw_create_main_conf, /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_ratelimit_bw_create_loc_conf, /* create location configuration */
    ngx_http_ratelimit_bw_merge_loc_conf   /* merge location configuration */
};


ngx_module_t  ngx_http_ratelimit_bandwidth_module = {
    NGX_MODULE_V1,
    &ngx_http_ratelimit_bw_module_ctx,     /* module context */
    ngx_http_ratelimit_bw_commands,        /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_http_output_body_filter_pt  ngx_http_next_body_filter;


static ngx_str_t  ngx_http_ratelimit_bw_rate_name =
    ngx_string("ratelimit_bandwidth_rate");


static void *
ngx_http_ratelimit_bw_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_ratelimit_bw_main_conf_t  *bmcf;

    bmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_ratelimit_bw_main_conf_t));
    if (bmcf == NULL) {
        return NULL;
    }

    if (ngx_array_init(&bmcf->rules, cf->pool, 4,
                       sizeof(ngx_http_ratelimit_bw_rule_t *))
        != NGX_OK)
    {
        return NULL;
    }

    return bmcf;
}


static void *
ngx_http_ratelimit_bw_create_loc_conf(ngx_conf_t *cf)
{
    /*
     * set by ngx_pcalloc():
     *
     *     conf->rules = NULL;
     */

    return ngx_pcalloc(cf->pool, sizeof(ngx_http_ratelimit_bw_loc_conf_t));
}


/* rules are inherited only by a level that has none, as limit_req's */

static char *
ngx_http_ratelimit_bw_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child)
{
    ngx_http_ratelimit_bw_loc_conf_t  *prev = parent;
    ngx_http_ratelimit_bw_loc_conf_t  *conf = child;

    if (conf->rules == NULL) {
        conf->rules = prev->rules;
    }

    return NGX_CONF_OK;
}


/*
 * ratelimit_bandwidth zone=Z key=K rate=R [burst=B] [name=N];
 * ratelimit_bandwidth off;
 */

static char *
ngx_http_ratelimit_bandwidth(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ratelimit_bw_loc_conf_t *blcf = conf;

    size_t                              n;
    ngx_str_t                          *value, key;
    ngx_uint_t                          i;
    ngx_http_ratelimit_bw_rule_t       *rule, **ref;
    ngx_http_ratelimit_bw_main_conf_t  *bmcf;
    char                                err[RL_ERR_MAX];

    value = cf->args->elts;

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "off") == 0) {
        if (blcf->rules != NULL) {
            return "is duplicate: \"off\" removes the inherited rules and "
                   "may not stand beside a rule";
        }

        blcf->rules = ngx_array_create(cf->pool, 1,
                                       sizeof(ngx_http_ratelimit_bw_rule_t));
        return blcf->rules ? NGX_CONF_OK : NGX_CONF_ERROR;
    }

    /* room for all at once: the main configuration points to them */

    if (blcf->rules == NULL) {
        blcf->rules = ngx_array_create(cf->pool,
                                       NGX_HTTP_RATELIMIT_BANDWIDTH_RULES,
                                       sizeof(ngx_http_ratelimit_bw_rule_t));
        if (blcf->rules == NULL) {
            return NGX_CONF_ERROR;
        }

    } else if (blcf->rules->nelts == 0) {
        return "is duplicate: \"off\" removes the inherited rules and "
               "may not stand beside a rule";
    }

    if (blcf->rules->nelts == NGX_HTTP_RATELIMIT_BANDWIDTH_RULES) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_bandwidth\" directive: more than %d "
                           "rules in one location",
                           NGX_HTTP_RATELIMIT_BANDWIDTH_RULES);
        return NGX_CONF_ERROR;
    }

    rule = ngx_array_push(blcf->rules);
    if (rule == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(rule, sizeof(ngx_http_ratelimit_bw_rule_t));
    rl_bandwidth_init(&rule->rule);
    rule->file = cf->conf_file->file.name.data;
    rule->line = cf->conf_file->line;
    ngx_str_null(&key);

    for (i = 1; i < cf->args->nelts; i++) {
        if (ngx_http_ratelimit_bw_param(cf, rule, &value[i], &key)
            != NGX_OK)
        {
            return NGX_CONF_ERROR;
        }
    }

    if (rule->zone_name.len == 0 || key.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_bandwidth\" directive: %s is "
                           "missing: expected zone=NAME key=$VARIABLE "
                           "rate=SIZE", rule->zone_name.len ? "key=" : "zone=");
        return NGX_CONF_ERROR;
    }

    if (rl_bandwidth_finish(&rule->rule, err, sizeof(err)) != RL_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_bandwidth\" directive: %s", err);
        return NGX_CONF_ERROR;
    }

    /* a rule of name= shares its keys wherever it is; one without, with
       the rules of the same key */

    n = (rule->rule.seen & RL_BANDWIDTH_NAMED) ? 0 : key.len;
    rule->common.identity = rl_bandwidth_identity(rule->rule.name,
                                                  (char *) key.data, n);
    rule->common.name.data = (u_char *) rule->rule.name;
    rule->common.name.len = ngx_strlen(rule->rule.name);

    rule->key = ngx_http_ratelimit_bw_value(cf, &key);
    if (rule->key == NULL) {
        return NGX_CONF_ERROR;
    }

    rule->common.shm_zone = ngx_shared_memory_add(cf, &rule->zone_name, 0,
                                                  &ngx_ratelimit_zone_tag);
    if (rule->common.shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    bmcf = ngx_http_conf_get_module_main_conf(cf,
                                          ngx_http_ratelimit_bandwidth_module);
    ref = ngx_array_push(&bmcf->rules);
    if (ref == NULL) {
        return NGX_CONF_ERROR;
    }

    *ref = rule;

    return NGX_CONF_OK;
}


/* One parameter: zone=, key=, rate=$var here; the rest the core reads. */

static ngx_int_t
ngx_http_ratelimit_bw_param(ngx_conf_t *cf, ngx_http_ratelimit_bw_rule_t *rule,
    ngx_str_t *value, ngx_str_t *key)
{
    ngx_str_t                          s;
    char                               err[RL_ERR_MAX];

    if (ngx_strncmp(value->data, "zone=", 5) == 0
        || ngx_strncmp(value->data, "key=", 4) == 0)
    {
        s.data = value->data[0] == 'z' ? value->data + 5 : value->data + 4;
        s.len = value->len - (s.data - value->data);

        if ((value->data[0] == 'z' ? rule->zone_name.len : key->len) != 0
            || s.len == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit_bandwidth\" directive: %s "
                               "\"%V\": expected one zone=NAME and one "
                               "key=$VARIABLE",
                               s.len ? "duplicate parameter" : "invalid",
                               value);
            return NGX_ERROR;
        }

        if (value->data[0] == 'k') {
            *key = s;
            return NGX_OK;
        }

        rule->zone_name = s;

        return ngx_ratelimit_zone_name(cf, "ratelimit_bandwidth",
                                       &rule->zone_name);
    }

    if (rl_bandwidth_param(&rule->rule, (char *) value->data, value->len,
                           err, sizeof(err))
        != RL_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_bandwidth\" directive: %s", err);
        return NGX_ERROR;
    }

    if (rule->rule.direction == RL_BANDWIDTH_IN) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_bandwidth\" directive: "
                           "\"direction=in\" is not supported: nginx reads "
                           "a request body whenever its socket is readable "
                           "and has no timer to resume the reading, so a "
                           "module cannot pace an upload; expected "
                           "\"direction=out\" (or none)");
        return NGX_ERROR;
    }

    if (!rule->rule.rate_varies || rule->rate != NULL
        || ngx_strncmp(value->data, "rate=", 5) != 0)
    {
        return NGX_OK;
    }

    s.data = value->data + 5;
    s.len = value->len - 5;

    rule->rate = ngx_http_ratelimit_bw_value(cf, &s);

    return rule->rate ? NGX_OK : NGX_ERROR;
}


/* A value nginx evaluates for each request, compiled. */

static ngx_http_complex_value_t *
ngx_http_ratelimit_bw_value(ngx_conf_t *cf, ngx_str_t *value)
{
    ngx_http_compile_complex_value_t  ccv;

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));
    ccv.cf = cf;
    ccv.value = value;
    ccv.complex_value = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (ccv.complex_value == NULL
        || ngx_http_compile_complex_value(&ccv) != NGX_OK)
    {
        return NULL;
    }

    return ccv.complex_value;
}


static ngx_int_t
ngx_http_ratelimit_bw_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var;

    var = ngx_http_add_variable(cf, &ngx_http_ratelimit_bw_rate_name,
                                NGX_HTTP_VAR_NOCACHEABLE);
    if (var == NULL) {
        return NGX_ERROR;
    }

    var->get_handler = ngx_http_ratelimit_bw_rate_variable;

    return NGX_OK;
}


/*
 * Once the configuration is read: each rule's zone is declared, and local
 * (a slice's grant is one locked call in shared memory; through Redis it
 * would be a round trip a slice).  The filter is set only when a rule is.
 */

static ngx_int_t
ngx_http_ratelimit_bw_init(ngx_conf_t *cf)
{
    ngx_uint_t                          i;
    ngx_ratelimit_zone_t               *zone;
    ngx_http_ratelimit_bw_rule_t      **rules;
    ngx_http_ratelimit_bw_main_conf_t  *bmcf;

    bmcf = ngx_http_conf_get_module_main_conf(cf,
                                          ngx_http_ratelimit_bandwidth_module);
    rules = bmcf->rules.elts;

    for (i = 0; i < bmcf->rules.nelts; i++) {
        zone = rules[i]->common.shm_zone->data;

        if (zone == NULL) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"ratelimit_bandwidth\" directive: zone=%V is not "
                          "declared: expected a \"ratelimit_zone %V SIZE;\" "
                          "in the http block, used in %s:%ui",
                          &rules[i]->zone_name, &rules[i]->zone_name,
                          rules[i]->file, rules[i]->line);
            return NGX_ERROR;
        }

        if (zone->redis != NULL || zone->sync != NULL) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"ratelimit_bandwidth\" directive: zone=%V is a "
                          "Redis zone: a bandwidth rule's key is granted a "
                          "slice at a time (ten a second at its rate), in "
                          "the zone's shared memory; through Redis each "
                          "would wait for a round trip; expected a local "
                          "zone (no redis=, no redis_sync=), used in %s:%ui",
                          &rules[i]->zone_name, rules[i]->file,
                          rules[i]->line);
            return NGX_ERROR;
        }
    }

    if (bmcf->rules.nelts) {
        ngx_http_next_body_filter = ngx_http_top_body_filter;
        ngx_http_top_body_filter = ngx_http_ratelimit_bw_body_filter;
    }

    return NGX_OK;
}


/*
 * The body filter: what comes is held, and passed on as slices are
 * granted; a slice granted for later waits on the write timer.
 */

static ngx_int_t
ngx_http_ratelimit_bw_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_int_t                          rc;
    ngx_chain_t                       *out, **last;
    ngx_connection_t                  *c;
    ngx_http_ratelimit_bw_ctx_t       *ctx;
    ngx_http_ratelimit_bw_loc_conf_t  *blcf;

    if (r != r->main) {
        return ngx_http_next_body_filter(r, in);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_ratelimit_bandwidth_module);

    if (ctx == NULL) {
        blcf = ngx_http_get_module_loc_conf(r,
                                          ngx_http_ratelimit_bandwidth_module);

        if (blcf->rules == NULL || blcf->rules->nelts == 0 || in == NULL) {
            return ngx_http_next_body_filter(r, in);
        }

        ctx = ngx_http_ratelimit_bw_start(r, blcf);
        if (ctx == NULL) {
            return NGX_ERROR;
        }
    }

    if (ctx->nkeys == 0) {
        return ngx_http_next_body_filter(r, in);
    }

    c = r->connection;

    if (in && ngx_chain_add_copy(r->pool, &ctx->in, in) != NGX_OK) {
        return NGX_ERROR;
    }

    if (c->write->delayed) {
        /* its slice is not due yet (or limit_rate waits) */
        c->buffered |= NGX_HTTP_RATELIMIT_BANDWIDTH_BUFFERED;
        return NGX_AGAIN;
    }

    ngx_http_ratelimit_bw_awake(ctx);

    for ( ;; ) {
        out = NULL;
        last = &out;

        if (ngx_http_ratelimit_bw_pass(r, ctx, &last) != NGX_OK) {
            return NGX_ERROR;
        }

        if (out == NULL && r->out == NULL && r->buffered == 0
            && !(c->buffered & ~NGX_HTTP_RATELIMIT_BANDWIDTH_BUFFERED))
        {
            rc = NGX_OK;    /* nothing below to write */

        } else {
            rc = ngx_http_next_body_filter(r, out);
            if (rc == NGX_ERROR) {
                return NGX_ERROR;
            }

            ngx_http_ratelimit_bw_sent(ctx);
        }

        if (ctx->in == NULL) {
            c->buffered &= ~NGX_HTTP_RATELIMIT_BANDWIDTH_BUFFERED;
            return rc;
        }

        c->buffered |= NGX_HTTP_RATELIMIT_BANDWIDTH_BUFFERED;

        /* the next slice once what was passed is written: a client that
           reads slowly reserves nothing it cannot take */

        if (rc == NGX_AGAIN || c->write->delayed) {
            return NGX_AGAIN;
        }

        rc = ngx_http_ratelimit_bw_grant(r, ctx);
        if (rc != NGX_OK) {
            return rc;
        }
    }
}


/* A request's context: its rules' keys and rates, counted in flight. */

static ngx_http_ratelimit_bw_ctx_t *
ngx_http_ratelimit_bw_start(ngx_http_request_t *r,
    ngx_http_ratelimit_bw_loc_conf_t *blcf)
{
    int64_t                        now_us;
    uint64_t                       rate;
    ngx_str_t                      key, value;
    ngx_uint_t                     i;
    ngx_time_t                    *tp;
    ngx_pool_cleanup_t            *cln;
    ngx_ratelimit_zone_t          *zone;
    ngx_http_ratelimit_bw_ctx_t   *ctx;
    ngx_http_ratelimit_bw_key_t   *k;
    ngx_http_ratelimit_bw_rule_t  *rules;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_ratelimit_bw_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    ctx->request = r;
    ngx_http_set_ctx(r, ctx, ngx_http_ratelimit_bandwidth_module);

    rules = blcf->rules->elts;

    for (i = 0; i < blcf->rules->nelts; i++) {
        if (ngx_http_complex_value(r, rules[i].key, &key) != NGX_OK) {
            return NULL;
        }

        if (key.len == 0) {
            continue;       /* exempt, as a request rule's empty key */
        }

        rate = rules[i].rule.rate;

        if (rules[i].rate != NULL) {
            if (ngx_http_complex_value(r, rules[i].rate, &value) != NGX_OK) {
                return NULL;
            }

            /* a value that is no rate: the rule does not apply (an empty
               one is a plan without a rate, said nowhere) */

            if (rl_bandwidth_size((char *) value.data, value.len, &rate)
                != RL_OK)
            {
                if (value.len) {
                    ngx_http_ratelimit_bw_log_bad(r, &rules[i], value.len);
                }

                continue;
            }
        }

        zone = rules[i].common.shm_zone->data;
        k = &ctx->keys[ctx->nkeys++];
        k->zone = zone;
        k->tag = rl_table_tag(zone->table, rules[i].common.identity, key.data,
                              key.len);
        k->rate = rate;
        k->burst = rules[i].rule.burst;
        k->name = rules[i].rule.name;

        if (ctx->rate == 0 || rate < ctx->rate) {
            ctx->rate = rate;
        }
    }

    if (ctx->nkeys == 0) {
        return ctx;
    }

    ctx->slice = rl_bandwidth_slice(ctx->rate);

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    tp = ngx_timeofday();
    now_us = (int64_t) tp->sec * 1000000 + tp->msec * 1000;

    for (i = 0; i < ctx->nkeys; i++) {
        k = &ctx->keys[i];

        ngx_shmtx_lock(&k->zone->shpool->mutex);
        k->slot = rl_table_rule_slot(k->zone->table, k->name);
        rl_bandwidth_open(k->zone->table, k->slot, k->tag, now_us);
        ngx_shmtx_unlock(&k->zone->shpool->mutex);
    }

    cln->handler = ngx_http_ratelimit_bw_cleanup;
    cln->data = ctx;

    return ctx;
}


/*
 * A request's rate= that is no size, at warn, folded as a request rule's
 * bad values are (ngx_ratelimit_log_bad): its length only, the value is
 * the client's.
 */

static void
ngx_http_ratelimit_bw_log_bad(ngx_http_request_t *r,
    ngx_http_ratelimit_bw_rule_t *rule, size_t len)
{
    ngx_log_t  log;
    u_char     what[128];

    ngx_snprintf(what, sizeof(what),
                 "rate= is not a size (its %uz bytes): the bandwidth rule "
                 "does not apply to the request%Z", len);

    ngx_ratelimit_log_bad(ngx_http_ratelimit_request_log(r, &log),
                          &rule->common, (const char *) what);
}


/* The request ends: its keys' connections, and what it was granted and
   did not send given back. */

static void
ngx_http_ratelimit_bw_cleanup(void *data)
{
    ngx_http_ratelimit_bw_ctx_t  *ctx = data;

    int64_t                       now_us;
    ngx_uint_t                    i;
    ngx_time_t                   *tp;
    ngx_http_ratelimit_bw_key_t  *k;

    tp = ngx_timeofday();
    now_us = (int64_t) tp->sec * 1000000 + tp->msec * 1000;

    ngx_http_ratelimit_bw_awake(ctx);

    for (i = 0; i < ctx->nkeys; i++) {
        k = &ctx->keys[i];

        ngx_shmtx_lock(&k->zone->shpool->mutex);
        rl_bandwidth_close(k->zone->table, k->slot, k->tag, now_us,
                           ctx->credit, k->rate);
        ngx_shmtx_unlock(&k->zone->shpool->mutex);
    }
}


/*
 * A slice of every rule's key: passed now, or its wait set on the write
 * timer (the longest of the rules': a slice goes when all grant it).
 */

static ngx_int_t
ngx_http_ratelimit_bw_grant(ngx_http_request_t *r,
    ngx_http_ratelimit_bw_ctx_t *ctx)
{
    off_t                         held;
    int64_t                       now_us, wait, w;
    uint64_t                      want;
    ngx_msec_t                    delay;
    ngx_uint_t                    i;
    ngx_time_t                   *tp;
    ngx_chain_t                  *cl;
    ngx_http_ratelimit_bw_key_t  *k;

    held = -ctx->offset;
    for (cl = ctx->in; cl; cl = cl->next) {
        held += ngx_buf_size(cl->buf);
    }

    want = ((uint64_t) held < ctx->slice && held > 0) ? (uint64_t) held
                                                      : ctx->slice;

    /* the time now, not the event loop's cached one: a slice's due time
       is a fraction of a second */

    ngx_time_update();
    tp = ngx_timeofday();
    now_us = (int64_t) tp->sec * 1000000 + tp->msec * 1000;
    wait = 0;

    for (i = 0; i < ctx->nkeys; i++) {
        k = &ctx->keys[i];

        ngx_shmtx_lock(&k->zone->shpool->mutex);
        w = rl_bandwidth_take(k->zone->table, k->slot, k->tag, now_us, want,
                              k->rate, k->burst);
        ngx_shmtx_unlock(&k->zone->shpool->mutex);

        if (w > wait) {
            wait = w;
        }

        /* the rule's delayed connections: those its own grant delays */

        if (w > 0) {
            k->waiting = 1;
            rl_bandwidth_count_delayed(k->zone->table, k->slot, 1);
        }
    }

    ctx->credit += want;

    if (wait == 0) {
        return NGX_OK;
    }

    /* rounded up: a slice never goes before it is due */

    delay = (ngx_msec_t) ((wait + 999) / 1000);

    r->connection->write->delayed = 1;
    ngx_add_timer(r->connection->write, delay);

    ctx->waiting = 1;

    return NGX_AGAIN;
}


/* The slice waited for is due (or the request ends): its rules' delayed
   connections one fewer. */

static void
ngx_http_ratelimit_bw_awake(ngx_http_ratelimit_bw_ctx_t *ctx)
{
    ngx_uint_t  i;

    if (!ctx->waiting) {
        return;
    }

    ctx->waiting = 0;

    for (i = 0; i < ctx->nkeys; i++) {
        if (ctx->keys[i].waiting) {
            ctx->keys[i].waiting = 0;
            rl_bandwidth_count_delayed(ctx->keys[i].zone->table,
                                       ctx->keys[i].slot, -1);
        }
    }
}


/*
 * What the credit allows of what is held, appended to *last: pieces of the
 * held buffers (the last piece of one carries its flags and, as its shadow,
 * the original, marked sent once the piece is), and buffers of no bytes
 * (flush, last) as they are.
 */

static ngx_int_t
ngx_http_ratelimit_bw_pass(ngx_http_request_t *r,
    ngx_http_ratelimit_bw_ctx_t *ctx, ngx_chain_t ***last)
{
    off_t         size, n;
    ngx_buf_t    *b, *p;
    ngx_chain_t  *cl, *piece;

    while (ctx->in) {
        cl = ctx->in;
        b = cl->buf;
        size = ngx_buf_size(b) - ctx->offset;

        if (ngx_buf_special(b)) {
            ctx->in = cl->next;
            cl->next = NULL;
            **last = cl;
            *last = &cl->next;
            continue;
        }

        if (ctx->credit == 0) {
            return NGX_OK;
        }

        n = (off_t) ctx->credit < size ? (off_t) ctx->credit : size;

        piece = ngx_chain_get_free_buf(r->pool, &ctx->free);
        if (piece == NULL) {
            return NGX_ERROR;
        }

        p = piece->buf;
        *p = *b;
        p->tag = (ngx_buf_tag_t) &ngx_http_ratelimit_bandwidth_module;
        p->shadow = NULL;

        if (ngx_buf_in_memory(b)) {
            p->pos = b->pos + ctx->offset;
            p->last = p->pos + n;
        }

        if (b->in_file) {
            p->file_pos = b->file_pos + ctx->offset;
            p->file_last = p->file_pos + n;
        }

        ctx->credit -= n;

        if (n < size) {
            /* the original goes on: its flags with its last piece */
            p->last_buf = 0;
            p->last_in_chain = 0;
            p->flush = 0;
            p->sync = 0;
            ctx->offset += n;

        } else {
            p->shadow = b;
            ctx->offset = 0;
            ctx->in = cl->next;
        }

        piece->next = NULL;
        **last = piece;
        *last = &piece->next;

        /* the pieces passed, in order, until they are sent */

        cl = ngx_alloc_chain_link(r->pool);
        if (cl == NULL) {
            return NGX_ERROR;
        }

        cl->buf = p;
        cl->next = ctx->busy;
        ctx->busy = cl;
    }

    return NGX_OK;
}


/* Pieces written: the originals of the last ones marked sent, and the
   pieces kept to use again. */

static void
ngx_http_ratelimit_bw_sent(ngx_http_ratelimit_bw_ctx_t *ctx)
{
    ngx_buf_t    *b;
    ngx_chain_t  *cl, **ll;

    for (ll = &ctx->busy; *ll; /* void */) {
        cl = *ll;

        if (ngx_buf_size(cl->buf) != 0) {
            ll = &cl->next;
            continue;
        }

        b = cl->buf->shadow;

        if (b != NULL) {
            b->pos = b->last;
            b->file_pos = b->file_last;
        }

        *ll = cl->next;

        /* the link and its buffer: the free list's, as
           ngx_chain_get_free_buf takes them */
        cl->next = ctx->free;
        ctx->free = cl;
    }
}


/*
 * The key API: whether a zone has a bandwidth rule of a name, and a key's
 * states in the zone's bandwidth rules, pushed after its request rules'
 * (rl_key_state_t, bandwidth set; read by rl_bandwidth_peek): each rule
 * naming the zone once (rules of one identity share the key's entry), or
 * the rule asked.  A fingerprint is one rule's key: it is shown in the
 * first bandwidth rule only when no request rule showed it.
 */

static ngx_http_ratelimit_bw_rule_t *
ngx_http_ratelimit_bw_zone_rule(ngx_ratelimit_zone_t *zone, ngx_str_t *name,
    ngx_uint_t *i)
{
    ngx_http_ratelimit_bw_rule_t       **rules;
    ngx_http_ratelimit_bw_main_conf_t   *bmcf;

    bmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                          ngx_http_ratelimit_bandwidth_module);
    if (bmcf == NULL) {
        return NULL;
    }

    rules = bmcf->rules.elts;

    for ( /* void */ ; *i < bmcf->rules.nelts; (*i)++) {
        if (rules[*i]->common.shm_zone->data == zone
            && (name->len == 0
                || (rules[*i]->common.name.len == name->len
                    && ngx_strncmp(rules[*i]->common.name.data, name->data,
                                   name->len) == 0)))
        {
            return rules[(*i)++];
        }
    }

    return NULL;
}


ngx_uint_t
ngx_http_ratelimit_bandwidth_rule(ngx_ratelimit_zone_t *zone,
    ngx_str_t *name)
{
    ngx_uint_t  i;

    i = 0;

    return ngx_http_ratelimit_bw_zone_rule(zone, name, &i) != NULL;
}


ngx_int_t
ngx_http_ratelimit_bandwidth_states(ngx_ratelimit_zone_t *zone,
    rl_api_request_t *in, ngx_array_t *states)
{
    ngx_str_t                      asked;
    ngx_uint_t                     i, j, first;
    rl_key_state_t                *st, *seen;
    ngx_http_ratelimit_bw_rule_t  *rule;

    asked.data = (u_char *) in->rule;
    asked.len = in->rule_len;
    first = states->nelts;
    i = 0;

    while ((rule = ngx_http_ratelimit_bw_zone_rule(zone, &asked, &i))) {

        if (in->has_fingerprint && states->nelts > 0) {
            break;
        }

        seen = states->elts;

        for (j = first; j < states->nelts; j++) {
            if (((ngx_ratelimit_rule_t *) seen[j].data)->identity
                == rule->common.identity)
            {
                break;
            }
        }

        if (j < states->nelts) {
            continue;
        }

        st = ngx_array_push(states);
        if (st == NULL) {
            return NGX_ERROR;
        }

        ngx_memzero(st, sizeof(rl_key_state_t));
        st->data = &rule->common;
        st->rule = ngx_ratelimit_rl_str(&rule->common.name);
        st->bandwidth = 1;
        st->rate = rule->rate ? 0 : rule->rule.rate;
        st->burst = rule->rule.burst;
        st->tag = in->has_fingerprint
                  ? in->fingerprint
                  : rl_table_tag(zone->table, rule->common.identity,
                                 in->key, in->key_len);
    }

    return NGX_OK;
}


/* $ratelimit_bandwidth_rate: bytes a second the request was given (its
   tightest rule's); empty when no rule applies. */

static ngx_int_t
ngx_http_ratelimit_bw_rate_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                       *p;
    ngx_http_ratelimit_bw_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r->main,
                                  ngx_http_ratelimit_bandwidth_module);

    if (ctx == NULL || ctx->nkeys == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%uL", ctx->rate) - p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = p;

    return NGX_OK;
}
