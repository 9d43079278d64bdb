
/*
 * ngx-ratelimit: the shared memory zones.
 *
 * A zone is the slab pool header (its mutex is the zone's lock, which the
 * master releases if a worker dies holding it), the Redis counters, and the
 * core's table, laid out for the rules that name the zone.  The master never
 * takes a zone's lock: what it needs from a zone it does when the zone is
 * new (nobody else has it yet); workers do the rest under their own lock.
 */


#include "ngx_http_ratelimit_zone.h"
#include "ngx_http_ratelimit_log.h"
#include "ngx_http_ratelimit_overrides.h"
#include "ngx_http_ratelimit_redis_conf.h"
#include "ngx_http_ratelimit_state.h"
#include "ngx_http_ratelimit_sync.h"


/* The documented minimum: room for the slab pool header and the table. */
#define NGX_HTTP_RATELIMIT_ZONE_MIN          (32 * 1024)


static ngx_http_ratelimit_zone_t *ngx_http_ratelimit_next_zone(
    ngx_cycle_t *cycle, ngx_list_part_t **part, ngx_uint_t *i);
static ngx_int_t ngx_http_ratelimit_named(ngx_http_ratelimit_zone_t *zone,
    void *data);
static ngx_int_t ngx_http_ratelimit_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static void ngx_http_ratelimit_bad_size(ngx_conf_t *cf, ngx_str_t *value,
    ngx_str_t *name);
static ngx_int_t ngx_http_ratelimit_zone_state(ngx_conf_t *cf,
    ngx_str_t *name, ngx_http_ratelimit_redis_t *redis,
    ngx_http_ratelimit_zone_t *zone);
static ngx_int_t ngx_http_ratelimit_zone_params(ngx_conf_t *cf,
    ngx_str_t *name, ssize_t size, ngx_http_ratelimit_redis_t **redis,
    ngx_http_ratelimit_sync_t **sync, ngx_uint_t *overrides,
    ngx_str_t *overrides_file);
static void ngx_http_ratelimit_zero_zone(ngx_shm_zone_t *shm_zone,
    ngx_uint_t reused);
static size_t ngx_http_ratelimit_refusals_size(ngx_http_ratelimit_zone_t *zone,
    size_t zone_size);
static size_t ngx_http_ratelimit_table_size(ngx_http_ratelimit_zone_t *zone,
    size_t zone_size);
static ngx_int_t ngx_http_ratelimit_check_layout(ngx_conf_t *cf,
    ngx_shm_zone_t *shm_zone);
static ngx_int_t ngx_http_ratelimit_check_redis_rule(ngx_conf_t *cf,
    ngx_http_ratelimit_zone_ref_t *ref);
static ngx_int_t ngx_http_ratelimit_check_names(ngx_conf_t *cf,
    ngx_http_ratelimit_main_conf_t *rmcf);


/*
 * This module's zone declared as NAME in a cycle's list of shared memory
 * zones (their own names may carry a layout, see check_layout).
 */

ngx_shm_zone_t *
ngx_http_ratelimit_lookup_zone(ngx_list_t *shared_memory, ngx_str_t *name)
{
    ngx_str_t                  *declared;
    ngx_uint_t                  i;
    ngx_list_part_t            *part;
    ngx_shm_zone_t             *zone;
    ngx_http_ratelimit_zone_t  *z;

    part = &shared_memory->part;
    zone = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }
            part = part->next;
            zone = part->elts;
            i = 0;
        }

        if (zone[i].tag != &ngx_http_ratelimit_module) {
            continue;
        }

        z = zone[i].data;
        declared = z != NULL ? &z->name : &zone[i].shm.name;

        if (declared->len == name->len
            && ngx_strncmp(declared->data, name->data, name->len) == 0)
        {
            return &zone[i];
        }
    }
}


/*
 * A zone's name, as ratelimit_zone declares it and zone= names it: what a
 * rule's name may be (rl_name_valid), since it appears as it is in log
 * lines, the stats' JSON and Prometheus labels, and the key API's paths.
 * What is refused is shown escaped, as keys are.
 */

ngx_int_t
ngx_http_ratelimit_zone_name(ngx_conf_t *cf, const char *directive,
    ngx_str_t *name)
{
    u_char  shown[NGX_HTTP_RATELIMIT_KEY_ESCAPED], *last;

    if (rl_name_valid((const char *) name->data, name->len)) {
        return NGX_OK;
    }

    last = ngx_http_ratelimit_escape_key(shown, name->data, name->len);

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"%s\" directive: invalid zone name \"%*s\": "
                       "expected " RL_NAME_EXPECTED, directive,
                       (size_t) (last - shown), shown);

    return NGX_ERROR;
}


/*
 * A SIZE that nginx's size syntax does not take (bytes, k or m; no g): the
 * message suggests only sizes that it takes, a size in g as m.
 */

