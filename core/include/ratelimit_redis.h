/*
 * ngx-ratelimit core: zones decided in Redis: the script, its
 * command, its reply read and judged, the refusals a zone remembers.
 */

#ifndef RATELIMIT_REDIS_H
#define RATELIMIT_REDIS_H

#include "ratelimit_request.h"
#include "ratelimit_override.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Redis: fleet-wide limits ------------------------------------------- */

/*
 * A zone with redis= decides its rules in Redis, with one script call per
 * request (core/src/redis/ratelimit.lua, the transitions above in Lua).  The
 * glue owns the connections; the core writes the command and reads the
 * reply, so the fleet's servers all build the same keys and arguments.
 */

/* The script's text (EVAL). */
RL_API const char *rl_redis_script(size_t *len);

/*
 * How a call names the script: as a function of a library (FCALL: Redis 7
 * and later, Valkey), whose code Redis keeps set up between calls, loaded
 * once with rl_redis_load_command(); or as a script (Redis 6, or a user
 * not allowed FCALL or FUNCTION LOAD), by its SHA-1 (EVALSHA) or with its
 * text (EVAL, which caches it).  The library and its function are named
 * "ratelimit_" and the script's SHA-1: servers of another version of the
 * module load theirs beside it.
 */
enum rl_redis_via {
    RL_REDIS_FCALL = 0,
    RL_REDIS_EVALSHA,
    RL_REDIS_EVAL
};

/* FUNCTION LOAD of the script as a library, sha its SHA-1 (40 hex digits):
   the bytes it takes at most, and the command written (its length). */
RL_API size_t rl_redis_load_size(void);
RL_API size_t rl_redis_load_command(char *buf, const char *sha);

/*
 * RL_OK if the rule's arithmetic stays exact in Redis's Lua (doubles, exact
 * below 2^53): limit (burst) x (period + max_delay) at most 2^50.  Else err.
 */
#define RL_REDIS_UNITS_MAX  (1ULL << 50)
RL_API int rl_redis_rule_ok(const rl_rule_t *rule, char *err, size_t errlen);

/*
 * The key naming a rule's state for a key: prefix, then 32 hex characters
 * of SHA-256(identity, key); no key bytes are stored in Redis.  For Redis
 * Cluster (cluster set), a hash tag of 16 hex characters of SHA-256(key)
 * comes between, "{...}", so that every rule's state for one key value is
 * in one slot.  Returns the length written.
 */
#define RL_REDIS_HASH_LEN  32
#define RL_REDIS_TAG_LEN   18
RL_API size_t rl_redis_key(char *out, const char *prefix, size_t prefix_len,
    int cluster, uint64_t identity, const void *key, size_t key_len);

/* Redis Cluster's slot of a Redis key (CRC16 of its hash tag, or of all
   of it), and the slot of the keys rl_redis_command writes for a key. */
RL_API unsigned rl_redis_slot(const char *rkey, size_t len);
RL_API unsigned rl_redis_key_slot(const void *key, size_t key_len);

/* Bytes rl_redis_command writes at most. */
RL_API size_t rl_redis_command_size(size_t n, size_t prefix_len,
    size_t script_len);

/*
 * What a call of the script does: decide the request (an admission spends,
 * a refusal may ban, as in a local zone); settle the charges of a request
 * that ended (the checks rl_request_end() would settle: each gives back
 * the cost it reserved, from its after.t and at, and spends its charge,
 * even into debt); or, for the key API, decide each check on its state as
 * it is without writing anything (peek: a ban shows, and refuses a cost),
 * or delete each check's state and ban (reset).
 */
enum rl_redis_call {
    RL_REDIS_DECIDE = 0,
    RL_REDIS_PEEK,
    RL_REDIS_RESET,
    RL_REDIS_SETTLE,
    RL_REDIS_RELEASE,
    RL_REDIS_RENEW,
    RL_REDIS_RESTORE
};

