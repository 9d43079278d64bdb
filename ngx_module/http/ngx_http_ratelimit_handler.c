
/*
 * ngx-ratelimit: the preaccess handler.
 *
 * A request's rules' inputs are evaluated (keys, costs, limits), the core
 * decides the request as a whole, once (rl_decide under the zones' locks;
 * or Redis, whose reply the core judges and concludes: rl_redis_answer),
 * and the handler applies the core's action: the request passes, is
 * refused with the location's status (a gRPC call: answered as gRPC,
 * ngx_http_ratelimit_grpc.c), is held while a shaping rule delays it, or
 * waits for a slot (ngx_http_ratelimit_wait.c).
 *
 * Clock: the core gets nginx's cached wall-clock time in milliseconds
 * (ngx_timeofday()).  Wall time because fixed windows are aligned to the
 * Unix epoch and a zone's state must mean the same after a reload; the core
 * is jump-safe, so a clock stepping backwards never admits more.
 */


#include "ngx_http_ratelimit_handler.h"
#include "ngx_http_ratelimit_grpc.h"
#include "ngx_http_ratelimit_request.h"
#include "ngx_http_ratelimit_wait.h"
#include "ngx_http_ratelimit_log.h"
#include "ngx_ratelimit_rule.h"
#include "ngx_ratelimit_sync.h"
#include "ngx_ratelimit_zone.h"
#include "ngx_ratelimit_redis.h"
#include "ngx_ratelimit_redis_settle.h"


static ngx_int_t ngx_http_ratelimit_check_once(ngx_http_request_t *r,
    ngx_http_ratelimit_loc_conf_t *rlcf) NGX_RATELIMIT_NOINLINE;
static ngx_int_t ngx_http_ratelimit_decide(ngx_http_request_t *r,
    ngx_http_ratelimit_loc_conf_t *rlcf);
static ngx_int_t ngx_http_ratelimit_key(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule, ngx_str_t *key);
static ngx_inline ngx_int_t ngx_http_ratelimit_value(ngx_http_request_t *r,
    ngx_http_complex_value_t *cv, ngx_int_t index, ngx_str_t *value);
static ngx_int_t ngx_http_ratelimit_vars(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule, rl_check_t *c);
static uint64_t ngx_http_ratelimit_cost(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule);
static const rl_rule_t *ngx_http_ratelimit_rule_as_applied(
    ngx_http_request_t *r, ngx_http_ratelimit_rule_t *rule);