static void
ngx_http_ratelimit_bad_size(ngx_conf_t *cf, ngx_str_t *value, ngx_str_t *name)
{
    ssize_t  g;

    g = NGX_ERROR;

    if (value->len > 1 && (value->data[value->len - 1] | 0x20) == 'g') {
        g = ngx_atosz(value->data, value->len - 1);
    }

    if (g > 0 && g <= (ssize_t) (NGX_MAX_SIZE_T_VALUE / (1024 * 1024 * 1024))) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: invalid size \"%V\" "
                           "of zone \"%V\": nginx's sizes take k or m, not g: "
                           "expected %zm", value, name, g * 1024);
        return;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"ratelimit_zone\" directive: invalid size \"%V\" of "
                       "zone \"%V\": expected bytes, k or m, like 32k or 10m",
                       value, name);
}


/* ratelimit_zone NAME SIZE [overrides=N] [overrides_file=PATH] [redis=...]; */

char *
ngx_http_ratelimit_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ssize_t                     size;
    ngx_str_t                   overrides_file;
    ngx_uint_t                  overrides;
    ngx_http_ratelimit_redis_t *redis;
    ngx_http_ratelimit_sync_t  *sync;
    ngx_str_t                  *value, name;
    ngx_shm_zone_t             *shm_zone;
    ngx_http_ratelimit_zone_t  *zone;

    value = cf->args->elts;
    name = value[1];

    if (ngx_http_ratelimit_zone_name(cf, "ratelimit_zone", &name) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    size = ngx_parse_size(&value[2]);

    if (size == NGX_ERROR) {
        ngx_http_ratelimit_bad_size(cf, &value[2], &name);
        return NGX_CONF_ERROR;
    }

    if (size < NGX_HTTP_RATELIMIT_ZONE_MIN) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: size \"%V\" of zone "
                           "\"%V\" is too small: the minimum is 32k",
                           &value[2], &name);
        return NGX_CONF_ERROR;
    }

    redis = NULL;
    sync = NULL;
    overrides = NGX_CONF_UNSET_UINT;
    ngx_str_null(&overrides_file);

    if (ngx_http_ratelimit_zone_params(cf, &name, size, &redis, &sync,
                                       &overrides, &overrides_file)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    /*
     * A local zone has room for overrides unless told otherwise; a Redis
     * zone only when overrides= asks for it, since its servers then ask
     * Redis for them every quarter second (and its ACL user must allow
     * the overrides' hash commands).
     */

    if (overrides == NGX_CONF_UNSET_UINT) {
        overrides = redis ? 0 : NGX_HTTP_RATELIMIT_OVERRIDES_DEFAULT;
    }

    shm_zone = ngx_http_ratelimit_lookup_zone(&cf->cycle->shared_memory,
                                              &name);

    if (shm_zone != NULL && shm_zone->data != NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: zone \"%V\" is "
                           "already declared (size %uz): each zone is "
                           "declared once", &name, shm_zone->shm.size
                           - ngx_http_ratelimit_overrides_bytes(
                                 shm_zone->data));
        return NGX_CONF_ERROR;
    }

    /* the overrides' room comes on top of SIZE, which stays the keys' */

    shm_zone = ngx_shared_memory_add(cf, &name,
                                     size + (overrides
                                             ? ngx_align(rl_overrides_size(
                                                             overrides), 64)
                                             : 0),
                                     &ngx_http_ratelimit_module);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    zone = ngx_pcalloc(cf->pool, sizeof(ngx_http_ratelimit_zone_t));
    if (zone == NULL) {
        return NGX_CONF_ERROR;
    }

    /* zone->rules: made to its size once every rule is read
       (ngx_http_ratelimit_zones_init) */

    if (ngx_array_init(&zone->blobs, cf->pool, 2, sizeof(uint32_t))
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    zone->name = name;
    zone->redis = sync ? NULL : redis;   /* redis_sync: decided here */
    zone->sync = sync;
    zone->file = cf->conf_file->file.name.data;
    zone->line = cf->conf_file->line;
    zone->overrides = overrides;
    zone->overrides_file = overrides_file;

    if (ngx_http_ratelimit_zone_state(cf, &name, redis, zone) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    shm_zone->init = ngx_http_ratelimit_init_zone;
    shm_zone->data = zone;

    return NGX_CONF_OK;
}


/* The parameters of ratelimit_zone after NAME and SIZE. */

static ngx_int_t
ngx_http_ratelimit_zone_params(ngx_conf_t *cf, ngx_str_t *name, ssize_t size,
    ngx_http_ratelimit_redis_t **redis, ngx_http_ratelimit_sync_t **sync,
    ngx_uint_t *overrides, ngx_str_t *overrides_file)
{
    ngx_int_t    rc;
    ngx_uint_t   i;
    ngx_str_t   *value;

    value = cf->args->elts;

    for (i = 3; i < cf->args->nelts; i++) {
        rc = ngx_http_ratelimit_overrides_param(cf, &value[i], name,
                                                overrides, overrides_file);

        if (rc == NGX_DECLINED
            && ngx_strncmp(value[i].data, "state", 5) == 0)
        {
            continue;   /* ngx_http_ratelimit_zone_state()'s */
        }

        if (rc == NGX_DECLINED) {
            rc = ngx_http_ratelimit_sync_param(cf, sync, &value[i], name);
        }

        if (rc == NGX_DECLINED) {
            rc = ngx_http_ratelimit_redis_param(cf, redis, &value[i], name);
        }

        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc == NGX_DECLINED) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit_zone\" directive: unknown "
                               "parameter \"%V\" of zone \"%V\": expected "
                               "NAME SIZE [overrides=N] [overrides_file=PATH] "
                               "[state=PATH [state_interval=TIME]] "
                               "[redis=HOST:PORT ...]",
                               &value[i], name);
            return NGX_ERROR;
        }
    }

    if (*redis != NULL
        && ngx_http_ratelimit_redis_finish(cf, *redis, name) != NGX_CONF_OK)
    {
        return NGX_ERROR;
    }

    if (*sync != NULL
        && ngx_http_ratelimit_sync_finish(cf, *sync, *redis, name, size)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (overrides_file->len && *redis != NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: \"overrides_file=\" "
                           "of zone \"%V\" is for a zone without redis=: a "
                           "Redis zone keeps its overrides in Redis", name);
        return NGX_ERROR;
    }

    if (overrides_file->len && *overrides == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: \"overrides_file=\" "
                           "of zone \"%V\" with overrides=0: a zone without "
                           "room for overrides has none to keep", name);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* state=, state_interval= of ratelimit_zone: a local zone's. */

