
/*
 * ngx-ratelimit: a Redis zone's overrides (and a redis_sync zone's), taken
 * from Redis and written there: every worker takes Redis's copy when it
 * starts, worker 0 asks for its version every NGX_RATELIMIT_OVERRIDES_POLL
 * and takes it again, page by page, when it changed; a key API write
 * waits until this server's copy holds the version it made.  The local
 * store, its file and expiries: ngx_ratelimit_overrides.c.
 */


#include "ngx_ratelimit_overrides.h"
#include "ngx_ratelimit_log.h"
#include "ngx_ratelimit_redis_conn.h"
#include "ngx_ratelimit_sync.h"


/* a write waiting for its version gives up after so many answered polls
   that hold an older one */
#define NGX_RATELIMIT_OVERRIDES_TRIES  3


static ngx_ratelimit_overrides_poll_t *
    ngx_ratelimit_overrides_poll_of(ngx_ratelimit_zone_t *zone);
static void ngx_ratelimit_overrides_taken(
    ngx_ratelimit_zone_t *zone, ngx_int_t rc);
static void ngx_ratelimit_overrides_polled(
    ngx_ratelimit_redis_wait_t *w, rl_redis_answer_t *answer);
static void ngx_ratelimit_overrides_apply(
    ngx_ratelimit_zone_t *zone);
static ngx_int_t ngx_ratelimit_overrides_page(
    ngx_ratelimit_zone_t *zone, rl_overrides_call_t *call);
static ngx_int_t ngx_ratelimit_overrides_command(void *c,
    ngx_ratelimit_redis_wait_t *w, ngx_uint_t eval);
static ngx_int_t ngx_ratelimit_overrides_answer(
    ngx_ratelimit_redis_wait_t *w, rl_resp_t *reply,
    rl_redis_answer_t *a);


/* This worker's taking of them, made when first needed. */

static ngx_ratelimit_overrides_poll_t *
ngx_ratelimit_overrides_poll_of(ngx_ratelimit_zone_t *zone)
{
    ngx_ratelimit_overrides_poll_t  *p;

    if (zone->poll == NULL) {
        p = ngx_pcalloc(ngx_cycle->pool,
                        sizeof(ngx_ratelimit_overrides_poll_t));
        if (p == NULL) {
            return NULL;
        }

        ngx_queue_init(&p->waiting);
        zone->poll = p;
    }

    return zone->poll;
}


/*
 * Redis's overrides taken into the zone's store when their version moved
 * (in this worker: one poll at a time, another after it when asked for
 * meanwhile), a page at a time; the store then replaced under the lock,
 * and the refusals the zone remembers forgotten (none outlives an override
 * that lifts it, an override's expiry too).
 */

void
ngx_ratelimit_overrides_poll(ngx_ratelimit_zone_t *zone, int64_t now)
{
    int64_t                          expiry;
    ngx_ratelimit_overrides_poll_t  *p;

    p = ngx_ratelimit_overrides_poll_of(zone);
    if (p == NULL) {
        return;
    }

    ngx_shmtx_lock(&zone->shpool->mutex);
    expiry = rl_overrides_next_expiry(zone->table, p->expiries);
    ngx_shmtx_unlock(&zone->shpool->mutex);
    p->expiries = now;

    if (zone->redis && expiry != 0 && expiry <= now) {
        rl_refusals_forget(zone->redis->refusals);
    }

    if (p->busy) {
        p->again = 1;
        return;
    }

    p->again = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);
    rl_overrides_stats(zone->store, &p->known);
    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_memzero(&p->oc.call, sizeof(rl_overrides_call_t));
    p->oc.call.op = RL_OVERRIDES_POLL;
    p->oc.call.version = p->known.remote;
    p->oc.call.id = p->known.remote_id;
    p->oc.call.cursor[0] = '0';
    p->first = 0;
    p->n = 0;
    p->bad = 0;
    p->full = 0;

    if (ngx_ratelimit_overrides_send(zone, &p->oc,
                                     ngx_ratelimit_overrides_polled)
        != NGX_OK)
    {
        ngx_ratelimit_overrides_taken(zone, NGX_ERROR);
        return;
    }

    p->busy = 1;
}


