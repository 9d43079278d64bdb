
/*
 * ngx-ratelimit: redis_sync.  A zone with redis_sync=TIME decides every
 * request in its own shared memory, as a local zone does, and notes what
 * each key spent in the zone's journal (the core's, beside the table).
 * Every worker has a timer of the interval; the first to find the exchange
 * due takes the journal (under the zone's lock, so one worker a server an
 * interval; before the interval, a worker whose request found the journal
 * half full), sends it in script calls of up to RL_SYNC_BATCH keys (fewer
 * sliding_window keys: rl_sync_batch) on its Redis
 * connections (pipelined, nothing waits for them), and folds each reply's
 * fleet totals into the table.  A call Redis does not answer may still run
 * there later: its items go back to the journal with the call's id, and
 * the next exchange sends it again as it was, which Redis adds once.  No
 * request waits for Redis, whatever Redis does.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_sha1.h>

#include "ngx_ratelimit_sync.h"
#include "ngx_ratelimit_redis.h"
#include "ngx_ratelimit_redis_conn.h"


/* The redis_sync zones this worker exchanges for: none, and a request
   notes nothing. */
ngx_uint_t  ngx_ratelimit_sync_zones;


struct ngx_ratelimit_sync_call_s {
    ngx_ratelimit_redis_wait_t        w;        /* first: the wait is the
                                                   call */
    ngx_ratelimit_sync_flight_t      *flight;
    rl_sync_item_t                   *items;
    size_t                            n;
    int64_t                           now;
    rl_sync_total_t                  *totals;
    int                               status;   /* what the call did in
                                                   Redis: RL_SYNC_ADDED... */
};


static void ngx_ratelimit_sync_exchange(ngx_event_t *ev);
static ngx_ratelimit_sync_flight_t *ngx_ratelimit_sync_flight(
    ngx_ratelimit_sync_t *sync, ngx_log_t *log);
static ngx_int_t ngx_ratelimit_sync_room(
    ngx_ratelimit_sync_flight_t *f, size_t n, ngx_log_t *log);
static void ngx_ratelimit_sync_done(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer);
static void ngx_ratelimit_sync_ended(ngx_ratelimit_sync_flight_t *f);


ngx_int_t
ngx_ratelimit_sync_param(ngx_conf_t *cf, ngx_ratelimit_sync_t **sync,
    ngx_str_t *param, ngx_str_t *zone)
{
    ngx_str_t              value;
    ngx_msec_t             ms;
    ngx_ratelimit_sync_t  *s;

    if (param->len < sizeof("redis_sync=") - 1
        || ngx_strncmp(param->data, "redis_sync=", sizeof("redis_sync=") - 1)
           != 0)
    {
        return NGX_DECLINED;
    }

    value.data = param->data + sizeof("redis_sync=") - 1;
    value.len = param->len - (sizeof("redis_sync=") - 1);

    if (*sync != NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: \"redis_sync\" of "
                           "zone \"%V\" is given twice", zone);
        return NGX_ERROR;
    }

    ms = ngx_parse_time(&value, 0);

    if (ms == (ngx_msec_t) NGX_ERROR || ms < 10 || ms > 60000) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: invalid "
                           "\"redis_sync=%V\" of zone \"%V\": expected "
                           "redis_sync=10ms..60s", &value, zone);
        return NGX_ERROR;
    }

    s = ngx_pcalloc(cf->pool, sizeof(ngx_ratelimit_sync_t));
    if (s == NULL) {
        return NGX_ERROR;
    }

    s->interval = ms;
    *sync = s;

    return NGX_OK;
}


/*
 * The journal has room for a key each 256 bytes of the zone (64 to 65,536
 * keys, 104 to 112 bytes each with the index, up to 44% of the zone; the
 * table takes 20 bytes a key): room for the keys that come while four
 * exchanges await Redis, which merge there, so that an exchange grows
 * with what Redis is slow to take rather than dropping it.  Beyond it a
 * key spends locally and its units are counted as dropped.
 */

