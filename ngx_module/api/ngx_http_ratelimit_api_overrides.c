
/*
 * ngx-ratelimit: the key API's overrides (zones/NAME/overrides): one key's
 * (or one address range's) limits, refusal or free pass, written with a
 * JSON body (PUT), read (GET: one, or a page of them), removed (DELETE);
 * each write logged at notice with who asked.  The core reads the target
 * and the body and checks them against the rule (ratelimit_override.h);
 * a local zone's store is written under its lock, and its file after
 * (ngx_ratelimit_overrides.c); a Redis zone's overrides are Redis's
 * (ngx_http_ratelimit_api_redis.c).
 */


#include "ngx_http_ratelimit_api_overrides.h"
#include "ngx_http_ratelimit_api_keys.h"
#include "ngx_http_ratelimit_api_redis.h"
#include "ngx_http_ratelimit_answer.h"
#include "ngx_ratelimit_overrides.h"


/* The longest body a PUT takes. */
#define NGX_HTTP_RATELIMIT_API_BODY_MAX  4096


static ngx_int_t ngx_http_ratelimit_api_target(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, const rl_override_rule_t **rule);
static ngx_int_t ngx_http_ratelimit_api_write(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, const rl_override_rule_t *rule);
static ngx_int_t ngx_http_ratelimit_api_list(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);


/*
 * A PUT's body, whole, in memory (client_body_buffer_size holds it: an
 * override's JSON is a few dozen bytes); NULL data: too large.
 */

ngx_int_t
ngx_http_ratelimit_api_body(ngx_http_request_t *r, ngx_str_t *body)
{
    u_char       *p;
    size_t        len;
    ngx_chain_t  *cl;

    ngx_str_null(body);

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        body->data = (u_char *) "";
        return NGX_OK;
    }

    len = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        if (cl->buf->in_file) {
            return NGX_OK;
        }

        len += cl->buf->last - cl->buf->pos;
    }

    if (len > NGX_HTTP_RATELIMIT_API_BODY_MAX) {
        return NGX_OK;
    }

    body->data = ngx_pnalloc(r->pool, len + 1);
    if (body->data == NULL) {
        return NGX_ERROR;
    }

    p = body->data;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        if (cl->buf->last != cl->buf->pos) {   /* an empty one may have none */
            p = ngx_cpymem(p, cl->buf->pos, cl->buf->last - cl->buf->pos);
        }
    }

    body->len = len;

    return NGX_OK;
}


ngx_int_t
ngx_http_ratelimit_api_overrides(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    ngx_int_t                  rc;
    const rl_override_rule_t  *rule;

    if (!q->in.has_key && !q->in.has_range) {
        return ngx_http_ratelimit_api_list(r, q);
    }

    rc = ngx_http_ratelimit_api_target(r, q, &rule);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc != NGX_OK) {   /* the core's message, in q->in */
        return ngx_http_ratelimit_send_json(r, q->in.status,
                                            (u_char *) q->in.error,
                                            q->in.error_len);
    }

    /* a Redis or redis_sync zone's are in Redis, shared by the fleet */

    if (q->zone->overrides_redis != NULL) {
        return ngx_http_ratelimit_api_redis_override(r, q, rule);
    }

    return ngx_http_ratelimit_api_write(r, q, rule);
}


/*
 * The override's target read and bound to the zone's rules (the core says
 * what is wrong with it): its rule as configured found (NULL: every rule);
 * a PUT's body read and taken as the file's lines and Redis's fields are
 * (rl_override_admit).  NGX_OK, NGX_ERROR, or NGX_DECLINED with the
 * answer's message in q->in.
 */

