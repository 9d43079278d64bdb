/*
 * ngx-ratelimit core: a local zone's key states kept across restarts and
 * binary upgrades (ratelimit_zone state=FILE): the file written from a
 * table a chunk at a time, and read back into a fresh table.
 *
 * The file, in the machine's byte order, in 8-byte words:
 *
 *   header   "RLSTATE1", the format's version, the table layout's version,
 *            the instant it was written (wall-clock ms), the eviction
 *            summary's cells (count), the table's hash secret, the rules
 *            (count, then each: identity, algorithm, name)
 *   keys     each: tag, t, n, the debt's fraction and origin, the words of
 *            its block; a tag of 0 ends them
 *   cells    the summary's cells that still owe: index, value; an index of
 *            all ones ends them
 *   trailer  the keys written, and a checksum of every word before it
 *
 * Only keys that still owe something are written (t after the instant of
 * writing); a key holding concurrency slots or an adaptive key (t far
 * ahead) is not: no request survives a restart.  A key is restored as the
 * same rule's key again when its rule keeps its identity (name and
 * algorithm, rl_rule_identity): exactly what a reload keeps.  The time
 * nginx was down passes as for any idle key (times are wall-clock).
 */

#ifndef RATELIMIT_STATE_H
#define RATELIMIT_STATE_H

#include "ratelimit_rule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A rule of the zone, as the file names it. */
typedef struct {
    uint64_t  identity;           /* rl_rule_identity() */
    uint32_t  algorithm;
    char      name[RL_NAME_MAX];
    const rl_rule_t  *rule;       /* the rule as configured: what a
                                     restored key may owe (not written) */
} rl_state_rule_t;

/* A write in progress, in the caller's memory (zeroed by _begin). */
typedef struct {
    int64_t   now;
    uint64_t  cursor;     /* the next bucket, then the next cell */
    uint64_t  sum;        /* the checksum so far */
    uint64_t  keys;       /* keys written */
    uint64_t  cells;      /* cells written */
    uint32_t  phase;      /* header, keys, cells, trailer, done */
    uint32_t  nrules;
    const rl_state_rule_t  *rules;
} rl_state_write_t;

/* Bytes rl_state_write_next() needs at least in a call's buffer. */
#define RL_STATE_CHUNK_MIN  (1 << 20)

RL_API void rl_state_write_begin(rl_state_write_t *w,
    const rl_state_rule_t *rules, size_t nrules, int64_t now);

/*
 * The file's next *len bytes (maybe none) into out (cap >=
 * RL_STATE_CHUNK_MIN), from the table under its lock, at most `buckets`
 * buckets (or cells) at a time: 1 while more is to come, 0 once the whole
 * file is written.  As any holder of the lock, it first undoes what a
 * process that died holding it left half done.  Between two calls the
 * lock may be released: a key an insertion moved meanwhile may be written
 * twice (read back once) or missed.
 */
RL_API int rl_state_write_next(rl_state_write_t *w, void *table,
    uint8_t *out, size_t cap, uint64_t buckets, size_t *len);

/* What a file restored, and what it dropped. */
typedef struct {
    int64_t   written;        /* when the file was written (ms) */
    uint64_t  keys;           /* keys in the file */
    uint64_t  restored;       /* keys restored */
    uint64_t  expired;        /* back to full budget since: not needed */
    uint64_t  no_block;       /* their block's size is no pool's now (a
                                 rule's parameters changed) */
    uint64_t  bounded;        /* of those, owing more than the zone's
                                 rules can make a key owe now: cut to it */
    int64_t   ahead;          /* how far ahead of now the file was
                                 written (a clock stepped back since):
                                 its times moved back so much (0: none) */
    uint64_t  cells;          /* summary cells restored */
    uint64_t  cells_dropped;  /* another zone size: cells not restored */
    uint32_t  rules;          /* rules in the file */
    uint32_t  rules_gone;     /* of those, not configured now */
    char      gone[256];      /* their names, ", " between, cut at 255 */
} rl_state_report_t;

/*
 * Restores a file's key states into a table rl_table_init() just laid out,
 * which nobody else uses yet, at now: the file's secret becomes the
 * table's.  Nothing in the file is trusted to be what the zone's rules
 * wrote: a file written ahead of now has every time moved back to now's
 * clock, and no key (nor ban) owes more than the zone's rules (each
 * `rule`) can make a key owe from now.  RL_OK, or RL_ERROR with why in
 * err, the table left as it was (empty) for a file that is not whole: too
 * short, another format or
 * module version, a bad checksum, a record past its end.  Never reads past
 * len bytes.
 */
RL_API int rl_state_restore(void *table, const uint8_t *file, size_t len,
    const rl_state_rule_t *rules, size_t nrules, int64_t now,
    rl_state_report_t *report, char *err, size_t errlen);

/* The checksum a file of len bytes ends with (tests, fuzzers). */
RL_API uint64_t rl_state_checksum(const uint8_t *file, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* RATELIMIT_STATE_H */