static ngx_int_t
ngx_http_ratelimit_zone_state(ngx_conf_t *cf, ngx_str_t *name,
    ngx_http_ratelimit_redis_t *redis, ngx_http_ratelimit_zone_t *zone)
{
    ngx_int_t                   rc;
    ngx_uint_t                  i;
    ngx_str_t                  *value;
    ngx_shm_zone_t             *shm;
    ngx_list_part_t            *part;
    ngx_http_ratelimit_zone_t  *other;

    value = cf->args->elts;
    zone->state_interval = NGX_HTTP_RATELIMIT_STATE_INTERVAL;

    for (i = 3; i < cf->args->nelts; i++) {
        rc = ngx_http_ratelimit_state_param(cf, &value[i], name,
                                            &zone->state_file,
                                            &zone->state_interval);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc == NGX_DECLINED
            && ngx_strncmp(value[i].data, "state", 5) == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit_zone\" directive: unknown "
                               "parameter \"%V\" of zone \"%V\": expected "
                               "state=PATH or state_interval=TIME",
                               &value[i], name);
            return NGX_ERROR;
        }
    }

    if (zone->state_file.len && redis != NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: \"state=\" of "
                           "zone \"%V\" is for a zone without redis=: Redis "
                           "keeps a Redis zone's keys", name);
        return NGX_ERROR;
    }

    /* a file is one zone's */

    for (part = &cf->cycle->shared_memory.part; zone->state_file.len && part;
         part = part->next)
    {
        shm = part->elts;

        for (i = 0; i < part->nelts; i++) {
            other = shm[i].data;

            if (shm[i].tag == &ngx_http_ratelimit_module && other != NULL
                && other->state_file.len == zone->state_file.len
                && ngx_strncmp(other->state_file.data, zone->state_file.data,
                               zone->state_file.len) == 0)
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "\"ratelimit_zone\" directive: zone "
                                   "\"%V\" has the state file \"%V\" of zone "
                                   "\"%V\": a state file is one zone's",
                                   name, &zone->state_file, &other->name);
                return NGX_ERROR;
            }
        }
    }

    return NGX_OK;
}


/*
 * A zone is the slab pool header (its mutex is the zone lock, which the
 * master releases if a worker dies holding it) followed by the core's table
 * (a Redis zone's: by its counters and the refusals it remembers first).
 * Reloaded with the same name, size and layout, the table is kept as it is.
 */

