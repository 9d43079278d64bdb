/*
 * ngx-ratelimit core: overrides, one key's limits changed at run time.  An
 * override is a setting for one key (or one range of client addresses) in
 * one rule of a zone, or in every rule of it: new limits (a limit, burst
 * and/or period), a refusal (deny), or a free pass (allow), with an optional
 * expiry.  A zone keeps them in a store of fixed size beside its key table,
 * which key floods never evict; the key API writes them, the zone's file
 * or Redis keeps them.
 */

#ifndef RATELIMIT_OVERRIDE_H
#define RATELIMIT_OVERRIDE_H

#include "ratelimit_rule.h"
#include "ratelimit_table.h"

#ifdef __cplusplus
extern "C" {
#endif

enum rl_override_kind {
    RL_OVERRIDE_NONE = 0,
    RL_OVERRIDE_LIMIT,          /* the key's limit, burst and/or period */
    RL_OVERRIDE_DENY,           /* refused by the rule, nothing spent */
    RL_OVERRIDE_ALLOW           /* passes the rule uncounted (exempt) */
};

/* rl_override_t.given: what a limit override sets (the rule's others stay) */
#define RL_OVERRIDE_GIVE_LIMIT   0x1
#define RL_OVERRIDE_GIVE_BURST   0x2
#define RL_OVERRIDE_GIVE_PERIOD  0x4

/* The longest key an override names. */
#define RL_OVERRIDE_KEY_MAX      256

/* The longest key expression an override of every rule's key names
   (its NUL included). */
#define RL_OVERRIDE_KEYED_MAX    64

/* The most overrides a zone holds (ratelimit_zone overrides=). */
#define RL_OVERRIDES_MAX         1000000

/*
 * What an override applies to: a key (its bytes, as requests' keys are) or
 * a range of client addresses (family 4 or 6, the network's address in
 * key[0..3] or key[0..15], its host bits zero, and its prefix length), in
 * one rule (by name) or in every rule of the zone (""): a range, every rule
 * keyed on the client's address; a key, every rule keyed on the expression
 * keyed names (the same bytes in rules keyed otherwise are other keys).
 */
typedef struct {
    char      rule[RL_NAME_MAX];
    int32_t   family;           /* 0: a key; 4, 6: an address range */
    uint32_t  prefix;           /* a range's prefix length */
    uint32_t  key_len;
    uint8_t   key[RL_OVERRIDE_KEY_MAX];
    char      keyed[RL_OVERRIDE_KEYED_MAX]; /* a key in every rule: the key
                                   expression of its rules, as written
                                   ("$http_x_api_key"); else "" */
} rl_override_target_t;

typedef struct {
    rl_override_target_t  target;
    int32_t   kind;             /* enum rl_override_kind */
    uint32_t  given;            /* RL_OVERRIDE_GIVE_*: a limit override's */
    uint32_t  limit;
    uint32_t  burst;
    int64_t   period_ms;
    int64_t   expires_ms;       /* when it stops applying; 0: never */
    int64_t   created_ms;       /* when it was written */
} rl_override_t;

/*
 * How an override's expiry may be given, and how long at most: from 1 ms
 * to 366 days.
 */
#define RL_OVERRIDE_TTL_MAX_MS   (366LL * 86400000LL)


/* ---- the store, beside a zone's key table ------------------------------- */

/* Bytes of a store of `capacity` overrides. */
RL_API size_t rl_overrides_size(uint32_t capacity);

/*
 * Lays a store out over mem (zeroed, 64-byte aligned, rl_overrides_size()
 * bytes), in the same shared memory as the table it serves, and links the
 * table to it: a request of the table looks its keys up there.  Or, with a
 * store already there of the same capacity (a reload), links it again and
 * keeps its overrides: returns 1 then, 0 for a fresh store.
 */
RL_API int rl_overrides_attach(void *table, void *mem, uint32_t capacity);

/* The store a table is linked to (NULL: none). */
RL_API void *rl_overrides_of(const void *table);

typedef struct {
    uint32_t  capacity;
    uint32_t  held;             /* overrides in the store */
    uint64_t  version;          /* one more at each change */
    uint64_t  written;          /* the version the file holds */
    uint64_t  remote;           /* a Redis zone's: the version of Redis's
                                   overrides it holds, */
    uint64_t  remote_id;        /*   of the hash made then (0: none) */
} rl_overrides_stats_t;

RL_API void rl_overrides_stats(const void *store, rl_overrides_stats_t *st);

/* The overrides held naming each rule, into the n rule figures that
   rl_table_rule_stats() wrote (their `overrides`), under the zone's lock. */
RL_API void rl_overrides_count(const void *table, rl_rule_stats_t *out,
    size_t n);

/* A rule of the zone, as an override's carry-over needs it: its identity
   (rl_rule_identity) and its parameters as configured; and its key
   expression as written, which an override of every rule's key is bound
   to (rl_override_bind). */
typedef struct {
    const rl_rule_t  *rule;
    uint64_t          identity;
    const char       *key;
    size_t            key_len;
} rl_override_rule_t;

/*
 * Each override's tag worked out again for the zone's rules, by name (a
 * reload may change a rule's identity); an override naming a rule the zone
 * no longer has stays, and meets no request.  The caller holds the lock.
 */
RL_API void rl_overrides_retag(void *table, const rl_override_rule_t *rules,
    size_t n);

/* Marks the version the file holds (the caller wrote it). */
RL_API void rl_overrides_written(void *store, uint64_t version);

/*
 * A Redis zone's store is a copy of Redis's overrides (remote): a request
 * meeting an ended limit override is decided under its rule as configured,
 * carried over in Redis (rl_check_t.since: the end), and nothing is removed
 * here.  rl_overrides_replace puts what Redis holds (at `version` of the
 * hash `id`) in place of what the store held, as many as it has room for;
 * returns how many.  The caller holds the lock.
 */
RL_API void rl_overrides_remote(void *table);
RL_API size_t rl_overrides_replace(void *table, const rl_override_t *list,
    size_t n, const rl_override_rule_t *rules, size_t nrules,
    uint64_t version, uint64_t id);

/* What Redis's hash, at version of id, is to a copy taken from it at
   st's remote, remote_id. */
enum rl_overrides_news {
    RL_OVERRIDES_SAME = 0,      /* what the copy holds */
    RL_OVERRIDES_NEWER,         /* written since */
    RL_OVERRIDES_LOST           /* not the hash the copy was taken from,
                                   nor a later version of it: Redis lost
                                   it (FLUSHALL, a restart without
                                   persistence, a failover to a replica
                                   behind), and the fleet's overrides are
                                   what it holds now */
};
RL_API int rl_overrides_news(const rl_overrides_stats_t *st,
    uint64_t version, uint64_t id);

/* 1 if what a server says of its copy (a fingerprint: the fields of Redis's
   hash it skipped) was not the last thing said, which it becomes: a bad
   field is said once, not at each reading.  The caller holds the lock. */
RL_API int rl_overrides_said(void *store, uint64_t said);

/* Results of the store's writes. */
#define RL_OVERRIDE_OK        0
#define RL_OVERRIDE_FULL      1   /* no room: nothing changed */
#define RL_OVERRIDE_MISSING   2   /* no such override */
#define RL_OVERRIDE_BAD       3   /* rule: no such rule, or not the
                                     override's kind */

/*
 * Writes an override (a new one, or in place of the one of the same
 * target), in the caller's zone, holding its lock.  A limit override carries
 * what the key has spent over: its state under the parameters it had is
 * rewritten under the new ones, owing the same units (`rule`: the rule it
 * names, as configured).  Returns RL_OVERRIDE_OK, or RL_OVERRIDE_FULL.
 */
RL_API int rl_override_put(void *table, const rl_override_t *ov,
    const rl_override_rule_t *rule, int64_t now_ms);

/* Removes the override of a target (a limit override's key carried back
   to the rule's parameters).  RL_OVERRIDE_OK or RL_OVERRIDE_MISSING. */
RL_API int rl_override_delete(void *table, const rl_override_target_t *t,
    const rl_override_rule_t *rule, int64_t now_ms);

/* The override of a target, unexpired: 1 (in out), or 0. */
RL_API int rl_override_get(const void *table, const rl_override_target_t *t,
    int64_t now_ms, rl_override_t *out);

/*
 * The overrides in the store, unexpired, of one rule (rule not NULL: those
 * naming it) or all, from the `from`-th on (in the store's order, which a
 * change may reorder): at most max into out.  Returns how many; *total says
 * how many match in all.
 */
RL_API size_t rl_override_list(const void *table, const char *rule,
    size_t from, int64_t now_ms, rl_override_t *out, size_t max,
    size_t *total);

/*
 * Removes expired overrides, each limit override's key carried back to
 * its rule's parameters as at its expiry (rules: the zone's rules, to find
 * it by name; one no longer configured has nothing to carry).  Returns how
 * many were removed.  The caller holds the lock.
 */
RL_API size_t rl_overrides_expire(void *table,
    const rl_override_rule_t *rules, size_t n, int64_t now_ms);

/* The soonest expiry of an override held after `after` (0: none); a walk
   of the store only after a change, or once that expiry is reached.  The
   caller holds the lock. */
RL_API int64_t rl_overrides_next_expiry(void *table, int64_t after);

/* 1 if the table's store holds any override (read without the lock: a
   request of a zone that holds none takes no lock for them). */
RL_API int rl_overrides_held(const void *table);


/* ---- an override read from its API request, or its file ----------------- */

/*
 * The target of an API request: rule (may be empty: every rule), and
 * either a key's bytes or a range in CIDR notation ("10.1.0.0/16",
 * "2001:db8::/32"): a range must be a network (no host bits set) with a
 * prefix length within its family's.  RL_OK, or RL_ERROR with err saying
 * what is wrong.
 */
RL_API int rl_override_target(rl_override_target_t *t, const char *rule,
    size_t rule_len, const void *key, size_t key_len, const char *range,
    size_t range_len, char *err, size_t errlen);

/*
 * An override's JSON body: an object with "limit", "burst", "period" (a
 * time as the directive takes it: "1m", "500ms"), "action" ("limit",
 * "deny" or "allow"; "limit" when absent), "expire" (a time to live, or
 * null/absent: never).  Any other field, a value of the wrong type, a
 * duplicate field: RL_ERROR, err naming the field and what it takes.
 */
RL_API int rl_override_body(rl_override_t *ov, const char *body, size_t len,
    int64_t now_ms, char *err, size_t errlen);

/*
 * Checks an override against the rule it names (NULL: an override of every
 * rule), and the rule's zone (redis: a Redis-backed zone's bounds): a limit
 * override needs a rule, and takes the parameters its algorithm has, each
 * within the directive's ranges; a range needs a rule keyed on the client's
 * address (key_addr).  RL_OK, or RL_ERROR with err naming the field and
 * what is allowed.
 */
RL_API int rl_override_check(const rl_override_t *ov, const rl_rule_t *rule,
    int redis, char *err, size_t errlen);

/*
 * An override's target as the zone takes it, from the key API, its file or
 * its Redis hash alike (rules: the zone's, a name once): its rule found by
 * name (*rule; NULL: every rule); a key in every rule bound to the key
 * expression of the rules it applies to (keyed: given, one of the zone's
 * rules must be keyed on it; not given, every rule of the zone must be
 * keyed on the same one, which it takes); the key of rules keyed on the
 * client's address made as their requests' keys are (an IPv4-mapped IPv6
 * address is its IPv4 address).  RL_OK, or RL_ERROR with err saying what
 * is wrong and what to give instead.
 */
RL_API int rl_override_bind(rl_override_target_t *t,
    const rl_override_rule_t *rules, size_t n,
    const rl_override_rule_t **rule, char *err, size_t errlen);

/*
 * An override as the zone takes it, from the key API, its file or its
 * Redis hash alike: its target bound (rl_override_bind), the override
 * checked against its rule and zone (rl_override_check), and an expiry at
 * most RL_OVERRIDE_TTL_MAX_MS after now_ms.  RL_OK; RL_DECLINED: as good,
 * but ended (its expiry at or before now_ms); RL_ERROR with err.
 */
RL_API int rl_override_admit(rl_override_t *ov,
    const rl_override_rule_t *rules, size_t n, int redis, int64_t now_ms,
    const rl_override_rule_t **rule, char *err, size_t errlen);

/*
 * The rule as an override's limits apply to it: out is rule with the
 * override's limit, burst and period (a burst not given follows the new
 * limit when the rule's followed its).
 */
RL_API void rl_override_apply(const rl_rule_t *rule, const rl_override_t *ov,
    rl_rule_t *out);

/*
 * An override as JSON (the key API's answer): {"rule":..., ["keyed":...,]
 * "key":... or "range":..., "action":..., "limit":..., "burst":...,
 * "period":..., "expires_in_ms":..., "created_ms":...}.  Writes at most cap
 * bytes; returns the bytes the whole text needs.
 */
RL_API size_t rl_override_json(const rl_override_t *ov, int64_t now_ms,
    char *buf, size_t cap);

/*
 * $ratelimit_override: the override a check met (rl_check_t.override,
 * with its rule and key), as "ACTION RULE TARGET": "limit per_key key",
 * "deny * 10.1.0.0/16" (* for every rule; a range's network from the key's
 * address).  Writes at most RL_OVERRIDE_NAME_MAX bytes; returns how many.
 */
#define RL_OVERRIDE_NAME_MAX  (RL_NAME_MAX + 64)
RL_API size_t rl_override_name(uint32_t override, const rl_rule_t *rule,
    const void *key, size_t key_len, char *out);

/*
 * The file of a zone's overrides (ratelimit_zone overrides_file=): a text
 * file, an override a line ("RULE key|range TARGET ACTION GIVEN LIMIT BURST
 * PERIOD_MS EXPIRES_MS CREATED_MS": RULE a rule's name, "*" for a range in
 * every rule, "*=EXPR" for a key in every rule keyed on EXPR; EXPR and the
 * key %-encoded), under a header line naming the format.
 * rl_overrides_file_line writes one line of ov (at most
 * RL_OVERRIDE_LINE_MAX bytes, the newline included); returns its length.
 */
#define RL_OVERRIDE_LINE_MAX  (RL_NAME_MAX + 3 * RL_OVERRIDE_KEYED_MAX \
                               + 3 * RL_OVERRIDE_KEY_MAX + 128)
#define RL_OVERRIDES_FILE_HEADER  "# ngx-ratelimit overrides 1\n"
RL_API size_t rl_overrides_file_line(const rl_override_t *ov, char *buf);

/*
 * Reads one line of the file (without its newline): RL_OK with ov filled,
 * RL_DECLINED for a blank line, a comment or the header, RL_ERROR with err
 * saying what is wrong.
 */
RL_API int rl_overrides_file_read(const char *line, size_t len,
    rl_override_t *ov, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* RATELIMIT_OVERRIDE_H */
