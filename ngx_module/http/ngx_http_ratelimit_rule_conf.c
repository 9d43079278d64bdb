
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


static char *ngx_http_ratelimit_off(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *rlcf);
static ngx_http_ratelimit_rule_t *ngx_http_ratelimit_new_rule(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *rlcf);
static ngx_int_t ngx_http_ratelimit_glue_param(ngx_conf_t *cf,
    ngx_http_ratelimit_rule_t *rule, ngx_str_t *value, ngx_str_t *zone,
    ngx_str_t *key);
static ngx_int_t ngx_http_ratelimit_compile_key(ngx_conf_t *cf,
    ngx_http_ratelimit_rule_t *rule, ngx_str_t *key);
static ngx_int_t ngx_http_ratelimit_rule_key(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *rlcf, ngx_http_ratelimit_rule_t *rule,
    ngx_str_t *key);
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

    int                         rc;
    ngx_str_t                  *value, zone, key;
    ngx_uint_t                  i;
    ngx_http_ratelimit_rule_t  *rule;
    char                        err[RL_ERR_MAX], name[RL_NAME_MAX];

    static ngx_str_t  default_key = ngx_string("$binary_remote_addr");

    value = cf->args->elts;

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "off") == 0) {
        return ngx_http_ratelimit_off(cf, rlcf);
    }

    rule = ngx_http_ratelimit_new_rule(cf, rlcf);
    if (rule == NULL) {
        return NGX_CONF_ERROR;
    }

    rl_rule_init(&rule->common.rule, name);

    ngx_str_null(&zone);
    ngx_str_null(&key);

    for (i = 1; i < cf->args->nelts; i++) {

        rc = rl_rule_param(&rule->common.rule, (char *) value[i].data,
                           value[i].len, err, sizeof(err));

        if (rc == RL_ERROR) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit\" directive: %s", err);
            return NGX_CONF_ERROR;
        }

        /* RL_DECLINED: zone=, key=, charge=, or cost=, limit= or burst=
           with a $variable */

        if (rc == RL_DECLINED
            && ngx_http_ratelimit_glue_param(cf, rule, &value[i], &zone, &key)
               != NGX_OK)
        {
            return NGX_CONF_ERROR;
        }
    }

    if (zone.data == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit\" directive: missing \"zone=\": "
                           "expected zone=NAME of a \"ratelimit_zone\"");
        return NGX_CONF_ERROR;
    }

    if (rl_rule_finish(&rule->common.rule, err, sizeof(err)) != RL_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit\" directive: %s", err);
        return NGX_CONF_ERROR;
    }

    if (ngx_ratelimit_rule_name(cf, &rule->common, name) != NGX_OK) {
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


/* "ratelimit off": the inherited rules removed, none at its level. */

static char *
ngx_http_ratelimit_off(ngx_conf_t *cf, ngx_http_ratelimit_loc_conf_t *rlcf)
{
    if (rlcf->rules.elts != NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit off\" with rules at the same "
                           "level: \"off\" removes the inherited rules, "
                           "write it alone or not at all");
        return NGX_CONF_ERROR;
    }

    /* no rules here, none inherited: an empty list */

    if (ngx_array_init(&rlcf->rules, cf->pool, 1,
                       sizeof(ngx_http_ratelimit_rule_t))
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    rlcf->off = 1;

    return NGX_CONF_OK;
}


/* A new rule at its level, zeroed (the core initializes its part). */

static ngx_http_ratelimit_rule_t *
ngx_http_ratelimit_new_rule(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *rlcf)
{
    ngx_http_ratelimit_rule_t  *rule;

    if (rlcf->off) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit\" directive: rules after "
                           "\"ratelimit off\" at the same level: \"off\" "
                           "removes the inherited rules, write it alone or "
                           "not at all");
        return NULL;
    }

    /* room for one: most locations have one rule, and a configuration
       may have thousands of them */

    if (rlcf->rules.elts == NULL
        && ngx_array_init(&rlcf->rules, cf->pool, 1,
                          sizeof(ngx_http_ratelimit_rule_t))
           != NGX_OK)
    {
        return NULL;
    }

    if (rlcf->rules.nelts == RL_RULES_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit\" directive: too many rules: at most "
                           "%d apply to one request", RL_RULES_MAX);
        return NULL;
    }

    rule = ngx_array_push(&rlcf->rules);
    if (rule == NULL) {
        return NULL;
    }

    ngx_memzero(rule, sizeof(ngx_http_ratelimit_rule_t));

    return rule;
}


/*
 * A parameter the core declined, the glue's: zone=, key=, or one whose
 * value nginx evaluates (charge=, cost=, limit= or burst= with a
 * $variable), compiled.
 */

static ngx_int_t
ngx_http_ratelimit_glue_param(ngx_conf_t *cf, ngx_http_ratelimit_rule_t *rule,
    ngx_str_t *value, ngx_str_t *zone, ngx_str_t *key)
{
    ngx_int_t                          rc;
    ngx_str_t                          s;
    ngx_http_complex_value_t         **cv;
    ngx_http_compile_complex_value_t   ccv;

    rc = ngx_ratelimit_rule_param(cf, value, zone, key);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    s.data = ngx_strlchr(value->data, value->data + value->len, '=') + 1;
    s.len = value->data + value->len - s.data;

    if (rule->vars == NULL) {
        rule->vars = ngx_pcalloc(cf->pool,
                                 sizeof(ngx_http_ratelimit_rule_vars_t));
        if (rule->vars == NULL) {
            return NGX_ERROR;
        }
    }

    cv = ngx_strncmp(value->data, "charge=", 7) == 0 ? &rule->vars->charge
         : value->data[0] == 'c' ? &rule->vars->cost
         : value->data[0] == 'l' ? &rule->vars->limit : &rule->vars->burst;

    if (cv == &rule->vars->cost) {
        rule->common.cost_varies = 1;
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
    u_char      c;
    ngx_str_t   s;
    ngx_uint_t  i;

    /* a rule that learns from its upstream (adaptive) names the upstream */

    if (ngx_http_script_variables_count(key) == 0
        && !(key->len && rl_rule_per_upstream(&rule->common.rule)))
    {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "\"ratelimit\" directive: rule \"%s\": key=\"%V\" "
                           "has no variable, %s", rule->common.rule.name, key,
                           key->len ? "so every request shares one budget (a "
                                      "global limit); write key=$NAME for one "
                                      "budget per value of a variable"
                                    : "and an empty key exempts every "
                                      "request");
    }

    if (ngx_http_ratelimit_compile_key(cf, rule, key) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_ratelimit_rule_key(&rule->common, key);

    rule->key_index = NGX_ERROR;

    if (key->len > 1 && key->data[0] == '$'
        && ngx_http_script_variables_count(key) == 1)
    {
        s.data = key->data + 1;
        s.len = key->len - 1;

        for (i = 0; i < s.len; i++) {
            c = s.data[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
                  || (c >= '0' && c <= '9') || c == '_'))
            {
                break;
            }
        }

        if (i == s.len) {
            rule->key_index = ngx_http_get_variable_index(cf, &s);
            if (rule->key_index == NGX_ERROR) {
                return NGX_ERROR;
            }
        }
    }

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