static ngx_int_t
ngx_http_ratelimit_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_ratelimit_zone_t  *ozone = data;

    size_t                             size;
    u_char                            *table;
    ngx_shm_zone_t                    *old;
    ngx_http_ratelimit_zone_t         *zone, *was;
    u_char                            *journal;
    ngx_http_ratelimit_redis_stats_t  *rs;
    char                               err[RL_ERR_MAX];

    zone = shm_zone->data;
    zone->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;
    zone->size = shm_zone->shm.size - ngx_http_ratelimit_overrides_bytes(zone);
    size = ngx_http_ratelimit_table_size(zone, shm_zone->shm.size);
    rs = (ngx_http_ratelimit_redis_stats_t *)
         ((u_char *) zone->shpool + ngx_align(sizeof(ngx_slab_pool_t), 64));
    journal = (u_char *) rs
              + ngx_align(sizeof(ngx_http_ratelimit_redis_stats_t), 64)
              + ngx_http_ratelimit_refusals_size(zone, shm_zone->shm.size);
    table = journal + ngx_http_ratelimit_sync_bytes(zone->sync);

    if (zone->redis) {
        zone->redis->stats = rs;
        zone->redis->refusals = (u_char *) rs
                      + ngx_align(sizeof(ngx_http_ratelimit_redis_stats_t), 64);
        zone->redis->refusals_size = ngx_http_ratelimit_refusals_size(zone,
                                                           shm_zone->shm.size);
    }

    if (ozone != NULL
        && (u_char *) ozone->table == table
        && rl_table_valid(ozone->table, size, zone->blobs.elts,
                          zone->blobs.nelts))
    {
        zone->table = ozone->table;
        ngx_http_ratelimit_sync_init_zone(zone->sync, zone->shpool, rs, journal,
                                          zone->table);
        ngx_http_ratelimit_overrides_attach(zone, table + size,
                                            shm_zone->shm.log);
        return NGX_OK;
    }

    if (shm_zone->shm.exists) {
        zone->table = zone->shpool->data;
        ngx_http_ratelimit_sync_init_zone(zone->sync, zone->shpool, rs, journal,
                                          zone->table);
        ngx_http_ratelimit_overrides_attach(zone, table + size,
                                            shm_zone->shm.log);
        return NGX_OK;
    }

    zone->table = table;

    ngx_http_ratelimit_zero_zone(shm_zone, ozone != NULL);
    ngx_http_ratelimit_sync_init_zone(zone->sync, zone->shpool, rs, journal,
                                      zone->table);

    if (rl_table_init(zone->table, size, zone->blobs.elts, zone->blobs.nelts,
                      NULL, err, sizeof(err))
        != RL_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "ratelimit_zone \"%V\": %s", &zone->name, err);
        return NGX_ERROR;
    }

    zone->shpool->data = zone->table;

    ngx_http_ratelimit_state_load(zone, shm_zone->shm.log);

    ngx_http_ratelimit_overrides_attach(zone, table + size, shm_zone->shm.log);

    /* a new zone is nobody else's yet: its rules' counters are laid out now,
       without its lock (never taken in the master, see count_one) */

    ngx_http_ratelimit_claim_stats(zone, 0);

    /* the previous cycle's zone of this name, if any, is not reused */

    old = ngx_http_ratelimit_lookup_zone((ngx_list_t *)
                                         &ngx_cycle->shared_memory,
                                         &zone->name);

    if (old != NULL && old->shm.size != shm_zone->shm.size) {
        was = (ngx_http_ratelimit_zone_t *) old->data;

        if (was->overrides != zone->overrides) {
            ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                          "ratelimit_zone \"%V\" changed overrides= from "
                          "%ui to %ui: its state starts empty", &zone->name,
                          was->overrides, zone->overrides);

        } else {
            ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                          "ratelimit_zone \"%V\" changed size from %uz to "
                          "%uz bytes: its state starts empty", &zone->name,
                          old->shm.size
                          - ngx_http_ratelimit_overrides_bytes(was),
                          shm_zone->shm.size
                          - ngx_http_ratelimit_overrides_bytes(zone));
        }

    } else if (old != NULL) {
        ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                      "ratelimit_zone \"%V\": its rules' state sizes changed: "
                      "its state starts empty", &zone->name);
    }

    return NGX_OK;
}


/*
 * The Redis counters and the table take zeroed memory (rl_table_init).  A
 * new zone is zero but for what ngx_slab_init() wrote after the slab pool
 * header: its page descriptors, up to sp->start (24 bytes a 4k page: 6m of
 * a 1024m zone, written by nginx for every zone whatever its module, though
 * this one allocates nothing from the pool).  That part is cleared, and the
 * rest left as the kernel handed it out, zero and not yet touched, so that
 * a zone costs memory as keys arrive, not at nginx -t or start.  All of it
 * is cleared when it is not fresh: the memory of a zone of the same name
 * and size that a reload could not keep (reused), or of an nginx built with
 * NGX_DEBUG_MALLOC, which fills new zones with 0xA5 (ngx_slab_junk; seen at
 * the zone's last byte).
 */

