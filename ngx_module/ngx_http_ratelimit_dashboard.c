
/*
 * ratelimit_dashboard stats=URI [api=URI]: a location answering with the
 * dashboard page, dashboard/dashboard.html, which the build embeds as bytes
 * (dashboard/embed.sh, run by config.make into nginx's objs directory).  The
 * page's configuration block holds the marker RL_DASHBOARD_MARKER; each
 * location's page is made once, at configuration time, with the marker
 * replaced by {"stats":"URI","api":"URI"|null}.
 *
 * A module of its own in the module's shared object, so that it has a
 * location configuration of its own for the page.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_ratelimit_dashboard_page.h"


#define RL_DASHBOARD_MARKER  "@RL_DASHBOARD_CONFIG@"
#define RL_DASHBOARD_URI_MAX  1024


typedef struct {
    ngx_str_t                    page;      /* empty: not a dashboard */
} ngx_http_ratelimit_dashboard_loc_conf_t;


static void *ngx_http_ratelimit_dashboard_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_ratelimit_dashboard(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_ratelimit_dashboard_uri(ngx_conf_t *cf,
    ngx_str_t *param, ngx_str_t *uri);
static ngx_int_t ngx_http_ratelimit_dashboard_handler(ngx_http_request_t *r);


/*
 * The page's headers.  It loads nothing from anywhere and reads only this
 * server: the browser holds it to that.
 */
static ngx_keyval_t  ngx_http_ratelimit_dashboard_headers[] = {
    { ngx_string("Content-Security-Policy"),
      ngx_string("default-src 'none'; script-src 'unsafe-inline'; "
                 "style-src 'unsafe-inline'; img-src data:; "
                 "connect-src 'self'; base-uri 'none'; form-action 'none'; "
                 "frame-ancestors 'self'") },
    { ngx_string("Cache-Control"), ngx_string("no-cache") },
    { ngx_string("X-Content-Type-Options"), ngx_string("nosniff") },
    { ngx_string("Referrer-Policy"), ngx_string("no-referrer") }
};


static ngx_command_t  ngx_http_ratelimit_dashboard_commands[] = {

    { ngx_string("ratelimit_dashboard"),
      NGX_HTTP_LOC_CONF|NGX_CONF_ANY,
      ngx_http_ratelimit_dashboard,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_ratelimit_dashboard_module_ctx = {
    NULL,                                  /* preconfiguration */
    NULL,                                  /* postconfiguration */

    NULL,                                  /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_ratelimit_dashboard_create_loc_conf,
                                           /* create location configuration */
    NULL                                   /* merge location configuration */
};


ngx_module_t  ngx_http_ratelimit_dashboard_module = {
    NGX_MODULE_V1,
    &ngx_http_ratelimit_dashboard_module_ctx,  /* module context */
    ngx_http_ratelimit_dashboard_commands,     /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static void *
ngx_http_ratelimit_dashboard_create_loc_conf(ngx_conf_t *cf)
{
    return ngx_pcalloc(cf->pool,
                       sizeof(ngx_http_ratelimit_dashboard_loc_conf_t));
}


static char *
ngx_http_ratelimit_dashboard(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ratelimit_dashboard_loc_conf_t  *dlcf = conf;

    u_char                    *p, *marker;
    size_t                     len, mlen;
    ngx_str_t                 *value, *uri, stats, api;
    ngx_uint_t                 i;
    ngx_http_core_loc_conf_t  *clcf;

    if (dlcf->page.len) {
        return "is duplicate";
    }

    value = cf->args->elts;
    ngx_str_null(&stats);
    ngx_str_null(&api);

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "stats=", 6) == 0) {
            uri = &stats;

        } else if (ngx_strncmp(value[i].data, "api=", 4) == 0) {
            uri = &api;

        } else {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit_dashboard\" directive: unknown "
                               "parameter \"%V\": expected stats=URI or "
                               "api=URI", &value[i]);
            return NGX_CONF_ERROR;
        }

        if (uri->data != NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit_dashboard\" directive: duplicate "
                               "parameter \"%V\": each parameter may be given "
                               "once", &value[i]);
            return NGX_CONF_ERROR;
        }

        if (ngx_http_ratelimit_dashboard_uri(cf, &value[i], uri) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }

    if (stats.data == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_dashboard\" directive: missing "
                           "\"stats=\": expected stats=URI, the location of "
                           "ratelimit_stats");
        return NGX_CONF_ERROR;
    }

    /* the page with its configuration in place of the marker */

    mlen = sizeof(RL_DASHBOARD_MARKER) - 1;
    marker = ngx_strlcasestrn((u_char *) ngx_http_ratelimit_dashboard_page,
                              (u_char *) ngx_http_ratelimit_dashboard_page
                              + sizeof(ngx_http_ratelimit_dashboard_page),
                              (u_char *) RL_DASHBOARD_MARKER, mlen - 1);
    if (marker == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_dashboard\" directive: the embedded "
                           "page has no %s marker (a broken build)",
                           RL_DASHBOARD_MARKER);
        return NGX_CONF_ERROR;
    }

    /* the longer of {"stats":"","api":""} and {"stats":"","api":null} */
    len = sizeof(ngx_http_ratelimit_dashboard_page) - mlen
          + sizeof("{\"stats\":\"\",\"api\":null}") - 1
          + stats.len + api.len;

    p = ngx_pnalloc(cf->pool, len);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }

    dlcf->page.data = p;
    p = ngx_cpymem(p, ngx_http_ratelimit_dashboard_page,
                   marker - ngx_http_ratelimit_dashboard_page);

    /* the URIs hold no character that JSON or HTML would escape */
    p = ngx_sprintf(p, "{\"stats\":\"%V\",\"api\":", &stats);

    if (api.data) {
        p = ngx_sprintf(p, "\"%V\"}", &api);

    } else {
        p = ngx_cpymem(p, "null}", 5);
    }

    marker += mlen;
    p = ngx_cpymem(p, marker, ngx_http_ratelimit_dashboard_page
                              + sizeof(ngx_http_ratelimit_dashboard_page)
                              - marker);
    dlcf->page.len = p - dlcf->page.data;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_ratelimit_dashboard_handler;

    return NGX_CONF_OK;
}