/*
 * A write of this worker's waits until the zone's copy holds the version
 * it made: Redis's overrides are taken again now (or once the poll under
 * way has its answer).
 */

void
ngx_ratelimit_overrides_await(ngx_ratelimit_zone_t *zone,
    ngx_ratelimit_overrides_wait_t *aw, uint64_t version)
{
    ngx_ratelimit_overrides_poll_t  *p;

    p = ngx_ratelimit_overrides_poll_of(zone);
    if (p == NULL) {
        aw->handler(aw, NGX_ERROR);
        return;
    }

    aw->version = version;
    aw->polls = 0;
    ngx_queue_insert_tail(&p->waiting, &aw->queue);

    ngx_ratelimit_overrides_poll(zone, ngx_ratelimit_now());
}


/* A write's wait given up (its request went away). */

void
ngx_ratelimit_overrides_unwait(ngx_ratelimit_overrides_wait_t *aw)
{
    if (aw->queue.next != NULL) {
        ngx_queue_remove(&aw->queue);
        ngx_queue_init(&aw->queue);
    }
}


/*
 * A poll ended: NGX_OK, the copy holds what Redis held (or what another
 * worker took meanwhile), NGX_ERROR, Redis did not answer.  Each write
 * waiting for a version the copy holds now is told so; one waiting for a
 * later version waits for the next poll, at once, a few times; none waits
 * past a poll Redis did not answer.
 */

static void
ngx_ratelimit_overrides_taken(ngx_ratelimit_zone_t *zone,
    ngx_int_t rc)
{
    ngx_queue_t                     *q, *next;
    rl_overrides_stats_t             st;
    ngx_ratelimit_overrides_poll_t  *p;
    ngx_ratelimit_overrides_wait_t  *aw;

    p = zone->poll;

    ngx_shmtx_lock(&zone->shpool->mutex);
    rl_overrides_stats(zone->store, &st);
    ngx_shmtx_unlock(&zone->shpool->mutex);

    for (q = ngx_queue_head(&p->waiting);
         q != ngx_queue_sentinel(&p->waiting);
         q = next)
    {
        next = ngx_queue_next(q);
        aw = ngx_queue_data(q, ngx_ratelimit_overrides_wait_t, queue);

        if (rc == NGX_OK && st.remote < aw->version
            && ++aw->polls < NGX_RATELIMIT_OVERRIDES_TRIES)
        {
            continue;
        }

        ngx_queue_remove(q);
        ngx_queue_init(q);

        aw->handler(aw, rc == NGX_OK && st.remote >= aw->version
                        ? NGX_OK : NGX_ERROR);
    }

    if (!p->busy && (p->again || !ngx_queue_empty(&p->waiting))) {
        ngx_ratelimit_overrides_poll(zone, ngx_ratelimit_now());
    }
}


static void
ngx_ratelimit_overrides_polled(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer)
{
    ngx_ratelimit_zone_t            *zone;
    ngx_ratelimit_overrides_call_t  *oc;
    ngx_ratelimit_overrides_poll_t  *p;

    oc = (ngx_ratelimit_overrides_call_t *) w;
    zone = oc->zone;
    p = zone->poll;
    p->busy = 0;

    if (answer == NULL) {
        /* not answered: asked again at the next tick */
        ngx_ratelimit_overrides_taken(zone, NGX_ERROR);
        return;
    }

    if (oc->call.unchanged) {
        ngx_ratelimit_overrides_taken(zone, NGX_OK);
        return;
    }

    if (p->first != 0
        && (oc->call.page_version != p->first
            || oc->call.page_id != p->first_id))
    {
        p->n = 0;   /* changed while it was read: from the start */
        p->first = 0;
        p->bad = 0;
        p->full = 0;
        ngx_memcpy(oc->call.cursor, "0", 2);
        oc->call.skip = 0;

    } else {
        p->first = oc->call.page_version;
        p->first_id = oc->call.page_id;

        if (ngx_ratelimit_overrides_page(zone, &oc->call) != NGX_OK) {
            ngx_ratelimit_overrides_taken(zone, NGX_ERROR);
            return;
        }

        if (!oc->call.more) {
            ngx_ratelimit_overrides_apply(zone);
            return;
        }

        ngx_memcpy(oc->call.cursor, oc->call.next_cursor,
                   sizeof(oc->call.cursor));
        oc->call.skip = oc->call.next_skip;
    }

    if (ngx_ratelimit_overrides_send(zone, oc,
                                     ngx_ratelimit_overrides_polled)
        != NGX_OK)
    {
        ngx_ratelimit_overrides_taken(zone, NGX_ERROR);
        return;
    }

    p->busy = 1;
}


