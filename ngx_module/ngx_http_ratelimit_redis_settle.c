
/*
 * ngx-ratelimit: the charges (charge=) of a request decided in Redis, sent
 * when it ends.
 *
 * The log phase evaluates each charge and hands the request's checks here;
 * the checks that settle one are copied, with their rules and keys, out of
 * the request's pool (which goes away with the request), and one script
 * call (rl_redis_command, RL_REDIS_SETTLE: each gives back the cost it
 * reserved and spends its charge, atomically in Redis) is pipelined on the
 * worker's connection to the server of the key's slot.  Nothing waits for
 * the reply: the request ends at once, and the worker goes on.  The reply,
 * judged by the core, is counted in this server's zone (each rule's units
 * charged and the requests left in debt, as for a local zone); a settle
 * that Redis does not take (not reachable, no reply within redis_timeout,
 * a reply refused) is counted as undelivered and logged, folded: its
 * charge is lost, and the key keeps the cost its request reserved.
 */


#include "ngx_http_ratelimit_redis_settle.h"
#include "ngx_http_ratelimit_log.h"
#include "ngx_http_ratelimit_redis.h"


typedef struct ngx_http_ratelimit_settle_s  ngx_http_ratelimit_settle_t;

struct ngx_http_ratelimit_settle_s {
    ngx_http_ratelimit_redis_wait_t   wait;     /* first: its handler's */
    rl_request_t                      rq;
    size_t                            size;     /* of the whole block */
    ngx_http_ratelimit_settle_t      *next;     /* in the free blocks */
    /* then rq.n checks, their rules, their keys */
};


/* Blocks of this size are kept for the next settles (most are: a few rules
   with short keys), at most so many a zone in a worker. */
#define NGX_HTTP_RATELIMIT_SETTLE_BLOCK  4096
#define NGX_HTTP_RATELIMIT_SETTLE_KEPT   64


static ngx_http_ratelimit_settle_t *ngx_http_ratelimit_settle_alloc(
    ngx_http_ratelimit_redis_t *redis, size_t size);
static void ngx_http_ratelimit_settle_free(ngx_http_ratelimit_redis_t *redis,
    ngx_http_ratelimit_settle_t *s);
static void ngx_http_ratelimit_settle_done(ngx_http_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer);
static void ngx_http_ratelimit_settle_lost(ngx_http_ratelimit_redis_t *redis,
    rl_request_t *rq, const char *why);


void
ngx_http_ratelimit_redis_settle(ngx_http_ratelimit_redis_t *redis,
    rl_request_t *rq)
{
    u_char                       *p;
    size_t                        i, n, size;
    rl_rule_t                    *rules;
    rl_check_t                   *c, *checks;
    ngx_http_ratelimit_settle_t  *s;

    n = 0;
    size = sizeof(ngx_http_ratelimit_settle_t);

    for (i = 0; i < rq->n; i++) {
        c = &rq->checks[i];

        if (rl_check_charges(c) && c->charge != RL_NO_CHARGE) {
            c->charged = c->charge;   /* $ratelimit_charged: what is sent */
            n++;
            size += sizeof(rl_check_t) + sizeof(rl_rule_t) + c->key_len;
        }
    }

    if (n == 0) {
        return;
    }

    s = ngx_http_ratelimit_settle_alloc(redis, size);
    if (s == NULL) {
        ngx_http_ratelimit_settle_lost(redis, rq, "out of memory");
        return;
    }

    checks = (rl_check_t *) (s + 1);
    rules = (rl_rule_t *) (checks + n);
    p = (u_char *) (rules + n);
    n = 0;

    for (i = 0; i < rq->n; i++) {
        c = &rq->checks[i];

        if (!rl_check_charges(c) || c->charge == RL_NO_CHARGE) {
            continue;
        }

        checks[n] = *c;
        rules[n] = *c->rule;   /* as applied: in the request's pool */
        checks[n].rule = &rules[n];
        checks[n].key = p;
        p = ngx_cpymem(p, c->key, c->key_len);
        n++;
    }

    s->rq = *rq;
    s->rq.checks = checks;
    s->rq.n = n;

    ngx_memzero(&s->wait, sizeof(ngx_http_ratelimit_redis_wait_t));
    s->wait.handler = ngx_http_ratelimit_settle_done;
    s->wait.rq = &s->rq;
    s->wait.call = RL_REDIS_SETTLE;

    if (ngx_http_ratelimit_redis_send(redis, &s->wait) != NGX_OK) {
        ngx_http_ratelimit_settle_lost(redis, &s->rq,
                                       "Redis is not reachable now");
        ngx_http_ratelimit_settle_free(redis, s);
    }
}


