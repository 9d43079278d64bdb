
/*
 * ngx-ratelimit: a zone's figures copied into a snapshot under the zone's
 * lock, whatever the protocol of its block, for ratelimit_stats, the key
 * API and the dashboard (the core renders snapshots as JSON or Prometheus
 * text: core/src/render/); in a pool of the caller's.
 */


#include "ngx_ratelimit_snapshot.h"
#include "ngx_ratelimit_sync.h"
#include "ngx_ratelimit_zone.h"


#if (NGX_RATELIMIT_REDIS_BUCKETS != RL_REDIS_LATENCY_BUCKETS)
#error "the Redis latency buckets of the glue and the core differ"
#endif


static ngx_int_t ngx_ratelimit_snapshot_one(ngx_ratelimit_zone_t *zone,
    void *data);
static ngx_int_t ngx_ratelimit_snapshot_rules(ngx_pool_t *pool,
    ngx_ratelimit_zone_t *zone, rl_zone_snapshot_t *z);
static ngx_ratelimit_rule_t *ngx_ratelimit_snapshot_bandwidth(
    ngx_ratelimit_zone_t *zone, ngx_str_t *name);
static ngx_int_t ngx_ratelimit_snapshot_tops(ngx_pool_t *pool,
    ngx_ratelimit_zone_t *zone, rl_zone_snapshot_t *z);
static rl_redis_figures_t *ngx_ratelimit_snapshot_redis(ngx_pool_t *pool,
    ngx_ratelimit_redis_stats_t *rs);


/* Every zone of this module in the running cycle, each as in a snapshot. */

typedef struct {
    ngx_pool_t                  *pool;
    ngx_uint_t                   what;
    ngx_array_t                  zones;     /* rl_zone_snapshot_t */
} ngx_ratelimit_snapshot_ctx_t;