/*
 * The overrides read put in place of the copy's, unless another worker
 * took a copy since this one was asked for (maybe a newer one: asked for
 * again); a hash that is not the one the copy came from said at warn (Redis
 * lost it), and the fields skipped said once (not again while the same).
 */

static void
ngx_ratelimit_overrides_apply(ngx_ratelimit_zone_t *zone)
{
    int                              news;
    size_t                           held;
    uint64_t                         said;
    ngx_uint_t                       say;
    rl_overrides_stats_t             st;
    ngx_ratelimit_overrides_poll_t  *p;

    p = zone->poll;

    said = p->bad + p->full == 0
           ? 0
           : (uint64_t) ngx_crc32_short((u_char *) p->why,
                                        ngx_strlen(p->why)) << 32
             ^ p->bad << 16 ^ p->full;

    ngx_shmtx_lock(&zone->shpool->mutex);

    rl_overrides_stats(zone->store, &st);

    if (st.remote != p->known.remote || st.remote_id != p->known.remote_id) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        p->again = 1;
        ngx_ratelimit_overrides_taken(zone, NGX_OK);
        return;
    }

    news = rl_overrides_news(&st, p->first, p->first_id);
    held = st.held;

    if (news != RL_OVERRIDES_SAME) {
        held = rl_overrides_replace(zone->table, p->list, p->n,
                                    zone->override_rules,
                                    zone->override_nrules, p->first,
                                    p->first_id);
    }

    say = rl_overrides_said(zone->store, said) && said != 0;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (zone->redis) {
        rl_refusals_forget(zone->redis->refusals);
    }

    if (news == RL_OVERRIDES_LOST) {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "ratelimit_zone \"%V\": Redis lost the overrides' hash "
                      "this server held (version %uL of the hash made at "
                      "%uL; Redis now holds version %uL of %uL: FLUSHALL, a "
                      "restart without persistence, a failover): the zone "
                      "applies the %uz overrides it holds now",
                      &zone->name, st.remote, st.remote_id, p->first,
                      p->first_id, held);
    }

    if (say) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "ratelimit_zone \"%V\": %ui fields of the overrides' "
                      "hash in Redis skipped (the first: %s), %ui overrides "
                      "for want of room (overrides=%ui); said again when "
                      "they change", &zone->name, p->bad,
                      p->bad ? p->why : "none", p->full, zone->overrides);
    }

    ngx_ratelimit_overrides_taken(zone, NGX_OK);
}


/*
 * A page's lines read into the worker's list (as many as the zone holds),
 * each taken as the key API's writes are; a field that is not is counted,
 * the first one's why kept.
 */

static ngx_int_t
ngx_ratelimit_overrides_page(ngx_ratelimit_zone_t *zone,
    rl_overrides_call_t *call)
{
    int                              rc;
    int64_t                          now;
    const char                      *l, *end, *nl;
    rl_override_t                    ov;
    ngx_ratelimit_overrides_poll_t  *p;
    char                             err[RL_ERR_MAX];

    p = zone->poll;

    if (p->list == NULL) {
        p->list = ngx_alloc(zone->overrides * sizeof(rl_override_t),
                            ngx_cycle->log);
        if (p->list == NULL) {
            return NGX_ERROR;
        }
    }

    now = ngx_ratelimit_now();
    end = call->lines + call->lines_len;

    for (l = call->lines; l < end; l = nl + 1) {
        nl = (const char *) ngx_strlchr((u_char *) l, (u_char *) end, '\n');
        if (nl == NULL) {
            nl = end;
        }

        rc = rl_overrides_redis_read(l, nl - l, zone->override_rules,
                                     zone->override_nrules,
                                     zone->redis != NULL, now, &ov, err,
                                     sizeof(err));

        if (rc == RL_ERROR) {
            if (p->bad++ == 0) {
                ngx_cpystrn((u_char *) p->why, (u_char *) err,
                            sizeof(p->why));
            }

        } else if (rc == RL_OK && p->n == zone->overrides) {
            p->full++;

        } else if (rc == RL_OK) {
            p->list[p->n++] = ov;
        }
    }

    return NGX_OK;
}


