
/*
 * ngx-ratelimit: the ratelimit directive in the stream block: a rule read
 * as in the http block (zone/ngx_ratelimit_rule.c: the core parses its
 * parameters, zone= and key= are the shared glue's), its key and its
 * cost=, limit= and burst= compiled as stream values; "ratelimit off".  A
 * rule whose values read a $ssl_ variable is decided late, once ssl and
 * ssl_preread ran (ngx_stream_ratelimit_handler.c).
 */


#include "ngx_stream_ratelimit_rule_conf.h"
#include "ngx_ratelimit_rule.h"


static ngx_int_t ngx_stream_ratelimit_param(ngx_conf_t *cf,
    ngx_ratelimit_rule_t *common, ngx_str_t *value);
static ngx_stream_complex_value_t *ngx_stream_ratelimit_compile(
    ngx_conf_t *cf, ngx_stream_ratelimit_rule_t *rule, ngx_str_t *value);
static ngx_uint_t ngx_stream_ratelimit_reads_ssl(ngx_str_t *value);


/*
 * ratelimit zone=NAME [key=STRING] [cost=N|$var] [limit=N|$var] ...;
 * ratelimit off;
 * in stream and server.
 */

char *
ngx_stream_ratelimit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_stream_ratelimit_srv_conf_t *rscf = conf;

    ngx_str_t                          *value, zone, key;
    ngx_stream_ratelimit_rule_t        *rule;
    ngx_stream_ratelimit_main_conf_t   *rmcf;

    static ngx_str_t  default_key = ngx_string("$binary_remote_addr");

    value = cf->args->elts;

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "off") == 0) {
        return ngx_ratelimit_rule_off(cf, &rscf->rules, &rscf->off,
                                      sizeof(ngx_stream_ratelimit_rule_t));
    }

    rule = ngx_ratelimit_rule_new(cf, &rscf->rules, rscf->off,
                                  sizeof(ngx_stream_ratelimit_rule_t));
    if (rule == NULL) {
        return NGX_CONF_ERROR;
    }

    if (ngx_ratelimit_rule_read(cf, &rule->common, &zone, &key,
                                ngx_stream_ratelimit_param)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (key.data == NULL) {
        key = default_key;
    }

    ngx_ratelimit_rule_unkeyed(cf, &rule->common, &key,
                               ngx_stream_script_variables_count(&key));

    rule->key = ngx_stream_ratelimit_compile(cf, rule, &key);
    if (rule->key == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_ratelimit_rule_key(&rule->common, &key);

    rmcf = ngx_stream_conf_get_module_main_conf(cf,
                                                ngx_stream_ratelimit_module);

    if (ngx_ratelimit_rule_zone(cf, &rmcf->common, &rule->common, &zone,
                                &rscf->rules)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (rule->late) {
        rscf->late = 1;
    }

    if (rl_rule_holds_slots(&rule->common.rule)) {
        rscf->ends = 1;
    }

    return NGX_CONF_OK;
}


/*
 * A parameter the core declined that is the stream module's: cost=,
 * limit= or burst= with a $variable, compiled.  charge= settles what a
 * request turned out to cost as it ends: a session has no such end here;
 * priority= and fair= order HTTP requests only.
 */

static ngx_int_t
ngx_stream_ratelimit_param(ngx_conf_t *cf, ngx_ratelimit_rule_t *common,
    ngx_str_t *value)
{
    ngx_str_t                     s;
    ngx_stream_ratelimit_rule_t  *rule;
    ngx_stream_complex_value_t  **cv;

    rule = (ngx_stream_ratelimit_rule_t *) common;

    if (ngx_strncmp(value->data, "charge=", 7) == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit\" directive: \"%V\" in the stream "
                           "block: charge= is for HTTP requests; expected "
                           "cost=N or cost=$variable, counted as a "
                           "session starts", value);
        return NGX_ERROR;
    }

    if (ngx_strncmp(value->data, "priority=", 9) == 0
        || ngx_strncmp(value->data, "fair=", 5) == 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit\" directive: \"%V\" in the stream "
                           "block: priority classes and fair shares are for "
                           "HTTP requests; a session takes its slot by "
                           "arrival", value);
        return NGX_ERROR;
    }

    s.data = ngx_strlchr(value->data, value->data + value->len, '=') + 1;
    s.len = value->data + value->len - s.data;

    cv = value->data[0] == 'c' ? &rule->cost
         : value->data[0] == 'l' ? &rule->limit : &rule->burst;

    if (cv == &rule->cost) {
        rule->common.cost_varies = 1;
    }

    *cv = ngx_stream_ratelimit_compile(cf, rule, &s);

    return *cv ? NGX_OK : NGX_ERROR;
}


/* A value compiled; one that reads $ssl_* makes its rule late. */

static ngx_stream_complex_value_t *
ngx_stream_ratelimit_compile(ngx_conf_t *cf,
    ngx_stream_ratelimit_rule_t *rule, ngx_str_t *value)
{
    ngx_stream_complex_value_t          *cv;
    ngx_stream_compile_complex_value_t   ccv;

    cv = ngx_palloc(cf->pool, sizeof(ngx_stream_complex_value_t));
    if (cv == NULL) {
        return NULL;
    }

    ngx_memzero(&ccv, sizeof(ngx_stream_compile_complex_value_t));
    ccv.cf = cf;
    ccv.value = value;
    ccv.complex_value = cv;

    if (ngx_stream_compile_complex_value(&ccv) != NGX_OK) {
        return NULL;
    }

    if (ngx_stream_ratelimit_reads_ssl(value)) {
        rule->late = 1;
    }

    return cv;
}


/*
 * Whether a value names a variable of ssl or ssl_preread ($ssl_..., or
 * ${ssl_...}): known only once the handshake or the ClientHello is read.
 * Read earlier, ssl_preread's are empty for the whole session.
 */

static ngx_uint_t
ngx_stream_ratelimit_reads_ssl(ngx_str_t *value)
{
    u_char  *p, *last;

    last = value->data + value->len;

    for (p = value->data; p < last; p++) {
        if (*p != '$') {
            continue;
        }

        if (last - p > 5 && ngx_strncmp(p + 1, "ssl_", 4) == 0) {
            return 1;
        }

        if (last - p > 6 && ngx_strncmp(p + 1, "{ssl_", 5) == 0) {
            return 1;
        }
    }

    return 0;
}
