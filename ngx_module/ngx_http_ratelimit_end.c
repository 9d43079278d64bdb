
/*
 * ngx-ratelimit: the end of a request (the log phase).
 *
 * What a request holds is settled once the response is known: after it
 * went out, or when the client went away early.  A rule with charge=
 * spends what its value says (evaluated here, once a request: internal
 * redirects, error_page and subrequests share the main request's context);
 * a concurrency rule's slot and place in a queue are given back, and a
 * request waiting in this worker for a slot is woken.  The core settles
 * every rule under the zones' locks, taken once (rl_request_end); a
 * request decided in Redis has its charges sent there
 * (ngx_http_ratelimit_redis_settle.c).  The handler is set up only when
 * some rule settles at the end.
 */


#include "ngx_http_ratelimit_module.h"


static void ngx_http_ratelimit_charged(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
static uint64_t ngx_http_ratelimit_charge_value(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule, rl_check_t *check);


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
 * Settles the request, once: with charges evaluated (charges: in the log
 * phase) or without (the pool's cleanup of a request that never reached
 * it: the cost each charge= rule reserved stands).  A request decided in
 * Redis is settled there (its charges sent, not waited for); one decided
 * by on_redis_error=allow or deny reserved nothing, and is charged nothing.
 */

void
ngx_http_ratelimit_end(ngx_http_ratelimit_ctx_t *ctx, ngx_uint_t charges)
{
    int                         freed;
    size_t                      i, order[RL_RULES_MAX], m;
    rl_check_t                 *c;
    ngx_http_request_t         *r;
    ngx_http_ratelimit_rule_t  *rule;

    if (!ctx->ends || ctx->ended || !ctx->kept
        || (ctx->decided_by != NGX_HTTP_RATELIMIT_BY_LOCAL
            && ctx->decided_by != NGX_HTTP_RATELIMIT_BY_FALLBACK_LOCAL
            && ctx->decided_by != NGX_HTTP_RATELIMIT_BY_REDIS))
    {
        return;
    }

    ctx->ended = 1;
    r = ctx->request;

    for (i = 0; i < ctx->rq.n; i++) {
        c = &ctx->rq.checks[i];
        rule = ngx_http_ratelimit_rule_of(c);
        c->charge = charges && rl_check_charges(c)
                    ? ngx_http_ratelimit_charge_value(r, rule, c)
                    : RL_NO_CHARGE;
    }

    if (ctx->decided_by == NGX_HTTP_RATELIMIT_BY_REDIS) {
        /* a Redis zone has no rule that ends here but charge= ones
           (rl_redis_rule_ok) */
        rule = ngx_http_ratelimit_rule_of(&ctx->rq.checks[0]);
        ngx_http_ratelimit_redis_settle(ngx_http_ratelimit_zone_of(rule)->redis,
                                        &ctx->rq);

    } else {
        m = rl_request_lock_order(&ctx->rq, order);

        ngx_http_ratelimit_lock(&ctx->rq, order, m, 1);
        freed = rl_request_end(&ctx->rq, ngx_http_ratelimit_now());
        ngx_http_ratelimit_lock(&ctx->rq, order, m, 0);

        if (freed > 0) {
            ngx_http_ratelimit_wait_wake();
        }
    }

    if (charges) {
        ngx_http_ratelimit_charged(r, ctx);
    }
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

    if (ngx_http_complex_value(r, rule->charge, &value) != NGX_OK) {
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
