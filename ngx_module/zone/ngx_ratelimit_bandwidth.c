
/*
 * ngx-ratelimit: a bandwidth rule (ratelimit_bandwidth) as any protocol
 * has it (docs/algorithms.md, "Bandwidth"): its parameters read and its
 * zone checked; the keys of a response or session counted in flight; and
 * one direction of it paced (a flow): slices the core grants
 * (rl_bandwidth_take, one locked call a slice and key), and the bytes the
 * flow holds passed on as they allow.  What a flow passes are buffers of
 * its own over a part of the original's bytes (memory or file), the
 * original marked sent only once its last piece is, so that an upstream's
 * buffers are not reused early.  How a flow waits for a slice due later is
 * its protocol's: the HTTP module's write timer, the stream module's own.
 */


#include "ngx_ratelimit_bandwidth.h"
#include "ngx_ratelimit_log.h"


static char *ngx_ratelimit_bw_read(ngx_conf_t *cf,
    ngx_ratelimit_bw_rule_t *rule);
static ngx_int_t ngx_ratelimit_bw_param(ngx_conf_t *cf,
    ngx_ratelimit_bw_rule_t *rule, ngx_str_t *value);
static uint64_t ngx_ratelimit_bw_identity(ngx_conf_t *cf,
    ngx_ratelimit_bw_rule_t *rule);
static int64_t ngx_ratelimit_bw_now(void);
static ngx_ratelimit_bw_rule_t *ngx_ratelimit_bw_zone_rule(
    ngx_ratelimit_zone_t *zone, ngx_str_t *name, ngx_uint_t *i);


/*
 * ratelimit_bandwidth zone=Z key=K rate=R [burst=B] [after=A]
 *     [direction=D] [name=N];
 * ratelimit_bandwidth off;
 *
 * A level's rules (*rules: NULL, none given; empty, "off"), each of the
 * protocol's `size` with the rule read here first: *rule the one read
 * (the protocol then compiles its key and rate=), or NULL for "off".
 */

char *
ngx_ratelimit_bw_directive(ngx_conf_t *cf, ngx_array_t **rules, size_t size,
    ngx_ratelimit_bw_rule_t **rule)
{
    ngx_str_t  *value;

    value = cf->args->elts;
    *rule = NULL;

    if (*rules != NULL && (*rules)->nelts == 0) {
        return "is duplicate: \"off\" removes the inherited rules and "
               "may not stand beside a rule";
    }

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "off") == 0) {
        if (*rules != NULL) {
            return "is duplicate: \"off\" removes the inherited rules and "
                   "may not stand beside a rule";
        }

        *rules = ngx_array_create(cf->pool, 1, size);
        return *rules ? NGX_CONF_OK : NGX_CONF_ERROR;
    }

    /* room for all at once: the main configuration points to them */

    if (*rules == NULL) {
        *rules = ngx_array_create(cf->pool, NGX_RATELIMIT_BW_RULES, size);
        if (*rules == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    if ((*rules)->nelts == NGX_RATELIMIT_BW_RULES) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_bandwidth\" directive: more than %d "
                           "rules in one block", NGX_RATELIMIT_BW_RULES);
        return NGX_CONF_ERROR;
    }

    *rule = ngx_array_push(*rules);
    if (*rule == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(*rule, size);

    return ngx_ratelimit_bw_read(cf, *rule);
}


/* The parameters, into a rule. */

