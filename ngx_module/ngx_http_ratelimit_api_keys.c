
/*
 * ngx-ratelimit: what the key API answers (ratelimit_api; the request is
 * read in ngx_http_ratelimit_api.c): the zones and their rules, a key's
 * state in each rule and its reset, through the core (rl_table_peek,
 * rl_table_reset) under the zone's lock as a request takes it, in a
 * worker, or in Redis for a zone with redis= (ngx_http_ratelimit_api_redis.c);
 * and the keys each rule refuses most (rl_table_top).
 */


#include "ngx_http_ratelimit_module.h"
#include "ngx_http_ratelimit_api.h"


static void ngx_http_ratelimit_api_zone_json(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_zone_t *zone);
static void ngx_http_ratelimit_api_rule_json(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_rule_t *rule);
static ngx_array_t *ngx_http_ratelimit_api_states(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q);
static ngx_uint_t ngx_http_ratelimit_api_user_verified(
    ngx_http_request_t *r);
static void ngx_http_ratelimit_api_state_json(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_api_state_t *st, ngx_uint_t reset);
static void ngx_http_ratelimit_api_head(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_api_req_t *q);


/*
 * GET zones: {"version":V,"write":B,"top_epoch_ms":N,"zones":{NAME:{...}}};
 * GET zones/NAME: {"zone":NAME,...} with the same fields as a zone there.
 */

ngx_int_t
ngx_http_ratelimit_api_zones(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    ngx_uint_t                      i, n;
    ngx_list_part_t                *part;
    ngx_http_ratelimit_zone_t      *zone;
    ngx_http_ratelimit_writer_t     w;
    ngx_http_ratelimit_loc_conf_t  *rlcf;

    ngx_memzero(&w, sizeof(ngx_http_ratelimit_writer_t));
    w.pool = r->pool;

    if (q->zone) {
        ngx_http_ratelimit_puts(&w, "{\"zone\":");
        ngx_http_ratelimit_write_quoted(&w, &q->zone->name);
        ngx_http_ratelimit_puts(&w, ",");
        ngx_http_ratelimit_api_zone_json(&w, q->zone);
        ngx_http_ratelimit_puts(&w, "}\n");

        return ngx_http_ratelimit_api_send(r, NGX_HTTP_OK, &w);
    }

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);

    ngx_http_ratelimit_puts(&w, "{\"version\":\"" NGX_HTTP_RATELIMIT_VERSION
                                "\",\"write\":");

    if (rlcf->api_write) {
        ngx_http_ratelimit_puts(&w, "true");

    } else {
        ngx_http_ratelimit_puts(&w, "false");
    }

    ngx_http_ratelimit_api_field(&w, ",\"top_epoch_ms\":", RL_TOP_EPOCH_MS);
    ngx_http_ratelimit_puts(&w, ",\"zones\":{");

    part = NULL;
    i = 0;
    n = 0;

    while ((zone = ngx_http_ratelimit_next_zone((ngx_cycle_t *) ngx_cycle,
                                                 &part, &i))
           != NULL)
    {
        if (n++) {
            ngx_http_ratelimit_puts(&w, ",");
        }

        ngx_http_ratelimit_write_quoted(&w, &zone->name);
        ngx_http_ratelimit_puts(&w, ":{");
        ngx_http_ratelimit_api_zone_json(&w, zone);
        ngx_http_ratelimit_puts(&w, "}");
    }

    ngx_http_ratelimit_puts(&w, "}}\n");

    return ngx_http_ratelimit_api_send(r, NGX_HTTP_OK, &w);
}


/* A zone's fields: "redis":B, its figures (as ratelimit_stats), "rules". */

static void
ngx_http_ratelimit_api_zone_json(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_zone_t *zone)
{
    ngx_uint_t                   i, n;
    ngx_http_ratelimit_rule_t  **rules;

    if (zone->redis) {
        ngx_http_ratelimit_puts(w, "\"redis\":true,");

    } else {
        ngx_http_ratelimit_puts(w, "\"redis\":false,");
    }

    ngx_http_ratelimit_write_zone_figures(w, zone);
    ngx_http_ratelimit_puts(w, ",\"rules\":{");

    /* a rule name once: its first rule's parameters */

    rules = zone->rules.elts;
    n = 0;

    for (i = 0; i < zone->rules.nelts; i++) {
        if (ngx_http_ratelimit_zone_rule(zone, &rules[i]->name) != rules[i]) {
            continue;
        }

        if (n++) {
            ngx_http_ratelimit_puts(w, ",");
        }

        ngx_http_ratelimit_write_quoted(w, &rules[i]->name);
        ngx_http_ratelimit_puts(w, ":");
        ngx_http_ratelimit_api_rule_json(w, rules[i]);
    }

    ngx_http_ratelimit_puts(w, "}");
}


