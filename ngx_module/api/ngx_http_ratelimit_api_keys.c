
/*
 * ngx-ratelimit: a key's states in a zone's rules (the key API's
 * zones/NAME/keys), read or reset through the core (rl_table_peek,
 * rl_table_reset) under the zone's lock as a request takes it, in a worker;
 * each reset logged; and the answer of what was found, here or in Redis
 * (ngx_http_ratelimit_api_redis.c).
 */


#include "ngx_http_ratelimit_api_keys.h"
#include "ngx_http_ratelimit_answer.h"
#include "ngx_ratelimit_bandwidth.h"
#include "ngx_ratelimit_snapshot.h"
#include "ngx_ratelimit_zone.h"
#include "ngx_ratelimit_log.h"


static ngx_uint_t ngx_http_ratelimit_api_user_verified(
    ngx_http_request_t *r);


/* GET zones/NAME/keys reads each state, DELETE resets it. */

ngx_int_t
ngx_http_ratelimit_api_keys(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    int64_t                now;
    ngx_uint_t             i;
    rl_key_state_t        *st;
    ngx_ratelimit_rule_t  *rule;

    if (ngx_http_ratelimit_api_states(r, q) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* a bandwidth rule's key is read, not reset: its entry counts its
       connections in flight */

    if (!q->in.reset
        && ngx_ratelimit_bw_states(q->zone, &q->in, q->states)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    st = q->states->elts;

    /* under the zone's lock, as a request: no state changes in between */

    ngx_shmtx_lock(&q->zone->shpool->mutex);

    now = ngx_ratelimit_now();

    for (i = 0; i < q->states->nelts; i++) {
        rule = st[i].data;

        if (st[i].bandwidth) {
            rl_bandwidth_peek(q->zone->table, st[i].tag, now * 1000,
                              &st[i].bw);

        } else if (q->in.reset) {
            st[i].reset = rl_table_reset(q->zone->table, st[i].tag, now);

        } else {
            rl_table_peek(q->zone->table, &rule->rule, st[i].tag,
                          st[i].cost, now, &st[i].peek);
        }
    }

    ngx_shmtx_unlock(&q->zone->shpool->mutex);

    for (i = 0; q->in.reset && i < q->states->nelts; i++) {
        ngx_http_ratelimit_api_log_reset(r, q, &st[i]);
    }

    return ngx_http_ratelimit_api_answer(r, q);
}


/*
 * The states a key has in the zone: one for each rule (or the rule=), the
 * key hashed as a request's is; rules sharing a state (the same name,
 * algorithm and key) once.  A fingerprint is its rule's state already.
 */

ngx_int_t
ngx_http_ratelimit_api_states(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    ngx_uint_t              i, j;
    ngx_str_t               asked;
    rl_key_state_t         *st, *seen;
    ngx_ratelimit_rule_t  **rules, *rule;

    q->states = ngx_array_create(r->pool, 4, sizeof(rl_key_state_t));
    if (q->states == NULL) {
        return NGX_ERROR;
    }

    rules = q->zone->rules.elts;
    asked.data = (u_char *) q->in.rule;
    asked.len = q->in.rule_len;

    for (i = 0; i < q->zone->rules.nelts; i++) {
        if (asked.len
            && (rules[i]->name.len != asked.len
                || ngx_strncmp(rules[i]->name.data, asked.data, asked.len)
                   != 0))
        {
            continue;
        }

        seen = q->states->elts;

        for (j = 0; j < q->states->nelts; j++) {
            rule = seen[j].data;

            if (rule->identity == rules[i]->identity
                || q->in.has_fingerprint)
            {
                break;
            }
        }

        if (j < q->states->nelts) {
            continue;
        }

        st = ngx_array_push(q->states);
        if (st == NULL) {
            return NGX_ERROR;
        }

        ngx_memzero(st, sizeof(rl_key_state_t));
        st->data = rules[i];
        st->rule = ngx_ratelimit_rl_str(&rules[i]->name);
        st->config = &rules[i]->rule;
        st->tag = q->in.has_fingerprint
                  ? q->in.fingerprint
                  : rl_table_tag(q->zone->table, rules[i]->identity,
                                 q->in.key, q->in.key_len);

        /* the next request's cost: the rule's, or 1 for a variable's */

        st->cost = rules[i]->cost_varies || rules[i]->rule.cost == 0
                   ? 1 : rules[i]->rule.cost;
    }

    return NGX_OK;
}


/* The states read (GET) or reset (DELETE), as JSON. */

ngx_int_t
ngx_http_ratelimit_api_answer(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    char               *p;
    size_t              len;
    rl_key_snapshot_t   k;

    k.zone = ngx_ratelimit_rl_str(&q->zone->name);
    k.key = q->in.has_key ? q->in.key : NULL;
    k.key_len = q->in.key_len;
    k.fingerprint = q->in.fingerprint;
    k.reset = q->in.reset;
    k.n = q->states->nelts;
    k.states = q->states->elts;

    len = rl_render_api_keys(&k, NULL, 0);
    p = ngx_pnalloc(r->pool, len);

    return ngx_http_ratelimit_send_rendered(r, p,
               p ? rl_render_api_keys(&k, p, len) : 0);
}


/* An error the core reads a request into (RL_API_*), answered. */

ngx_int_t
ngx_http_ratelimit_api_fail(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, int error)
{
    ngx_uint_t  status;

    status = rl_api_error(&q->in, error);

    return ngx_http_ratelimit_send_json(r, status, (u_char *) q->in.error,
                                        q->in.error_len);
}


/*
 * A reset, at notice: the key as the rule's log lines show it (in clear
 * only where the rule logs keys so and had a state for it: a key given for
 * every rule of a zone may be another rule's secret), and who asked.  Not
 * in the request's log context, which would write the request line, and
 * with it a key given in clear.  The user name is the client's, escaped
 * and cut as keys are, and said to be verified only where auth_basic
 * checked it (ngx_http_ratelimit_api_user_verified).
 */

void
ngx_http_ratelimit_api_log_reset(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, rl_key_state_t *st)
{
    u_char                *p;
    ngx_ratelimit_rule_t  *rule;
    u_char                 key[NGX_RATELIMIT_KEY_ESCAPED + 16];
    u_char                 who[NGX_HTTP_RATELIMIT_WHO_MAX];

    rule = st->data;

    if (rule->rule.log_key && q->in.has_key && st->reset) {
        key[0] = '"';
        p = ngx_ratelimit_escape_key(key + 1, q->in.key, q->in.key_len);
        *p++ = '"';

    } else {
        p = ngx_sprintf(key, "fingerprint %016xL", st->tag);
    }

    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "ratelimit: key %*s reset in rule \"%V\" of zone \"%V\" "
                  "by the key API (%s), %s",
                  (size_t) (p - key), key, &rule->name, &q->zone->name,
                  st->reset & RL_RESET_HELD
                  ? (st->reset & RL_RESET_FORGIVEN
                     ? "it was held, and owed in the eviction summary"
                     : "it was held")
                  : (st->reset & RL_RESET_FORGIVEN
                     ? "it owed in the eviction summary"
                     : "it had no state"),
                  ngx_http_ratelimit_api_who(r, who));
}


/*
 * Who asked, for a write's log line: "client ADDRESS[, user "NAME" (verified
 * by auth_basic | unverified: ...)]", NUL-terminated in who.
 */

char *
ngx_http_ratelimit_api_who(ngx_http_request_t *r, u_char *who)
{
    u_char      *u, *last;
    ngx_str_t    user;
    const char  *verified;
    u_char       name[NGX_RATELIMIT_KEY_ESCAPED];

    user = r->headers_in.user;

    if (user.len == 0 && r->headers_in.authorization
        && ngx_http_auth_basic_user(r) == NGX_OK)
    {
        user = r->headers_in.user;
    }

    u = ngx_ratelimit_escape_key(name, user.data, user.len);
    verified = ngx_http_ratelimit_api_user_verified(r)
               ? "\" (verified by auth_basic)"
               : "\" (unverified: as the Authorization header says)";

    last = ngx_snprintf(who, NGX_HTTP_RATELIMIT_WHO_MAX - 1, "client %V%s%*s%s",
                        &r->connection->addr_text,
                        user.len ? ", user \"" : "", (size_t) (u - name), name,
                        user.len ? verified : "");
    *last = '\0';

    return (char *) who;
}


/*
 * Whether auth_basic checked the request's user: the location asks for it
 * (its auth_basic is on, with a user file) and every access check must
 * pass (satisfy all).  Under satisfy any, or with another way in
 * (auth_request, allow), $remote_user is only what the client sent.
 * auth_basic keeps its configuration private; its first two fields, the
 * realm and the user file, have been these since nginx 1.3.10 (t/security
 * runs against every version of the matrix).
 */

static ngx_uint_t
ngx_http_ratelimit_api_user_verified(ngx_http_request_t *r)
{
    ngx_str_t                   realm;
    ngx_uint_t                  i;
    ngx_module_t               *m;
    ngx_http_core_loc_conf_t   *clcf;
    ngx_http_complex_value_t  **abcf;

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (clcf->satisfy != NGX_HTTP_SATISFY_ALL) {
        return 0;
    }

    for (i = 0; ngx_cycle->modules[i]; i++) {
        m = ngx_cycle->modules[i];

        if (m->type != NGX_HTTP_MODULE
            || ngx_strcmp(m->name, "ngx_http_auth_basic_module") != 0)
        {
            continue;
        }

        abcf = r->loc_conf[m->ctx_index];

        if (abcf == NULL || abcf[0] == NULL || abcf[1] == NULL
            || ngx_http_complex_value(r, abcf[0], &realm) != NGX_OK)
        {
            return 0;
        }

        return !(realm.len == 3 && ngx_strncmp(realm.data, "off", 3) == 0);
    }

    return 0;
}


/* Overrides as JSON: one, or a page of them. */

ngx_int_t
ngx_http_ratelimit_api_send_overrides(ngx_http_request_t *r,
    rl_overrides_view_t *v)
{
    char    *p;
    size_t   len;

    len = rl_render_api_overrides(v, NULL, 0);
    p = ngx_pnalloc(r->pool, len);

    return ngx_http_ratelimit_send_rendered(r, p,
               p ? rl_render_api_overrides(v, p, len) : 0);
}


/* One override, as JSON. */

ngx_int_t
ngx_http_ratelimit_api_override_answer(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    rl_overrides_view_t  v;

    ngx_memzero(&v, sizeof(rl_overrides_view_t));
    v.zone = ngx_ratelimit_rl_str(&q->zone->name);
    v.now_ms = ngx_ratelimit_now();
    v.one = 1;
    v.removed = q->in.reset;
    v.n = 1;
    v.list = &q->ov;

    return ngx_http_ratelimit_api_send_overrides(r, &v);
}


/*
 * A write, at notice: the override as the API shows it (a key as the rules'
 * log lines show keys: in clear where its rule logs keys so, else by its
 * rule's fingerprint), and who asked.
 */

void
ngx_http_ratelimit_api_log_override(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    u_char                *p, *t;
    ngx_str_t              name;
    ngx_ratelimit_rule_t  *rule;
    u_char                 target[NGX_RATELIMIT_KEY_ESCAPED + 64];
    u_char                 who[NGX_HTTP_RATELIMIT_WHO_MAX];
    char                   what[128];

    name.data = (u_char *) q->ov.target.rule;
    name.len = ngx_strlen(q->ov.target.rule);
    rule = name.len ? ngx_ratelimit_zone_rule(q->zone, &name) : NULL;

    if (q->ov.target.family) {
        t = ngx_sprintf(target, "range %s", q->in.range);

    } else if (rule != NULL && rule->rule.log_key) {
        target[0] = '"';
        t = ngx_ratelimit_escape_key(target + 1, q->ov.target.key,
                                     q->ov.target.key_len);
        *t++ = '"';

    } else {
        t = ngx_sprintf(target, "key fingerprint %016xL",
                        rl_table_tag(q->zone->table,
                                     rule ? rule->identity : 0,
                                     q->ov.target.key,
                                     q->ov.target.key_len));
    }

    if (q->in.reset) {
        ngx_snprintf((u_char *) what, sizeof(what), "removed%Z");

    } else if (q->ov.kind == RL_OVERRIDE_LIMIT) {
        p = ngx_cpymem((u_char *) what, "set:", 4);

        if (q->ov.given & RL_OVERRIDE_GIVE_LIMIT) {
            p = ngx_sprintf(p, " limit %uD", q->ov.limit);
        }

        if (q->ov.given & RL_OVERRIDE_GIVE_BURST) {
            p = ngx_sprintf(p, " burst %uD", q->ov.burst);
        }

        if (q->ov.given & RL_OVERRIDE_GIVE_PERIOD) {
            p = ngx_sprintf(p, " period %Lms", q->ov.period_ms);
        }

        ngx_sprintf(p, "%s%Z", q->ov.expires_ms ? ", with an expiry" : "");

    } else {
        ngx_snprintf((u_char *) what, sizeof(what), "set: %s%s%Z",
                     q->ov.kind == RL_OVERRIDE_DENY ? "deny" : "allow",
                     q->ov.expires_ms ? ", with an expiry" : "");
    }

    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "ratelimit: override of %*s in %s%V%s of zone \"%V\" %s by "
                  "the key API, %s", (size_t) (t - target), target,
                  name.len ? "rule \"" : "every rule", &name,
                  name.len ? "\"" : "", &q->zone->name, what,
                  ngx_http_ratelimit_api_who(r, who));
}
