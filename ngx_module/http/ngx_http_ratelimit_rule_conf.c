
/*
 * ngx-ratelimit: the ratelimit directive in the http block: a rule read
 * (the core parses and checks its parameters, rl_rule_parse; the glue's
 * own are its zone and key, zone/ngx_ratelimit_rule.c's, and the nginx
 * values of cost=, limit=, burst= and charge=), its key compiled;
 * "ratelimit off".  The zones are checked once the whole configuration is
 * read (ngx_ratelimit_zone_conf.c).
 */


#include "ngx_http_ratelimit_rule_conf.h"
#include "ngx_ratelimit_rule.h"


static ngx_int_t ngx_http_ratelimit_glue_param(ngx_conf_t *cf,
    ngx_ratelimit_rule_t *common, ngx_str_t *value);
static ngx_int_t ngx_http_ratelimit_compile_key(ngx_conf_t *cf,
    ngx_http_ratelimit_rule_t *rule, ngx_str_t *key);
static ngx_int_t ngx_http_ratelimit_rule_key(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *rlcf, ngx_http_ratelimit_rule_t *rule,
    ngx_str_t *key);
static int32_t ngx_http_ratelimit_variable_index(ngx_conf_t *cf,
    ngx_str_t *value);
static ngx_int_t ngx_http_ratelimit_rule_zone(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *rlcf, ngx_http_ratelimit_rule_t *rule,
    ngx_str_t *zone);


/*
 * ratelimit zone=NAME [key=STRING] [cost=N|$var] [limit=N|$var] ...;
 * ratelimit off;
 * zone=, key= and variables are the glue's; the core parses the rest.
 */