/*
 * Concurrency in a Redis zone: a decision that admits a request takes a
 * lease of each concurrency check (its key's sorted set: the member named
 * "SERVER:LEASE:HOLDER:NUMBER" of rq->server, rq->lease, rq->holder and the
 * check's lease, the first two in 16 hex digits, scored by Redis's clock
 * plus lease=), unless the check is full_here; RL_REDIS_RELEASE removes
 * the leases of the checks that hold one (lease > 0), RL_REDIS_RENEW moves
 * their deadlines to lease= from now (an expired one is not taken again),
 * RL_REDIS_RESTORE writes them with that deadline whether Redis holds them
 * or not (their requests run: admitted while Redis was away, or Redis lost
 * their leases).  Their answer: rl_redis_answer() sets out->leases_done
 * (released, renewed) and out->leases_gone (found expired already, or
 * restored).  A call of these holds any
 * number of checks (a worker's renewals batched), of one Cluster slot.  A
 * peek counts each concurrency check's live leases whose names start with
 * rq->server's part (none when rq->server is 0): out->here.
 */
RL_API int rl_redis_holds_lease(const rl_check_t *check);

/*
 * How long a slot of the rule is leased in Redis before its server must
 * renew it (lease=; 0: the rule takes no slot).
 */
RL_API int64_t rl_redis_lease_ms(const rl_rule_t *rule);

/*
 * A server's id for its leases' names: random (getrandom(), else the clock
 * and the process mixed), never 0.  Made once for all the workers of one
 * nginx and kept in its zone.
 */
RL_API uint64_t rl_redis_server_id(void);

/*
 * Writes one RESP command calling the script (enum rl_redis_call) for the
 * request's checks that apply (a key; a settle's: those that settle a
 * charge), with its combine, via (enum rl_redis_via) FCALL or EVALSHA with
 * script = the script's SHA-1 in hex, or EVAL with the script's text.  The
 * keys are each check's state, then the ban of each check whose rule has
 * ban= (named as rl_redis_key() names a state, under another identity).
 * now_ms < 0 lets the script read Redis's TIME; tests pass their own clock.
 * Returns the bytes written.
 */
RL_API size_t rl_redis_command(char *buf, const char *script, size_t script_len,
    int via, int call, const char *prefix, size_t prefix_len, int cluster,
    const rl_request_t *rq, int64_t now_ms);

/*
 * A batch: the decisions (RL_REDIS_DECIDE) of several requests in one call
 * of the script, as if each were called in turn at the same instant of
 * Redis's clock: what one writes, the next reads.  Not for Redis Cluster
 * (the requests' keys lie in other slots).  Its reply is an array of each
 * request's answer, in order (rl_resp_batch); an error answers each of
 * them.  A batch takes up to RL_REDIS_BATCH_MAX requests whose answers
 * fit one reply (RL_RESP_REPLY_MAX): rl_redis_batch_takes adds rq's
 * longest answer to *bytes (0 for an empty batch of count requests) and
 * returns 1, or 0 if the batch is full.
 */
#define RL_REDIS_BATCH_MAX  64
RL_API int rl_redis_batch_takes(size_t *bytes, size_t count,
    const rl_request_t *rq);

/* The bytes rl_redis_batch_command writes at most, and the command. */
RL_API size_t rl_redis_batch_size(const rl_request_t *const *rqs, size_t n,
    size_t prefix_len, size_t script_len);
RL_API size_t rl_redis_batch_command(char *buf, const char *script,
    size_t script_len, int via, const char *prefix, size_t prefix_len,
    const rl_request_t *const *rqs, size_t n, int64_t now_ms);

/* The longest answer of the script to rq's decision, in bytes. */
RL_API size_t rl_redis_answer_max(const rl_request_t *rq);

enum rl_resp_type {
    RL_RESP_STATUS = '+',
    RL_RESP_ERROR = '-',
    RL_RESP_INTEGER = ':',
    RL_RESP_BULK = '$',
    RL_RESP_ARRAY = '*'
};

#define RL_RESP_ITEMS_MAX  (2 + 13 * RL_RULES_MAX)

/* The longest reply taken: the script's longest answer (RL_RULES_MAX
   rules) is under 8 KB. */
#define RL_RESP_REPLY_MAX  16384
#define RL_RESP_TOO_LONG   (-2)

