
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
 * it ends (the pool's cleanup).  A zone with redis= decides in Redis, as
 * for HTTP: the session waits for the reply on the event loop, then goes
 * on, is refused or delayed; on_redis_error decides while Redis fails.
 */


#include "ngx_stream_ratelimit_handler.h"
#include "ngx_ratelimit_log.h"
#include "ngx_ratelimit_redis.h"
#include "ngx_ratelimit_redis_settle.h"
#include "ngx_ratelimit_rule.h"
#include "ngx_ratelimit_sync.h"
#include "ngx_ratelimit_zone.h"


static ngx_int_t ngx_stream_ratelimit_decide(ngx_stream_session_t *s,
    ngx_stream_ratelimit_srv_conf_t *rscf);
static ngx_int_t ngx_stream_ratelimit_decide_local(ngx_stream_session_t *s,
    ngx_stream_ratelimit_ctx_t *ctx);
static ngx_int_t ngx_stream_ratelimit_decide_redis(ngx_stream_session_t *s,
    ngx_stream_ratelimit_ctx_t *ctx);
static void ngx_stream_ratelimit_redis_done(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer);
static ngx_int_t ngx_stream_ratelimit_redis_verdict(ngx_stream_session_t *s,
    ngx_stream_ratelimit_ctx_t *ctx, ngx_ratelimit_zone_t *zone,
    ngx_uint_t by);
static ngx_int_t ngx_stream_ratelimit_redis_fallback(ngx_stream_session_t *s,
    ngx_stream_ratelimit_ctx_t *ctx);
static void ngx_stream_ratelimit_go_on(ngx_event_t *ev);
static void ngx_stream_ratelimit_end(ngx_stream_ratelimit_ctx_t *ctx);
static ngx_int_t ngx_stream_ratelimit_check(ngx_stream_session_t *s,
    ngx_stream_ratelimit_rule_t *rule, rl_check_t *c);
static const rl_rule_t *ngx_stream_ratelimit_applied(ngx_stream_session_t *s,
    ngx_stream_ratelimit_rule_t *rule);
static ngx_int_t ngx_stream_ratelimit_verdict(ngx_stream_session_t *s,
    ngx_stream_ratelimit_srv_conf_t *rscf, ngx_stream_ratelimit_ctx_t *ctx);
static ngx_int_t ngx_stream_ratelimit_keep(ngx_stream_session_t *s,
    ngx_stream_ratelimit_ctx_t *ctx);
static void ngx_stream_ratelimit_delayed(ngx_event_t *ev);
static ngx_int_t ngx_stream_ratelimit_watch(ngx_stream_session_t *s);
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

    if (ctx->delayed || ctx->redis_waiting) {
        return ngx_stream_ratelimit_gone(s) ? NGX_STREAM_OK : NGX_DONE;
    }

    return ctx->rc;   /* decided: NGX_DECLINED, or a refusal Redis gave */
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

    } else if (ctx->delayed || ctx->redis_waiting) {
        rc = ngx_stream_ratelimit_gone(s) ? NGX_STREAM_OK : NGX_DONE;

    } else {
        rc = ctx->rc;
    }

    if (rc == NGX_DECLINED) {
        rscf->content(s);
        return;
    }

    if (rc == NGX_DONE) {
        return;   /* its timer, or Redis's reply, goes on */
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
    ngx_uint_t                    i;
    rl_check_t                    checks[RL_RULES_MAX];
    ngx_stream_ratelimit_ctx_t   *ctx;
    ngx_stream_ratelimit_rule_t  *rules;

    ctx = ngx_palloc(s->connection->pool, sizeof(ngx_stream_ratelimit_ctx_t));
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(ctx, offsetof(ngx_stream_ratelimit_ctx_t, rq));
    ngx_memzero(&ctx->room, sizeof(rl_rule_room_t));
    ctx->session = s;
    ctx->rc = NGX_DECLINED;
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
    ctx->ends = rscf->ends;
    ctx->rq.latency_ms = -1;

    /* a session does not wait for a slot: a queue refuses it at once */
    ctx->rq.last = 1;

    rl_request_hash(&ctx->rq);   /* outside the locks */

    /* (a session exempt from every rule, using no zone, is not sent) */

    if (ngx_ratelimit_zone_of(&rules[0].common)->redis != NULL
        && ctx->rq.locks > 0)
    {
        return ngx_stream_ratelimit_decide_redis(s, ctx);
    }

    ctx->decided_by = NGX_RATELIMIT_BY_LOCAL;

    return ngx_stream_ratelimit_decide_local(s, ctx);
}


