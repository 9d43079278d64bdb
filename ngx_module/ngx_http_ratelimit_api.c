
/*
 * ngx-ratelimit: ratelimit_api, the key API: the directive, the request's
 * path and parameters, errors and the answer's sending (what it answers is
 * in ngx_http_ratelimit_api_keys.c).  In a prefix location, paths relative
 * to it:
 *
 *   GET    zones                     the zones, their rules and figures
 *   GET    zones/NAME                one of them
 *   GET    zones/NAME/keys?key=K     a key's state in each rule of the zone
 *          (&rule=R: in one), or ?fingerprint=F&rule=R
 *   DELETE zones/NAME/keys?...       resets it (write=on), logged at notice
 *   GET    zones/NAME/top[?rule=R]   the keys each rule refuses most
 *
 * Every answer is JSON, errors too (and carries nosniff and no-store,
 * ngx_http_ratelimit_answer_headers): {"error":"..."} with 400 (a bad
 * parameter; a fingerprint for a Redis zone), 403 (a write not allowed),
 * 404 (no such resource, zone or rule), 405 (with Allow) or 409 (a Redis
 * zone whose Redis did not answer).  A key is read and reset through the
 * core (rl_table_peek, rl_table_reset), under the zone's lock as a request
 * takes it, in a worker; or in Redis (ngx_http_ratelimit_api_redis.c).
 */


#include "ngx_http_ratelimit_module.h"
#include "ngx_http_ratelimit_api.h"


/* A query parameter a resource takes: its name and where it goes. */
typedef struct {
    ngx_str_t                    name;
    ngx_uint_t                   resources; /* bits of 1 << resource */
} ngx_http_ratelimit_api_param_t;


