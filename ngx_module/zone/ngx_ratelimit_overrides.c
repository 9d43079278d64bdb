
/*
 * ngx-ratelimit: a zone's overrides (ratelimit_zone overrides=N
 * overrides_file=PATH): the store beside the zone's table (the core's:
 * ratelimit_override.h), the file that keeps it across restarts and binary
 * upgrades, read when the zone is new, written after each change, and the
 * removal of expired overrides.
 *
 * The file is written off the request path: by a worker's timer after a
 * change (the worker that made it, at once; worker 0 every second for the
 * rest, expiries included), to a temporary file renamed over the old one,
 * under the zone's lock only for the rename, and only if no newer version
 * was renamed meanwhile.  A missing, truncated or corrupt file is said in
 * the error log, line by line, and the zone starts with what could be read.
 */


#include "ngx_ratelimit_overrides.h"
#include "ngx_ratelimit_file.h"
#include "ngx_ratelimit_log.h"
#include "ngx_ratelimit_sync.h"


#define NGX_RATELIMIT_OVERRIDES_TICK  1000
/* the lines of a file said one by one before the rest are counted */
#define NGX_RATELIMIT_OVERRIDES_SAID  5


/* A file's reading: the lines skipped, said or counted. */
typedef struct {
    ngx_uint_t   bad;       /* lines that do not read or break a rule */
    ngx_uint_t   full;      /* overrides with no room */
    ngx_uint_t   first_full; /* the first one's line */
} ngx_ratelimit_overrides_read_t;


static ngx_int_t ngx_ratelimit_overrides_line(ngx_log_t *log,
    ngx_ratelimit_zone_t *zone, rl_override_rule_t *rules, ngx_uint_t n,
    u_char *line, size_t len, ngx_uint_t number,
    ngx_ratelimit_overrides_read_t *rd);
static void ngx_ratelimit_overrides_tick(ngx_event_t *ev);
static ngx_int_t ngx_ratelimit_overrides_write(
    ngx_ratelimit_zone_t *zone, ngx_log_t *log);
static u_char *ngx_ratelimit_overrides_text(
    ngx_ratelimit_zone_t *zone, size_t *len, uint64_t *version);


/* overrides=N, overrides_file=PATH of ratelimit_zone */