/* The session decided in its zones' memory, under their locks. */

static ngx_int_t
ngx_stream_ratelimit_decide_local(ngx_stream_session_t *s,
    ngx_stream_ratelimit_ctx_t *ctx)
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

    return ngx_stream_ratelimit_verdict(s,
               ngx_stream_get_module_srv_conf(s, ngx_stream_ratelimit_module),
               ctx);
}


/*
 * Sends the session's rules to Redis, one script call for all of them,
 * and returns NGX_DONE: the worker serves other sessions while the reply
 * comes (ngx_stream_ratelimit_redis_done).  Unless the overrides the zone
 * holds a copy of, or a refusal Redis gave that the zone remembers
 * (rl_refusals_find), decide it at once.
 */

static ngx_int_t
ngx_stream_ratelimit_decide_redis(ngx_stream_session_t *s,
    ngx_stream_ratelimit_ctx_t *ctx)
{
    ngx_shmtx_t                 *mutex;
    ngx_ratelimit_zone_t        *zone;
    ngx_ratelimit_redis_t       *redis;
    ngx_ratelimit_redis_wait_t  *w;

    zone = ngx_ratelimit_zone_of(ngx_ratelimit_rule_of(&ctx->rq.checks[0]));
    redis = zone->redis;

    switch (ngx_ratelimit_redis_known(zone, &ctx->rq)) {

    case NGX_RATELIMIT_REDIS_OVERRIDE:
        return ngx_stream_ratelimit_redis_verdict(s, ctx, zone,
                                                NGX_RATELIMIT_BY_LOCAL);

    case NGX_RATELIMIT_REDIS_REMEMBERED:
        return ngx_stream_ratelimit_redis_verdict(s, ctx, zone,
                                         NGX_RATELIMIT_BY_REDIS_CACHED);
    }

    if (ngx_stream_ratelimit_keep(s, ctx) != NGX_OK) {
        return NGX_ERROR;
    }

    w = ngx_pcalloc(s->connection->pool, sizeof(ngx_ratelimit_redis_wait_t));
    if (w == NULL) {
        return NGX_ERROR;
    }

    ctx->redis = w;
    w->owner = ctx;
    w->log = s->connection->log;
    w->handler = ngx_stream_ratelimit_redis_done;
    w->rq = &ctx->rq;

    /* concurrency: the leases the call may take, named, and the slots the
       session holds in this server's zone while Redis decides (as HTTP's
       requests: the server's own count holds every session in flight) */
    ngx_ratelimit_redis_lease_prepare(redis, &ctx->rq);

    if (ctx->ends) {
        mutex = ngx_ratelimit_lock(&ctx->rq);
        ctx->here = rl_request_hold_here(&ctx->rq, ngx_ratelimit_now()) > 0;
        ngx_ratelimit_unlock(&ctx->rq, mutex);
    }

    ctx->redis_epoch = rl_refusals_epoch(redis->refusals);
    ctx->redis_sent = ngx_ratelimit_monotonic_ms();

    if (ngx_ratelimit_redis_send(redis, w) != NGX_OK) {
        /* Redis unreachable now: no waiting at all */
        return ngx_stream_ratelimit_redis_fallback(s, ctx);
    }

    ctx->redis_waiting = 1;

    return ngx_stream_ratelimit_watch(s);
}


