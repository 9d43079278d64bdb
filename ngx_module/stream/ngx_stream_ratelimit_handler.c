
/*
 * ngx-ratelimit: a stream session decided.
 *
 * A new TCP connection or UDP session is decided once, in the preaccess
 * phase (after realip and limit_conn), or, when a rule of its server reads
 * a $ssl_ variable, as its content phase starts (after ssl and
 * ssl_preread: ngx_stream_ratelimit_content wraps the server's content
 * handler).  Its rules' keys, costs and limits are evaluated, the core
 * decides the session as a whole (rl_decide under the zones' locks), and
 * the core's action is applied: the session passes; is refused before
 * nginx connects to its upstream (a TCP connection closed, a UDP session's
 * datagram dropped), as limit_conn refuses, with 503 in $status; or is
 * held on a timer while a shaping rule delays it, then goes on.  A session
 * does not wait for a concurrency slot: a rule's queue refuses it at once.
 * A concurrency rule's slot is given back when the session ends, however
 * it ends (the pool's cleanup).
 */


#include "ngx_stream_ratelimit_handler.h"
#include "ngx_ratelimit_log.h"
#include "ngx_ratelimit_rule.h"
#include "ngx_ratelimit_sync.h"
#include "ngx_ratelimit_zone.h"


static ngx_int_t ngx_stream_ratelimit_decide(ngx_stream_session_t *s,
    ngx_stream_ratelimit_srv_conf_t *rscf);
static ngx_int_t ngx_stream_ratelimit_check(ngx_stream_session_t *s,
    ngx_stream_ratelimit_rule_t *rule, rl_check_t *c);
static const rl_rule_t *ngx_stream_ratelimit_applied(ngx_stream_session_t *s,
    ngx_stream_ratelimit_rule_t *rule);
static ngx_int_t ngx_stream_ratelimit_verdict(ngx_stream_session_t *s,
    ngx_stream_ratelimit_srv_conf_t *rscf, ngx_stream_ratelimit_ctx_t *ctx);
static ngx_int_t ngx_stream_ratelimit_keep(ngx_stream_session_t *s,
    ngx_stream_ratelimit_ctx_t *ctx);
static void ngx_stream_ratelimit_delayed(ngx_event_t *ev);
static ngx_int_t ngx_stream_ratelimit_gone(ngx_stream_session_t *s);
static void ngx_stream_ratelimit_cleanup(void *data);
static rl_rule_room_t *ngx_stream_ratelimit_more_room(rl_request_t *rq);
static int ngx_stream_ratelimit_alive(uint32_t pid);


/*
 * The preaccess phase's handler: a session of a server with rules decided
 * once.  Client bytes or another datagram of a delayed session run the
 * phases into it again: it waits on (or, its client gone, ends).
 */

ngx_int_t
ngx_stream_ratelimit_handler(ngx_stream_session_t *s)
{
    ngx_stream_ratelimit_ctx_t       *ctx;
    ngx_stream_ratelimit_srv_conf_t  *rscf;

    rscf = ngx_stream_get_module_srv_conf(s, ngx_stream_ratelimit_module);

    if (rscf->rules.nelts == 0 || rscf->late) {
        return NGX_DECLINED;
    }

    ctx = ngx_stream_get_module_ctx(s, ngx_stream_ratelimit_module);

    if (ctx == NULL) {
        return ngx_stream_ratelimit_decide(s, rscf);
    }

    if (ctx->delayed) {
        return ngx_stream_ratelimit_gone(s) ? NGX_STREAM_OK : NGX_DONE;
    }

    return NGX_DECLINED;
}


/*
 * The content handler of a server whose rules read a $ssl_ variable: the
 * session decided now, then handed to the server's own handler (proxy_pass,
 * return), refused, or held first.
 */

void
ngx_stream_ratelimit_content(ngx_stream_session_t *s)
{
    ngx_int_t                         rc;
    ngx_stream_ratelimit_ctx_t       *ctx;
    ngx_stream_ratelimit_srv_conf_t  *rscf;

    rscf = ngx_stream_get_module_srv_conf(s, ngx_stream_ratelimit_module);
    ctx = ngx_stream_get_module_ctx(s, ngx_stream_ratelimit_module);

    if (ctx == NULL) {
        rc = ngx_stream_ratelimit_decide(s, rscf);

    } else if (ctx->delayed) {
        rc = ngx_stream_ratelimit_gone(s) ? NGX_STREAM_OK : NGX_DONE;

    } else {
        rc = NGX_DECLINED;
    }

    if (rc == NGX_DECLINED) {
        rscf->content(s);
        return;
    }

    if (rc == NGX_DONE) {
        return;   /* its timer goes on */
    }

    ngx_stream_finalize_session(s, rc == NGX_ERROR
                                   ? NGX_STREAM_INTERNAL_SERVER_ERROR : rc);
}


/*
 * The session's rules evaluated and the session decided in their zones:
 * NGX_DECLINED to go on, NGX_DONE while it is held, or the status it is
 * finalized with.
 */

