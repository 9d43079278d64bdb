
/*
 * ngx-ratelimit: the key API on a zone with redis=.  A key's state is in
 * Redis, shared by the fleet: a look-up calls the script to decide each
 * rule's state twice without writing anything (a look, cost 0, and the next
 * request, of the rule's cost; both show a ban), a reset calls it to
 * delete each rule's state and ban; on the zone's own connections, without
 * blocking (the request waits as a Redis-decided request does, at most
 * redis_timeout).  The core writes the calls and judges the replies
 * (rl_redis_command, rl_redis_answer) as for requests.  A zone with more
 * rules than one call takes is asked in several calls, one after the other
 * (each reset logged as its call is answered).  When Redis does not
 * answer, or its answer is refused, the API says so with 409: the client
 * asked nothing wrong, and the zone's state cannot be read or reset now.
 */


#include "ngx_http_ratelimit_api_redis.h"
#include "ngx_http_ratelimit_api_keys.h"
#include "ngx_http_ratelimit_wait.h"
#include "ngx_ratelimit_overrides.h"
#include "ngx_ratelimit_redis.h"


typedef struct {
    ngx_ratelimit_redis_wait_t        wait;
    ngx_http_ratelimit_api_req_t     *q;
    ngx_uint_t                        done;     /* states answered */
    ngx_uint_t                        calling;  /* states in the call */
    ngx_uint_t                        waiting;
    rl_request_t                      rq;
    rl_check_t                        checks[RL_RULES_MAX];
} ngx_http_ratelimit_api_redis_t;


static ngx_int_t ngx_http_ratelimit_api_redis_call(ngx_http_request_t *r,
    ngx_http_ratelimit_api_redis_t *ar);
static void ngx_http_ratelimit_api_redis_done(
    ngx_ratelimit_redis_wait_t *w, rl_redis_answer_t *answer);
static void ngx_http_ratelimit_api_redis_answer(
    ngx_ratelimit_redis_wait_t *w, rl_redis_answer_t *answer);
static void ngx_http_ratelimit_api_redis_cleanup(void *data);


