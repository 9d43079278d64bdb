
/*
 * ngx-ratelimit: ratelimit_stats: every zone's snapshot
 * (ngx_ratelimit_snapshot.c), rendered by the core as JSON or Prometheus
 * text, and sent.
 */


#include "ngx_http_ratelimit_stats.h"
#include "ngx_http_ratelimit_answer.h"
#include "ngx_ratelimit_snapshot.h"


static ngx_int_t ngx_http_ratelimit_stats_handler(ngx_http_request_t *r);


char *
ngx_http_ratelimit_stats(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_ratelimit_stats_handler;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_ratelimit_stats_handler(ngx_http_request_t *r)
{
    char                 *p;
    size_t                len;
    ngx_int_t             rc;
    ngx_str_t             format, type;
    ngx_uint_t            prometheus;
    rl_stats_snapshot_t   s;
    size_t              (*render)(const rl_stats_snapshot_t *s, char *buf,
                                  size_t cap);

    rc = ngx_http_ratelimit_get_only(r, NULL);
    if (rc != NGX_OK) {
        return rc;
    }

    prometheus = ngx_http_arg(r, (u_char *) "format", 6, &format) == NGX_OK
                 && format.len == sizeof("prometheus") - 1
                 && ngx_strncmp(format.data, "prometheus", format.len) == 0;

    if (ngx_ratelimit_snapshot(r->pool, prometheus
                                   ? NGX_RATELIMIT_SNAPSHOT_COUNTERS
                                     |NGX_RATELIMIT_SNAPSHOT_TOPS
                                   : NGX_RATELIMIT_SNAPSHOT_COUNTERS, &s)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (prometheus) {
        render = rl_render_stats_prometheus;
        ngx_str_set(&type, "text/plain; version=0.0.4");

    } else {
        render = rl_render_stats_json;
        ngx_str_set(&type, "application/json");
    }

    /* the size first, then the text */

    len = render(&s, NULL, 0);
    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    render(&s, p, len);

    return ngx_http_ratelimit_send(r, NGX_HTTP_OK, &type, (u_char *) p, len);
}