static char *
ngx_ratelimit_bw_read(ngx_conf_t *cf, ngx_ratelimit_bw_rule_t *rule)
{
    ngx_str_t   *value;
    ngx_uint_t   i;
    char         err[RL_ERR_MAX];

    value = cf->args->elts;

    rl_bandwidth_init(&rule->rule);
    rule->file = cf->conf_file->file.name.data;
    rule->line = cf->conf_file->line;

    for (i = 1; i < cf->args->nelts; i++) {
        if (ngx_ratelimit_bw_param(cf, rule, &value[i]) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }

    if (rule->zone_name.len == 0 || rule->key.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_bandwidth\" directive: %s is "
                           "missing: expected zone=NAME key=$VARIABLE "
                           "rate=SIZE", rule->zone_name.len ? "key=" : "zone=");
        return NGX_CONF_ERROR;
    }

    if (rl_bandwidth_finish(&rule->rule, err, sizeof(err)) != RL_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_bandwidth\" directive: %s", err);
        return NGX_CONF_ERROR;
    }

    rule->common.identity = ngx_ratelimit_bw_identity(cf, rule);
    rule->common.name.data = (u_char *) rule->rule.name;
    rule->common.name.len = ngx_strlen(rule->rule.name);

    rule->common.shm_zone = ngx_shared_memory_add(cf, &rule->zone_name, 0,
                                                  &ngx_ratelimit_zone_tag);

    return rule->common.shm_zone ? NGX_CONF_OK : NGX_CONF_ERROR;
}


/* One parameter: zone=, key=, rate=$var here; the rest the core reads. */

static ngx_int_t
ngx_ratelimit_bw_param(ngx_conf_t *cf, ngx_ratelimit_bw_rule_t *rule,
    ngx_str_t *value)
{
    ngx_str_t  s, *to;
    char       err[RL_ERR_MAX];

    if (ngx_strncmp(value->data, "zone=", 5) == 0
        || ngx_strncmp(value->data, "key=", 4) == 0)
    {
        s.data = value->data[0] == 'z' ? value->data + 5 : value->data + 4;
        s.len = value->len - (s.data - value->data);
        to = value->data[0] == 'z' ? &rule->zone_name : &rule->key;

        if (to->len != 0 || s.len == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit_bandwidth\" directive: %s "
                               "\"%V\": expected one zone=NAME and one "
                               "key=$VARIABLE",
                               s.len ? "duplicate parameter" : "invalid",
                               value);
            return NGX_ERROR;
        }

        *to = s;

        return to == &rule->key
               ? NGX_OK
               : ngx_ratelimit_zone_name(cf, "ratelimit_bandwidth", to);
    }

    if (rl_bandwidth_param(&rule->rule, (char *) value->data, value->len,
                           err, sizeof(err))
        != RL_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_bandwidth\" directive: %s", err);
        return NGX_ERROR;
    }

    if (rule->rule.rate_varies && rule->rate.len == 0
        && ngx_strncmp(value->data, "rate=", 5) == 0)
    {
        rule->rate.data = value->data + 5;
        rule->rate.len = value->len - 5;
    }

    return NGX_OK;
}


/*
 * A rule of name= shares its keys wherever it is, whatever its direction;
 * one without, with the rules of the same key and direction (a session's
 * bytes in and its bytes out are two budgets unless a name joins them).
 */

static uint64_t
ngx_ratelimit_bw_identity(ngx_conf_t *cf, ngx_ratelimit_bw_rule_t *rule)
{
    size_t   n;
    u_char  *p;

    static const char  *directions[] = { "", ">in", ">both" };

    if (rule->rule.seen & RL_BANDWIDTH_NAMED) {
        return rl_bandwidth_identity(rule->rule.name, "", 0);
    }

    n = ngx_strlen(directions[rule->rule.direction]);

    p = ngx_pnalloc(cf->temp_pool, rule->key.len + n);
    if (p == NULL) {
        return rl_bandwidth_identity(rule->rule.name, (char *) rule->key.data,
                                     rule->key.len);
    }

    ngx_memcpy(p, rule->key.data, rule->key.len);
    ngx_memcpy(p + rule->key.len, directions[rule->rule.direction], n);

    return rl_bandwidth_identity(rule->rule.name, (char *) p,
                                 rule->key.len + n);
}


/*
 * Once a block's configuration is read: the rule's zone is declared, in
 * the rule's block (zone names are one namespace across blocks), and
 * local (a slice's grant is one locked call in shared memory; through
 * Redis it would be a round trip a slice); the zone lists it for the key
 * API.
 */

