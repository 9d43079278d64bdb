
/*
 * ngx-ratelimit: the ratelimit_zone directive (a zone's name, size and
 * parameters: overrides, state file, Redis) and, once the configuration
 * is read, the checks of its zones: every rule's zone declared, names
 * counted, a Redis zone's rules decidable there, the zone big enough for
 * its rules' states.  At run time a zone is ngx_ratelimit_zone.c's.
 */


#include "ngx_ratelimit_zone_conf.h"
#include "ngx_ratelimit_log.h"
#include "ngx_ratelimit_overrides.h"
#include "ngx_ratelimit_redis_conf.h"
#include "ngx_ratelimit_state.h"
#include "ngx_ratelimit_sync.h"


/* The documented minimum: room for the slab pool header and the table. */
#define NGX_RATELIMIT_ZONE_MIN          (32 * 1024)


static void ngx_ratelimit_bad_size(ngx_conf_t *cf, ngx_str_t *value,
    ngx_str_t *name);
static ngx_int_t ngx_ratelimit_zone_state(ngx_conf_t *cf,
    ngx_str_t *name, ngx_ratelimit_redis_t *redis,
    ngx_ratelimit_zone_t *zone);
static ngx_int_t ngx_ratelimit_zone_params(ngx_conf_t *cf,
    ngx_ratelimit_conf_t *conf, ngx_str_t *name, ssize_t size,
    ngx_ratelimit_redis_t **redis, ngx_ratelimit_sync_t **sync,
    ngx_uint_t *overrides, ngx_str_t *overrides_file);
static ngx_int_t ngx_ratelimit_check_layout(ngx_conf_t *cf,
    ngx_shm_zone_t *shm_zone);
static ngx_int_t ngx_ratelimit_check_redis_rule(ngx_conf_t *cf,
    ngx_ratelimit_zone_ref_t *ref);
static ngx_int_t ngx_ratelimit_zone_names(ngx_conf_t *cf,
    ngx_ratelimit_conf_t *conf);
static ngx_int_t ngx_ratelimit_zone_block(ngx_conf_t *cf,
    ngx_ratelimit_conf_t *conf, ngx_ratelimit_zone_t *zone,
    ngx_ratelimit_zone_ref_t *ref);


/*
 * The rule i of a reference's location, whatever the protocol's rule that
 * holds it: its first member is the part the zone knows.
 */

static ngx_inline ngx_ratelimit_rule_t *
ngx_ratelimit_ref_rule(ngx_ratelimit_zone_ref_t *ref, ngx_uint_t i)
{
    return (ngx_ratelimit_rule_t *) ((u_char *) ref->rules->elts
                                     + i * ref->rules->size);
}


/*
 * A zone's name, as ratelimit_zone declares it and zone= names it: what a
 * rule's name may be (rl_name_valid), since it appears as it is in log
 * lines, the stats' JSON and Prometheus labels, and the key API's paths.
 * What is refused is shown escaped, as keys are.
 */