/*
 * Redis decided the session (answer: the core concluded it from the
 * script's answer) or failed it (NULL: on_redis_error decides).  The
 * session goes on from a posted event: a refusal ends the session, and its
 * pool holds w, while the Redis connection still reads its replies.
 */

static void
ngx_stream_ratelimit_redis_done(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer)
{
    ngx_int_t                    rc;
    ngx_stream_session_t        *s;
    ngx_ratelimit_zone_t        *zone;
    ngx_stream_ratelimit_ctx_t  *ctx;

    ctx = w->owner;
    s = ctx->session;
    zone = ngx_ratelimit_zone_of(ngx_ratelimit_rule_of(&ctx->rq.checks[0]));
    ctx->redis_waiting = 0;

    if (answer == NULL) {
        /* the call may have taken its leases all the same: given back */
        ngx_ratelimit_redis_lease_release(zone->redis, &ctx->rq, NULL);
        rc = ngx_stream_ratelimit_redis_fallback(s, ctx);

    } else {
        (void) ngx_atomic_fetch_add(&zone->redis->stats->decisions, 1);
        rc = ngx_stream_ratelimit_redis_verdict(s, ctx, zone,
                                                NGX_RATELIMIT_BY_REDIS);
    }

    /* delayed (NGX_DONE): its timer runs the phases on */

    ctx->rc = (rc == NGX_DONE) ? NGX_DECLINED : rc;

    if (rc != NGX_DONE) {
        ctx->resume.handler = ngx_stream_ratelimit_go_on;
        ctx->resume.data = ctx;
        ctx->resume.log = s->connection->log;
        ngx_post_event(&ctx->resume, &ngx_posted_events);
    }
}


/*
 * A session Redis decided (by: in Redis, from a refusal remembered, or
 * from an override the zone holds), counted in this server's zone (its
 * rules' counters, a refusal among the top keys) under its lock; Redis's
 * answer noted among the refusals remembered; then applied.
 */

static ngx_int_t
ngx_stream_ratelimit_redis_verdict(ngx_stream_session_t *s,
    ngx_stream_ratelimit_ctx_t *ctx, ngx_ratelimit_zone_t *zone,
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

    if (by != NGX_RATELIMIT_BY_REDIS
        && by != NGX_RATELIMIT_BY_LOCAL)
    {
        ctx->ends = 0;   /* it holds nothing to give back */
    }

    return ngx_stream_ratelimit_verdict(s,
               ngx_stream_get_module_srv_conf(s, ngx_stream_ratelimit_module),
               ctx);
}


/*
 * on_redis_error: local decides in the zone with the same rules, and a
 * session it admits keeps its leases' names, written into Redis once it
 * answers again; allow passes the session, deny refuses it.
 */

static ngx_int_t
ngx_stream_ratelimit_redis_fallback(ngx_stream_session_t *s,
    ngx_stream_ratelimit_ctx_t *ctx)
{
    ngx_int_t                         rc;
    ngx_ratelimit_zone_t             *zone;
    ngx_ratelimit_redis_t            *redis;
    ngx_stream_ratelimit_srv_conf_t  *rscf;

    zone = ngx_ratelimit_zone_of(ngx_ratelimit_rule_of(&ctx->rq.checks[0]));
    redis = zone->redis;
    rscf = ngx_stream_get_module_srv_conf(s, ngx_stream_ratelimit_module);

    ngx_ratelimit_redis_failed(zone, &ctx->rq, ctx->here);
    ctx->here = 0;

    switch (redis->on_error) {

    case NGX_RATELIMIT_REDIS_LOCAL:
        ctx->decided_by = NGX_RATELIMIT_BY_FALLBACK_LOCAL;
        rc = ngx_stream_ratelimit_decide_local(s, ctx);
        break;

    case NGX_RATELIMIT_REDIS_DENY:
        ctx->decided_by = NGX_RATELIMIT_BY_FALLBACK_DENY;
        ctx->ends = 0;
        rl_request_fail(&ctx->rq, 1);
        rc = ngx_stream_ratelimit_verdict(s, rscf, ctx);
        break;

    default: /* NGX_RATELIMIT_REDIS_ALLOW */
        ctx->decided_by = NGX_RATELIMIT_BY_FALLBACK_ALLOW;
        ctx->ends = 0;
        rl_request_fail(&ctx->rq, 0);
        rc = ngx_stream_ratelimit_verdict(s, rscf, ctx);
        break;
    }

    ctx->leased = ngx_ratelimit_redis_lease_keep(redis, &ctx->rq,
                                                 &ctx->lease);

    return rc;
}