typedef struct {
    int          type;          /* enum rl_resp_type */
    int64_t      integer;       /* INTEGER; BULK, ARRAY: length (-1: nil) */
    const char  *str;           /* STATUS, ERROR, BULK: into the buffer */
    size_t       str_len;
    size_t       nitems;        /* ARRAY: integer items kept in items */
    int          integers;      /* ARRAY: 1 if every item is an integer */
    int64_t      items[RL_RESP_ITEMS_MAX];
} rl_resp_t;

/*
 * Parses the reply at p: returns the bytes it takes, 0 if more are needed,
 * -1 if the bytes are not RESP (or nest deeper than 8), RL_RESP_TOO_LONG if
 * the reply is longer than RL_RESP_REPLY_MAX bytes (or a bulk string or an
 * array says it will be): the caller drops the connection.
 */
RL_API long rl_resp_parse(const char *p, size_t len, rl_resp_t *r);

/*
 * A batch's reply of n answers, read whole (rl_resp_parse): the offset of
 * its first answer, each read in turn by rl_resp_parse and judged by
 * rl_redis_answer for its request; or -1 if it is not an array of n (an
 * error, which answers each request of the batch).
 */
RL_API long rl_resp_batch(const char *p, size_t len, size_t n);

/* What a reply is (rl_redis_answer), for the glue to act on. */
enum rl_redis_kind {
    RL_REDIS_DECIDED = 0,       /* the script's answer, its shape and every
                                   value within what the rules can produce:
                                   the checks' decisions are set (a decided
                                   request is concluded, verdict); or "+OK"
                                   to a connection's own command */
    RL_REDIS_REDIRECT,          /* Redis Cluster's MOVED or ASK */
    RL_REDIS_NOSCRIPT,          /* the script is not loaded: call it again
                                   with EVAL, or (FCALL) load the library,
                                   then call it */
    RL_REDIS_FAILED,            /* anything else: why says what */
    RL_REDIS_READONLY,          /* failed, by a replica (READONLY): the
                                   primary failed over, the connection is to
                                   be opened again (to the host name's new
                                   address) */
    RL_REDIS_NO_FUNCTIONS       /* FCALL unknown (Redis 6), or not allowed
                                   (NOPERM), or the library not loaded
                                   (FUNCTION LOAD refused): call the script
                                   instead (EVALSHA) */
};

/*
 * A reply's reset_ms, retry_after_ms and available_ms may exceed what the
 * rule produces on a steady clock by this much: Redis's clock may step back
 * (a failover to a server whose clock is behind).
 */
#define RL_REDIS_CLOCK_SLACK_MS  60000

/* The longest host name or address a redirection may give. */
#define RL_REDIS_HOST_MAX  255

typedef struct {
    int          kind;          /* enum rl_redis_kind */
    int          verdict;       /* DECIDED, RL_REDIS_DECIDE: enum
                                   rl_verdict */
    uint32_t     found;         /* DECIDED, RL_REDIS_RESET: bit i set if
                                   check i had a state, */
    uint32_t     unbanned;      /*   and if its ban (ban=) was lifted */
    uint32_t     leases_done;   /* DECIDED, RELEASE, RENEW or RESTORE:
                                   leases released or renewed, */
    uint32_t     leases_gone;   /*   and found expired already (RESTORE:
                                   written again) */
    uint32_t     here[RL_RULES_MAX]; /* DECIDED, RL_REDIS_PEEK: check i's
                                   live leases of rq->server (concurrency;
                                   0 for other rules) */
    unsigned     slot;          /* REDIRECT: the slot, */
    int          ask;           /*   ASK (this once) or MOVED (from now
                                   on), */
    const char  *host;          /*   and the server: an address or a name
                                   of letters, digits, ".", "-", "_" and
                                   ":", into the reply, */
    size_t       host_len;
    unsigned     port;
    char         why[RL_ERR_MAX]; /* FAILED: what is wrong, in words and
                                   numbers (never the reply's bytes) */
} rl_redis_answer_t;