ngx_int_t
ngx_ratelimit_overrides_param(ngx_conf_t *cf, ngx_str_t *value,
    ngx_str_t *zone, ngx_uint_t *n, ngx_str_t *file)
{
    ngx_int_t  v;

    if (value->len > 10 && ngx_strncmp(value->data, "overrides=", 10) == 0) {
        v = ngx_atoi(value->data + 10, value->len - 10);

        if (v == NGX_ERROR || v > RL_OVERRIDES_MAX) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit_zone\" directive: invalid \"%V\" "
                               "of zone \"%V\": expected the number of "
                               "overrides the zone has room for, from 0 (none) "
                               "to %d", value, zone, RL_OVERRIDES_MAX);
            return NGX_ERROR;
        }

        *n = v;
        return NGX_OK;
    }

    if (value->len > 15
        && ngx_strncmp(value->data, "overrides_file=", 15) == 0)
    {
        file->data = value->data + 15;
        file->len = value->len - 15;

        if (ngx_conf_full_name(cf->cycle, file, 0) != NGX_OK) {
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    return NGX_DECLINED;
}


/* The bytes of a zone's store, after its table. */

size_t
ngx_ratelimit_overrides_bytes(ngx_ratelimit_zone_t *zone)
{
    return zone->overrides ? ngx_align(rl_overrides_size(zone->overrides), 64)
                           : 0;
}


/*
 * A zone's rules as the core's carry-over and its checks need them: a name
 * once (the rules of a name share a state), the first rule of each name,
 * sorted by name (zone->names, made with the configuration), with its key
 * expression, in memory of the caller's.
 */

rl_override_rule_t *
ngx_ratelimit_overrides_rules(ngx_ratelimit_zone_t *zone,
    rl_override_rule_t *out, ngx_uint_t *n)
{
    ngx_uint_t  i;

    for (i = 0; i < zone->nnames; i++) {
        out[i].rule = &zone->names[i]->rule;
        out[i].identity = zone->names[i]->identity;
        out[i].key = (char *) zone->names[i]->key.data;
        out[i].key_len = zone->names[i]->key.len;
    }

    *n = zone->nnames;

    return out;
}


/*
 * The store laid out after the zone's table, or kept (a reload); a new one
 * filled from the zone's file.  In the master, as the zone is made: nobody
 * else has it yet, and a kept one is left as it is (its rules' identities
 * are worked out again by each worker, ngx_ratelimit_overrides_start).
 */

void
ngx_ratelimit_overrides_attach(ngx_ratelimit_zone_t *zone,
    u_char *mem, ngx_log_t *log)
{
    if (zone->overrides == 0) {
        return;
    }

    zone->store = mem;

    if (rl_overrides_attach(zone->table, mem, zone->overrides) == 0
        && zone->overrides_file.len)
    {
        ngx_ratelimit_overrides_load(zone, log);
    }

    if (zone->redis != NULL) {
        rl_overrides_remote(zone->table);   /* a copy of Redis's */
    }
}


/*
 * The zone's file read into its new store, a line at a time: a line that
 * cannot be read, or that the key API would not take (a rule the zone no
 * longer has, its bounds broken, an expiry beyond 366 days), is said (file
 * and line: the first few, then counted) and skipped; the overrides that
 * find no room are counted, in one line.
 */

void
ngx_ratelimit_overrides_load(ngx_ratelimit_zone_t *zone,
    ngx_log_t *log)
{
    u_char                     *text, *p, *last, *nl;
    ssize_t                     n;
    ngx_uint_t                  line, nrules, loaded;
    rl_override_rule_t         *rules;
    ngx_ratelimit_file_read_t   file;
    u_char                      bound[sizeof("for overrides=") + NGX_INT_T_LEN];

    ngx_ratelimit_overrides_read_t  rd;

    /* a file much larger than the zone's overrides' lines is not read */

    ngx_sprintf(bound, "for overrides=%ui%Z", zone->overrides);

    file.zone = &zone->name;
    file.what = "overrides_file";
    file.name = &zone->overrides_file;
    file.max = (off_t) (4 * zone->overrides * RL_OVERRIDE_LINE_MAX + 65536);
    file.bound = (const char *) bound;
    file.instead = "the zone starts with no overrides";

    text = ngx_ratelimit_file_read(&file, &n, log);
    if (text == NULL) {
        return;
    }

    rules = ngx_alloc((zone->nnames + 1) * sizeof(rl_override_rule_t), log);
    if (rules == NULL) {
        ngx_free(text);
        return;
    }

    (void) ngx_ratelimit_overrides_rules(zone, rules, &nrules);

    loaded = 0;
    last = text + n;
    ngx_memzero(&rd, sizeof(ngx_ratelimit_overrides_read_t));

    for (p = text, line = 1; p < last; p = nl + 1, line++) {
        nl = ngx_strlchr(p, last, '\n');

        if (nl == NULL) {
            ngx_log_error(NGX_LOG_ERR, log, 0,
                          "ratelimit_zone \"%V\": overrides_file \"%V\" line "
                          "%ui: truncated (no end of line): skipped",
                          &zone->name, &zone->overrides_file, line);
            break;
        }

        loaded += ngx_ratelimit_overrides_line(log, zone, rules, nrules,
                                               p, nl - p, line, &rd)
                  == NGX_OK;
    }

    if (rd.bad > NGX_RATELIMIT_OVERRIDES_SAID) {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "ratelimit_zone \"%V\": overrides_file \"%V\": %ui more "
                      "lines skipped, not said (%ui in all)", &zone->name,
                      &zone->overrides_file,
                      rd.bad - NGX_RATELIMIT_OVERRIDES_SAID, rd.bad);
    }

    if (rd.full) {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "ratelimit_zone \"%V\": overrides_file \"%V\": %ui "
                      "overrides skipped, from line %ui on: no room "
                      "(overrides=%ui)", &zone->name, &zone->overrides_file,
                      rd.full, rd.first_full, zone->overrides);
    }

    ngx_log_error(NGX_LOG_NOTICE, log, 0,
                  "ratelimit_zone \"%V\": %ui overrides read from \"%V\"",
                  &zone->name, loaded, &zone->overrides_file);

    ngx_free(text);
    ngx_free(rules);
}


