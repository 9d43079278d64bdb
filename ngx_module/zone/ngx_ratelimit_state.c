
/*
 * ngx-ratelimit: a local zone's key states kept across restarts and binary
 * upgrades (ratelimit_zone state=FILE state_interval=TIME): the file the
 * core writes and reads (ratelimit_state.h), read by the master when it
 * makes the zone afresh, written by worker 0's timer every interval and by
 * the master as it exits (a graceful or fast stop, after its workers).
 *
 * A write copies the table a few thousand buckets at a time, each under
 * the zone's lock, into a buffer of this process's, written to a
 * temporary file beside the state file and renamed over it: the file is
 * always a whole one (ngx_ratelimit_file.c: what others may plant in
 * the directory is neither followed nor reused).  A write that fails is
 * said once while the same failure repeats, and its end said too.
 * Nothing of it is on the request path.
 *
 * A binary upgrade (USR2): the old master renames its pid file to
 * .oldbin before it starts the new binary.  Worker 0 looks at each tick
 * (a quarter of a second) for that file naming its own master, writes the
 * state file at once when it appears, and no more while it is there: the
 * file is the new generation's from then on (the old master does not
 * write it as it exits either).  The new master, which makes its zones
 * from the file, waits for that write (a file written since the pid file
 * was renamed, at most NGX_RATELIMIT_STATE_WAIT).  What the old
 * generation's workers spend after that write (until WINCH stops them)
 * is not carried over.
 */


#include "ngx_ratelimit_state.h"
#include "ngx_ratelimit_file.h"
#include "ngx_ratelimit_log.h"
#include "ratelimit_state.h"


/* worker 0's timer, and the buckets copied under one hold of the lock */
#define NGX_RATELIMIT_STATE_TICK     250
#define NGX_RATELIMIT_STATE_BUCKETS  1024
/* a new master's wait for the old generation's file, and its polls */
#define NGX_RATELIMIT_STATE_WAIT     3000
#define NGX_RATELIMIT_STATE_POLL     20
/* a file written further ahead of the clock is said (a binary upgrade's
   hand-over may be a few ms ahead: two processes' cached clocks) */
#define NGX_RATELIMIT_STATE_AHEAD_MS 1000


static void ngx_ratelimit_state_tick(ngx_event_t *ev);
static ngx_int_t ngx_ratelimit_state_write(
    ngx_ratelimit_zone_t *zone, ngx_log_t *log, ngx_uint_t lock);
static void ngx_ratelimit_state_report(ngx_ratelimit_zone_t *zone,
    rl_state_report_t *rep, int64_t now, ngx_log_t *log);
static rl_state_rule_t *ngx_ratelimit_state_rules(
    ngx_ratelimit_zone_t *zone, ngx_log_t *log);
static void ngx_ratelimit_state_wait(ngx_ratelimit_zone_t *zone,
    ngx_log_t *log);
static ngx_uint_t ngx_ratelimit_state_written_since(ngx_file_info_t *fi,
    ngx_file_info_t *renamed);
static ngx_uint_t ngx_ratelimit_state_handed_over(void);


/* state=FILE, state_interval=TIME of ratelimit_zone */

ngx_int_t
ngx_ratelimit_state_param(ngx_conf_t *cf, ngx_str_t *value,
    ngx_str_t *zone, ngx_str_t *file, ngx_msec_t *interval)
{
    ngx_str_t   s;
    ngx_msec_t  ms;

    if (value->len > 6 && ngx_strncmp(value->data, "state=", 6) == 0) {
        file->data = value->data + 6;
        file->len = value->len - 6;

        if (ngx_conf_full_name(cf->cycle, file, 0) != NGX_OK) {
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    if (value->len > 15
        && ngx_strncmp(value->data, "state_interval=", 15) == 0)
    {
        s.data = value->data + 15;
        s.len = value->len - 15;
        ms = ngx_parse_time(&s, 0);

        if (ms == (ngx_msec_t) NGX_ERROR || ms < 1000) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit_zone\" directive: invalid \"%V\" "
                               "of zone \"%V\": expected how often the state "
                               "file is written, a time of at least 1s",
                               value, zone);
            return NGX_ERROR;
        }

        *interval = ms;
        return NGX_OK;
    }

    return NGX_DECLINED;
}