/*
 * Classifies a reply to a call of the script (enum rl_redis_call) for rq,
 * or, with rq NULL, to a connection's own command (AUTH, SELECT, ASKING),
 * which only "+OK" answers.  The script's answer must have exactly the
 * items of the call, integers, each in range for its check's rule (the
 * rule as applied to the request): remaining at most what the rule can show
 * (its burst, limit, or what a shaper admits), reset, Retry-After and t
 * within what the algorithm can produce (a debt's and a ban's included,
 * plus RL_REDIS_CLOCK_SLACK_MS), Retry-After exactly when refused, a delay
 * only from leaky_bucket and at most max_delay, the rule's window, flags 0
 * or 1, never exactly when the cost exceeds what the rule admits, a ban
 * only of a ban= rule, at most ban= and refusing, the script's clock a time
 * (ms from 1970, at most RL_REDIS_UNITS_MAX) and the head's t after a
 * commit exactly for the checks that commit, after that clock by at most
 * what the algorithm waits, and the request's answer as its combine makes
 * it of the rules'.  A decided request's checks get their decisions, and
 * at and after.t (what settling a charge gives back).  A settle's answer:
 * for each check it settles, the units charged (at most the charge sent,
 * and a limit past the rule's capacity), the key in debt (only if
 * charged), capped (whenever less than the charge was spent): in each
 * check's charged, in_debt and capped.  Returns out->kind.
 */
RL_API int rl_redis_answer(rl_request_t *rq, int call, const rl_resp_t *r,
    rl_redis_answer_t *out);

/*
 * A decision of one gcra or token_bucket rule (no ban=, no charge=, no
 * override's instant) is answered with a string: "ALLOWED NOW" and the
 * key's state as the script read it, if any, "T N LIMIT PERIOD" (the
 * instant T + N/LIMIT ms); rl_redis_answer works the figures out from it
 * with the core's gcra.  This gives them as the integers of the whole
 * answer (2 + 12, as an array's items), unjudged, into items: 1, or 0 if
 * r is not such an answer to rq (for tools and tests that read the
 * script's numbers as they are).
 */
RL_API int rl_redis_lean_items(const rl_request_t *rq, const rl_resp_t *r,
    int64_t *items);

/* The reply to FUNCTION LOAD (rl_redis_load_command): RL_REDIS_DECIDED,
   the library is there (loaded now, or by another server before: "already
   exists"), or RL_REDIS_NO_FUNCTIONS (why): calls go as scripts. */
RL_API int rl_redis_load_answer(const rl_resp_t *r, rl_redis_answer_t *out);

/*
 * Refusals remembered (core/src/redis/refusals.cpp): a zone with redis=
 * keeps, in its shared memory, what Redis refused until when, so that a
 * spent key's requests are refused at once, with the same headers, without
 * a round trip, and never one Redis would have admitted.  A fixed array
 * (rl_refusals_size() bytes, zeroed: empty), entries named by a keyed hash
 * of the request's checks (their keys' tags, rules and parameters as
 * applied), written under the zone's lock and read without it.  Times are
 * the caller's monotonic clock in ms, the same in every process.
 *
 * Before sending a request to Redis, the caller reads the epoch and its
 * clock; when Redis refused it, rl_refusals_store() with both and the clock
 * as the reply came; the next request: rl_refusals_find() first.  A key
 * reset (the key API) calls rl_refusals_forget(): every entry of the zone,
 * and every reply still on its way, is forgotten.
 */
#define RL_REFUSALS_REFRESH_MS  1000   /* an entry is served so long at
                                          most after Redis's answer: what a
                                          reset on another server may wait */
RL_API size_t rl_refusals_size(size_t zone_size);
RL_API uint32_t rl_refusals_epoch(const void *cache);

/* 1: rq (hashed: rl_request_hash) is refused from the cache, concluded as
   rl_redis_answer() concludes a refusal; 0: ask Redis. */
RL_API int rl_refusals_find(const void *cache, size_t size, rl_request_t *rq,
    int64_t now_ms);

/* Remembers rq's refusal, as Redis answered it, if it is sound for every
   request of the same checks with costs no smaller until some instant
   after now_ms, and returns 1; any other answer of Redis for the same
   checks forgets their entry (it spent more than the entry knows).  The
   caller holds the zone's lock. */
