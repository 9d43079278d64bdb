
/*
 * ngx-ratelimit: ratelimit_stats, the figures of every zone as JSON or in
 * Prometheus's text format.  The figures are read without the zones' locks
 * (counters are atomics; the top keys, with a zone's lock held while they
 * are copied) and written by a writer that knows its buffers, which the key
 * API (ngx_http_ratelimit_api.c) writes with too.
 */


#include "ngx_http_ratelimit_module.h"


/* Bytes of one buffer of the response; more are chained as needed. */
#define NGX_HTTP_RATELIMIT_STATS_BUF  16384


/* A zone's figures, read once for both formats. */
typedef struct {
    ngx_str_t                          name;
    rl_table_stats_t                   table;
    uint64_t                           used;
    size_t                             nrules;
    rl_rule_stats_t                    rules[RL_RULE_STATS_MAX];
    ngx_http_ratelimit_redis_t        *redis;   /* NULL: a local zone */
    ngx_http_ratelimit_redis_stats_t   rs;
    ngx_http_ratelimit_zone_t         *zone;
} ngx_http_ratelimit_snapshot_t;


/* A figure: its name in both formats, and where it is. */
typedef struct {
    const char                        *name;
    const char                        *metric;  /* Prometheus, or NULL */
    const char                        *type;
    const char                        *help;
    size_t                             offset;
} ngx_http_ratelimit_figure_t;


static ngx_int_t ngx_http_ratelimit_stats_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_ratelimit_snapshots(ngx_http_request_t *r,
    ngx_array_t *zones);
static void ngx_http_ratelimit_json(ngx_http_ratelimit_writer_t *w,
    ngx_array_t *zones);
static void ngx_http_ratelimit_json_figures(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_snapshot_t *z);
static void ngx_http_ratelimit_json_redis(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_snapshot_t *z);
static void ngx_http_ratelimit_prometheus(ngx_http_ratelimit_writer_t *w,
    ngx_array_t *zones);
static void ngx_http_ratelimit_prometheus_redis(
    ngx_http_ratelimit_writer_t *w, ngx_array_t *zones);
static void ngx_http_ratelimit_prometheus_top(ngx_http_request_t *r,
    ngx_http_ratelimit_writer_t *w, ngx_array_t *zones);
static void ngx_http_ratelimit_write_seconds(ngx_http_ratelimit_writer_t *w,
    uint64_t us);


#define ngx_http_ratelimit_figure_of(base, f)                                  \
    (*(uint64_t *) ((u_char *) (base) + (f)->offset))


static ngx_http_ratelimit_figure_t  ngx_http_ratelimit_zone_figures[] = {
    { "size", "zone_size_bytes", "gauge", "Size of the zone.",
      offsetof(ngx_http_ratelimit_snapshot_t, table.size) },
    { "bytes_used", "zone_used_bytes", "gauge",
      "Bytes of the zone holding keys.",
      offsetof(ngx_http_ratelimit_snapshot_t, used) },
    { "keys", "zone_keys", "gauge", "Keys held in the zone.",
      offsetof(ngx_http_ratelimit_snapshot_t, table.keys) },
    { "capacity", "zone_capacity_keys", "gauge", "Key slots of the zone.",
      offsetof(ngx_http_ratelimit_snapshot_t, table.capacity) },
    { "evictions", "zone_evictions_total", "counter",
      "Keys evicted to make room.",
      offsetof(ngx_http_ratelimit_snapshot_t, table.evictions) },
    { "live_evictions", "zone_live_evictions_total", "counter",
      "Keys evicted before they were back to full budget.",
      offsetof(ngx_http_ratelimit_snapshot_t, table.live_evictions) },
    { "summary_bytes", "zone_summary_bytes", "gauge",
      "Bytes of the zone remembering what evicted keys owe.",
      offsetof(ngx_http_ratelimit_snapshot_t, table.summary_bytes) },
    { "summary_refusals", "zone_summary_refusals_total", "counter",
      "Requests of keys not in the zone refused for what the eviction "
      "summary says they owe.",
      offsetof(ngx_http_ratelimit_snapshot_t, table.summary_refusals) },
    { NULL, NULL, NULL, NULL, 0 }
};