static void
ngx_http_ratelimit_zero_zone(ngx_shm_zone_t *shm_zone, ngx_uint_t reused)
{
    u_char           *from, *to, *end;
    ngx_slab_pool_t  *sp;

    sp = (ngx_slab_pool_t *) shm_zone->shm.addr;
    from = (u_char *) sp + sizeof(ngx_slab_pool_t);
    end = shm_zone->shm.addr + shm_zone->shm.size;
    to = (reused || end[-1] != 0) ? end : ngx_min(sp->start, end);

    if (to > from) {
        ngx_memzero(from, to - from);
    }
}


/*
 * The slab pool header (whose mutex is the lock), then the Redis counters,
 * a Redis zone's refusals remembered (about a sixteenth of the zone, at
 * most 512 KB: rl_refusals_size; a redis_sync zone decides locally and
 * has none), then redis_sync's journal if any, then the table, each at a
 * 64-byte boundary: shared memory is page-aligned, so this is the same for
 * every zone of a size and kind.
 */

static size_t
ngx_http_ratelimit_refusals_size(ngx_http_ratelimit_zone_t *zone,
    size_t zone_size)
{
    return zone->redis
           ? ngx_align(rl_refusals_size(zone_size
                                  - ngx_http_ratelimit_overrides_bytes(zone)),
                       64)
           : 0;
}


static size_t
ngx_http_ratelimit_table_size(ngx_http_ratelimit_zone_t *zone,
    size_t zone_size)
{
    return (zone_size - ngx_align(sizeof(ngx_slab_pool_t), 64)
            - ngx_align(sizeof(ngx_http_ratelimit_redis_stats_t), 64)
            - ngx_http_ratelimit_refusals_size(zone, zone_size)
            - ngx_http_ratelimit_sync_bytes(zone->sync)
            - ngx_http_ratelimit_overrides_bytes(zone))
           & ~(size_t) 63;
}


/*
 * A zone's layout (how much of it holds blocks, of which sizes, and
 * whether it remembers Redis's refusals) follows its rules and redis=.
 * Too small a zone for them fails the configuration.  The layout is part
 * of the shared memory zone's name, so a reload that changes it gets a
 * fresh zone from nginx (old workers keep the old one until they exit, and
 * nginx frees it then), while a reload that keeps it keeps the zone.
 */

static ngx_int_t
ngx_http_ratelimit_check_layout(ngx_conf_t *cf, ngx_shm_zone_t *shm_zone)
{
    u_char                     *p;
    size_t                      size;
    uint32_t                    crc;
    ngx_uint_t                  i;
    ngx_http_ratelimit_zone_t  *zone;
    char                        err[RL_ERR_MAX];

    zone = shm_zone->data;

    /* once a zone, whatever the number of its rules */

    if (zone->planned) {
        return NGX_OK;
    }

    zone->planned = 1;
    size = ngx_http_ratelimit_table_size(zone, shm_zone->shm.size);

    if (rl_table_plan(size, zone->blobs.elts, zone->blobs.nelts, err,
                      sizeof(err))
        != RL_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"ratelimit_zone\" directive: zone \"%V\" of size %uz "
                      "is %s, declared in %s:%ui", &zone->name,
                      shm_zone->shm.size
                      - ngx_http_ratelimit_overrides_bytes(zone),
                      err, zone->file, zone->line);
        return NGX_ERROR;
    }

    if ((zone->blobs.nelts == 0 && zone->redis == NULL)
        || shm_zone->shm.name.len != zone->name.len)
    {
        return NGX_OK;   /* no blocks nor refusals, or named already */
    }

    /* the block sizes, in any order: the layout depends on the set */

    crc = 0;
    for (i = 0; i < zone->blobs.nelts; i++) {
        crc ^= ngx_crc32_short((u_char *) &((uint32_t *) zone->blobs.elts)[i],
                               sizeof(uint32_t));
    }

    p = ngx_pnalloc(cf->pool, zone->name.len + sizeof(" layout=") + 8
                              + sizeof(" redis"));
    if (p == NULL) {
        return NGX_ERROR;
    }

    shm_zone->shm.name.data = p;
    shm_zone->shm.name.len = ngx_sprintf(p, "%V layout=%08xD%s", &zone->name,
                                         crc, zone->redis ? " redis" : "")
                             - p;

    return NGX_OK;
}


/*
 * A rule of a Redis zone: its arithmetic must stay exact in Lua, and its
 * location's other rules must use the same zone, since one script call
 * decides them all atomically (rules in local zones and in Redis could
 * not be committed together).
 */