static ngx_int_t
ngx_http_ratelimit_api_target(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, const rl_override_rule_t **rule)
{
    int                          rc;
    ngx_uint_t                   n;
    rl_override_rule_t          *rules;
    char                         err[RL_ERR_MAX];

    if (rl_override_target(&q->ov.target, q->in.rule, q->in.rule_len,
                           q->in.has_key ? q->in.key : NULL, q->in.key_len,
                           q->in.has_range ? q->in.range : NULL,
                           q->in.range_len, err, sizeof(err))
        != RL_OK)
    {
        (void) rl_api_message(&q->in, NGX_HTTP_BAD_REQUEST, err);
        return NGX_DECLINED;
    }

    ngx_memcpy(q->ov.target.keyed, q->in.keyed, sizeof(q->in.keyed));

    rules = ngx_palloc(r->pool,
                       (q->zone->nnames + 1) * sizeof(rl_override_rule_t));
    if (rules == NULL) {
        return NGX_ERROR;
    }

    (void) ngx_ratelimit_overrides_rules(q->zone, rules, &n);

    if (!q->in.put) {
        rc = rl_override_bind(&q->ov.target, rules, n, rule, err,
                              sizeof(err));

    } else {
        rc = rl_override_body(&q->ov, (char *) q->body.data, q->body.len,
                              ngx_ratelimit_now(), err, sizeof(err));

        if (rc == RL_OK) {
            rc = rl_override_admit(&q->ov, rules, n, q->zone->redis != NULL,
                                   ngx_ratelimit_now(), rule, err,
                                   sizeof(err));
        }
    }

    if (rc == RL_ERROR) {
        (void) rl_api_message(&q->in, NGX_HTTP_BAD_REQUEST, err);
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * A local zone's override written, removed or read, under the zone's lock
 * as a request takes it: a write either applies whole or changes nothing.
 */

static ngx_int_t
ngx_http_ratelimit_api_write(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, const rl_override_rule_t *rule)
{
    int      rc;
    int64_t  now;

    if (q->zone->store == NULL) {
        return q->in.put ? ngx_http_ratelimit_api_fail(r, q,
                                                       RL_API_NO_OVERRIDES)
                         : ngx_http_ratelimit_api_fail(r, q,
                                                       RL_API_NO_OVERRIDE);
    }

    ngx_shmtx_lock(&q->zone->shpool->mutex);

    now = ngx_ratelimit_now();

    if (q->in.put) {
        rc = rl_override_put(q->zone->table, &q->ov, rule, now);
        (void) rl_override_get(q->zone->table, &q->ov.target, now, &q->ov);

    } else if (q->in.reset) {
        rc = rl_override_get(q->zone->table, &q->ov.target, now, &q->ov)
             ? rl_override_delete(q->zone->table, &q->ov.target, rule, now)
             : RL_OVERRIDE_MISSING;

    } else {
        rc = rl_override_get(q->zone->table, &q->ov.target, now, &q->ov)
             ? RL_OVERRIDE_OK : RL_OVERRIDE_MISSING;
    }

    ngx_shmtx_unlock(&q->zone->shpool->mutex);

    switch (rc) {

    case RL_OVERRIDE_FULL:
        return ngx_http_ratelimit_api_fail(r, q, RL_API_OVERRIDES_FULL);

    case RL_OVERRIDE_MISSING:
        return ngx_http_ratelimit_api_fail(r, q, RL_API_NO_OVERRIDE);
    }

    if (q->in.put || q->in.reset) {
        ngx_ratelimit_overrides_changed(q->zone);
        ngx_http_ratelimit_api_log_override(r, q);
    }

    return ngx_http_ratelimit_api_override_answer(r, q);
}


/*
 * GET zones/NAME/overrides: a page of the zone's overrides (of rule=, from=,
 * at most count=), copied under its lock.  A Redis zone's are the ones this
 * server took from Redis last.
 */

static ngx_int_t
ngx_http_ratelimit_api_list(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    size_t                 total;
    rl_override_t         *list;
    rl_overrides_view_t    v;

    ngx_memzero(&v, sizeof(rl_overrides_view_t));
    v.zone = ngx_ratelimit_rl_str(&q->zone->name);
    v.now_ms = ngx_ratelimit_now();
    v.capacity = q->zone->overrides;
    v.from = q->in.from;

    if (q->in.put || q->in.reset) {
        return ngx_http_ratelimit_api_fail(r, q, RL_API_NO_OVERRIDE);
    }

    if (q->zone->store != NULL) {
        list = ngx_palloc(r->pool, q->in.count * sizeof(rl_override_t));
        if (list == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_shmtx_lock(&q->zone->shpool->mutex);
        v.n = rl_override_list(q->zone->table,
                               q->in.rule_len ? q->in.rule : NULL,
                               q->in.from, v.now_ms, list, q->in.count,
                               &total);
        ngx_shmtx_unlock(&q->zone->shpool->mutex);

        v.list = list;
        v.total = total;
    }

    return ngx_http_ratelimit_api_send_overrides(r, &v);
}
