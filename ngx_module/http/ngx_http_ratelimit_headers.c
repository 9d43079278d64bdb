
/*
 * ngx-ratelimit: the rate-limit headers of a response, and the variables.
 * Both describe the binding rule the core chose for the request.
 */


#include "ngx_http_ratelimit_headers.h"
#include "ngx_http_ratelimit_request.h"
#include "ngx_ratelimit_log.h"


static ngx_int_t ngx_http_ratelimit_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_ratelimit_header_fields(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx) NGX_RATELIMIT_NOINLINE;
static ngx_int_t ngx_http_ratelimit_legacy_headers(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
static ngx_int_t ngx_http_ratelimit_add_header(ngx_http_request_t *r,
    ngx_str_t *name, u_char *value, size_t len);
static ngx_int_t ngx_http_ratelimit_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_ratelimit_override_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;

/* for ngx_http_ratelimit_number: "00" to "99", and 10^0 to 10^19 */
static u_char    ngx_http_ratelimit_pairs[200];
static uint64_t  ngx_http_ratelimit_pow10[20];

enum {
    NGX_HTTP_RATELIMIT_VAR_STATUS = 0,
    NGX_HTTP_RATELIMIT_VAR_LIMIT,
    NGX_HTTP_RATELIMIT_VAR_REMAINING,
    NGX_HTTP_RATELIMIT_VAR_RESET,
    NGX_HTTP_RATELIMIT_VAR_RETRY_AFTER,
    NGX_HTTP_RATELIMIT_VAR_RULE,
    NGX_HTTP_RATELIMIT_VAR_DECIDED_BY,
    NGX_HTTP_RATELIMIT_VAR_FINGERPRINT,
    NGX_HTTP_RATELIMIT_VAR_CHARGED,
    NGX_HTTP_RATELIMIT_VAR_OVERRIDE,
    NGX_HTTP_RATELIMIT_VAR_CLASS,
    NGX_HTTP_RATELIMIT_VAR_REASON
};


static ngx_http_variable_t  ngx_http_ratelimit_vars[] = {

    { ngx_string("ratelimit_status"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_STATUS, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_limit"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_LIMIT, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_remaining"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_REMAINING, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_reset"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_RESET, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_retry_after"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_RETRY_AFTER, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_rule"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_RULE, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_decided_by"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_DECIDED_BY, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_fingerprint"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_FINGERPRINT, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_charged"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_CHARGED, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_class"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_CLASS, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_reason"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_REASON, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_override"), NULL,
      ngx_http_ratelimit_override_variable, 0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


static ngx_str_t  ngx_http_ratelimit_decided_by_names[] = {
    ngx_null_string,
    ngx_string("local"),
    ngx_string("redis"),
    ngx_string("fallback_local"),
    ngx_string("fallback_allow"),
    ngx_string("fallback_deny"),
    ngx_string("redis_cached")
};


static ngx_str_t  ngx_http_ratelimit_limit_header =
    ngx_string("X-RateLimit-Limit");
static ngx_str_t  ngx_http_ratelimit_remaining_header =
    ngx_string("X-RateLimit-Remaining");
static ngx_str_t  ngx_http_ratelimit_reset_header =
    ngx_string("X-RateLimit-Reset");
static ngx_str_t  ngx_http_ratelimit_policy_header =
    ngx_string("RateLimit-Policy");
static ngx_str_t  ngx_http_ratelimit_ietf_header =
    ngx_string("RateLimit");
static ngx_str_t  ngx_http_ratelimit_retry_after_header =
    ngx_string("Retry-After");


static ngx_int_t
ngx_http_ratelimit_header_filter(ngx_http_request_t *r)
{
    ngx_http_ratelimit_ctx_t  *ctx;

    /* most responses: no rule decided the request (a context is found
       again after an internal redirect or a finalizing filter), or its
       location writes no fields; the fields are written apart, so that
       these pay for nothing more */

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_ratelimit_module);

    if (ctx == NULL && (r->internal || r->filter_finalize)) {
        ctx = ngx_http_ratelimit_find_ctx(r);
    }

    if (ctx == NULL || ctx->headers == 0) {
        return ngx_http_next_header_filter(r);
    }

    return ngx_http_ratelimit_header_fields(r, ctx);
}


static ngx_int_t
ngx_http_ratelimit_header_fields(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    u_char                     *p, *v;
    ngx_str_t                  *name;
    uint64_t                    retry_after;
    ngx_uint_t                  status;
    ngx_http_ratelimit_rule_t  *rule;

    /* once a response; again for the response of a filter finalizing the
       request, which cleared the headers already sent down the chain */

    if (ctx->rule == NULL
        || (ctx->headers_done && !(r->filter_finalize && !ctx->finalized)))
    {
        return ngx_http_next_header_filter(r);
    }

    ctx->finalized = r->filter_finalize;
    ctx->headers_done = 1;
    rule = ctx->rule;

    if ((ctx->headers & NGX_HTTP_RATELIMIT_HEADERS_LEGACY)
        && ngx_http_ratelimit_legacy_headers(r, ctx) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (!(ctx->headers & NGX_HTTP_RATELIMIT_HEADERS_IETF)
        && ctx->status != RL_STATUS_REJECTED
        && ctx->status != RL_STATUS_REJECTED_IN_FLIGHT)
    {
        return ngx_http_next_header_filter(r);
    }

    /* the other values in one buffer: a name and three numbers */

    p = ngx_pnalloc(r->pool, RL_NAME_MAX + 16 + 3 * NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    if (ctx->headers & NGX_HTTP_RATELIMIT_HEADERS_IETF) {

        /* every policy of the request's rules, written when the request
           was decided (once for a location, when it can be), and the
           binding rule's "name";r=remaining;t=available */

        if (ngx_http_ratelimit_add_header(r, &ngx_http_ratelimit_policy_header,
                                          ctx->policy.data, ctx->policy.len)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        v = p;
        *p++ = '"';
        p = ngx_cpymem(p, rule->common.name.data, rule->common.name.len);
        p = ngx_cpymem(p, "\";r=", 4);
        p = ngx_http_ratelimit_number(p, ctx->decision.remaining);

        if (ctx->decision.window_ms > 0) {
            p = ngx_cpymem(p, ";t=", 3);
            p = ngx_http_ratelimit_number(p, rl_seconds(
                                                 ctx->decision.available_ms));
        }

        if (ngx_http_ratelimit_add_header(r, &ngx_http_ratelimit_ietf_header,
                                          v, p - v)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    /* Retry-After means something with 429 and 503 only: not on the 200 an
       error_page made of the rejection; and not for a lack of a slot
       (concurrency), which nobody can tell the end of.  A refused gRPC
       call's 200 (ctx->grpc, ngx_http_ratelimit_grpc.c) carries it too: its
       headers are the call's metadata, and its grpc-status the refusal */

    status = r->headers_out.status;

    retry_after = rl_retry_after_seconds(&ctx->decision);

    if ((ctx->status == RL_STATUS_REJECTED
         || ctx->status == RL_STATUS_REJECTED_IN_FLIGHT)
        && retry_after > 0
        && (status == NGX_HTTP_TOO_MANY_REQUESTS
            || status == NGX_HTTP_SERVICE_UNAVAILABLE
            || ctx->grpc))
    {
        v = p;
        p = ngx_http_ratelimit_number(p, retry_after);
        name = &ngx_http_ratelimit_retry_after_header;

        if (ngx_http_ratelimit_add_header(r, name, v, p - v) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return ngx_http_next_header_filter(r);
}


/*
 * X-RateLimit-Limit, -Remaining and -Reset: the numbers in the context
 * (the limit the rule applied, written here: a rule keeps no text of it,
 * as a configuration may hold thousands of rules).
 */

static ngx_int_t
ngx_http_ratelimit_legacy_headers(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    u_char           *p, *v;
    size_t            len;
    const rl_rule_t  *applied;

    applied = ctx->applied;
    p = ctx->values;

    v = p;
    p = ngx_http_ratelimit_number(p, applied->limit);
    len = p - v;

    if (ngx_http_ratelimit_add_header(r, &ngx_http_ratelimit_limit_header,
                                      v, len)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    v = p;
    p = ngx_http_ratelimit_number(p, ctx->decision.remaining);
    if (ngx_http_ratelimit_add_header(r, &ngx_http_ratelimit_remaining_header,
                                      v, p - v)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* a policy with no window (concurrency) has no time to tell */

    if (ctx->decision.window_ms == 0) {
        return NGX_OK;
    }

    v = p;
    p = ngx_http_ratelimit_number(p, rl_seconds(ctx->decision.reset_ms));

    return ngx_http_ratelimit_add_header(r, &ngx_http_ratelimit_reset_header,
                                         v, p - v);
}


static ngx_int_t
ngx_http_ratelimit_add_header(ngx_http_request_t *r, ngx_str_t *name,
    u_char *value, size_t len)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key = *name;
    h->value.data = value;
    h->value.len = len;
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif

    return NGX_OK;
}


/*
 * A number in decimal, cheaper than ngx_sprintf on every response: its
 * length first, then written in place from its end, two digits at a time,
 * in 32 bits once it fits.
 */

u_char *
ngx_http_ratelimit_number(u_char *p, uint64_t n)
{
    u_char      *end;
    uint32_t     m, i;
    ngx_uint_t   len;

    /* its digits: about log10(2) = 1233 / 4096 of its bits, one more if
       it reaches the next power of ten */

    len = (64 - __builtin_clzll(n | 1)) * 1233 >> 12;
    len += (len < 20 && n >= ngx_http_ratelimit_pow10[len]);
    len += (len == 0);

    end = p + len;
    p = end;

    while (n > 0xffffffff) {
        i = (uint32_t) (n % 100) * 2;
        n /= 100;
        *--p = ngx_http_ratelimit_pairs[i + 1];
        *--p = ngx_http_ratelimit_pairs[i];
    }

    m = (uint32_t) n;

    while (m >= 100) {
        i = (m % 100) * 2;
        m /= 100;
        *--p = ngx_http_ratelimit_pairs[i + 1];
        *--p = ngx_http_ratelimit_pairs[i];
    }

    if (m >= 10) {
        *--p = ngx_http_ratelimit_pairs[m * 2 + 1];
        *--p = ngx_http_ratelimit_pairs[m * 2];

    } else {
        *--p = (u_char) ('0' + m);
    }

    return end;
}


/* $ratelimit_override: the override the request met, or empty. */

static ngx_int_t
ngx_http_ratelimit_override_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                    *p;
    ngx_http_ratelimit_ctx_t  *ctx;

    ctx = ngx_http_ratelimit_get_ctx(r);

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->len = 0;
    v->data = (u_char *) "";

    if (ctx == NULL || ctx->status == 0 || ctx->override == 0) {
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, RL_OVERRIDE_NAME_MAX);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->data = p;
    v->len = rl_override_name(ctx->override, ctx->override_rule,
                              ctx->override_key.data, ctx->override_key.len,
                              (char *) p);

    return NGX_OK;
}


static ngx_int_t
ngx_http_ratelimit_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                    *p;
    ngx_str_t                 *s;
    ngx_http_ratelimit_ctx_t  *ctx;

    ctx = ngx_http_ratelimit_get_ctx(r);

    if (ctx == NULL || ctx->status == 0
        || (data == NGX_HTTP_RATELIMIT_VAR_CHARGED && !ctx->charged_set)
        || (data != NGX_HTTP_RATELIMIT_VAR_STATUS
            && data != NGX_HTTP_RATELIMIT_VAR_DECIDED_BY && ctx->rule == NULL)
        || (data == NGX_HTTP_RATELIMIT_VAR_DECIDED_BY && ctx->decided_by == 0)
        || ((data == NGX_HTTP_RATELIMIT_VAR_CLASS
             || data == NGX_HTTP_RATELIMIT_VAR_REASON)
            && ctx->applied->classes == NULL)
        || (data == NGX_HTTP_RATELIMIT_VAR_REASON && ctx->shed == 0))
    {
        v->not_found = 1;
        return NGX_OK;
    }

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;

    if (data == NGX_HTTP_RATELIMIT_VAR_DECIDED_BY) {
        s = &ngx_http_ratelimit_decided_by_names[ctx->decided_by];
        v->len = s->len;
        v->data = s->data;
        return NGX_OK;
    }

    if (data == NGX_HTTP_RATELIMIT_VAR_STATUS) {
        s = &ngx_ratelimit_status_names[ctx->status];
        v->len = s->len;
        v->data = s->data;
        return NGX_OK;
    }

    if (data == NGX_HTTP_RATELIMIT_VAR_CLASS
        || data == NGX_HTTP_RATELIMIT_VAR_REASON)
    {
        v->data = (u_char *) (data == NGX_HTTP_RATELIMIT_VAR_CLASS
                              ? rl_class_name(ctx->applied, ctx->klass)
                              : rl_shed_name(ctx->shed));
        v->len = ngx_strlen(v->data);
        return NGX_OK;
    }

    if (data == NGX_HTTP_RATELIMIT_VAR_RULE) {
        v->len = ctx->rule->common.name.len;
        v->data = ctx->rule->common.name.data;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    if (data == NGX_HTTP_RATELIMIT_VAR_FINGERPRINT) {
        v->data = p;
        v->len = ngx_sprintf(p, "%016xL", ctx->tag) - p;
        return NGX_OK;
    }

    v->data = p;

    switch (data) {

    case NGX_HTTP_RATELIMIT_VAR_LIMIT:
        p = ngx_http_ratelimit_number(p, ctx->applied->limit);
        break;

    case NGX_HTTP_RATELIMIT_VAR_CHARGED:
        p = ngx_http_ratelimit_number(p, ctx->charged);
        break;

    case NGX_HTTP_RATELIMIT_VAR_REMAINING:
        p = ngx_http_ratelimit_number(p, ctx->decision.remaining);
        break;

    case NGX_HTTP_RATELIMIT_VAR_RESET:
        p = ngx_http_ratelimit_number(p, rl_seconds(
                                             ctx->decision.reset_ms));
        break;

    default: /* NGX_HTTP_RATELIMIT_VAR_RETRY_AFTER */
        p = ngx_http_ratelimit_number(p,
                                      rl_retry_after_seconds(&ctx->decision));
        break;
    }

    v->len = p - v->data;

    return NGX_OK;
}


ngx_int_t
ngx_http_ratelimit_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_ratelimit_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


/* The digits' tables; and the header filter, when a rule may use it. */

ngx_int_t
ngx_http_ratelimit_headers_init(ngx_conf_t *cf, ngx_uint_t filter)
{
    ngx_uint_t  i;

    for (i = 0; i < 100; i++) {
        ngx_http_ratelimit_pairs[i * 2] = (u_char) ('0' + i / 10);
        ngx_http_ratelimit_pairs[i * 2 + 1] = (u_char) ('0' + i % 10);
    }

    ngx_http_ratelimit_pow10[0] = 1;

    for (i = 1; i < 20; i++) {
        ngx_http_ratelimit_pow10[i] = ngx_http_ratelimit_pow10[i - 1] * 10;
    }

    if (filter) {
        ngx_http_next_header_filter = ngx_http_top_header_filter;
        ngx_http_top_header_filter = ngx_http_ratelimit_header_filter;
    }

    return NGX_OK;
}