static ngx_int_t
ngx_http_ratelimit_check_redis_rule(ngx_conf_t *cf,
    ngx_http_ratelimit_zone_ref_t *ref)
{
    ngx_uint_t                  j;
    ngx_http_ratelimit_rule_t  *rule, *rules;
    ngx_http_ratelimit_zone_t  *zone, *other;
    char                        err[RL_ERR_MAX];

    rules = ref->rules->elts;
    rule = &rules[ref->index];
    zone = ref->shm_zone->data;

    for (j = 0; j < ref->rules->nelts; j++) {
        other = rules[j].shm_zone->data;

        if (other != NULL && other != zone
            && (zone->redis != NULL || other->redis != NULL))
        {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"ratelimit\" directive: zone=%V and zone=%V "
                          "in one location: a location's rules must all use "
                          "the same Redis zone, or only local zones, in "
                          "%s:%ui", &zone->name, &other->name,
                          ref->file, ref->line);
            return NGX_ERROR;
        }
    }

    /* Redis Cluster: a request's keys must share a slot, and they do when
       every rule of the location has the same key (the hash tag) */

    for (j = 0; zone->redis != NULL && zone->redis->cluster
                && j < ref->rules->nelts; j++)
    {
        if (rules[j].key->value.len != rule->key->value.len
            || ngx_strncmp(rules[j].key->value.data, rule->key->value.data,
                           rule->key->value.len) != 0)
        {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"ratelimit\" directive: key=%V and key=%V in one "
                          "location of the Redis Cluster zone=%V: its rules "
                          "must have the same key, so that one request's "
                          "state is in one slot, in %s:%ui",
                          &rule->key->value, &rules[j].key->value, &zone->name,
                          ref->file, ref->line);
            return NGX_ERROR;
        }
    }

    if (ngx_http_ratelimit_sync_check_rule(cf, zone->sync, &rule->rule,
                                           &rule->name, &zone->name, ref->file,
                                           ref->line)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (zone->redis != NULL
        && rl_redis_rule_ok(&rule->rule, err, sizeof(err)) != RL_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"ratelimit\" directive: rule \"%V\" in zone=%V: "
                      "%s, in %s:%ui", &rule->name, &zone->name, err,
                      ref->file, ref->line);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* Zone, then rule name: the order check_names counts names in. */

static int ngx_libc_cdecl
ngx_http_ratelimit_cmp_refs(const void *one, const void *two)
{
    ngx_http_ratelimit_rule_t      *a, *b;
    ngx_http_ratelimit_zone_ref_t  *x, *y;

    x = *(ngx_http_ratelimit_zone_ref_t **) one;
    y = *(ngx_http_ratelimit_zone_ref_t **) two;

    if (x->shm_zone != y->shm_zone) {
        return (uintptr_t) x->shm_zone < (uintptr_t) y->shm_zone ? -1 : 1;
    }

    a = (ngx_http_ratelimit_rule_t *) x->rules->elts + x->index;
    b = (ngx_http_ratelimit_rule_t *) y->rules->elts + y->index;

    return ngx_strcmp(a->rule.name, b->rule.name);
}


/*
 * A zone counts up to RL_RULE_STATS_MAX rule names in ratelimit_stats: a
 * configuration giving one more is told so once for the zone.
 */

static ngx_int_t
ngx_http_ratelimit_check_names(ngx_conf_t *cf,
    ngx_http_ratelimit_main_conf_t *rmcf)
{
    ngx_uint_t                       i, n, names;
    ngx_http_ratelimit_zone_t       *zone;
    ngx_http_ratelimit_zone_ref_t  **sorted;

    n = rmcf->zone_refs.nelts;
    if (n <= RL_RULE_STATS_MAX) {
        return NGX_OK;
    }

    sorted = ngx_palloc(cf->temp_pool, n * sizeof(*sorted));
    if (sorted == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        sorted[i] = (ngx_http_ratelimit_zone_ref_t *) rmcf->zone_refs.elts + i;
    }

    ngx_qsort(sorted, n, sizeof(*sorted), ngx_http_ratelimit_cmp_refs);

    names = 0;

    for (i = 0; i < n; i++) {
        if (i == 0 || sorted[i]->shm_zone != sorted[i - 1]->shm_zone) {
            names = 0;
        }

        names += i == 0 || ngx_http_ratelimit_cmp_refs(&sorted[i],
                                                         &sorted[i - 1]) != 0;

        if (names == RL_RULE_STATS_MAX + 1) {
            zone = sorted[i]->shm_zone->data;
            ngx_log_error(NGX_LOG_WARN, cf->log, 0,
                          "ratelimit_zone \"%V\" has rules of more than %d "
                          "names: ratelimit_stats counts the first %d to "
                          "reach it, the others not", &zone->name,
                          RL_RULE_STATS_MAX, RL_RULE_STATS_MAX);
        }
    }

    return NGX_OK;
}


/*
 * Every zone a rule names is declared; each learns its rules and the block
 * sizes their states need, and is checked: its size fits them, Redis zones'
 * rules stay exact in Redis, and it has no more rule names than it counts.
 */

ngx_int_t
ngx_http_ratelimit_zones_init(ngx_conf_t *cf,
    ngx_http_ratelimit_main_conf_t *rmcf)
{
    uint32_t                        *blob;
    ngx_uint_t                       i;
    ngx_http_ratelimit_rule_t      **rule;
    ngx_http_ratelimit_zone_t       *zone;
    ngx_http_ratelimit_zone_ref_t   *refs;

    refs = rmcf->zone_refs.elts;

    rmcf->nrules = rmcf->zone_refs.nelts;
    rmcf->rules = ngx_palloc(cf->pool, rmcf->nrules * sizeof(*rmcf->rules));
    if (rmcf->rules == NULL) {
        return NGX_ERROR;
    }

    /* each zone's list of its rules at its size (a zone may have
       thousands): counted first, in the list's nalloc */

    for (i = 0; i < rmcf->zone_refs.nelts; i++) {
        zone = refs[i].shm_zone->data;

        if (zone != NULL && zone->rules.elts == NULL) {
            zone->rules.nalloc++;
        }
    }

    for (i = 0; i < rmcf->zone_refs.nelts; i++) {
        rmcf->rules[i] = (ngx_http_ratelimit_rule_t *) refs[i].rules->elts
                         + refs[i].index;

        zone = refs[i].shm_zone->data;

        if (zone != NULL && zone->rules.elts == NULL
            && ngx_array_init(&zone->rules, cf->pool, zone->rules.nalloc,
                              sizeof(ngx_http_ratelimit_rule_t *))
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (refs[i].shm_zone->data == NULL) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"ratelimit\" directive: zone=%V is not declared: "
                          "expected a \"ratelimit_zone %V SIZE;\" in the http "
                          "block, used in %s:%ui",
                          &refs[i].shm_zone->shm.name,
                          &refs[i].shm_zone->shm.name,
                          refs[i].file, refs[i].line);
            return NGX_ERROR;
        }

        zone = refs[i].shm_zone->data;
        rule = ngx_array_push(&zone->rules);
        if (rule == NULL) {
            return NGX_ERROR;
        }

        *rule = (ngx_http_ratelimit_rule_t *) refs[i].rules->elts
                + refs[i].index;

        if (rl_rule_block_size(&(*rule)->rule)) {
            blob = ngx_array_push(&zone->blobs);
            if (blob == NULL) {
                return NGX_ERROR;
            }

            *blob = rl_rule_block_size(&(*rule)->rule);
        }
    }

    for (i = 0; i < rmcf->zone_refs.nelts; i++) {
        if (ngx_http_ratelimit_check_layout(cf, refs[i].shm_zone) != NGX_OK
            || ngx_http_ratelimit_check_redis_rule(cf, &refs[i]) != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return ngx_http_ratelimit_check_names(cf, rmcf);
}


/*
 * This module's zones in a cycle, one after another: *part NULL to start.
 * NULL after the last.
 */

static ngx_http_ratelimit_zone_t *
ngx_http_ratelimit_next_zone(ngx_cycle_t *cycle, ngx_list_part_t **part,
    ngx_uint_t *i)
{
    ngx_shm_zone_t             *shm;
    ngx_http_ratelimit_zone_t  *zone;

    if (*part == NULL) {
        *part = &cycle->shared_memory.part;
        *i = 0;
    }

    for ( ;; ) {
        if (*i >= (*part)->nelts) {
            if ((*part)->next == NULL) {
                return NULL;
            }

            *part = (*part)->next;
            *i = 0;
        }

        shm = (ngx_shm_zone_t *) (*part)->elts + (*i)++;
        zone = shm->data;

        if (shm->tag == &ngx_http_ratelimit_module && zone != NULL
            && zone->table != NULL)
        {
            return zone;
        }
    }
}


/*
 * Calls each(zone, data) for every zone of this module in a cycle, until
 * one does not return NGX_OK; returns what the last returned.
 */

ngx_int_t
ngx_http_ratelimit_each_zone(ngx_cycle_t *cycle,
    ngx_http_ratelimit_each_zone_pt each, void *data)
{
    ngx_int_t                   rc;
    ngx_uint_t                  i;
    ngx_list_part_t            *part;
    ngx_http_ratelimit_zone_t  *zone;

    part = NULL;
    i = 0;
    rc = NGX_OK;

    while (rc == NGX_OK
           && (zone = ngx_http_ratelimit_next_zone(cycle, &part, &i)) != NULL)
    {
        rc = each(zone, data);
    }

    return rc;
}


/* A zone of this module in a cycle by its name, or NULL. */

static ngx_int_t
ngx_http_ratelimit_named(ngx_http_ratelimit_zone_t *zone, void *data)
{
    ngx_http_ratelimit_zone_t  **found = data;

    if (zone->name.len == (*found)->name.len
        && ngx_strncmp(zone->name.data, (*found)->name.data, zone->name.len)
           == 0)
    {
        *found = zone;
        return NGX_DONE;
    }

    return NGX_OK;
}


ngx_http_ratelimit_zone_t *
ngx_http_ratelimit_find_zone(ngx_cycle_t *cycle, ngx_str_t *name)
{
    ngx_http_ratelimit_zone_t   key, *found;

    key.name = *name;
    found = &key;

    if (ngx_http_ratelimit_each_zone(cycle, ngx_http_ratelimit_named, &found)
        != NGX_DONE)
    {
        return NULL;
    }

    return found;
}


/*
 * Finds every rule's counters in its zone, claiming slots for new names:
 * in a new zone (lock = 0), or at a worker's start if the zone's lock is
 * free (a zone kept across a reload; else count_one does it on first use).
 */

void
ngx_http_ratelimit_claim_stats(ngx_http_ratelimit_zone_t *zone,
    ngx_uint_t lock)
{
    ngx_uint_t                   i;
    ngx_http_ratelimit_rule_t  **rules;

    if (lock && !ngx_shmtx_trylock(&zone->shpool->mutex)) {
        return;
    }

    rules = zone->rules.elts;

    for (i = 0; i < zone->rules.nelts; i++) {
        if (rules[i]->stats == NGX_HTTP_RATELIMIT_STATS_UNKNOWN) {
            rules[i]->stats = rl_table_rule_slot(zone->table,
                                                 rules[i]->rule.name);
        }
    }

    if (lock) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
    }
}


/*
 * A rule's counters are found in its zone by name the first time a worker
 * decides for it (under the zone's lock, taken by workers only: the master
 * never waits on a lock a worker may hold), before the request is decided,
 * so that a refusal counts among its top keys.  A zone counts up to
 * RL_RULE_STATS_MAX names; past that, once per worker, a warning.  Returns
 * what rl_check_t's counters holds: the slot plus 1, 0 for none.
 */

int
ngx_http_ratelimit_counters(ngx_log_t *log, ngx_http_ratelimit_rule_t *rule)
{
    ngx_http_ratelimit_zone_t  *zone;

    if (rule->stats != NGX_HTTP_RATELIMIT_STATS_UNKNOWN) {
        return rule->stats + 1;
    }

    zone = rule->shm_zone->data;

    ngx_shmtx_lock(&zone->shpool->mutex);
    rule->stats = rl_table_rule_slot(zone->table, rule->rule.name);
    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (rule->stats < 0 && !zone->stats_full_logged) {
        zone->stats_full_logged = 1;
        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "ratelimit_zone \"%V\" counts %d rule names "
                      "already: rule \"%V\" and others are not counted "
                      "in ratelimit_stats", &zone->name,
                      RL_RULE_STATS_MAX, &rule->name);
    }

    return rule->stats + 1;
}


