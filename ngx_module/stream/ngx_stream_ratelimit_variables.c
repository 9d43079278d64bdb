
/*
 * ngx-ratelimit: the stream module's variables, for log_format and map:
 * $ratelimit_status (HTTP's words: PASSED, DELAYED, REJECTED, ...) and
 * $ratelimit_rule (the binding rule's name).  Not cached: a map or a
 * proxy_pass may read one before the session is decided.
 */


#include "ngx_stream_ratelimit_variables.h"
#include "ngx_ratelimit_log.h"


static ngx_int_t ngx_stream_ratelimit_variable(ngx_stream_session_t *s,
    ngx_stream_variable_value_t *v, uintptr_t data);


#define NGX_STREAM_RATELIMIT_VAR_STATUS  0
#define NGX_STREAM_RATELIMIT_VAR_RULE    1


static ngx_stream_variable_t  ngx_stream_ratelimit_vars[] = {

    { ngx_string("ratelimit_status"), NULL, ngx_stream_ratelimit_variable,
      NGX_STREAM_RATELIMIT_VAR_STATUS, NGX_STREAM_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_rule"), NULL, ngx_stream_ratelimit_variable,
      NGX_STREAM_RATELIMIT_VAR_RULE, NGX_STREAM_VAR_NOCACHEABLE, 0 },

      ngx_stream_null_variable
};


static ngx_int_t
ngx_stream_ratelimit_variable(ngx_stream_session_t *s,
    ngx_stream_variable_value_t *v, uintptr_t data)
{
    ngx_str_t                   *str;
    ngx_stream_ratelimit_ctx_t  *ctx;

    ctx = ngx_stream_get_module_ctx(s, ngx_stream_ratelimit_module);

    if (ctx == NULL || ctx->status == 0
        || (data == NGX_STREAM_RATELIMIT_VAR_RULE && ctx->rule == NULL))
    {
        v->not_found = 1;
        return NGX_OK;
    }

    str = data == NGX_STREAM_RATELIMIT_VAR_STATUS
          ? &ngx_ratelimit_status_names[ctx->status]
          : &ctx->rule->common.name;

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->len = str->len;
    v->data = str->data;

    return NGX_OK;
}


ngx_int_t
ngx_stream_ratelimit_add_variables(ngx_conf_t *cf)
{
    ngx_stream_variable_t  *var, *v;

    for (v = ngx_stream_ratelimit_vars; v->name.len; v++) {
        var = ngx_stream_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}