ngx_int_t
ngx_http_ratelimit_api_redis(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    ngx_int_t                        rc;
    ngx_pool_cleanup_t              *cln;
    ngx_http_ratelimit_api_redis_t  *ar;

    if (q->in.has_fingerprint) {
        return ngx_http_ratelimit_api_fail(r, q, RL_API_REDIS_FINGERPRINT);
    }

    if (ngx_http_ratelimit_api_states(r, q) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ar = ngx_pcalloc(r->pool, sizeof(ngx_http_ratelimit_api_redis_t));
    if (ar == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_ratelimit_api_redis_cleanup;
    cln->data = ar;

    ar->q = q;

    rc = ngx_http_ratelimit_api_redis_call(r, ar);

    if (!ar->waiting) {
        return rc;   /* answered already: Redis is not reachable now */
    }

    r->main->count++;

    return NGX_DONE;
}


/*
 * Sends the call for the next states (as many as one call takes), and
 * waits for it; or, when Redis is not reachable now, answers 409 and
 * returns what sending that returned.
 */

static ngx_int_t
ngx_http_ratelimit_api_redis_call(ngx_http_request_t *r,
    ngx_http_ratelimit_api_redis_t *ar)
{
    ngx_uint_t                   i, n, per, reset;
    rl_check_t                  *c;
    rl_key_state_t              *st;
    ngx_ratelimit_rule_t        *rule;
    ngx_ratelimit_redis_wait_t  *w;

    reset = ar->q->in.reset;
    per = reset ? 1 : 2;
    n = ngx_min(ar->q->states->nelts - ar->done, RL_RULES_MAX / per);
    st = (rl_key_state_t *) ar->q->states->elts + ar->done;

    ngx_memzero(ar->checks, sizeof(ar->checks));

    for (i = 0; i < n * per; i++) {
        c = &ar->checks[i];
        rule = st[i / per].data;
        c->rule = &rule->rule;
        c->identity = rule->identity;
        c->key = ar->q->in.key;
        c->key_len = ar->q->in.key_len;

        /* a look-up: a look (cost 0), then the next request */
        c->cost = (reset || i % 2 == 0) ? 0 : st[i / per].cost;
    }

    ngx_memzero(&ar->rq, sizeof(rl_request_t));
    ar->rq.checks = ar->checks;
    ar->rq.n = n * per;
    ar->rq.combine = RL_COMBINE_ALL;

    /* concurrency: the key's leases of this server counted too (none yet
       if no worker of it named one) */
    ar->rq.server = (uint64_t) ar->q->zone->redis->stats->server;

    w = &ar->wait;
    ngx_memzero(w, sizeof(ngx_ratelimit_redis_wait_t));
    ngx_http_ratelimit_redis_owner(w, r);
    w->handler = ngx_http_ratelimit_api_redis_done;
    w->rq = &ar->rq;
    w->call = reset ? RL_REDIS_RESET : RL_REDIS_PEEK;

    if (ngx_ratelimit_redis_send(ar->q->zone->redis, w) != NGX_OK) {
        return ngx_http_ratelimit_api_fail(r, ar->q, RL_API_REDIS_FAILED);
    }

    ar->calling = n;
    ar->waiting = 1;

    return NGX_OK;
}


static void
ngx_http_ratelimit_api_redis_done(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer)
{
    ngx_http_ratelimit_redis_answered(w, answer,
                                      ngx_http_ratelimit_api_redis_answer);
}


/* A call answered (answer) or failed (NULL): the next, or the answer. */

static void
ngx_http_ratelimit_api_redis_answer(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer)
{
    ngx_int_t                        rc;
    ngx_uint_t                       i;
    rl_peek_t                       *pk;
    ngx_http_request_t              *r = w->owner;
    rl_key_state_t                  *st;
    ngx_http_ratelimit_api_redis_t  *ar;

    ar = (ngx_http_ratelimit_api_redis_t *) w;   /* its first field */
    ar->waiting = 0;

    /* a reset, done or not known: the refusals this server remembers of
       the zone are forgotten (and so are those of replies on their way) */

    if (w->call == RL_REDIS_RESET) {
        rl_refusals_forget(ar->q->zone->redis->refusals);
    }

    if (answer == NULL) {
        ngx_http_finalize_request(r, ngx_http_ratelimit_api_fail(r, ar->q,
                                                       RL_API_REDIS_FAILED));
        return;
    }

    st = (rl_key_state_t *) ar->q->states->elts + ar->done;

    for (i = 0; i < ar->calling; i++) {
        if (w->call == RL_REDIS_RESET) {
            st[i].reset = ((answer->found >> i) & 1 ? RL_RESET_HELD : 0)
                          | ((answer->unbanned >> i) & 1 ? RL_RESET_UNBANNED
                                                         : 0);
            ngx_http_ratelimit_api_log_reset(r, ar->q, &st[i]);
            continue;
        }

        pk = &st[i].peek;
        pk->look = ar->checks[2 * i].decision;
        pk->next = ar->checks[2 * i + 1].decision;
        pk->held = pk->look.reset_ms > 0;
        pk->banned_ms = ngx_max(pk->look.banned_ms, pk->next.banned_ms);

        /* concurrency: the slots held across the fleet (live leases), and
           those of this server's */

        if (rl_rule_holds_slots(ar->checks[2 * i].rule)) {
            pk->fleet = 1;
            pk->in_flight_here = answer->here[2 * i];

            if (ar->checks[2 * i].rule->limit > pk->look.remaining) {
                pk->in_flight = (uint32_t) (ar->checks[2 * i].rule->limit
                                            - pk->look.remaining);
                pk->held = 1;
            }
        }
    }

    ar->done += ar->calling;

    if (ar->done < ar->q->states->nelts) {
        rc = ngx_http_ratelimit_api_redis_call(r, ar);

        if (ar->waiting) {
            return;
        }

    } else {
        rc = ngx_http_ratelimit_api_answer(r, ar->q);
    }

    ngx_http_finalize_request(r, rc);
}


/* The request goes away while it waits: its reply is dropped. */

static void
ngx_http_ratelimit_api_redis_cleanup(void *data)
{
    ngx_http_ratelimit_api_redis_t  *ar = data;

    if (ar->waiting) {
        ar->waiting = 0;
        ngx_ratelimit_redis_cancel(&ar->wait);

        if (ar->wait.call == RL_REDIS_RESET) {
            rl_refusals_forget(ar->q->zone->redis->refusals);
        }
    }
}


/*
 * A Redis zone's override written or removed in Redis, where the fleet's
 * servers take it from (ngx_ratelimit_overrides.c), and answered once
 * this server took the version the write made: a write this server cannot
 * say applies here is no 200.  Read from what this server took last.
 */

typedef struct {
    ngx_ratelimit_overrides_call_t        oc;
    ngx_ratelimit_overrides_wait_t        taken;
    ngx_http_ratelimit_api_req_t         *q;
    ngx_uint_t                            waiting;  /* for Redis's answer */
    ngx_uint_t                            awaiting; /* for the copy */
} ngx_http_ratelimit_api_override_t;


static void ngx_http_ratelimit_api_override_done(
    ngx_ratelimit_redis_wait_t *w, rl_redis_answer_t *answer);
static void ngx_http_ratelimit_api_override_written(
    ngx_ratelimit_redis_wait_t *w, rl_redis_answer_t *answer);
static void ngx_http_ratelimit_api_override_taken(
    ngx_ratelimit_overrides_wait_t *aw, ngx_int_t rc);
static void ngx_http_ratelimit_api_override_cleanup(void *data);


ngx_int_t
ngx_http_ratelimit_api_redis_override(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, const rl_override_rule_t *rule)
{
    int64_t                             now;
    ngx_int_t                           found;
    rl_override_t                       held;
    ngx_pool_cleanup_t                 *cln;
    ngx_http_ratelimit_api_override_t  *ao;

    if (q->zone->store == NULL) {
        return ngx_http_ratelimit_api_fail(r, q, q->in.put
                                                 ? RL_API_NO_OVERRIDES
                                                 : RL_API_NO_OVERRIDE);
    }

    now = ngx_ratelimit_now();

    ngx_shmtx_lock(&q->zone->shpool->mutex);
    found = rl_override_get(q->zone->table, &q->ov.target, now, &held);
    ngx_shmtx_unlock(&q->zone->shpool->mutex);

    if (found && !q->in.put) {
        q->ov = held;   /* what is read, or removed */
    }

    if (!q->in.put && !q->in.reset) {
        return found ? ngx_http_ratelimit_api_override_answer(r, q)
                     : ngx_http_ratelimit_api_fail(r, q, RL_API_NO_OVERRIDE);
    }

    ao = ngx_pcalloc(r->pool, sizeof(ngx_http_ratelimit_api_override_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (ao == NULL || cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_ratelimit_api_override_cleanup;
    cln->data = ao;

    ao->q = q;
    ao->oc.call.op = q->in.put ? RL_OVERRIDES_PUT : RL_OVERRIDES_DEL;
    ao->oc.call.ov = q->ov;
    ao->oc.call.ov.created_ms = now;
    ao->oc.call.now_ms = now;
    ao->oc.call.room = q->zone->overrides;
    ngx_http_ratelimit_redis_owner(&ao->oc.w, r);

    if (ngx_ratelimit_overrides_send(q->zone, &ao->oc,
                                     ngx_http_ratelimit_api_override_done)
        != NGX_OK)
    {
        return ngx_http_ratelimit_api_fail(r, q, RL_API_REDIS_FAILED);
    }

    ao->waiting = 1;
    r->main->count++;

    return NGX_DONE;
}


static void
ngx_http_ratelimit_api_override_done(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer)
{
    ngx_http_ratelimit_redis_answered(w, answer,
                                      ngx_http_ratelimit_api_override_written);
}


static void
ngx_http_ratelimit_api_override_written(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer)
{
    ngx_http_request_t                 *r = w->owner;
    ngx_http_ratelimit_api_req_t       *q;
    ngx_http_ratelimit_api_override_t  *ao;

    ao = (ngx_http_ratelimit_api_override_t *) w;   /* its first field */
    ao->waiting = 0;
    q = ao->q;

    if (answer == NULL) {
        ngx_http_finalize_request(r, ngx_http_ratelimit_api_fail(r, q,
                                                       RL_API_REDIS_FAILED));
        return;
    }

    if (ao->oc.call.result != 1) {
        ngx_http_finalize_request(r, ngx_http_ratelimit_api_fail(r, q,
                                          ao->oc.call.result < 0
                                          ? RL_API_OVERRIDES_FULL
                                          : RL_API_NO_OVERRIDE));
        return;
    }

    ngx_http_ratelimit_api_log_override(r, q);   /* written, in Redis */

    ao->awaiting = 1;
    ao->taken.handler = ngx_http_ratelimit_api_override_taken;
    ngx_ratelimit_overrides_await(q->zone, &ao->taken,
                                  ao->oc.call.written);
}


/*
 * This server's copy took the write's version (NGX_OK), or could not: the
 * write answered from the copy, or refused (409) when the copy does not
 * hold it (Redis did not answer the read, this server has no room for it,
 * or Redis holds another hash now: the error log says which).
 */

static void
ngx_http_ratelimit_api_override_taken(ngx_ratelimit_overrides_wait_t *aw,
    ngx_int_t rc)
{
    int                                 found;
    rl_override_t                       held;
    ngx_http_request_t                 *r;
    ngx_http_ratelimit_api_req_t       *q;
    ngx_http_ratelimit_api_override_t  *ao;

    ao = (ngx_http_ratelimit_api_override_t *)
             ((u_char *) aw - offsetof(ngx_http_ratelimit_api_override_t,
                                       taken));
    ao->awaiting = 0;
    q = ao->q;
    r = ao->oc.w.owner;

    ngx_shmtx_lock(&q->zone->shpool->mutex);
    found = rl_override_get(q->zone->table, &q->ov.target,
                            ngx_ratelimit_now(), &held);
    ngx_shmtx_unlock(&q->zone->shpool->mutex);

    if (rc != NGX_OK || (q->in.put && !found)) {
        ngx_http_finalize_request(r, ngx_http_ratelimit_api_fail(r, q,
                                               RL_API_OVERRIDE_NOT_TAKEN));
        return;
    }

    if (q->in.put) {
        q->ov = held;
    }

    ngx_http_finalize_request(r, ngx_http_ratelimit_api_override_answer(r, q));
}


/* The request goes away while it waits: its reply is dropped. */

static void
ngx_http_ratelimit_api_override_cleanup(void *data)
{
    ngx_http_ratelimit_api_override_t  *ao = data;

    if (ao->waiting) {
        ao->waiting = 0;
        ngx_ratelimit_redis_cancel(&ao->oc.w);
    }

    if (ao->awaiting) {
        ao->awaiting = 0;
        ngx_ratelimit_overrides_unwait(&ao->taken);
    }
}
