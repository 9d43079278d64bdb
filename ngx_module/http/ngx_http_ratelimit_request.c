
/*
 * ngx-ratelimit: a request's context, and its end.
 *
 * The context lives on the main request and, as a cleanup of its pool, is
 * found again after internal redirects (error_page, try_files, ...) and a
 * filter finalizing the request, which clear module contexts (as realip
 * finds its own): a redirected request is neither decided twice nor left
 * without its headers and variables.
 *
 * What a request holds is settled once, when it ends (the log phase: after
 * the response went out, or when the client went away early): a rule with
 * charge= spends what its value says, evaluated once (a request its client
 * abandoned keeps what it reserved, unless its rule says abandoned=charge:
 * rl_check_charge_wanted); a concurrency rule's
 * slot and place in a queue are given back, and a request waiting in this
 * worker for a slot is woken.  The core settles every rule under the
 * zones' locks, taken once (rl_request_end); a request decided in Redis
 * has its charges sent there, and its concurrency leases released there
 * (ngx_ratelimit_redis_settle.c).  A
 * request that never reaches the log phase is settled by its context's
 * cleanup, without charges.
 */


#include "ngx_http_ratelimit_request.h"
#include "ngx_http_ratelimit_wait.h"
#include "ngx_http_ratelimit_log.h"
#include "ngx_ratelimit_zone.h"
#include "ngx_ratelimit_redis.h"
#include "ngx_ratelimit_redis_settle.h"


static void ngx_http_ratelimit_ctx_cleanup(void *data);
static void ngx_http_ratelimit_free(ngx_http_ratelimit_ctx_t *ctx);
static int64_t ngx_http_ratelimit_latency(ngx_http_request_t *r);
static void ngx_http_ratelimit_charged(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
static uint64_t ngx_http_ratelimit_charge_value(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule, rl_check_t *check);


/*
 * Contexts are the worker's, not the request pool's: a request ending gives
 * its context back (its pool's cleanup, the last use of it) and the next
 * takes it, so that a request pays no allocation for it, nor moves where
 * nginx's own allocations from its pool land.  The worker keeps at most
 * NGX_HTTP_RATELIMIT_FREE_CTX of them spare.
 */

#define NGX_HTTP_RATELIMIT_FREE_CTX  1024

static ngx_http_ratelimit_ctx_t  *ngx_http_ratelimit_free_ctx;
static ngx_uint_t                 ngx_http_ratelimit_nfree_ctx;


/* A new context, its pool's cleanup in it. */

ngx_http_ratelimit_ctx_t *
ngx_http_ratelimit_new_ctx(ngx_http_request_t *r)
{
    ngx_pool_t                *pool;
    ngx_http_ratelimit_ctx_t  *ctx;

    ctx = ngx_http_ratelimit_free_ctx;

    if (ctx != NULL) {
        ngx_http_ratelimit_free_ctx = ctx->next_free;
        ngx_http_ratelimit_nfree_ctx--;

    } else {
        ctx = ngx_alloc(sizeof(ngx_http_ratelimit_ctx_t), r->connection->log);
        if (ctx == NULL) {
            return NULL;
        }

        ngx_memzero(&ctx->room, sizeof(rl_rule_room_t));
    }

    ngx_ratelimit_zero(ctx, offsetof(ngx_http_ratelimit_ctx_t, rq));

    pool = r->main->pool;
    ctx->cleanup.handler = ngx_http_ratelimit_ctx_cleanup;
    ctx->cleanup.data = ctx;
    ctx->cleanup.next = pool->cleanup;
    pool->cleanup = &ctx->cleanup;
    ngx_http_set_ctx(r->main, ctx, ngx_http_ratelimit_module);

    ctx->request = r->main;

    return ctx;
}


/*
 * A context whose request ended: spare, or freed.  Freed one call later:
 * the pool being destroyed reads the next cleanup from this one (in the
 * context) once this returns.
 */

static void
ngx_http_ratelimit_free(ngx_http_ratelimit_ctx_t *ctx)
{
    static ngx_http_ratelimit_ctx_t  *doomed;

    if (ngx_http_ratelimit_nfree_ctx == NGX_HTTP_RATELIMIT_FREE_CTX) {
        if (doomed != NULL) {
            ngx_free(doomed);
        }

        doomed = ctx;
        return;
    }

    ctx->next_free = ngx_http_ratelimit_free_ctx;
    ngx_http_ratelimit_free_ctx = ctx;
    ngx_http_ratelimit_nfree_ctx++;
}


/*
 * The context of a request whose module contexts an internal redirect or a
 * finalizing filter cleared (ngx_http_ratelimit_get_ctx, module.h): found
 * again as its pool's cleanup.
 */

ngx_http_ratelimit_ctx_t *
ngx_http_ratelimit_find_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t        *cln;
    ngx_http_ratelimit_ctx_t  *ctx;

    for (cln = r->main->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_ratelimit_ctx_cleanup) {
            ctx = cln->data;
            ngx_http_set_ctx(r->main, ctx, ngx_http_ratelimit_module);
            return ctx;
        }
    }

    return NULL;
}


