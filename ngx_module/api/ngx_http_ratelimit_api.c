
/*
 * ngx-ratelimit: ratelimit_api, the key API: the directive, a request read
 * by the core (rl_api_request: its path, method and parameters, and every
 * error's answer), its zone and rule found; the zones and the keys each
 * rule refuses most answered here, a key's state by
 * ngx_http_ratelimit_api_keys.c (or ngx_http_ratelimit_api_redis.c).  In a
 * prefix location, paths relative to it:
 *
 *   GET    zones                     the zones, their rules and figures
 *   GET    zones/NAME                one of them
 *   GET    zones/NAME/keys?key=K     a key's state in each rule of the zone
 *          (&rule=R: in one), or ?fingerprint=F&rule=R
 *   DELETE zones/NAME/keys?...       resets it (write=on), logged at notice
 *   GET    zones/NAME/top[?rule=R]   the keys each rule refuses most
 *   GET    zones/NAME/overrides[?rule=R&from=N&count=N]   a page of them
 *   GET    zones/NAME/overrides?key=K|range=CIDR[&rule=R] one
 *   PUT    zones/NAME/overrides?...  written from a JSON body (write=on)
 *   DELETE zones/NAME/overrides?...  removed (write=on); each write logged
 *
 * Every answer is JSON, errors too (and carries nosniff and no-store,
 * ngx_http_ratelimit_answer_headers): {"error":"..."} with 400 (a bad
 * parameter; a fingerprint for a Redis zone), 403 (a write not allowed),
 * 404 (no such resource, zone or rule), 405 (with Allow) or 409 (a Redis
 * zone whose Redis did not answer).  A key is read and reset through the
 * core (rl_table_peek, rl_table_reset), under the zone's lock as a request
 * takes it, in a worker; or in Redis.
 */


#include "ngx_http_ratelimit_api.h"
#include "ngx_http_ratelimit_api_keys.h"
#include "ngx_ratelimit_bandwidth.h"
#include "ngx_http_ratelimit_api_overrides.h"
#include "ngx_http_ratelimit_api_redis.h"
#include "ngx_http_ratelimit_answer.h"
#include "ngx_ratelimit_snapshot.h"
#include "ngx_ratelimit_zone.h"


static ngx_int_t ngx_http_ratelimit_api_handler(ngx_http_request_t *r);
static void ngx_http_ratelimit_api_body_read(ngx_http_request_t *r);
static ngx_int_t ngx_http_ratelimit_api_answer_request(ngx_http_request_t *r,
    ngx_str_t *body);
