
/*
 * ngx-ratelimit: the charges (charge=) of a request decided in Redis, sent
 * when it ends.
 *
 * The log phase evaluates each charge and hands the request's checks here;
 * the checks that settle one, or end with their reservation standing
 * (RL_NO_CHARGE: the key's reservations in flight end all the same), are
 * copied, with their rules and keys, out of the request's pool (which goes
 * away with the request), and one script call (rl_redis_command,
 * RL_REDIS_SETTLE: each gives back the cost it reserved and spends its
 * charge, atomically in Redis) is pipelined on the
 * worker's connection to the server of the key's slot.  Nothing waits for
 * the reply: the request ends at once, and the worker goes on.  The reply,
 * judged by the core, is counted in this server's zone (each rule's units
 * charged and the requests left in debt, as for a local zone); a settle
 * that Redis does not take (not reachable, no reply within redis_timeout,
 * a reply refused) is counted as undelivered and logged, folded: its
 * charge is lost, and the key keeps the cost its request reserved.
 *
 * Concurrency's leases go the same way.  Before its call, a request's
 * concurrency checks get lease numbers of the worker's (with the server's
 * id, the worker's random number and process id they name their leases in
 * the fleet); a request that took leases joins the worker's list, whose
 * timer renews them all every third of the shortest lease, in as few
 * calls as the servers allow (one for every lease of a standalone Redis,
 * one a request in a Cluster); and its end, whatever ends it, releases
 * them, one call not waited for.  A release or renewal Redis does not take
 * is counted, and the lease runs out by itself within its lease=.
 *
 * A request on_redis_error=local admits while Redis is away keeps its
 * leases' names and joins the list too, its leases not in Redis.  Any call
 * of the zone Redis fails (or a renewal that finds leases gone: a restart
 * lost them) puts the worker's leases in restore: every tick (a tenth of a
 * second) the timer writes them all into Redis (RL_REDIS_RESTORE: taken
 * whether Redis holds them or not), until Redis answers a round of them
 * whole, so that once Redis is back it counts every request the server has
 * in flight, whoever admitted it.
 */


#include "ngx_ratelimit_redis_settle.h"
#include "ngx_ratelimit_log.h"
#include "ngx_ratelimit_redis.h"


typedef struct ngx_ratelimit_settle_s  ngx_ratelimit_settle_t;

struct ngx_ratelimit_settle_s {
    ngx_ratelimit_redis_wait_t        wait;     /* first: its handler's */
    rl_request_t                      rq;
    size_t                            size;     /* of the whole block */
    ngx_ratelimit_settle_t           *next;     /* in the free blocks */
    ngx_uint_t                        counted;  /* a release: its leases
                                                   are counted (one whose
                                                   call failed may never
                                                   have been taken) */
    ngx_uint_t                        room;     /* leases: checks it holds
                                                   at most */
    ngx_uint_t                        round;    /* a restore: its round */
    /* then rq.n checks, their rules, their keys */
};


/* The leases a renewal call carries at most (a standalone Redis: every
   lease of the worker, in calls of so many). */
#define NGX_RATELIMIT_LEASES_CALL  64

/* The tick of the leases' restore, while Redis fails or until it took
   them all again. */
#define NGX_RATELIMIT_LEASES_RESTORE_MS  100


/* Blocks of this size are kept for the next settles (most are: a few rules
   with short keys), at most so many a zone in a worker. */
#define NGX_RATELIMIT_SETTLE_BLOCK  4096
#define NGX_RATELIMIT_SETTLE_KEPT   64


static ngx_ratelimit_settle_t *ngx_ratelimit_settle_alloc(
    ngx_ratelimit_redis_t *redis, size_t size);
static void ngx_ratelimit_settle_free(ngx_ratelimit_redis_t *redis,
    ngx_ratelimit_settle_t *s);
static void ngx_ratelimit_settle_done(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer);
static rl_check_t *ngx_ratelimit_settle_charge(rl_request_t *rq);
static void ngx_ratelimit_settle_lost(ngx_ratelimit_redis_t *redis,
    rl_request_t *rq, const char *why);
static ngx_ratelimit_settle_t *ngx_ratelimit_leases_block(
    ngx_ratelimit_redis_t *redis, rl_request_t *rq, ngx_uint_t n,
    size_t keys);
