
/*
 * ngx-ratelimit: the types of the glue every protocol's module shares (a
 * zone, a rule's part its zone knows, what a module's configuration gives
 * its zones), and the clocks.  It calls nothing and includes none of the
 * glue's headers, nor any of nginx's HTTP: each file of zone/, redis/ and
 * common/ includes it through its own header, and a protocol's types
 * (http/ngx_http_ratelimit_types.h) build on it.
 *
 * The glue evaluates nginx values (keys, costs, charges), takes the zones'
 * locks and applies what the core decides (core/include/ratelimit.h: every
 * algorithm, the rule parser, the key table, the decision of a whole
 * request).  Which file holds what: docs/architecture.md.
 */

#ifndef NGX_RATELIMIT_TYPES_H
#define NGX_RATELIMIT_TYPES_H


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ratelimit.h"
#include "ratelimit_render.h"
#include "ratelimit_sync.h"


/* Redis zones' (ngx_ratelimit_redis.h), and redis_sync's
   (ngx_ratelimit_sync.h) */
typedef struct ngx_ratelimit_redis_s       ngx_ratelimit_redis_t;
typedef struct ngx_ratelimit_redis_wait_s  ngx_ratelimit_redis_wait_t;
typedef struct ngx_ratelimit_sync_s        ngx_ratelimit_sync_t;
typedef struct ngx_ratelimit_overrides_poll_s
    ngx_ratelimit_overrides_poll_t;


/* Who decided a request or a session ($ratelimit_decided_by's words, in
   this order): in the zone, in Redis, by on_redis_error's mode while Redis
   failed, or from a refusal of Redis's remembered; 0 while nothing has. */
#define NGX_RATELIMIT_BY_LOCAL           1
#define NGX_RATELIMIT_BY_REDIS           2
#define NGX_RATELIMIT_BY_FALLBACK_LOCAL  3
#define NGX_RATELIMIT_BY_FALLBACK_ALLOW  4
#define NGX_RATELIMIT_BY_FALLBACK_DENY   5
#define NGX_RATELIMIT_BY_REDIS_CACHED    6

/* A rule whose counters in its zone a worker has not looked up yet. */
#define NGX_RATELIMIT_STATS_UNKNOWN     (-2)

/* Bytes of a key shown in log lines (and by the key API), and of the most
   that ngx_ratelimit_escape_key writes. */
#define NGX_RATELIMIT_KEY_LOG_MAX       64
#define NGX_RATELIMIT_KEY_ESCAPED                                             \
    RL_ESCAPED_MAX(NGX_RATELIMIT_KEY_LOG_MAX)

/* Log folding, per worker: the keys remembered, and lines a rule may write
   in a second before the rest are only counted. */
#define NGX_RATELIMIT_FOLD_KEYS         1024
#define NGX_RATELIMIT_FOLD_LINES        10


typedef struct ngx_ratelimit_rule_s      ngx_ratelimit_rule_t;
typedef struct ngx_ratelimit_rule_log_s  ngx_ratelimit_rule_log_t;
typedef struct ngx_ratelimit_conf_s      ngx_ratelimit_conf_t;


/* A failure that repeats on a timer (a zone's file that cannot be
   written), in a process: said once, its repeats counted
   (ngx_ratelimit_log_written). */
typedef struct {
    ngx_uint_t                   failures;  /* since its first line; 0:
                                               not failing */
    ngx_uint_t                   folded;    /* since its last line */
    ngx_err_t                    err;       /* its last line's */
    ngx_msec_t                   said;      /* when */
} ngx_ratelimit_repeat_t;