ngx_int_t
ngx_ratelimit_zone_name(ngx_conf_t *cf, const char *directive,
    ngx_str_t *name)
{
    u_char  shown[NGX_RATELIMIT_KEY_ESCAPED], *last;

    if (rl_name_valid((const char *) name->data, name->len)) {
        return NGX_OK;
    }

    last = ngx_ratelimit_escape_key(shown, name->data, name->len);

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
ngx_ratelimit_bad_size(ngx_conf_t *cf, ngx_str_t *value, ngx_str_t *name)
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


/*
 * ratelimit_zone NAME SIZE [overrides=N] [overrides_file=PATH] [redis=...];
 * in a protocol's block (conf: its module's).
 */

char *
ngx_ratelimit_zone_declare(ngx_conf_t *cf, ngx_ratelimit_conf_t *conf)
{
    ssize_t                 size;
    ngx_str_t               overrides_file;
    ngx_uint_t              overrides;
    ngx_ratelimit_redis_t  *redis;
    ngx_ratelimit_sync_t   *sync;
    ngx_str_t              *value, name;
    ngx_shm_zone_t         *shm_zone;
    ngx_ratelimit_zone_t   *zone;

    value = cf->args->elts;
    name = value[1];

    if (ngx_ratelimit_zone_name(cf, "ratelimit_zone", &name) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    size = ngx_parse_size(&value[2]);

    if (size == NGX_ERROR) {
        ngx_ratelimit_bad_size(cf, &value[2], &name);
        return NGX_CONF_ERROR;
    }

    if (size < NGX_RATELIMIT_ZONE_MIN) {
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

    if (ngx_ratelimit_zone_params(cf, conf, &name, size, &redis, &sync,
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
        overrides = redis ? 0 : NGX_RATELIMIT_OVERRIDES_DEFAULT;
    }

    shm_zone = ngx_ratelimit_lookup_zone(&cf->cycle->shared_memory,
                                         &name);

    if (shm_zone != NULL && shm_zone->data != NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: zone \"%V\" is "
                           "already declared (size %uz): each zone is "
                           "declared once", &name, shm_zone->shm.size
                           - ngx_ratelimit_overrides_bytes(
                                 shm_zone->data));
        return NGX_CONF_ERROR;
    }

    /* the overrides' room comes on top of SIZE, which stays the keys' */

    shm_zone = ngx_shared_memory_add(cf, &name,
                                     size + (overrides
                                             ? ngx_align(rl_overrides_size(
                                                             overrides), 64)
                                             : 0),
                                     &ngx_ratelimit_zone_tag);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    zone = ngx_pcalloc(cf->pool, sizeof(ngx_ratelimit_zone_t));
    if (zone == NULL) {
        return NGX_CONF_ERROR;
    }

    /* zone->rules: made to its size once every rule is read
       (ngx_ratelimit_zones_init) */

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
    zone->cycle = cf->cycle;
    zone->conf = conf;
    zone->overrides = overrides;
    zone->overrides_file = overrides_file;

    if (ngx_ratelimit_zone_state(cf, &name, redis, zone) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    shm_zone->init = ngx_ratelimit_init_zone;
    shm_zone->data = zone;

    return NGX_CONF_OK;
}


/* The parameters of ratelimit_zone after NAME and SIZE. */

static ngx_int_t
ngx_ratelimit_zone_params(ngx_conf_t *cf, ngx_ratelimit_conf_t *conf,
    ngx_str_t *name, ssize_t size, ngx_ratelimit_redis_t **redis,
    ngx_ratelimit_sync_t **sync, ngx_uint_t *overrides,
    ngx_str_t *overrides_file)
{
    ngx_int_t    rc;
    ngx_uint_t   i;
    ngx_str_t   *value;

    value = cf->args->elts;

    for (i = 3; i < cf->args->nelts; i++) {
        rc = ngx_ratelimit_overrides_param(cf, &value[i], name,
                                           overrides, overrides_file);

        if (rc == NGX_DECLINED
            && ngx_strncmp(value[i].data, "state", 5) == 0)
        {
            continue;   /* ngx_ratelimit_zone_state()'s */
        }

        if (rc == NGX_DECLINED) {
            rc = ngx_ratelimit_sync_param(cf, sync, &value[i], name);
        }

        if (rc == NGX_DECLINED) {
            rc = ngx_ratelimit_redis_param(cf, redis, &value[i], name);
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
        && ngx_ratelimit_redis_finish(cf, conf, *redis, name) != NGX_CONF_OK)
    {
        return NGX_ERROR;
    }

    if (*sync != NULL
        && ngx_ratelimit_sync_finish(cf, *sync, *redis, name, size)
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
ngx_ratelimit_zone_state(ngx_conf_t *cf, ngx_str_t *name,
    ngx_ratelimit_redis_t *redis, ngx_ratelimit_zone_t *zone)
{
    ngx_int_t    rc;
    ngx_uint_t   i;
    ngx_str_t   *value;

    value = cf->args->elts;
    zone->state_interval = NGX_RATELIMIT_STATE_INTERVAL;

    for (i = 3; i < cf->args->nelts; i++) {
        rc = ngx_ratelimit_state_param(cf, &value[i], name,
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

    /* a file is one zone's, for one use: ngx_ratelimit_zone_files */

    return NGX_OK;
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
ngx_ratelimit_check_layout(ngx_conf_t *cf, ngx_shm_zone_t *shm_zone)
{
    u_char                *p;
    size_t                 size;
    uint32_t               crc;
    ngx_uint_t             i;
    ngx_ratelimit_zone_t  *zone;
    char                   err[RL_ERR_MAX];

    zone = shm_zone->data;

    /* once a zone, whatever the number of its rules */

    if (zone->planned) {
        return NGX_OK;
    }

    zone->planned = 1;
    size = ngx_ratelimit_table_size(zone, shm_zone->shm.size);

    if (rl_table_plan_names(size, zone->blobs.elts, zone->blobs.nelts,
                            zone->nnames,
                            rl_table_stack(zone->stack_slots,
                                           zone->stack_blocks),
                            err, sizeof(err))
        != RL_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"ratelimit_zone\" directive: zone \"%V\" of size %uz "
                      "is %s, declared in %s:%ui", &zone->name,
                      shm_zone->shm.size
                      - ngx_ratelimit_overrides_bytes(zone),
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
ngx_ratelimit_check_redis_rule(ngx_conf_t *cf,
    ngx_ratelimit_zone_ref_t *ref)
{
    ngx_uint_t             j;
    ngx_ratelimit_rule_t  *rule, *near;
    ngx_ratelimit_zone_t  *zone, *other;
    char                   err[RL_ERR_MAX];

    rule = ngx_ratelimit_ref_rule(ref, ref->index);
    zone = ref->shm_zone->data;

    for (j = 0; j < ref->rules->nelts; j++) {
        other = ngx_ratelimit_ref_rule(ref, j)->shm_zone->data;

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
        near = ngx_ratelimit_ref_rule(ref, j);

        if (near->key.len != rule->key.len
            || ngx_strncmp(near->key.data, rule->key.data, rule->key.len)
               != 0)
        {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"ratelimit\" directive: key=%V and key=%V in one "
                          "location of the Redis Cluster zone=%V: its rules "
                          "must have the same key, so that one request's "
                          "state is in one slot, in %s:%ui",
                          &rule->key, &near->key, &zone->name,
                          ref->file, ref->line);
            return NGX_ERROR;
        }
    }

    if (ngx_ratelimit_sync_check_rule(cf, zone->sync, &rule->rule,
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


/* Zone, rule name, then the order read: the order zone_names groups
   names in, a name's first rule first. */

static int ngx_libc_cdecl
ngx_ratelimit_cmp_refs(const void *one, const void *two)
{
    ngx_int_t                  c;
    ngx_ratelimit_rule_t      *a, *b;
    ngx_ratelimit_zone_ref_t  *x, *y;

    x = *(ngx_ratelimit_zone_ref_t **) one;
    y = *(ngx_ratelimit_zone_ref_t **) two;

    if (x->shm_zone != y->shm_zone) {
        return (uintptr_t) x->shm_zone < (uintptr_t) y->shm_zone ? -1 : 1;
    }

    a = ngx_ratelimit_ref_rule(x, x->index);
    b = ngx_ratelimit_ref_rule(y, y->index);

    if (a == b) {
        return 0;
    }

    c = ngx_strcmp(a->rule.name, b->rule.name);

    return c ? c : (x < y ? -1 : 1);
}


/*
 * Each zone's rule names, its first rule of each, sorted by name: what its
 * table makes room to count (rl_table_plan_names), and how a name is found
 * (ngx_ratelimit_zone_rule), without comparing each name with every
 * other.
 */

static ngx_int_t
ngx_ratelimit_zone_names(ngx_conf_t *cf, ngx_ratelimit_conf_t *conf)
{
    ngx_uint_t                  i, n, first;
    ngx_ratelimit_rule_t       *rule;
    ngx_ratelimit_zone_t       *zone;
    ngx_ratelimit_zone_ref_t  **sorted;

    n = conf->zone_refs.nelts;
    if (n == 0) {
        return NGX_OK;
    }

    sorted = ngx_palloc(cf->temp_pool, n * sizeof(*sorted));
    if (sorted == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        sorted[i] = (ngx_ratelimit_zone_ref_t *) conf->zone_refs.elts + i;
    }

    ngx_qsort(sorted, n, sizeof(*sorted), ngx_ratelimit_cmp_refs);

    /* counted first, then each zone's list made at its size */

    for (i = 0; i < n; i++) {
        first = i == 0 || sorted[i]->shm_zone != sorted[i - 1]->shm_zone;
        rule = ngx_ratelimit_ref_rule(sorted[i], sorted[i]->index);

        if (first
            || ngx_strcmp(rule->rule.name,
                          ngx_ratelimit_ref_rule(sorted[i - 1],
                                                 sorted[i - 1]->index)
                          ->rule.name) != 0)
        {
            zone = sorted[i]->shm_zone->data;
            zone->nnames++;
        }
    }

    for (i = 0; i < n; i++) {
        zone = sorted[i]->shm_zone->data;
        rule = ngx_ratelimit_ref_rule(sorted[i], sorted[i]->index);

        if (zone->names == NULL) {
            zone->names = ngx_palloc(cf->pool,
                                   zone->nnames * sizeof(*zone->names));
            if (zone->names == NULL) {
                return NGX_ERROR;
            }

            zone->nnames = 0;
        }

        if (zone->nnames == 0
            || ngx_strcmp(zone->names[zone->nnames - 1]->rule.name,
                          rule->rule.name) != 0)
        {
            zone->names[zone->nnames++] = rule;
        }

        rule->name_index = zone->nnames - 1;
    }

    return NGX_OK;
}


/*
 * The stack of the location of ref, a rule of zone with a block, counted
 * once a location (at its first such rule): the zone's rules there, and
 * those of them with a block.  A key the location limits takes a slot for
 * each rule and the blocks: the zone's table shares its room between
 * buckets and blocks by the sums (rl_table_stack).
 */

static void
ngx_ratelimit_zone_stack(ngx_ratelimit_zone_t *zone,
    ngx_ratelimit_zone_ref_t *ref)
{
    ngx_uint_t             j, slots, blocks;
    ngx_ratelimit_rule_t  *rule;

    slots = 0;
    blocks = 0;

    for (j = 0; j < ref->rules->nelts; j++) {
        rule = ngx_ratelimit_ref_rule(ref, j);

        if (rule->shm_zone != ref->shm_zone) {
            continue;
        }

        if (rl_rule_block_size(&rule->rule)) {
            if (j < ref->index) {
                return;   /* counted at that rule */
            }

            blocks++;
        }

        slots++;
    }

    zone->stack_slots += slots;
    zone->stack_blocks += blocks;
}


/*
 * A rule names a zone of its own block (conf): zones have one namespace,
 * but a zone is planned for its rules once its block is read, and serves
 * that block's rules only.
 */

static ngx_int_t
ngx_ratelimit_zone_block(ngx_conf_t *cf, ngx_ratelimit_conf_t *conf,
    ngx_ratelimit_zone_t *zone, ngx_ratelimit_zone_ref_t *ref)
{
    if (zone->conf == conf) {
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                  "\"ratelimit\" directive: zone \"%V\" is declared in the "
                  "%V block (%s:%ui): a rule of the %V block names a zone "
                  "of the %V block, used in %s:%ui", &zone->name,
                  &zone->conf->block, zone->file, zone->line, &conf->block,
                  &conf->block, ref->file, ref->line);

    return NGX_ERROR;
}


/*
 * Every zone a rule names is declared; each learns its rules and the block
 * sizes their states need, and is checked: its size fits them, Redis zones'
 * rules stay exact in Redis, and it has room to count every rule name.
 */

ngx_int_t
ngx_ratelimit_zones_init(ngx_conf_t *cf, ngx_ratelimit_conf_t *conf)
{
    uint32_t                  *blob;
    ngx_uint_t                 i;
    ngx_ratelimit_rule_t     **rule;
    ngx_ratelimit_zone_t      *zone;
    ngx_ratelimit_zone_ref_t  *refs;

    refs = conf->zone_refs.elts;

    /* each zone's list of its rules at its size (a zone may have
       thousands): counted first, in the list's nalloc */

    for (i = 0; i < conf->zone_refs.nelts; i++) {
        zone = refs[i].shm_zone->data;

        if (zone != NULL && zone->rules.elts == NULL) {
            zone->rules.nalloc++;
        }
    }

    for (i = 0; i < conf->zone_refs.nelts; i++) {
        zone = refs[i].shm_zone->data;

        if (zone != NULL && zone->rules.elts == NULL
            && ngx_array_init(&zone->rules, cf->pool, zone->rules.nalloc,
                              sizeof(ngx_ratelimit_rule_t *))
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (refs[i].shm_zone->data == NULL) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"ratelimit\" directive: zone=%V is not declared: "
                          "expected a \"ratelimit_zone %V SIZE;\" in the %V "
                          "block, used in %s:%ui",
                          &refs[i].shm_zone->shm.name,
                          &refs[i].shm_zone->shm.name, &conf->block,
                          refs[i].file, refs[i].line);
            return NGX_ERROR;
        }

        zone = refs[i].shm_zone->data;

        if (ngx_ratelimit_zone_block(cf, conf, zone, &refs[i]) != NGX_OK) {
            return NGX_ERROR;
        }
        rule = ngx_array_push(&zone->rules);
        if (rule == NULL) {
            return NGX_ERROR;
        }

        *rule = ngx_ratelimit_ref_rule(&refs[i], refs[i].index);

        if (rl_rule_block_size(&(*rule)->rule)) {
            blob = ngx_array_push(&zone->blobs);
            if (blob == NULL) {
                return NGX_ERROR;
            }

            *blob = rl_rule_block_size(&(*rule)->rule);
            ngx_ratelimit_zone_stack(zone, &refs[i]);
        }
    }

    if (ngx_ratelimit_zone_names(cf, conf) != NGX_OK) {
        return NGX_ERROR;
    }

    for (i = 0; i < conf->zone_refs.nelts; i++) {
        if (ngx_ratelimit_check_layout(cf, refs[i].shm_zone) != NGX_OK
            || ngx_ratelimit_check_redis_rule(cf, &refs[i]) != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}