ngx_int_t
ngx_ratelimit_sync_finish(ngx_conf_t *cf, ngx_ratelimit_sync_t *sync,
    ngx_ratelimit_redis_t *redis, ngx_str_t *zone, size_t size)
{
    size_t       len;
    u_char       digest[20];
    const char  *script;
    ngx_sha1_t   sha1;

    if (redis == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: \"redis_sync\" of "
                           "zone \"%V\" needs redis=HOST:PORT", zone);
        return NGX_ERROR;
    }

    if (redis->cluster) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: \"redis_sync\" of "
                           "zone \"%V\" with redis_cluster=on: an exchange "
                           "sends many keys in one script call, which Redis "
                           "Cluster refuses across slots; use one Redis", zone);
        return NGX_ERROR;
    }

    sync->redis = redis;
    sync->keys = (uint32_t) ngx_max(RL_SYNC_KEYS_MIN,
                                    ngx_min(RL_SYNC_KEYS_MAX, size / 256));

    script = rl_sync_script(&len);
    ngx_sha1_init(&sha1);
    ngx_sha1_update(&sha1, script, len);
    ngx_sha1_final(digest, &sha1);
    ngx_hex_dump(sync->sha, digest, sizeof(digest));

    return NGX_OK;
}


size_t
ngx_ratelimit_sync_bytes(ngx_ratelimit_sync_t *sync)
{
    return sync ? ngx_align(rl_sync_size(sync->keys), 64) : 0;
}


void
ngx_ratelimit_sync_init_zone(ngx_ratelimit_sync_t *sync,
    ngx_slab_pool_t *shpool, void *stats, u_char *p, void *table)
{
    if (sync == NULL) {
        return;
    }

    sync->journal = p;
    sync->table = table;
    sync->shpool = shpool;
    sync->redis->stats = stats;

    (void) rl_sync_init(p, ngx_ratelimit_sync_bytes(sync), sync->keys);
}


ngx_int_t
ngx_ratelimit_sync_check_rule(ngx_conf_t *cf,
    ngx_ratelimit_sync_t *sync, rl_rule_t *rule, ngx_str_t *name,
    ngx_str_t *zone, u_char *file, ngx_uint_t line)
{
    char  err[RL_ERR_MAX];

    if (sync == NULL || rl_sync_rule_ok(rule, err, sizeof(err)) == RL_OK) {
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                  "\"ratelimit\" directive: rule \"%V\" in zone=%V: %s, in "
                  "%s:%ui", name, zone, err, file, line);

    return NGX_ERROR;
}


/* Each redis_sync zone of the request notes its checks (the locks held). */

void
ngx_ratelimit_sync_note(rl_request_t *rq, int64_t now)
{
    size_t                 i, j;
    ngx_ratelimit_zone_t  *zone;

    for (i = 0; i < rq->n; i++) {
        zone = ngx_ratelimit_zone_of(
                   ngx_ratelimit_rule_of(&rq->checks[i]));

        if (zone->sync == NULL) {
            continue;
        }

        for (j = 0; j < i; j++) {
            if (rq->checks[j].table == rq->checks[i].table) {
                break;
            }
        }

        if (j == i   /* the zone's first check */
            && rl_sync_note(zone->sync->journal, zone->table, rq, now)
            && !zone->sync->timer.posted)
        {
            /* half full: taken once this event cycle is over */
            ngx_post_event(&zone->sync->timer, &ngx_posted_events);
        }
    }
}


void
ngx_ratelimit_sync_start(ngx_ratelimit_sync_t *sync)
{
    ngx_ratelimit_sync_zones++;

    sync->timer.handler = ngx_ratelimit_sync_exchange;
    sync->timer.data = sync;
    sync->timer.log = ngx_cycle->log;
    sync->timer.cancelable = 1;

    ngx_add_timer(&sync->timer, sync->interval);
}


void
ngx_ratelimit_sync_stop(ngx_ratelimit_sync_t *sync)
{
    if (sync->timer.timer_set) {
        ngx_del_timer(&sync->timer);
    }

    if (sync->timer.posted) {
        ngx_delete_posted_event(&sync->timer);
    }

    ngx_ratelimit_redis_close(sync->redis);
}


const rl_sync_figures_t *
ngx_ratelimit_sync_figures(ngx_pool_t *pool,
    ngx_ratelimit_sync_t *sync)
{
    rl_sync_figures_t  *f;

    f = ngx_palloc(pool, sizeof(rl_sync_figures_t));
    if (f == NULL) {
        return NULL;
    }

    rl_sync_get_figures(sync->journal, f);

    return f;
}


/*
 * The timer (or a request that found the journal half full): the
 * exchange, when this worker finds it due and has a flight free (earlier
 * exchanges may still wait for replies).  Calls Redis cannot take now
 * (down, backing off) give their units back at once.
 */

