
/*
 * ngx-ratelimit: ratelimit_bandwidth, a byte rate per key shared by every
 * response of the key in flight, across connections, HTTP/2 streams and
 * workers (docs/algorithms.md, "Bandwidth").  A module of its own in the
 * same object: its directive, its body filter, its variable.
 *
 * The body filter passes a response on in slices the core grants, as a
 * flow of zone/ngx_ratelimit_bandwidth.c (which holds what HTTP and stream
 * share: the rule's parameters, the grants, the pieces passed): a slice
 * granted now is passed at once; one granted for later waits on the
 * connection's write timer, as limit_rate's wait does (the write event
 * delayed: ngx_http_writer resumes the response when it fires).
 */


#include "ngx_http_ratelimit_bandwidth.h"
#include "ngx_http_ratelimit_log.h"
#include "ngx_ratelimit_bandwidth.h"


/* c->buffered: the filter holds bytes (a bit no other module of nginx
   1.22 to 1.31 uses; the HTTP modules' range is 0xf0) */
#define NGX_HTTP_RATELIMIT_BANDWIDTH_BUFFERED  0x40


/* a rule: the part any protocol's is (zone/ngx_ratelimit_bandwidth.h), and
   its values compiled */
typedef struct {
    ngx_ratelimit_bw_rule_t      bw;
    ngx_http_complex_value_t    *key;
    ngx_http_complex_value_t    *rate;      /* rate=$var; NULL: rule.rate */
} ngx_http_ratelimit_bw_rule_t;


typedef struct {
    ngx_array_t                 *rules;     /* ngx_http_ratelimit_bw_rule_t;
                                               NULL: not given here; empty:
                                               "off" */
} ngx_http_ratelimit_bw_loc_conf_t;


typedef struct {
    ngx_array_t                  rules;     /* every rule's pointer: the
                                               checks once the configuration
                                               is read */
} ngx_http_ratelimit_bw_main_conf_t;


typedef struct {
    ngx_http_request_t          *request;
    ngx_ratelimit_bw_keys_t      keys;
    ngx_ratelimit_bw_flow_t      flow;
} ngx_http_ratelimit_bw_ctx_t;