static ngx_uint_t ngx_ratelimit_leases_copy(ngx_ratelimit_settle_t *s,
    rl_request_t *from);
static void ngx_ratelimit_leases_send(ngx_ratelimit_redis_t *redis,
    ngx_ratelimit_settle_t *s, ngx_uint_t call);
static void ngx_ratelimit_leases_done(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer);
static void ngx_ratelimit_leases_renew(ngx_event_t *ev);
static void ngx_ratelimit_leases_join(ngx_ratelimit_redis_t *redis,
    ngx_ratelimit_lease_t *lease);
static void ngx_ratelimit_leases_arm(ngx_ratelimit_redis_t *redis);


void
ngx_ratelimit_redis_settle(ngx_ratelimit_redis_t *redis,
    rl_request_t *rq)
{
    u_char                  *p;
    size_t                   i, n, size;
    rl_rule_t               *rules;
    rl_check_t              *c, *checks;
    ngx_ratelimit_settle_t  *s;

    n = 0;
    size = sizeof(ngx_ratelimit_settle_t);

    for (i = 0; i < rq->n; i++) {
        c = &rq->checks[i];

        /* a check whose reservation stands (RL_NO_CHARGE) is sent too: its
           key's reservations in flight end */

        if (rl_check_charges(c)) {
            if (c->charge != RL_NO_CHARGE) {
                c->charged = c->charge;   /* $ratelimit_charged: what is sent */
            }

            n++;
            size += sizeof(rl_check_t) + sizeof(rl_rule_t) + c->key_len;
        }
    }

    if (n == 0) {
        return;
    }

    s = ngx_ratelimit_settle_alloc(redis, size);
    if (s == NULL) {
        ngx_ratelimit_settle_lost(redis, rq, "out of memory");
        return;
    }

    checks = (rl_check_t *) (s + 1);
    rules = (rl_rule_t *) (checks + n);
    p = (u_char *) (rules + n);
    n = 0;

    for (i = 0; i < rq->n; i++) {
        c = &rq->checks[i];

        if (!rl_check_charges(c)) {
            continue;
        }

        checks[n] = *c;
        rules[n] = *c->rule;   /* as applied: in the request's pool */
        checks[n].rule = &rules[n];
        checks[n].key = p;
        p = ngx_cpymem(p, c->key, c->key_len);
        n++;
    }

    s->rq = *rq;
    s->rq.checks = checks;
    s->rq.n = n;

    ngx_memzero(&s->wait, sizeof(ngx_ratelimit_redis_wait_t));
    s->wait.handler = ngx_ratelimit_settle_done;
    s->wait.rq = &s->rq;
    s->wait.call = RL_REDIS_SETTLE;

    if (ngx_ratelimit_redis_send(redis, &s->wait) != NGX_OK) {
        ngx_ratelimit_settle_lost(redis, &s->rq,
                                  "Redis is not reachable now");
        ngx_ratelimit_settle_free(redis, s);
    }
}


/*
 * The settle's reply, judged by the core (answer: each check's charged,
 * in_debt, capped), or none (NULL): counted in the zone, under its lock as
 * a request's outcome is; a charge cut by the debt's bound is logged as a
 * local zone logs it.
 */

static void
ngx_ratelimit_settle_done(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer)
{
    size_t                   i;
    char                     err[RL_ERR_MAX];
    rl_check_t              *c;
    ngx_ratelimit_zone_t    *zone;
    ngx_ratelimit_settle_t  *s;

    s = (ngx_ratelimit_settle_t *) w;   /* its first field */

    if (answer == NULL) {
        ngx_ratelimit_settle_lost(w->redis, &s->rq,
            w->timed_out ? "no reply within redis_timeout"
                         : "the connection failed or the reply was refused "
                           "(see above)");
        ngx_ratelimit_settle_free(w->redis, s);
        return;
    }

    if (ngx_ratelimit_settle_charge(&s->rq) != NULL) {
        (void) ngx_atomic_fetch_add(&w->redis->stats->charges, 1);
    }

    zone = ngx_ratelimit_zone_of(ngx_ratelimit_rule_of(&s->rq.checks[0]));

    ngx_shmtx_lock(&zone->shpool->mutex);
    rl_request_count_charges(&s->rq);
    ngx_shmtx_unlock(&zone->shpool->mutex);

    for (i = 0; i < s->rq.n; i++) {
        c = &s->rq.checks[i];

        if (c->capped) {
            ngx_snprintf((u_char *) err, sizeof(err),
                         "charge %uL capped at %uL: a key owes at most one "
                         "limit beyond its budget%Z", c->charge, c->charged);
            ngx_ratelimit_log_bad(NULL, ngx_ratelimit_rule_of(c), err);
        }
    }

    ngx_ratelimit_settle_free(w->redis, s);
}


