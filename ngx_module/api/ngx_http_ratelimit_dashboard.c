
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

#include "ngx_http_ratelimit_answer.h"
#include "ngx_http_ratelimit_dashboard_page.h"


#define RL_DASHBOARD_MARKER  "@RL_DASHBOARD_CONFIG@"
#define RL_DASHBOARD_URI_MAX  1024


typedef struct {
    ngx_str_t                    page;      /* empty: not a dashboard */
    ngx_str_t                    csp;       /* its Content-Security-Policy */
} ngx_http_ratelimit_dashboard_loc_conf_t;


static void *ngx_http_ratelimit_dashboard_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_ratelimit_dashboard(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_ratelimit_dashboard_uri(ngx_conf_t *cf,
    ngx_str_t *param, ngx_str_t *uri);
static ngx_int_t ngx_http_ratelimit_dashboard_csp(ngx_conf_t *cf,
    ngx_str_t *page, ngx_str_t *csp);
static ngx_int_t ngx_http_ratelimit_dashboard_handler(ngx_http_request_t *r);


/*
 * The page's Content-Security-Policy: the page loads nothing from anywhere
 * and reads only this server, and runs (and styles itself with) only its
 * own script and style sheet, each allowed by its SHA-256 (CSP level 2
 * hashes, computed from the page at configuration time, so they cannot
 * drift from it).  No 'unsafe-inline': markup that a name or a key might
 * smuggle into the page would neither run nor style anything.
 */
#define RL_DASHBOARD_CSP                                                      \
    "default-src 'none'; script-src%s; style-src%s; img-src data:; "          \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; "               \
    "frame-ancestors 'self'"

/* room for the hashes of this many elements of each kind */
#define RL_DASHBOARD_INLINE_MAX  4

/*
 * The page holds no state (the figures and keys are in the answers of the
 * stats and the key API, which no cache keeps: no-store): a browser may
 * keep it, but asks again each time, so that the page of a new module or
 * of new URIs is never served stale.
 */
static ngx_str_t  ngx_http_ratelimit_dashboard_cache = ngx_string("no-cache");


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

    if (ngx_http_ratelimit_dashboard_csp(cf, &dlcf->page, &dlcf->csp)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

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


/*
 * The page's policy, with 'sha256-...' for each <script> and <style>
 * element without attributes in it (the configuration block, a <script>
 * with a type, is data, which a browser never runs).
 */

static ngx_int_t
ngx_http_ratelimit_dashboard_csp(ngx_conf_t *cf, ngx_str_t *page,
    ngx_str_t *csp)
{
    u_char      *p, *start, *end, *last, digest[32];
    u_char       hashes[2][RL_DASHBOARD_INLINE_MAX * 56 + 8];
    u_char       open[16], close[16];
    size_t       olen, clen;
    ngx_str_t    src, b64;
    ngx_uint_t   k, n;

    static const char  *tags[] = { "script", "style" };

    last = page->data + page->len;

    for (k = 0; k < 2; k++) {
        olen = ngx_sprintf(open, "<%s>", tags[k]) - open;
        clen = ngx_sprintf(close, "</%s>", tags[k]) - close;
        p = hashes[k];
        start = page->data;
        n = 0;

        while ((start = ngx_strlcasestrn(start, last, open, olen - 1))
               != NULL)
        {
            start += olen;
            end = ngx_strlcasestrn(start, last, close, clen - 1);

            if (end == NULL || n == RL_DASHBOARD_INLINE_MAX) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "\"ratelimit_dashboard\" directive: the "
                                   "embedded page has %s <%s> elements (a "
                                   "broken build)",
                                   end ? "too many" : "unclosed", tags[k]);
                return NGX_ERROR;
            }

            rl_sha256(start, end - start, digest);
            src.data = digest;
            src.len = sizeof(digest);
            b64.data = p + sizeof(" 'sha256-") - 1;
            ngx_encode_base64(&b64, &src);

            p = ngx_cpymem(p, " 'sha256-", sizeof(" 'sha256-") - 1);
            p += b64.len;
            *p++ = '\'';

            n++;
            start = end + clen;
        }

        if (n == 0) {
            p = ngx_cpymem(p, " 'none'", sizeof(" 'none'") - 1);
        }

        *p = '\0';
    }

    csp->len = sizeof(RL_DASHBOARD_CSP) - 1 + ngx_strlen(hashes[0])
               + ngx_strlen(hashes[1]);
    csp->data = ngx_pnalloc(cf->pool, csp->len);
    if (csp->data == NULL) {
        return NGX_ERROR;
    }

    csp->len = ngx_sprintf(csp->data, RL_DASHBOARD_CSP, hashes[0], hashes[1])
               - csp->data;

    return NGX_OK;
}


static ngx_int_t
ngx_http_ratelimit_dashboard_handler(ngx_http_request_t *r)
{
    ngx_int_t                                 rc;
    ngx_keyval_t                              headers[2];
    ngx_http_ratelimit_dashboard_loc_conf_t  *dlcf;

    ngx_str_set(&headers[0].key, "Content-Security-Policy");
    ngx_str_set(&headers[1].key, "Referrer-Policy");
    ngx_str_set(&headers[1].value, "no-referrer");

    dlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_dashboard_module);

    rc = ngx_http_ratelimit_get_only(r, &ngx_http_ratelimit_dashboard_cache);
    if (rc != NGX_OK) {
        return rc;
    }

    ngx_str_set(&r->headers_out.content_type, "text/html; charset=utf-8");
    r->headers_out.content_type_len = sizeof("text/html") - 1;

    headers[0].value = dlcf->csp;

    if (ngx_http_ratelimit_add_headers(r, headers, 2) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_ratelimit_send(r, NGX_HTTP_OK, NULL, dlcf->page.data,
                                   dlcf->page.len);
}

