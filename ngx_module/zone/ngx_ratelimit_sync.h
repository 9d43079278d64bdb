
/*
 * ngx-ratelimit: redis_sync, a zone deciding locally and exchanging what
 * its keys spent with Redis every interval (ngx_ratelimit_sync.c; the
 * journal, the calls and the merge are the core's: ratelimit_sync.h).
 */

#ifndef NGX_RATELIMIT_SYNC_H
#define NGX_RATELIMIT_SYNC_H

#include "ngx_ratelimit_redis.h"


/* a wait's call: an exchange's script call (enum rl_redis_call's after) */
#define NGX_RATELIMIT_REDIS_SYNC  64


typedef struct ngx_ratelimit_sync_call_s  ngx_ratelimit_sync_call_t;

/*
 * Exchanges of a worker awaiting replies at once: the journal is taken
 * each interval while earlier exchanges still wait (a Redis slow to
 * answer does not hold the journal, which would fill), up to these; an
 * exchange's call waits for its reply as long as they cover (their
 * intervals, at least a second and redis_timeout) before it is taken as
 * lost and sent again.
 */
#define NGX_RATELIMIT_SYNC_FLIGHTS  4

/* an exchange in flight: what it took, its calls, their answers */
typedef struct {
    ngx_ratelimit_sync_t             *sync;
    rl_sync_item_t                   *items;    /* taken, being sent */
    ngx_ratelimit_sync_call_t        *calls;
    size_t                            ncalls;
    rl_sync_total_t                  *totals;   /* the calls' answers */
    size_t                            ntotals;
    ngx_uint_t                        waiting;  /* calls not answered: 0,
                                                   the flight is free */
    ngx_uint_t                        failed;
    size_t                            sent_keys;
    uint64_t                          sent_units;
    uint64_t                          late_units;  /* of calls Redis found
                                                      too late */
    int64_t                           taken_at;
} ngx_ratelimit_sync_flight_t;

struct ngx_ratelimit_sync_s {
    ngx_msec_t                        interval;
    uint32_t                          keys;     /* the journal's room */
    void                             *journal;  /* in the zone */
    void                             *table;
    ngx_slab_pool_t                  *shpool;
    ngx_ratelimit_redis_t            *redis;    /* where, and how */
    u_char                            sha[40];  /* the exchange script's */

    /* this worker's */
    ngx_event_t                       timer;
    ngx_ratelimit_sync_flight_t       flights[NGX_RATELIMIT_SYNC_FLIGHTS];
};


/* ratelimit_zone's redis_sync=TIME: NGX_DECLINED if param is not it. */
ngx_int_t ngx_ratelimit_sync_param(ngx_conf_t *cf,
    ngx_ratelimit_sync_t **sync, ngx_str_t *param, ngx_str_t *zone);

/* With the zone's Redis parameters read: NGX_OK, or an error logged. */
ngx_int_t ngx_ratelimit_sync_finish(ngx_conf_t *cf,
    ngx_ratelimit_sync_t *sync, ngx_ratelimit_redis_t *redis,
    ngx_str_t *zone, size_t size);

/* Bytes of the zone the journal takes (0: none). */
size_t ngx_ratelimit_sync_bytes(ngx_ratelimit_sync_t *sync);

/* Places the journal at p in the zone, kept if it is there already. */
void ngx_ratelimit_sync_init_zone(ngx_ratelimit_sync_t *sync,
    ngx_slab_pool_t *shpool, void *stats, u_char *p, void *table);

/* A rule of a redis_sync zone: NGX_OK, or an error naming why not. */
ngx_int_t ngx_ratelimit_sync_check_rule(ngx_conf_t *cf,
    ngx_ratelimit_sync_t *sync, rl_rule_t *rule, ngx_str_t *name,
    ngx_str_t *zone, u_char *file, ngx_uint_t line);

/* What a request decided locally spent, noted (the locks held). */
void ngx_ratelimit_sync_note(rl_request_t *rq, int64_t now);
extern ngx_uint_t  ngx_ratelimit_sync_zones;

/* A worker starts its exchange timer; stops it, and its connections. */
void ngx_ratelimit_sync_start(ngx_ratelimit_sync_t *sync);
void ngx_ratelimit_sync_stop(ngx_ratelimit_sync_t *sync);

/* The zone's exchange figures, copied into pool. */
const rl_sync_figures_t *ngx_ratelimit_sync_figures(ngx_pool_t *pool,
    ngx_ratelimit_sync_t *sync);

/* An exchange's call: its command written, its reply read (the waits'
   command and answer). */
ngx_int_t ngx_ratelimit_sync_command(void *conn,
    ngx_ratelimit_redis_wait_t *w, ngx_uint_t eval);
ngx_int_t ngx_ratelimit_sync_answer(ngx_ratelimit_redis_wait_t *w,
    rl_resp_t *reply, rl_redis_answer_t *a);

#endif /* NGX_RATELIMIT_SYNC_H */