/* A settle Redis did not take: counted, and a line (folded) says so. */

static void
ngx_ratelimit_settle_lost(ngx_ratelimit_redis_t *redis,
    rl_request_t *rq, const char *why)
{
    rl_check_t  *c;

    /* reservations in flight alone run out by themselves (settle.cpp) */

    c = ngx_ratelimit_settle_charge(rq);
    if (c == NULL) {
        return;
    }

    (void) ngx_atomic_fetch_add(&redis->stats->undelivered, 1);

    if (!ngx_ratelimit_redis_log_now(redis, &redis->undelivered)) {
        return;
    }

    ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                  "ratelimit: redis %V: a request's charge not delivered in "
                  "zone \"%V\" (rule \"%V\", %uL units): %s; the cost it "
                  "reserved stays spent", &redis->server, &redis->zone,
                  &ngx_ratelimit_rule_of(c)->name, c->charge, why);
}


/* The first check of a settle that spends a charge, or NULL. */

static rl_check_t *
ngx_ratelimit_settle_charge(rl_request_t *rq)
{
    size_t  i;

    for (i = 0; i < rq->n; i++) {
        if (rl_check_charges(&rq->checks[i])
            && rq->checks[i].charge != RL_NO_CHARGE)
        {
            return &rq->checks[i];
        }
    }

    return NULL;
}


/* A settle's block: a kept one, or a new one. */

static ngx_ratelimit_settle_t *
ngx_ratelimit_settle_alloc(ngx_ratelimit_redis_t *redis,
    size_t size)
{
    ngx_ratelimit_settle_t  *s;

    if (size <= NGX_RATELIMIT_SETTLE_BLOCK && redis->free != NULL) {
        s = redis->free;
        redis->free = s->next;
        redis->nfree--;
        return s;
    }

    size = ngx_max(size, NGX_RATELIMIT_SETTLE_BLOCK);

    s = ngx_alloc(size, ngx_cycle->log);
    if (s == NULL) {
        return NULL;
    }

    s->size = size;

    return s;
}


static void
ngx_ratelimit_settle_free(ngx_ratelimit_redis_t *redis,
    ngx_ratelimit_settle_t *s)
{
    if (s->size == NGX_RATELIMIT_SETTLE_BLOCK
        && redis->nfree < NGX_RATELIMIT_SETTLE_KEPT)
    {
        s->next = redis->free;
        redis->free = s;
        redis->nfree++;
        return;
    }

    ngx_free(s);
}


/*
 * Before a request's call: its concurrency checks' leases named (the
 * server's id, the worker's random number, made at its first lease, its
 * process id, and a number of its own for each).
 */

void
ngx_ratelimit_redis_lease_prepare(ngx_ratelimit_redis_t *redis,
    rl_request_t *rq)
{
    size_t       i;
    rl_check_t  *c;

    if (redis->lease_server == 0) {
        redis->lease_server = ngx_ratelimit_redis_server_id(redis);
    }

    if (redis->lease_owner == 0) {
        redis->lease_owner = ((uint64_t) ngx_random() << 33)
                             ^ ((uint64_t) ngx_random() << 11)
                             ^ (uint64_t) ngx_random()
                             ^ ((uint64_t) ngx_time() << 20)
                             ^ ngx_hash_key(ngx_cycle->hostname.data,
                                            ngx_cycle->hostname.len);
        redis->lease_owner |= 1;
    }

    rq->server = redis->lease_server;
    rq->lease = redis->lease_owner;
    rq->holder = (uint32_t) ngx_pid;

    for (i = 0; i < rq->n; i++) {
        c = &rq->checks[i];

        if (c->key_len > 0 && rl_rule_holds_slots(c->rule)) {
            if (++redis->lease_next == 0) {
                redis->lease_next = 1;
            }

            c->lease = redis->lease_next;
        }
    }
}


