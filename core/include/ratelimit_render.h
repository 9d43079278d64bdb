/*
 * ngx-ratelimit core: what ratelimit_stats and the key API (ratelimit_api)
 * answer, and how a key API request is read.
 *
 * The glue copies figures out of the zones into snapshots (under each zone's
 * lock) and sends bytes; everything between is here: a snapshot rendered as
 * JSON or as Prometheus text, an API request's path, method and parameters
 * read and checked, and every error the API answers.  Pure functions: no
 * lock, no allocation, no I/O, nothing thrown.
 *
 * Every rl_render_* function writes its text into buf (cap bytes) and
 * returns the bytes the whole text takes: when that is more than cap, only
 * the first cap bytes are written, and a caller asks again with a buffer that
 * large (or first with cap 0, to learn the size).
 */

#ifndef RATELIMIT_RENDER_H
#define RATELIMIT_RENDER_H

#include "ratelimit.h"
#include "ratelimit_sync.h"
#include "ratelimit_bandwidth.h"

#ifdef __cplusplus
extern "C" {
#endif


/* Bytes, not NUL-terminated. */
typedef struct {
    const char  *data;
    size_t       len;
} rl_str_t;


/* ---- snapshots ---------------------------------------------------------- */

/* Redis latency buckets of ratelimit_stats (the glue counts into them). */
#define RL_REDIS_LATENCY_BUCKETS  8

/*
 * A Redis zone's counters (ratelimit_stats's "redis", and the
 * nginx_ratelimit_redis_* series), written once: X(name, help) for each.
 * The core's figures below, the glue's counters in the zone and their
 * copy, and the figures table of core/src/render/stats.cpp (JSON "name",
 * Prometheus nginx_ratelimit_redis_NAME_total) are all made from it.
 */
#define RL_REDIS_COUNTERS(X)                                                  \
    X(decisions, "Requests decided in Redis.")                                \
    X(errors, "Redis error replies and lost connections.")                    \
    X(timeouts, "Requests with no Redis reply within redis_timeout.")         \
    X(fallbacks, "Requests decided by on_redis_error.")                       \
    X(reconnects, "Connections opened to Redis.")                             \
    X(charges, "Requests' charges (charge=) settled in Redis.")               \
    X(undelivered, "Requests' charges Redis did not take (not reachable, "    \
      "no reply, a reply refused): lost.")                                    \
    X(cached, "Requests refused from a refusal Redis gave and this server "   \
      "remembers, without a round trip.")                                     \
    X(tls_failures, "TLS connections to Redis that failed: handshake, "       \
      "certificate, or a TLS alert.")                                         \
    X(tls_resumed, "TLS connections to Redis that resumed the server's last " \
      "session.")                                                             \
    X(leases, "Concurrency slots taken in Redis by this server (leases).")    \
    X(leases_released, "Leases given back when their request ended.")         \
    X(leases_expired, "Leases found expired when their request ended: not "   \
      "renewed in time (a worker stalled, Redis away).")                      \
    X(leases_renewed, "Leases renewed for requests that outlive a third of "  \
      "their lease.")                                                         \
    X(leases_undelivered, "Releases and renewals Redis did not take: the "    \
      "lease runs out by itself.")                                            \
    X(leases_restored, "Leases written into Redis again for requests in "     \
      "flight: admitted while Redis was away, or lost by it.")

typedef struct {
#define RL_REDIS_FIGURE(name, help)  uint64_t name;
    RL_REDIS_COUNTERS(RL_REDIS_FIGURE)
#undef RL_REDIS_FIGURE
    uint64_t  latency[RL_REDIS_LATENCY_BUCKETS + 1];  /* replies a bucket,
                                   the last slower than every bound */
    uint64_t  latency_le_us[RL_REDIS_LATENCY_BUCKETS];  /* the bounds */
    uint64_t  latency_us;       /* the sum */
} rl_redis_figures_t;

/* A rule of a zone as configured: what the key API's zones show. */
typedef struct {
    rl_str_t          name;
    const rl_rule_t  *rule;
    rl_str_t          key;      /* the key expression, as written */
} rl_rule_view_t;

/* The keys a rule refuses most, copied from rl_table_top(). */
typedef struct {
    rl_str_t             rule;      /* its name */
    int                  log_key;   /* keys kept in clear are shown */
    int                  state;     /* enum rl_top_state */
    uint64_t             refusals;
    size_t               n;
    const rl_top_key_t  *keys;      /* most refused first */
    int                  kib;       /* a bandwidth rule's: its counts are
                                       KiB granted (rl_top_t's kib) */
} rl_top_view_t;

/* A zone's figures, at one moment. */
typedef struct {
    rl_str_t                   name;
    rl_table_stats_t           table;     /* its size: the zone's */
    uint64_t                   used;      /* rl_table_bytes_used() */
    uint64_t                   overrides; /* overrides held (every rule's
                                             and each rule's), */
    uint64_t                   overrides_capacity; /* and room for so
                                             many (0: none) */
    size_t                     ncounters; /* rl_table_rule_stats() */
    const rl_rule_stats_t     *counters;
    const rl_top_view_t       *tops;      /* ncounters of them, each
                                             counter's top keys (Prometheus);
                                             NULL: none */
    size_t                     nrules;    /* its rules, a name once (the
                                             key API) */
    const rl_rule_view_t      *rules;
    const rl_redis_figures_t  *redis;     /* NULL: a local zone */
    rl_str_t                   server;    /* redis= */
    const rl_sync_figures_t   *sync;      /* redis_sync: its exchanges;
                                             NULL: none */
    uint64_t                   sync_interval_ms;
    rl_str_t                   block;     /* the block that declared it:
                                             "http", "stream" (empty: not
                                             said) */
} rl_zone_snapshot_t;

typedef struct {
    rl_str_t                   version;   /* the module's */
    size_t                     n;
    const rl_zone_snapshot_t  *zones;
} rl_stats_snapshot_t;

/* A key's state in a rule, read (rl_table_peek) or reset (rl_table_reset),
   or the same from Redis; or in a bandwidth rule (bandwidth set, config
   NULL), read by rl_bandwidth_peek. */
typedef struct {
    rl_str_t             rule;     /* its name */
    const rl_rule_t     *config;
    uint64_t             tag;      /* the key's fingerprint in the rule */
    uint64_t             cost;     /* of its next request */
    rl_peek_t            peek;     /* read */
    int                  reset;    /* reset: RL_RESET_* */
    void                *data;     /* the caller's */
    int                  bandwidth;
    uint64_t             rate;     /* bandwidth: its rate= (0: from a
                                      variable, a request's own) */
    uint64_t             burst;
    rl_bandwidth_peek_t  bw;
} rl_key_state_t;

typedef struct {
    rl_str_t               zone;
    const void            *key;       /* as asked; NULL: by fingerprint */
    size_t                 key_len;
    uint64_t               fingerprint;
    int                    reset;     /* the states were reset */
    size_t                 n;
    const rl_key_state_t  *states;
} rl_key_snapshot_t;

typedef struct {
    rl_str_t               zone;
    int64_t                now_ms;
    int                    server;    /* a Redis zone: this server's
                                         refusals only */
    size_t                 n;
    const rl_top_view_t   *rules;
} rl_top_snapshot_t;


/* ---- rendering ---------------------------------------------------------- */

/* ratelimit_stats: JSON, and the Prometheus text format (0.0.4), top keys
   included. */
RL_API size_t rl_render_stats_json(const rl_stats_snapshot_t *s, char *buf,
    size_t cap);
RL_API size_t rl_render_stats_prometheus(const rl_stats_snapshot_t *s,
    char *buf, size_t cap);

/* The key API: GET zones (write: whether DELETE is enabled there), GET
   zones/NAME, GET or DELETE zones/NAME/keys, GET zones/NAME/top. */
RL_API size_t rl_render_api_zones(const rl_stats_snapshot_t *s, int write,
    char *buf, size_t cap);
RL_API size_t rl_render_api_zone(const rl_zone_snapshot_t *z, char *buf,
    size_t cap);
RL_API size_t rl_render_api_keys(const rl_key_snapshot_t *k, char *buf,
    size_t cap);
RL_API size_t rl_render_api_top(const rl_top_snapshot_t *t, char *buf,
    size_t cap);

/*
 * zones/NAME/overrides: {"zone":..., "capacity":N, "total":N, "from":N,
 * "overrides":[...]}, a page of them; or one override read, written or
 * removed: {"zone":..., "override":{...}} (rl_override_json), with
 * "removed":true for one removed.
 */
typedef struct {
    rl_str_t               zone;
    int64_t                now_ms;
    int                    one;       /* one override: list[0] */
    int                    removed;
    uint64_t               capacity;
    uint64_t               total;     /* of the list's filter */
    uint64_t               from;
    size_t                 n;
    const rl_override_t   *list;
} rl_overrides_view_t;

RL_API size_t rl_render_api_overrides(const rl_overrides_view_t *v,
    char *buf, size_t cap);


/* ---- a key API request -------------------------------------------------- */

enum rl_api_resource {
    RL_API_ZONES = 0,           /* zones */
    RL_API_ZONE,                /* zones/NAME */
    RL_API_KEYS,                /* zones/NAME/keys */
    RL_API_TOP,                 /* zones/NAME/top */
    RL_API_OVERRIDES            /* zones/NAME/overrides */
};

/* zones/NAME/overrides lists so many at most a page (count=), and so many
   unless it says */
#define RL_API_PAGE_MAX   1000
#define RL_API_PAGE       100

/* The longest key, after %-decoding, that the API looks up. */
#define RL_API_KEY_MAX    4096
#define RL_API_ERROR_MAX  1024

typedef struct {
    int          resource;      /* enum rl_api_resource */
    rl_str_t     zone;          /* into the URI given */
    int          reset;         /* DELETE */
    int          has_key;
    size_t       key_len;
    uint8_t      key[RL_API_KEY_MAX];  /* %-decoded */
    size_t       rule_len;      /* 0: every rule */
    char         rule[RL_NAME_MAX];    /* %-decoded, NUL-terminated */
    int          has_fingerprint;
    uint64_t     fingerprint;
    int          put;           /* PUT (overrides) */
    int          has_range;     /* range=: an address range, as given */
    size_t       range_len;
    char         range[64];
    char         keyed[RL_OVERRIDE_KEYED_MAX]; /* keyed=: the key expression
                                   of the rules of an override of every
                                   rule's key, %-decoded, NUL-terminated;
                                   "": not given */
    uint64_t     from;          /* a list's first (from=) */
    uint64_t     count;         /*   and its most (count=) */
    int          status;        /* an error's HTTP status */
    const char  *allow;         /* 405: the methods allowed (Allow) */
    size_t       error_len;
    char         error[RL_API_ERROR_MAX];  /* an error's answer, JSON */
} rl_api_request_t;

/*
 * Reads a request to a ratelimit_api location (prefix: the location's name):
 * its path (zones, zones/NAME, zones/NAME/keys or zones/NAME/top after the
 * prefix, and a "/" after a prefix without one), its method (GET and HEAD;
 * DELETE on keys, where write is set), and its query string (each parameter
 * its resource takes, once, %-decoded and checked).  Returns 0, or an error's
 * HTTP status (404, 405, 403, 400) with its answer in q->error.
 */
RL_API int rl_api_request(rl_api_request_t *q, rl_str_t prefix, rl_str_t uri,
    rl_str_t method, int write, rl_str_t args);

/* What the glue finds wrong with a request the core read. */
enum rl_api_error {
    RL_API_NO_ZONE = 1,         /* 404: no zone q->zone */
    RL_API_NO_RULE,             /* 404: the zone has no rule q->rule */
    RL_API_REDIS_FINGERPRINT,   /* 400: a Redis zone's key by fingerprint */
    RL_API_REDIS_FAILED,        /* 409: Redis did not answer */
    RL_API_NO_OVERRIDE,         /* 404: no override of that key or range */
    RL_API_OVERRIDES_FULL,      /* 409: the zone's overrides are full */
    RL_API_NO_OVERRIDES,        /* 409: the zone has no room for any */
    RL_API_OVERRIDE_NOT_TAKEN   /* 409: written in Redis, but this
                                   server's copy of them does not hold it */
};

/* Writes the error's answer into q->error; returns its HTTP status. */
RL_API int rl_api_error(rl_api_request_t *q, int error);

/* The same for a message of the core's (an override's target or body):
   {"error":MESSAGE} with status. */
RL_API int rl_api_message(rl_api_request_t *q, int status,
    const char *message);


#ifdef __cplusplus
}
#endif

#endif /* RATELIMIT_RENDER_H */