RL_API int rl_refusals_store(void *cache, size_t size, const rl_request_t *rq,
    uint32_t epoch, int64_t sent_ms, int64_t now_ms);

RL_API void rl_refusals_forget(void *cache);

/* ---- a Redis zone's overrides ---------------------------------------- */

/*
 * A Redis zone keeps its overrides in Redis (core/src/overrides/redis.cpp):
 * the key API writes them there (put, del), and each server takes them
 * into its zone's store (rl_overrides_replace) when their version moves
 * (poll, a page at a time), on the zone's connections; its own script.
 */
enum rl_overrides_op {
    RL_OVERRIDES_PUT = 1,
    RL_OVERRIDES_DEL,
    RL_OVERRIDES_POLL
};

/* The bytes of lines a poll's page holds at most (its reply stays under
   RL_RESP_REPLY_MAX). */
#define RL_OVERRIDES_PAGE  12000

typedef struct {
    int            op;          /* enum rl_overrides_op */
    rl_override_t  ov;          /* put: the override; del: its target */
    int64_t        now_ms;      /* put, del: the writer's clock */
    uint64_t       room;        /* put: the zone's overrides= */
    uint64_t       version;     /* poll: the version the server holds, */
    uint64_t       id;          /*   of the hash made then (0: none) */
    char           cursor[24];  /*   and the page's place: "0" and 0 for */
    uint64_t       skip;        /*   the first */
    /* out of rl_overrides_redis_answer(): */
    int            result;      /* put: 1, or -1 full; del: 1, or 0 none */
    uint64_t       written;     /* put, del: the version the write made */
    int            unchanged;   /* poll: Redis holds the version known */
    uint64_t       page_version;
    uint64_t       page_id;     /*   the hash's id: when it was made (a
                                     hash lost and made again has
                                     another) */
    const char    *lines;       /*   the page's lines (the file's, and
                                     rl_overrides_redis_read's), into */
    size_t         lines_len;   /*   the reply */
    int            more;        /*   a page follows, at: */
    char           next_cursor[24];
    uint64_t       next_skip;
} rl_overrides_call_t;

RL_API const char *rl_overrides_redis_script(size_t *len);

/* The key a zone's overrides' hash is named by, and its calls sent by (a
   Cluster's slot): at most RL_OVERRIDES_TARGET_MAX bytes into out. */
#define RL_OVERRIDES_TARGET_MAX  (10 + RL_NAME_MAX)
RL_API size_t rl_overrides_redis_target(const char *zone, size_t zone_len,
    char *out);

RL_API size_t rl_overrides_redis_command_size(size_t prefix_len,
    size_t script_len);
RL_API size_t rl_overrides_redis_command(char *buf, const char *script,
    size_t script_len, int eval, const char *prefix, size_t prefix_len,
    int cluster, const char *zone, size_t zone_len,
    const rl_overrides_call_t *call);

/* A reply judged: RL_REDIS_DECIDED (call's outs set), NOSCRIPT, READONLY
   or FAILED (why). */
RL_API int rl_overrides_redis_answer(const rl_resp_t *r,
    rl_overrides_call_t *call, char *why, size_t whylen);

/*
 * One line of a poll's page (without its newline) read as the file's
 * (rl_overrides_file_read) and taken as the key API's writes are
 * (rl_override_admit, with the zone's rules): RL_OK, ov to hold (an ended
 * one too: a Redis zone's copy keeps it, see rl_overrides_remote);
 * RL_DECLINED, nothing (a comment); RL_ERROR, a field skipped, err naming
 * it and why: a line that does not read or breaks its rule, or a field the
 * script could not send as a line ("#! WHY BYTES FIELD": too long, holding
 * a line break, or not its line's field).
 */
RL_API int rl_overrides_redis_read(const char *line, size_t len,
    const rl_override_rule_t *rules, size_t n, int redis, int64_t now_ms,
    rl_override_t *ov, char *err, size_t errlen);


#ifdef __cplusplus
}
#endif

#endif /* RATELIMIT_REDIS_H */