/*
 * A request decided in Redis: if it took leases, it joins the worker's
 * list, and the renewals' timer runs (every third of its shortest lease).
 * Returns 1 if it did.
 */

ngx_uint_t
ngx_ratelimit_redis_lease_hold(ngx_ratelimit_redis_t *redis,
    rl_request_t *rq, ngx_ratelimit_lease_t *lease)
{
    size_t      i;
    ngx_uint_t  n;

    n = 0;

    for (i = 0; i < rq->n; i++) {
        n += rl_redis_holds_lease(&rq->checks[i]);
    }

    if (n == 0) {
        return 0;
    }

    (void) ngx_atomic_fetch_add(&redis->stats->leases, n);

    lease->rq = rq;
    lease->local = 0;
    lease->sent = 1;

    ngx_ratelimit_leases_join(redis, lease);

    return 1;
}


/*
 * A request on_redis_error decided: with local, its concurrency checks
 * that took a slot keep their leases' names (the others lose theirs), and
 * it joins the worker's list (returns 1), its leases not in Redis until a
 * restore writes them (ngx_ratelimit_redis_leases_lost put the worker
 * in restore); with allow or deny, none is kept.
 */

ngx_uint_t
ngx_ratelimit_redis_lease_keep(ngx_ratelimit_redis_t *redis,
    rl_request_t *rq, ngx_ratelimit_lease_t *lease)
{
    size_t       i;
    ngx_uint_t   n;
    rl_check_t  *c;

    n = 0;

    for (i = 0; i < rq->n; i++) {
        c = &rq->checks[i];

        if (c->slot == 0) {
            c->lease = 0;
        }

        n += rl_redis_holds_lease(c);
    }

    if (n == 0) {
        return 0;
    }

    lease->rq = rq;
    lease->local = 1;
    lease->sent = 0;

    ngx_ratelimit_leases_join(redis, lease);

    return 1;
}


/* A request joins the worker's list: the timer runs, every third of the
   shortest lease (a tenth of a second in restore). */

static void
ngx_ratelimit_leases_join(ngx_ratelimit_redis_t *redis,
    ngx_ratelimit_lease_t *lease)
{
    size_t         i;
    ngx_msec_t     every;
    rl_request_t  *rq = lease->rq;

    every = 0;

    for (i = 0; i < rq->n; i++) {
        if (rl_redis_holds_lease(&rq->checks[i])
            && (every == 0
                || (ngx_msec_t) rl_redis_lease_ms(rq->checks[i].rule) / 3
                   < every))
        {
            every = (ngx_msec_t) rl_redis_lease_ms(rq->checks[i].rule) / 3;
        }
    }

    if (redis->leases.next == NULL) {
        ngx_queue_init(&redis->leases);
    }

    ngx_queue_insert_tail(&redis->leases, &lease->link);

    if (redis->renew_ms == 0 || every < redis->renew_ms) {
        redis->renew_ms = every;

        if (redis->renew.timer_set) {
            ngx_del_timer(&redis->renew);
        }
    }

    ngx_ratelimit_leases_arm(redis);
}


/* The timer set, if it is not: the next renewal, or restore's tick. */

static void
ngx_ratelimit_leases_arm(ngx_ratelimit_redis_t *redis)
{
    if (redis->renew.timer_set || redis->renew_ms == 0) {
        return;
    }

    redis->renew.handler = ngx_ratelimit_leases_renew;
    redis->renew.data = redis;
    redis->renew.log = ngx_cycle->log;
    redis->renew.cancelable = 1;   /* the requests keep an exit waiting */

    ngx_add_timer(&redis->renew, redis->restoring
                                 ? ngx_min(redis->renew_ms,
                                           NGX_RATELIMIT_LEASES_RESTORE_MS)
                                 : redis->renew_ms);
}


/*
 * Redis failed a call of the zone (a request's, a lease's), or a renewal
 * found leases gone: this worker's leases may not be in Redis (a restart
 * lost them, a request admitted meanwhile never had one there), and are
 * written again, a round each tick, until Redis answers one whole.
 */