typedef struct {
    ngx_str_t                    name;      /* as declared */
    ngx_slab_pool_t             *shpool;    /* its mutex is the zone's lock */
    size_t                       size;      /* of the shared memory */
    void                        *table;     /* rl table inside the zone */
    ngx_array_t                  blobs;     /* uint32_t: its rules' blocks */
    uint64_t                     stack_slots;  /* its rules in locations
                                               where one keeps a block,
                                               and those with a block:
                                               the stack its table plans
                                               for (rl_table_stack) */
    uint64_t                     stack_blocks;
    ngx_array_t                  rules;     /* ngx_ratelimit_rule_t *: the
                                               rules naming it */
    ngx_array_t                 *bandwidth; /* ngx_ratelimit_bw_rule_t *
                                               (its first member an
                                               ngx_ratelimit_rule_t): the
                                               bandwidth rules naming it,
                                               of either block (the key
                                               API, the top keys); NULL:
                                               none */
    ngx_ratelimit_rule_t       **names;     /* its first rule of each name,
                                               sorted by name */
    ngx_uint_t                   nnames;
    int32_t                     *slots;     /* this worker's: each name's
                                               counters in the table, or
                                               ..._STATS_UNKNOWN (apart from
                                               the rules, so that a worker
                                               writes none of the
                                               configuration's pages) */
    u_char                      *file;      /* where it is declared */
    ngx_uint_t                   line;
    ngx_cycle_t                 *cycle;     /* of its configuration */
    ngx_ratelimit_conf_t        *conf;      /* of its block */
    ngx_ratelimit_redis_t       *redis;     /* NULL: decided in the zone */
    ngx_ratelimit_sync_t        *sync;      /* redis_sync: decided in the
                                               zone, exchanged with Redis */
    ngx_flag_t                   stats_full_logged; /* in this worker */
    ngx_flag_t                   planned;   /* its layout checked */
    ngx_uint_t                   overrides; /* overrides=: room for so many */
    ngx_str_t                    overrides_file; /* overrides_file=; empty:
                                               none */
    void                        *store;     /* the overrides' store, after
                                               the table (NULL: none) */
    ngx_event_t                  overrides_event; /* this worker's timer:
                                               the file written, expired
                                               overrides removed */
    rl_override_rule_t          *override_rules; /* this worker's: its
                                               rules, a name once */
    ngx_uint_t                   override_nrules;
    ngx_ratelimit_redis_t       *overrides_redis; /* a Redis or redis_sync
                                               zone's Redis, where its
                                               overrides are */
    ngx_ratelimit_overrides_poll_t  *poll;  /* this worker's taking
                                               of them */
    ngx_ratelimit_repeat_t       overrides_failing; /* this process's
                                               writes of the file */
    int64_t                      overrides_checked; /* this worker's timer:
                                               expiries seen until */
    ngx_str_t                    state_file; /* state=; empty: none */
    ngx_msec_t                   state_interval; /* state_interval= */
    ngx_event_t                  state_event; /* worker 0's timer: the
                                               state file written */
    ngx_msec_t                   state_written; /* when, by this worker */
    ngx_flag_t                   state_upgrade; /* an upgrade seen (the
                                               pid file's .oldbin) */
    ngx_ratelimit_repeat_t       state_failing; /* this process's writes */
} ngx_ratelimit_zone_t;


/* A rule's log lines in a worker: written, and folded. */
struct ngx_ratelimit_rule_log_s {
    ngx_ratelimit_rule_t        *rule;
    ngx_ratelimit_rule_log_t    *next;   /* the worker's rules that
                                               logged (conf->logged) */
    ngx_msec_t                   log_second; /* ngx_ratelimit_log_line */
    ngx_uint_t                   log_lines;
    ngx_uint_t                   log_level;
    ngx_msec_t                   bad_second; /* ngx_ratelimit_log_bad */
    ngx_uint_t                   folded[3]; /* rejections, delays, bad
                                               values */
};


/* A rule naming a zone, as the directive was read. */
typedef struct {
    ngx_shm_zone_t              *shm_zone;
    u_char                      *file;
    ngx_uint_t                   line;
    ngx_array_t                 *rules;     /* its location's, of its
                                               protocol's rules */
    ngx_uint_t                   index;     /* the rule: rules->elts[index] */
} ngx_ratelimit_zone_ref_t;


/*
 * A rule as its zone knows it, whatever the protocol: the first member of
 * a protocol's rule (http/ngx_http_ratelimit_types.h), which adds the
 * values it evaluates, so that a check's data points to both.
 */
struct ngx_ratelimit_rule_s {
    ngx_shm_zone_t              *shm_zone;  /* data: the zone */
    rl_rule_t                    rule;
    uint64_t                     identity;
    ngx_str_t                    name;      /* rule.name */
    ngx_str_t                    key;       /* key=, as written */
    uint32_t                     name_index; /* its name among its zone's
                                               (zone->names, zone->slots) */
    unsigned                     cost_varies:1; /* cost=$var */