/*
 * The zone's file read into its new table, in the master as the zone is
 * made (nobody else has it yet): what it restored and what it dropped
 * said, or why the file could not be read (the zone then starts empty).
 * Not at nginx -t.
 */

void
ngx_ratelimit_state_load(ngx_ratelimit_zone_t *zone,
    ngx_log_t *log)
{
    u_char                     *data;
    ssize_t                     n;
    int64_t                     now;
    rl_state_rule_t            *rules;
    rl_state_report_t           rep;
    ngx_ratelimit_file_read_t   rd;
    char                        why[RL_ERR_MAX];

    if (zone->state_file.len == 0 || ngx_test_config) {
        return;
    }

    if (ngx_inherited) {
        ngx_ratelimit_state_wait(zone, log);
    }

    /* the time of now, not of this master's start: a binary upgrade's
       master has waited for the old generation's file since */

    ngx_time_update();

    /* a file much larger than any the zone writes is not read */

    rd.zone = &zone->name;
    rd.what = "state file";
    rd.name = &zone->state_file;
    rd.max = (off_t) (4 * zone->size + RL_STATE_CHUNK_MIN);
    rd.bound = "for the zone";
    rd.instead = "the zone starts empty";

    data = ngx_ratelimit_file_read(&rd, &n, log);
    if (data == NULL) {
        return;
    }

    rules = ngx_ratelimit_state_rules(zone, log);
    if (rules == NULL) {
        ngx_free(data);
        return;
    }

    now = ngx_ratelimit_now();

    if (rl_state_restore(zone->table, data, n, rules, zone->rules.nelts, now,
                         &rep, why, sizeof(why))
        != RL_OK)
    {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "ratelimit_zone \"%V\": state file \"%V\" not read, %s: "
                      "the zone starts empty",
                      &zone->name, &zone->state_file, why);

    } else {
        ngx_ratelimit_state_report(zone, &rep, now, log);
    }

    ngx_free(data);
    ngx_free(rules);
}


/* What a file restored, and what it dropped or bounded. */

static void
ngx_ratelimit_state_report(ngx_ratelimit_zone_t *zone,
    rl_state_report_t *rep, int64_t now, ngx_log_t *log)
{
    ngx_log_error(NGX_LOG_NOTICE, log, 0,
                  "ratelimit_zone \"%V\": state file \"%V\" of %L ms ago: "
                  "%uL keys restored, %uL back to full budget since, %uL "
                  "dropped (their block's size changed), %uL summary "
                  "cells restored, %uL dropped (another zone size)",
                  &zone->name, &zone->state_file,
                  ngx_max(now - rep->written, 0), rep->restored,
                  rep->expired, rep->no_block, rep->cells, rep->cells_dropped);

    if (rep->ahead > NGX_RATELIMIT_STATE_AHEAD_MS) {
        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "ratelimit_zone \"%V\": state file \"%V\" was written "
                      "%L ms ahead of this clock (stepped back since?): its "
                      "times are read %L ms earlier",
                      &zone->name, &zone->state_file, rep->ahead, rep->ahead);
    }

    if (rep->bounded) {
        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "ratelimit_zone \"%V\": state file \"%V\": %uL keys "
                      "owed more than the zone's rules can make a key owe "
                      "now: each owes the longest of them",
                      &zone->name, &zone->state_file, rep->bounded);
    }

    if (rep->rules_gone) {
        ngx_log_error(NGX_LOG_NOTICE, log, 0,
                      "ratelimit_zone \"%V\": state file \"%V\": %uD of its "
                      "%uD rules are not configured now (%s): no request "
                      "meets their keys again",
                      &zone->name, &zone->state_file, rep->rules_gone,
                      rep->rules, rep->gone);
    }
}


/*
 * A new master of a binary upgrade: the old generation writes its file
 * when it sees its pid file renamed (.oldbin), which happened before this
 * binary started; the file read once it is written since that rename
 * (which a loaded machine may have done before this master looks), or
 * after NGX_RATELIMIT_STATE_WAIT as it is.  Without the renamed pid
 * file to tell when, a file replaced during the wait is the one.
 */

