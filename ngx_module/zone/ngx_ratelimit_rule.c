
/*
 * ngx-ratelimit: the part of a rule its zone knows, whatever the protocol
 * whose ratelimit directive reads it: zone= and key= (the parameters that
 * are text, not values nginx evaluates), its name kept, its key's identity,
 * its zone named.  The protocol's own file reads the rest (the core parses
 * its parameters; the protocol compiles its key and values:
 * http/ngx_http_ratelimit_rule_conf.c); its zones are checked once the
 * whole configuration is read (ngx_ratelimit_zone_conf.c).
 */


#include "ngx_ratelimit_rule.h"
#include "ngx_ratelimit_log.h"


/*
 * zone= or key= of a ratelimit directive, once each: NGX_DECLINED for any
 * other parameter.
 */

ngx_int_t
ngx_ratelimit_rule_param(ngx_conf_t *cf, ngx_str_t *value, ngx_str_t *zone,
    ngx_str_t *key)
{
    ngx_str_t  s;

    if (ngx_strncmp(value->data, "zone=", 5) == 0) {
        s.data = value->data + 5;
        s.len = value->len - 5;

        if (zone->data != NULL || s.len == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit\" directive: %s \"%V\": "
                               "expected one zone=NAME",
                               zone->data ? "duplicate parameter"
                                          : "invalid", value);
            return NGX_ERROR;
        }

        *zone = s;

        return ngx_ratelimit_zone_name(cf, "ratelimit", zone);
    }

    if (ngx_strncmp(value->data, "key=", 4) == 0) {
        if (key->data != NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit\" directive: duplicate "
                               "parameter \"%V\": each parameter may be "
                               "given once", value);
            return NGX_ERROR;
        }

        key->data = value->data + 4;
        key->len = value->len - 4;
        return NGX_OK;
    }

    return NGX_DECLINED;
}


/* The name the core gave the rule, kept at its length, not in a room of
   RL_NAME_MAX: a configuration may have thousands of rules. */

ngx_int_t
ngx_ratelimit_rule_name(ngx_conf_t *cf, ngx_ratelimit_rule_t *rule,
    char *name)
{
    rule->name.len = ngx_strlen(name);
    rule->name.data = ngx_pnalloc(cf->pool, rule->name.len + 1);
    if (rule->name.data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(rule->name.data, name, rule->name.len + 1);
    rule->rule.name = (char *) rule->name.data;

    return NGX_OK;
}


/*
 * What a rule's key is, as written: the text, its identity (the rule's
 * keys in the table), whether it is keyed, and whether it is the client's
 * address, to which an override of an address range applies.
 */

void
ngx_ratelimit_rule_key(ngx_ratelimit_rule_t *rule, ngx_str_t *key)
{
    rule->key = *key;
    rule->identity = rl_rule_identity(&rule->rule, (char *) key->data,
                                      key->len);
    rule->rule.keyed = rl_rule_keyed((char *) key->data, key->len);

    if (key->len == sizeof("$binary_remote_addr") - 1
        && ngx_strncmp(key->data, "$binary_remote_addr", key->len) == 0)
    {
        rule->rule.key_addr = RL_KEY_ADDR_BINARY;

    } else if (key->len == sizeof("$remote_addr") - 1
               && ngx_strncmp(key->data, "$remote_addr", key->len) == 0)
    {
        rule->rule.key_addr = RL_KEY_ADDR_TEXT;
    }
}


/*
 * The zone a rule names: its shared memory (a zone may be declared after
 * its use: checked once the configuration is read, from the reference kept
 * here).  rules: the rule's location's, of which it is the last.
 */

ngx_int_t
ngx_ratelimit_rule_zone(ngx_conf_t *cf, ngx_ratelimit_conf_t *conf,
    ngx_ratelimit_rule_t *rule, ngx_str_t *zone, ngx_array_t *rules)
{
    ngx_ratelimit_zone_ref_t  *ref;

    rule->shm_zone = ngx_shared_memory_add(cf, zone, 0,
                                           &ngx_ratelimit_zone_tag);
    if (rule->shm_zone == NULL) {
        return NGX_ERROR;
    }

    ref = ngx_array_push(&conf->zone_refs);
    if (ref == NULL) {
        return NGX_ERROR;
    }

    ref->shm_zone = rule->shm_zone;
    ref->file = cf->conf_file->file.name.data;
    ref->line = cf->conf_file->line;
    ref->rules = rules;
    ref->index = rules->nelts - 1;

    return NGX_OK;
}


/*
 * "ratelimit off" at a level (rules: its rules, of elements of size; off:
 * its flag): the inherited rules removed, none at its level.
 */

char *
ngx_ratelimit_rule_off(ngx_conf_t *cf, ngx_array_t *rules, ngx_flag_t *off,
    size_t size)
{
    if (rules->elts != NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit off\" with rules at the same "
                           "level: \"off\" removes the inherited rules, "
                           "write it alone or not at all");
        return NGX_CONF_ERROR;
    }

    /* no rules here, none inherited: an empty list */

    if (ngx_array_init(rules, cf->pool, 1, size) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    *off = 1;

    return NGX_CONF_OK;
}


/*
 * A new rule of a protocol at its level (rules: of elements of size),
 * zeroed; NULL after "ratelimit off" there or past RL_RULES_MAX, said.
 */

void *
ngx_ratelimit_rule_new(ngx_conf_t *cf, ngx_array_t *rules, ngx_flag_t off,
    size_t size)
{
    void  *rule;

    if (off) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit\" directive: rules after "
                           "\"ratelimit off\" at the same level: \"off\" "
                           "removes the inherited rules, write it alone or "
                           "not at all");
        return NULL;
    }

    /* room for one: most levels have one rule, and a configuration may
       have thousands of them */

    if (rules->elts == NULL
        && ngx_array_init(rules, cf->pool, 1, size) != NGX_OK)
    {
        return NULL;
    }

    if (rules->nelts == RL_RULES_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit\" directive: too many rules: at most "
                           "%d apply to one request", RL_RULES_MAX);
        return NULL;
    }

    rule = ngx_array_push(rules);
    if (rule == NULL) {
        return NULL;
    }

    ngx_memzero(rule, size);

    return rule;
}