void
ngx_ratelimit_redis_leases_lost(ngx_ratelimit_redis_t *redis)
{
    redis->restore_failed = 1;

    if (redis->restoring) {
        return;
    }

    redis->restoring = 1;

    if (redis->renew.timer_set) {
        ngx_del_timer(&redis->renew);
    }

    if (redis->leases.next != NULL && !ngx_queue_empty(&redis->leases)) {
        ngx_ratelimit_leases_arm(redis);
    }
}


/*
 * A request's end, whatever ended it: it leaves the worker's list (lease:
 * NULL for a request whose call failed, which may have taken its leases
 * all the same), and one call releases its leases, not waited for (none
 * for a request admitted while Redis was away whose leases no restore
 * carried yet).
 */

void
ngx_ratelimit_redis_lease_release(ngx_ratelimit_redis_t *redis,
    rl_request_t *rq, ngx_ratelimit_lease_t *lease)
{
    size_t                   i, keys;
    ngx_uint_t               n;
    ngx_ratelimit_settle_t  *s;

    if (lease != NULL) {
        ngx_queue_remove(&lease->link);

        if (!lease->sent) {
            return;
        }

        if (!lease->local) {
            /* no longer this server's in flight, whatever Redis says */
            rl_request_count_leases_end(rq);
        }
    }

    n = 0;
    keys = 0;

    for (i = 0; i < rq->n; i++) {
        if (rl_redis_holds_lease(&rq->checks[i])) {
            n++;
            keys += rq->checks[i].key_len;
        }
    }

    if (n == 0) {
        return;
    }

    s = ngx_ratelimit_leases_block(redis, rq, n, keys);
    if (s == NULL) {
        (void) ngx_atomic_fetch_add(&redis->stats->leases_undelivered, 1);
        return;
    }

    (void) ngx_ratelimit_leases_copy(s, rq);
    s->counted = (lease != NULL);

    ngx_ratelimit_leases_send(redis, s, RL_REDIS_RELEASE);
}


/*
 * The renewals' timer: every lease of the worker's requests renewed; in
 * restore, written again, unless the last round was answered whole (then
 * the renewals go on, a third of a lease later) or is still awaited.
 */

static void
ngx_ratelimit_leases_renew(ngx_event_t *ev)
{
    size_t                   i, keys;
    ngx_uint_t               n, slot, call;
    ngx_queue_t             *q, *from;
    rl_check_t              *c;
    ngx_ratelimit_lease_t   *lease;
    ngx_ratelimit_redis_t   *redis = ev->data;
    ngx_ratelimit_settle_t  *s;

    if (redis->leases.next == NULL || ngx_queue_empty(&redis->leases)) {
        return;   /* no lease: the timer waits for the next */
    }

    call = RL_REDIS_RENEW;

    if (redis->restoring) {

        if (!redis->restore_failed) {
            if (redis->restore_calls == 0) {
                redis->restoring = 0;   /* every lease in Redis again */
            }

            ngx_ratelimit_leases_arm(redis);
            return;
        }

        call = RL_REDIS_RESTORE;
        redis->restore_round++;
        redis->restore_calls = 0;
        redis->restore_failed = 0;
    }

    q = ngx_queue_head(&redis->leases);

    while (q != ngx_queue_sentinel(&redis->leases)) {

        /* a call's requests: as many leases as one call carries, and in a
           Cluster the leases of one request (of one slot) */

        from = q;
        n = 0;
        keys = 0;
        slot = 0;

        while (q != ngx_queue_sentinel(&redis->leases)) {
            lease = ngx_queue_data(q, ngx_ratelimit_lease_t, link);

            for (i = 0; i < lease->rq->n; i++) {
                c = &lease->rq->checks[i];

                if (rl_redis_holds_lease(c)) {
                    slot++;
                    keys += c->key_len;
                }
            }

            if (n > 0 && (redis->cluster
                          || n + slot > NGX_RATELIMIT_LEASES_CALL))
            {
                break;
            }

            n += slot;
            slot = 0;
            q = ngx_queue_next(q);
        }

        s = ngx_ratelimit_leases_block(redis, NULL, n, keys);
        if (s == NULL) {
            ngx_ratelimit_redis_leases_lost(redis);
            continue;
        }

        for ( /* void */ ; from != q; from = ngx_queue_next(from)) {
            lease = ngx_queue_data(from, ngx_ratelimit_lease_t, link);
            lease->sent = 1;
            s->rq.server = lease->rq->server;
            s->rq.lease = lease->rq->lease;
            s->rq.holder = lease->rq->holder;
            (void) ngx_ratelimit_leases_copy(s, lease->rq);
        }

        s->round = redis->restore_round;

        ngx_ratelimit_leases_send(redis, s, call);
    }

    ngx_ratelimit_leases_arm(redis);
}


