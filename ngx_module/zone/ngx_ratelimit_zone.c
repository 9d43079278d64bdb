
/*
 * ngx-ratelimit: the shared memory zones, at run time: each laid out when
 * nginx makes it, found by name, walked, its rules' counters and locks
 * (the ratelimit_zone directive and the checks of a configuration's zones:
 * ngx_ratelimit_zone_conf.c).
 *
 * A zone is the slab pool header (its mutex is the zone's lock, which the
 * master releases if a worker dies holding it), the Redis counters, and the
 * core's table, laid out for the rules that name the zone.  The master never
 * takes a zone's lock: what it needs from a zone it does when the zone is
 * new (nobody else has it yet); workers do the rest under their own lock.
 */


#include "ngx_ratelimit_zone.h"
#include "ngx_ratelimit_file.h"
#include "ngx_ratelimit_log.h"
#include "ngx_ratelimit_overrides.h"
#include "ngx_ratelimit_state.h"
#include "ngx_ratelimit_sync.h"
#include "ngx_ratelimit_redis_conn.h"


static ngx_ratelimit_zone_t *ngx_ratelimit_next_zone(
    ngx_cycle_t *cycle, ngx_list_part_t **part, ngx_uint_t *i);
static ngx_int_t ngx_ratelimit_named(ngx_ratelimit_zone_t *zone,
    void *data);
static ngx_atomic_uint_t ngx_ratelimit_lease_server(
    ngx_ratelimit_zone_t *zone, ngx_ratelimit_zone_t *ozone,
    ngx_ratelimit_redis_stats_t *rs);
static ngx_int_t ngx_ratelimit_slots(ngx_ratelimit_zone_t *zone);
static void ngx_ratelimit_zone_renewed(ngx_shm_zone_t *shm_zone);
static ngx_int_t ngx_ratelimit_zone_files(ngx_ratelimit_zone_t *zone,
    ngx_log_t *log);
static ngx_int_t ngx_ratelimit_zone_file(ngx_ratelimit_zone_t *zone,
    ngx_uint_t k, ngx_log_t *log);
static void ngx_ratelimit_kept_names(ngx_ratelimit_zone_t *zone,
    ngx_log_t *log);
static void ngx_ratelimit_zero_zone(ngx_shm_zone_t *shm_zone,
    ngx_uint_t reused);
static ngx_int_t ngx_ratelimit_start_zone(ngx_ratelimit_zone_t *zone,
    void *data);
static ngx_int_t ngx_ratelimit_stop_zone(ngx_ratelimit_zone_t *zone,
    void *data);
static ngx_int_t ngx_ratelimit_save_zone(ngx_ratelimit_zone_t *zone,
    void *data);
static size_t ngx_ratelimit_refusals_size(ngx_ratelimit_zone_t *zone,
    size_t zone_size);


/*
 * The tag of the module's zones among the cycle's shared memory
 * (ngx_shared_memory_add): one for the zones of every block, whatever its
 * protocol, so that their names are one namespace and the stats and the
 * key API find them all.
 */

ngx_uint_t  ngx_ratelimit_zone_tag;


/*
 * This module's zone declared as NAME in a cycle's list of shared memory
 * zones (their own names may carry a layout, see check_layout).
 */