/* A rule's check for the session: its key (empty: exempt), cost, limits. */

static ngx_int_t
ngx_stream_ratelimit_check(ngx_stream_session_t *s,
    ngx_stream_ratelimit_rule_t *rule, rl_check_t *c)
{
    char       err[RL_ERR_MAX];
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

        c->cost = ngx_ratelimit_rule_cost(&rule->common, &value, err);

        if (err[0] != '\0') {
            ngx_ratelimit_log_bad(s->connection->log, &rule->common, err);
        }
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
    char              err[RL_ERR_MAX];
    ngx_str_t         limit, burst;
    const rl_rule_t  *applied;

    ngx_str_null(&limit);
    ngx_str_null(&burst);

    if ((rule->limit
         && ngx_stream_complex_value(s, rule->limit, &limit) != NGX_OK)
        || (rule->burst
            && ngx_stream_complex_value(s, rule->burst, &burst) != NGX_OK))
    {
        return NULL;
    }

    applied = ngx_ratelimit_rule_applied(s->connection->pool, &rule->common,
                                         &limit, &burst, err);

    if (err[0] != '\0') {
        ngx_ratelimit_log_bad(s->connection->log, &rule->common, err);
    }

    return applied;
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
        /* Redis keeps what it reserved (as HTTP's delayed requests) */
        ctx->refund = ctx->decided_by != NGX_RATELIMIT_BY_REDIS;
        ngx_add_timer(&ctx->delay, (ngx_msec_t) rq->delay_ms);
        return ngx_stream_ratelimit_watch(s);

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

    if (ctx->kept) {
        return NGX_OK;
    }

    cln = ngx_pool_cleanup_add(s->connection->pool, 0);
    checks = ngx_palloc(s->connection->pool, ctx->rq.n * sizeof(rl_check_t));

    if (cln == NULL || checks == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(checks, ctx->rq.checks, ctx->rq.n * sizeof(rl_check_t));
    ctx->rq.checks = checks;

    cln->handler = ngx_stream_ratelimit_cleanup;
    cln->data = ctx;
    ctx->kept = 1;

    return NGX_OK;
}


/*
 * A delayed session's time is up: the phases run on (the handler passes
 * it), or the server's content handler of a late decision runs.
 */

static void
ngx_stream_ratelimit_delayed(ngx_event_t *ev)
{
    ngx_stream_ratelimit_ctx_t  *ctx;

    ctx = ev->data;

    ctx->delayed = 0;
    ctx->refund = 0;

    ngx_stream_ratelimit_go_on(ev);
}


/*
 * A held session decided: the phases run on into the handler, which
 * returns what was decided, or the server's content handler of a late
 * decision runs the same way.
 */

static void
ngx_stream_ratelimit_go_on(ngx_event_t *ev)
{
    ngx_stream_session_t             *s;
    ngx_stream_ratelimit_ctx_t       *ctx;
    ngx_stream_ratelimit_srv_conf_t  *rscf;

    ctx = ev->data;
    s = ctx->session;

    rscf = ngx_stream_get_module_srv_conf(s, ngx_stream_ratelimit_module);

    if (rscf->late) {
        ngx_stream_ratelimit_content(s);
        return;
    }

    ngx_stream_core_run_phases(s);
}


/*
 * A held TCP session's connection watched for reading: nginx watches none
 * before its preread or proxy does, and its client's end (or bytes) runs
 * the phases into the handler, which ends a session whose client left
 * (ngx_stream_ratelimit_gone).  NGX_DONE: held.
 */

static ngx_int_t
ngx_stream_ratelimit_watch(ngx_stream_session_t *s)
{
    if (s->connection->type == SOCK_STREAM
        && ngx_handle_read_event(s->connection->read, 0) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_DONE;
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
 * However the session ends: its timer stopped and Redis not waited for
 * any longer; what a held session reserved given back; its concurrency
 * slots given back (ngx_stream_ratelimit_end).
 */

static void
ngx_stream_ratelimit_cleanup(void *data)
{
    ngx_stream_ratelimit_ctx_t  *ctx = data;

    ngx_shmtx_t  *mutex;

    if (ctx->delay.timer_set) {
        ngx_del_timer(&ctx->delay);
    }

    if (ctx->resume.posted) {
        ngx_delete_posted_event(&ctx->resume);
    }

    if (ctx->redis_waiting) {
        ctx->redis_waiting = 0;
        ngx_ratelimit_redis_cancel(ctx->redis);
    }

    if (ctx->delayed && ctx->refund) {
        ctx->refund = 0;
        mutex = ngx_ratelimit_lock(&ctx->rq);
        rl_request_refund(&ctx->rq, ngx_ratelimit_now());
        ngx_ratelimit_unlock(&ctx->rq, mutex);
    }

    ngx_stream_ratelimit_end(ctx);
}


/*
 * A session's end: the slots a Redis zone's session held in its server's
 * zone while Redis decided; then, for one decided in Redis, its leases
 * released there (not waited for); for one decided here, its slots given
 * back, and the leases one on_redis_error=local admitted kept in Redis.
 */

static void
ngx_stream_ratelimit_end(ngx_stream_ratelimit_ctx_t *ctx)
{
    ngx_uint_t              i;
    ngx_shmtx_t            *mutex;
    ngx_ratelimit_redis_t  *redis;

    if (ctx->here) {
        ctx->here = 0;
        mutex = ngx_ratelimit_lock(&ctx->rq);
        (void) rl_request_free_here(&ctx->rq, ngx_ratelimit_now(), 1);
        ngx_ratelimit_unlock(&ctx->rq, mutex);
    }

    /* a session nothing decided (its client left while Redis was asked)
       holds nothing; on_redis_error=allow or deny reserved nothing */

    if (!ctx->ends
        || (ctx->decided_by != NGX_RATELIMIT_BY_LOCAL
            && ctx->decided_by != NGX_RATELIMIT_BY_FALLBACK_LOCAL
            && ctx->decided_by != NGX_RATELIMIT_BY_REDIS))
    {
        return;
    }

    ctx->ends = 0;
    redis = ngx_ratelimit_zone_of(
                ngx_ratelimit_rule_of(&ctx->rq.checks[0]))->redis;

    if (ctx->decided_by == NGX_RATELIMIT_BY_REDIS) {
        if (ctx->leased) {
            ctx->leased = 0;
            ngx_ratelimit_redis_lease_release(redis, &ctx->rq, &ctx->lease);
        }

        for (i = 0; i < ctx->rq.n; i++) {
            ctx->rq.checks[i].charge = RL_NO_CHARGE;
        }

        ngx_ratelimit_redis_settle(redis, &ctx->rq);
        return;
    }

    mutex = ngx_ratelimit_lock(&ctx->rq);
    (void) rl_request_end(&ctx->rq, ngx_ratelimit_now());
    ngx_ratelimit_unlock(&ctx->rq, mutex);

    if (ctx->leased) {
        ctx->leased = 0;
        ngx_ratelimit_redis_lease_release(redis, &ctx->rq, &ctx->lease);
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