static void
ngx_ratelimit_state_wait(ngx_ratelimit_zone_t *zone,
    ngx_log_t *log)
{
    ino_t             was;
    ngx_uint_t        waited, since;
    ngx_file_info_t   fi, renamed;
    ngx_core_conf_t  *ccf;

    ccf = (ngx_core_conf_t *) ngx_get_conf(zone->cycle->conf_ctx,
                                           ngx_core_module);

    since = ccf->oldpid.len
            && ngx_file_info(ccf->oldpid.data, &renamed) != NGX_FILE_ERROR;

    was = ngx_file_info(zone->state_file.data, &fi) == NGX_FILE_ERROR
          ? 0 : ngx_file_uniq(&fi);

    for (waited = 0; waited < NGX_RATELIMIT_STATE_WAIT;
         waited += NGX_RATELIMIT_STATE_POLL)
    {
        if (ngx_file_info(zone->state_file.data, &fi) != NGX_FILE_ERROR
            && (since ? ngx_ratelimit_state_written_since(&fi, &renamed)
                      : ngx_file_uniq(&fi) != was))
        {
            ngx_log_error(NGX_LOG_NOTICE, log, 0,
                          "ratelimit_zone \"%V\": the old generation wrote "
                          "state file \"%V\" in %ui ms",
                          &zone->name, &zone->state_file, waited);
            return;
        }

        ngx_msleep(NGX_RATELIMIT_STATE_POLL);
    }

    ngx_log_error(NGX_LOG_WARN, log, 0,
                  "ratelimit_zone \"%V\": a binary upgrade, and the old "
                  "generation did not write state file \"%V\" within %ui ms: "
                  "its last one is read",
                  &zone->name, &zone->state_file,
                  (ngx_uint_t) NGX_RATELIMIT_STATE_WAIT);
}


/* Whether a file was last written at or after another was renamed (the
   rename changed its inode), to the nanosecond the system keeps. */

static ngx_uint_t
ngx_ratelimit_state_written_since(ngx_file_info_t *fi,
    ngx_file_info_t *renamed)
{
    return fi->st_mtim.tv_sec > renamed->st_ctim.tv_sec
           || (fi->st_mtim.tv_sec == renamed->st_ctim.tv_sec
               && fi->st_mtim.tv_nsec >= renamed->st_ctim.tv_nsec);
}


/* A worker's start: worker 0's timer. */

ngx_int_t
ngx_ratelimit_state_start(ngx_ratelimit_zone_t *zone,
    ngx_cycle_t *cycle)
{
    if (zone->state_file.len == 0 || ngx_worker != 0) {
        return NGX_OK;
    }

    zone->state_event.handler = ngx_ratelimit_state_tick;
    zone->state_event.data = zone;
    zone->state_event.log = cycle->log;
    zone->state_event.cancelable = 1;
    zone->state_written = ngx_current_msec;

    ngx_add_timer(&zone->state_event, NGX_RATELIMIT_STATE_TICK);

    return NGX_OK;
}


/*
 * Worker 0's tick: the file written when the interval has passed, or at
 * once when its master's pid file becomes .oldbin (a binary upgrade
 * begins), and then no more while it is so.
 */

static void
ngx_ratelimit_state_tick(ngx_event_t *ev)
{
    ngx_uint_t             handed;
    ngx_ratelimit_zone_t  *zone = ev->data;

    handed = ngx_ratelimit_state_handed_over();

    if ((handed && !zone->state_upgrade)
        || (!handed
            && ngx_current_msec - zone->state_written >= zone->state_interval))
    {
        zone->state_written = ngx_current_msec;
        (void) ngx_ratelimit_state_write(zone, ev->log, 1);
    }

    zone->state_upgrade = handed;

    if (!ngx_exiting && !ngx_terminate && !ngx_quit) {
        ngx_add_timer(ev, NGX_RATELIMIT_STATE_TICK);
    }
}


/* Whether this worker's master is the old one of a binary upgrade: the
   pid file's .oldbin names it. */

static ngx_uint_t
ngx_ratelimit_state_handed_over(void)
{
    u_char            buf[NGX_INT64_LEN + 2];
    ssize_t           n;
    ngx_fd_t          fd;
    ngx_err_t         err;
    const char       *why;
    ngx_file_info_t   fi;
    ngx_core_conf_t  *ccf;

    ccf = (ngx_core_conf_t *) ngx_get_conf(ngx_cycle->conf_ctx,
                                           ngx_core_module);

    if (ccf->oldpid.len == 0) {
        return 0;
    }

    /* a regular file only: a FIFO put there would hold this worker */

    fd = ngx_ratelimit_file_open(ccf->oldpid.data, 1, &fi, &err, &why);
    if (fd == NGX_INVALID_FILE) {
        return 0;
    }

    n = ngx_read_fd(fd, buf, sizeof(buf));
    (void) ngx_close_file(fd);

    while (n > 0 && (buf[n - 1] == LF || buf[n - 1] == CR)) {
        n--;
    }

    return n > 0 && ngx_atoi(buf, n) == (ngx_int_t) getppid();
}