/* A block for n leases' checks (their rules and keys copied in). */

static ngx_ratelimit_settle_t *
ngx_ratelimit_leases_block(ngx_ratelimit_redis_t *redis,
    rl_request_t *rq, ngx_uint_t n, size_t keys)
{
    ngx_ratelimit_settle_t  *s;

    s = ngx_ratelimit_settle_alloc(redis,
            sizeof(ngx_ratelimit_settle_t)
            + n * (sizeof(rl_check_t) + sizeof(rl_rule_t)) + keys);
    if (s == NULL) {
        return NULL;
    }

    ngx_memzero(&s->rq, sizeof(rl_request_t));

    if (rq != NULL) {
        s->rq.server = rq->server;
        s->rq.lease = rq->lease;
        s->rq.holder = rq->holder;
    }

    s->rq.checks = (rl_check_t *) (s + 1);
    s->rq.n = 0;
    s->room = n;
    s->counted = 1;

    return s;
}


/* A request's leases appended to a block's checks; returns how many. */

static ngx_uint_t
ngx_ratelimit_leases_copy(ngx_ratelimit_settle_t *s,
    rl_request_t *from)
{
    u_char      *p;
    size_t       i, used;
    ngx_uint_t   n;
    rl_rule_t   *rules;
    rl_check_t  *c, *checks;

    checks = s->rq.checks;
    rules = (rl_rule_t *) (checks + s->room);
    p = (u_char *) (rules + s->room);

    for (i = 0, used = 0; i < s->rq.n; i++) {
        used += checks[i].key_len;
    }

    p += used;
    n = 0;

    for (i = 0; i < from->n; i++) {
        c = &from->checks[i];

        if (!rl_redis_holds_lease(c) || s->rq.n >= s->room) {
            continue;
        }

        checks[s->rq.n] = *c;
        rules[s->rq.n] = *c->rule;
        checks[s->rq.n].rule = &rules[s->rq.n];
        checks[s->rq.n].key = p;
        p = ngx_cpymem(p, c->key, c->key_len);
        s->rq.n++;
        n++;
    }

    return n;
}


/* A lease call sent; one Redis cannot take now counts as undelivered (a
   restore is sent again at the next tick). */

static void
ngx_ratelimit_leases_send(ngx_ratelimit_redis_t *redis,
    ngx_ratelimit_settle_t *s, ngx_uint_t call)
{
    ngx_memzero(&s->wait, sizeof(ngx_ratelimit_redis_wait_t));
    s->wait.handler = ngx_ratelimit_leases_done;
    s->wait.rq = &s->rq;
    s->wait.call = call;

    if (ngx_ratelimit_redis_send(redis, &s->wait) != NGX_OK) {
        if (call != RL_REDIS_RESTORE) {
            (void) ngx_atomic_fetch_add(&redis->stats->leases_undelivered, 1);
        }

        ngx_ratelimit_redis_leases_lost(redis);
        ngx_ratelimit_settle_free(redis, s);
        return;
    }

    if (call == RL_REDIS_RESTORE) {
        redis->restore_calls++;
    }
}


/*
 * A release's, a renewal's or a restore's reply: counted.  A lease found
 * expired before its request ended is logged, folded: its slot was free
 * for others while the request ran on (one a renewal finds gone is
 * restored).  A failure puts the worker's leases in restore.
 */