static ngx_int_t ngx_http_ratelimit_api_zones(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
static ngx_int_t ngx_http_ratelimit_api_top(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
static ngx_uint_t ngx_http_ratelimit_api_rule_asked(
    ngx_http_ratelimit_api_req_t *q, ngx_ratelimit_rule_t *rule);


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


/* A PUT's body is read first (an override's JSON); any other is discarded. */

static ngx_int_t
ngx_http_ratelimit_api_handler(ngx_http_request_t *r)
{
    ngx_int_t  rc;

    if (ngx_http_ratelimit_answer_headers(r, NULL) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (r->method == NGX_HTTP_PUT) {
        rc = ngx_http_read_client_request_body(r,
                                            ngx_http_ratelimit_api_body_read);

        return rc >= NGX_HTTP_SPECIAL_RESPONSE ? rc : NGX_DONE;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    return ngx_http_ratelimit_api_answer_request(r, NULL);
}


static void
ngx_http_ratelimit_api_body_read(ngx_http_request_t *r)
{
    ngx_str_t  body;

    if (ngx_http_ratelimit_api_body(r, &body) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_http_finalize_request(r,
                              ngx_http_ratelimit_api_answer_request(r, &body));
}


/* The request read by the core, its zone and rule found, and answered. */

static ngx_int_t
ngx_http_ratelimit_api_answer_request(ngx_http_request_t *r, ngx_str_t *body)
{
    ngx_str_t                       rule, name;
    ngx_keyval_t                    allow;
    ngx_http_core_loc_conf_t       *clcf;
    ngx_http_ratelimit_api_req_t   *q;
    ngx_http_ratelimit_loc_conf_t  *rlcf;

    q = ngx_pcalloc(r->pool, sizeof(ngx_http_ratelimit_api_req_t));
    if (q == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);
    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);

    if (rl_api_request(&q->in, ngx_ratelimit_rl_str(&clcf->name),
                       ngx_ratelimit_rl_str(&r->uri),
                       ngx_ratelimit_rl_str(&r->method_name),
                       rlcf->api_write, ngx_ratelimit_rl_str(&r->args))
        != 0)
    {
        if (q->in.allow) {
            ngx_str_set(&allow.key, "Allow");
            allow.value.data = (u_char *) q->in.allow;
            allow.value.len = ngx_strlen(q->in.allow);

            if (ngx_http_ratelimit_add_headers(r, &allow, 1) != NGX_OK) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }
        }

        return ngx_http_ratelimit_send_json(r, q->in.status,
                                            (u_char *) q->in.error,
                                            q->in.error_len);
    }

    if (q->in.put && (body == NULL || body->data == NULL)) {
        (void) rl_api_message(&q->in, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                              "the body: an override's JSON is at most 4096 "
                              "bytes, and must fit client_body_buffer_size");
        return ngx_http_ratelimit_send_json(r, q->in.status,
                                            (u_char *) q->in.error,
                                            q->in.error_len);
    }

    if (body != NULL) {
        q->body = *body;
    }

    if (q->in.resource != RL_API_ZONES) {
        name.data = (u_char *) q->in.zone.data;
        name.len = q->in.zone.len;
        q->zone = ngx_ratelimit_find_zone((ngx_cycle_t *) ngx_cycle,
                                          &name);

        if (q->zone == NULL) {
            return ngx_http_ratelimit_api_fail(r, q, RL_API_NO_ZONE);
        }

        rule.data = (u_char *) q->in.rule;
        rule.len = q->in.rule_len;

        if (rule.len && ngx_ratelimit_zone_rule(q->zone, &rule) == NULL
            && ((q->in.resource != RL_API_KEYS
                 && q->in.resource != RL_API_TOP)
                || !ngx_ratelimit_bw_zone_has(q->zone, &rule)))
        {
            return ngx_http_ratelimit_api_fail(r, q, RL_API_NO_RULE);
        }
    }

    switch (q->in.resource) {

    case RL_API_KEYS:
        return q->zone->redis ? ngx_http_ratelimit_api_redis(r, q)
                              : ngx_http_ratelimit_api_keys(r, q);

    case RL_API_TOP:
        return ngx_http_ratelimit_api_top(r, q);

    case RL_API_OVERRIDES:
        return ngx_http_ratelimit_api_overrides(r, q);

    default:
        return ngx_http_ratelimit_api_zones(r, q);
    }
}


/*
 * GET zones: every zone, its figures and its rules as configured; GET
 * zones/NAME: one.
 */

static ngx_int_t
ngx_http_ratelimit_api_zones(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    char                           *p;
    size_t                          len;
    rl_zone_snapshot_t              z;
    rl_stats_snapshot_t             s;
    ngx_http_ratelimit_loc_conf_t  *rlcf;

    if (q->zone) {
        if (ngx_ratelimit_zone_snapshot(r->pool, q->zone,
                                             NGX_RATELIMIT_SNAPSHOT_RULES,
                                             &z)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        len = rl_render_api_zone(&z, NULL, 0);
        p = ngx_pnalloc(r->pool, len);

        return ngx_http_ratelimit_send_rendered(r, p,
                   p ? rl_render_api_zone(&z, p, len) : 0);
    }

    if (ngx_ratelimit_snapshot(r->pool, NGX_RATELIMIT_SNAPSHOT_RULES, &s)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);

    len = rl_render_api_zones(&s, rlcf->api_write, NULL, 0);
    p = ngx_pnalloc(r->pool, len);

    return ngx_http_ratelimit_send_rendered(r, p,
               p ? rl_render_api_zones(&s, rlcf->api_write, p, len) : 0);
}


/*
 * GET zones/NAME/top: the keys each rule (or the rule=) refuses most, a
 * name once; a rule with no counters has none kept.  Each rule's are
 * copied under the zone's lock.
 */

static ngx_int_t
ngx_http_ratelimit_api_top(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    int                     slot;
    char                   *p;
    size_t                  len;
    rl_top_t               *top;
    ngx_uint_t              i, j, nbw;
    rl_top_view_t          *v;
    rl_top_snapshot_t       t;
    ngx_ratelimit_rule_t  **rules;

    rules = q->zone->rules.elts;

    nbw = q->zone->bandwidth ? q->zone->bandwidth->nelts : 0;

    top = ngx_palloc(r->pool, sizeof(rl_top_t));
    v = ngx_pcalloc(r->pool, (q->zone->rules.nelts + nbw + 1)
                             * sizeof(rl_top_view_t));
    if (top == NULL || v == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memzero(&t, sizeof(rl_top_snapshot_t));
    t.zone = ngx_ratelimit_rl_str(&q->zone->name);
    t.now_ms = ngx_ratelimit_now();
    t.server = q->zone->redis != NULL;   /* counted by each server */
    t.rules = v;

    for (i = 0; i < q->zone->rules.nelts; i++) {
        if (ngx_ratelimit_zone_rule(q->zone, &rules[i]->name)
            != rules[i]
            || !ngx_http_ratelimit_api_rule_asked(q, rules[i]))
        {
            continue;
        }

        slot = ngx_ratelimit_counters(r->connection->log, rules[i]) - 1;

        if (slot >= 0) {
            if (ngx_ratelimit_top_view(r->pool, q->zone, rules[i], slot, top,
                                            &v[t.n])
                != NGX_OK)
            {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

        } else {
            v[t.n].rule = ngx_ratelimit_rl_str(&rules[i]->name);
            v[t.n].state = RL_TOP_NO_ROOM;   /* not counted at all */
        }

        t.n++;
    }

    /* the bandwidth rules' keys by bytes, a name once */

    rules = nbw ? q->zone->bandwidth->elts : NULL;

    for (i = 0; i < nbw; i++) {
        for (j = 0; j < t.n; j++) {
            if (v[j].rule.len == rules[i]->name.len
                && ngx_strncmp(v[j].rule.data, rules[i]->name.data,
                               v[j].rule.len) == 0)
            {
                break;
            }
        }

        if (j < t.n || !ngx_http_ratelimit_api_rule_asked(q, rules[i])) {
            continue;
        }

        ngx_shmtx_lock(&q->zone->shpool->mutex);
        slot = rl_table_rule_slot(q->zone->table,
                                  (const char *) rules[i]->name.data);
        ngx_shmtx_unlock(&q->zone->shpool->mutex);

        if (ngx_ratelimit_top_view(r->pool, q->zone, rules[i], slot, top,
                                   &v[t.n++])
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    len = rl_render_api_top(&t, NULL, 0);
    p = ngx_pnalloc(r->pool, len);

    return ngx_http_ratelimit_send_rendered(r, p,
               p ? rl_render_api_top(&t, p, len) : 0);
}


/* The request names no rule (every rule), or this one. */

static ngx_uint_t
ngx_http_ratelimit_api_rule_asked(ngx_http_ratelimit_api_req_t *q,
    ngx_ratelimit_rule_t *rule)
{
    return q->in.rule_len == 0
           || (rule->name.len == q->in.rule_len
               && ngx_strncmp(rule->name.data, q->in.rule, q->in.rule_len)
                  == 0);
}