static ngx_int_t ngx_http_ratelimit_api_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_ratelimit_api_path(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
static ngx_int_t ngx_http_ratelimit_api_args(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
static ngx_int_t ngx_http_ratelimit_api_arg(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, ngx_uint_t which, ngx_str_t *value);
static ngx_http_ratelimit_zone_t *ngx_http_ratelimit_api_zone(
    ngx_str_t *name);
static ngx_int_t ngx_http_ratelimit_api_bad(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, ngx_uint_t status, const char *fmt, ...);
static ngx_str_t *ngx_http_ratelimit_api_shown(ngx_http_request_t *r,
    ngx_str_t *s);


static ngx_str_t  ngx_http_ratelimit_api_names[] = {
    ngx_string("zones"),
    ngx_string("zone"),
    ngx_string("keys"),
    ngx_string("top")
};


#define NGX_HTTP_RATELIMIT_API_ARG_KEY          0
#define NGX_HTTP_RATELIMIT_API_ARG_FINGERPRINT  1
#define NGX_HTTP_RATELIMIT_API_ARG_RULE         2

static ngx_http_ratelimit_api_param_t  ngx_http_ratelimit_api_params[] = {
    { ngx_string("key"), 1 << NGX_HTTP_RATELIMIT_API_KEYS },
    { ngx_string("fingerprint"), 1 << NGX_HTTP_RATELIMIT_API_KEYS },
    { ngx_string("rule"), 1 << NGX_HTTP_RATELIMIT_API_KEYS
                          | 1 << NGX_HTTP_RATELIMIT_API_TOP },
    { ngx_null_string, 0 }
};


static ngx_str_t  ngx_http_ratelimit_api_type =
    ngx_string("application/json");


/* ratelimit_api [write=on|off]; */

char *
ngx_http_ratelimit_api(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ratelimit_loc_conf_t *rlcf = conf;

    ngx_str_t                 *value;
    ngx_http_core_loc_conf_t  *clcf;

    if (rlcf->api_write != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (clcf->named || clcf->exact_match
#if (NGX_PCRE)
        || clcf->regex
#endif
        || clcf->name.len == 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_api\" directive: location \"%V\" is "
                           "not a prefix location: the API's paths are "
                           "relative to its prefix, as in "
                           "\"location /ratelimit/api/ { ratelimit_api; }\"",
                           &clcf->name);
        return NGX_CONF_ERROR;
    }

    value = cf->args->elts;
    rlcf->api_write = 0;

    if (cf->args->nelts == 2) {
        if (ngx_strcmp(value[1].data, "write=on") == 0) {
            rlcf->api_write = 1;

        } else if (ngx_strcmp(value[1].data, "write=off") != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit_api\" directive: unknown "
                               "parameter \"%V\": expected write=on or "
                               "write=off", &value[1]);
            return NGX_CONF_ERROR;
        }
    }

    clcf->handler = ngx_http_ratelimit_api_handler;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_ratelimit_api_handler(ngx_http_request_t *r)
{
    ngx_int_t                        rc;
    ngx_uint_t                       methods;
    ngx_table_elt_t                 *allow;
    ngx_http_ratelimit_api_req_t     q;
    ngx_http_ratelimit_loc_conf_t   *rlcf;

    if (ngx_http_ratelimit_answer_headers(r, NULL) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    ngx_memzero(&q, sizeof(ngx_http_ratelimit_api_req_t));

    if (ngx_http_ratelimit_api_path(r, &q) != NGX_OK) {
        return ngx_http_ratelimit_api_error(r, NGX_HTTP_NOT_FOUND,
                   "no such resource: expected zones, zones/NAME, "
                   "zones/NAME/keys or zones/NAME/top");
    }

    methods = NGX_HTTP_GET|NGX_HTTP_HEAD;
    if (q.resource == NGX_HTTP_RATELIMIT_API_KEYS) {
        methods |= NGX_HTTP_DELETE;
    }

    if (!(r->method & methods)) {
        allow = ngx_list_push(&r->headers_out.headers);
        if (allow == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        allow->hash = 1;
        ngx_str_set(&allow->key, "Allow");
#if (nginx_version >= 1023000)
        allow->next = NULL;
#endif

        if (methods & NGX_HTTP_DELETE) {
            ngx_str_set(&allow->value, "GET, HEAD, DELETE");

        } else {
            ngx_str_set(&allow->value, "GET, HEAD");
        }

        return ngx_http_ratelimit_api_error(r, NGX_HTTP_NOT_ALLOWED,
                   "method %V not allowed on %s: %V",
                   &r->method_name,
                   ngx_http_ratelimit_api_names[q.resource].data,
                   &allow->value);
    }

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);

    if (r->method == NGX_HTTP_DELETE && !rlcf->api_write) {
        return ngx_http_ratelimit_api_error(r, NGX_HTTP_FORBIDDEN,
                   "writes are not enabled here (ratelimit_api write=on "
                   "enables them)");
    }

    if (ngx_http_ratelimit_api_args(r, &q) != NGX_OK) {
        return q.rc;
    }

    if (q.resource != NGX_HTTP_RATELIMIT_API_ZONES) {
        q.zone = ngx_http_ratelimit_api_zone(&q.zone_name);

        if (q.zone == NULL) {
            return ngx_http_ratelimit_api_error(r, NGX_HTTP_NOT_FOUND,
                       "no zone \"%V\"",
                       ngx_http_ratelimit_api_shown(r, &q.zone_name));
        }

        if (q.rule.len && ngx_http_ratelimit_zone_rule(q.zone, &q.rule)
                          == NULL)
        {
            return ngx_http_ratelimit_api_error(r, NGX_HTTP_NOT_FOUND,
                       "zone \"%V\" has no rule \"%V\"", &q.zone->name,
                       ngx_http_ratelimit_api_shown(r, &q.rule));
        }
    }

    switch (q.resource) {

    case NGX_HTTP_RATELIMIT_API_KEYS:
        return ngx_http_ratelimit_api_keys(r, &q);

    case NGX_HTTP_RATELIMIT_API_TOP:
        return ngx_http_ratelimit_api_top(r, &q);

    default:
        return ngx_http_ratelimit_api_zones(r, &q);
    }
}


/*
 * The path after the location's prefix: zones, zones/NAME,
 * zones/NAME/keys or zones/NAME/top.  A prefix without a trailing "/" is
 * followed by one ("location /rl" answers /rl/zones, not /rlzones).
 */

static ngx_int_t
ngx_http_ratelimit_api_path(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    u_char                    *p, *last, *slash;
    ngx_str_t                  rest;
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (r->uri.len < clcf->name.len
        || ngx_strncmp(r->uri.data, clcf->name.data, clcf->name.len) != 0)
    {
        return NGX_DECLINED;
    }

    p = r->uri.data + clcf->name.len;
    last = r->uri.data + r->uri.len;

    if (clcf->name.data[clcf->name.len - 1] != '/') {
        if (p == last || *p != '/') {
            return NGX_DECLINED;
        }

        p++;
    }

    if (last - p < 5 || ngx_strncmp(p, "zones", 5) != 0) {
        return NGX_DECLINED;
    }

    p += 5;

    if (p == last) {
        q->resource = NGX_HTTP_RATELIMIT_API_ZONES;
        return NGX_OK;
    }

    if (*p++ != '/') {
        return NGX_DECLINED;
    }

    slash = ngx_strlchr(p, last, '/');

    q->zone_name.data = p;
    q->zone_name.len = (slash ? slash : last) - p;

    if (q->zone_name.len == 0) {
        return NGX_DECLINED;
    }

    if (slash == NULL) {
        q->resource = NGX_HTTP_RATELIMIT_API_ZONE;
        return NGX_OK;
    }

    rest.data = slash + 1;
    rest.len = last - rest.data;

    if (rest.len == 4 && ngx_strncmp(rest.data, "keys", 4) == 0) {
        q->resource = NGX_HTTP_RATELIMIT_API_KEYS;
        return NGX_OK;
    }

    if (rest.len == 3 && ngx_strncmp(rest.data, "top", 3) == 0) {
        q->resource = NGX_HTTP_RATELIMIT_API_TOP;
        return NGX_OK;
    }

    return NGX_DECLINED;
}


/*
 * The query string: each parameter the resource takes, once, %-decoded.
 * Anything else is a 400 naming it.  Returns NGX_OK or the response's.
 */

static ngx_int_t
ngx_http_ratelimit_api_args(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    u_char                          *p, *last, *amp, *eq;
    ngx_int_t                        rc;
    ngx_str_t                        name, value;
    ngx_uint_t                       i, seen;
    ngx_http_ratelimit_api_param_t  *prm;

    p = r->args.data;
    last = p + r->args.len;
    seen = 0;

    while (p < last) {
        amp = ngx_strlchr(p, last, '&');
        if (amp == NULL) {
            amp = last;
        }

        eq = ngx_strlchr(p, amp, '=');

        name.data = p;
        name.len = (eq ? eq : amp) - p;
        value.data = eq ? eq + 1 : amp;
        value.len = amp - value.data;
        p = amp + 1;

        if (name.len == 0 && value.len == 0) {
            continue;   /* "&&" */
        }

        for (i = 0, prm = ngx_http_ratelimit_api_params; prm->name.len;
             i++, prm++)
        {
            if (prm->name.len == name.len
                && ngx_strncmp(prm->name.data, name.data, name.len) == 0
                && (prm->resources & (1 << q->resource)))
            {
                break;
            }
        }

        if (prm->name.len == 0) {
            return ngx_http_ratelimit_api_bad(r, q, NGX_HTTP_BAD_REQUEST,
                       "unknown parameter \"%V\" for %s: expected %s",
                       ngx_http_ratelimit_api_shown(r, &name),
                       ngx_http_ratelimit_api_names[q->resource].data,
                       q->resource == NGX_HTTP_RATELIMIT_API_KEYS
                       ? "key=, fingerprint= or rule="
                       : q->resource == NGX_HTTP_RATELIMIT_API_TOP
                         ? "rule=" : "none");
        }

        if (seen & (1 << i)) {
            return ngx_http_ratelimit_api_bad(r, q, NGX_HTTP_BAD_REQUEST,
                       "parameter \"%V\" given twice", &prm->name);
        }

        seen |= 1 << i;

        rc = ngx_http_ratelimit_api_arg(r, q, i, &value);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    if (q->resource != NGX_HTTP_RATELIMIT_API_KEYS) {
        return NGX_OK;
    }

    if (q->key.data == NULL && !q->has_fingerprint) {
        return ngx_http_ratelimit_api_bad(r, q, NGX_HTTP_BAD_REQUEST,
                   "which key? expected key=K (the key's value, "
                   "%%-encoded) or fingerprint=F&rule=R");
    }

    if (q->key.data && q->has_fingerprint) {
        return ngx_http_ratelimit_api_bad(r, q, NGX_HTTP_BAD_REQUEST,
                   "key= and fingerprint= name the same thing: give one");
    }

    if (q->has_fingerprint && q->rule.len == 0) {
        return ngx_http_ratelimit_api_bad(r, q, NGX_HTTP_BAD_REQUEST,
                   "a fingerprint is of one rule's key: give rule= too");
    }

    return NGX_OK;
}


/* One parameter's value, checked and decoded. */

static ngx_int_t
ngx_http_ratelimit_api_arg(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, ngx_uint_t which, ngx_str_t *value)
{
    u_char      *src, *dst, c;
    size_t       i;
    ngx_str_t    decoded;

    /* every "%" starts an escape of two hex digits */

    for (i = 0; i < value->len; i++) {
        if (value->data[i] == '%'
            && (i + 2 >= value->len
                || ngx_hextoi(&value->data[i + 1], 2) == NGX_ERROR))
        {
            return ngx_http_ratelimit_api_bad(r, q, NGX_HTTP_BAD_REQUEST,
                       "parameter \"%V\": a %% not followed by two hex "
                       "digits", &ngx_http_ratelimit_api_params[which].name);
        }
    }

    if (value->len > 3 * NGX_HTTP_RATELIMIT_API_KEY_MAX) {
        goto too_long;
    }

    decoded.data = ngx_pnalloc(r->pool, value->len + 1);
    if (decoded.data == NULL) {
        q->rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        return NGX_DONE;
    }

    src = value->data;
    dst = decoded.data;
    ngx_unescape_uri(&dst, &src, value->len, 0);
    decoded.len = dst - decoded.data;

    if (decoded.len > NGX_HTTP_RATELIMIT_API_KEY_MAX) {
        goto too_long;
    }

    switch (which) {

    case NGX_HTTP_RATELIMIT_API_ARG_KEY:
        if (decoded.len == 0) {
            return ngx_http_ratelimit_api_bad(r, q, NGX_HTTP_BAD_REQUEST,
                       "an empty key: a request whose key is empty is "
                       "exempt from the rule, it has no state");
        }

        q->key = decoded;
        return NGX_OK;

    case NGX_HTTP_RATELIMIT_API_ARG_FINGERPRINT:
        if (decoded.len != 16) {
            goto bad_fingerprint;
        }

        for (i = 0; i < 16; i++) {
            c = decoded.data[i];

            if (c >= '0' && c <= '9') {
                q->fingerprint = q->fingerprint << 4 | (c - '0');

            } else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') {
                q->fingerprint = q->fingerprint << 4 | ((c | 0x20) - 'a' + 10);

            } else {
                goto bad_fingerprint;
            }
        }

        q->has_fingerprint = 1;
        return NGX_OK;

    default: /* NGX_HTTP_RATELIMIT_API_ARG_RULE */
        if (decoded.len == 0 || decoded.len >= RL_NAME_MAX) {
            return ngx_http_ratelimit_api_bad(r, q, NGX_HTTP_BAD_REQUEST,
                       "rule=: expected a rule's name, 1 to %d bytes",
                       RL_NAME_MAX - 1);
        }

        q->rule = decoded;
        return NGX_OK;
    }

too_long:

    return ngx_http_ratelimit_api_bad(r, q, NGX_HTTP_BAD_REQUEST,
               "parameter \"%V\" longer than %d bytes",
               &ngx_http_ratelimit_api_params[which].name,
               NGX_HTTP_RATELIMIT_API_KEY_MAX);

bad_fingerprint:

    return ngx_http_ratelimit_api_bad(r, q, NGX_HTTP_BAD_REQUEST,
               "fingerprint=: expected 16 hex digits, as log lines and "
               "$ratelimit_fingerprint show it");
}


/* A zone of the running configuration by its name. */

static ngx_http_ratelimit_zone_t *
ngx_http_ratelimit_api_zone(ngx_str_t *name)
{
    ngx_uint_t                  i;
    ngx_list_part_t            *part;
    ngx_http_ratelimit_zone_t  *zone;

    part = NULL;
    i = 0;

    while ((zone = ngx_http_ratelimit_next_zone((ngx_cycle_t *) ngx_cycle,
                                                 &part, &i))
           != NULL)
    {
        if (zone->name.len == name->len
            && ngx_strncmp(zone->name.data, name->data, name->len) == 0)
        {
            return zone;
        }
    }

    return NULL;
}


void
ngx_http_ratelimit_api_fingerprint(ngx_http_ratelimit_writer_t *w,
    uint64_t tag)
{
    u_char  *p;

    p = ngx_http_ratelimit_room(w, sizeof("\"fingerprint\":\"\"") - 1 + 16);
    if (p != NULL) {
        w->last->buf->last = ngx_sprintf(p, "\"fingerprint\":\"%016xL\"",
                                         tag);
    }
}


void
ngx_http_ratelimit_api_field(ngx_http_ratelimit_writer_t *w,
    const char *name, uint64_t n)
{
    ngx_http_ratelimit_write(w, name, ngx_strlen(name));
    ngx_http_ratelimit_write_number(w, n);
}


/* JSON (never cached: the handler's ngx_http_ratelimit_answer_headers). */

ngx_int_t
ngx_http_ratelimit_api_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_http_ratelimit_writer_t *w)
{
    return ngx_http_ratelimit_send(r, status, &ngx_http_ratelimit_api_type,
                                   w);
}


/*
 * {"error":"..."} with status: the message's arguments that a client chose
 * are escaped by the caller (ngx_http_ratelimit_escape_key) or are names of
 * this configuration.
 */

ngx_int_t
ngx_http_ratelimit_api_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *fmt, ...)
{
    va_list                       args;
    ngx_str_t                     msg;
    ngx_http_ratelimit_writer_t   w;
    u_char                        buf[512 + NGX_HTTP_RATELIMIT_KEY_ESCAPED];

    va_start(args, fmt);
    msg.data = buf;
    msg.len = ngx_vslprintf(buf, buf + sizeof(buf), fmt, args) - buf;
    va_end(args);

    ngx_memzero(&w, sizeof(ngx_http_ratelimit_writer_t));
    w.pool = r->pool;

    ngx_http_ratelimit_puts(&w, "{\"error\":");
    ngx_http_ratelimit_write_quoted(&w, &msg);
    ngx_http_ratelimit_puts(&w, "}\n");

    return ngx_http_ratelimit_api_send(r, status, &w);
}


/* An error sent while reading the request: q->rc is the handler's. */

static ngx_int_t
ngx_http_ratelimit_api_bad(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, ngx_uint_t status, const char *fmt, ...)
{
    va_list  args;
    u_char   buf[512 + NGX_HTTP_RATELIMIT_KEY_ESCAPED];
    u_char  *last;

    va_start(args, fmt);
    last = ngx_vslprintf(buf, buf + sizeof(buf), fmt, args);
    va_end(args);

    q->rc = ngx_http_ratelimit_api_error(r, status, "%*s",
                                         (size_t) (last - buf), buf);

    return NGX_DONE;
}


/* A name a client chose, escaped for a message (as a key is). */

static ngx_str_t *
ngx_http_ratelimit_api_shown(ngx_http_request_t *r, ngx_str_t *s)
{
    ngx_str_t  *shown;

    static ngx_str_t  none = ngx_string("?");

    shown = ngx_palloc(r->pool, sizeof(ngx_str_t));
    if (shown == NULL) {
        return &none;
    }

    shown->data = ngx_pnalloc(r->pool, NGX_HTTP_RATELIMIT_KEY_ESCAPED);
    if (shown->data == NULL) {
        return &none;
    }

    shown->len = ngx_http_ratelimit_escape_key(shown->data, s->data, s->len)
                 - shown->data;

    return shown;
}