static void
ngx_ratelimit_sync_exchange(ngx_event_t *ev)
{
    int                           due;
    size_t                        n, i, k, m;
    ngx_msec_t                    timeout;
    ngx_ratelimit_sync_t         *sync = ev->data;
    ngx_ratelimit_sync_call_t    *call;
    ngx_ratelimit_sync_flight_t  *f;

    if (ngx_exiting || ngx_terminate || ngx_quit) {
        return;
    }

    ngx_add_timer(&sync->timer, sync->interval);

    f = ngx_ratelimit_sync_flight(sync, ev->log);
    if (f == NULL) {
        return;   /* the units wait in the journal */
    }

    f->taken_at = ngx_ratelimit_now();

    ngx_shmtx_lock(&sync->shpool->mutex);
    n = rl_sync_take(sync->journal, f->taken_at, sync->interval,
                     f->items, &due);
    ngx_shmtx_unlock(&sync->shpool->mutex);

    if (n == 0) {
        if (due) {
            rl_sync_record(sync->journal, 0, 0, 0, 0, 0, f->taken_at);
        }

        return;
    }

    if (ngx_ratelimit_sync_room(f, n, ev->log) != NGX_OK) {
        ngx_shmtx_lock(&sync->shpool->mutex);
        rl_sync_requeue(sync->journal, f->items, n);
        ngx_shmtx_unlock(&sync->shpool->mutex);
        return;
    }

    /* nothing waits for an exchange: its calls get the time the flights
       cover, not a request's redis_timeout */

    timeout = ngx_max(sync->redis->timeout,
                      ngx_max(1000, NGX_RATELIMIT_SYNC_FLIGHTS
                                    * sync->interval));

    f->failed = 0;
    f->sent_keys = 0;
    f->sent_units = 0;
    f->late_units = 0;
    f->waiting = 0;

    for (k = 0, i = 0, m = 0; i < n; k++) {
        call = &f->calls[k];
        ngx_memzero(&call->w, sizeof(ngx_ratelimit_redis_wait_t));

        call->flight = f;
        call->items = &f->items[i];
        call->n = rl_sync_batch(call->items, n - i);
        call->totals = &f->totals[m];
        i += call->n;
        m += rl_sync_totals(call->items, call->n);
        call->now = f->taken_at;
        call->w.handler = ngx_ratelimit_sync_done;
        call->w.call = NGX_RATELIMIT_REDIS_SYNC;
        call->w.command = ngx_ratelimit_sync_command;
        call->w.answer = ngx_ratelimit_sync_answer;
        call->w.timeout = timeout;

        f->waiting++;

        if (ngx_ratelimit_redis_send(sync->redis, &call->w) == NGX_OK) {
            continue;
        }

        /* not sent: kept for the next exchange, as the same call (a copy
           sent before may have reached Redis) */

        f->waiting--;
        f->failed++;

        ngx_shmtx_lock(&sync->shpool->mutex);
        rl_sync_requeue(sync->journal, call->items, call->n);
        ngx_shmtx_unlock(&sync->shpool->mutex);
    }

    if (f->waiting == 0) {
        ngx_ratelimit_sync_ended(f);
    }
}


/* A flight with no call awaiting its reply, its items' room made on
   first use; NULL if every one waits. */

static ngx_ratelimit_sync_flight_t *
ngx_ratelimit_sync_flight(ngx_ratelimit_sync_t *sync, ngx_log_t *log)
{
    ngx_uint_t                    i;
    ngx_ratelimit_sync_flight_t  *f;

    for (i = 0; i < NGX_RATELIMIT_SYNC_FLIGHTS; i++) {
        f = &sync->flights[i];

        if (f->waiting > 0) {
            continue;
        }

        if (f->items == NULL) {
            f->items = ngx_alloc(sync->keys * sizeof(rl_sync_item_t), log);

            if (f->items == NULL) {
                return NULL;
            }

            f->sync = sync;
        }

        return f;
    }

    return NULL;
}


/*
 * Room for an exchange of n items: its calls (a sliding_window key's
 * answer is its ticks', so fewer keys go in a call) and their answers.
 */

