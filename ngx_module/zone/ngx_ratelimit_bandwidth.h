
/*
 * ngx-ratelimit: what a bandwidth rule is to any protocol
 * (ngx_ratelimit_bandwidth.c): the directive's parameters read, its zone
 * checked, and the pacing of one direction of a response or session (a
 * flow): its keys counted in flight, slices granted by the core, and the
 * bytes a flow holds passed on in pieces as its slices allow.
 */

#ifndef NGX_RATELIMIT_BANDWIDTH_H
#define NGX_RATELIMIT_BANDWIDTH_H


#include "ngx_ratelimit_zone_conf.h"


/* rules a location or server may have */
#define NGX_RATELIMIT_BW_RULES  8


/* a rule: its zone, name, identity and log lines in common, as a
   request rule's (ngx_ratelimit_rule_t; its rl_rule_t unused) */
typedef struct {
    ngx_ratelimit_rule_t         common;
    rl_bandwidth_rule_t          rule;
    ngx_str_t                    zone_name;
    ngx_str_t                    key;       /* key=, as written */
    ngx_str_t                    rate;      /* rate=$var, as written;
                                               empty: rule.rate */
    u_char                      *file;      /* where it is written */
    ngx_uint_t                   line;
} ngx_ratelimit_bw_rule_t;


/* a rule as applied to a response or session: its key's entry, its rate */
typedef struct {
    ngx_ratelimit_zone_t        *zone;
    uint64_t                     tag;
    uint64_t                     rate;
    uint64_t                     burst;
    uint64_t                     after;     /* its rule's after= */
    uint64_t                     unsent;    /* granted, not passed: given
                                               back as it ends */
    char                        *name;      /* its rule's */
    int                          slot;      /* its counters, or -1 */
} ngx_ratelimit_bw_key_t;


/* the keys of a response or session, counted in flight while it lasts */
typedef struct {
    ngx_uint_t                   n;
    ngx_ratelimit_bw_key_t       key[NGX_RATELIMIT_BW_RULES];
} ngx_ratelimit_bw_keys_t;


/* one direction: the keys that pace it, what it holds, and what it was
   granted */
typedef struct {
    ngx_ratelimit_bw_keys_t     *keys;
    uint32_t                     mask;      /* a bit a key that paces it */
    uint32_t                     waiting;   /* a bit a key whose grant
                                               delays its slice */
    uint64_t                     rate;      /* the tightest of its keys' */
    ngx_chain_t                 *in;        /* held: bytes not yet passed */
    off_t                        offset;    /* of in->buf, passed already */
    ngx_chain_t                 *busy;      /* pieces passed, not yet sent */
    ngx_chain_t                 *free;      /* pieces to use again */
    uint64_t                     credit;    /* granted, not yet passed */
    uint64_t                     after;     /* may pass still, not
                                               counted: the least after=
                                               of its keys' rules */
    ngx_buf_tag_t                tag;       /* of its pieces */
    unsigned                     whole:1;   /* a buffer is a datagram:
                                               never cut */
} ngx_ratelimit_bw_flow_t;


char *ngx_ratelimit_bw_directive(ngx_conf_t *cf, ngx_array_t **rules,
    size_t size, ngx_ratelimit_bw_rule_t **rule);
ngx_int_t ngx_ratelimit_bw_check(ngx_conf_t *cf,
    ngx_ratelimit_bw_rule_t *rule, const char *block);
void ngx_ratelimit_bw_log_bad(ngx_log_t *log, ngx_ratelimit_bw_rule_t *rule,
    size_t len);

ngx_uint_t ngx_ratelimit_bw_add(ngx_ratelimit_bw_keys_t *keys,
    ngx_ratelimit_bw_rule_t *rule, ngx_str_t *key, uint64_t rate);
void ngx_ratelimit_bw_open(ngx_ratelimit_bw_keys_t *keys);
void ngx_ratelimit_bw_close(ngx_ratelimit_bw_keys_t *keys);

void ngx_ratelimit_bw_flow_add(ngx_ratelimit_bw_flow_t *flow,
    ngx_ratelimit_bw_keys_t *keys, ngx_uint_t i, ngx_buf_tag_t tag);
ngx_int_t ngx_ratelimit_bw_grant(ngx_ratelimit_bw_flow_t *flow,
    ngx_msec_t *delay);
void ngx_ratelimit_bw_awake(ngx_ratelimit_bw_flow_t *flow);
ngx_int_t ngx_ratelimit_bw_pass(ngx_pool_t *pool,
    ngx_ratelimit_bw_flow_t *flow, ngx_chain_t ***last);
void ngx_ratelimit_bw_sent(ngx_ratelimit_bw_flow_t *flow);

ngx_uint_t ngx_ratelimit_bw_zone_has(ngx_ratelimit_zone_t *zone,
    ngx_str_t *name);
ngx_int_t ngx_ratelimit_bw_states(ngx_ratelimit_zone_t *zone,
    rl_api_request_t *in, ngx_array_t *states);


#endif /* NGX_RATELIMIT_BANDWIDTH_H */
