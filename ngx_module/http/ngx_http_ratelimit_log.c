
/*
 * ngx-ratelimit: a request's log lines: its refusal or delay, a bad value
 * of its rules (written or folded by ngx_ratelimit_log.c), its decision
 * and its end in debug lines, all in the request's log with a context that
 * holds nothing a client chose.
 */


#include "ngx_http_ratelimit_log.h"


static u_char *ngx_http_ratelimit_log_context(ngx_log_t *log, u_char *buf,
    size_t len);


/*
 * The line of a decided request, at the location's level
 * (ngx_ratelimit_log_verdict), in the request's log.
 */

void
ngx_http_ratelimit_log_verdict(ngx_http_request_t *r, ngx_uint_t level,
    rl_request_t *rq, ngx_uint_t waited)
{
    ngx_log_t  log;

    ngx_ratelimit_log_verdict(ngx_http_ratelimit_request_log(r, &log), level,
                              rq, waited);
}


#if (NGX_DEBUG)

/*
 * With nginx built --with-debug and debug_connection (or error_log ...
 * debug): each decision, as limit_req shows its own, and each rule's part
 * in it, keys by fingerprint.
 */

void
ngx_http_ratelimit_debug_decision(ngx_http_request_t *r, rl_request_t *rq)
{
    size_t                 i;
    ngx_log_t              log;
    rl_check_t            *c;
    ngx_ratelimit_rule_t  *rule;

    static const char  *verdicts[] = { "passed", "delayed", "rejected",
                                       "exempt", "queued" };

    ngx_http_ratelimit_request_log(r, &log);

    ngx_log_debug5(NGX_LOG_DEBUG_HTTP, &log, 0,
                   "ratelimit: request %s%s, %uz rule(s), delay %L ms, "
                   "binding %uz",
                   verdicts[rq->verdict % 5],
                   rq->dry_run ? " (dry run)" : "", rq->n, rq->delay_ms,
                   rq->binding);

    for (i = 0; i < rq->n; i++) {
        c = &rq->checks[i];
        rule = ngx_ratelimit_rule_of(c);

        if (c->key_len == 0) {
            ngx_log_debug1(NGX_LOG_DEBUG_HTTP, &log, 0,
                           "ratelimit: rule \"%V\": exempt (empty key)",
                           &rule->name);
            continue;
        }

        ngx_log_debug8(NGX_LOG_DEBUG_HTTP, &log, 0,
                       "ratelimit: rule \"%V\" key %016xL cost %uL: %s, "
                       "remaining %uL, retry after %L ms, delay %L ms%s",
                       &rule->name, c->tag, c->cost,
                       c->decision.allowed ? "allows"
                       : c->decision.queued ? "queues" : "refuses",
                       c->decision.remaining, c->decision.retry_after_ms,
                       c->decision.delay_ms,
                       c->decision.banned_ms ? " (banned)" : "");
    }
}


void
ngx_http_ratelimit_debug_end(ngx_http_request_t *r, rl_request_t *rq,
    int freed, ngx_uint_t charges)
{
    size_t                 i;
    ngx_log_t              log;
    rl_check_t            *c;
    ngx_ratelimit_rule_t  *rule;

    ngx_http_ratelimit_request_log(r, &log);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, &log, 0,
                   "ratelimit: request ended, %d slot(s) given back%s",
                   freed, charges ? "" : ", no charges (no log phase)");

    for (i = 0; i < rq->n; i++) {
        c = &rq->checks[i];
        rule = ngx_ratelimit_rule_of(c);

        if (c->charge != RL_NO_CHARGE) {
            ngx_log_debug5(NGX_LOG_DEBUG_HTTP, &log, 0,
                           "ratelimit: rule \"%V\" key %016xL charged %uL "
                           "of %uL%s", &rule->name, c->tag, c->charged,
                           c->charge, c->in_debt ? ", in debt" : "");
        }
    }
}

#endif


/*
 * A request's value of a variable that is not valid for its rule
 * (ngx_ratelimit_log_bad), in the request's log.
 */

void
ngx_http_ratelimit_log_bad(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule, const char *what)
{
    ngx_log_t  log;

    ngx_ratelimit_log_bad(ngx_http_ratelimit_request_log(r, &log),
                          &rule->common, what);
}


/*
 * The log of the module's lines about a request: the connection's, but
 * with a context that names the client and the server only.  nginx's own
 * context adds the request line, Host and Referer, and a rule's key may be
 * made of any of them: a rule that logs its key by fingerprint would have
 * it in clear there.
 */

ngx_log_t *
ngx_http_ratelimit_request_log(ngx_http_request_t *r, ngx_log_t *log)
{
    *log = *r->connection->log;
    log->handler = ngx_http_ratelimit_log_context;
    log->data = r;

    return log;
}


static u_char *
ngx_http_ratelimit_log_context(ngx_log_t *log, u_char *buf, size_t len)
{
    ngx_http_request_t        *r = log->data;
    ngx_http_core_srv_conf_t  *cscf;

    cscf = ngx_http_get_module_srv_conf(r, ngx_http_core_module);

    return ngx_snprintf(buf, len, ", client: %V, server: %V",
                        &r->connection->addr_text, &cscf->server_name);
}