ngx_int_t
ngx_ratelimit_bw_check(ngx_conf_t *cf, ngx_ratelimit_bw_rule_t *rule,
    const char *block)
{
    ngx_str_t                  name;
    ngx_ratelimit_zone_t      *zone;
    ngx_ratelimit_bw_rule_t  **ref;

    zone = rule->common.shm_zone->data;

    if (zone == NULL) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"ratelimit_bandwidth\" directive: zone=%V is not "
                      "declared: expected a \"ratelimit_zone %V SIZE;\" "
                      "in the %s block, used in %s:%ui",
                      &rule->zone_name, &rule->zone_name, block, rule->file,
                      rule->line);
        return NGX_ERROR;
    }

    if (zone->conf != NULL
        && (zone->conf->block.len != ngx_strlen(block)
            || ngx_strncmp(zone->conf->block.data, block,
                           zone->conf->block.len) != 0))
    {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"ratelimit_bandwidth\" directive: zone \"%V\" is "
                      "declared in the %V block (%s:%ui): a rule of the %s "
                      "block names a zone of the %s block, used in %s:%ui",
                      &zone->name, &zone->conf->block, zone->file,
                      zone->line, block, block, rule->file, rule->line);
        return NGX_ERROR;
    }

    if (zone->redis != NULL || zone->sync != NULL) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"ratelimit_bandwidth\" directive: zone=%V is a "
                      "Redis zone: a bandwidth rule's key is granted a "
                      "slice at a time (ten a second at its rate), in "
                      "the zone's shared memory; through Redis each "
                      "would wait for a round trip; expected a local "
                      "zone (no redis=, no redis_sync=), used in %s:%ui",
                      &rule->zone_name, rule->file, rule->line);
        return NGX_ERROR;
    }

    /* a rule's counters in its zone are found by name: a request rule's
       and a bandwidth rule's would be one */

    name.data = (u_char *) rule->rule.name;
    name.len = ngx_strlen(rule->rule.name);

    if (ngx_ratelimit_zone_rule(zone, &name) != NULL) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"ratelimit_bandwidth\" directive: name=%V is a "
                      "\"ratelimit\" rule's in zone \"%V\": a bandwidth "
                      "rule's bytes and a request rule's requests are "
                      "counted apart; expected a name of its own, used in "
                      "%s:%ui", &name, &zone->name, rule->file, rule->line);
        return NGX_ERROR;
    }

    if (zone->bandwidth == NULL) {
        zone->bandwidth = ngx_array_create(cf->pool, 4,
                                           sizeof(ngx_ratelimit_bw_rule_t *));
        if (zone->bandwidth == NULL) {
            return NGX_ERROR;
        }
    }

    ref = ngx_array_push(zone->bandwidth);
    if (ref == NULL) {
        return NGX_ERROR;
    }

    *ref = rule;

    return NGX_OK;
}


/*
 * A rate= that is no size, at warn, folded as a request rule's bad values
 * are (ngx_ratelimit_log_bad): its length only, the value is the client's.
 */

void
ngx_ratelimit_bw_log_bad(ngx_log_t *log, ngx_ratelimit_bw_rule_t *rule,
    size_t len)
{
    u_char  what[128];

    ngx_snprintf(what, sizeof(what),
                 "rate= is not a size (its %uz bytes): the bandwidth rule "
                 "does not apply to the %s%Z", len,
                 rule->rule.direction == RL_BANDWIDTH_OUT ? "request"
                                                          : "session");

    ngx_ratelimit_log_bad(log, &rule->common, (const char *) what);
}


/* A rule applies: its key's entry and rate; its index in keys. */

ngx_uint_t
ngx_ratelimit_bw_add(ngx_ratelimit_bw_keys_t *keys,
    ngx_ratelimit_bw_rule_t *rule, ngx_str_t *key, uint64_t rate)
{
    ngx_ratelimit_zone_t    *zone;
    ngx_ratelimit_bw_key_t  *k;

    zone = rule->common.shm_zone->data;
    k = &keys->key[keys->n];
    k->zone = zone;
    k->tag = rl_table_tag(zone->table, rule->common.identity, key->data,
                          key->len);
    k->rate = rate;
    k->burst = rule->rule.burst;
    k->after = rule->rule.after;
    k->name = rule->rule.name;

    return keys->n++;
}


