
/*
 * ngx-ratelimit: ratelimit_stats, and what it shares with the key API
 * (ngx_http_ratelimit_api*.c) and the dashboard: a zone's figures copied
 * into a snapshot under the zone's lock (the core renders snapshots as JSON
 * or Prometheus text: core/src/render/), the headers of every answer, and
 * an answer's bytes sent.
 */


#include "ngx_http_ratelimit_stats.h"
#include "ngx_http_ratelimit_sync.h"
#include "ngx_http_ratelimit_zone.h"


#if (NGX_HTTP_RATELIMIT_REDIS_BUCKETS != RL_REDIS_LATENCY_BUCKETS)
#error "the Redis latency buckets of the glue and the core differ"
#endif


static ngx_int_t ngx_http_ratelimit_stats_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_ratelimit_snapshot_rules(ngx_http_request_t *r,
    ngx_http_ratelimit_zone_t *zone, rl_zone_snapshot_t *z);
static ngx_int_t ngx_http_ratelimit_snapshot_tops(ngx_http_request_t *r,
    ngx_http_ratelimit_zone_t *zone, rl_zone_snapshot_t *z);
static ngx_int_t ngx_http_ratelimit_snapshot_one(
    ngx_http_ratelimit_zone_t *zone, void *data);
static rl_redis_figures_t *ngx_http_ratelimit_snapshot_redis(
    ngx_http_request_t *r, ngx_http_ratelimit_redis_stats_t *rs);


