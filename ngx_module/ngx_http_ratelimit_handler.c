
/*
 * ngx-ratelimit: the preaccess handler.
 *
 * A request's keys and costs are evaluated, the core decides the request
 * as a whole (rl_decide, under the zones' locks; or Redis, and
 * rl_redis_answer), and the handler acts on the verdict: the request goes
 * on, is rejected, or is held on a timer while a shaping rule delays it.
 *
 * Clock: the core gets nginx's cached wall-clock time in milliseconds
 * (ngx_timeofday()).  Wall time because fixed windows are aligned to the
 * Unix epoch and a zone's state must mean the same after a reload; the core
 * is jump-safe, so a clock stepping backwards never admits more.
 */


#include "ngx_http_ratelimit_module.h"


static ngx_int_t ngx_http_ratelimit_key(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule, ngx_str_t *key);
static uint64_t ngx_http_ratelimit_cost(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule);
static const rl_rule_t *ngx_http_ratelimit_applied(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule);
static ngx_int_t ngx_http_ratelimit_decide_local(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
static ngx_int_t ngx_http_ratelimit_decided(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
static ngx_int_t ngx_http_ratelimit_decide_redis(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
static void ngx_http_ratelimit_redis_done(ngx_http_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer);
static ngx_int_t ngx_http_ratelimit_redis_fallback(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
static ngx_int_t ngx_http_ratelimit_keep_checks(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
static ngx_int_t ngx_http_ratelimit_delay_request(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
static void ngx_http_ratelimit_delay(ngx_http_request_t *r);
static void ngx_http_ratelimit_ctx_cleanup(void *data);
static int ngx_http_ratelimit_alive(uint32_t pid);


ngx_int_t
ngx_http_ratelimit_handler(ngx_http_request_t *r)
{
    size_t                          order[RL_RULES_MAX];
    ngx_str_t                       key;
    ngx_uint_t                      i;
    rl_check_t                      checks[RL_RULES_MAX], *c;
    ngx_pool_cleanup_t             *cln;
    ngx_http_ratelimit_ctx_t       *ctx;
    ngx_http_ratelimit_rule_t      *rules;
    ngx_http_ratelimit_loc_conf_t  *rlcf;

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);

    if (rlcf->rules.nelts == 0) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_ratelimit_get_ctx(r);

    if (ctx != NULL) {
        if (ctx->resume) {   /* decided in Redis meanwhile */
            ctx->resume = 0;
            return ctx->rc;
        }

        /* waiting for Redis; or checked already: an internal redirect or
           a subrequest */
        return ctx->redis_waiting ? NGX_AGAIN : NGX_DECLINED;
    }

    /* the context and its pool cleanup in one allocation */

    cln = ngx_pcalloc(r->main->pool,
                      sizeof(ngx_pool_cleanup_t)
                      + sizeof(ngx_http_ratelimit_ctx_t));
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx = (ngx_http_ratelimit_ctx_t *) (cln + 1);
    cln->handler = ngx_http_ratelimit_ctx_cleanup;
    cln->data = ctx;
    cln->next = r->main->pool->cleanup;
    r->main->pool->cleanup = cln;
    ngx_http_set_ctx(r->main, ctx, ngx_http_ratelimit_module);

    ctx->request = r->main;
    ctx->headers = rlcf->headers;
    ctx->ends = rlcf->ends;

    /* one check a rule: the core decides the request from them all (an
       empty key exempts the request from its rule) */

    rules = rlcf->rules.elts;

    for (i = 0; i < rlcf->rules.nelts; i++) {
        if (ngx_http_ratelimit_key(r, &rules[i], &key) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        c = &checks[i];
        ngx_memzero(c, sizeof(rl_check_t));
        c->table = ngx_http_ratelimit_zone_of(&rules[i])->table;
        c->rule = &rules[i].rule;

        if ((rules[i].limit || rules[i].burst) && key.len) {
            c->rule = ngx_http_ratelimit_applied(r, &rules[i]);
            if (c->rule == NULL) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }
        }

        c->identity = rules[i].identity;
        c->key = key.data;
        c->key_len = key.len;
        c->cost = key.len ? ngx_http_ratelimit_cost(r, &rules[i]) : 0;
        c->data = &rules[i];
        c->counters = ngx_http_ratelimit_counters(r->connection->log,
                                                  &rules[i]);
    }

    ctx->rq.checks = checks;
    ctx->rq.n = rlcf->rules.nelts;
    ctx->rq.combine = rlcf->combine;
    ctx->rq.dry_run = rlcf->dry_run;
    ctx->rq.holder = (uint32_t) ngx_pid;
    ctx->rq.alive = ngx_http_ratelimit_alive;

    rl_request_hash(&ctx->rq);   /* outside the locks */

    /* (a request exempt from every rule, using no zone, is not sent) */

    if (ngx_http_ratelimit_zone_of(&rules[0])->redis != NULL
        && rl_request_lock_order(&ctx->rq, order) > 0)
    {
        return ngx_http_ratelimit_decide_redis(r, ctx);
    }

    ctx->decided_by = NGX_HTTP_RATELIMIT_BY_LOCAL;

    return ngx_http_ratelimit_decide_local(r, ctx);
}


/*
 * A key that is a single variable is read in place; any other is built by
 * the complex value's script.
 */

static ngx_int_t
ngx_http_ratelimit_key(ngx_http_request_t *r, ngx_http_ratelimit_rule_t *rule,
    ngx_str_t *key)
{
    ngx_http_variable_value_t  *vv;

    if (rule->key_index == NGX_ERROR) {
        return ngx_http_complex_value(r, &rule->key, key);
    }

    vv = ngx_http_get_indexed_variable(r, rule->key_index);

    if (vv == NULL || vv->not_found) {
        key->len = 0;
        key->data = NULL;
        return vv == NULL ? NGX_ERROR : NGX_OK;
    }

    key->len = vv->len;
    key->data = vv->data;

    return NGX_OK;
}


/* cost=$variable: the core says what a value counts as (rl_rule_cost). */

static uint64_t
ngx_http_ratelimit_cost(ngx_http_request_t *r, ngx_http_ratelimit_rule_t *rule)
{
    char       err[RL_ERR_MAX];
    uint64_t   cost;
    ngx_str_t  value;

    if (rule->cost == NULL) {
        return rule->rule.cost;
    }

    if (ngx_http_complex_value(r, rule->cost, &value) != NGX_OK) {
        ngx_str_null(&value);
    }

    if (rl_rule_cost(&rule->rule, (char *) value.data, value.len, &cost, err,
                     sizeof(err))
        != RL_OK)
    {
        ngx_http_ratelimit_log_bad(r, rule, err);
    }

    return cost;
}


/*
 * limit=$variable, burst=$variable: the rule as it applies to the request
 * (rl_rule_apply; a bad value is logged and replaced as the core says), in
 * the request's pool: a delayed request and the headers read it later.
 */

static const rl_rule_t *
ngx_http_ratelimit_applied(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule)
{
    char        err[RL_ERR_MAX];
    ngx_str_t   limit, burst;
    rl_rule_t  *applied;

    applied = ngx_palloc(r->main->pool, sizeof(rl_rule_t));
    if (applied == NULL) {
        return NULL;
    }

    ngx_str_null(&limit);
    ngx_str_null(&burst);

    if ((rule->limit
         && ngx_http_complex_value(r, rule->limit, &limit) != NGX_OK)
        || (rule->burst
            && ngx_http_complex_value(r, rule->burst, &burst) != NGX_OK))
    {
        return NULL;
    }

    if (rl_rule_apply(&rule->rule, (char *) limit.data, limit.len,
                      (char *) burst.data, burst.len, applied, err,
                      sizeof(err))
        != RL_OK)
    {
        ngx_http_ratelimit_log_bad(r, rule, err);
    }

    return applied;
}


/* The request decided in its zones, under their locks. */

static ngx_int_t
ngx_http_ratelimit_decide_local(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    size_t   order[RL_RULES_MAX], m;
    int64_t  now;

    now = ngx_http_ratelimit_now();
    m = rl_request_lock_order(&ctx->rq, order);

    ngx_http_ratelimit_lock(&ctx->rq, order, m, 1);
    (void) rl_decide(&ctx->rq, now);
    ngx_http_ratelimit_lock(&ctx->rq, order, m, 0);

    return ngx_http_ratelimit_decided(r, ctx);
}


/*
 * What the core's verdict means for the request (counted already): status, log,
 * and the handler's result (the status of a rejection, NGX_DECLINED to go
 * on, or NGX_AGAIN while a shaping rule holds it).
 */

static ngx_int_t
ngx_http_ratelimit_decided(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    ngx_uint_t                      level;
    rl_check_t                     *binding;
    rl_request_t                   *rq;
    ngx_http_ratelimit_loc_conf_t  *rlcf;

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);
    rq = &ctx->rq;

    /* rules with charge= or concurrency settle when the request ends */

    if (ctx->ends && ngx_http_ratelimit_keep_checks(r, ctx) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rq->verdict == RL_VERDICT_EXEMPT) {
        ctx->status = NGX_HTTP_RATELIMIT_EXEMPT;
        return NGX_DECLINED;
    }

    binding = &rq->checks[rq->binding];
    ctx->rule = ngx_http_ratelimit_rule_of(binding);
    ctx->applied = binding->rule;
    ctx->decision = binding->decision;
    ctx->tag = binding->tag;

    switch (rq->verdict) {

    case RL_VERDICT_REJECTED:
        ngx_http_ratelimit_log(r, rlcf->log_level,
                               rlcf->dry_run ? "would reject (dry run)"
                                             : "rejected", binding);

        if (rlcf->dry_run) {
            ctx->status = NGX_HTTP_RATELIMIT_REJECTED_DRY_RUN;
            return NGX_DECLINED;
        }

        ctx->status = NGX_HTTP_RATELIMIT_REJECTED;
        return rlcf->status_code;

    case RL_VERDICT_DELAYED:

        /* one level below rejections */
        level = rlcf->log_level == NGX_LOG_INFO
                || rlcf->log_level == NGX_HTTP_RATELIMIT_LOG_OFF
                ? rlcf->log_level : rlcf->log_level + 1;

        ngx_http_ratelimit_log(r, level,
                               rlcf->dry_run ? "would delay (dry run)"
                                             : "delaying", binding);

        if (rlcf->dry_run) {
            ctx->status = NGX_HTTP_RATELIMIT_DELAYED_DRY_RUN;
            return NGX_DECLINED;
        }

        ctx->status = NGX_HTTP_RATELIMIT_DELAYED;
        return ngx_http_ratelimit_delay_request(r, ctx);

    case RL_VERDICT_QUEUED:

        /* waits for a slot: logged once, one level below rejections */
        if (!ctx->in_wait) {
            level = rlcf->log_level == NGX_LOG_INFO
                    || rlcf->log_level == NGX_HTTP_RATELIMIT_LOG_OFF
                    ? rlcf->log_level : rlcf->log_level + 1;

            ngx_http_ratelimit_log(r, level, "waiting for a slot", binding);
        }

        return ngx_http_ratelimit_wait(r, ctx);

    default: /* RL_VERDICT_PASSED */
        ctx->status = NGX_HTTP_RATELIMIT_PASSED;
        return NGX_DECLINED;
    }
}


/* A request decided again, waiting for a slot (ngx_http_ratelimit_wait.c). */

ngx_int_t
ngx_http_ratelimit_decide_again(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    return ngx_http_ratelimit_decide_local(r, ctx);
}


/*
 * The phases run on for a request that was held (for Redis, or waiting for
 * a slot): the phase engine calls the handler again, which returns rc.
 */

void
ngx_http_ratelimit_resume(ngx_http_request_t *r, ngx_http_ratelimit_ctx_t *ctx,
    ngx_int_t rc)
{
    if (rc == NGX_AGAIN) {
        return;   /* held by a shaping rule: its timer runs the phases on */
    }

    ctx->rc = rc;
    ctx->resume = 1;
    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}


/* Whether the process holding a slot still exists (concurrency). */

static int
ngx_http_ratelimit_alive(uint32_t pid)
{
    return kill((ngx_pid_t) pid, 0) == 0 || ngx_errno != NGX_ESRCH;
}


/*
 * Sends the request's rules to Redis, one script call for all of them, and
 * waits for the reply on the event loop: the worker serves other requests
 * meanwhile.
 */

static ngx_int_t
ngx_http_ratelimit_decide_redis(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    ngx_http_ratelimit_zone_t        *zone;
    ngx_http_ratelimit_redis_wait_t  *w;

    zone = ngx_http_ratelimit_zone_of(
               ngx_http_ratelimit_rule_of(&ctx->rq.checks[0]));

    if (ngx_http_ratelimit_keep_checks(r, ctx) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    w = &ctx->redis;
    w->request = r;
    w->handler = ngx_http_ratelimit_redis_done;
    w->rq = &ctx->rq;

    if (ngx_http_ratelimit_redis_send(zone->redis, w) != NGX_OK) {
        /* Redis unreachable now: no waiting at all */
        return ngx_http_ratelimit_redis_fallback(r, ctx);
    }

    ctx->redis_waiting = 1;

    if (r->connection->read->ready) {
        ngx_post_event(r->connection->read, &ngx_posted_events);

    } else if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;

    return NGX_AGAIN;
}


/*
 * Redis decided the request (answer: the core took the script's answer and
 * concluded the request) or failed it (NULL: on_redis_error decides), and
 * the phases run on.
 */

static void
ngx_http_ratelimit_redis_done(ngx_http_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer)
{
    ngx_int_t                   rc;
    ngx_http_request_t         *r = w->request;
    ngx_http_ratelimit_ctx_t   *ctx;
    ngx_http_ratelimit_zone_t  *zone;

    ctx = ngx_http_ratelimit_get_ctx(r);
    zone = ngx_http_ratelimit_zone_of(
               ngx_http_ratelimit_rule_of(&ctx->rq.checks[0]));
    ctx->redis_waiting = 0;

    ngx_http_set_log_request(r->connection->log, r);

    if (answer == NULL) {
        rc = ngx_http_ratelimit_redis_fallback(r, ctx);

    } else {
        (void) ngx_atomic_fetch_add(&zone->redis->stats->decisions, 1);
        ctx->decided_by = NGX_HTTP_RATELIMIT_BY_REDIS;

        /* counted in this server's zone (its rules' counters, a refusal
           among the top keys), under its lock: the only one a Redis zone's
           request takes */

        ngx_shmtx_lock(&zone->shpool->mutex);
        rl_request_count(&ctx->rq, ngx_http_ratelimit_now());
        ngx_shmtx_unlock(&zone->shpool->mutex);

        rc = ngx_http_ratelimit_decided(r, ctx);
    }

    ngx_http_ratelimit_resume(r, ctx, rc);
}


/*
 * on_redis_error: local decides in the zone with the same rules; allow
 * passes the request, deny rejects it (both without rate-limit headers:
 * there is no decision to describe).
 */

static ngx_int_t
ngx_http_ratelimit_redis_fallback(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    ngx_http_ratelimit_zone_t      *zone;
    ngx_http_ratelimit_loc_conf_t  *rlcf;

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);
    zone = ngx_http_ratelimit_zone_of(
               ngx_http_ratelimit_rule_of(&ctx->rq.checks[0]));

    (void) ngx_atomic_fetch_add(&zone->redis->stats->fallbacks, 1);

    switch (zone->redis->on_error) {

    case NGX_HTTP_RATELIMIT_REDIS_ALLOW:
        ctx->decided_by = NGX_HTTP_RATELIMIT_BY_FALLBACK_ALLOW;
        ctx->status = NGX_HTTP_RATELIMIT_PASSED;
        return NGX_DECLINED;

    case NGX_HTTP_RATELIMIT_REDIS_DENY:
        ctx->decided_by = NGX_HTTP_RATELIMIT_BY_FALLBACK_DENY;

        if (rlcf->dry_run) {
            ctx->status = NGX_HTTP_RATELIMIT_REJECTED_DRY_RUN;
            return NGX_DECLINED;
        }

        ctx->status = NGX_HTTP_RATELIMIT_REJECTED;
        return rlcf->status_code;

    default: /* NGX_HTTP_RATELIMIT_REDIS_LOCAL */
        ctx->decided_by = NGX_HTTP_RATELIMIT_BY_FALLBACK_LOCAL;
        return ngx_http_ratelimit_decide_local(r, ctx);
    }
}


/*
 * A request that waits, or whose rules settle when it ends, keeps its checks
 * in its pool, not on the stack.
 */

static ngx_int_t
ngx_http_ratelimit_keep_checks(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    rl_check_t  *checks;

    if (ctx->kept) {
        return NGX_OK;
    }

    checks = ngx_palloc(r->main->pool, ctx->rq.n * sizeof(rl_check_t));
    if (checks == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(checks, ctx->rq.checks, ctx->rq.n * sizeof(rl_check_t));
    ctx->rq.checks = checks;
    ctx->kept = 1;

    return NGX_OK;
}


/*
 * Holds a request for its delay on a timer, as limit_req does: the worker
 * serves others meanwhile, and a client that closes is noticed.  What the
 * request reserved in the zones is given back by the context's cleanup if
 * it is finalized before its release (what Redis reserved stays there).
 */

static ngx_int_t
ngx_http_ratelimit_delay_request(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    if (ngx_http_ratelimit_keep_checks(r, ctx) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (r->connection->read->ready) {
        ngx_post_event(r->connection->read, &ngx_posted_events);

    } else {
        if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    ctx->waiting = 1;
    ctx->refund = ctx->decided_by != NGX_HTTP_RATELIMIT_BY_REDIS;
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_ratelimit_delay;

    r->connection->write->delayed = 1;
    ngx_add_timer(r->connection->write, (ngx_msec_t) ctx->rq.delay_ms);

    return NGX_AGAIN;
}


static void
ngx_http_ratelimit_delay(ngx_http_request_t *r)
{
    ngx_event_t               *wev;
    ngx_http_ratelimit_ctx_t  *ctx;

    wev = r->connection->write;

    if (wev->delayed) {
        if (ngx_handle_write_event(wev, 0) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        }

        return;
    }

    ctx = ngx_http_ratelimit_get_ctx(r);
    if (ctx != NULL) {
        ctx->waiting = 0;
    }

    if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;

    ngx_http_core_run_phases(r);
}


int64_t
ngx_http_ratelimit_now(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (int64_t) tp->sec * 1000 + tp->msec;
}


/*
 * The request's context.  Internal redirects (error_page, try_files, ...)
 * and a filter finalizing the request clear module contexts, so the context
 * also lives as a cleanup of the main request's pool, where it is found
 * again (as realip finds its own): a redirected request is neither counted
 * twice nor left without its headers and variables.
 */

ngx_http_ratelimit_ctx_t *
ngx_http_ratelimit_get_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t        *cln;
    ngx_http_ratelimit_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r->main, ngx_http_ratelimit_module);

    if (ctx != NULL || !(r->main->internal || r->main->filter_finalize)) {
        return ctx;
    }

    for (cln = r->main->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_ratelimit_ctx_cleanup) {
            ctx = cln->data;
            ngx_http_set_ctx(r->main, ctx, ngx_http_ratelimit_module);
            return ctx;
        }
    }

    return NULL;
}


static void
ngx_http_ratelimit_ctx_cleanup(void *data)
{
    ngx_http_ratelimit_ctx_t  *ctx = data;

    size_t  order[RL_RULES_MAX], m;

    if (ctx->redis_waiting) {
        ngx_http_ratelimit_redis_cancel(&ctx->redis);
    }

    /* a delayed request finalized before its release, whatever finalized
       it: what it reserved is given back, once */

    if (ctx->waiting && ctx->refund) {
        ctx->refund = 0;
        m = rl_request_lock_order(&ctx->rq, order);
        ngx_http_ratelimit_lock(&ctx->rq, order, m, 1);
        rl_request_refund(&ctx->rq, ngx_http_ratelimit_now());
        ngx_http_ratelimit_lock(&ctx->rq, order, m, 0);
    }

    /* a request waiting for a slot leaves this worker's list; one whose
       log phase did not run gives back its slots and places (and keeps
       the cost a charge= rule reserved: its charge is not known) */

    ngx_http_ratelimit_wait_leave(ctx);
    ngx_http_ratelimit_end(ctx, 0);
}