static void
ngx_ratelimit_leases_done(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer)
{
    ngx_ratelimit_redis_t   *redis = w->redis;
    ngx_ratelimit_settle_t  *s;

    s = (ngx_ratelimit_settle_t *) w;   /* its first field */

    if (w->call == RL_REDIS_RESTORE && s->round == redis->restore_round
        && redis->restore_calls > 0)
    {
        redis->restore_calls--;
    }

    if (answer == NULL) {
        if (w->call != RL_REDIS_RESTORE) {
            (void) ngx_atomic_fetch_add(&redis->stats->leases_undelivered, 1);
        }

        ngx_ratelimit_redis_leases_lost(redis);

    } else if (w->call == RL_REDIS_RESTORE) {
        (void) ngx_atomic_fetch_add(&redis->stats->leases_renewed,
                                    answer->leases_done);
        (void) ngx_atomic_fetch_add(&redis->stats->leases_restored,
                                    answer->leases_gone);

    } else if (w->call == RL_REDIS_RENEW) {
        (void) ngx_atomic_fetch_add(&redis->stats->leases_renewed,
                                    answer->leases_done);

        if (answer->leases_gone > 0) {
            ngx_ratelimit_redis_leases_lost(redis);
        }

    } else if (s->counted) {
        (void) ngx_atomic_fetch_add(&redis->stats->leases_released,
                                    answer->leases_done);
        (void) ngx_atomic_fetch_add(&redis->stats->leases_expired,
                                    answer->leases_gone);
    }

    if (answer != NULL && answer->leases_gone > 0 && s->counted
        && w->call != RL_REDIS_RESTORE
        && ngx_ratelimit_redis_log_now(redis, &redis->lease_lost))
    {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "ratelimit: redis %V: %uD lease(s) of zone \"%V\" "
                      "(rule \"%s\") expired before their request ended: "
                      "not renewed within lease=%M ms (a worker stalled, or "
                      "Redis was away or lost them), their slots were free "
                      "for other requests meanwhile%s",
                      &redis->server, answer->leases_gone, &redis->zone,
                      s->rq.checks[0].rule->name,
                      (ngx_msec_t) rl_redis_lease_ms(s->rq.checks[0].rule),
                      w->call == RL_REDIS_RENEW
                      ? "; written into Redis again" : "");
    }

    ngx_ratelimit_settle_free(redis, s);
}


ngx_uint_t
ngx_ratelimit_redis_counted(ngx_ratelimit_zone_t *zone, rl_request_t *rq,
    ngx_uint_t by_redis, uint32_t epoch, int64_t sent, ngx_uint_t here)
{
    ngx_ratelimit_redis_t  *redis = zone->redis;

    ngx_shmtx_lock(&zone->shpool->mutex);

    rl_request_count(rq, ngx_ratelimit_now());

    if (by_redis) {
        (void) rl_refusals_store(redis->refusals, redis->refusals_size, rq,
                                 epoch, sent, ngx_ratelimit_monotonic_ms());
    }

    if (here) {
        here = rl_request_free_here(rq, ngx_ratelimit_now(), 0) > 0;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return here;
}


void
ngx_ratelimit_redis_failed(ngx_ratelimit_zone_t *zone, rl_request_t *rq,
    ngx_uint_t here)
{
    (void) ngx_atomic_fetch_add(&zone->redis->stats->fallbacks, 1);

    /* the worker's leases may be gone from Redis: written again once it
       answers */
    ngx_ratelimit_redis_leases_lost(zone->redis);

    if (here) {
        ngx_shmtx_lock(&zone->shpool->mutex);
        (void) rl_request_free_here(rq, ngx_ratelimit_now(), 1);
        ngx_shmtx_unlock(&zone->shpool->mutex);
    }
}


ngx_uint_t
ngx_ratelimit_redis_known(ngx_ratelimit_zone_t *zone, rl_request_t *rq)
{
    int                     decided;
    ngx_ratelimit_redis_t  *redis = zone->redis;

    if (zone->store != NULL && rl_overrides_held(zone->table)) {
        ngx_shmtx_lock(&zone->shpool->mutex);
        decided = rl_request_overrides(rq, ngx_ratelimit_now());
        ngx_shmtx_unlock(&zone->shpool->mutex);

        if (decided) {
            return NGX_RATELIMIT_REDIS_OVERRIDE;
        }
    }

    if (rl_refusals_find(redis->refusals, redis->refusals_size, rq,
                         ngx_ratelimit_monotonic_ms()))
    {
        (void) ngx_atomic_fetch_add(&redis->stats->cached, 1);
        return NGX_RATELIMIT_REDIS_REMEMBERED;
    }

    return NGX_RATELIMIT_REDIS_SEND;
}