static ngx_int_t
ngx_ratelimit_overrides_line(ngx_log_t *log,
    ngx_ratelimit_zone_t *zone, rl_override_rule_t *rules, ngx_uint_t n,
    u_char *line, size_t len, ngx_uint_t number,
    ngx_ratelimit_overrides_read_t *rd)
{
    int                        rc;
    int64_t                    now;
    rl_override_t              ov;
    const rl_override_rule_t  *rule;
    char                       err[RL_ERR_MAX];

    rc = rl_overrides_file_read((char *) line, len, &ov, err, sizeof(err));

    if (rc == RL_DECLINED) {
        return NGX_DECLINED;
    }

    now = ngx_ratelimit_now();

    /* the key API's checks, in the core (one place for the API, the file
       and Redis's hash) */

    if (rc == RL_OK) {
        rc = rl_override_admit(&ov, rules, n, 0, now, &rule, err,
                               sizeof(err));
    }

    if (rc == RL_ERROR) {
        if (rd->bad++ < NGX_RATELIMIT_OVERRIDES_SAID) {
            ngx_log_error(NGX_LOG_ERR, log, 0,
                          "ratelimit_zone \"%V\": overrides_file \"%V\" line "
                          "%ui: %s: skipped", &zone->name,
                          &zone->overrides_file, number, err);
        }

        return NGX_ERROR;
    }

    if (rc == RL_DECLINED) {
        return NGX_DECLINED;   /* expired while nginx was down */
    }

    if (rl_override_put(zone->table, &ov, rule, now) != RL_OVERRIDE_OK) {
        rd->first_full = rd->full++ ? rd->first_full : number;
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * A worker's start: the store's tags worked out again for the rules this
 * configuration has (a reload may have changed a rule's algorithm, which
 * makes its identity), and the timer.  A local zone's ticks only while
 * there is something to do (an override to expire, the file to write):
 * worker 0 from the start when the store holds overrides, a worker that
 * changes one from then on; a store that holds none costs no tick.
 */

ngx_int_t
ngx_ratelimit_overrides_start(ngx_ratelimit_zone_t *zone,
    ngx_cycle_t *cycle)
{
    ngx_uint_t             n;
    rl_override_rule_t    *rules;
    rl_overrides_stats_t   st;

    if (zone->store == NULL) {
        return NGX_OK;
    }

    rules = ngx_palloc(cycle->pool,
                       (zone->nnames + 1) * sizeof(rl_override_rule_t));
    if (rules == NULL) {
        return NGX_ERROR;
    }

    zone->override_rules = ngx_ratelimit_overrides_rules(zone, rules,
                                                         &n);
    zone->override_nrules = n;

    ngx_shmtx_lock(&zone->shpool->mutex);
    rl_overrides_retag(zone->table, rules, n);
    rl_overrides_stats(zone->store, &st);
    ngx_shmtx_unlock(&zone->shpool->mutex);

    zone->overrides_event.handler = ngx_ratelimit_overrides_tick;
    zone->overrides_event.data = zone;
    zone->overrides_event.log = cycle->log;
    zone->overrides_event.cancelable = 1;

    zone->overrides_redis = zone->redis ? zone->redis
                            : zone->sync ? zone->sync->redis : NULL;

    if (zone->overrides_redis) {
        /* every worker takes Redis's overrides when it starts; worker 0 then
           asks for their version every NGX_RATELIMIT_OVERRIDES_POLL */
        ngx_add_timer(&zone->overrides_event, 1);

    } else if (ngx_worker == 0 && st.held > 0) {
        ngx_add_timer(&zone->overrides_event,
                      NGX_RATELIMIT_OVERRIDES_TICK);
    }

    return NGX_OK;
}


/*
 * A change made in this worker: the file written at once, and the ticks
 * started (its expiry kept).
 */

void
ngx_ratelimit_overrides_changed(ngx_ratelimit_zone_t *zone)
{
    if (zone->overrides_redis == NULL && zone->overrides_event.handler) {
        if (zone->overrides_event.timer_set) {
            ngx_del_timer(&zone->overrides_event);
        }

        ngx_add_timer(&zone->overrides_event, 1);
    }
}


static void
ngx_ratelimit_overrides_tick(ngx_event_t *ev)
{
    int64_t                now, expiry;
    rl_overrides_stats_t   st;
    ngx_ratelimit_zone_t  *zone = ev->data;

    now = ngx_ratelimit_now();

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (zone->overrides_redis) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        ngx_ratelimit_overrides_poll(zone, now);

        if (ngx_worker == 0 && !ngx_exiting && !ngx_terminate && !ngx_quit) {
            ngx_add_timer(ev, NGX_RATELIMIT_OVERRIDES_POLL);
        }

        return;
    }

    expiry = rl_overrides_next_expiry(zone->table, zone->overrides_checked);

    if (expiry != 0 && expiry <= now) {
        (void) rl_overrides_expire(zone->table, zone->override_rules,
                                   zone->override_nrules, now);
    }

    zone->overrides_checked = now;   /* every one expired by now is gone */

    expiry = rl_overrides_next_expiry(zone->table, now);

    rl_overrides_stats(zone->store, &st);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (zone->overrides_file.len && st.written < st.version
        && ngx_ratelimit_overrides_write(zone, ev->log) != NGX_OK)
    {
        /* said; tried again at the next tick */
        expiry = now;
    }

    /* again while an override is to expire (or the file to write) */

    if (expiry != 0 && !ngx_exiting && !ngx_terminate && !ngx_quit) {
        ngx_add_timer(ev, NGX_RATELIMIT_OVERRIDES_TICK);
    }
}


/*
 * The file written: the overrides copied under the lock, written to a
 * temporary file beside it (ngx_ratelimit_file.c), and renamed over
 * it, unless a newer version was renamed meanwhile.  A failure is said
 * once while it repeats (it is tried again every second), and its end.
 */

static ngx_int_t
ngx_ratelimit_overrides_write(ngx_ratelimit_zone_t *zone,
    ngx_log_t *log)
{
    u_char                *text;
    size_t                 len;
    uint64_t               version;
    ngx_int_t              rc;
    rl_overrides_stats_t   st;
    ngx_ratelimit_file_t   f;

    text = ngx_ratelimit_overrides_text(zone, &len, &version);
    if (text == NULL) {
        return NGX_ERROR;
    }

    rc = ngx_ratelimit_file_create(&f, &zone->overrides_file,
                                   NGX_FILE_DEFAULT_ACCESS, log);

    if (rc == NGX_OK) {
        rc = ngx_ratelimit_file_write(&f, text, len);
    }

    if (rc == NGX_OK) {
        rc = ngx_ratelimit_file_close(&f);
    }

    if (rc == NGX_OK) {
        ngx_shmtx_lock(&zone->shpool->mutex);

        rl_overrides_stats(zone->store, &st);

        if (version > st.written) {
            rc = ngx_ratelimit_file_rename(&f, &zone->overrides_file);

            if (rc == NGX_OK) {
                rl_overrides_written(zone->store, version);
            }
        }

        ngx_shmtx_unlock(&zone->shpool->mutex);
    }

    ngx_ratelimit_log_written(log, &zone->overrides_failing, rc, f.err,
                              "ratelimit_zone \"%V\": overrides_file "
                              "\"%V\"", &zone->name,
                              &zone->overrides_file);

    /* a version older than the file's is not renamed: removed */

    ngx_ratelimit_file_discard(&f);
    ngx_free(text);

    return rc;
}


/* The file's text, of the store's overrides at one version, copied under
   the lock. */

static u_char *
ngx_ratelimit_overrides_text(ngx_ratelimit_zone_t *zone,
    size_t *len, uint64_t *version)
{
    u_char                *text, *p;
    size_t                 i, n, total;
    rl_override_t         *list;
    rl_overrides_stats_t   st;

    list = ngx_alloc(zone->overrides * sizeof(rl_override_t),
                     ngx_cycle->log);
    if (list == NULL) {
        return NULL;
    }

    ngx_shmtx_lock(&zone->shpool->mutex);

    /* expired ones too: a limit override's key is carried back when it is
       removed, which the next start does then */

    n = rl_override_list(zone->table, NULL, 0, INT64_MIN, list,
                         zone->overrides, &total);
    rl_overrides_stats(zone->store, &st);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    text = ngx_alloc(sizeof(RL_OVERRIDES_FILE_HEADER)
                     + n * RL_OVERRIDE_LINE_MAX, ngx_cycle->log);
    if (text == NULL) {
        ngx_free(list);
        return NULL;
    }

    p = ngx_cpymem(text, RL_OVERRIDES_FILE_HEADER,
                   sizeof(RL_OVERRIDES_FILE_HEADER) - 1);

    for (i = 0; i < n; i++) {
        p += rl_overrides_file_line(&list[i], (char *) p);
    }

    ngx_free(list);

    *len = p - text;
    *version = st.version;

    return text;
}