/* The first rule of a zone with this name, in this configuration. */

ngx_http_ratelimit_rule_t *
ngx_http_ratelimit_zone_rule(ngx_http_ratelimit_zone_t *zone, ngx_str_t *name)
{
    ngx_uint_t                   i;
    ngx_http_ratelimit_rule_t  **rules;

    rules = zone->rules.elts;

    for (i = 0; i < zone->rules.nelts; i++) {
        if (rules[i]->name.len == name->len
            && ngx_strncmp(rules[i]->name.data, name->data, name->len) == 0)
        {
            return rules[i];
        }
    }

    return NULL;
}


/* The keys the rule counted in a slot refuses most, read under the lock. */

void
ngx_http_ratelimit_top(ngx_http_ratelimit_zone_t *zone, int slot,
    rl_top_t *top)
{
    ngx_shmtx_lock(&zone->shpool->mutex);
    rl_table_top(zone->table, slot, ngx_http_ratelimit_now(), top);
    ngx_shmtx_unlock(&zone->shpool->mutex);
}


/*
 * Locks (lock = 1) or unlocks the zones of a request of several zones, each
 * once, in the order the core gives (rq->order: by address, so that two
 * requests never wait for each other).  A request of one zone locks it in
 * ngx_http_ratelimit_lock() (module.h).
 */

void
ngx_http_ratelimit_lock_all(rl_request_t *rq, ngx_uint_t lock)
{
    uint32_t                    i, m;
    ngx_http_ratelimit_zone_t  *zone;

    m = rq->locks;

    for (i = 0; i < m; i++) {
        zone = ngx_http_ratelimit_zone_of(ngx_http_ratelimit_rule_of(
                   &rq->checks[rq->order[lock ? i : m - 1 - i]]));

        if (lock) {
            ngx_shmtx_lock(&zone->shpool->mutex);

        } else {
            ngx_shmtx_unlock(&zone->shpool->mutex);
        }
    }
}
