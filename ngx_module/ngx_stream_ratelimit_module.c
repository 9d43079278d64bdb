
/*
 * ngx-ratelimit: the stream module, its directives and configuration, and
 * the phases' set-up: ratelimit in nginx's stream block, with the zones,
 * rules and core of the http block's (docs/stream.md).  A .so of its own,
 * loaded after nginx's ngx_stream_module.so.
 */


#include "ngx_stream_ratelimit_handler.h"
#include "ngx_stream_ratelimit_rule_conf.h"
#include "ngx_stream_ratelimit_variables.h"
#include "ngx_ratelimit_zone_conf.h"
#include "ngx_ratelimit_choice.h"
#include "ngx_ratelimit_log.h"


static char *ngx_stream_ratelimit_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static void *ngx_stream_ratelimit_create_main_conf(ngx_conf_t *cf);
static void *ngx_stream_ratelimit_create_srv_conf(ngx_conf_t *cf);
static char *ngx_stream_ratelimit_merge_srv_conf(ngx_conf_t *cf,
    void *parent, void *child);
static ngx_int_t ngx_stream_ratelimit_init(ngx_conf_t *cf);
static void ngx_stream_ratelimit_wrap_content(ngx_conf_t *cf);
static ngx_int_t ngx_stream_ratelimit_init_process(ngx_cycle_t *cycle);
static void ngx_stream_ratelimit_exit_process(ngx_cycle_t *cycle);
static void ngx_stream_ratelimit_exit_master(ngx_cycle_t *cycle);


