
/*
 * ngx-ratelimit: ratelimit_api, the key API.  In a prefix location, paths
 * relative to it:
 *
 *   GET    zones                     the zones, their rules and figures
 *   GET    zones/NAME                one of them
 *   GET    zones/NAME/keys?key=K     a key's state in each rule of the zone
 *          (&rule=R: in one), or ?fingerprint=F&rule=R
 *   DELETE zones/NAME/keys?...       resets it (write=on), logged at notice
 *   GET    zones/NAME/top[?rule=R]   the keys each rule refuses most
 *
 * Every answer is JSON, errors too: {"error":"..."} with 400 (a bad
 * parameter), 403 (a write not allowed), 404 (no such resource, zone or
 * rule), 405 (with Allow) or 501 (a key of a Redis zone).  A key is read
 * and reset through the core (rl_table_peek, rl_table_reset), under the
 * zone's lock as a request takes it, in a worker.
 */


#include "ngx_http_ratelimit_module.h"


/* The longest key, after %-decoding, that the API looks up. */
#define NGX_HTTP_RATELIMIT_API_KEY_MAX  4096

#define NGX_HTTP_RATELIMIT_API_ZONES    0
#define NGX_HTTP_RATELIMIT_API_ZONE     1
#define NGX_HTTP_RATELIMIT_API_KEYS     2
#define NGX_HTTP_RATELIMIT_API_TOP      3


/* What a request asks for. */
typedef struct {
    ngx_uint_t                   resource;  /* NGX_HTTP_RATELIMIT_API_* */
    ngx_str_t                    zone_name;
    ngx_http_ratelimit_zone_t   *zone;
    ngx_str_t                    key;       /* decoded; data NULL: none */
    ngx_str_t                    rule;
    uint64_t                     fingerprint;
    ngx_uint_t                   has_fingerprint;
    ngx_int_t                    rc;        /* of a response sent already */
} ngx_http_ratelimit_api_req_t;