ngx_int_t
ngx_ratelimit_snapshot(ngx_pool_t *pool, ngx_uint_t what,
    rl_stats_snapshot_t *s)
{
    ngx_ratelimit_snapshot_ctx_t  sc;

    static ngx_str_t  version = ngx_string(NGX_RATELIMIT_VERSION);

    sc.pool = pool;
    sc.what = what;

    if (ngx_array_init(&sc.zones, pool, 4, sizeof(rl_zone_snapshot_t))
        != NGX_OK
        || ngx_ratelimit_each_zone((ngx_cycle_t *) ngx_cycle,
                                   ngx_ratelimit_snapshot_one, &sc)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    s->version = ngx_ratelimit_rl_str(&version);
    s->n = sc.zones.nelts;
    s->zones = sc.zones.elts;

    return NGX_OK;
}


static ngx_int_t
ngx_ratelimit_snapshot_one(ngx_ratelimit_zone_t *zone, void *data)
{
    rl_zone_snapshot_t            *z;
    ngx_ratelimit_snapshot_ctx_t  *sc = data;

    z = ngx_array_push(&sc->zones);
    if (z == NULL) {
        return NGX_ERROR;
    }

    return ngx_ratelimit_zone_snapshot(sc->pool, zone, sc->what, z);
}


/*
 * A zone's figures (and its rules' counters), copied under the zone's lock
 * as a request takes it, so that they are of one moment; its Redis
 * counters; and what else is asked for: its rules' settings, the keys each
 * rule refuses most.
 */

ngx_int_t
ngx_ratelimit_zone_snapshot(ngx_pool_t *pool, ngx_ratelimit_zone_t *zone,
    ngx_uint_t what, rl_zone_snapshot_t *z)
{
    size_t                 room;
    rl_rule_stats_t       *counters;
    rl_overrides_stats_t   ov;

    ngx_memzero(z, sizeof(rl_zone_snapshot_t));
    z->name = ngx_ratelimit_rl_str(&zone->name);
    counters = NULL;
    room = 0;

    /* room for every name: those counted so far, and the zone's own
       (claimed below, under the lock) */

    if (what & NGX_RATELIMIT_SNAPSHOT_COUNTERS) {
        room = ngx_min(rl_table_rules_counted(zone->table) + zone->nnames,
                       rl_table_rule_room(zone->table));
        counters = ngx_palloc(pool,
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
        ngx_ratelimit_claim_stats(zone, 0);
        z->ncounters = rl_table_rule_stats(zone->table, counters, room);
        rl_bandwidth_rates(counters, z->ncounters, ngx_ratelimit_now());
        rl_overrides_count(zone->table, counters, z->ncounters);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    z->table.size = zone->size;
    z->counters = counters;
    z->block = ngx_ratelimit_rl_str(&zone->conf->block);

    if (zone->redis) {
        z->redis = ngx_ratelimit_snapshot_redis(pool, zone->redis->stats);
        if (z->redis == NULL) {
            return NGX_ERROR;
        }

        z->server = ngx_ratelimit_rl_str(&zone->redis->server);
    }

    if (zone->sync) {
        z->sync = ngx_ratelimit_sync_figures(pool, zone->sync);
        if (z->sync == NULL) {
            return NGX_ERROR;
        }

        z->sync_interval_ms = zone->sync->interval;
    }

    if ((what & NGX_RATELIMIT_SNAPSHOT_RULES)
        && ngx_ratelimit_snapshot_rules(pool, zone, z) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if ((what & NGX_RATELIMIT_SNAPSHOT_TOPS)
        && ngx_ratelimit_snapshot_tops(pool, zone, z) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* The zone's rules as configured, a name once: its first rule's. */

static ngx_int_t
ngx_ratelimit_snapshot_rules(ngx_pool_t *pool, ngx_ratelimit_zone_t *zone,
    rl_zone_snapshot_t *z)
{
    ngx_uint_t               i;
    rl_rule_view_t          *views;
    ngx_ratelimit_rule_t   **rules;

    rules = zone->rules.elts;
    views = ngx_palloc(pool, (zone->rules.nelts + 1)
                                * sizeof(rl_rule_view_t));
    if (views == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < zone->rules.nelts; i++) {
        if (ngx_ratelimit_zone_rule(zone, &rules[i]->name) != rules[i]) {
            continue;
        }

        views[z->nrules].name = ngx_ratelimit_rl_str(&rules[i]->name);
        views[z->nrules].rule = &rules[i]->rule;
        views[z->nrules].key = ngx_ratelimit_rl_str(&rules[i]->key);
        z->nrules++;
    }

    z->rules = views;

    return NGX_OK;
}


/*
 * A bandwidth rule of the zone by name: the first member of each of
 * zone->bandwidth is the part the zone knows.
 */

static ngx_ratelimit_rule_t *
ngx_ratelimit_snapshot_bandwidth(ngx_ratelimit_zone_t *zone, ngx_str_t *name)
{
    ngx_uint_t              i;
    ngx_ratelimit_rule_t  **rules;

    if (zone->bandwidth == NULL) {
        return NULL;
    }

    rules = zone->bandwidth->elts;

    for (i = 0; i < zone->bandwidth->nelts; i++) {
        if (rules[i]->name.len == name->len
            && ngx_strncmp(rules[i]->name.data, name->data, name->len) == 0)
        {
            return rules[i];
        }
    }

    return NULL;
}


/*
 * The keys each counted rule refuses most, for a rule of this configuration
 * (a name of an earlier one has none to show): each rule's copied under
 * the zone's lock.
 */

static ngx_int_t
ngx_ratelimit_snapshot_tops(ngx_pool_t *pool, ngx_ratelimit_zone_t *zone,
    rl_zone_snapshot_t *z)
{
    size_t                  k;
    rl_top_t               *top;
    ngx_str_t               name;
    rl_top_view_t          *tops;
    ngx_ratelimit_rule_t   *rule;

    top = ngx_palloc(pool, sizeof(rl_top_t));
    tops = ngx_pcalloc(pool, (z->ncounters + 1) * sizeof(rl_top_view_t));
    if (top == NULL || tops == NULL) {
        return NGX_ERROR;
    }

    for (k = 0; k < z->ncounters; k++) {
        name.data = (u_char *) z->counters[k].name;
        name.len = ngx_strlen(name.data);

        rule = ngx_ratelimit_zone_rule(zone, &name);

        if (rule == NULL) {
            rule = ngx_ratelimit_snapshot_bandwidth(zone, &name);
        }

        if (rule != NULL
            && ngx_ratelimit_top_view(pool, zone, rule, (int) k, top,
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
ngx_ratelimit_top_view(ngx_pool_t *pool, ngx_ratelimit_zone_t *zone,
    ngx_ratelimit_rule_t *rule, int slot, rl_top_t *top, rl_top_view_t *v)
{
    rl_top_key_t  *keys;

    ngx_ratelimit_top(zone, slot, top);

    v->rule = ngx_ratelimit_rl_str(&rule->name);
    v->log_key = rule->rule.log_key;
    v->state = top->state;
    v->kib = top->kib;
    v->refusals = top->refusals;
    v->n = top->n;
    v->keys = NULL;

    if (top->n) {
        keys = ngx_palloc(pool, top->n * sizeof(rl_top_key_t));
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
ngx_ratelimit_snapshot_redis(ngx_pool_t *pool,
    ngx_ratelimit_redis_stats_t *rs)
{
    ngx_uint_t           k;
    rl_redis_figures_t  *f;

    f = ngx_palloc(pool, sizeof(rl_redis_figures_t));
    if (f == NULL) {
        return NULL;
    }

#define NGX_RATELIMIT_COPY(name, help)  f->name = rs->name;
    RL_REDIS_COUNTERS(NGX_RATELIMIT_COPY)
#undef NGX_RATELIMIT_COPY

    f->latency_us = rs->latency_us;

    for (k = 0; k < RL_REDIS_LATENCY_BUCKETS; k++) {
        f->latency[k] = rs->latency[k];
        f->latency_le_us[k] = ngx_ratelimit_redis_bucket_us[k];
    }

    f->latency[k] = rs->latency[k];

    return f;
}