static ngx_int_t ngx_http_ratelimit_decide_local(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
static ngx_int_t ngx_http_ratelimit_apply_verdict(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
static ngx_int_t ngx_http_ratelimit_act_on_verdict(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, ngx_http_ratelimit_loc_conf_t *rlcf)
    NGX_RATELIMIT_NOINLINE;
static ngx_int_t ngx_http_ratelimit_request_policy(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
static void ngx_http_ratelimit_note_override(ngx_http_ratelimit_ctx_t *ctx);
static ngx_int_t ngx_http_ratelimit_handler_rc(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, ngx_int_t rc);
static ngx_int_t ngx_http_ratelimit_decide_redis(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
static void ngx_http_ratelimit_redis_done(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer);
static void ngx_http_ratelimit_redis_decided(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer);
static ngx_int_t ngx_http_ratelimit_redis_verdict(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, ngx_ratelimit_zone_t *zone,
    ngx_uint_t by);
static ngx_int_t ngx_http_ratelimit_redis_fallback(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
static void ngx_http_ratelimit_retry(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, ngx_uint_t last);
static void ngx_http_ratelimit_resume(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, ngx_int_t rc);
static int ngx_http_ratelimit_alive(uint32_t pid);
static rl_rule_room_t *ngx_http_ratelimit_more_room(rl_request_t *rq);


/*
 * Every request of the server passes here: one without rules returns at
 * once, before the frame of the decision (its checks) is set up.  Rules
 * limit the client's request, in the location that receives it: a
 * subrequest (auth_request, SSI, mirror, add_before_body) passes its
 * location's rules uncounted.  Its refusal would reach the client as
 * something else (auth_request answers 500 for a 429), and a slot it took
 * would be held until the main request ends.
 */

ngx_int_t
ngx_http_ratelimit_handler(ngx_http_request_t *r)
{
    ngx_http_ratelimit_loc_conf_t  *rlcf;

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);

    if (rlcf->rules.nelts == 0 || r != r->main) {
        return NGX_DECLINED;
    }

    return ngx_http_ratelimit_check_once(r, rlcf);
}


/* A request of a location with rules: decided once. */

static ngx_int_t
ngx_http_ratelimit_check_once(ngx_http_request_t *r,
    ngx_http_ratelimit_loc_conf_t *rlcf)
{
    ngx_http_ratelimit_ctx_t  *ctx;

    ctx = ngx_http_ratelimit_get_ctx(r);

    if (ctx == NULL) {
        return ngx_http_ratelimit_decide(r, rlcf);
    }

    if (ctx->resume) {   /* decided meanwhile: Redis, or a slot */
        ctx->resume = 0;
        return ngx_http_ratelimit_handler_rc(r, ctx, ctx->rc);
    }

    /* waiting for Redis; or decided already: an internal redirect */
    return ctx->redis_waiting ? NGX_AGAIN : NGX_DECLINED;
}


/* A request's rules evaluated, and the request decided. */

static ngx_int_t
ngx_http_ratelimit_decide(ngx_http_request_t *r,
    ngx_http_ratelimit_loc_conf_t *rlcf)
{
    ngx_str_t                   key;
    ngx_uint_t                  i;
    rl_check_t                  checks[RL_RULES_MAX], *c;
    ngx_http_ratelimit_ctx_t   *ctx;
    ngx_http_ratelimit_rule_t  *rules;

    ctx = ngx_http_ratelimit_new_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->headers = rlcf->headers;
    ctx->ends = rlcf->ends;

    /* one check a rule: the core decides the request from them all (an
       empty key exempts the request from its rule) */

    rules = rlcf->rules.elts;

    for (i = 0; i < rlcf->rules.nelts; i++) {

        /* a key that is the same one variable as the rule before's: its
           value taken from it */

        if (!(i > 0 && rules[i].key_index != NGX_ERROR
              && rules[i].key_index == rules[i - 1].key_index)
            && ngx_http_ratelimit_key(r, &rules[i], &key) != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        /* its inputs written below, the rest zeroed */

        c = &checks[i];
        ngx_ratelimit_zero(&c->tag,
                           sizeof(rl_check_t) - offsetof(rl_check_t, tag));
        c->table = ngx_ratelimit_zone_of(&rules[i].common)->table;
        c->rule = &rules[i].common.rule;
        c->identity = rules[i].common.identity;
        c->key = key.data;
        c->key_len = key.len;
        c->cost = key.len ? rules[i].common.rule.cost : 0;
        c->data = &rules[i];
        c->counters = ngx_ratelimit_rule_counters(r->connection->log,
                                                  &rules[i].common);

        if (rules[i].vars != NULL && key.len
            && ngx_http_ratelimit_vars(r, &rules[i], c) != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    ctx->rq.checks = checks;
    ctx->rq.n = rlcf->rules.nelts;
    ctx->rq.combine = rlcf->combine;
    ctx->rq.dry_run = rlcf->dry_run;
    ctx->rq.holder = (uint32_t) ngx_pid;
    ctx->rq.alive = ngx_http_ratelimit_alive;
    ctx->rq.room = &ctx->room;
    ctx->rq.more_room = ngx_http_ratelimit_more_room;
    ctx->rq.overridden = 0;
    ctx->rq.last = 0;

    rl_request_hash(&ctx->rq);   /* outside the locks */

    /* (a request exempt from every rule, using no zone, is not sent) */

    if (ngx_ratelimit_zone_of(&rules[0].common)->redis != NULL
        && ctx->rq.locks > 0)
    {
        return ngx_http_ratelimit_handler_rc(r, ctx,
                                         ngx_http_ratelimit_decide_redis(r,
                                                                         ctx));
    }

    ctx->decided_by = NGX_RATELIMIT_BY_LOCAL;

    return ngx_http_ratelimit_handler_rc(r, ctx,
                                     ngx_http_ratelimit_decide_local(r, ctx));
}


/*
 * What the handler returns to the phase engine for a decided request: rc,
 * or, for a refused gRPC call, nothing more to run (it was answered as
 * gRPC, in the phase: a refusal decided in a Redis reply or a slot's wait
 * comes here too, when the phases run on).
 */

static ngx_int_t
ngx_http_ratelimit_handler_rc(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, ngx_int_t rc)
{
    if (ctx->grpc) {
        return ngx_http_ratelimit_grpc_answer(r, ctx);
    }

    return rc;
}


static ngx_int_t
ngx_http_ratelimit_key(ngx_http_request_t *r, ngx_http_ratelimit_rule_t *rule,
    ngx_str_t *key)
{
    return ngx_http_ratelimit_value(r, rule->key, rule->key_index, key);
}


/* A value: its one variable read in place (index), else cv evaluated. */

static ngx_inline ngx_int_t
ngx_http_ratelimit_value(ngx_http_request_t *r, ngx_http_complex_value_t *cv,
    ngx_int_t index, ngx_str_t *value)
{
    ngx_http_variable_value_t  *vv;

    if (index == NGX_ERROR) {
        return ngx_http_complex_value(r, cv, value);
    }

    vv = ngx_http_get_indexed_variable(r, index);

    if (vv == NULL || vv->not_found) {
        value->len = 0;
        value->data = NULL;
        return vv == NULL ? NGX_ERROR : NGX_OK;
    }

    value->len = vv->len;
    value->data = vv->data;

    return NGX_OK;
}


/* A rule with variables, as it applies to the request: its cost, class,
   tenant, limit and burst (most rules have none: their check holds the
   rule as it is). */

static ngx_int_t
ngx_http_ratelimit_vars(ngx_http_request_t *r, ngx_http_ratelimit_rule_t *rule,
    rl_check_t *c)
{
    ngx_str_t  value;

    if (rule->vars->cost != NULL) {
        c->cost = ngx_http_ratelimit_cost(r, rule);
    }

    /* priority=: a value naming no class is the rule's default class (the
       core's), never an error */

    if (rule->vars->priority != NULL) {
        if (ngx_http_ratelimit_value(r, rule->vars->priority,
                                     rule->vars->priority_index, &value)
            != NGX_OK)
        {
            ngx_str_null(&value);
        }

        c->klass = rl_class_of(c->rule, (char *) value.data, value.len);
    }

    if (rule->vars->fair != NULL) {
        if (ngx_http_ratelimit_value(r, rule->vars->fair,
                                     rule->vars->fair_index, &value)
            != NGX_OK)
        {
            ngx_str_null(&value);
        }

        c->tenant = rl_tenant_of((char *) value.data, value.len);
    }

    if (rule->vars->limit != NULL || rule->vars->burst != NULL) {
        c->rule = ngx_http_ratelimit_rule_as_applied(r, rule);
        if (c->rule == NULL) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* cost=$variable: the core says what a value counts as (rl_rule_cost). */

static uint64_t
ngx_http_ratelimit_cost(ngx_http_request_t *r, ngx_http_ratelimit_rule_t *rule)
{
    char       err[RL_ERR_MAX];
    uint64_t   cost;
    ngx_log_t  log;
    ngx_str_t  value;

    if (ngx_http_complex_value(r, rule->vars->cost, &value) != NGX_OK) {
        ngx_str_null(&value);
    }

    cost = ngx_ratelimit_rule_cost(&rule->common, &value, err);

    if (err[0] != '\0') {
        ngx_ratelimit_log_bad(ngx_http_ratelimit_request_log(r, &log),
                              &rule->common, err);
    }

    return cost;
}


/*
 * limit=$variable, burst=$variable: the rule as it applies to the request
 * (ngx_ratelimit_rule_applied), in the request's pool: a delayed request
 * and the headers read it later.
 */

static const rl_rule_t *
ngx_http_ratelimit_rule_as_applied(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule)
{
    char              err[RL_ERR_MAX];
    ngx_log_t         log;
    ngx_str_t         limit, burst;
    const rl_rule_t  *applied;

    ngx_str_null(&limit);
    ngx_str_null(&burst);

    /* a rule with a variable limit or burst: its vars are there */

    if ((rule->vars->limit
         && ngx_http_complex_value(r, rule->vars->limit, &limit) != NGX_OK)
        || (rule->vars->burst
            && ngx_http_complex_value(r, rule->vars->burst, &burst)
               != NGX_OK))
    {
        return NULL;
    }

    applied = ngx_ratelimit_rule_applied(r->main->pool, &rule->common,
                                         &limit, &burst, err);

    if (err[0] != '\0') {
        ngx_ratelimit_log_bad(ngx_http_ratelimit_request_log(r, &log),
                              &rule->common, err);
    }

    return applied;
}


/* The request decided in its zones, under their locks. */

static ngx_int_t
ngx_http_ratelimit_decide_local(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    int64_t       now;
    ngx_shmtx_t  *mutex;

    now = ngx_ratelimit_now();

    mutex = ngx_ratelimit_lock(&ctx->rq);
    (void) rl_decide(&ctx->rq, now);
    if (ngx_ratelimit_sync_zones) {
        ngx_ratelimit_sync_note(&ctx->rq, now);
    }
    ngx_ratelimit_unlock(&ctx->rq, mutex);

    return ngx_http_ratelimit_apply_verdict(r, ctx);
}


/*
 * The core's action applied to a decided request (counted already): the
 * binding rule and its decision kept for the headers and variables, the
 * log line, and the handler's result: NGX_DECLINED to go on, the status of
 * a refusal, or NGX_AGAIN while a shaping rule holds it or it waits for a
 * slot.  Most requests pass with nothing more to do: the rest is
 * ngx_http_ratelimit_act_on_verdict()'s.
 */

static ngx_int_t
ngx_http_ratelimit_apply_verdict(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    rl_check_t                     *binding;
    rl_request_t                   *rq;
    ngx_http_ratelimit_loc_conf_t  *rlcf;

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);
    rq = &ctx->rq;

    ctx->status = rq->status;

    if (rq->binding < rq->n) {
        binding = &rq->checks[rq->binding];
        ctx->rule = ngx_http_ratelimit_rule_of(binding);
        ctx->applied = binding->rule;
        ctx->decision = binding->decision;
        ctx->tag = binding->tag;
        ctx->klass = binding->klass;
        ctx->shed = binding->shed;
        ctx->policy = rlcf->policy;
    }

    if (rq->overridden) {
        ngx_http_ratelimit_note_override(ctx);
    }

    if (rq->action == RL_ACTION_PASS && rq->verdict == RL_VERDICT_PASSED
        && !ctx->ends
        && !rlcf->policy_each
        && !(rq->overridden
             && (rlcf->headers & NGX_HTTP_RATELIMIT_HEADERS_IETF))
#if (NGX_DEBUG)
        && !(r->connection->log->log_level & NGX_LOG_DEBUG_HTTP)
#endif
       )
    {
        return NGX_DECLINED;
    }

    return ngx_http_ratelimit_act_on_verdict(r, ctx, rlcf);
}


static ngx_int_t
ngx_http_ratelimit_act_on_verdict(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, ngx_http_ratelimit_loc_conf_t *rlcf)
{
    size_t         len;
    rl_request_t  *rq;

    rq = &ctx->rq;

    /* rules with charge= or concurrency settle when the request ends */

    if (ctx->ends && ngx_http_ratelimit_keep_checks(ctx) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rq->binding < rq->n) {
        if ((rlcf->policy_each
             || (rq->overridden
                 && (rlcf->headers & NGX_HTTP_RATELIMIT_HEADERS_IETF)))
            && ngx_http_ratelimit_request_policy(r, ctx) != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (rq->verdict != RL_VERDICT_PASSED) {
            ngx_http_ratelimit_log_verdict(r, rlcf->log_level, rq,
                                           ctx->in_wait);
        }
    }

#if (NGX_DEBUG)
    if (r->connection->log->log_level & NGX_LOG_DEBUG_HTTP) {
        ngx_http_ratelimit_debug_decision(r, rq);
    }
#endif

    switch (rq->action) {

    case RL_ACTION_REFUSE:
        ctx->grpc = ngx_http_ratelimit_grpc_kind(r, rlcf, &len);
        return ngx_http_ratelimit_refusal_status(ctx, rlcf, 0);

    case RL_ACTION_DELAY:
        if (ngx_http_ratelimit_keep_checks(ctx) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_ratelimit_delay(r, ctx);

    case RL_ACTION_WAIT:
        return ngx_http_ratelimit_wait(r, ctx, ngx_http_ratelimit_retry);

    default: /* RL_ACTION_PASS */
        return NGX_DECLINED;
    }
}


/* The override $ratelimit_override names (the core's choice). */

static void
ngx_http_ratelimit_note_override(ngx_http_ratelimit_ctx_t *ctx)
{
    size_t       i;
    rl_check_t  *c;

    i = rl_request_override_check(&ctx->rq);

    if (i == ctx->rq.n) {
        ctx->override = 0;
        return;
    }

    c = &ctx->rq.checks[i];

    ctx->override = c->override;
    ctx->override_rule = c->configured ? c->configured : c->rule;
    ctx->override_key.data = (u_char *) c->key;
    ctx->override_key.len = (c->override & 0xf) == RL_OVERRIDE_ALLOW
                            ? c->key_held : c->key_len;
}


/*
 * The RateLimit-Policy field of a request whose rules' policies depend on
 * it (a variable limit, a monthly quota, an override): each rule as it
 * applied.
 */

static ngx_int_t
ngx_http_ratelimit_request_policy(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    size_t            i, n;
    const rl_rule_t  *rules[RL_RULES_MAX];

    n = ctx->rq.n;

    for (i = 0; i < n; i++) {
        rules[i] = ctx->rq.checks[i].rule;
    }

    ctx->policy.data = ngx_pnalloc(r->pool, n * RL_POLICY_ITEM_MAX);
    if (ctx->policy.data == NULL) {
        return NGX_ERROR;
    }

    ctx->policy.len = rl_policy_field(rules, n, ngx_ratelimit_now(),
                                      (char *) ctx->policy.data,
                                      n * RL_POLICY_ITEM_MAX);

    return NGX_OK;
}


/*
 * Sends the request's rules to Redis, one script call for all of them, and
 * waits for the reply on the event loop: the worker serves other requests
 * meanwhile.  Unless a refusal Redis gave and the zone remembers refuses
 * it still (rl_refusals_find: the core says whether, and concludes it):
 * then it is refused at once, as Redis would refuse it.
 */

static ngx_int_t
ngx_http_ratelimit_decide_redis(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    ngx_shmtx_t                    *mutex;
    ngx_ratelimit_zone_t           *zone;
    ngx_http_ratelimit_loc_conf_t  *rlcf;
    ngx_ratelimit_redis_t          *redis;
    ngx_ratelimit_redis_wait_t     *w;

    zone = ngx_ratelimit_zone_of(ngx_ratelimit_rule_of(&ctx->rq.checks[0]));
    redis = zone->redis;

    switch (ngx_ratelimit_redis_known(zone, &ctx->rq)) {

    case NGX_RATELIMIT_REDIS_OVERRIDE:
        return ngx_http_ratelimit_redis_verdict(r, ctx, zone,
                                                NGX_RATELIMIT_BY_LOCAL);

    case NGX_RATELIMIT_REDIS_REMEMBERED:
        return ngx_http_ratelimit_redis_verdict(r, ctx, zone,
                                           NGX_RATELIMIT_BY_REDIS_CACHED);
    }

    if (ngx_http_ratelimit_keep_checks(ctx) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    w = ngx_pcalloc(r->pool, sizeof(ngx_ratelimit_redis_wait_t));
    if (w == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->redis = w;
    ngx_http_ratelimit_redis_owner(w, r);
    w->handler = ngx_http_ratelimit_redis_done;
    w->rq = &ctx->rq;

    /* concurrency: the leases the call may take, named; and the slots the
       request holds in this server's zone while it runs, whoever decides
       it, so that the server's own count holds every request it has in
       flight (the call refuses a check the server holds the limit of) */
    ngx_ratelimit_redis_lease_prepare(redis, &ctx->rq);

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);

    if (rlcf->slots) {
        mutex = ngx_ratelimit_lock(&ctx->rq);
        ctx->here = rl_request_hold_here(&ctx->rq, ngx_ratelimit_now())
                    > 0;
        ngx_ratelimit_unlock(&ctx->rq, mutex);
    }

    /* what a refusal in the reply may be remembered from: before sending */
    ctx->redis_epoch = rl_refusals_epoch(redis->refusals);
    ctx->redis_sent = ngx_ratelimit_monotonic_ms();

    if (ngx_ratelimit_redis_send(redis, w) != NGX_OK) {
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


static void
ngx_http_ratelimit_redis_done(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer)
{
    ngx_http_ratelimit_redis_answered(w, answer,
                                      ngx_http_ratelimit_redis_decided);
}


/*
 * Redis decided the request (answer: the core took the script's answer and
 * concluded the request) or failed it (NULL: on_redis_error decides), and
 * the phases run on.
 */

static void
ngx_http_ratelimit_redis_decided(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer)
{
    ngx_int_t                  rc;
    ngx_http_request_t        *r = w->owner;
    ngx_http_ratelimit_ctx_t  *ctx;
    ngx_ratelimit_zone_t      *zone;

    ctx = ngx_http_ratelimit_get_ctx(r);
    zone = ngx_ratelimit_zone_of(ngx_ratelimit_rule_of(&ctx->rq.checks[0]));
    ctx->redis_waiting = 0;

    ngx_http_set_log_request(r->connection->log, r);

    if (answer == NULL) {
        /* the call may have taken its leases all the same: given back */
        ngx_ratelimit_redis_lease_release(zone->redis, &ctx->rq, NULL);
        rc = ngx_http_ratelimit_redis_fallback(r, ctx);

    } else {
        (void) ngx_atomic_fetch_add(&zone->redis->stats->decisions, 1);
        rc = ngx_http_ratelimit_redis_verdict(r, ctx, zone,
                                              NGX_RATELIMIT_BY_REDIS);
    }

    ngx_http_ratelimit_resume(r, ctx, rc);
}


/*
 * A request Redis decided (by: in Redis, or from a refusal remembered),
 * counted in this server's zone (its rules' counters, a refusal among the
 * top keys) under its lock, the only one a Redis zone's request takes; and
 * Redis's answer noted among the refusals remembered (rl_refusals_store:
 * the core says whether it is one to remember), then applied.
 */

static ngx_int_t
ngx_http_ratelimit_redis_verdict(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, ngx_ratelimit_zone_t *zone,
    ngx_uint_t by)
{
    ctx->decided_by = by;

    ctx->here = ngx_ratelimit_redis_counted(zone, &ctx->rq,
                                            by == NGX_RATELIMIT_BY_REDIS,
                                            ctx->redis_epoch, ctx->redis_sent,
                                            ctx->here);

    if (by == NGX_RATELIMIT_BY_REDIS) {
        ctx->leased = ngx_ratelimit_redis_lease_hold(zone->redis, &ctx->rq,
                                                     &ctx->lease);
    }

    return ngx_http_ratelimit_apply_verdict(r, ctx);
}


/*
 * on_redis_error: local decides in the zone with the same rules (its
 * slots count every request of the server in flight, those holding leases
 * too), and a request it admits keeps its leases' names, which its worker
 * writes into Redis once Redis answers again; allow passes the request,
 * deny refuses it (both without rate-limit headers: there is no decision
 * to describe).
 */

static ngx_int_t
ngx_http_ratelimit_redis_fallback(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    ngx_int_t               rc;
    ngx_ratelimit_zone_t   *zone;
    ngx_ratelimit_redis_t  *redis;

    zone = ngx_ratelimit_zone_of(ngx_ratelimit_rule_of(&ctx->rq.checks[0]));
    redis = zone->redis;

    ngx_ratelimit_redis_failed(zone, &ctx->rq, ctx->here);
    ctx->here = 0;

    switch (redis->on_error) {

    case NGX_RATELIMIT_REDIS_LOCAL:
        ctx->decided_by = NGX_RATELIMIT_BY_FALLBACK_LOCAL;
        rc = ngx_http_ratelimit_decide_local(r, ctx);
        break;

    case NGX_RATELIMIT_REDIS_DENY:
        ctx->decided_by = NGX_RATELIMIT_BY_FALLBACK_DENY;
        rl_request_fail(&ctx->rq, 1);
        rc = ngx_http_ratelimit_apply_verdict(r, ctx);
        break;

    default: /* NGX_RATELIMIT_REDIS_ALLOW */
        ctx->decided_by = NGX_RATELIMIT_BY_FALLBACK_ALLOW;
        rl_request_fail(&ctx->rq, 0);
        rc = ngx_http_ratelimit_apply_verdict(r, ctx);
        break;
    }

    ctx->leased = ngx_ratelimit_redis_lease_keep(redis, &ctx->rq,
                                                 &ctx->lease);

    return rc;
}


/*
 * A request waiting for a slot decided again (last: it may wait no longer);
 * unless it waits still, the phases run on with the verdict.
 */

static void
ngx_http_ratelimit_retry(ngx_http_request_t *r, ngx_http_ratelimit_ctx_t *ctx,
    ngx_uint_t last)
{
    ngx_int_t  rc;

    ctx->rq.last = last;

    rc = ngx_http_ratelimit_decide_local(r, ctx);

    if (ctx->rq.action != RL_ACTION_WAIT) {
        ngx_http_ratelimit_wait_leave(ctx);
        ngx_http_ratelimit_resume(r, ctx, rc);
    }
}


/*
 * The phases run on for a request that was held (for Redis, or waiting for
 * a slot): the phase engine calls the handler again, which returns rc.
 */

static void
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


/*
 * Memory for the rule a limit override makes, living as long as the
 * request (a delayed request and the headers read it later), for a check
 * after the first that meets one: the first takes the context's room,
 * which the core finds as the last request the context served left it
 * (most often the same rule and override: used as it is).
 */

static rl_rule_room_t *
ngx_http_ratelimit_more_room(rl_request_t *rq)
{
    ngx_http_ratelimit_ctx_t  *ctx;

    ctx = (ngx_http_ratelimit_ctx_t *)
          ((u_char *) rq - offsetof(ngx_http_ratelimit_ctx_t, rq));

    return ngx_pcalloc(ctx->request->pool, sizeof(rl_rule_room_t));
}


/* Whether the process holding a slot still exists (concurrency). */

static int
ngx_http_ratelimit_alive(uint32_t pid)
{
    return kill((ngx_pid_t) pid, 0) == 0 || ngx_errno != NGX_ESRCH;
}