/*
 * {"algorithm":A,"key":"$expr","limit":N,...}: what the rule says, and its
 * algorithm's own parameters.
 */

static void
ngx_http_ratelimit_api_rule_json(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_rule_t *rule)
{
    ngx_str_t   s;
    rl_rule_t  *rr;

    rr = &rule->rule;

    ngx_http_ratelimit_puts(w, "{\"algorithm\":");
    s.data = (u_char *) rl_algorithm_name(rr->algorithm);
    s.len = ngx_strlen(s.data);
    ngx_http_ratelimit_write_quoted(w, &s);

    ngx_http_ratelimit_puts(w, ",\"key\":");
    ngx_http_ratelimit_write_quoted(w, &rule->key.value);

    ngx_http_ratelimit_api_field(w, ",\"limit\":", rr->limit);

    if (rr->limit_var) {
        ngx_http_ratelimit_puts(w, ",\"limit_variable\":true");
    }

    if (rr->algorithm == RL_QUOTA) {
        ngx_http_ratelimit_puts(w, ",\"reset\":");
        s.data = (u_char *) rl_reset_name(rr->reset);
        s.len = ngx_strlen(s.data);
        ngx_http_ratelimit_write_quoted(w, &s);

    } else {
        ngx_http_ratelimit_api_field(w, ",\"period_ms\":", rr->period_ms);
    }

    switch (rr->algorithm) {

    case RL_GCRA:
    case RL_TOKEN_BUCKET:
        ngx_http_ratelimit_api_field(w, ",\"burst\":", rr->burst);
        break;

    case RL_LEAKY_BUCKET:
        ngx_http_ratelimit_api_field(w, ",\"max_delay_ms\":",
                                     rr->max_delay_ms);
        break;

    case RL_SLIDING_WINDOW:
        ngx_http_ratelimit_api_field(w, ",\"buckets\":", rr->buckets);
        break;

    case RL_FIXED_WINDOW:
        if (rr->align == RL_ALIGN_FIRST) {
            ngx_http_ratelimit_puts(w, ",\"align\":\"first\"");

        } else {
            ngx_http_ratelimit_puts(w, ",\"align\":\"epoch\"");
        }

        break;
    }

    if (rr->log_key) {
        ngx_http_ratelimit_puts(w, ",\"log_key\":true}");

    } else {
        ngx_http_ratelimit_puts(w, ",\"log_key\":false}");
    }
}


/*
 * GET zones/NAME/keys: {"zone":Z,"key":K|"fingerprint":F,"rules":[...]},
 * a state for each rule (each state kept apart: rules of one name with
 * different keys have two).  DELETE: the same resets them, and says what
 * each held ("rules":[{"rule":R,"fingerprint":F,"held":B,"forgiven":B}]).
 */