/*
 * The settle's reply, judged by the core (answer: each check's charged,
 * in_debt, capped), or none (NULL): counted in the zone, under its lock as
 * a request's outcome is; a charge cut by the debt's bound is logged as a
 * local zone logs it.
 */

static void
ngx_http_ratelimit_settle_done(ngx_http_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer)
{
    size_t                        i;
    char                          err[RL_ERR_MAX];
    rl_check_t                   *c;
    ngx_http_ratelimit_rule_t    *rule;
    ngx_http_ratelimit_zone_t    *zone;
    ngx_http_ratelimit_settle_t  *s;

    s = (ngx_http_ratelimit_settle_t *) w;   /* its first field */

    if (answer == NULL) {
        ngx_http_ratelimit_settle_lost(w->redis, &s->rq,
            w->timed_out ? "no reply within redis_timeout"
                         : "the connection failed or the reply was refused "
                           "(see above)");
        ngx_http_ratelimit_settle_free(w->redis, s);
        return;
    }

    (void) ngx_atomic_fetch_add(&w->redis->stats->charges, 1);

    zone = ngx_http_ratelimit_zone_of(
               ngx_http_ratelimit_rule_of(&s->rq.checks[0]));

    ngx_shmtx_lock(&zone->shpool->mutex);
    rl_request_count_charges(&s->rq);
    ngx_shmtx_unlock(&zone->shpool->mutex);

    for (i = 0; i < s->rq.n; i++) {
        c = &s->rq.checks[i];

        if (c->capped) {
            rule = ngx_http_ratelimit_rule_of(c);
            ngx_snprintf((u_char *) err, sizeof(err),
                         "charge %uL capped at %uL: a key owes at most one "
                         "limit beyond its budget%Z", c->charge, c->charged);
            ngx_http_ratelimit_log_bad(NULL, rule, err);
        }
    }

    ngx_http_ratelimit_settle_free(w->redis, s);
}


/* A settle Redis did not take: counted, and a line (folded) says so. */

static void
ngx_http_ratelimit_settle_lost(ngx_http_ratelimit_redis_t *redis,
    rl_request_t *rq, const char *why)
{
    size_t       i;
    rl_check_t  *c;

    (void) ngx_atomic_fetch_add(&redis->stats->undelivered, 1);

    if (!ngx_http_ratelimit_redis_log_now(redis, &redis->undelivered)) {
        return;
    }

    c = &rq->checks[0];

    for (i = 0; i < rq->n; i++) {
        if (rl_check_charges(&rq->checks[i])
            && rq->checks[i].charge != RL_NO_CHARGE)
        {
            c = &rq->checks[i];
            break;
        }
    }

    ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                  "ratelimit: redis %V: a request's charge not delivered in "
                  "zone \"%V\" (rule \"%V\", %uL units): %s; the cost it "
                  "reserved stays spent", &redis->server, &redis->zone,
                  &ngx_http_ratelimit_rule_of(c)->name, c->charge, why);
}


/* A settle's block: a kept one, or a new one. */

static ngx_http_ratelimit_settle_t *
ngx_http_ratelimit_settle_alloc(ngx_http_ratelimit_redis_t *redis,
    size_t size)
{
    ngx_http_ratelimit_settle_t  *s;

    if (size <= NGX_HTTP_RATELIMIT_SETTLE_BLOCK && redis->free != NULL) {
        s = redis->free;
        redis->free = s->next;
        redis->nfree--;
        return s;
    }

    size = ngx_max(size, NGX_HTTP_RATELIMIT_SETTLE_BLOCK);

    s = ngx_alloc(size, ngx_cycle->log);
    if (s == NULL) {
        return NULL;
    }

    s->size = size;

    return s;
}


static void
ngx_http_ratelimit_settle_free(ngx_http_ratelimit_redis_t *redis,
    ngx_http_ratelimit_settle_t *s)
{
    if (s->size == NGX_HTTP_RATELIMIT_SETTLE_BLOCK
        && redis->nfree < NGX_HTTP_RATELIMIT_SETTLE_KEPT)
    {
        s->next = redis->free;
        redis->free = s;
        redis->nfree++;
        return;
    }

    ngx_free(s);
}