/*
 * The master's exit, after its workers: the last file (but for the old
 * master of a binary upgrade, whose file the new generation writes now).
 * No worker is left to take the zone's lock; an operation one left half
 * done as it died is undone first, as by any holder of the lock.
 */

void
ngx_ratelimit_state_save(ngx_ratelimit_zone_t *zone, ngx_log_t *log)
{
    /* the old master of a binary upgrade: the new generation's file */

    if (zone->state_file.len && zone->table && ngx_new_binary == 0) {
        (void) ngx_ratelimit_state_write(zone, log, 0);
    }
}


/* The file written: copied a chunk at a time, to a temporary file renamed
   over the state file. */

static ngx_int_t
ngx_ratelimit_state_write(ngx_ratelimit_zone_t *zone,
    ngx_log_t *log, ngx_uint_t lock)
{
    int                    more;
    u_char                *buf;
    size_t                 len;
    ngx_int_t              rc;
    ngx_msec_t             start;
    rl_state_rule_t       *rules;
    rl_state_write_t       w;
    ngx_ratelimit_file_t   f;

    start = ngx_current_msec;
    f.tmp = NULL;
    f.fd = NGX_INVALID_FILE;
    f.err = NGX_ENOMEM;

    buf = ngx_alloc(RL_STATE_CHUNK_MIN, log);
    rules = ngx_ratelimit_state_rules(zone, log);

    rc = buf && rules ? ngx_ratelimit_file_create(&f, &zone->state_file,
                                                  0600, log)
                      : NGX_ERROR;

    if (rc == NGX_OK) {
        rl_state_write_begin(&w, rules, zone->rules.nelts,
                             ngx_ratelimit_now());

        do {
            if (lock) {
                ngx_shmtx_lock(&zone->shpool->mutex);
            }

            more = rl_state_write_next(&w, zone->table, buf,
                                       RL_STATE_CHUNK_MIN,
                                       NGX_RATELIMIT_STATE_BUCKETS,
                                       &len);

            if (lock) {
                ngx_shmtx_unlock(&zone->shpool->mutex);
            }

            rc = ngx_ratelimit_file_write(&f, buf, len);

        } while (more && rc == NGX_OK);
    }

    if (rc == NGX_OK) {
        rc = ngx_ratelimit_file_close(&f);
    }

    if (rc == NGX_OK) {
        rc = ngx_ratelimit_file_rename(&f, &zone->state_file);
    }

    if (rc == NGX_OK) {
        ngx_time_update();

        ngx_log_error(NGX_LOG_INFO, log, 0,
                      "ratelimit_zone \"%V\": %uL keys written to state file "
                      "\"%V\" in %M ms",
                      &zone->name, w.keys, &zone->state_file,
                      ngx_current_msec - start);
    }

    ngx_ratelimit_log_written(log, &zone->state_failing, rc, f.err,
                              "ratelimit_zone \"%V\": state file \"%V\"",
                              &zone->name, &zone->state_file);

    ngx_ratelimit_file_discard(&f);

    if (buf) {
        ngx_free(buf);
    }

    if (rules) {
        ngx_free(rules);
    }

    return rc;
}


/* The zone's rules as the file names them. */

static rl_state_rule_t *
ngx_ratelimit_state_rules(ngx_ratelimit_zone_t *zone,
    ngx_log_t *log)
{
    ngx_uint_t              i;
    rl_state_rule_t        *out;
    ngx_ratelimit_rule_t  **rules;

    out = ngx_calloc((zone->rules.nelts + 1) * sizeof(rl_state_rule_t), log);
    if (out == NULL) {
        return NULL;
    }

    rules = zone->rules.elts;

    for (i = 0; i < zone->rules.nelts; i++) {
        out[i].identity = rules[i]->identity;
        out[i].algorithm = rules[i]->rule.algorithm;
        out[i].rule = &rules[i]->rule;
        ngx_memcpy(out[i].name, rules[i]->name.data, rules[i]->name.len);
    }

    return out;
}