ngx_int_t
ngx_http_ratelimit_api_keys(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    int64_t                          now;
    ngx_uint_t                       i, reset;
    ngx_array_t                     *states;
    ngx_http_ratelimit_api_state_t  *st;

    if (q->zone->redis && q->has_fingerprint) {
        return ngx_http_ratelimit_api_error(r, NGX_HTTP_BAD_REQUEST,
                   "zone \"%V\" is decided in Redis, where a key's state "
                   "is named by a SHA-256 of the key, not by this server's "
                   "fingerprint: give key=", &q->zone->name);
    }

    states = ngx_http_ratelimit_api_states(r, q);
    if (states == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (q->zone->redis) {
        return ngx_http_ratelimit_api_redis(r, q, states);
    }

    st = states->elts;
    reset = r->method == NGX_HTTP_DELETE;

    /* under the zone's lock, as a request: no state changes in between */

    ngx_shmtx_lock(&q->zone->shpool->mutex);

    now = ngx_http_ratelimit_now();

    for (i = 0; i < states->nelts; i++) {
        if (reset) {
            st[i].reset = rl_table_reset(q->zone->table, st[i].tag, now);

        } else {
            rl_table_peek(q->zone->table, &st[i].rule->rule, st[i].tag,
                          st[i].cost, now, &st[i].peek);
        }
    }

    ngx_shmtx_unlock(&q->zone->shpool->mutex);

    for (i = 0; reset && i < states->nelts; i++) {
        ngx_http_ratelimit_api_log_reset(r, q, &st[i]);
    }

    return ngx_http_ratelimit_api_answer(r, q, states);
}


/* The states read (GET) or reset (DELETE), as JSON. */

ngx_int_t
ngx_http_ratelimit_api_answer(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q, ngx_array_t *states)
{
    ngx_uint_t                       i, reset;
    ngx_http_ratelimit_writer_t      w;
    ngx_http_ratelimit_api_state_t  *st;

    st = states->elts;
    reset = r->method == NGX_HTTP_DELETE;

    ngx_memzero(&w, sizeof(ngx_http_ratelimit_writer_t));
    w.pool = r->pool;

    ngx_http_ratelimit_api_head(&w, q);
    ngx_http_ratelimit_puts(&w, ",\"rules\":[");

    for (i = 0; i < states->nelts; i++) {
        if (i) {
            ngx_http_ratelimit_puts(&w, ",");
        }

        ngx_http_ratelimit_api_state_json(&w, &st[i], reset);
    }

    ngx_http_ratelimit_puts(&w, "]}\n");

    return ngx_http_ratelimit_api_send(r, NGX_HTTP_OK, &w);
}


/*
 * The states a key has in the zone: one for each rule (or the rule=), the
 * key hashed as a request's is; rules sharing a state (the same name,
 * algorithm and key) once.  A fingerprint is its rule's state already.
 */

static ngx_array_t *
ngx_http_ratelimit_api_states(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    ngx_uint_t                       i, j;
    ngx_array_t                     *states;
    ngx_http_ratelimit_rule_t      **rules;
    ngx_http_ratelimit_api_state_t  *st, *seen;

    states = ngx_array_create(r->pool, 4,
                              sizeof(ngx_http_ratelimit_api_state_t));
    if (states == NULL) {
        return NULL;
    }

    rules = q->zone->rules.elts;

    for (i = 0; i < q->zone->rules.nelts; i++) {
        if (q->rule.len
            && (rules[i]->name.len != q->rule.len
                || ngx_strncmp(rules[i]->name.data, q->rule.data,
                               q->rule.len) != 0))
        {
            continue;
        }

        seen = states->elts;

        for (j = 0; j < states->nelts; j++) {
            if (seen[j].rule->identity == rules[i]->identity
                || q->has_fingerprint)
            {
                break;
            }
        }

        if (j < states->nelts) {
            continue;
        }

        st = ngx_array_push(states);
        if (st == NULL) {
            return NULL;
        }

        ngx_memzero(st, sizeof(ngx_http_ratelimit_api_state_t));
        st->rule = rules[i];
        st->tag = q->has_fingerprint
                  ? q->fingerprint
                  : rl_table_tag(q->zone->table, rules[i]->identity,
                                 q->key.data, q->key.len);

        /* the next request's cost: the rule's, or 1 for a variable's */

        st->cost = rules[i]->cost || rules[i]->rule.cost == 0
                   ? 1 : rules[i]->rule.cost;
    }

    return states;
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
    ngx_http_ratelimit_api_req_t *q, ngx_http_ratelimit_api_state_t *st)
{
    u_char      *p, *u;
    ngx_str_t    user;
    const char  *verified;
    u_char       key[NGX_HTTP_RATELIMIT_KEY_ESCAPED + 16];
    u_char       name[NGX_HTTP_RATELIMIT_KEY_ESCAPED];

    if (st->rule->rule.log_key && q->key.data && st->reset) {
        key[0] = '"';
        p = ngx_http_ratelimit_escape_key(key + 1, q->key.data, q->key.len);
        *p++ = '"';

    } else {
        p = ngx_sprintf(key, "fingerprint %016xL", st->tag);
    }

    user = r->headers_in.user;

    if (user.len == 0 && r->headers_in.authorization
        && ngx_http_auth_basic_user(r) == NGX_OK)
    {
        user = r->headers_in.user;
    }

    u = ngx_http_ratelimit_escape_key(name, user.data, user.len);
    verified = ngx_http_ratelimit_api_user_verified(r)
               ? "\" (verified by auth_basic)"
               : "\" (unverified: as the Authorization header says)";

    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "ratelimit: key %*s reset in rule \"%V\" of zone \"%V\" "
                  "by the key API (%s), client %V%s%*s%s",
                  (size_t) (p - key), key, &st->rule->name, &q->zone->name,
                  st->reset & RL_RESET_HELD
                  ? (st->reset & RL_RESET_FORGIVEN
                     ? "it was held, and owed in the eviction summary"
                     : "it was held")
                  : (st->reset & RL_RESET_FORGIVEN
                     ? "it owed in the eviction summary"
                     : "it had no state"),
                  &r->connection->addr_text,
                  user.len ? ", user \"" : "", (size_t) (u - name), name,
                  user.len ? verified : "");
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


/*
 * A state: {"rule":R,"fingerprint":F,"state":"held"|"summary"|"none",
 * "refused":B,"remaining":N,"reset":S,"reset_ms":MS,"retry_after":S,
 * "retry_after_ms":MS,"delay_ms":MS,"banned_ms":MS,"limit":N,"cost":N},
 * seconds rounded up as the headers show them (banned_ms: how much longer
 * a ban= keeps the key out, 0 if none); after a reset {"rule":R,
 * "fingerprint":F,"held":B,"forgiven":B,"unbanned":B}.
 */

static void
ngx_http_ratelimit_api_state_json(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_api_state_t *st, ngx_uint_t reset)
{
    rl_peek_t  *pk;

    ngx_http_ratelimit_puts(w, "{\"rule\":");
    ngx_http_ratelimit_write_quoted(w, &st->rule->name);
    ngx_http_ratelimit_puts(w, ",");
    ngx_http_ratelimit_api_fingerprint(w, st->tag);

    if (reset) {
        ngx_http_ratelimit_write_metric(w, ",\"held\":",
            st->reset & RL_RESET_HELD ? "true" : "false", "");
        ngx_http_ratelimit_write_metric(w, ",\"forgiven\":",
            st->reset & RL_RESET_FORGIVEN ? "true" : "false", "");
        ngx_http_ratelimit_write_metric(w, ",\"unbanned\":",
            st->reset & RL_RESET_UNBANNED ? "true" : "false", "}");
        return;
    }

    pk = &st->peek;

    ngx_http_ratelimit_write_metric(w, ",\"state\":\"",
        pk->held ? "held" : pk->owed ? "summary" : "none", "\"");
    ngx_http_ratelimit_write_metric(w, ",\"refused\":",
        pk->next.allowed ? "false" : "true", "");

    ngx_http_ratelimit_api_field(w, ",\"remaining\":", pk->look.remaining);
    ngx_http_ratelimit_api_field(w, ",\"reset\":",
                            rl_seconds(pk->look.reset_ms));
    ngx_http_ratelimit_api_field(w, ",\"reset_ms\":",
                                 ngx_max(pk->look.reset_ms, 0));

    /* Retry-After as the header shows it */

    ngx_http_ratelimit_api_field(w, ",\"retry_after\":",
                                 rl_retry_after_seconds(&pk->next));
    ngx_http_ratelimit_api_field(w, ",\"retry_after_ms\":",
        pk->next.allowed ? 0 : ngx_max(pk->next.retry_after_ms, 0));
    ngx_http_ratelimit_api_field(w, ",\"delay_ms\":",
        pk->next.allowed ? ngx_max(pk->next.delay_ms, 0) : 0);
    ngx_http_ratelimit_api_field(w, ",\"banned_ms\":",
                                 ngx_max(pk->banned_ms, 0));

    if (st->rule->rule.algorithm == RL_CONCURRENCY) {
        ngx_http_ratelimit_api_field(w, ",\"in_flight\":", pk->in_flight);
        ngx_http_ratelimit_api_field(w, ",\"waiting\":", pk->waiting);
    }

    ngx_http_ratelimit_api_field(w, ",\"limit\":", st->rule->rule.limit);
    ngx_http_ratelimit_api_field(w, ",\"cost\":", st->cost);
    ngx_http_ratelimit_puts(w, "}");
}


/*
 * GET zones/NAME/top: {"zone":Z,"since_ms":T,"rules":{R:{"state":
 * "kept"|"none"|"no_room","refusals":N,"entries":32,"keys":[{"fingerprint":
 * F,"key":K,"refused":N,"error":N,"banned_ms":MS},...]}}}, most refused
 * first; "key" only where the rule logs keys in clear, "banned_ms" only for
 * a key a ban= keeps out; a Redis zone's has "scope":"server" after
 * since_ms (this server's refusals).  Each rule's list is copied under the
 * zone's lock.
 */

ngx_int_t
ngx_http_ratelimit_api_top(ngx_http_request_t *r,
    ngx_http_ratelimit_api_req_t *q)
{
    size_t                        j;
    rl_top_t                     *top;
    ngx_uint_t                    i, n;
    ngx_http_ratelimit_rule_t   **rules;
    ngx_http_ratelimit_writer_t   w;

    static const char  *states[] = { "none", "kept", "no_room" };

    top = ngx_palloc(r->pool, sizeof(rl_top_t));
    if (top == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memzero(&w, sizeof(ngx_http_ratelimit_writer_t));
    w.pool = r->pool;

    ngx_http_ratelimit_puts(&w, "{\"zone\":");
    ngx_http_ratelimit_write_quoted(&w, &q->zone->name);
    ngx_http_ratelimit_api_field(&w, ",\"since_ms\":",
        (ngx_http_ratelimit_now() / RL_TOP_EPOCH_MS - 1) * RL_TOP_EPOCH_MS);

    /* a Redis zone's refusals are counted by each server in its own zone */

    if (q->zone->redis) {
        ngx_http_ratelimit_puts(&w, ",\"scope\":\"server\"");
    }

    ngx_http_ratelimit_puts(&w, ",\"rules\":{");

    rules = q->zone->rules.elts;
    n = 0;

    for (i = 0; i < q->zone->rules.nelts; i++) {
        if (ngx_http_ratelimit_zone_rule(q->zone, &rules[i]->name)
            != rules[i]
            || (q->rule.len
                && (rules[i]->name.len != q->rule.len
                    || ngx_strncmp(rules[i]->name.data, q->rule.data,
                                   q->rule.len) != 0)))
        {
            continue;
        }

        if (ngx_http_ratelimit_counters(r->connection->log, rules[i]) > 0) {
            ngx_http_ratelimit_top(q->zone, rules[i]->stats, top);

        } else {
            ngx_memzero(top, sizeof(rl_top_t));
            top->state = RL_TOP_NO_ROOM;   /* not counted at all */
        }

        if (n++) {
            ngx_http_ratelimit_puts(&w, ",");
        }

        ngx_http_ratelimit_write_quoted(&w, &rules[i]->name);
        ngx_http_ratelimit_write_metric(&w, ":{\"state\":\"",
                                        states[top->state], "\"");
        ngx_http_ratelimit_api_field(&w, ",\"refusals\":", top->refusals);
        ngx_http_ratelimit_api_field(&w, ",\"entries\":", RL_TOP_ENTRIES);
        ngx_http_ratelimit_puts(&w, ",\"keys\":[");

        for (j = 0; j < top->n; j++) {
            if (j) {
                ngx_http_ratelimit_puts(&w, ",");
            }

            ngx_http_ratelimit_puts(&w, "{");
            ngx_http_ratelimit_api_fingerprint(&w, top->top[j].tag);

            if (rules[i]->rule.log_key && top->top[j].key_len) {
                ngx_http_ratelimit_puts(&w, ",\"key\":");
                ngx_http_ratelimit_write_key(&w, top->top[j].key,
                                             top->top[j].key_len,
                                             top->top[j].key_cut);
            }

            ngx_http_ratelimit_api_field(&w, ",\"refused\":",
                                         top->top[j].refused);
            ngx_http_ratelimit_api_field(&w, ",\"error\":",
                                         top->top[j].error);

            if (top->top[j].banned_ms > 0) {
                ngx_http_ratelimit_api_field(&w, ",\"banned_ms\":",
                                             top->top[j].banned_ms);
            }

            ngx_http_ratelimit_puts(&w, "}");
        }

        ngx_http_ratelimit_puts(&w, "]}");
    }

    ngx_http_ratelimit_puts(&w, "}}\n");

    return ngx_http_ratelimit_api_send(r, NGX_HTTP_OK, &w);
}


/* {"zone":Z and the key asked about: "key":K (escaped) or "fingerprint" */

static void
ngx_http_ratelimit_api_head(ngx_http_ratelimit_writer_t *w,
    ngx_http_ratelimit_api_req_t *q)
{
    ngx_http_ratelimit_puts(w, "{\"zone\":");
    ngx_http_ratelimit_write_quoted(w, &q->zone->name);

    if (q->key.data) {
        ngx_http_ratelimit_puts(w, ",\"key\":");
        ngx_http_ratelimit_write_key(w, q->key.data, q->key.len, 0);

    } else {
        ngx_http_ratelimit_puts(w, ",");
        ngx_http_ratelimit_api_fingerprint(w, q->fingerprint);
    }
}