/* The keys' connections in flight, one more each. */

void
ngx_ratelimit_bw_open(ngx_ratelimit_bw_keys_t *keys)
{
    int64_t                  now_us;
    ngx_uint_t               i;
    ngx_ratelimit_bw_key_t  *k;

    now_us = ngx_ratelimit_bw_now();

    for (i = 0; i < keys->n; i++) {
        k = &keys->key[i];

        ngx_shmtx_lock(&k->zone->shpool->mutex);
        k->slot = rl_table_rule_slot(k->zone->table, k->name);
        rl_bandwidth_open(k->zone->table, k->slot, k->tag, now_us);
        ngx_shmtx_unlock(&k->zone->shpool->mutex);
    }
}


/* It ends: its keys' connections, and what it was granted and did not
   pass given back. */

void
ngx_ratelimit_bw_close(ngx_ratelimit_bw_keys_t *keys)
{
    int64_t                  now_us;
    ngx_uint_t               i;
    ngx_ratelimit_bw_key_t  *k;

    now_us = ngx_ratelimit_bw_now();

    for (i = 0; i < keys->n; i++) {
        k = &keys->key[i];

        ngx_shmtx_lock(&k->zone->shpool->mutex);
        rl_bandwidth_close(k->zone->table, k->slot, k->tag, now_us,
                           k->unsent, k->rate);
        ngx_shmtx_unlock(&k->zone->shpool->mutex);
    }
}


/* A key paces a direction: its rate the tightest of its keys', and its
   bytes passed first the least after= of their rules'. */

void
ngx_ratelimit_bw_flow_add(ngx_ratelimit_bw_flow_t *flow,
    ngx_ratelimit_bw_keys_t *keys, ngx_uint_t i, ngx_buf_tag_t tag)
{
    ngx_ratelimit_bw_key_t  *k;

    k = &keys->key[i];

    if (flow->mask == 0 || k->rate < flow->rate) {
        flow->rate = k->rate;
    }

    if (flow->mask == 0 || k->after < flow->after) {
        flow->after = k->after;
    }

    flow->keys = keys;
    flow->mask |= 1u << i;
    flow->tag = tag;
}


/*
 * A slice of every rule's key (as much as rl_bandwidth_ask says): NGX_OK,
 * passed now; or NGX_AGAIN, due in *delay (the longest of the rules': a
 * slice goes when all grant it).
 */

ngx_int_t
ngx_ratelimit_bw_grant(ngx_ratelimit_bw_flow_t *flow, ngx_msec_t *delay)
{
    off_t                    held;
    int64_t                  now_us, wait, w;
    uint64_t                 want;
    ngx_uint_t               i;
    ngx_chain_t             *cl;
    ngx_ratelimit_bw_key_t  *k;

    held = -flow->offset;
    for (cl = flow->in; cl; cl = cl->next) {
        held += ngx_buf_size(cl->buf);

        if (flow->whole && held > 0) {
            break;      /* the next datagram */
        }
    }

    want = rl_bandwidth_ask(flow->rate, held > 0 ? (uint64_t) held : 0,
                            flow->after + flow->credit, flow->whole);

    /* the time now, not the event loop's cached one: a slice's due time
       is a fraction of a second */

    ngx_time_update();
    now_us = ngx_ratelimit_bw_now();
    wait = 0;

    for (i = 0; i < flow->keys->n; i++) {
        if (!(flow->mask & (1u << i))) {
            continue;
        }

        k = &flow->keys->key[i];
        k->unsent += want;

        ngx_shmtx_lock(&k->zone->shpool->mutex);
        w = rl_bandwidth_take(k->zone->table, k->slot, k->tag, now_us, want,
                              k->rate, k->burst);
        ngx_shmtx_unlock(&k->zone->shpool->mutex);

        if (w > wait) {
            wait = w;
        }

        /* the rule's delayed connections: those its own grant delays */

        if (w > 0) {
            flow->waiting |= 1u << i;
            rl_bandwidth_count_delayed(k->zone->table, k->slot, 1);
        }
    }

    flow->credit += want;

    if (wait == 0) {
        return NGX_OK;
    }

    /* rounded up: a slice never goes before it is due */

    *delay = (ngx_msec_t) ((wait + 999) / 1000);

    return NGX_AGAIN;
}