/*
 * The parameters of a ratelimit directive read into rule: the core parses
 * its own (rl_rule_parse), zone= and key= are read here, and any other the
 * core declines (a value with a $variable, charge=) is the protocol's
 * (param); then the rule is finished and named.  key: empty when not
 * given.
 */

ngx_int_t
ngx_ratelimit_rule_read(ngx_conf_t *cf, ngx_ratelimit_rule_t *rule,
    ngx_str_t *zone, ngx_str_t *key, ngx_ratelimit_param_pt param)
{
    int            rc;
    ngx_int_t      n;
    ngx_str_t     *value;
    ngx_uint_t     i;
    rl_classes_t   classes;
    char           err[RL_ERR_MAX], name[RL_NAME_MAX];

    value = cf->args->elts;

    rl_rule_init(&rule->rule, name);

    /* room for priority classes, kept only if the rule has any */

    ngx_memzero(&classes, sizeof(rl_classes_t));
    rule->rule.classes = &classes;

    ngx_str_null(zone);
    ngx_str_null(key);

    for (i = 1; i < cf->args->nelts; i++) {

        rc = rl_rule_param(&rule->rule, (char *) value[i].data, value[i].len,
                           err, sizeof(err));

        if (rc == RL_ERROR) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit\" directive: %s", err);
            return NGX_ERROR;
        }

        if (rc != RL_DECLINED) {
            continue;
        }

        n = ngx_ratelimit_rule_param(cf, &value[i], zone, key);

        if (n == NGX_DECLINED) {
            n = param(cf, rule, &value[i]);
        }

        if (n != NGX_OK) {
            return NGX_ERROR;
        }
    }

    if (zone->data == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit\" directive: missing \"zone=\": "
                           "expected zone=NAME of a \"ratelimit_zone\"");
        return NGX_ERROR;
    }

    if (rl_rule_finish(&rule->rule, err, sizeof(err)) != RL_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit\" directive: %s", err);
        return NGX_ERROR;
    }

    rule->rule.classes = NULL;

    if (classes.n > 0) {
        rule->rule.classes = ngx_pnalloc(cf->pool, sizeof(rl_classes_t));
        if (rule->rule.classes == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(rule->rule.classes, &classes, sizeof(rl_classes_t));
    }

    return ngx_ratelimit_rule_name(cf, rule, name);
}


/*
 * A key with no variable (variables: how many it names) said: one budget
 * for every request, or, empty, none limited.  A rule that learns from its
 * upstream (adaptive) names the upstream in a key of text.
 */

void
ngx_ratelimit_rule_unkeyed(ngx_conf_t *cf, ngx_ratelimit_rule_t *rule,
    ngx_str_t *key, ngx_uint_t variables)
{
    if (variables != 0 || (key->len && rl_rule_per_upstream(&rule->rule))) {
        return;
    }

    ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                       "\"ratelimit\" directive: rule \"%s\": key=\"%V\" "
                       "has no variable, %s", rule->rule.name, key,
                       key->len ? "so every request shares one budget (a "
                                  "global limit); write key=$NAME for one "
                                  "budget per value of a variable"
                                : "and an empty key exempts every "
                                  "request");
}


/*
 * cost=$variable's value for a request or session (value: evaluated by
 * its protocol): the core says what it counts as (rl_rule_cost); what is
 * wrong with a bad one in err (RL_ERR_MAX bytes; "" for a good one), for
 * its caller to log (ngx_ratelimit_log_bad): the log's context is built
 * only then.
 */

uint64_t
ngx_ratelimit_rule_cost(ngx_ratelimit_rule_t *rule, ngx_str_t *value,
    char *err)
{
    uint64_t  cost;

    err[0] = '\0';

    (void) rl_rule_cost(&rule->rule, (char *) value->data, value->len, &cost,
                        err, RL_ERR_MAX);

    return cost;
}


/*
 * limit=$variable, burst=$variable: the rule as it applies to a request or
 * session (limit, burst: their values, empty where the rule has none), in
 * pool (rl_rule_apply: a bad value is replaced as the core says, and what
 * is wrong with it is in err, as ngx_ratelimit_rule_cost's).
 */

const rl_rule_t *
ngx_ratelimit_rule_applied(ngx_pool_t *pool, ngx_ratelimit_rule_t *rule,
    ngx_str_t *limit, ngx_str_t *burst, char *err)
{
    rl_rule_t  *applied;

    err[0] = '\0';

    applied = ngx_palloc(pool, sizeof(rl_rule_t));
    if (applied == NULL) {
        return NULL;
    }

    (void) rl_rule_apply(&rule->rule, (char *) limit->data, limit->len,
                         (char *) burst->data, burst->len, applied, err,
                         RL_ERR_MAX);

    return applied;
}