ngx_shm_zone_t *
ngx_ratelimit_lookup_zone(ngx_list_t *shared_memory, ngx_str_t *name)
{
    ngx_str_t             *declared;
    ngx_uint_t             i;
    ngx_list_part_t       *part;
    ngx_shm_zone_t        *zone;
    ngx_ratelimit_zone_t  *z;

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

        if (zone[i].tag != &ngx_ratelimit_zone_tag) {
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
 * A zone is the slab pool header (its mutex is the zone lock, which the
 * master releases if a worker dies holding it) followed by the core's table
 * (a Redis zone's: by its counters and the refusals it remembers first).
 * Reloaded with the same name, size and layout, the table is kept as it is.
 */

ngx_int_t
ngx_ratelimit_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_ratelimit_zone_t  *ozone = data;

    size_t                             size;
    u_char                            *table;
    ngx_ratelimit_zone_t              *zone;
    u_char                            *journal;
    ngx_ratelimit_redis_stats_t       *rs;
    ngx_atomic_uint_t                  server;
    char                               err[RL_ERR_MAX];

    zone = shm_zone->data;

    if (ngx_ratelimit_zone_files(zone, shm_zone->shm.log) != NGX_OK) {
        return NGX_ERROR;
    }

    zone->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;
    zone->size = shm_zone->shm.size - ngx_ratelimit_overrides_bytes(zone);
    size = ngx_ratelimit_table_size(zone, shm_zone->shm.size);
    rs = (ngx_ratelimit_redis_stats_t *)
         ((u_char *) zone->shpool + ngx_align(sizeof(ngx_slab_pool_t), 64));
    journal = (u_char *) rs
              + ngx_align(sizeof(ngx_ratelimit_redis_stats_t), 64)
              + ngx_ratelimit_refusals_size(zone, shm_zone->shm.size);
    table = journal + ngx_ratelimit_sync_bytes(zone->sync);

    if (zone->redis) {
        zone->redis->stats = rs;
        zone->redis->refusals = (u_char *) rs
                      + ngx_align(sizeof(ngx_ratelimit_redis_stats_t), 64);
        zone->redis->refusals_size = ngx_ratelimit_refusals_size(zone,
                                                           shm_zone->shm.size);
    }

    if (ozone != NULL
        && (u_char *) ozone->table == table
        && rl_table_valid(ozone->table, size, zone->blobs.elts,
                          zone->blobs.nelts))
    {
        zone->table = ozone->table;
        ngx_ratelimit_kept_names(zone, shm_zone->shm.log);

    } else if (shm_zone->shm.exists) {
        zone->table = zone->shpool->data;
    }

    if (zone->table != NULL) {
        ngx_ratelimit_sync_init_zone(zone->sync, zone->shpool, rs, journal,
                                     zone->table);
        ngx_ratelimit_overrides_attach(zone, table + size,
                                       shm_zone->shm.log);
        return NGX_OK;
    }

    zone->table = table;

    server = ngx_ratelimit_lease_server(zone, ozone, rs);

    ngx_ratelimit_zero_zone(shm_zone, ozone != NULL);

    rs->server = server;
    ngx_ratelimit_sync_init_zone(zone->sync, zone->shpool, rs, journal,
                                 zone->table);

    if (rl_table_init_names(zone->table, size, zone->blobs.elts,
                            zone->blobs.nelts, zone->nnames,
                            rl_table_stack(zone->stack_slots,
                                           zone->stack_blocks),
                            NULL, err, sizeof(err))
        != RL_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "ratelimit_zone \"%V\": %s", &zone->name, err);
        return NGX_ERROR;
    }

    zone->shpool->data = zone->table;

    ngx_ratelimit_state_load(zone, shm_zone->shm.log);

    ngx_ratelimit_overrides_attach(zone, table + size, shm_zone->shm.log);

    /* its rules' counters are claimed by the first worker to start (the
       master never touches them: a zone of thousands of names would cost
       the master their pages too) */

    ngx_ratelimit_zone_renewed(shm_zone);

    return NGX_OK;
}


/* A zone made afresh where the previous cycle had one of its name: why
   its state starts empty. */

static void
ngx_ratelimit_zone_renewed(ngx_shm_zone_t *shm_zone)
{
    ngx_shm_zone_t        *old;
    ngx_ratelimit_zone_t  *zone, *was;

    zone = shm_zone->data;
    old = ngx_ratelimit_lookup_zone((ngx_list_t *)
                                    &ngx_cycle->shared_memory,
                                    &zone->name);

    if (old != NULL && old->shm.size != shm_zone->shm.size) {
        was = (ngx_ratelimit_zone_t *) old->data;

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
                          - ngx_ratelimit_overrides_bytes(was),
                          shm_zone->shm.size
                          - ngx_ratelimit_overrides_bytes(zone));
        }

    } else if (old != NULL) {
        ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                      "ratelimit_zone \"%V\": its rules' state sizes changed: "
                      "its state starts empty", &zone->name);
    }
}