static ngx_command_t  ngx_stream_ratelimit_commands[] = {

    { ngx_string("ratelimit_zone"),
      NGX_STREAM_MAIN_CONF|NGX_CONF_2MORE,
      ngx_stream_ratelimit_zone,
      NGX_STREAM_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ratelimit"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_1MORE,
      ngx_stream_ratelimit,
      NGX_STREAM_SRV_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ratelimit_combine"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_TAKE1,
      ngx_ratelimit_set_choice,
      NGX_STREAM_SRV_CONF_OFFSET,
      offsetof(ngx_stream_ratelimit_srv_conf_t, combine),
      &ngx_ratelimit_combine_choice },

    { ngx_string("ratelimit_dry_run"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_STREAM_SRV_CONF_OFFSET,
      offsetof(ngx_stream_ratelimit_srv_conf_t, dry_run),
      NULL },

    { ngx_string("ratelimit_log_level"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_TAKE1,
      ngx_ratelimit_set_choice,
      NGX_STREAM_SRV_CONF_OFFSET,
      offsetof(ngx_stream_ratelimit_srv_conf_t, log_level),
      &ngx_ratelimit_log_level_choice },

      ngx_null_command
};


static ngx_stream_module_t  ngx_stream_ratelimit_module_ctx = {
    ngx_stream_ratelimit_add_variables,    /* preconfiguration */
    ngx_stream_ratelimit_init,             /* postconfiguration */

    ngx_stream_ratelimit_create_main_conf, /* create main configuration */
    NULL,                                  /* init main configuration */

    ngx_stream_ratelimit_create_srv_conf,  /* create server configuration */
    ngx_stream_ratelimit_merge_srv_conf    /* merge server configuration */
};


ngx_module_t  ngx_stream_ratelimit_module = {
    NGX_MODULE_V1,
    &ngx_stream_ratelimit_module_ctx,      /* module context */
    ngx_stream_ratelimit_commands,         /* module directives */
    NGX_STREAM_MODULE,                     /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_stream_ratelimit_init_process,     /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_stream_ratelimit_exit_process,     /* exit process */
    ngx_stream_ratelimit_exit_master,      /* exit master */
    NGX_MODULE_V1_PADDING
};


static void *
ngx_stream_ratelimit_create_main_conf(ngx_conf_t *cf)
{
    ngx_stream_ratelimit_main_conf_t  *rmcf;

    rmcf = ngx_pcalloc(cf->pool, sizeof(ngx_stream_ratelimit_main_conf_t));
    if (rmcf == NULL) {
        return NULL;
    }

    /* the references are read in postconfiguration only */

    if (ngx_array_init(&rmcf->common.zone_refs, cf->temp_pool, 16,
                       sizeof(ngx_ratelimit_zone_ref_t))
        != NGX_OK)
    {
        return NULL;
    }

    ngx_str_set(&rmcf->common.block, "stream");

    return rmcf;
}


/*
 * ratelimit_zone in the stream block (ngx_ratelimit_zone_declare): a
 * Redis zone names its servers with the stream block's resolver.
 */

static char *
ngx_stream_ratelimit_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_stream_ratelimit_main_conf_t *rmcf = conf;

    ngx_stream_core_srv_conf_t  *cscf;

    cscf = ngx_stream_conf_get_module_srv_conf(cf, ngx_stream_core_module);
    rmcf->common.resolver = &cscf->resolver;
    rmcf->common.resolver_timeout = &cscf->resolver_timeout;

    return ngx_ratelimit_zone_declare(cf, &rmcf->common);
}


static void *
ngx_stream_ratelimit_create_srv_conf(ngx_conf_t *cf)
{
    ngx_stream_ratelimit_srv_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_stream_ratelimit_srv_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     conf->rules.elts = NULL;
     *     conf->late = 0;
     *     conf->content = NULL;
     */

    conf->combine = NGX_CONF_UNSET_UINT;
    conf->dry_run = NGX_CONF_UNSET;
    conf->log_level = NGX_CONF_UNSET_UINT;

    return conf;
}


static char *
ngx_stream_ratelimit_merge_srv_conf(ngx_conf_t *cf, void *parent,
    void *child)
{
    ngx_stream_ratelimit_srv_conf_t  *prev = parent;
    ngx_stream_ratelimit_srv_conf_t  *conf = child;

    /* rules are inherited only by a server that has none, as in http */

    if (conf->rules.elts == NULL) {
        conf->rules = prev->rules;
        conf->late = prev->late;
        conf->ends = prev->ends;
    }

    ngx_conf_merge_uint_value(conf->combine, prev->combine, RL_COMBINE_ALL);
    ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level, NGX_LOG_ERR);

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_stream_ratelimit_init(ngx_conf_t *cf)
{
    ngx_array_t                       *handlers;
    ngx_stream_handler_pt             *h;
    ngx_stream_core_main_conf_t       *cmcf;
    ngx_stream_ratelimit_main_conf_t  *rmcf;

    rmcf = ngx_stream_conf_get_module_main_conf(cf,
                                                ngx_stream_ratelimit_module);

    if (ngx_ratelimit_zones_init(cf, &rmcf->common) != NGX_OK
        || ngx_ratelimit_log_init(cf, &rmcf->common) != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* a configuration without rules sets no handler: its sessions pay
       nothing for the module */

    if (rmcf->common.zone_refs.nelts == 0) {
        return NGX_OK;
    }

    /*
     * The handler goes first in the preaccess phase's handlers, which
     * nginx runs last to first: after realip and limit_conn, whatever the
     * order modules were loaded in.  A connection limit_conn refuses
     * spends nothing here, and keys see the PROXY protocol's address.
     */

    cmcf = ngx_stream_conf_get_module_main_conf(cf, ngx_stream_core_module);
    handlers = &cmcf->phases[NGX_STREAM_PREACCESS_PHASE].handlers;

    h = ngx_array_push(handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h = handlers->elts;
    ngx_memmove(&h[1], &h[0], (handlers->nelts - 1) * sizeof(*h));
    h[0] = ngx_stream_ratelimit_handler;

    ngx_stream_ratelimit_wrap_content(cf);

    return NGX_OK;
}


/*
 * A server whose rules read a $ssl_ variable decides as its content phase
 * starts, after ssl and ssl_preread: its content handler (proxy_pass,
 * return) is wrapped.  A preread handler would be skipped once
 * ssl_preread has read a ClientHello, and a $ssl_preread_ variable read in
 * the preaccess phase stays empty for the whole session.
 */

static void
ngx_stream_ratelimit_wrap_content(ngx_conf_t *cf)
{
    ngx_uint_t                        i;
    ngx_stream_core_srv_conf_t      **cscfp;
    ngx_stream_core_main_conf_t      *cmcf;
    ngx_stream_ratelimit_srv_conf_t  *rscf;

    cmcf = ngx_stream_conf_get_module_main_conf(cf, ngx_stream_core_module);
    cscfp = cmcf->servers.elts;

    for (i = 0; i < cmcf->servers.nelts; i++) {
        rscf = cscfp[i]->ctx->srv_conf[ngx_stream_ratelimit_module.ctx_index];

        if (rscf->late && rscf->rules.nelts && cscfp[i]->handler != NULL
            && cscfp[i]->handler != ngx_stream_ratelimit_content)
        {
            rscf->content = cscfp[i]->handler;
            cscfp[i]->handler = ngx_stream_ratelimit_content;
        }
    }
}


/*
 * A worker's start and exit, and the master's: every zone's (zone.c; the
 * http module's calls find them done when it is loaded too).
 */

static ngx_int_t
ngx_stream_ratelimit_init_process(ngx_cycle_t *cycle)
{
    return ngx_ratelimit_zones_start(cycle);
}


static void
ngx_stream_ratelimit_exit_process(ngx_cycle_t *cycle)
{
    ngx_ratelimit_zones_stop(cycle);
}


static void
ngx_stream_ratelimit_exit_master(ngx_cycle_t *cycle)
{
    ngx_ratelimit_zones_save(cycle);
}