    /* this worker's, once the rule logs (a configuration may hold
       thousands of rules that never do) */
    ngx_ratelimit_rule_log_t    *log;
};


/* A rule and key logged lately, in a worker. */
typedef struct {
    ngx_ratelimit_rule_t        *rule;
    uint64_t                     tag;
    ngx_msec_t                   at;
} ngx_ratelimit_fold_t;


/*
 * What a protocol's module gives the zones its block declares: the first
 * member of its main configuration.  The rules' references to zones while
 * the configuration is read (checked once it is: ngx_ratelimit_zones_init),
 * this worker's log folding, and the block's resolver, which names a Redis
 * zone's servers (read as they connect: the resolver directive may come
 * after the zone's).
 */
struct ngx_ratelimit_conf_s {
    ngx_array_t                  zone_refs; /* ngx_ratelimit_zone_ref_t,
                                               while the configuration is
                                               read (its temporary pool) */
    ngx_ratelimit_rule_log_t    *logged;    /* this worker's rules that
                                               logged */
    ngx_ratelimit_fold_t        *fold;      /* [NGX_RATELIMIT_FOLD_KEYS] */
    ngx_event_t                  fold_event;
    ngx_resolver_t             **resolver;
    ngx_msec_t                  *resolver_timeout;
    ngx_str_t                    block;     /* "http", "stream": the block
                                               that declares its zones, and
                                               whose rules name them */
};


/* What a zone's snapshot holds besides its figures
   (ngx_ratelimit_snapshot.c). */
#define NGX_RATELIMIT_SNAPSHOT_COUNTERS  0x01  /* its rules' counters */
#define NGX_RATELIMIT_SNAPSHOT_TOPS      0x02  /*   and top keys */
#define NGX_RATELIMIT_SNAPSHOT_RULES     0x04  /* its rules' settings */


/*
 * The clock the core decides on: nginx's cached wall-clock time, in ms
 * (the handler's comment says why wall time).
 */

static ngx_inline int64_t
ngx_ratelimit_now(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (int64_t) tp->sec * 1000 + tp->msec;
}


/*
 * The clock of the refusals a Redis zone remembers (rl_refusals_*): the
 * system's monotonic clock, the same in every worker, read now (nginx's
 * cached time may be behind: a refusal would be served past its end).
 */

static ngx_inline int64_t
ngx_ratelimit_monotonic_ms(void)
{
    struct timespec  ts;

    (void) clock_gettime(CLOCK_MONOTONIC, &ts);

    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


/* ngx_str_t as the core's rl_str_t */
#define ngx_ratelimit_rl_str(s)                                               \
    ((rl_str_t) { (const char *) (s)->data, (s)->len })

/* A function kept out of its caller, so that a caller's common path does
   not set up the frame of its rare one. */
#if (defined __GNUC__)
#define NGX_RATELIMIT_NOINLINE  __attribute__((noinline))
#else
#define NGX_RATELIMIT_NOINLINE
#endif


/*
 * Bytes zeroed a word at a time (from a word), unrolled where their number
 * is a constant: a few 16-byte stores where ngx_memzero's "rep stosq" runs
 * a step a word (a request's context and each check's outputs, on every
 * request).  The words may alias the fields they overwrite.
 */
#if (defined __GNUC__)

typedef uint64_t  ngx_ratelimit_word_t __attribute__((__may_alias__));

static ngx_inline void
ngx_ratelimit_zero(void *p, size_t size)
{
    size_t                 i;
    ngx_ratelimit_word_t  *w;

    w = p;

#if (__GNUC__ >= 8 || defined __clang__)
#pragma GCC unroll 64
#endif
    for (i = 0; i < size / sizeof(ngx_ratelimit_word_t); i++) {
        w[i] = 0;
    }

    for (i = size - size % sizeof(ngx_ratelimit_word_t); i < size; i++) {
        ((u_char *) p)[i] = 0;
    }
}

#else
#define ngx_ratelimit_zero(p, size)  ngx_memzero(p, size)
#endif


/* The rule a check is of. */
#define ngx_ratelimit_rule_of(check)                                          \
    ((ngx_ratelimit_rule_t *) (check)->data)

/* The zone a rule names. */
#define ngx_ratelimit_zone_of(rule)                                           \
    ((ngx_ratelimit_zone_t *) (rule)->shm_zone->data)



#endif /* NGX_RATELIMIT_TYPES_H */