/* each rule's counters: its requests' outcomes, and what it charged */
static ngx_http_ratelimit_figure_t  ngx_http_ratelimit_rule_figures[] = {
    { "allowed", "allowed_total", "counter",
      "Requests that passed and spent at the rule.",
      offsetof(rl_rule_stats_t, count[RL_OUTCOME_ALLOWED]) },
    { "rejected", "rejected_total", "counter",
      "Requests rejected, the rule denying them.",
      offsetof(rl_rule_stats_t, count[RL_OUTCOME_REJECTED]) },
    { "delayed", "delayed_total", "counter",
      "Requests delayed by the rule.",
      offsetof(rl_rule_stats_t, count[RL_OUTCOME_DELAYED]) },
    { "dry_run_rejected", "dry_run_rejected_total", "counter",
      "Requests the rule would have rejected (dry run).",
      offsetof(rl_rule_stats_t, count[RL_OUTCOME_DRY_RUN_REJECTED]) },
    { "exempt", "exempt_total", "counter",
      "Requests exempt from the rule (empty key).",
      offsetof(rl_rule_stats_t, count[RL_OUTCOME_EXEMPT]) },
    { "charged", "charged_units_total", "counter",
      "Units charged as requests ended (charge=).",
      offsetof(rl_rule_stats_t, charged) },
    { "debts", "debts_total", "counter",
      "Requests whose charge left their key in debt.",
      offsetof(rl_rule_stats_t, debts) },
    { "in_flight", "in_flight", "gauge",
      "Requests holding a slot now (concurrency).",
      offsetof(rl_rule_stats_t, in_flight) },
    { "peak", "in_flight_peak", "gauge",
      "The most requests holding a slot at once (concurrency).",
      offsetof(rl_rule_stats_t, peak) },
    { "waited", "waited_total", "counter",
      "Requests that waited for a slot (concurrency, max_wait).",
      offsetof(rl_rule_stats_t, waited) },
    { NULL, NULL, NULL, NULL, 0 }
};