/* The slice waited for is due (or the flow ends): its rules' delayed
   connections one fewer. */

void
ngx_ratelimit_bw_awake(ngx_ratelimit_bw_flow_t *flow)
{
    ngx_uint_t               i;
    ngx_ratelimit_bw_key_t  *k;

    for (i = 0; flow->waiting; i++) {
        if (flow->waiting & (1u << i)) {
            flow->waiting &= ~(1u << i);
            k = &flow->keys->key[i];
            rl_bandwidth_count_delayed(k->zone->table, k->slot, -1);
        }
    }
}


/*
 * What the flow may pass of what it holds (its bytes after= first, then
 * its credit), appended to *last: pieces of the held buffers (the last
 * piece of one carries its flags and, as its shadow, the original, marked
 * sent once the piece is), and buffers of no bytes (flush, last) as they
 * are.  A datagram goes whole or waits.
 */

ngx_int_t
ngx_ratelimit_bw_pass(ngx_pool_t *pool, ngx_ratelimit_bw_flow_t *flow,
    ngx_chain_t ***last)
{
    off_t                    size, n, free;
    ngx_buf_t               *b, *p;
    ngx_uint_t               i;
    ngx_chain_t             *cl, *piece;
    ngx_ratelimit_bw_key_t  *k;

    while (flow->in) {
        cl = flow->in;
        b = cl->buf;
        size = ngx_buf_size(b) - flow->offset;

        if (ngx_buf_special(b)) {
            flow->in = cl->next;
            cl->next = NULL;
            **last = cl;
            *last = &cl->next;
            continue;
        }

        n = (off_t) (flow->after + flow->credit);

        if (n == 0 || (flow->whole && n < size)) {
            return NGX_OK;
        }

        n = n < size ? n : size;
        free = (off_t) flow->after < n ? (off_t) flow->after : n;
        flow->after -= free;
        flow->credit -= n - free;

        for (i = 0; i < flow->keys->n; i++) {
            k = &flow->keys->key[i];

            if (flow->mask & (1u << i)) {
                k->unsent -= ngx_min(k->unsent, (uint64_t) (n - free));
            }
        }

        piece = ngx_chain_get_free_buf(pool, &flow->free);
        if (piece == NULL) {
            return NGX_ERROR;
        }

        p = piece->buf;
        *p = *b;
        p->tag = flow->tag;
        p->shadow = NULL;

        if (ngx_buf_in_memory(b)) {
            p->pos = b->pos + flow->offset;
            p->last = p->pos + n;
        }

        if (b->in_file) {
            p->file_pos = b->file_pos + flow->offset;
            p->file_last = p->file_pos + n;
        }

        if (n < size) {
            /* the original goes on: its flags with its last piece */
            p->last_buf = 0;
            p->last_in_chain = 0;
            p->flush = 0;
            p->sync = 0;
            flow->offset += n;

        } else {
            p->shadow = b;
            flow->offset = 0;
            flow->in = cl->next;

            /* the link ngx_chain_add_copy made: the pool's again, or a
               long response would grow the pool by a link a buffer */
            ngx_free_chain(pool, cl);
        }

        piece->next = NULL;
        **last = piece;
        *last = &piece->next;

        /* the pieces passed, in order, until they are sent */

        cl = ngx_alloc_chain_link(pool);
        if (cl == NULL) {
            return NGX_ERROR;
        }

        cl->buf = p;
        cl->next = flow->busy;
        flow->busy = cl;
    }

    return NGX_OK;
}


/* Pieces written: the originals of the last ones marked sent, and the
   pieces kept to use again. */