/*
 * A request that waits, or whose rules settle when it ends, keeps its
 * checks in its pool, not on the handler's stack.
 */

ngx_int_t
ngx_http_ratelimit_keep_checks(ngx_http_ratelimit_ctx_t *ctx)
{
    rl_check_t  *checks;

    if (ctx->kept) {
        return NGX_OK;
    }

    checks = ngx_palloc(ctx->request->pool, ctx->rq.n * sizeof(rl_check_t));
    if (checks == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(checks, ctx->rq.checks, ctx->rq.n * sizeof(rl_check_t));
    ctx->rq.checks = checks;
    ctx->kept = 1;

    return NGX_OK;
}


/* The log phase's handler: the request settled, with its charges. */

ngx_int_t
ngx_http_ratelimit_end_handler(ngx_http_request_t *r)
{
    ngx_http_ratelimit_ctx_t  *ctx;

    if (r != r->main) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_ratelimit_get_ctx(r);

    if (ctx != NULL) {
        ngx_http_ratelimit_end(ctx, 1);
    }

    return NGX_DECLINED;
}


/*
 * Whatever finalized the request: Redis is not waited for any longer; what
 * a delayed request reserved is given back (once); a request waiting for a
 * slot leaves this worker's list; and one whose log phase did not run is
 * settled, keeping the cost each charge= rule reserved (its charge is not
 * known).
 */

static void
ngx_http_ratelimit_ctx_cleanup(void *data)
{
    ngx_shmtx_t               *mutex;
    ngx_http_ratelimit_ctx_t  *ctx = data;

    if (!(ctx->redis_waiting || ctx->delayed || ctx->in_wait || ctx->ends)) {
        ngx_http_ratelimit_free(ctx);   /* most requests: nothing held */
        return;
    }

    if (ctx->redis_waiting) {
        ngx_ratelimit_redis_cancel(ctx->redis);
    }

    if (ctx->delayed && ctx->refund) {
        ctx->refund = 0;
        mutex = ngx_ratelimit_lock(&ctx->rq);
        rl_request_refund(&ctx->rq, ngx_ratelimit_now());
        ngx_ratelimit_unlock(&ctx->rq, mutex);
    }

    ngx_http_ratelimit_wait_leave(ctx);
    ngx_http_ratelimit_end(ctx, 0);
    ngx_http_ratelimit_free(ctx);
}


/*
 * Settles the request, once: with charges evaluated (charges: in the log
 * phase) or without (the cost each charge= rule reserved stands).  A
 * request decided in Redis is settled there, its charges sent and not
 * waited for, and its concurrency leases released the same way (a Redis
 * zone has no rule that ends here but those: rl_redis_rule_ok); one
 * decided by on_redis_error=allow or deny reserved
 * nothing, and is charged nothing.
 */

void
ngx_http_ratelimit_end(ngx_http_ratelimit_ctx_t *ctx, ngx_uint_t charges)
{
    int                         freed, abandoned;
    size_t                      i;
    ngx_uint_t                  status;
    rl_check_t                 *c;
    ngx_shmtx_t                *mutex;
    ngx_http_request_t         *r;
    ngx_ratelimit_redis_t      *redis;
    ngx_http_ratelimit_rule_t  *rule;

    if (ctx->here) {
        /* a Redis zone's request: the slots it held in its server's zone
           from its call on, whatever became of it */
        ctx->here = 0;
        mutex = ngx_ratelimit_lock(&ctx->rq);
        (void) rl_request_free_here(&ctx->rq, ngx_ratelimit_now(), 1);
        ngx_ratelimit_unlock(&ctx->rq, mutex);
    }

    if (!ctx->ends || ctx->ended || !ctx->kept
        || (ctx->decided_by != NGX_RATELIMIT_BY_LOCAL
            && ctx->decided_by != NGX_RATELIMIT_BY_FALLBACK_LOCAL
            && ctx->decided_by != NGX_RATELIMIT_BY_REDIS))
    {
        return;
    }

    ctx->ended = 1;
    r = ctx->request;

    /* the client gone before the response: the status $status shows */
    status = r->err_status ? r->err_status : r->headers_out.status;
    abandoned = (status == NGX_HTTP_CLIENT_CLOSED_REQUEST);

    for (i = 0; i < ctx->rq.n; i++) {
        c = &ctx->rq.checks[i];
        rule = ngx_http_ratelimit_rule_of(c);
        c->charge = charges && rl_check_charge_wanted(c, abandoned)
                    ? ngx_http_ratelimit_charge_value(r, rule, c)
                    : RL_NO_CHARGE;
    }

    if (ctx->decided_by == NGX_RATELIMIT_BY_REDIS) {
        redis = ngx_ratelimit_zone_of(
                    ngx_ratelimit_rule_of(&ctx->rq.checks[0]))->redis;

        if (ctx->leased) {
            ctx->leased = 0;
            ngx_ratelimit_redis_lease_release(redis, &ctx->rq, &ctx->lease);
        }

        ngx_ratelimit_redis_settle(redis, &ctx->rq);

        if (charges) {
            ngx_http_ratelimit_charged(r, ctx);
        }

        return;
    }

    ctx->rq.latency_ms = ngx_http_ratelimit_latency(r);
    ctx->rq.end_status = status;

    mutex = ngx_ratelimit_lock(&ctx->rq);
    freed = rl_request_end(&ctx->rq, ngx_ratelimit_now());
    ngx_ratelimit_unlock(&ctx->rq, mutex);

    if (ctx->leased) {
        /* admitted while Redis was away: its leases, if written there */
        ctx->leased = 0;
        ngx_ratelimit_redis_lease_release(
            ngx_ratelimit_zone_of(ngx_ratelimit_rule_of(
                &ctx->rq.checks[0]))->redis, &ctx->rq, &ctx->lease);
    }

#if (NGX_DEBUG)
    if (r->connection->log->log_level & NGX_LOG_DEBUG_HTTP) {
        ngx_http_ratelimit_debug_end(r, &ctx->rq, freed, charges);
    }
#endif

    if (freed > 0) {
        ngx_http_ratelimit_wait_wake();
    }

    if (charges) {
        ngx_http_ratelimit_charged(r, ctx);
    }
}


/*
 * How long the request's upstream took to answer it, as
 * $upstream_response_time adds its tries up; the request's own time where
 * no upstream ran; -1 (the core's: since it was admitted) when neither is
 * known.
 */

static int64_t
ngx_http_ratelimit_latency(ngx_http_request_t *r)
{
    int64_t                     ms;
    ngx_uint_t                  i, n;
    ngx_time_t                 *tp;
    ngx_http_upstream_state_t  *state;

    if (r->upstream_states != NULL && r->upstream_states->nelts > 0) {
        state = r->upstream_states->elts;
        n = r->upstream_states->nelts;
        ms = 0;

        for (i = 0; i < n; i++) {
            if (state[i].peer != NULL
                && state[i].response_time != (ngx_msec_t) -1)
            {
                ms += state[i].response_time;
            }
        }

        return ms;
    }

    if (r->start_sec == 0) {
        return -1;
    }

    tp = ngx_timeofday();

    ms = (int64_t) (tp->sec - r->start_sec) * 1000
         + (int64_t) tp->msec - (int64_t) r->start_msec;

    return ms >= 0 ? ms : 0;
}


/*
 * What the request's charges came to: $ratelimit_charged (the first
 * charging rule's units; in Redis, the units sent), and a line for a charge
 * the debt's bound cut (in Redis: when its reply says so).
 */

static void
ngx_http_ratelimit_charged(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    size_t                      i;
    char                        err[RL_ERR_MAX];
    rl_check_t                 *c;
    ngx_http_ratelimit_rule_t  *rule;

    ctx->charged_set = 0;

    for (i = 0; i < ctx->rq.n; i++) {
        c = &ctx->rq.checks[i];
        rule = ngx_http_ratelimit_rule_of(c);

        if (c->charge == RL_NO_CHARGE) {
            continue;
        }

        if (!ctx->charged_set) {
            ctx->charged = c->charged;
            ctx->charged_set = 1;
        }

        if (c->capped) {
            ngx_snprintf((u_char *) err, sizeof(err),
                         "charge %uL capped at %uL: a key owes at most one "
                         "limit beyond its budget%Z", c->charge, c->charged);
            ngx_http_ratelimit_log_bad(r, rule, err);
        }
    }
}


/*
 * The value of a rule's charge=: the core says what it counts as
 * (rl_rule_charge); a bad one spends the request's cost, logged as other
 * bad values are.
 */

static uint64_t
ngx_http_ratelimit_charge_value(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule, rl_check_t *check)
{
    char       err[RL_ERR_MAX];
    uint64_t   units;
    ngx_str_t  value;

    if (ngx_http_complex_value(r, rule->vars->charge, &value) != NGX_OK) {
        ngx_str_null(&value);
    }

    if (rl_rule_charge((char *) value.data, value.len, check->cost, &units,
                       err, sizeof(err))
        != RL_OK)
    {
        ngx_http_ratelimit_log_bad(r, rule, err);
    }

    return units;
}
