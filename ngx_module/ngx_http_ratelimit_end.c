
/*
 * ngx-ratelimit: the end of a request (the log phase).
 *
 * A rule with charge= spends what its value says once the response is
 * known: after it went out, or when the client went away early.  The value
 * is evaluated here, once a request (internal redirects, error_page and
 * subrequests share the main request's context), the core settles every
 * such rule under the zones' locks, taken once (rl_request_end), and what
 * was charged is kept for $ratelimit_charged.  The handler is set up only
 * when some rule charges.
 */


#include "ngx_http_ratelimit_module.h"


static uint64_t ngx_http_ratelimit_charge_value(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule, rl_check_t *check);


ngx_int_t
ngx_http_ratelimit_end_handler(ngx_http_request_t *r)
{
    size_t                      i, order[RL_RULES_MAX], m;
    rl_check_t                 *c;
    ngx_http_ratelimit_ctx_t   *ctx;
    ngx_http_ratelimit_rule_t  *rule;

    if (r != r->main) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_ratelimit_get_ctx(r);

    if (ctx == NULL || !ctx->charges || ctx->ended) {
        return NGX_DECLINED;
    }

    ctx->ended = 1;

    if (ctx->decided_by != NGX_HTTP_RATELIMIT_BY_LOCAL
        && ctx->decided_by != NGX_HTTP_RATELIMIT_BY_FALLBACK_LOCAL)
    {
        /* a fail mode that allowed or denied reserved nothing here (a rule
           that charges is not decided in Redis: rl_redis_rule_ok) */
        return NGX_DECLINED;
    }

    for (i = 0; i < ctx->rq.n; i++) {
        c = &ctx->rq.checks[i];
        rule = ngx_http_ratelimit_rule_of(c);
        c->charge = rule->charge && c->key_len
                    ? ngx_http_ratelimit_charge_value(r, rule, c)
                    : RL_NO_CHARGE;
    }

    m = rl_request_lock_order(&ctx->rq, order);

    ngx_http_ratelimit_lock(&ctx->rq, order, m, 1);
    rl_request_end(&ctx->rq, ngx_http_ratelimit_now());
    ngx_http_ratelimit_lock(&ctx->rq, order, m, 0);

    ngx_http_ratelimit_charged(r, ctx);

    return NGX_DECLINED;
}


/*
 * What the request's charges came to: $ratelimit_charged (the first
 * charging rule's units), and a line for a charge the debt's bound cut.
 */

void
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

        if (rule->charge == NULL || c->charge == RL_NO_CHARGE) {
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