/*
 * A call of the zone's overrides to Redis (a write of the key API's, or a
 * poll), on the zone's connections, by the hash's slot in a Cluster.
 */

ngx_int_t
ngx_ratelimit_overrides_send(ngx_ratelimit_zone_t *zone,
    ngx_ratelimit_overrides_call_t *oc,
    ngx_ratelimit_redis_done_pt done)
{
    void       *owner;
    ngx_log_t  *log;

    oc->zone = zone;

    ngx_memzero(&oc->check, sizeof(rl_check_t));
    oc->check.key = oc->target;
    oc->check.key_len = rl_overrides_redis_target((char *) zone->name.data,
                                                  zone->name.len, oc->target);
    ngx_memzero(&oc->rq, sizeof(rl_request_t));
    oc->rq.checks = &oc->check;
    oc->rq.n = 1;

    owner = oc->w.owner;   /* a write's: the key API's request */
    log = oc->w.log;
    ngx_memzero(&oc->w, sizeof(ngx_ratelimit_redis_wait_t));
    oc->w.owner = owner;
    oc->w.log = log;
    oc->w.handler = done;
    oc->w.rq = &oc->rq;
    oc->w.call = NGX_RATELIMIT_REDIS_OVERRIDES;
    oc->w.command = ngx_ratelimit_overrides_command;
    oc->w.answer = ngx_ratelimit_overrides_answer;

    return ngx_ratelimit_redis_send(zone->overrides_redis, &oc->w);
}


static ngx_int_t
ngx_ratelimit_overrides_command(void *c,
    ngx_ratelimit_redis_wait_t *w, ngx_uint_t eval)
{
    size_t                           slen;
    const char                      *script;
    ngx_ratelimit_redis_t           *redis;
    ngx_ratelimit_redis_conn_t      *conn = c;
    ngx_ratelimit_overrides_call_t  *oc;

    oc = (ngx_ratelimit_overrides_call_t *) w;
    redis = conn->redis;

    /* EVAL each time: a few calls a second at most, a short script */

    script = rl_overrides_redis_script(&slen);

    if (ngx_ratelimit_redis_reserve(conn,
            rl_overrides_redis_command_size(redis->prefix.len, slen))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    conn->out_len += rl_overrides_redis_command(
                         (char *) conn->out + conn->out_len, script, slen, 1,
                         (const char *) redis->prefix.data, redis->prefix.len,
                         redis->cluster, (char *) oc->zone->name.data,
                         oc->zone->name.len, &oc->call);

    ngx_ratelimit_redis_push(conn, w);

    return NGX_OK;
}


static ngx_int_t
ngx_ratelimit_overrides_answer(ngx_ratelimit_redis_wait_t *w,
    rl_resp_t *reply, rl_redis_answer_t *a)
{
    ngx_ratelimit_overrides_call_t  *oc;

    oc = (ngx_ratelimit_overrides_call_t *) w;

    ngx_memzero(a, sizeof(rl_redis_answer_t));

    if (reply->type == RL_RESP_ERROR) {
        /* as any call's: a Cluster's redirection followed, a replica's
           refusal, NOSCRIPT, or a failure */
        return rl_redis_answer(&oc->rq, w->call, reply, a);
    }

    a->kind = rl_overrides_redis_answer(reply, &oc->call, a->why,
                                        sizeof(a->why));

    return a->kind;
}

