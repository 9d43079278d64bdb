
/*
 * ngx-ratelimit: the zones at run time: laid out, found, walked, their
 * rules' counters and locks (ngx_ratelimit_zone.c).
 */

#ifndef NGX_RATELIMIT_ZONE_H
#define NGX_RATELIMIT_ZONE_H


#include "ngx_ratelimit_types.h"


extern ngx_uint_t  ngx_ratelimit_zone_tag;

ngx_shm_zone_t *ngx_ratelimit_lookup_zone(ngx_list_t *shared_memory,
    ngx_str_t *name);
ngx_int_t ngx_ratelimit_init_zone(ngx_shm_zone_t *shm_zone, void *data);
size_t ngx_ratelimit_table_size(ngx_ratelimit_zone_t *zone,
    size_t zone_size);
void ngx_ratelimit_claim_stats(ngx_ratelimit_zone_t *zone,
    ngx_uint_t lock);
int ngx_ratelimit_counters(ngx_log_t *log,
    ngx_ratelimit_rule_t *rule);
ngx_ratelimit_rule_t *ngx_ratelimit_zone_rule(
    ngx_ratelimit_zone_t *zone, ngx_str_t *name);
void ngx_ratelimit_top(ngx_ratelimit_zone_t *zone, int slot,
    rl_top_t *top);
typedef ngx_int_t (*ngx_ratelimit_each_zone_pt)(
    ngx_ratelimit_zone_t *zone, void *data);
ngx_int_t ngx_ratelimit_each_zone(ngx_cycle_t *cycle,
    ngx_ratelimit_each_zone_pt each, void *data);
ngx_ratelimit_zone_t *ngx_ratelimit_find_zone(ngx_cycle_t *cycle,
    ngx_str_t *name);
void ngx_ratelimit_lock_all(rl_request_t *rq, ngx_uint_t lock);
ngx_int_t ngx_ratelimit_zones_start(ngx_cycle_t *cycle);
void ngx_ratelimit_zones_stop(ngx_cycle_t *cycle);
void ngx_ratelimit_zones_save(ngx_cycle_t *cycle);


/*
 * What rl_check_t's counters holds for a rule (the slot of its name's
 * counters plus 1, 0 for none): known once the worker found it, without a
 * call; ngx_ratelimit_counters() finds it the first time.
 */

static ngx_inline int
ngx_ratelimit_rule_counters(ngx_log_t *log,
    ngx_ratelimit_rule_t *rule)
{
    ngx_ratelimit_zone_t  *zone;

    zone = rule->shm_zone->data;

    if (zone->slots != NULL
        && zone->slots[rule->name_index] != NGX_RATELIMIT_STATS_UNKNOWN)
    {
        return zone->slots[rule->name_index] + 1;
    }

    return ngx_ratelimit_counters(log, rule);
}


/*
 * Locks the zones a request uses: most requests use one, locked here
 * without a call, its mutex returned for ngx_ratelimit_unlock();
 * several, by ngx_ratelimit_lock_all (NULL returned).
 */

static ngx_inline ngx_shmtx_t *
ngx_ratelimit_lock(rl_request_t *rq)
{
    ngx_shmtx_t  *mutex;

    if (rq->locks != 1) {
        ngx_ratelimit_lock_all(rq, 1);
        return NULL;
    }

    mutex = &ngx_ratelimit_zone_of(ngx_ratelimit_rule_of(
                &rq->checks[rq->order[0]]))->shpool->mutex;

    ngx_shmtx_lock(mutex);

    return mutex;
}


static ngx_inline void
ngx_ratelimit_unlock(rl_request_t *rq, ngx_shmtx_t *mutex)
{
    if (mutex != NULL) {
        ngx_shmtx_unlock(mutex);

    } else {
        ngx_ratelimit_lock_all(rq, 0);
    }
}


#endif /* NGX_RATELIMIT_ZONE_H */