/*
 * A zone's files (state=, overrides_file=) are its own, one for each use:
 * not another zone's, not its other one, and not one nginx writes (an
 * error or access log, the pid file), which a rename would replace and a
 * start would read as the zone's.  Names are compared resolved, relative
 * ones from the prefix (ngx_ratelimit_file_same).  Checked as nginx
 * makes the zone, before anything is read, when every file of the
 * configuration is known (nginx -t too): a zone's first, then the
 * other's; a pair of zones is met at each one's.
 */

static const char  *ngx_ratelimit_file_params[] = {
    "state", "overrides_file"
};

#define ngx_ratelimit_zone_file_of(zone, k)                                   \
    ((k) == 0 ? &(zone)->state_file : &(zone)->overrides_file)


static ngx_int_t
ngx_ratelimit_zone_files(ngx_ratelimit_zone_t *zone, ngx_log_t *log)
{
    ngx_uint_t  k;

    for (k = 0; k < 2; k++) {
        if (ngx_ratelimit_zone_file_of(zone, k)->len
            && ngx_ratelimit_zone_file(zone, k, log) != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_ratelimit_zone_file(ngx_ratelimit_zone_t *zone, ngx_uint_t k,
    ngx_log_t *log)
{
    ngx_str_t             *mine, *theirs, error_log;
    ngx_uint_t             i, j;
    ngx_shm_zone_t        *shm;
    ngx_open_file_t       *file;
    ngx_list_part_t       *part;
    ngx_core_conf_t       *ccf;
    ngx_ratelimit_zone_t  *other;

    mine = ngx_ratelimit_zone_file_of(zone, k);

    for (part = &zone->cycle->shared_memory.part; part; part = part->next) {
        shm = part->elts;

        for (i = 0; i < part->nelts; i++) {
            other = shm[i].data;

            if (shm[i].tag != &ngx_ratelimit_zone_tag || other == NULL) {
                continue;
            }

            for (j = (other == zone) ? k + 1 : 0; j < 2; j++) {
                theirs = ngx_ratelimit_zone_file_of(other, j);

                if (!ngx_ratelimit_file_same(mine, theirs)) {
                    continue;
                }

                ngx_log_error(NGX_LOG_EMERG, log, 0,
                              "\"ratelimit_zone\" directive: %s=%V of zone "
                              "\"%V\" (in %s:%ui) and %s=%V of zone \"%V\" "
                              "(in %s:%ui) are one file: expected a file of "
                              "its own for each zone's state= and "
                              "overrides_file=",
                              ngx_ratelimit_file_params[k], mine,
                              &zone->name, zone->file, zone->line,
                              ngx_ratelimit_file_params[j], theirs,
                              &other->name, other->file, other->line);
                return NGX_ERROR;
            }
        }
    }

    /* the logs and the pid file (the error log given by -e, or nginx's
       own, is written until the configuration's are open) */

    ccf = (ngx_core_conf_t *) ngx_get_conf(zone->cycle->conf_ctx,
                                           ngx_core_module);
    error_log = zone->cycle->error_log;

    if (ngx_conf_full_name(zone->cycle, &error_log, 0) != NGX_OK) {
        return NGX_ERROR;
    }

    theirs = ngx_ratelimit_file_same(mine, &error_log) ? &error_log
             : ccf && ngx_ratelimit_file_same(mine, &ccf->pid)
             ? &ccf->pid : NULL;

    for (part = &zone->cycle->open_files.part; part && !theirs;
         part = part->next)
    {
        file = part->elts;

        for (i = 0; i < part->nelts && !theirs; i++) {
            if (ngx_ratelimit_file_same(mine, &file[i].name)) {
                theirs = &file[i].name;
            }
        }
    }

    if (theirs) {
        ngx_log_error(NGX_LOG_EMERG, log, 0,
                      "\"ratelimit_zone\" directive: %s=%V of zone \"%V\" "
                      "(in %s:%ui) is \"%V\", a file nginx writes (an "
                      "error_log, an access_log, the pid file): expected a "
                      "file of its own for each zone's state= and "
                      "overrides_file=",
                      ngx_ratelimit_file_params[k], mine, &zone->name,
                      zone->file, zone->line, theirs);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * A zone made again by a reload keeps the server's id in its leases' names
 * (ngx_ratelimit_redis_server_id): the old workers' requests hold
 * leases named with it, which the new workers count as this server's.  It
 * is read before the zone is cleared: from the same memory (ozone: a zone
 * of the same name and size), or from the previous cycle's zone of the
 * name, still mapped while the master makes the new cycle.
 */

static ngx_atomic_uint_t
ngx_ratelimit_lease_server(ngx_ratelimit_zone_t *zone,
    ngx_ratelimit_zone_t *ozone, ngx_ratelimit_redis_stats_t *rs)
{
    ngx_shm_zone_t        *old;
    ngx_ratelimit_zone_t  *was;

    if (ozone != NULL) {
        return rs->server;
    }

    old = ngx_ratelimit_lookup_zone((ngx_list_t *)
                                    &ngx_cycle->shared_memory,
                                    &zone->name);

    if (old == NULL || old->data == NULL) {
        return 0;
    }

    was = (ngx_ratelimit_zone_t *) old->data;

    if (was->redis == NULL || was->redis->stats == NULL) {
        return 0;
    }

    return was->redis->stats->server;
}


/*
 * A zone kept across a reload keeps its room to count rule names (what it
 * was laid out for, and a quarter more): names beyond it are limited but
 * not counted until the zone is laid out anew, at a restart.
 */

static void
ngx_ratelimit_kept_names(ngx_ratelimit_zone_t *zone, ngx_log_t *log)
{
    if (rl_table_rule_room(zone->table) < zone->nnames) {
        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "ratelimit_zone \"%V\" keeps its state and its room "
                      "to count %uz rule names: %ui names now, the names "
                      "beyond are not counted in ratelimit_stats until a "
                      "restart", &zone->name,
                      rl_table_rule_room(zone->table), zone->nnames);
    }
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
ngx_ratelimit_zero_zone(ngx_shm_zone_t *shm_zone, ngx_uint_t reused)
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
ngx_ratelimit_refusals_size(ngx_ratelimit_zone_t *zone,
    size_t zone_size)
{
    return zone->redis
           ? ngx_align(rl_refusals_size(zone_size
                                  - ngx_ratelimit_overrides_bytes(zone)),
                       64)
           : 0;
}


size_t
ngx_ratelimit_table_size(ngx_ratelimit_zone_t *zone,
    size_t zone_size)
{
    return (zone_size - ngx_align(sizeof(ngx_slab_pool_t), 64)
            - ngx_align(sizeof(ngx_ratelimit_redis_stats_t), 64)
            - ngx_ratelimit_refusals_size(zone, zone_size)
            - ngx_ratelimit_sync_bytes(zone->sync)
            - ngx_ratelimit_overrides_bytes(zone))
           & ~(size_t) 63;
}


/*
 * This module's zones in a cycle, one after another: *part NULL to start.
 * NULL after the last.
 */

static ngx_ratelimit_zone_t *
ngx_ratelimit_next_zone(ngx_cycle_t *cycle, ngx_list_part_t **part,
    ngx_uint_t *i)
{
    ngx_shm_zone_t        *shm;
    ngx_ratelimit_zone_t  *zone;

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

        if (shm->tag == &ngx_ratelimit_zone_tag && zone != NULL
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
ngx_ratelimit_each_zone(ngx_cycle_t *cycle,
    ngx_ratelimit_each_zone_pt each, void *data)
{
    ngx_int_t              rc;
    ngx_uint_t             i;
    ngx_list_part_t       *part;
    ngx_ratelimit_zone_t  *zone;

    part = NULL;
    i = 0;
    rc = NGX_OK;

    while (rc == NGX_OK
           && (zone = ngx_ratelimit_next_zone(cycle, &part, &i)) != NULL)
    {
        rc = each(zone, data);
    }

    return rc;
}


/* A zone of this module in a cycle by its name, or NULL. */

static ngx_int_t
ngx_ratelimit_named(ngx_ratelimit_zone_t *zone, void *data)
{
    ngx_ratelimit_zone_t  **found = data;

    if (zone->name.len == (*found)->name.len
        && ngx_strncmp(zone->name.data, (*found)->name.data, zone->name.len)
           == 0)
    {
        *found = zone;
        return NGX_DONE;
    }

    return NGX_OK;
}


ngx_ratelimit_zone_t *
ngx_ratelimit_find_zone(ngx_cycle_t *cycle, ngx_str_t *name)
{
    ngx_ratelimit_zone_t  key, *found;

    key.name = *name;
    found = &key;

    if (ngx_ratelimit_each_zone(cycle, ngx_ratelimit_named, &found)
        != NGX_DONE)
    {
        return NULL;
    }

    return found;
}


/*
 * Finds every rule's counters in its zone, claiming slots for new names, in
 * the order of the configuration: when the stats are asked for (lock = 0:
 * the caller holds the zone's lock), so that they list every name.  A rule
 * finds its own on its first request (ngx_ratelimit_counters): a
 * worker touches no counters of names nobody uses or asks about.
 */

void
ngx_ratelimit_claim_stats(ngx_ratelimit_zone_t *zone,
    ngx_uint_t lock)
{
    ngx_uint_t              i;
    ngx_ratelimit_rule_t  **rules;

    if (ngx_ratelimit_slots(zone) != NGX_OK
        || (lock && !ngx_shmtx_trylock(&zone->shpool->mutex)))
    {
        return;
    }

    rules = zone->rules.elts;

    for (i = 0; i < zone->rules.nelts; i++) {
        if (zone->slots[rules[i]->name_index]
            == NGX_RATELIMIT_STATS_UNKNOWN)
        {
            zone->slots[rules[i]->name_index] =
                rl_table_rule_slot(zone->table, rules[i]->rule.name);
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
 * so that a refusal counts among its top keys.  A zone counts the names
 * it was laid out for (and a quarter more); past that (a reload that added
 * more, the zone kept), once per worker, a warning.  Returns
 * what rl_check_t's counters holds: the slot plus 1, 0 for none.
 */

int
ngx_ratelimit_counters(ngx_log_t *log, ngx_ratelimit_rule_t *rule)
{
    int32_t               *slot;
    ngx_ratelimit_zone_t  *zone;

    zone = rule->shm_zone->data;

    if (zone->slots == NULL
        && ngx_ratelimit_slots(zone) != NGX_OK)
    {
        return 0;
    }

    slot = &zone->slots[rule->name_index];

    if (*slot != NGX_RATELIMIT_STATS_UNKNOWN) {
        return *slot + 1;
    }

    ngx_shmtx_lock(&zone->shpool->mutex);
    *slot = rl_table_rule_slot(zone->table, rule->rule.name);
    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (*slot < 0 && !zone->stats_full_logged) {
        zone->stats_full_logged = 1;
        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "ratelimit_zone \"%V\" counts %uz rule names "
                      "already: rule \"%V\" and others are not counted "
                      "in ratelimit_stats", &zone->name,
                      rl_table_rule_room(zone->table), &rule->name);
    }

    return *slot + 1;
}


/*
 * This worker's slots of the zone's names, each unknown until found, in
 * its cycle's pool (a worker's lives as long as the worker).
 */

static ngx_int_t
ngx_ratelimit_slots(ngx_ratelimit_zone_t *zone)
{
    ngx_uint_t  i;

    if (zone->slots != NULL) {
        return NGX_OK;
    }

    zone->slots = ngx_palloc(ngx_cycle->pool,
                             (zone->nnames + 1) * sizeof(int32_t));
    if (zone->slots == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < zone->nnames; i++) {
        zone->slots[i] = NGX_RATELIMIT_STATS_UNKNOWN;
    }

    return NGX_OK;
}


/*
 * The first rule of a zone with this name, in this configuration: found
 * among its names, sorted (ngx_ratelimit_zone_names).
 */

ngx_ratelimit_rule_t *
ngx_ratelimit_zone_rule(ngx_ratelimit_zone_t *zone, ngx_str_t *name)
{
    ngx_int_t              c;
    ngx_uint_t             lo, hi, mid;
    ngx_ratelimit_rule_t  *rule;

    lo = 0;
    hi = zone->nnames;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        rule = zone->names[mid];

        c = ngx_memn2cmp(rule->name.data, name->data, rule->name.len,
                         name->len);

        if (c == 0) {
            return rule;
        }

        if (c < 0) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    return NULL;
}


/* The keys the rule counted in a slot refuses most, read under the lock. */

void
ngx_ratelimit_top(ngx_ratelimit_zone_t *zone, int slot,
    rl_top_t *top)
{
    ngx_shmtx_lock(&zone->shpool->mutex);
    rl_table_top(zone->table, slot, ngx_ratelimit_now(), top);
    ngx_shmtx_unlock(&zone->shpool->mutex);
}


/*
 * Locks (lock = 1) or unlocks the zones of a request of several zones, each
 * once, in the order the core gives (rq->order: by address, so that two
 * requests never wait for each other).  A request of one zone locks it in
 * ngx_ratelimit_lock() (module.h).
 */

void
ngx_ratelimit_lock_all(rl_request_t *rq, ngx_uint_t lock)
{
    uint32_t               i, m;
    ngx_ratelimit_zone_t  *zone;

    m = rq->locks;

    for (i = 0; i < m; i++) {
        zone = ngx_ratelimit_zone_of(ngx_ratelimit_rule_of(
                   &rq->checks[rq->order[lock ? i : m - 1 - i]]));

        if (lock) {
            ngx_shmtx_lock(&zone->shpool->mutex);

        } else {
            ngx_shmtx_unlock(&zone->shpool->mutex);
        }
    }
}


/*
 * A worker's start: in zones kept across a reload, its rules' counters
 * looked up; each zone's exchange with Redis, state file and overrides
 * started.  As it exits, its Redis connections are closed and exchanges
 * stopped; as the master exits, after its workers, each zone's state file
 * is written.
 */

/*
 * Each protocol's module (the http and the stream one, either loaded
 * alone) starts, stops and saves every zone of the tag, whichever block
 * declared it: the first call in a process does it for the cycle, the
 * other's finds it done.
 */

static ngx_cycle_t  *ngx_ratelimit_started, *ngx_ratelimit_stopped,
                    *ngx_ratelimit_saved;


ngx_int_t
ngx_ratelimit_zones_start(ngx_cycle_t *cycle)
{
    if (ngx_ratelimit_started == cycle) {
        return NGX_OK;
    }

    ngx_ratelimit_started = cycle;

    return ngx_ratelimit_each_zone(cycle, ngx_ratelimit_start_zone, NULL);
}


static ngx_int_t
ngx_ratelimit_start_zone(ngx_ratelimit_zone_t *zone, void *data)
{
    if (zone->sync != NULL) {
        ngx_ratelimit_sync_start(zone->sync);
    }

    if (ngx_ratelimit_state_start(zone, (ngx_cycle_t *) ngx_cycle) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_ratelimit_overrides_start(zone, (ngx_cycle_t *) ngx_cycle);
}


void
ngx_ratelimit_zones_stop(ngx_cycle_t *cycle)
{
    if (ngx_ratelimit_stopped == cycle) {
        return;
    }

    ngx_ratelimit_stopped = cycle;

    (void) ngx_ratelimit_each_zone(cycle, ngx_ratelimit_stop_zone, NULL);
}


static ngx_int_t
ngx_ratelimit_stop_zone(ngx_ratelimit_zone_t *zone, void *data)
{
    if (zone->redis != NULL) {
        ngx_ratelimit_redis_close(zone->redis);
    }

    if (zone->sync != NULL) {
        ngx_ratelimit_sync_stop(zone->sync);
    }

    return NGX_OK;
}


void
ngx_ratelimit_zones_save(ngx_cycle_t *cycle)
{
    if (ngx_ratelimit_saved == cycle) {
        return;
    }

    ngx_ratelimit_saved = cycle;

    (void) ngx_ratelimit_each_zone(cycle, ngx_ratelimit_save_zone,
                                   cycle->log);
}


static ngx_int_t
ngx_ratelimit_save_zone(ngx_ratelimit_zone_t *zone, void *data)
{
    ngx_ratelimit_state_save(zone, data);

    return NGX_OK;
}