static ngx_int_t
ngx_stream_ratelimit_decide(ngx_stream_session_t *s,
    ngx_stream_ratelimit_srv_conf_t *rscf)
{
    int64_t                       now;
    ngx_uint_t                    i;
    rl_check_t                    checks[RL_RULES_MAX];
    ngx_shmtx_t                  *mutex;
    ngx_stream_ratelimit_ctx_t   *ctx;
    ngx_stream_ratelimit_rule_t  *rules;

    ctx = ngx_palloc(s->connection->pool, sizeof(ngx_stream_ratelimit_ctx_t));
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(ctx, offsetof(ngx_stream_ratelimit_ctx_t, rq));
    ngx_memzero(&ctx->room, sizeof(rl_rule_room_t));
    ctx->session = s;
    ngx_stream_set_ctx(s, ctx, ngx_stream_ratelimit_module);

    rules = rscf->rules.elts;

    for (i = 0; i < rscf->rules.nelts; i++) {
        if (ngx_stream_ratelimit_check(s, &rules[i], &checks[i]) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    ngx_memzero(&ctx->rq, sizeof(rl_request_t));
    ctx->rq.checks = checks;
    ctx->rq.n = rscf->rules.nelts;
    ctx->rq.combine = rscf->combine;
    ctx->rq.dry_run = rscf->dry_run;
    ctx->rq.holder = (uint32_t) ngx_pid;
    ctx->rq.alive = ngx_stream_ratelimit_alive;
    ctx->rq.room = &ctx->room;
    ctx->rq.more_room = ngx_stream_ratelimit_more_room;
    ctx->rq.latency_ms = -1;

    /* a session does not wait for a slot: a queue refuses it at once */
    ctx->rq.last = 1;

    rl_request_hash(&ctx->rq);   /* outside the locks */

    now = ngx_ratelimit_now();

    mutex = ngx_ratelimit_lock(&ctx->rq);
    (void) rl_decide(&ctx->rq, now);
    if (ngx_ratelimit_sync_zones) {
        ngx_ratelimit_sync_note(&ctx->rq, now);
    }
    ngx_ratelimit_unlock(&ctx->rq, mutex);

    return ngx_stream_ratelimit_verdict(s, rscf, ctx);
}


/* A rule's check for the session: its key (empty: exempt), cost, limits. */

static ngx_int_t
ngx_stream_ratelimit_check(ngx_stream_session_t *s,
    ngx_stream_ratelimit_rule_t *rule, rl_check_t *c)
{
    ngx_str_t  key, value;

    if (ngx_stream_complex_value(s, rule->key, &key) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_memzero(c, sizeof(rl_check_t));
    c->table = ngx_ratelimit_zone_of(&rule->common)->table;
    c->rule = &rule->common.rule;
    c->identity = rule->common.identity;
    c->key = key.data;
    c->key_len = key.len;
    c->cost = key.len ? rule->common.rule.cost : 0;
    c->data = rule;
    c->counters = ngx_ratelimit_rule_counters(s->connection->log,
                                              &rule->common);

    if (key.len == 0) {
        return NGX_OK;
    }

    if (rule->cost != NULL) {
        if (ngx_stream_complex_value(s, rule->cost, &value) != NGX_OK) {
            ngx_str_null(&value);
        }

        c->cost = ngx_ratelimit_rule_cost(s->connection->log, &rule->common,
                                          &value);
    }

    if (rule->limit != NULL || rule->burst != NULL) {
        c->rule = ngx_stream_ratelimit_applied(s, rule);
        if (c->rule == NULL) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* limit=$variable, burst=$variable: the rule as it applies to the
   session (ngx_ratelimit_rule_applied), in its pool. */

static const rl_rule_t *
ngx_stream_ratelimit_applied(ngx_stream_session_t *s,
    ngx_stream_ratelimit_rule_t *rule)
{
    ngx_str_t  limit, burst;

    ngx_str_null(&limit);
    ngx_str_null(&burst);

    if ((rule->limit
         && ngx_stream_complex_value(s, rule->limit, &limit) != NGX_OK)
        || (rule->burst
            && ngx_stream_complex_value(s, rule->burst, &burst) != NGX_OK))
    {
        return NULL;
    }

    return ngx_ratelimit_rule_applied(s->connection->pool, s->connection->log,
                                      &rule->common, &limit, &burst);
}


/*
 * The core's action applied to a decided session: its status and binding
 * rule kept for the variables, its line logged, and the session passed,
 * refused (503, as limit_conn), or held on its timer.
 */

static ngx_int_t
ngx_stream_ratelimit_verdict(ngx_stream_session_t *s,
    ngx_stream_ratelimit_srv_conf_t *rscf, ngx_stream_ratelimit_ctx_t *ctx)
{
    rl_request_t  *rq;

    rq = &ctx->rq;
    ctx->status = rq->status;

    if (rq->binding < rq->n) {
        ctx->rule = ngx_stream_ratelimit_rule_of(&rq->checks[rq->binding]);

        if (rq->verdict != RL_VERDICT_PASSED) {
            ngx_ratelimit_log_verdict(s->connection->log, rscf->log_level,
                                      rq, 0);
        }
    }

    ctx->ends = rscf->ends;

    if ((ctx->ends || rq->action == RL_ACTION_DELAY)
        && ngx_stream_ratelimit_keep(s, ctx) != NGX_OK)
    {
        return NGX_ERROR;
    }

    switch (rq->action) {

    case RL_ACTION_PASS:
        return NGX_DECLINED;

    case RL_ACTION_DELAY:
        ctx->delay.handler = ngx_stream_ratelimit_delayed;
        ctx->delay.data = ctx;
        ctx->delay.log = s->connection->log;
        ctx->delayed = 1;
        ctx->refund = 1;
        ngx_add_timer(&ctx->delay, (ngx_msec_t) rq->delay_ms);
        return NGX_DONE;

    default: /* RL_ACTION_REFUSE; RL_ACTION_WAIT: no queue (rq.last) */
        return NGX_STREAM_SERVICE_UNAVAILABLE;
    }
}


/*
 * A session held, or whose rules hold slots until it ends, keeps its
 * checks in its pool, and its pool's cleanup settles them.
 */

static ngx_int_t
ngx_stream_ratelimit_keep(ngx_stream_session_t *s,
    ngx_stream_ratelimit_ctx_t *ctx)
{
    rl_check_t          *checks;
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(s->connection->pool, 0);
    checks = ngx_palloc(s->connection->pool, ctx->rq.n * sizeof(rl_check_t));

    if (cln == NULL || checks == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(checks, ctx->rq.checks, ctx->rq.n * sizeof(rl_check_t));
    ctx->rq.checks = checks;

    cln->handler = ngx_stream_ratelimit_cleanup;
    cln->data = ctx;

    return NGX_OK;
}


/*
 * A delayed session's time is up: the phases run on (the handler passes
 * it), or the server's content handler of a late decision runs.
 */

static void
ngx_stream_ratelimit_delayed(ngx_event_t *ev)
{
    ngx_stream_session_t             *s;
    ngx_stream_ratelimit_ctx_t       *ctx;
    ngx_stream_ratelimit_srv_conf_t  *rscf;

    ctx = ev->data;
    s = ctx->session;

    ctx->delayed = 0;
    ctx->refund = 0;

    rscf = ngx_stream_get_module_srv_conf(s, ngx_stream_ratelimit_module);

    if (rscf->late) {
        rscf->content(s);
        return;
    }

    ngx_stream_core_run_phases(s);
}


/*
 * Whether the client of a held TCP session went away (nginx saw its end
 * while nobody reads): it ends at once, and gives back what it reserved.
 */

static ngx_int_t
ngx_stream_ratelimit_gone(ngx_stream_session_t *s)
{
    ngx_event_t  *rev;

    rev = s->connection->read;

    return s->connection->type == SOCK_STREAM
           && (rev->eof || rev->pending_eof || rev->error);
}


/*
 * However the session ends: its timer stopped; what a held session
 * reserved given back; its concurrency slots given back.
 */

static void
ngx_stream_ratelimit_cleanup(void *data)
{
    ngx_stream_ratelimit_ctx_t  *ctx = data;

    ngx_shmtx_t  *mutex;

    if (ctx->delay.timer_set) {
        ngx_del_timer(&ctx->delay);
    }

    if (ctx->delayed && ctx->refund) {
        ctx->refund = 0;
        mutex = ngx_ratelimit_lock(&ctx->rq);
        rl_request_refund(&ctx->rq, ngx_ratelimit_now());
        ngx_ratelimit_unlock(&ctx->rq, mutex);
    }

    if (ctx->ends) {
        ctx->ends = 0;
        mutex = ngx_ratelimit_lock(&ctx->rq);
        (void) rl_request_end(&ctx->rq, ngx_ratelimit_now());
        ngx_ratelimit_unlock(&ctx->rq, mutex);
    }
}


/*
 * Memory for the rule a limit override makes, for a check after the first
 * that meets one (the first takes the context's room): the session's.
 */

static rl_rule_room_t *
ngx_stream_ratelimit_more_room(rl_request_t *rq)
{
    ngx_stream_ratelimit_ctx_t  *ctx;

    ctx = (ngx_stream_ratelimit_ctx_t *)
          ((u_char *) rq - offsetof(ngx_stream_ratelimit_ctx_t, rq));

    return ngx_pcalloc(ctx->session->connection->pool,
                       sizeof(rl_rule_room_t));
}


/* Whether the process holding a slot still exists (concurrency). */

static int
ngx_stream_ratelimit_alive(uint32_t pid)
{
    return kill((ngx_pid_t) pid, 0) == 0 || ngx_errno != NGX_ESRCH;
}