static ngx_str_t  ngx_http_ratelimit_json_type =
    ngx_string("application/json");


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

    rc = ngx_http_ratelimit_get_only(r, NULL);
    if (rc != NGX_OK) {
        return rc;
    }

    prometheus = ngx_http_arg(r, (u_char *) "format", 6, &format) == NGX_OK
                 && format.len == sizeof("prometheus") - 1
                 && ngx_strncmp(format.data, "prometheus", format.len) == 0;

    if (ngx_http_ratelimit_snapshot(r, prometheus
                                   ? NGX_HTTP_RATELIMIT_SNAPSHOT_COUNTERS
                                     |NGX_HTTP_RATELIMIT_SNAPSHOT_TOPS
                                   : NGX_HTTP_RATELIMIT_SNAPSHOT_COUNTERS, &s)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the size first, then the text */

    if (prometheus) {
        len = rl_render_stats_prometheus(&s, NULL, 0);
        p = ngx_pnalloc(r->pool, len);
        if (p == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        rl_render_stats_prometheus(&s, p, len);
        ngx_str_set(&type, "text/plain; version=0.0.4");

    } else {
        len = rl_render_stats_json(&s, NULL, 0);
        p = ngx_pnalloc(r->pool, len);
        if (p == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        rl_render_stats_json(&s, p, len);
        type = ngx_http_ratelimit_json_type;
    }

    return ngx_http_ratelimit_send(r, NGX_HTTP_OK, &type, (u_char *) p, len);
}


/*
 * The start of a location's own answer that only reads (the stats, the
 * dashboard's page): its headers (cache: Cache-Control, NULL: no-store),
 * GET and HEAD only, any body discarded.  NGX_OK, or what to return.
 */

ngx_int_t
ngx_http_ratelimit_get_only(ngx_http_request_t *r, ngx_str_t *cache)
{
    if (ngx_http_ratelimit_answer_headers(r, cache) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    return ngx_http_discard_request_body(r);
}


/*
 * The headers of every answer of ratelimit_stats, ratelimit_api and
 * ratelimit_dashboard, added by their handlers first, so that errors carry
 * them too (the key API's JSON ones and nginx's own pages alike):
 *
 *   X-Content-Type-Options: nosniff  the answers hold names and keys that
 *                                    clients chose; a browser must never
 *                                    take them for a page or a script
 *   Cache-Control: no-store          they are state (figures, keys), which
 *                                    no cache may keep or serve again; or
 *                                    cache, for a page that holds none
 */

ngx_int_t
ngx_http_ratelimit_answer_headers(ngx_http_request_t *r, ngx_str_t *cache)
{
    ngx_keyval_t  headers[2];

    ngx_str_set(&headers[0].key, "X-Content-Type-Options");
    ngx_str_set(&headers[0].value, "nosniff");
    ngx_str_set(&headers[1].key, "Cache-Control");

    if (cache) {
        headers[1].value = *cache;

    } else {
        ngx_str_set(&headers[1].value, "no-store");
    }

    return ngx_http_ratelimit_add_headers(r, headers, 2);
}


/* Response headers, as they are (nginx's own ngx_table_elt_t fields only). */

ngx_int_t
ngx_http_ratelimit_add_headers(ngx_http_request_t *r, ngx_keyval_t *headers,
    ngx_uint_t n)
{
    ngx_uint_t        i;
    ngx_table_elt_t  *h;

    for (i = 0; i < n; i++) {
        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        h->hash = 1;
        h->key = headers[i].key;
        h->value = headers[i].value;
#if (nginx_version >= 1023000)
        h->next = NULL;
#endif
    }

    return NGX_OK;
}


/*
 * An answer's bytes (in the request's pool, or the configuration's) sent
 * as the response, of the type given (NULL: the one set already).
 */

ngx_int_t
ngx_http_ratelimit_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *type, u_char *data, size_t len)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t   out;

    r->headers_out.status = status;
    r->headers_out.content_length_n = len;

    if (type) {
        r->headers_out.content_type = *type;
        r->headers_out.content_type_len = type->len;
    }

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = data;
    b->last = data + len;
    b->memory = 1;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/* JSON: the key API's answers, errors too. */

ngx_int_t
ngx_http_ratelimit_send_json(ngx_http_request_t *r, ngx_uint_t status,
    u_char *data, size_t len)
{
    return ngx_http_ratelimit_send(r, status, &ngx_http_ratelimit_json_type,
                                   data, len);
}


/* Every zone of this module in the running cycle, each as in a snapshot. */

typedef struct {
    ngx_http_request_t          *request;
    ngx_uint_t                   what;
    ngx_array_t                  zones;     /* rl_zone_snapshot_t */
} ngx_http_ratelimit_snapshot_ctx_t;


ngx_int_t
ngx_http_ratelimit_snapshot(ngx_http_request_t *r, ngx_uint_t what,
    rl_stats_snapshot_t *s)
{
    ngx_http_ratelimit_snapshot_ctx_t  sc;

    static ngx_str_t  version = ngx_string(NGX_HTTP_RATELIMIT_VERSION);

    sc.request = r;
    sc.what = what;

    if (ngx_array_init(&sc.zones, r->pool, 4, sizeof(rl_zone_snapshot_t))
        != NGX_OK
        || ngx_http_ratelimit_each_zone((ngx_cycle_t *) ngx_cycle,
                                        ngx_http_ratelimit_snapshot_one, &sc)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    s->version = ngx_http_ratelimit_rl_str(&version);
    s->n = sc.zones.nelts;
    s->zones = sc.zones.elts;

    return NGX_OK;
}


static ngx_int_t
ngx_http_ratelimit_snapshot_one(ngx_http_ratelimit_zone_t *zone, void *data)
{
    rl_zone_snapshot_t                 *z;
    ngx_http_ratelimit_snapshot_ctx_t  *sc = data;

    z = ngx_array_push(&sc->zones);
    if (z == NULL) {
        return NGX_ERROR;
    }

    return ngx_http_ratelimit_zone_snapshot(sc->request, zone, sc->what, z);
}


/*
 * A zone's figures (and its rules' counters), copied under the zone's lock
 * as a request takes it, so that they are of one moment; its Redis
 * counters; and what else is asked for: its rules' settings, the keys each
 * rule refuses most.
 */

ngx_int_t
ngx_http_ratelimit_zone_snapshot(ngx_http_request_t *r,
    ngx_http_ratelimit_zone_t *zone, ngx_uint_t what, rl_zone_snapshot_t *z)
{
    size_t                 room;
    rl_rule_stats_t       *counters;
    rl_overrides_stats_t   ov;

    ngx_memzero(z, sizeof(rl_zone_snapshot_t));
    z->name = ngx_http_ratelimit_rl_str(&zone->name);
    counters = NULL;
    room = 0;

    /* room for every name: those counted so far, and the zone's own
       (claimed below, under the lock) */

    if (what & NGX_HTTP_RATELIMIT_SNAPSHOT_COUNTERS) {
        room = ngx_min(rl_table_rules_counted(zone->table) + zone->nnames,
                       rl_table_rule_room(zone->table));
        counters = ngx_palloc(r->pool,
                              (room + 1) * sizeof(rl_rule_stats_t));
        if (counters == NULL) {
            return NGX_ERROR;
        }
    }

    ngx_shmtx_lock(&zone->shpool->mutex);

    rl_table_get_stats(zone->table, &z->table);
    z->used = rl_table_bytes_used(zone->table);

    if (zone->store) {
        rl_overrides_stats(zone->store, &ov);
        z->overrides = ov.held;
        z->overrides_capacity = ov.capacity;
    }

    if (counters) {
        ngx_http_ratelimit_claim_stats(zone, 0);
        z->ncounters = rl_table_rule_stats(zone->table, counters, room);
        rl_overrides_count(zone->table, counters, z->ncounters);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    z->table.size = zone->size;
    z->counters = counters;

    if (zone->redis) {
        z->redis = ngx_http_ratelimit_snapshot_redis(r, zone->redis->stats);
        if (z->redis == NULL) {
            return NGX_ERROR;
        }

        z->server = ngx_http_ratelimit_rl_str(&zone->redis->server);
    }

    if (zone->sync) {
        z->sync = ngx_http_ratelimit_sync_figures(r->pool, zone->sync);
        if (z->sync == NULL) {
            return NGX_ERROR;
        }

        z->sync_interval_ms = zone->sync->interval;
    }

    if ((what & NGX_HTTP_RATELIMIT_SNAPSHOT_RULES)
        && ngx_http_ratelimit_snapshot_rules(r, zone, z) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if ((what & NGX_HTTP_RATELIMIT_SNAPSHOT_TOPS)
        && ngx_http_ratelimit_snapshot_tops(r, zone, z) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* The zone's rules as configured, a name once: its first rule's. */

static ngx_int_t
ngx_http_ratelimit_snapshot_rules(ngx_http_request_t *r,
    ngx_http_ratelimit_zone_t *zone, rl_zone_snapshot_t *z)
{
    ngx_uint_t                   i;
    rl_rule_view_t              *views;
    ngx_http_ratelimit_rule_t  **rules;

    rules = zone->rules.elts;
    views = ngx_palloc(r->pool, (zone->rules.nelts + 1)
                                * sizeof(rl_rule_view_t));
    if (views == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < zone->rules.nelts; i++) {
        if (ngx_http_ratelimit_zone_rule(zone, &rules[i]->name) != rules[i]) {
            continue;
        }

        views[z->nrules].name = ngx_http_ratelimit_rl_str(&rules[i]->name);
        views[z->nrules].rule = &rules[i]->rule;
        views[z->nrules].key = ngx_http_ratelimit_rl_str(
                                                      &rules[i]->key->value);
        z->nrules++;
    }

    z->rules = views;

    return NGX_OK;
}


/*
 * The keys each counted rule refuses most, for a rule of this configuration
 * (a name of an earlier one has none to show): each rule's copied under
 * the zone's lock.
 */

static ngx_int_t
ngx_http_ratelimit_snapshot_tops(ngx_http_request_t *r,
    ngx_http_ratelimit_zone_t *zone, rl_zone_snapshot_t *z)
{
    size_t                      k;
    rl_top_t                   *top;
    ngx_str_t                   name;
    rl_top_view_t              *tops;
    ngx_http_ratelimit_rule_t  *rule;

    top = ngx_palloc(r->pool, sizeof(rl_top_t));
    tops = ngx_pcalloc(r->pool, (z->ncounters + 1) * sizeof(rl_top_view_t));
    if (top == NULL || tops == NULL) {
        return NGX_ERROR;
    }

    for (k = 0; k < z->ncounters; k++) {
        name.data = (u_char *) z->counters[k].name;
        name.len = ngx_strlen(name.data);

        rule = ngx_http_ratelimit_zone_rule(zone, &name);

        if (rule != NULL
            && ngx_http_ratelimit_top_view(r, zone, rule, (int) k, top,
                                           &tops[k])
               != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    z->tops = tops;

    return NGX_OK;
}


/* The keys the rule counted in slot refuses most, as the core shows them. */

ngx_int_t
ngx_http_ratelimit_top_view(ngx_http_request_t *r,
    ngx_http_ratelimit_zone_t *zone, ngx_http_ratelimit_rule_t *rule, int slot,
    rl_top_t *top, rl_top_view_t *v)
{
    rl_top_key_t  *keys;

    ngx_http_ratelimit_top(zone, slot, top);

    v->rule = ngx_http_ratelimit_rl_str(&rule->name);
    v->log_key = rule->rule.log_key;
    v->state = top->state;
    v->refusals = top->refusals;
    v->n = top->n;
    v->keys = NULL;

    if (top->n) {
        keys = ngx_palloc(r->pool, top->n * sizeof(rl_top_key_t));
        if (keys == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(keys, top->top, top->n * sizeof(rl_top_key_t));
        v->keys = keys;
    }

    return NGX_OK;
}


/* A Redis zone's counters, which every worker adds to with atomics. */

static rl_redis_figures_t *
ngx_http_ratelimit_snapshot_redis(ngx_http_request_t *r,
    ngx_http_ratelimit_redis_stats_t *rs)
{
    ngx_uint_t           k;
    rl_redis_figures_t  *f;

    f = ngx_palloc(r->pool, sizeof(rl_redis_figures_t));
    if (f == NULL) {
        return NULL;
    }

#define NGX_HTTP_RATELIMIT_COPY(name, help)  f->name = rs->name;
    RL_REDIS_COUNTERS(NGX_HTTP_RATELIMIT_COPY)
#undef NGX_HTTP_RATELIMIT_COPY

    f->latency_us = rs->latency_us;

    for (k = 0; k < RL_REDIS_LATENCY_BUCKETS; k++) {
        f->latency[k] = rs->latency[k];
        f->latency_le_us[k] = ngx_http_ratelimit_redis_bucket_us[k];
    }

    f->latency[k] = rs->latency[k];

    return f;
}