static ngx_int_t
ngx_ratelimit_sync_room(ngx_ratelimit_sync_flight_t *f, size_t n,
    ngx_log_t *log)
{
    size_t  i, calls, totals;

    for (i = 0, calls = 0; i < n; calls++) {
        i += rl_sync_batch(&f->items[i], n - i);
    }

    totals = rl_sync_totals(f->items, n);

    if (calls > f->ncalls) {
        ngx_free(f->calls);
        f->ncalls = 0;
        f->calls = ngx_alloc(calls * sizeof(ngx_ratelimit_sync_call_t),
                             log);
        if (f->calls == NULL) {
            return NGX_ERROR;
        }

        f->ncalls = calls;
    }

    if (totals > f->ntotals) {
        ngx_free(f->totals);
        f->ntotals = 0;
        f->totals = ngx_alloc(totals * sizeof(rl_sync_total_t), log);
        if (f->totals == NULL) {
            return NGX_ERROR;
        }

        f->ntotals = totals;
    }

    return NGX_OK;
}


ngx_int_t
ngx_ratelimit_sync_command(void *c, ngx_ratelimit_redis_wait_t *w,
    ngx_uint_t eval)
{
    size_t                       slen;
    const char                  *script;
    ngx_ratelimit_redis_t       *redis;
    ngx_ratelimit_sync_call_t   *call;
    ngx_ratelimit_redis_conn_t  *conn = c;

    call = (ngx_ratelimit_sync_call_t *) w;
    redis = conn->redis;

    if (eval) {
        script = rl_sync_script(&slen);

    } else {
        script = (const char *) call->flight->sync->sha;
        slen = sizeof(call->flight->sync->sha);
    }

    if (ngx_ratelimit_redis_reserve(conn,
            rl_sync_command_size(call->n, redis->prefix.len, slen))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    conn->out_len += rl_sync_command((char *) conn->out + conn->out_len,
                                     script, slen, eval,
                                     (const char *) redis->prefix.data,
                                     redis->prefix.len,
                                     rl_sync_nonce(call->flight->sync->journal),
                                     call->items, call->n, call->now);

    ngx_ratelimit_redis_push(conn, w);

    return NGX_OK;
}


ngx_int_t
ngx_ratelimit_sync_answer(ngx_ratelimit_redis_wait_t *w,
    rl_resp_t *reply, rl_redis_answer_t *a)
{
    ngx_ratelimit_sync_call_t  *call;

    call = (ngx_ratelimit_sync_call_t *) w;

    ngx_memzero(a, sizeof(rl_redis_answer_t));

    a->kind = rl_sync_answer(reply, call->items, call->n, call->now,
                             call->totals, &call->status, a->why,
                             sizeof(a->why));

    return a->kind;
}


/*
 * A call's reply: the fleet's totals folded in, or its items kept, with
 * their call, to be sent again.  Its units count as sent once a copy of
 * the call added them (this one, or one whose reply was lost), as dropped
 * if Redis found it too late.
 */

static void
ngx_ratelimit_sync_done(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer)
{
    size_t                        i;
    uint64_t                      units;
    ngx_ratelimit_sync_t         *sync;
    ngx_ratelimit_sync_call_t    *call;
    ngx_ratelimit_sync_flight_t  *f;

    call = (ngx_ratelimit_sync_call_t *) w;
    f = call->flight;
    sync = f->sync;

    ngx_shmtx_lock(&sync->shpool->mutex);

    if (answer != NULL) {
        rl_sync_apply(sync->journal, sync->table, call->items, call->totals,
                      call->n, ngx_ratelimit_now());

    } else {
        rl_sync_requeue(sync->journal, call->items, call->n);
    }

    ngx_shmtx_unlock(&sync->shpool->mutex);

    if (answer != NULL) {
        for (units = 0, i = 0; i < call->n; i++) {
            units += call->items[i].units;
        }

        if (call->status == RL_SYNC_LATE) {
            f->late_units += units;

        } else {
            f->sent_keys += call->n;
            f->sent_units += units;
        }

    } else {
        f->failed++;
    }

    if (--f->waiting == 0) {
        ngx_ratelimit_sync_ended(f);
    }
}


static void
ngx_ratelimit_sync_ended(ngx_ratelimit_sync_flight_t *f)
{
    int64_t                now;
    ngx_ratelimit_sync_t  *sync = f->sync;

    now = ngx_ratelimit_now();

    rl_sync_record(sync->journal, f->sent_keys, f->sent_units, f->failed,
                   f->late_units, f->failed ? -1 : now - f->taken_at, now);

    /* filled half again while this exchange waited: the next one now */

    if (rl_sync_urgent(sync->journal) && !sync->timer.posted) {
        ngx_post_event(&sync->timer, &ngx_posted_events);
    }
}