static ngx_http_ratelimit_figure_t  ngx_http_ratelimit_redis_figures[] = {
    { "decisions", "redis_decisions_total", "counter",
      "Requests decided in Redis.",
      offsetof(ngx_http_ratelimit_redis_stats_t, decisions) },
    { "errors", "redis_errors_total", "counter",
      "Redis error replies and lost connections.",
      offsetof(ngx_http_ratelimit_redis_stats_t, errors) },
    { "timeouts", "redis_timeouts_total", "counter",
      "Requests with no Redis reply within redis_timeout.",
      offsetof(ngx_http_ratelimit_redis_stats_t, timeouts) },
    { "fallbacks", "redis_fallbacks_total", "counter",
      "Requests decided by on_redis_error.",
      offsetof(ngx_http_ratelimit_redis_stats_t, fallbacks) },
    { "reconnects", "redis_reconnects_total", "counter",
      "Connections opened to Redis.",
      offsetof(ngx_http_ratelimit_redis_stats_t, reconnects) },
    { "charges", "redis_charges_total", "counter",
      "Requests' charges (charge=) settled in Redis.",
      offsetof(ngx_http_ratelimit_redis_stats_t, charges) },
    { "undelivered", "redis_undelivered_total", "counter",
      "Requests' charges Redis did not take (not reachable, no reply, a "
      "reply refused): lost.",
      offsetof(ngx_http_ratelimit_redis_stats_t, undelivered) },
    { NULL, NULL, NULL, NULL, 0 }
};


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
    ngx_int_t                     rc;
    ngx_str_t                     format, type;
    ngx_uint_t                    prometheus;
    ngx_array_t                   zones;
    ngx_http_ratelimit_writer_t   w;

    if (ngx_http_ratelimit_answer_headers(r, NULL) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    prometheus = ngx_http_arg(r, (u_char *) "format", 6, &format) == NGX_OK
                 && format.len == sizeof("prometheus") - 1
                 && ngx_strncmp(format.data, "prometheus", format.len) == 0;

    if (ngx_http_ratelimit_snapshots(r, &zones) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memzero(&w, sizeof(ngx_http_ratelimit_writer_t));
    w.pool = r->pool;

    if (prometheus) {
        ngx_http_ratelimit_prometheus(&w, &zones);
        ngx_http_ratelimit_prometheus_top(r, &w, &zones);
        ngx_str_set(&type, "text/plain; version=0.0.4");

    } else {
        ngx_http_ratelimit_json(&w, &zones);
        ngx_str_set(&type, "application/json");
    }

    return ngx_http_ratelimit_send(r, NGX_HTTP_OK, &type, &w);
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


/* What a writer wrote, sent as the response (a key API's error too). */

ngx_int_t
ngx_http_ratelimit_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *type, ngx_http_ratelimit_writer_t *w)
{
    off_t         size;
    ngx_int_t     rc;
    ngx_chain_t  *cl;

    if (w->error || w->first == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    size = 0;
    for (cl = w->first; cl; cl = cl->next) {
        size += cl->buf->last - cl->buf->pos;
    }

    w->last->buf->last_buf = (r == r->main) ? 1 : 0;
    w->last->buf->last_in_chain = 1;

    r->headers_out.status = status;
    r->headers_out.content_length_n = size;
    r->headers_out.content_type = *type;
    r->headers_out.content_type_len = type->len;

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    return ngx_http_output_filter(r, w->first);
}


/* Every zone of this module in the running cycle, in one walk. */

static ngx_int_t
ngx_http_ratelimit_snapshots(ngx_http_request_t *r, ngx_array_t *zones)
{
    ngx_uint_t                      i;
    ngx_list_part_t                *part;
    ngx_http_ratelimit_zone_t      *zone;
    ngx_http_ratelimit_snapshot_t  *z;

    if (ngx_array_init(zones, r->pool, 4,
                       sizeof(ngx_http_ratelimit_snapshot_t))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    part = NULL;
    i = 0;

    while ((zone = ngx_http_ratelimit_next_zone((ngx_cycle_t *) ngx_cycle,
                                                 &part, &i))
           != NULL)
    {
        z = ngx_array_push(zones);
        if (z == NULL) {
            return NGX_ERROR;
        }

        z->name = zone->name;
        z->zone = zone;
        rl_table_get_stats(zone->table, &z->table);
        z->table.size = zone->size;
        z->used = rl_table_bytes_used(zone->table);
        z->nrules = rl_table_rule_stats(zone->table, z->rules,
                                        RL_RULE_STATS_MAX);
        z->redis = zone->redis;

        if (zone->redis) {
            z->rs = *zone->redis->stats;
        }
    }

    return NGX_OK;
}


static void
ngx_http_ratelimit_json(ngx_http_ratelimit_writer_t *w, ngx_array_t *zones)
{
    size_t                          k;
    ngx_str_t                       rule;
    ngx_uint_t                      i;
    ngx_http_ratelimit_figure_t    *fig;
    ngx_http_ratelimit_snapshot_t  *z;

    z = zones->elts;

    ngx_http_ratelimit_puts(w, "{\"version\":\"" NGX_HTTP_RATELIMIT_VERSION
                               "\",\"zones\":{");

    for (i = 0; i < zones->nelts; i++) {
        if (i) {
            ngx_http_ratelimit_puts(w, ",");
        }

        ngx_http_ratelimit_write_quoted(w, &z[i].name);
        ngx_http_ratelimit_puts(w, ":{");
        ngx_http_ratelimit_json_figures(w, &z[i]);
        ngx_http_ratelimit_puts(w, ",\"rules\":{");

        for (k = 0; k < z[i].nrules; k++) {
            rule.data = (u_char *) z[i].rules[k].name;
            rule.len = ngx_strlen(z[i].rules[k].name);

            if (k) {
                ngx_http_ratelimit_puts(w, ",");
            }

            ngx_http_ratelimit_write_quoted(w, &rule);
            ngx_http_ratelimit_puts(w, ":{");

            for (fig = ngx_http_ratelimit_rule_figures; fig->name; fig++) {
                ngx_http_ratelimit_write_metric(w,
                    fig == ngx_http_ratelimit_rule_figures ? "\"" : ",\"",
                    fig->name, "\":");
                ngx_http_ratelimit_write_number(w,
                    ngx_http_ratelimit_figure_of(&z[i].rules[k], fig));
            }

            ngx_http_ratelimit_puts(w, "}");
        }

        ngx_http_ratelimit_puts(w, "}");

        if (z[i].redis) {
            ngx_http_ratelimit_json_redis(w, &z[i]);
        }

        ngx_http_ratelimit_puts(w, "}");
    }

    ngx_http_ratelimit_puts(w, "}}\n");
}


/* "size":N,"bytes_used":N,...: a zone's figures, from its snapshot. */

static void
ngx_http_ratelimit_json_figures(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_snapshot_t *z)
{
    ngx_uint_t  f;

    for (f = 0; ngx_http_ratelimit_zone_figures[f].name; f++) {
        ngx_http_ratelimit_write_metric(w, f ? ",\"" : "\"",
            ngx_http_ratelimit_zone_figures[f].name, "\":");
        ngx_http_ratelimit_write_number(w, ngx_http_ratelimit_figure_of(
                                     z, &ngx_http_ratelimit_zone_figures[f]));
    }
}


/* The figures of one zone, for the key API. */

void
ngx_http_ratelimit_write_zone_figures(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_zone_t *zone)
{
    ngx_http_ratelimit_snapshot_t  z;

    rl_table_get_stats(zone->table, &z.table);
    z.table.size = zone->size;
    z.used = rl_table_bytes_used(zone->table);

    ngx_http_ratelimit_json_figures(w, &z);
}


static void
ngx_http_ratelimit_json_redis(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_snapshot_t *z)
{
    ngx_uint_t  f, k;

    ngx_http_ratelimit_puts(w, ",\"redis\":{\"server\":");
    ngx_http_ratelimit_write_quoted(w, &z->redis->server);

    for (f = 0; ngx_http_ratelimit_redis_figures[f].name; f++) {
        ngx_http_ratelimit_write_metric(w, ",\"",
            ngx_http_ratelimit_redis_figures[f].name, "\":");
        ngx_http_ratelimit_write_number(w, *(ngx_atomic_t *)
            ((u_char *) &z->rs + ngx_http_ratelimit_redis_figures[f].offset));
    }

    ngx_http_ratelimit_puts(w, ",\"latency_us\":{");

    for (k = 0; k < NGX_HTTP_RATELIMIT_REDIS_BUCKETS; k++) {
        ngx_http_ratelimit_puts(w, "\"le_");
        ngx_http_ratelimit_write_number(w,
                                        ngx_http_ratelimit_redis_bucket_us[k]);
        ngx_http_ratelimit_puts(w, "\":");
        ngx_http_ratelimit_write_number(w, z->rs.latency[k]);
        ngx_http_ratelimit_puts(w, ",");
    }

    ngx_http_ratelimit_puts(w, "\"inf\":");
    ngx_http_ratelimit_write_number(w, z->rs.latency[k]);
    ngx_http_ratelimit_puts(w, "},\"latency_us_sum\":");
    ngx_http_ratelimit_write_number(w, z->rs.latency_us);
    ngx_http_ratelimit_puts(w, "}");
}


/* The Prometheus text exposition format, version 0.0.4. */

static void
ngx_http_ratelimit_prometheus(ngx_http_ratelimit_writer_t *w,
    ngx_array_t *zones)
{
    size_t                          k;
    ngx_str_t                       rule;
    ngx_uint_t                      i, f;
    ngx_http_ratelimit_figure_t    *fig;
    ngx_http_ratelimit_snapshot_t  *z;

    z = zones->elts;

    for (f = 0; ngx_http_ratelimit_zone_figures[f].name; f++) {
        fig = &ngx_http_ratelimit_zone_figures[f];

        ngx_http_ratelimit_write_metric(w, "# HELP nginx_ratelimit_",
                                        fig->metric, " ");
        ngx_http_ratelimit_write_metric(w, "", fig->help, "\n");
        ngx_http_ratelimit_write_metric(w, "# TYPE nginx_ratelimit_",
                                        fig->metric, " ");
        ngx_http_ratelimit_write_metric(w, "", fig->type, "\n");

        for (i = 0; i < zones->nelts; i++) {
            ngx_http_ratelimit_write_metric(w, "nginx_ratelimit_",
                                            fig->metric, "{zone=");
            ngx_http_ratelimit_write_quoted(w, &z[i].name);
            ngx_http_ratelimit_puts(w, "} ");
            ngx_http_ratelimit_write_number(w,
                                   ngx_http_ratelimit_figure_of(&z[i], fig));
            ngx_http_ratelimit_puts(w, "\n");
        }
    }

    for (fig = ngx_http_ratelimit_rule_figures; fig->name; fig++) {

        ngx_http_ratelimit_write_metric(w, "# HELP nginx_ratelimit_",
                                        fig->metric, " ");
        ngx_http_ratelimit_write_metric(w, "", fig->help, "\n");
        ngx_http_ratelimit_write_metric(w, "# TYPE nginx_ratelimit_",
                                        fig->metric, " ");
        ngx_http_ratelimit_write_metric(w, "", fig->type, "\n");

        for (i = 0; i < zones->nelts; i++) {
            for (k = 0; k < z[i].nrules; k++) {
                rule.data = (u_char *) z[i].rules[k].name;
                rule.len = ngx_strlen(z[i].rules[k].name);

                ngx_http_ratelimit_write_metric(w, "nginx_ratelimit_",
                                                fig->metric, "{zone=");
                ngx_http_ratelimit_write_quoted(w, &z[i].name);
                ngx_http_ratelimit_puts(w, ",rule=");
                ngx_http_ratelimit_write_quoted(w, &rule);
                ngx_http_ratelimit_puts(w, "} ");
                ngx_http_ratelimit_write_number(w,
                    ngx_http_ratelimit_figure_of(&z[i].rules[k], fig));
                ngx_http_ratelimit_puts(w, "\n");
            }
        }
    }

    ngx_http_ratelimit_prometheus_redis(w, zones);
}


/* Redis counters and a latency histogram, for the zones with redis= */

static void
ngx_http_ratelimit_prometheus_redis(ngx_http_ratelimit_writer_t *w,
    ngx_array_t *zones)
{
    uint64_t                        sum;
    ngx_uint_t                      i, k, f, any;
    ngx_http_ratelimit_figure_t    *fig;
    ngx_http_ratelimit_snapshot_t  *z;

    z = zones->elts;

    for (any = 0, i = 0; i < zones->nelts; i++) {
        any |= z[i].redis != NULL;
    }

    if (!any) {
        return;
    }

    for (f = 0; ngx_http_ratelimit_redis_figures[f].name; f++) {
        fig = &ngx_http_ratelimit_redis_figures[f];

        ngx_http_ratelimit_write_metric(w, "# HELP nginx_ratelimit_",
                                        fig->metric, " ");
        ngx_http_ratelimit_write_metric(w, "", fig->help, "\n");
        ngx_http_ratelimit_write_metric(w, "# TYPE nginx_ratelimit_",
                                        fig->metric, " counter\n");

        for (i = 0; i < zones->nelts; i++) {
            if (z[i].redis == NULL) {
                continue;
            }

            ngx_http_ratelimit_write_metric(w, "nginx_ratelimit_",
                                            fig->metric, "{zone=");
            ngx_http_ratelimit_write_quoted(w, &z[i].name);
            ngx_http_ratelimit_puts(w, "} ");
            ngx_http_ratelimit_write_number(w, *(ngx_atomic_t *)
                                  ((u_char *) &z[i].rs + fig->offset));
            ngx_http_ratelimit_puts(w, "\n");
        }
    }

    ngx_http_ratelimit_puts(w,
        "# HELP nginx_ratelimit_redis_latency_seconds Time from sending a "
        "request's script call to its reply.\n"
        "# TYPE nginx_ratelimit_redis_latency_seconds histogram\n");

    for (i = 0; i < zones->nelts; i++) {
        if (z[i].redis == NULL) {
            continue;
        }

        sum = 0;

        for (k = 0; k <= NGX_HTTP_RATELIMIT_REDIS_BUCKETS; k++) {
            sum += z[i].rs.latency[k];
            ngx_http_ratelimit_puts(w,
                "nginx_ratelimit_redis_latency_seconds_bucket{zone=");
            ngx_http_ratelimit_write_quoted(w, &z[i].name);

            if (k < NGX_HTTP_RATELIMIT_REDIS_BUCKETS) {
                ngx_http_ratelimit_puts(w, ",le=\"");
                ngx_http_ratelimit_write_seconds(w,
                                        ngx_http_ratelimit_redis_bucket_us[k]);
                ngx_http_ratelimit_puts(w, "\"} ");

            } else {
                ngx_http_ratelimit_puts(w, ",le=\"+Inf\"} ");
            }

            ngx_http_ratelimit_write_number(w, sum);
            ngx_http_ratelimit_puts(w, "\n");
        }

        ngx_http_ratelimit_puts(w,
            "nginx_ratelimit_redis_latency_seconds_sum{zone=");
        ngx_http_ratelimit_write_quoted(w, &z[i].name);
        ngx_http_ratelimit_puts(w, "} ");
        ngx_http_ratelimit_write_seconds(w, z[i].rs.latency_us);
        ngx_http_ratelimit_puts(w, "\n");

        ngx_http_ratelimit_puts(w,
            "nginx_ratelimit_redis_latency_seconds_count{zone=");
        ngx_http_ratelimit_write_quoted(w, &z[i].name);
        ngx_http_ratelimit_puts(w, "} ");
        ngx_http_ratelimit_write_number(w, sum);
        ngx_http_ratelimit_puts(w, "\n");
    }
}


/*
 * The keys each rule refuses most, as the key API's top shows them, a
 * series a key: nginx_ratelimit_top_refused{zone,rule,fingerprint}, with
 * key= where the rule logs keys in clear.  Each rule's are copied under its
 * zone's lock, then written.
 */

static void
ngx_http_ratelimit_prometheus_top(ngx_http_request_t *r,
    ngx_http_ratelimit_writer_t *w, ngx_array_t *zones)
{
    u_char                          fp[16];
    size_t                          k, j;
    rl_top_t                       *top;
    ngx_str_t                       rule, s;
    ngx_uint_t                      i;
    ngx_http_ratelimit_rule_t      *conf;
    ngx_http_ratelimit_snapshot_t  *z;

    top = ngx_palloc(r->pool, sizeof(rl_top_t));
    if (top == NULL) {
        w->error = 1;
        return;
    }

    ngx_http_ratelimit_puts(w,
        "# HELP nginx_ratelimit_top_refused Refusals in the last one to two "
        "minutes of the keys a rule refuses most (at most 64 a rule).\n"
        "# TYPE nginx_ratelimit_top_refused gauge\n");

    z = zones->elts;

    for (i = 0; i < zones->nelts; i++) {
        for (k = 0; k < z[i].nrules; k++) {
            rule.data = (u_char *) z[i].rules[k].name;
            rule.len = ngx_strlen(z[i].rules[k].name);

            conf = ngx_http_ratelimit_zone_rule(z[i].zone, &rule);
            if (conf == NULL) {
                continue;   /* a name of an earlier configuration */
            }

            ngx_http_ratelimit_top(z[i].zone, k, top);

            for (j = 0; j < top->n; j++) {
                ngx_http_ratelimit_puts(w,
                                        "nginx_ratelimit_top_refused{zone=");
                ngx_http_ratelimit_write_quoted(w, &z[i].name);
                ngx_http_ratelimit_puts(w, ",rule=");
                ngx_http_ratelimit_write_quoted(w, &rule);
                ngx_http_ratelimit_puts(w, ",fingerprint=");
                s.data = fp;
                s.len = ngx_sprintf(fp, "%016xL", top->top[j].tag) - fp;
                ngx_http_ratelimit_write_quoted(w, &s);

                if (conf->rule.log_key && top->top[j].key_len) {
                    ngx_http_ratelimit_puts(w, ",key=");
                    ngx_http_ratelimit_write_key(w, top->top[j].key,
                                                 top->top[j].key_len,
                                                 top->top[j].key_cut);
                }

                ngx_http_ratelimit_puts(w, "} ");
                ngx_http_ratelimit_write_number(w, top->top[j].refused);
                ngx_http_ratelimit_puts(w, "\n");
            }
        }
    }
}


/*
 * len bytes of room at the end of the response: in its last buffer, or in
 * a new one chained after it.  NULL (and the writer in error) if out of
 * memory.
 */

u_char *
ngx_http_ratelimit_room(ngx_http_ratelimit_writer_t *w, size_t len)
{
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    if (w->error) {
        return NULL;
    }

    if (w->last && (size_t) (w->last->buf->end - w->last->buf->last) >= len) {
        return w->last->buf->last;
    }

    b = ngx_create_temp_buf(w->pool,
                            ngx_max(len, NGX_HTTP_RATELIMIT_STATS_BUF));
    cl = ngx_alloc_chain_link(w->pool);
    if (b == NULL || cl == NULL) {
        w->error = 1;
        return NULL;
    }

    cl->buf = b;
    cl->next = NULL;

    if (w->last) {
        w->last->next = cl;

    } else {
        w->first = cl;
    }

    w->last = cl;

    return b->last;
}


void
ngx_http_ratelimit_write(ngx_http_ratelimit_writer_t *w, const char *s,
    size_t len)
{
    u_char  *p;

    p = ngx_http_ratelimit_room(w, len);
    if (p != NULL) {
        w->last->buf->last = ngx_cpymem(p, s, len);
    }
}


void
ngx_http_ratelimit_write_number(ngx_http_ratelimit_writer_t *w, uint64_t n)
{
    u_char  *p;

    p = ngx_http_ratelimit_room(w, NGX_INT64_LEN);
    if (p != NULL) {
        w->last->buf->last = ngx_http_ratelimit_number(p, n);
    }
}


/* Microseconds as seconds: 0.000250. */

static void
ngx_http_ratelimit_write_seconds(ngx_http_ratelimit_writer_t *w, uint64_t us)
{
    u_char  *p;

    p = ngx_http_ratelimit_room(w, NGX_INT64_LEN + 8);
    if (p != NULL) {
        w->last->buf->last = ngx_snprintf(p, NGX_INT64_LEN + 8, "%uL.%06uL",
                                          us / 1000000, us % 1000000);
    }
}


/* A name in double quotes, in JSON and in Prometheus labels alike. */

void
ngx_http_ratelimit_write_quoted(ngx_http_ratelimit_writer_t *w,
    ngx_str_t *name)
{
    size_t   i;
    u_char  *p;

    p = ngx_http_ratelimit_room(w, 2 * name->len + 2);
    if (p == NULL) {
        return;
    }

    *p++ = '"';

    for (i = 0; i < name->len; i++) {
        if (name->data[i] == '"' || name->data[i] == '\\') {
            *p++ = '\\';
        }

        *p++ = name->data[i] < 0x20 ? '?' : name->data[i];
    }

    *p++ = '"';
    w->last->buf->last = p;
}


/*
 * A key, in double quotes, as log lines show it (ngx_http_ratelimit_
 * escape_key), and "..." after it when it was cut.
 */

void
ngx_http_ratelimit_write_key(ngx_http_ratelimit_writer_t *w,
    const u_char *data, size_t len, ngx_uint_t cut)
{
    u_char     buf[NGX_HTTP_RATELIMIT_KEY_ESCAPED], *p;
    ngx_str_t  key;

    p = ngx_http_ratelimit_escape_key(buf, data, len);

    if (cut && len <= NGX_HTTP_RATELIMIT_KEY_LOG_MAX) {
        p = ngx_cpymem(p, "...", 3);
    }

    key.data = buf;
    key.len = p - buf;

    ngx_http_ratelimit_write_quoted(w, &key);
}


/* prefix, a NUL-terminated name, suffix. */

void
ngx_http_ratelimit_write_metric(ngx_http_ratelimit_writer_t *w,
    const char *prefix, const char *name, const char *suffix)
{
    ngx_http_ratelimit_write(w, prefix, ngx_strlen(prefix));
    ngx_http_ratelimit_write(w, name, ngx_strlen(name));
    ngx_http_ratelimit_write(w, suffix, ngx_strlen(suffix));
}
