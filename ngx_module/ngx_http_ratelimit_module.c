
/*
 * ngx-ratelimit: the module, its directives and configuration, and the
 * phases' set-up: the top of the glue (tools/glue-layers).
 */


#include "ngx_http_ratelimit_api.h"
#include "ngx_http_ratelimit_grpc.h"
#include "ngx_http_ratelimit_handler.h"
#include "ngx_http_ratelimit_headers.h"
#include "ngx_http_ratelimit_log.h"
#include "ngx_http_ratelimit_overrides.h"
#include "ngx_http_ratelimit_redis_conn.h"
#include "ngx_http_ratelimit_request.h"
#include "ngx_http_ratelimit_state.h"
#include "ngx_http_ratelimit_stats.h"
#include "ngx_http_ratelimit_sync.h"
#include "ngx_http_ratelimit_zone.h"


static void *ngx_http_ratelimit_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_ratelimit_create_loc_conf(ngx_conf_t *cf);
static ngx_int_t ngx_http_ratelimit_compile_key(ngx_conf_t *cf,
    ngx_http_ratelimit_rule_t *rule, ngx_str_t *key);
static ngx_int_t ngx_http_ratelimit_policy(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *conf);
static char *ngx_http_ratelimit_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_http_ratelimit(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_ratelimit_off(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *rlcf);
static ngx_http_ratelimit_rule_t *ngx_http_ratelimit_new_rule(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *rlcf);
static ngx_int_t ngx_http_ratelimit_glue_param(ngx_conf_t *cf,
    ngx_http_ratelimit_rule_t *rule, ngx_str_t *value, ngx_str_t *zone,
    ngx_str_t *key);
static ngx_int_t ngx_http_ratelimit_rule_key(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *rlcf, ngx_http_ratelimit_rule_t *rule,
    ngx_str_t *key);
static ngx_int_t ngx_http_ratelimit_rule_zone(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *rlcf, ngx_http_ratelimit_rule_t *rule,
    ngx_str_t *zone);
static char *ngx_http_ratelimit_set_choice(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_ratelimit_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_ratelimit_first_handler(ngx_conf_t *cf,
    ngx_uint_t phase, ngx_http_handler_pt handler);
static ngx_int_t ngx_http_ratelimit_init_process(ngx_cycle_t *cycle);
static void ngx_http_ratelimit_exit_process(ngx_cycle_t *cycle);
static void ngx_http_ratelimit_exit_master(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_ratelimit_save_zone(ngx_http_ratelimit_zone_t *zone,
    void *data);
static ngx_int_t ngx_http_ratelimit_start_zone(ngx_http_ratelimit_zone_t *zone,
    void *data);
static ngx_int_t ngx_http_ratelimit_stop_zone(ngx_http_ratelimit_zone_t *zone,
    void *data);


/*
 * What a directive of one value takes: words (values, NULL: none), or a
 * number from min to max (max 0: none); allowed, for its error message.
 */
typedef struct {
    ngx_conf_enum_t             *values;
    ngx_int_t                    min;
    ngx_int_t                    max;
    char                        *allowed;
} ngx_http_ratelimit_choice_t;


#define ngx_http_ratelimit_stringify(n)    #n
#define ngx_http_ratelimit_number_text(n)  ngx_http_ratelimit_stringify(n)

static ngx_http_ratelimit_choice_t  ngx_http_ratelimit_status_choice = {
    NULL, 400, 599, "a status code from 400 to 599"
};


static ngx_conf_enum_t  ngx_http_ratelimit_grpc_off[] = {
    { ngx_string("off"), 0 },
    { ngx_null_string, 0 }
};

static ngx_http_ratelimit_choice_t  ngx_http_ratelimit_grpc_choice = {
    ngx_http_ratelimit_grpc_off, RL_GRPC_STATUS_MIN, RL_GRPC_STATUS_MAX,
    "a gRPC status code from "
    ngx_http_ratelimit_number_text(RL_GRPC_STATUS_MIN) " to "
    ngx_http_ratelimit_number_text(RL_GRPC_STATUS_MAX) ", or \"off\""
};


static ngx_conf_enum_t  ngx_http_ratelimit_combine_values[] = {
    { ngx_string("all"), RL_COMBINE_ALL },
    { ngx_string("any"), RL_COMBINE_ANY },
    { ngx_null_string, 0 }
};

static ngx_http_ratelimit_choice_t  ngx_http_ratelimit_combine_choice = {
    ngx_http_ratelimit_combine_values, 0, 0, "\"all\" or \"any\""
};


static ngx_conf_enum_t  ngx_http_ratelimit_headers_values[] = {
    { ngx_string("off"), 0 },
    { ngx_string("legacy"), NGX_HTTP_RATELIMIT_HEADERS_LEGACY },
    { ngx_string("ietf"), NGX_HTTP_RATELIMIT_HEADERS_IETF },
    { ngx_string("both"), NGX_HTTP_RATELIMIT_HEADERS_LEGACY
                          |NGX_HTTP_RATELIMIT_HEADERS_IETF },
    { ngx_null_string, 0 }
};

static ngx_http_ratelimit_choice_t  ngx_http_ratelimit_headers_choice = {
    ngx_http_ratelimit_headers_values, 0, 0,
    "\"off\", \"legacy\", \"ietf\" or \"both\""
};


static ngx_conf_enum_t  ngx_http_ratelimit_log_levels[] = {
    { ngx_string("off"), NGX_HTTP_RATELIMIT_LOG_OFF },
    { ngx_string("info"), NGX_LOG_INFO },
    { ngx_string("notice"), NGX_LOG_NOTICE },
    { ngx_string("warn"), NGX_LOG_WARN },
    { ngx_string("error"), NGX_LOG_ERR },
    { ngx_null_string, 0 }
};

static ngx_http_ratelimit_choice_t  ngx_http_ratelimit_log_level_choice = {
    ngx_http_ratelimit_log_levels, 0, 0,
    "\"off\", \"info\", \"notice\", \"warn\" or \"error\""
};


static ngx_command_t  ngx_http_ratelimit_commands[] = {

    { ngx_string("ratelimit_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_ratelimit_zone,
      0,
      0,
      NULL },

    { ngx_string("ratelimit"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_ratelimit,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ratelimit_combine"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_ratelimit_set_choice,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, combine),
      &ngx_http_ratelimit_combine_choice },

    { ngx_string("ratelimit_status"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_ratelimit_set_choice,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, status_code),
      &ngx_http_ratelimit_status_choice },

    { ngx_string("ratelimit_grpc_status"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_ratelimit_set_choice,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, grpc_status),
      &ngx_http_ratelimit_grpc_choice },

    { ngx_string("ratelimit_headers"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_ratelimit_set_choice,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, headers),
      &ngx_http_ratelimit_headers_choice },

    { ngx_string("ratelimit_dry_run"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, dry_run),
      NULL },

    { ngx_string("ratelimit_log_level"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_ratelimit_set_choice,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, log_level),
      &ngx_http_ratelimit_log_level_choice },

    { ngx_string("ratelimit_stats"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_ratelimit_stats,
      0,
      0,
      NULL },

    { ngx_string("ratelimit_api"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE1,
      ngx_http_ratelimit_api,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_ratelimit_module_ctx = {
    ngx_http_ratelimit_add_variables,      /* preconfiguration */
    ngx_http_ratelimit_init,               /* postconfiguration */

    ngx_http_ratelimit_create_main_conf,   /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_ratelimit_create_loc_conf,    /* create location configuration */
    ngx_http_ratelimit_merge_loc_conf      /* merge location configuration */
};


ngx_module_t  ngx_http_ratelimit_module = {
    NGX_MODULE_V1,
    &ngx_http_ratelimit_module_ctx,        /* module context */
    ngx_http_ratelimit_commands,           /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_ratelimit_init_process,       /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_ratelimit_exit_process,       /* exit process */
    ngx_http_ratelimit_exit_master,        /* exit master */
    NGX_MODULE_V1_PADDING
};


static void *
ngx_http_ratelimit_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_ratelimit_main_conf_t  *rmcf;

    rmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_ratelimit_main_conf_t));
    if (rmcf == NULL) {
        return NULL;
    }

    /* the references are read in postconfiguration only: rmcf->rules
       keeps what the workers need of them */

    if (ngx_array_init(&rmcf->zone_refs, cf->temp_pool, 64,
                       sizeof(ngx_http_ratelimit_zone_ref_t))
        != NGX_OK)
    {
        return NULL;
    }

    return rmcf;
}


static void *
ngx_http_ratelimit_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_ratelimit_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_ratelimit_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     conf->rules.elts = NULL;
     */

    conf->combine = NGX_CONF_UNSET_UINT;
    conf->status_code = NGX_CONF_UNSET_UINT;
    conf->grpc_status = NGX_CONF_UNSET_UINT;
    conf->headers = NGX_CONF_UNSET_UINT;
    conf->dry_run = NGX_CONF_UNSET;
    conf->log_level = NGX_CONF_UNSET_UINT;
    conf->api_write = NGX_CONF_UNSET;

    return conf;
}


static char *
ngx_http_ratelimit_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_ratelimit_loc_conf_t *prev = parent;
    ngx_http_ratelimit_loc_conf_t *conf = child;

    /* rules are inherited only by a level that has none, as limit_req's */

    if (conf->rules.elts == NULL) {
        conf->rules = prev->rules;
        conf->ends = prev->ends;
    }

    ngx_conf_merge_uint_value(conf->combine, prev->combine, RL_COMBINE_ALL);
    /* none given: the binding rule's (rl_request_refusal) */
    ngx_conf_merge_uint_value(conf->status_code, prev->status_code,
                              NGX_HTTP_RATELIMIT_BY_RULE);
    ngx_conf_merge_uint_value(conf->grpc_status, prev->grpc_status,
                              NGX_HTTP_RATELIMIT_BY_RULE);
    ngx_conf_merge_uint_value(conf->headers, prev->headers,
                              conf->off ? 0
                                        : NGX_HTTP_RATELIMIT_HEADERS_LEGACY);
    ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level, NGX_LOG_ERR);

    /* RateLimit-Policy is sent with the IETF headers only */

    if ((conf->headers & NGX_HTTP_RATELIMIT_HEADERS_IETF)
        && ngx_http_ratelimit_policy(cf, conf) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    conf->policy_each = conf->rules.nelts && conf->policy.len == 0
                        && (conf->headers & NGX_HTTP_RATELIMIT_HEADERS_IETF);

    return NGX_CONF_OK;
}


/*
 * The location's RateLimit-Policy field, written once when every rule's
 * policy is the same for every request (rl_rule_policy_fixed); else each
 * request writes its own (policy_each: ngx_http_ratelimit_act_on_verdict).
 */

static ngx_int_t
ngx_http_ratelimit_policy(ngx_conf_t *cf, ngx_http_ratelimit_loc_conf_t *conf)
{
    size_t                      len;
    u_char                     *buf;
    ngx_uint_t                  i, n;
    const rl_rule_t           **list;
    ngx_http_ratelimit_rule_t  *rules;

    n = conf->rules.nelts;
    rules = conf->rules.elts;

    if (n == 0 || conf->policy.data != NULL) {
        return NGX_OK;
    }

    for (i = 0; i < n; i++) {
        if (!rl_rule_policy_fixed(&rules[i].rule)) {
            return NGX_OK;
        }
    }

    /* written in the temporary pool, kept at its length: a configuration
       of thousands of locations keeps no room it does not use */

    list = ngx_palloc(cf->temp_pool, n * sizeof(rl_rule_t *));
    buf = ngx_pnalloc(cf->temp_pool, n * RL_POLICY_ITEM_MAX);
    if (list == NULL || buf == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        list[i] = &rules[i].rule;
    }

    len = rl_policy_field(list, n, 0, (char *) buf, n * RL_POLICY_ITEM_MAX);

    conf->policy.data = ngx_pnalloc(cf->pool, len ? len : 1);
    if (conf->policy.data == NULL) {
        return NGX_ERROR;
    }

    conf->policy.len = len;
    ngx_memcpy(conf->policy.data, buf, len);

    return NGX_OK;
}


/*
 * ratelimit zone=NAME [key=STRING] [cost=N|$var] [limit=N|$var] ...;
 * ratelimit off;
 * zone=, key= and variables are the glue's; the core parses the rest.
 */

static char *
ngx_http_ratelimit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ratelimit_loc_conf_t *rlcf = conf;

    int                         rc;
    ngx_str_t                  *value, zone, key;
    ngx_uint_t                  i;
    ngx_http_ratelimit_rule_t  *rule;
    char                        err[RL_ERR_MAX];

    static ngx_str_t  default_key = ngx_string("$binary_remote_addr");

    value = cf->args->elts;

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "off") == 0) {
        return ngx_http_ratelimit_off(cf, rlcf);
    }

    rule = ngx_http_ratelimit_new_rule(cf, rlcf);
    if (rule == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_str_null(&zone);
    ngx_str_null(&key);

    for (i = 1; i < cf->args->nelts; i++) {

        rc = rl_rule_param(&rule->rule, (char *) value[i].data, value[i].len,
                           err, sizeof(err));

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

    if (rl_rule_finish(&rule->rule, err, sizeof(err)) != RL_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit\" directive: %s", err);
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


/* A new rule at its level, its core part initialized. */

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
    rl_rule_init(&rule->rule);

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
    ngx_str_t                          s;
    ngx_http_complex_value_t         **cv;
    ngx_http_compile_complex_value_t   ccv;

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

        return ngx_http_ratelimit_zone_name(cf, "ratelimit", zone);
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
 * before when it is the same.  Its name, limit and identity too.
 */

static ngx_int_t
ngx_http_ratelimit_rule_key(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *rlcf, ngx_http_ratelimit_rule_t *rule,
    ngx_str_t *key)
{
    u_char      c, text[NGX_INT64_LEN];
    ngx_str_t   s;
    ngx_uint_t  i;

    /* a rule that learns from its upstream (adaptive) names the upstream */

    if (ngx_http_script_variables_count(key) == 0
        && !(key->len && rl_rule_per_upstream(&rule->rule)))
    {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "\"ratelimit\" directive: rule \"%s\": key=\"%V\" "
                           "has no variable, %s", rule->rule.name, key,
                           key->len ? "so every request shares one budget (a "
                                      "global limit); write key=$NAME for one "
                                      "budget per value of a variable"
                                    : "and an empty key exempts every "
                                      "request");
    }

    if (ngx_http_ratelimit_compile_key(cf, rule, key) != NGX_OK) {
        return NGX_ERROR;
    }

    rule->name.data = (u_char *) rule->rule.name;
    rule->name.len = ngx_strlen(rule->rule.name);

    /* X-RateLimit-Limit of a rule whose limit is constant */

    rule->limit_text.len = ngx_sprintf(text, "%uD", rule->rule.limit) - text;
    rule->limit_text.data = ngx_pnalloc(cf->pool, rule->limit_text.len);
    if (rule->limit_text.data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(rule->limit_text.data, text, rule->limit_text.len);
    rule->identity = rl_rule_identity(&rule->rule, (char *) key->data,
                                      key->len);

    /* an override of an address range applies to a rule keyed on the
       client's address */

    if (key->len == sizeof("$binary_remote_addr") - 1
        && ngx_strncmp(key->data, "$binary_remote_addr", key->len) == 0)
    {
        rule->rule.key_addr = RL_KEY_ADDR_BINARY;

    } else if (key->len == sizeof("$remote_addr") - 1
               && ngx_strncmp(key->data, "$remote_addr", key->len) == 0)
    {
        rule->rule.key_addr = RL_KEY_ADDR_TEXT;
    }

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

    rule->key_shared = rlcf->rules.nelts > 1
                       && rule->key_index != NGX_ERROR
                       && rule->key_index == rule[-1].key_index;

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
 * The zone a rule names: its shared memory (a zone may be declared after
 * its use: checked in postconfiguration, from the reference kept here).
 */

static ngx_int_t
ngx_http_ratelimit_rule_zone(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *rlcf, ngx_http_ratelimit_rule_t *rule,
    ngx_str_t *zone)
{
    ngx_http_ratelimit_zone_ref_t   *ref;
    ngx_http_ratelimit_main_conf_t  *rmcf;

    rule->shm_zone = ngx_shared_memory_add(cf, zone, 0,
                                           &ngx_http_ratelimit_module);
    if (rule->shm_zone == NULL) {
        return NGX_ERROR;
    }

    rmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module);

    ref = ngx_array_push(&rmcf->zone_refs);
    if (ref == NULL) {
        return NGX_ERROR;
    }

    if ((rule->vars != NULL && rule->vars->charge != NULL)
        || rl_rule_holds_slots(&rule->rule))
    {
        rlcf->ends = 1;
        rmcf->ends = 1;
    }

    ref->shm_zone = rule->shm_zone;
    ref->file = cf->conf_file->file.name.data;
    ref->line = cf->conf_file->line;
    ref->rules = &rlcf->rules;
    ref->index = rlcf->rules.nelts - 1;
    rule->stats = NGX_HTTP_RATELIMIT_STATS_UNKNOWN;

    return NGX_OK;
}


/*
 * A directive of one value, a word or a number (cmd->post says which it
 * takes), whose error names the directive, the value and what it takes.
 */

static char *
ngx_http_ratelimit_set_choice(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_int_t                     n;
    ngx_str_t                    *value;
    ngx_uint_t                   *np, i;
    ngx_conf_enum_t              *e;
    ngx_http_ratelimit_choice_t  *choice;

    np = (ngx_uint_t *) (p + cmd->offset);

    if (*np != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;
    choice = cmd->post;

    for (e = choice->values, i = 0; e != NULL && e[i].name.len != 0; i++) {
        if (e[i].name.len == value[1].len
            && ngx_strcasecmp(e[i].name.data, value[1].data) == 0)
        {
            *np = e[i].value;
            return NGX_CONF_OK;
        }
    }

    n = ngx_atoi(value[1].data, value[1].len);

    if (choice->max > 0 && n >= choice->min && n <= choice->max) {
        *np = n;
        return NGX_CONF_OK;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive: expected %s",
                       &value[1], &cmd->name, choice->allowed);

    return NGX_CONF_ERROR;
}


static ngx_int_t
ngx_http_ratelimit_init(ngx_conf_t *cf)
{
    ngx_http_ratelimit_main_conf_t  *rmcf;

    rmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module);

    if (ngx_http_ratelimit_zones_init(cf, rmcf) != NGX_OK
        || ngx_http_ratelimit_log_init(cf, rmcf) != NGX_OK)
    {
        return NGX_ERROR;
    }

    /*
     * A configuration without rules (the module loaded, as a package does,
     * and not used) registers neither the handler nor the header filter:
     * its requests pay nothing for the module.
     */

    if (rmcf->zone_refs.nelts == 0) {
        return ngx_http_ratelimit_headers_init(cf, 0);
    }

    /*
     * The handler goes first in the preaccess phase's handlers, which nginx
     * runs last to first: after realip (a location's real_ip_header),
     * limit_conn and limit_req, whatever the order modules were loaded in.
     * A request they reject spends nothing here, and keys see the client's
     * address, not the proxy's.
     */

    if (ngx_http_ratelimit_first_handler(cf, NGX_HTTP_PREACCESS_PHASE,
                                         ngx_http_ratelimit_handler)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    /*
     * Rules with charge= and concurrency rules settle in the log phase (no
     * cost for the others),
     * before the access log, which nginx's log phase runs first to last
     * and may write $ratelimit_charged.
     */

    if (rmcf->ends
        && ngx_http_ratelimit_first_handler(cf, NGX_HTTP_LOG_PHASE,
                                            ngx_http_ratelimit_end_handler)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_ratelimit_headers_init(cf, 1);
}


/* A handler put first in a phase's handlers, which nginx runs last to
   first: it runs after the others. */

static ngx_int_t
ngx_http_ratelimit_first_handler(ngx_conf_t *cf, ngx_uint_t phase,
    ngx_http_handler_pt handler)
{
    ngx_array_t                *handlers;
    ngx_http_handler_pt        *h;
    ngx_http_core_main_conf_t  *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
    handlers = &cmcf->phases[phase].handlers;

    h = ngx_array_push(handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h = handlers->elts;
    ngx_memmove(&h[1], &h[0], (handlers->nelts - 1) * sizeof(*h));
    h[0] = handler;

    return NGX_OK;
}


/*
 * A worker looks its rules' counters up in zones kept across a reload, and
 * starts their exchanges; as it exits, its Redis connections are closed.
 */

static ngx_int_t
ngx_http_ratelimit_init_process(ngx_cycle_t *cycle)
{
    return ngx_http_ratelimit_each_zone(cycle, ngx_http_ratelimit_start_zone,
                                        NULL);
}


static ngx_int_t
ngx_http_ratelimit_start_zone(ngx_http_ratelimit_zone_t *zone, void *data)
{
    ngx_http_ratelimit_claim_stats(zone, 1);

    if (zone->sync != NULL) {
        ngx_http_ratelimit_sync_start(zone->sync);
    }

    if (ngx_http_ratelimit_state_start(zone, (ngx_cycle_t *) ngx_cycle)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_ratelimit_overrides_start(zone, (ngx_cycle_t *) ngx_cycle);
}


static void
ngx_http_ratelimit_exit_process(ngx_cycle_t *cycle)
{
    (void) ngx_http_ratelimit_each_zone(cycle, ngx_http_ratelimit_stop_zone,
                                        NULL);
}


static ngx_int_t
ngx_http_ratelimit_stop_zone(ngx_http_ratelimit_zone_t *zone, void *data)
{
    if (zone->redis != NULL) {
        ngx_http_ratelimit_redis_close(zone->redis);
    }

    if (zone->sync != NULL) {
        ngx_http_ratelimit_sync_stop(zone->sync);
    }

    return NGX_OK;
}


/* The master's exit, after its workers: each zone's state file written. */

static void
ngx_http_ratelimit_exit_master(ngx_cycle_t *cycle)
{
    (void) ngx_http_ratelimit_each_zone(cycle, ngx_http_ratelimit_save_zone,
                                        cycle->log);
}


static ngx_int_t
ngx_http_ratelimit_save_zone(ngx_http_ratelimit_zone_t *zone, void *data)
{
    ngx_http_ratelimit_state_save(zone, data);

    return NGX_OK;
}