char *
ngx_http_ratelimit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ratelimit_loc_conf_t *rlcf = conf;

    ngx_str_t                  *value, zone, key;
    ngx_http_ratelimit_rule_t  *rule;

    static ngx_str_t  default_key = ngx_string("$binary_remote_addr");

    value = cf->args->elts;

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "off") == 0) {
        return ngx_ratelimit_rule_off(cf, &rlcf->rules, &rlcf->off,
                                      sizeof(ngx_http_ratelimit_rule_t));
    }

    rule = ngx_ratelimit_rule_new(cf, &rlcf->rules, rlcf->off,
                                  sizeof(ngx_http_ratelimit_rule_t));
    if (rule == NULL) {
        return NGX_CONF_ERROR;
    }

    if (ngx_ratelimit_rule_read(cf, &rule->common, &zone, &key,
                                ngx_http_ratelimit_glue_param)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (key.data == NULL) {
        key = default_key;
    }

    if (ngx_http_ratelimit_rule_key(cf, rlcf, rule, &key) != NGX_OK
        || ngx_http_ratelimit_rule_zone(cf, rlcf, rule, &zone) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * A parameter the core declined that is HTTP's: one whose value nginx
 * evaluates (charge=, priority=, fair=, cost=, limit= or burst= with a
 * $variable), compiled.
 */

static ngx_int_t
ngx_http_ratelimit_glue_param(ngx_conf_t *cf, ngx_ratelimit_rule_t *common,
    ngx_str_t *value)
{
    int32_t                            index;
    ngx_str_t                          s;
    ngx_http_ratelimit_rule_t         *rule;
    ngx_http_complex_value_t         **cv;
    ngx_http_compile_complex_value_t   ccv;

    rule = (ngx_http_ratelimit_rule_t *) common;

    s.data = ngx_strlchr(value->data, value->data + value->len, '=') + 1;
    s.len = value->data + value->len - s.data;

    if (rule->vars == NULL) {
        rule->vars = ngx_pcalloc(cf->pool,
                                 sizeof(ngx_http_ratelimit_rule_vars_t));
        if (rule->vars == NULL) {
            return NGX_ERROR;
        }

        rule->vars->priority_index = NGX_ERROR;
        rule->vars->fair_index = NGX_ERROR;
    }

    cv = ngx_strncmp(value->data, "charge=", 7) == 0 ? &rule->vars->charge
         : value->data[0] == 'p' ? &rule->vars->priority
         : value->data[0] == 'f' ? &rule->vars->fair
         : value->data[0] == 'c' ? &rule->vars->cost
         : value->data[0] == 'l' ? &rule->vars->limit : &rule->vars->burst;

    if (cv == &rule->vars->cost) {
        rule->common.cost_varies = 1;
    }

    if (cv == &rule->vars->priority || cv == &rule->vars->fair) {
        index = ngx_http_ratelimit_variable_index(cf, &s);
        if (index == NGX_ERROR - 1) {
            return NGX_ERROR;
        }

        *(cv == &rule->vars->priority ? &rule->vars->priority_index
                                      : &rule->vars->fair_index) = index;
    }

    *cv = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (*cv == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));
    ccv.cf = cf;
    ccv.value = &s;
    ccv.complex_value = *cv;

    return ngx_http_compile_complex_value(&ccv);
}


/*
 * A rule's key compiled (a key without a variable is one budget for every
 * request: said), and what its requests read of it: a key that is exactly
 * one variable is read without copying it, and shared with the rule
 * before when it is the same.  Its identity too (ngx_ratelimit_rule_key).
 */

static ngx_int_t
ngx_http_ratelimit_rule_key(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *rlcf, ngx_http_ratelimit_rule_t *rule,
    ngx_str_t *key)
{
    ngx_ratelimit_rule_unkeyed(cf, &rule->common, key,
                               ngx_http_script_variables_count(key));

    if (ngx_http_ratelimit_compile_key(cf, rule, key) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_ratelimit_rule_key(&rule->common, key);

    rule->key_index = ngx_http_ratelimit_variable_index(cf, key);

    return rule->key_index == NGX_ERROR - 1 ? NGX_ERROR : NGX_OK;
}


/*
 * The index of a value that is exactly one variable ("$name"), read without
 * copying it (ngx_http_ratelimit_value); NGX_ERROR for any other value,
 * NGX_ERROR - 1 when the index cannot be had.
 */

static int32_t
ngx_http_ratelimit_variable_index(ngx_conf_t *cf, ngx_str_t *value)
{
    u_char      c;
    ngx_int_t   index;
    ngx_str_t   s;
    ngx_uint_t  i;

    if (value->len < 2 || value->data[0] != '$'
        || ngx_http_script_variables_count(value) != 1)
    {
        return NGX_ERROR;
    }

    s.data = value->data + 1;
    s.len = value->len - 1;

    for (i = 0; i < s.len; i++) {
        c = s.data[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9') || c == '_'))
        {
            return NGX_ERROR;
        }
    }

    index = ngx_http_get_variable_index(cf, &s);

    return index == NGX_ERROR ? NGX_ERROR - 1 : (int32_t) index;
    return NGX_OK;
}


/*
 * A rule's key compiled, or the same key of a rule read lately (a
 * configuration of thousands of locations writes a few keys thousands of
 * times): the compiled code is only read, by every rule of that key.
 */

static ngx_int_t
ngx_http_ratelimit_compile_key(ngx_conf_t *cf,
    ngx_http_ratelimit_rule_t *rule, ngx_str_t *key)
{
    ngx_uint_t                         i;
    ngx_http_ratelimit_key_t          *k;
    ngx_http_ratelimit_main_conf_t    *rmcf;
    ngx_http_compile_complex_value_t   ccv;

    rmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module);

    for (i = 0; i < ngx_min(rmcf->nkeys, NGX_HTTP_RATELIMIT_KEYS_SHARED); i++)
    {
        k = &rmcf->keys[i];

        if (k->text.len == key->len
            && ngx_strncmp(k->text.data, key->data, key->len) == 0)
        {
            rule->key = k->cv;
            return NGX_OK;
        }
    }

    rule->key = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (rule->key == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));
    ccv.cf = cf;
    ccv.value = key;
    ccv.complex_value = rule->key;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_ERROR;
    }

    k = &rmcf->keys[rmcf->nkeys++ % NGX_HTTP_RATELIMIT_KEYS_SHARED];
    k->text = *key;
    k->cv = rule->key;

    return NGX_OK;
}


/*
 * The zone a rule names (ngx_ratelimit_rule_zone), and what its location
 * and the http block do for it: a request's end settles its charge= or its
 * concurrency slots.
 */

static ngx_int_t
ngx_http_ratelimit_rule_zone(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *rlcf, ngx_http_ratelimit_rule_t *rule,
    ngx_str_t *zone)
{
    ngx_http_ratelimit_main_conf_t  *rmcf;

    rmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module);

    if (ngx_ratelimit_rule_zone(cf, &rmcf->common, &rule->common, zone,
                                &rlcf->rules)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if ((rule->vars != NULL && rule->vars->charge != NULL)
        || rl_rule_holds_slots(&rule->common.rule))
    {
        rlcf->ends = 1;
        rmcf->ends = 1;
    }

    if (rl_rule_holds_slots(&rule->common.rule)) {
        rlcf->slots = 1;
    }

    return NGX_OK;
}