/* A state of a key that a lookup reads or a reset clears: a rule's. */
typedef struct {
    ngx_http_ratelimit_rule_t   *rule;
    uint64_t                     tag;
    uint64_t                     cost;
    rl_peek_t                    peek;
    int                          reset;     /* RL_RESET_* */
} ngx_http_ratelimit_api_state_t;


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
static ngx_int_t ngx_http_ratelimit_api_zones(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
static void ngx_http_ratelimit_api_zone_json(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_zone_t *zone);
static void ngx_http_ratelimit_api_rule_json(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_rule_t *rule);
static ngx_int_t ngx_http_ratelimit_api_keys(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
static ngx_array_t *ngx_http_ratelimit_api_states(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
static void ngx_http_ratelimit_api_log_reset(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, ngx_http_ratelimit_api_state_t *st);
static void ngx_http_ratelimit_api_state_json(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_api_state_t *st, ngx_uint_t reset);
static ngx_int_t ngx_http_ratelimit_api_top(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
static void ngx_http_ratelimit_api_head(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_api_req_t *q);
static void ngx_http_ratelimit_api_fingerprint(
    ngx_http_ratelimit_writer_t *w, uint64_t tag);
static void ngx_http_ratelimit_api_field(ngx_http_ratelimit_writer_t *w,
    const char *name, uint64_t n);
static ngx_int_t ngx_http_ratelimit_api_send(ngx_http_request_t *r,
    ngx_uint_t status, ngx_http_ratelimit_writer_t *w);
static ngx_int_t ngx_http_ratelimit_api_error(ngx_http_request_t *r,
    ngx_uint_t status, const char *fmt, ...);
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

    if (clcf->named
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


/*
 * GET zones: {"version":V,"write":B,"top_epoch_ms":N,"zones":{NAME:{...}}};
 * GET zones/NAME: {"zone":NAME,...} with the same fields as a zone there.
 */

static ngx_int_t
ngx_http_ratelimit_api_zones(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    ngx_uint_t                      i, n;
    ngx_list_part_t                *part;
    ngx_http_ratelimit_zone_t      *zone;
    ngx_http_ratelimit_writer_t     w;
    ngx_http_ratelimit_loc_conf_t  *rlcf;

    ngx_memzero(&w, sizeof(ngx_http_ratelimit_writer_t));
    w.pool = r->pool;

    if (q->zone) {
        ngx_http_ratelimit_puts(&w, "{\"zone\":");
        ngx_http_ratelimit_write_quoted(&w, &q->zone->name);
        ngx_http_ratelimit_puts(&w, ",");
        ngx_http_ratelimit_api_zone_json(&w, q->zone);
        ngx_http_ratelimit_puts(&w, "}\n");

        return ngx_http_ratelimit_api_send(r, NGX_HTTP_OK, &w);
    }

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);

    ngx_http_ratelimit_puts(&w, "{\"version\":\"" NGX_HTTP_RATELIMIT_VERSION
                                "\",\"write\":");

    if (rlcf->api_write) {
        ngx_http_ratelimit_puts(&w, "true");

    } else {
        ngx_http_ratelimit_puts(&w, "false");
    }

    ngx_http_ratelimit_api_field(&w, ",\"top_epoch_ms\":", RL_TOP_EPOCH_MS);
    ngx_http_ratelimit_puts(&w, ",\"zones\":{");

    part = NULL;
    i = 0;
    n = 0;

    while ((zone = ngx_http_ratelimit_next_zone((ngx_cycle_t *) ngx_cycle,
                                                 &part, &i))
           != NULL)
    {
        if (n++) {
            ngx_http_ratelimit_puts(&w, ",");
        }

        ngx_http_ratelimit_write_quoted(&w, &zone->name);
        ngx_http_ratelimit_puts(&w, ":{");
        ngx_http_ratelimit_api_zone_json(&w, zone);
        ngx_http_ratelimit_puts(&w, "}");
    }

    ngx_http_ratelimit_puts(&w, "}}\n");

    return ngx_http_ratelimit_api_send(r, NGX_HTTP_OK, &w);
}


/* A zone's fields: "redis":B, its figures (as ratelimit_stats), "rules". */

static void
ngx_http_ratelimit_api_zone_json(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_zone_t *zone)
{
    ngx_uint_t                   i, n;
    ngx_http_ratelimit_rule_t  **rules;

    if (zone->redis) {
        ngx_http_ratelimit_puts(w, "\"redis\":true,");

    } else {
        ngx_http_ratelimit_puts(w, "\"redis\":false,");
    }

    ngx_http_ratelimit_write_zone_figures(w, zone);
    ngx_http_ratelimit_puts(w, ",\"rules\":{");

    /* a rule name once: its first rule's parameters */

    rules = zone->rules.elts;
    n = 0;

    for (i = 0; i < zone->rules.nelts; i++) {
        if (ngx_http_ratelimit_zone_rule(zone, &rules[i]->name) != rules[i]) {
            continue;
        }

        if (n++) {
            ngx_http_ratelimit_puts(w, ",");
        }

        ngx_http_ratelimit_write_quoted(w, &rules[i]->name);
        ngx_http_ratelimit_puts(w, ":");
        ngx_http_ratelimit_api_rule_json(w, rules[i]);
    }

    ngx_http_ratelimit_puts(w, "}");
}


/*
 * {"algorithm":A,"key":"$expr","limit":N,...}: what the rule says, and its
 * algorithm's own parameters.
 */

static void
ngx_http_ratelimit_api_rule_json(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_rule_t *rule)
{
    ngx_str_t   s;
    rl_rule_t  *rr;

    rr = &rule->rule;

    ngx_http_ratelimit_puts(w, "{\"algorithm\":");
    s.data = (u_char *) rl_algorithm_name(rr->algorithm);
    s.len = ngx_strlen(s.data);
    ngx_http_ratelimit_write_quoted(w, &s);

    ngx_http_ratelimit_puts(w, ",\"key\":");
    ngx_http_ratelimit_write_quoted(w, &rule->key.value);

    ngx_http_ratelimit_api_field(w, ",\"limit\":", rr->limit);

    if (rr->limit_var) {
        ngx_http_ratelimit_puts(w, ",\"limit_variable\":true");
    }

    if (rr->algorithm == RL_QUOTA) {
        ngx_http_ratelimit_puts(w, ",\"reset\":");
        s.data = (u_char *) rl_reset_name(rr->reset);
        s.len = ngx_strlen(s.data);
        ngx_http_ratelimit_write_quoted(w, &s);

    } else {
        ngx_http_ratelimit_api_field(w, ",\"period_ms\":", rr->period_ms);
    }

    switch (rr->algorithm) {

    case RL_GCRA:
    case RL_TOKEN_BUCKET:
        ngx_http_ratelimit_api_field(w, ",\"burst\":", rr->burst);
        break;

    case RL_LEAKY_BUCKET:
        ngx_http_ratelimit_api_field(w, ",\"max_delay_ms\":",
                                     rr->max_delay_ms);
        break;

    case RL_SLIDING_WINDOW:
        ngx_http_ratelimit_api_field(w, ",\"buckets\":", rr->buckets);
        break;

    case RL_FIXED_WINDOW:
        if (rr->align == RL_ALIGN_FIRST) {
            ngx_http_ratelimit_puts(w, ",\"align\":\"first\"");

        } else {
            ngx_http_ratelimit_puts(w, ",\"align\":\"epoch\"");
        }

        break;
    }

    if (rr->log_key) {
        ngx_http_ratelimit_puts(w, ",\"log_key\":true}");

    } else {
        ngx_http_ratelimit_puts(w, ",\"log_key\":false}");
    }
}


/*
 * GET zones/NAME/keys: {"zone":Z,"key":K|"fingerprint":F,"rules":[...]},
 * a state for each rule (each state kept apart: rules of one name with
 * different keys have two).  DELETE: the same resets them, and says what
 * each held ("rules":[{"rule":R,"fingerprint":F,"held":B,"forgiven":B}]).
 */

static ngx_int_t
ngx_http_ratelimit_api_keys(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    int64_t                          now;
    ngx_uint_t                       i, reset;
    ngx_array_t                     *states;
    ngx_http_ratelimit_writer_t      w;
    ngx_http_ratelimit_api_state_t  *st;

    if (q->zone->redis) {
        return ngx_http_ratelimit_api_error(r, NGX_HTTP_NOT_IMPLEMENTED,
                   "zone \"%V\" is decided in Redis: the key API reads and "
                   "resets the keys of local zones only (its top keys are "
                   "this server's)", &q->zone->name);
    }

    states = ngx_http_ratelimit_api_states(r, q);
    if (states == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    st = states->elts;
    reset = r->method == NGX_HTTP_DELETE;

    /* under the zone's lock, as a request: no state changes in between */

    ngx_shmtx_lock(&q->zone->shpool->mutex);

    now = ngx_http_ratelimit_now();

    for (i = 0; i < states->nelts; i++) {
        if (reset) {
            st[i].reset = rl_table_reset(q->zone->table, st[i].tag, now);

        } else {
            rl_table_peek(q->zone->table, &st[i].rule->rule, st[i].tag,
                          st[i].cost, now, &st[i].peek);
        }
    }

    ngx_shmtx_unlock(&q->zone->shpool->mutex);

    ngx_memzero(&w, sizeof(ngx_http_ratelimit_writer_t));
    w.pool = r->pool;

    ngx_http_ratelimit_api_head(&w, q);
    ngx_http_ratelimit_puts(&w, ",\"rules\":[");

    for (i = 0; i < states->nelts; i++) {
        if (reset) {
            ngx_http_ratelimit_api_log_reset(r, q, &st[i]);
        }

        if (i) {
            ngx_http_ratelimit_puts(&w, ",");
        }

        ngx_http_ratelimit_api_state_json(&w, &st[i], reset);
    }

    ngx_http_ratelimit_puts(&w, "]}\n");

    return ngx_http_ratelimit_api_send(r, NGX_HTTP_OK, &w);
}


/*
 * The states a key has in the zone: one for each rule (or the rule=), the
 * key hashed as a request's is; rules sharing a state (the same name,
 * algorithm and key) once.  A fingerprint is its rule's state already.
 */

static ngx_array_t *
ngx_http_ratelimit_api_states(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    ngx_uint_t                       i, j;
    ngx_array_t                     *states;
    ngx_http_ratelimit_rule_t      **rules;
    ngx_http_ratelimit_api_state_t  *st, *seen;

    states = ngx_array_create(r->pool, 4,
                              sizeof(ngx_http_ratelimit_api_state_t));
    if (states == NULL) {
        return NULL;
    }

    rules = q->zone->rules.elts;

    for (i = 0; i < q->zone->rules.nelts; i++) {
        if (q->rule.len
            && (rules[i]->name.len != q->rule.len
                || ngx_strncmp(rules[i]->name.data, q->rule.data,
                               q->rule.len) != 0))
        {
            continue;
        }

        seen = states->elts;

        for (j = 0; j < states->nelts; j++) {
            if (seen[j].rule->identity == rules[i]->identity
                || q->has_fingerprint)
            {
                break;
            }
        }

        if (j < states->nelts) {
            continue;
        }

        st = ngx_array_push(states);
        if (st == NULL) {
            return NULL;
        }

        ngx_memzero(st, sizeof(ngx_http_ratelimit_api_state_t));
        st->rule = rules[i];
        st->tag = q->has_fingerprint
                  ? q->fingerprint
                  : rl_table_tag(q->zone->table, rules[i]->identity,
                                 q->key.data, q->key.len);

        /* the next request's cost: the rule's, or 1 for a variable's */

        st->cost = rules[i]->cost || rules[i]->rule.cost == 0
                   ? 1 : rules[i]->rule.cost;
    }

    return states;
}


/*
 * A reset, at notice: the key as the rule's log lines show it (in clear
 * only where the rule logs keys so and had a state for it: a key given for
 * every rule of a zone may be another rule's secret), and who asked.  Not
 * in the request's log context, which would write the request line, and
 * with it a key given in clear.
 */

static void
ngx_http_ratelimit_api_log_reset(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, ngx_http_ratelimit_api_state_t *st)
{
    u_char     *p;
    ngx_str_t   user;
    u_char      key[NGX_HTTP_RATELIMIT_KEY_ESCAPED + 16];

    if (st->rule->rule.log_key && q->key.data && st->reset) {
        key[0] = '"';
        p = ngx_http_ratelimit_escape_key(key + 1, q->key.data, q->key.len);
        *p++ = '"';

    } else {
        p = ngx_sprintf(key, "fingerprint %016xL", st->tag);
    }

    user = r->headers_in.user;

    if (user.len == 0 && r->headers_in.authorization
        && ngx_http_auth_basic_user(r) == NGX_OK)
    {
        user = r->headers_in.user;
    }

    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "ratelimit: key %*s reset in rule \"%V\" of zone \"%V\" "
                  "by the key API (%s), client %V%s%V%s",
                  (size_t) (p - key), key, &st->rule->name, &q->zone->name,
                  st->reset & RL_RESET_HELD
                  ? (st->reset & RL_RESET_FORGIVEN
                     ? "it was held, and owed in the eviction summary"
                     : "it was held")
                  : (st->reset & RL_RESET_FORGIVEN
                     ? "it owed in the eviction summary"
                     : "it had no state"),
                  &r->connection->addr_text,
                  user.len ? ", user \"" : "", &user,
                  user.len ? "\"" : "");
}


/*
 * A state: {"rule":R,"fingerprint":F,"state":"held"|"summary"|"none",
 * "refused":B,"remaining":N,"reset":S,"reset_ms":MS,"retry_after":S,
 * "retry_after_ms":MS,"delay_ms":MS,"limit":N,"cost":N}, seconds rounded
 * up as the headers show them; after a reset {"rule":R,"fingerprint":F,
 * "held":B,"forgiven":B}.
 */

static void
ngx_http_ratelimit_api_state_json(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_api_state_t *st, ngx_uint_t reset)
{
    rl_peek_t  *pk;

    ngx_http_ratelimit_puts(w, "{\"rule\":");
    ngx_http_ratelimit_write_quoted(w, &st->rule->name);
    ngx_http_ratelimit_puts(w, ",");
    ngx_http_ratelimit_api_fingerprint(w, st->tag);

    if (reset) {
        ngx_http_ratelimit_write_metric(w, ",\"held\":",
            st->reset & RL_RESET_HELD ? "true" : "false", "");
        ngx_http_ratelimit_write_metric(w, ",\"forgiven\":",
            st->reset & RL_RESET_FORGIVEN ? "true" : "false", "}");
        return;
    }

    pk = &st->peek;

    ngx_http_ratelimit_write_metric(w, ",\"state\":\"",
        pk->held ? "held" : pk->owed ? "summary" : "none", "\"");
    ngx_http_ratelimit_write_metric(w, ",\"refused\":",
        pk->next.allowed ? "false" : "true", "");

    ngx_http_ratelimit_api_field(w, ",\"remaining\":", pk->look.remaining);
    ngx_http_ratelimit_api_field(w, ",\"reset\":",
                            ngx_http_ratelimit_seconds(pk->look.reset_ms));
    ngx_http_ratelimit_api_field(w, ",\"reset_ms\":",
                                 ngx_max(pk->look.reset_ms, 0));

    /* Retry-After: at least 1 s when refused, as the header */

    ngx_http_ratelimit_api_field(w, ",\"retry_after\":",
        pk->next.allowed ? 0
        : ngx_max(ngx_http_ratelimit_seconds(pk->next.retry_after_ms), 1));
    ngx_http_ratelimit_api_field(w, ",\"retry_after_ms\":",
        pk->next.allowed ? 0 : ngx_max(pk->next.retry_after_ms, 0));
    ngx_http_ratelimit_api_field(w, ",\"delay_ms\":",
        pk->next.allowed ? ngx_max(pk->next.delay_ms, 0) : 0);
    ngx_http_ratelimit_api_field(w, ",\"limit\":", st->rule->rule.limit);
    ngx_http_ratelimit_api_field(w, ",\"cost\":", st->cost);
    ngx_http_ratelimit_puts(w, "}");
}


/*
 * GET zones/NAME/top: {"zone":Z,"since_ms":T,"rules":{R:{"state":
 * "kept"|"none"|"no_room","refusals":N,"entries":32,"keys":[{"fingerprint":
 * F,"key":K,"refused":N,"error":N},...]}}}, most refused first; "key" only
 * where the rule logs keys in clear.  Each rule's list is copied under the
 * zone's lock.
 */

static ngx_int_t
ngx_http_ratelimit_api_top(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    size_t                        j;
    rl_top_t                     *top;
    ngx_uint_t                    i, n;
    ngx_http_ratelimit_rule_t   **rules;
    ngx_http_ratelimit_writer_t   w;

    static const char  *states[] = { "none", "kept", "no_room" };

    top = ngx_palloc(r->pool, sizeof(rl_top_t));
    if (top == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memzero(&w, sizeof(ngx_http_ratelimit_writer_t));
    w.pool = r->pool;

    ngx_http_ratelimit_puts(&w, "{\"zone\":");
    ngx_http_ratelimit_write_quoted(&w, &q->zone->name);
    ngx_http_ratelimit_api_field(&w, ",\"since_ms\":",
        (ngx_http_ratelimit_now() / RL_TOP_EPOCH_MS - 1) * RL_TOP_EPOCH_MS);
    ngx_http_ratelimit_puts(&w, ",\"rules\":{");

    rules = q->zone->rules.elts;
    n = 0;

    for (i = 0; i < q->zone->rules.nelts; i++) {
        if (ngx_http_ratelimit_zone_rule(q->zone, &rules[i]->name)
            != rules[i]
            || (q->rule.len
                && (rules[i]->name.len != q->rule.len
                    || ngx_strncmp(rules[i]->name.data, q->rule.data,
                                   q->rule.len) != 0)))
        {
            continue;
        }

        if (ngx_http_ratelimit_counters(r->connection->log, rules[i]) > 0) {
            ngx_http_ratelimit_top(q->zone, rules[i]->stats, top);

        } else {
            ngx_memzero(top, sizeof(rl_top_t));
            top->state = RL_TOP_NO_ROOM;   /* not counted at all */
        }

        if (n++) {
            ngx_http_ratelimit_puts(&w, ",");
        }

        ngx_http_ratelimit_write_quoted(&w, &rules[i]->name);
        ngx_http_ratelimit_write_metric(&w, ":{\"state\":\"",
                                        states[top->state], "\"");
        ngx_http_ratelimit_api_field(&w, ",\"refusals\":", top->refusals);
        ngx_http_ratelimit_api_field(&w, ",\"entries\":", RL_TOP_ENTRIES);
        ngx_http_ratelimit_puts(&w, ",\"keys\":[");

        for (j = 0; j < top->n; j++) {
            if (j) {
                ngx_http_ratelimit_puts(&w, ",");
            }

            ngx_http_ratelimit_puts(&w, "{");
            ngx_http_ratelimit_api_fingerprint(&w, top->top[j].tag);

            if (rules[i]->rule.log_key && top->top[j].key_len) {
                ngx_http_ratelimit_puts(&w, ",\"key\":");
                ngx_http_ratelimit_write_key(&w, top->top[j].key,
                                             top->top[j].key_len,
                                             top->top[j].key_cut);
            }

            ngx_http_ratelimit_api_field(&w, ",\"refused\":",
                                         top->top[j].refused);
            ngx_http_ratelimit_api_field(&w, ",\"error\":",
                                         top->top[j].error);
            ngx_http_ratelimit_puts(&w, "}");
        }

        ngx_http_ratelimit_puts(&w, "]}");
    }

    ngx_http_ratelimit_puts(&w, "}}\n");

    return ngx_http_ratelimit_api_send(r, NGX_HTTP_OK, &w);
}


/* {"zone":Z and the key asked about: "key":K (escaped) or "fingerprint" */

static void
ngx_http_ratelimit_api_head(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_api_req_t *q)
{
    ngx_http_ratelimit_puts(w, "{\"zone\":");
    ngx_http_ratelimit_write_quoted(w, &q->zone->name);

    if (q->key.data) {
        ngx_http_ratelimit_puts(w, ",\"key\":");
        ngx_http_ratelimit_write_key(w, q->key.data, q->key.len, 0);

    } else {
        ngx_http_ratelimit_puts(w, ",");
        ngx_http_ratelimit_api_fingerprint(w, q->fingerprint);
    }
}


static void
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


static void
ngx_http_ratelimit_api_field(ngx_http_ratelimit_writer_t *w,
    const char *name, uint64_t n)
{
    ngx_http_ratelimit_write(w, name, ngx_strlen(name));
    ngx_http_ratelimit_write_number(w, n);
}


/* JSON, never cached (a key's state changes by the second). */

static ngx_int_t
ngx_http_ratelimit_api_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_http_ratelimit_writer_t *w)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Cache-Control");
    ngx_str_set(&h->value, "no-store");
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif

    return ngx_http_ratelimit_send(r, status, &ngx_http_ratelimit_api_type,
                                   w);
}


/*
 * {"error":"..."} with status: the message's arguments that a client chose
 * are escaped by the caller (ngx_http_ratelimit_escape_key) or are names of
 * this configuration.
 */

static ngx_int_t
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