/*
 * The value of "stats=URI" or "api=URI": a path on this server that the page
 * fetches, written into the page as it is.  Only characters that need no
 * escaping in a URI, in JSON or in HTML are allowed, and %XX escapes.
 */

static ngx_int_t
ngx_http_ratelimit_dashboard_uri(ngx_conf_t *cf, ngx_str_t *param,
    ngx_str_t *uri)
{
    u_char      c, *name_end;
    size_t      i;
    const char  *why;

    name_end = ngx_strlchr(param->data, param->data + param->len, '=');
    uri->data = name_end + 1;
    uri->len = param->data + param->len - uri->data;

    why = NULL;

    if (uri->len == 0 || uri->data[0] != '/') {
        why = "expected a path on this server, starting with \"/\"";

    } else if (uri->len > 1 && uri->data[1] == '/') {
        why = "a path may not start with \"//\" (another host)";

    } else if (uri->len > RL_DASHBOARD_URI_MAX) {
        why = "longer than 1024 characters";
    }

    for (i = 0; why == NULL && i < uri->len; i++) {
        c = uri->data[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9')
            || ngx_strlchr((u_char *) "/-._~!$()*+,;=:@",
                           (u_char *) "/-._~!$()*+,;=:@" + 16, c) != NULL)
        {
            continue;
        }

        if (c == '%' && i + 2 < uri->len
            && ngx_hextoi(&uri->data[i + 1], 2) != NGX_ERROR)
        {
            i += 2;
            continue;
        }

        why = "expected letters, digits, /-._~!$()*+,;=:@ and %XX escapes "
              "(no query string, quotes, spaces or <>&)";
    }

    if (why == NULL) {
        return NGX_OK;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"ratelimit_dashboard\" directive: invalid \"%V\": %s",
                       param, why);
    return NGX_ERROR;
}


static ngx_int_t
ngx_http_ratelimit_dashboard_handler(ngx_http_request_t *r)
{
    ngx_int_t                                 rc;
    ngx_buf_t                                *b;
    ngx_uint_t                                i;
    ngx_table_elt_t                          *h;
    ngx_chain_t                               out;
    ngx_http_ratelimit_dashboard_loc_conf_t  *dlcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    dlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_dashboard_module);

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = dlcf->page.len;
    ngx_str_set(&r->headers_out.content_type, "text/html; charset=utf-8");
    r->headers_out.content_type_len = sizeof("text/html") - 1;

    for (i = 0; i < sizeof(ngx_http_ratelimit_dashboard_headers)
                    / sizeof(ngx_keyval_t); i++)
    {
        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        h->hash = 1;
        h->key = ngx_http_ratelimit_dashboard_headers[i].key;
        h->value = ngx_http_ratelimit_dashboard_headers[i].value;
#if (nginx_version >= 1023000)
        h->next = NULL;
#endif
    }

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->pos = dlcf->page.data;
    b->last = dlcf->page.data + dlcf->page.len;
    b->memory = 1;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}