void
ngx_ratelimit_bw_sent(ngx_ratelimit_bw_flow_t *flow)
{
    ngx_buf_t    *b;
    ngx_chain_t  *cl, **ll;

    for (ll = &flow->busy; *ll; /* void */) {
        cl = *ll;

        if (ngx_buf_size(cl->buf) != 0) {
            ll = &cl->next;
            continue;
        }

        b = cl->buf->shadow;

        if (b != NULL) {
            b->pos = b->last;
            b->file_pos = b->file_last;
        }

        *ll = cl->next;

        /* the link and its buffer: the free list's, as
           ngx_chain_get_free_buf takes them */
        cl->next = flow->free;
        flow->free = cl;
    }
}


/* The wall clock in microseconds, as the core's instants are: nginx's
   cached time has milliseconds only, and a key's slices may be a fraction
   of one apart. */

static int64_t
ngx_ratelimit_bw_now(void)
{
    struct timeval  tv;

    ngx_gettimeofday(&tv);

    return (int64_t) tv.tv_sec * 1000000 + tv.tv_usec;
}


/*
 * The key API: whether a zone has a bandwidth rule of a name, and a key's
 * states in the zone's bandwidth rules, pushed after its request rules'
 * (rl_key_state_t, bandwidth set; read by rl_bandwidth_peek): each rule
 * naming the zone once (rules of one identity share the key's entry), or
 * the rule asked.  A fingerprint is one rule's key: it is shown in the
 * first bandwidth rule only when no request rule showed it.
 */

static ngx_ratelimit_bw_rule_t *
ngx_ratelimit_bw_zone_rule(ngx_ratelimit_zone_t *zone, ngx_str_t *name,
    ngx_uint_t *i)
{
    ngx_ratelimit_bw_rule_t  **rules;

    if (zone->bandwidth == NULL) {
        return NULL;
    }

    rules = zone->bandwidth->elts;

    for ( /* void */ ; *i < zone->bandwidth->nelts; (*i)++) {
        if (name->len == 0
            || (rules[*i]->common.name.len == name->len
                && ngx_strncmp(rules[*i]->common.name.data, name->data,
                               name->len) == 0))
        {
            return rules[(*i)++];
        }
    }

    return NULL;
}


ngx_uint_t
ngx_ratelimit_bw_zone_has(ngx_ratelimit_zone_t *zone, ngx_str_t *name)
{
    ngx_uint_t  i;

    i = 0;

    return ngx_ratelimit_bw_zone_rule(zone, name, &i) != NULL;
}


ngx_int_t
ngx_ratelimit_bw_states(ngx_ratelimit_zone_t *zone, rl_api_request_t *in,
    ngx_array_t *states)
{
    ngx_str_t                 asked;
    ngx_uint_t                i, j, first;
    rl_key_state_t           *st, *seen;
    ngx_ratelimit_bw_rule_t  *rule;

    asked.data = (u_char *) in->rule;
    asked.len = in->rule_len;
    first = states->nelts;
    i = 0;

    while ((rule = ngx_ratelimit_bw_zone_rule(zone, &asked, &i))) {

        if (in->has_fingerprint && states->nelts > 0) {
            break;
        }

        seen = states->elts;

        for (j = first; j < states->nelts; j++) {
            if (((ngx_ratelimit_rule_t *) seen[j].data)->identity
                == rule->common.identity)
            {
                break;
            }
        }

        if (j < states->nelts) {
            continue;
        }

        st = ngx_array_push(states);
        if (st == NULL) {
            return NGX_ERROR;
        }

        ngx_memzero(st, sizeof(rl_key_state_t));
        st->data = &rule->common;
        st->rule = ngx_ratelimit_rl_str(&rule->common.name);
        st->bandwidth = 1;
        st->rate = rule->rate.len ? 0 : rule->rule.rate;
        st->burst = rule->rule.burst;
        st->tag = in->has_fingerprint
                  ? in->fingerprint
                  : rl_table_tag(zone->table, rule->common.identity,
                                 in->key, in->key_len);
    }

    return NGX_OK;
}
