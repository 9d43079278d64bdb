
/*
 * ngx-ratelimit: the module, its directives and configuration, and the
 * phases' set-up: the top of the glue (tools/glue-layers).
 */


#include "ngx_http_ratelimit_api.h"
#include "ngx_http_ratelimit_grpc.h"
#include "ngx_http_ratelimit_handler.h"
#include "ngx_http_ratelimit_headers.h"
#include "ngx_http_ratelimit_request.h"
#include "ngx_http_ratelimit_rule_conf.h"
#include "ngx_http_ratelimit_stats.h"
#include "ngx_ratelimit_zone_conf.h"
#include "ngx_ratelimit_choice.h"
#include "ngx_ratelimit_log.h"


static char *ngx_http_ratelimit_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static void *ngx_http_ratelimit_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_ratelimit_create_loc_conf(ngx_conf_t *cf);
static ngx_int_t ngx_http_ratelimit_location_policy(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *conf);
static char *ngx_http_ratelimit_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_ratelimit_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_ratelimit_first_handler(ngx_conf_t *cf,
    ngx_uint_t phase, ngx_http_handler_pt handler);
static ngx_int_t ngx_http_ratelimit_init_process(ngx_cycle_t *cycle);
static void ngx_http_ratelimit_exit_process(ngx_cycle_t *cycle);
static void ngx_http_ratelimit_exit_master(ngx_cycle_t *cycle);


#define ngx_http_ratelimit_stringify(n)    #n
#define ngx_http_ratelimit_number_text(n)  ngx_http_ratelimit_stringify(n)

static ngx_ratelimit_choice_t  ngx_http_ratelimit_status_choice = {
    NULL, 400, 599, "a status code from 400 to 599"
};


static ngx_conf_enum_t  ngx_http_ratelimit_grpc_off[] = {
    { ngx_string("off"), 0 },
    { ngx_null_string, 0 }
};

static ngx_ratelimit_choice_t  ngx_http_ratelimit_grpc_choice = {
    ngx_http_ratelimit_grpc_off, RL_GRPC_STATUS_MIN, RL_GRPC_STATUS_MAX,
    "a gRPC status code from "
    ngx_http_ratelimit_number_text(RL_GRPC_STATUS_MIN) " to "
    ngx_http_ratelimit_number_text(RL_GRPC_STATUS_MAX) ", or \"off\""
};


static ngx_conf_enum_t  ngx_http_ratelimit_headers_values[] = {
    { ngx_string("off"), 0 },
    { ngx_string("legacy"), NGX_HTTP_RATELIMIT_HEADERS_LEGACY },
    { ngx_string("ietf"), NGX_HTTP_RATELIMIT_HEADERS_IETF },
    { ngx_string("both"), NGX_HTTP_RATELIMIT_HEADERS_LEGACY
                          |NGX_HTTP_RATELIMIT_HEADERS_IETF },
    { ngx_null_string, 0 }
};

static ngx_ratelimit_choice_t  ngx_http_ratelimit_headers_choice = {
    ngx_http_ratelimit_headers_values, 0, 0,
    "\"off\", \"legacy\", \"ietf\" or \"both\""
};


static ngx_command_t  ngx_http_ratelimit_commands[] = {

    { ngx_string("ratelimit_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_ratelimit_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
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
      ngx_ratelimit_set_choice,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, combine),
      &ngx_ratelimit_combine_choice },

    { ngx_string("ratelimit_status"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_ratelimit_set_choice,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, status_code),
      &ngx_http_ratelimit_status_choice },

    { ngx_string("ratelimit_grpc_status"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_ratelimit_set_choice,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, grpc_status),
      &ngx_http_ratelimit_grpc_choice },

    { ngx_string("ratelimit_headers"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_ratelimit_set_choice,
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
      ngx_ratelimit_set_choice,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, log_level),
      &ngx_ratelimit_log_level_choice },

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

    /* the references are read in postconfiguration only: each zone's
       rules keep what the workers need of them */

    if (ngx_array_init(&rmcf->common.zone_refs, cf->temp_pool, 64,
                       sizeof(ngx_ratelimit_zone_ref_t))
        != NGX_OK)
    {
        return NULL;
    }

    ngx_str_set(&rmcf->common.block, "http");

    return rmcf;
}


/*
 * ratelimit_zone in the http block (ngx_ratelimit_zone_declare): a Redis
 * zone names its servers with the http block's resolver, read as it
 * connects (resolver may come after ratelimit_zone).
 */

static char *
ngx_http_ratelimit_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ratelimit_main_conf_t *rmcf = conf;

    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    rmcf->common.resolver = &clcf->resolver;
    rmcf->common.resolver_timeout = &clcf->resolver_timeout;

    return ngx_ratelimit_zone_declare(cf, &rmcf->common);
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
    ngx_http_ratelimit_loc_conf_t  *prev = parent;
    ngx_http_ratelimit_loc_conf_t  *conf = child;

    /* rules are inherited only by a level that has none, as limit_req's */

    if (conf->rules.elts == NULL) {
        conf->rules = prev->rules;
        conf->ends = prev->ends;
        conf->slots = prev->slots;
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
        && ngx_http_ratelimit_location_policy(cf, conf) != NGX_OK)
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
ngx_http_ratelimit_location_policy(ngx_conf_t *cf,
    ngx_http_ratelimit_loc_conf_t *conf)
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
        if (!rl_rule_policy_fixed(&rules[i].common.rule)) {
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
        list[i] = &rules[i].common.rule;
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


static ngx_int_t
ngx_http_ratelimit_init(ngx_conf_t *cf)
{
    ngx_http_ratelimit_main_conf_t  *rmcf;

    rmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module);

    if (ngx_ratelimit_zones_init(cf, &rmcf->common) != NGX_OK
        || ngx_ratelimit_log_init(cf, &rmcf->common) != NGX_OK)
    {
        return NGX_ERROR;
    }

    /*
     * A configuration without rules (the module loaded, as a package does,
     * and not used) registers neither the handler nor the header filter:
     * its requests pay nothing for the module.
     */

    if (rmcf->common.zone_refs.nelts == 0) {
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


/* A worker's start and exit, and the master's: its zones' (zone.c). */

static ngx_int_t
ngx_http_ratelimit_init_process(ngx_cycle_t *cycle)
{
    return ngx_ratelimit_zones_start(cycle);
}


static void
ngx_http_ratelimit_exit_process(ngx_cycle_t *cycle)
{
    ngx_ratelimit_zones_stop(cycle);
}


static void
ngx_http_ratelimit_exit_master(ngx_cycle_t *cycle)
{
    ngx_ratelimit_zones_save(cycle);
}