static char *ngx_http_ratelimit_bandwidth(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
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
static void ngx_http_ratelimit_bw_cleanup(void *data);
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
 * ratelimit_bandwidth zone=Z key=K rate=R [burst=B] [after=A] [name=N];
 * ratelimit_bandwidth off;
 */

static char *
ngx_http_ratelimit_bandwidth(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ratelimit_bw_loc_conf_t *blcf = conf;

    char                               *rv;
    ngx_http_ratelimit_bw_rule_t       *rule, **ref;
    ngx_http_ratelimit_bw_main_conf_t  *bmcf;

    rv = ngx_ratelimit_bw_directive(cf, &blcf->rules,
                                    sizeof(ngx_http_ratelimit_bw_rule_t),
                                    (ngx_ratelimit_bw_rule_t **) &rule);
    if (rv != NGX_CONF_OK || rule == NULL) {
        return rv;
    }

    if (rule->bw.rule.direction != RL_BANDWIDTH_OUT) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_bandwidth\" directive: "
                           "\"direction=%s\" is not supported: nginx reads "
                           "a request body whenever its socket is readable "
                           "and has no timer to resume the reading, so a "
                           "module cannot pace an upload; expected "
                           "\"direction=out\" (or none)",
                           rule->bw.rule.direction == RL_BANDWIDTH_IN
                           ? "in" : "both");
        return NGX_CONF_ERROR;
    }

    rule->key = ngx_http_ratelimit_bw_value(cf, &rule->bw.key);
    if (rule->key == NULL) {
        return NGX_CONF_ERROR;
    }

    if (rule->bw.rate.len) {
        rule->rate = ngx_http_ratelimit_bw_value(cf, &rule->bw.rate);
        if (rule->rate == NULL) {
            return NGX_CONF_ERROR;
        }
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


/* Once the configuration is read: each rule's zone checked
   (ngx_ratelimit_bw_check).  The filter is set only when a rule is. */

static ngx_int_t
ngx_http_ratelimit_bw_init(ngx_conf_t *cf)
{
    ngx_uint_t                          i;
    ngx_http_ratelimit_bw_rule_t      **rules;
    ngx_http_ratelimit_bw_main_conf_t  *bmcf;

    bmcf = ngx_http_conf_get_module_main_conf(cf,
                                          ngx_http_ratelimit_bandwidth_module);
    rules = bmcf->rules.elts;

    for (i = 0; i < bmcf->rules.nelts; i++) {
        if (ngx_ratelimit_bw_check(cf, &rules[i]->bw, "http") != NGX_OK) {
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
    ngx_msec_t                         delay;
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

    if (ctx->keys.n == 0) {
        return ngx_http_next_body_filter(r, in);
    }

    c = r->connection;

    if (in && ngx_chain_add_copy(r->pool, &ctx->flow.in, in) != NGX_OK) {
        return NGX_ERROR;
    }

    if (c->write->delayed) {
        /* its slice is not due yet (or limit_rate waits) */
        c->buffered |= NGX_HTTP_RATELIMIT_BANDWIDTH_BUFFERED;
        return NGX_AGAIN;
    }

    ngx_ratelimit_bw_awake(&ctx->flow);

    for ( ;; ) {
        out = NULL;
        last = &out;

        if (ngx_ratelimit_bw_pass(r->pool, &ctx->flow, &last) != NGX_OK) {
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

            ngx_ratelimit_bw_sent(&ctx->flow);
        }

        if (ctx->flow.in == NULL) {
            c->buffered &= ~NGX_HTTP_RATELIMIT_BANDWIDTH_BUFFERED;
            return rc;
        }

        c->buffered |= NGX_HTTP_RATELIMIT_BANDWIDTH_BUFFERED;

        /* the next slice once what was passed is written: a client that
           reads slowly reserves nothing it cannot take */

        if (rc == NGX_AGAIN || c->write->delayed) {
            return NGX_AGAIN;
        }

        if (ngx_ratelimit_bw_grant(&ctx->flow, &delay) != NGX_OK) {
            c->write->delayed = 1;
            ngx_add_timer(c->write, delay);
            return NGX_AGAIN;
        }
    }
}


/* A request's context: its rules' keys and rates, counted in flight. */

static ngx_http_ratelimit_bw_ctx_t *
ngx_http_ratelimit_bw_start(ngx_http_request_t *r,
    ngx_http_ratelimit_bw_loc_conf_t *blcf)
{
    uint64_t                       rate;
    ngx_str_t                      key, value;
    ngx_uint_t                     i;
    ngx_log_t                      log;
    ngx_pool_cleanup_t            *cln;
    ngx_http_ratelimit_bw_ctx_t   *ctx;
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

        rate = rules[i].bw.rule.rate;

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
                    ngx_ratelimit_bw_log_bad(
                        ngx_http_ratelimit_request_log(r, &log),
                        &rules[i].bw, value.len);
                }

                continue;
            }
        }

        ngx_ratelimit_bw_flow_add(&ctx->flow, &ctx->keys,
                                  ngx_ratelimit_bw_add(&ctx->keys,
                                                       &rules[i].bw, &key,
                                                       rate),
                                  (ngx_buf_tag_t)
                                      &ngx_http_ratelimit_bandwidth_module);
    }

    if (ctx->keys.n == 0) {
        return ctx;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    ngx_ratelimit_bw_open(&ctx->keys);

    cln->handler = ngx_http_ratelimit_bw_cleanup;
    cln->data = ctx;

    return ctx;
}


/* The request ends: its keys' connections, and what it was granted and
   did not send given back. */

static void
ngx_http_ratelimit_bw_cleanup(void *data)
{
    ngx_http_ratelimit_bw_ctx_t  *ctx = data;

    ngx_ratelimit_bw_awake(&ctx->flow);
    ngx_ratelimit_bw_close(&ctx->keys);
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

    if (ctx == NULL || ctx->keys.n == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%uL", ctx->flow.rate) - p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = p;

    return NGX_OK;
}
