
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
