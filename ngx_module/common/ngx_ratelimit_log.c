
/*
 * ngx-ratelimit: log lines of rejections, delays and bad values, whatever
 * the protocol: which are written and which folded, and their text.
 *
 * Keys are often secrets (API keys, session cookies): a line names the key
 * by its fingerprint, the key's hash under the zone's secret (the same as
 * $ratelimit_fingerprint), unless the rule says log_key=on; then the key is
 * escaped and cut, since the client chose it.  Repeats are folded so that a
 * flood cannot fill the disk.  A protocol's module writes a line in the log
 * of its request or session (http/ngx_http_ratelimit_log.c), and the
 * folding state is its configuration's (ngx_ratelimit_conf_t, reached from
 * a rule's zone).
 */


#include "ngx_ratelimit_log.h"


static u_char *ngx_ratelimit_log_key(u_char *p, u_char *last,
    ngx_ratelimit_rule_t *rule, rl_check_t *check);
static void ngx_ratelimit_log_fold(ngx_ratelimit_rule_t *rule,
    ngx_uint_t kind);
static void ngx_ratelimit_log_folded(ngx_event_t *ev);
static ngx_ratelimit_rule_log_t *ngx_ratelimit_rule_log(
    ngx_ratelimit_rule_t *rule);


/* A failure that repeats: how often its count is said while it lasts. */
#define NGX_RATELIMIT_REPEAT_SAY      (3600 * 1000)

/* What ngx_ratelimit_rule_log_t's folded[] counts. */
#define NGX_RATELIMIT_FOLD_REJECTED   0
#define NGX_RATELIMIT_FOLD_DELAYED    1
#define NGX_RATELIMIT_FOLD_BAD        2


/* $ratelimit_status's words, by enum rl_status, in every protocol */

ngx_str_t  ngx_ratelimit_status_names[] = {
    ngx_null_string,
    ngx_string("PASSED"),
    ngx_string("DELAYED"),
    ngx_string("REJECTED"),
    ngx_string("DELAYED_DRY_RUN"),
    ngx_string("REJECTED_DRY_RUN"),
    ngx_string("EXEMPT"),
    ngx_string("REJECTED_IN_FLIGHT")
};


/*
 * The line of a decided request or session, in log at its level (0: off):
 * its refusal ("would reject" in a dry run); its delay, or its wait for a
 * slot (the first time: waited 0), one level lower; nothing for one that
 * passed.  Written or folded (ngx_ratelimit_log_line).
 */

void
ngx_ratelimit_log_verdict(ngx_log_t *log, ngx_uint_t level, rl_request_t *rq,
    ngx_uint_t waited)
{
    const char  *what;
    ngx_uint_t   lower;
    rl_check_t  *binding;

    binding = &rq->checks[rq->binding];

    /* one level below the location's: delays, waits */
    lower = level == NGX_LOG_INFO || level == 0 ? level : level + 1;

    switch (rq->verdict) {

    case RL_VERDICT_REJECTED:
        what = rq->dry_run ? "would reject (dry run)" : "rejected";
        break;

    case RL_VERDICT_DELAYED:
        what = rq->dry_run ? "would delay (dry run)" : "delaying";
        level = lower;
        break;

    case RL_VERDICT_QUEUED:
        if (waited) {
            return;
        }

        what = "waiting for a slot";
        level = lower;
        break;

    default:
        return;
    }

    if (level == 0 || log->log_level < level
        || !ngx_ratelimit_log_line(ngx_ratelimit_rule_of(binding), binding,
                                   level))
    {
        return;
    }

    ngx_ratelimit_log_check(log, level, what, binding);
}


/*
 * The line of a check that refused or delayed its request ("rejected",
 * "delaying", ...: what), in log at level, once ngx_ratelimit_log_line()
 * said it is written.
 */

void
ngx_ratelimit_log_check(ngx_log_t *log, ngx_uint_t level, const char *what,
    rl_check_t *check)
{
    u_char                *p;
    u_char                 key[NGX_RATELIMIT_KEY_LOG_MAX * 4 + 32];
    ngx_ratelimit_rule_t  *rule;

    rule = ngx_ratelimit_rule_of(check);
    p = ngx_ratelimit_log_key(key, key + sizeof(key), rule, check);

    if (check->decision.allowed) {
        ngx_log_error(level, log, 0,
                      "ratelimit: %s by rule \"%V\" in zone \"%V\", key %*s, "
                      "cost %uL, for %L ms", what, &rule->name,
                      &ngx_ratelimit_zone_of(rule)->name,
                      (size_t) (p - key), key,
                      check->cost, check->decision.delay_ms);
        return;
    }

    /* a rule with priority classes: the request's class, and why its
       class had no slot (rl_shed_name) */

    if (check->rule->classes != NULL) {
        ngx_log_error(level, log, 0,
                      "ratelimit: %s by rule \"%V\" in zone \"%V\", key %*s, "
                      "class %s%s%s", what, &rule->name,
                      &ngx_ratelimit_zone_of(rule)->name,
                      (size_t) (p - key), key,
                      rl_class_name(check->rule, check->klass),
                      check->shed ? ", reason " : "",
                      rl_shed_name(check->shed));
        return;
    }

    ngx_log_error(level, log, 0,
                  "ratelimit: %s by rule \"%V\" in zone \"%V\", key %*s, "
                  "cost %uL%s, retry after %L ms", what, &rule->name,
                  &ngx_ratelimit_zone_of(rule)->name,
                  (size_t) (p - key), key,
                  check->cost,
                  check->decision.never ? " (more than the rule ever admits)"
                                        : "",
                  check->decision.retry_after_ms);
}


/* "fingerprint 0123456789abcdef", or with log_key=on "the key", escaped. */

static u_char *
ngx_ratelimit_log_key(u_char *p, u_char *last,
    ngx_ratelimit_rule_t *rule, rl_check_t *check)
{
    if (!rule->rule.log_key) {
        return ngx_snprintf(p, last - p, "fingerprint %016xL", check->tag);
    }

    *p++ = '"';
    p = ngx_ratelimit_escape_key(p, check->key, check->key_len);
    *p++ = '"';

    return p;
}


/*
 * A key (or any string) a client chose, made safe to show (rl_escape): at
 * most NGX_RATELIMIT_KEY_LOG_MAX bytes of it, escaped, then "..." (at
 * most NGX_RATELIMIT_KEY_ESCAPED bytes written).
 */

u_char *
ngx_ratelimit_escape_key(u_char *p, const u_char *data, size_t len)
{
    return p + rl_escape((char *) p, data, len,
                         NGX_RATELIMIT_KEY_LOG_MAX);
}


/*
 * A rule's log state in this worker, made the first time the rule logs
 * (from the cycle's pool: it lasts as long as the rule); NULL without
 * memory, and the line is then written, not folded.
 */

static ngx_ratelimit_rule_log_t *
ngx_ratelimit_rule_log(ngx_ratelimit_rule_t *rule)
{
    ngx_ratelimit_conf_t  *conf;

    if (rule->log == NULL) {
        rule->log = ngx_pcalloc(ngx_cycle->pool,
                                sizeof(ngx_ratelimit_rule_log_t));
        if (rule->log == NULL) {
            return NULL;
        }

        conf = ngx_ratelimit_zone_of(rule)->conf;
        rule->log->rule = rule;
        rule->log->next = conf->logged;
        conf->logged = rule->log;
    }

    return rule->log;
}


/*
 * Whether a rejection or a delay gets its own line: at most one a second
 * (or a retry time, when shorter) for a rule and key, and a few a second
 * for a rule in a worker.  What is not written is counted, and a timer
 * writes the counts once a second.  The keys are remembered in a fixed
 * table: a key pushed out of it by another only gets its line again.
 */

ngx_uint_t
ngx_ratelimit_log_line(ngx_ratelimit_rule_t *rule, rl_check_t *check,
    ngx_uint_t level)
{
    int64_t                    wait;
    ngx_msec_t                 now;
    ngx_uint_t                 delayed;
    ngx_ratelimit_fold_t      *f;
    ngx_ratelimit_rule_log_t  *lg;

    now = ngx_current_msec;
    delayed = check->decision.allowed;
    wait = delayed ? check->decision.delay_ms
                   : check->decision.retry_after_ms;
    wait = ngx_max(ngx_min(wait, 1000), 1);

    f = &ngx_ratelimit_zone_of(rule)->conf->fold[(check->tag
                                                  ^ (uintptr_t) rule)
                                                 % NGX_RATELIMIT_FOLD_KEYS];

    if (f->rule == rule && f->tag == check->tag
        && (ngx_msec_int_t) (now - f->at) < wait)
    {
        goto fold;
    }

    lg = ngx_ratelimit_rule_log(rule);
    if (lg == NULL) {
        return 1;   /* no memory to count it: written */
    }

    if ((ngx_msec_int_t) (now - lg->log_second) >= 1000) {
        lg->log_second = now;
        lg->log_lines = 0;
    }

    if (lg->log_lines == NGX_RATELIMIT_FOLD_LINES) {
        goto fold;
    }

    lg->log_lines++;
    f->rule = rule;
    f->tag = check->tag;
    f->at = now;

    return 1;

fold:

    lg = ngx_ratelimit_rule_log(rule);
    if (lg == NULL) {
        return 1;
    }

    lg->log_level = level;
    ngx_ratelimit_log_fold(rule, delayed ? NGX_RATELIMIT_FOLD_DELAYED
                                         : NGX_RATELIMIT_FOLD_REJECTED);

    return 0;
}


/*
 * A request's value of a variable that is not valid for its rule (a cost,
 * limit or burst; the core's message says which, and what applies instead):
 * at warn, one line a second for a rule in a worker, the rest folded.  With
 * log NULL (a charge settled after its request ended), in the cycle's log.
 */

void
ngx_ratelimit_log_bad(ngx_log_t *log, ngx_ratelimit_rule_t *rule,
    const char *what)
{
    ngx_msec_t                 now;
    ngx_ratelimit_rule_log_t  *lg;

    now = ngx_current_msec;
    lg = ngx_ratelimit_rule_log(rule);

    if (lg != NULL && lg->bad_second != 0
        && (ngx_msec_int_t) (now - lg->bad_second) < 1000)
    {
        ngx_ratelimit_log_fold(rule, NGX_RATELIMIT_FOLD_BAD);
        return;
    }

    if (lg != NULL) {
        lg->bad_second = now;
    }

    ngx_log_error(NGX_LOG_WARN, log ? log : ngx_cycle->log, 0,
                  "ratelimit: rule \"%V\" in zone \"%V\": %s", &rule->name,
                  &ngx_ratelimit_zone_of(rule)->name, what);
}


static void
ngx_ratelimit_log_fold(ngx_ratelimit_rule_t *rule, ngx_uint_t kind)
{
    ngx_ratelimit_conf_t  *conf;

    conf = ngx_ratelimit_zone_of(rule)->conf;

    rule->log->folded[kind]++;   /* the callers made rule->log */

    if (!conf->fold_event.timer_set) {
        conf->fold_event.log = ngx_cycle->log;
        ngx_add_timer(&conf->fold_event, 1000);
    }
}


/*
 * Once a second while lines are being folded: what was not written, by
 * the rules that logged in this worker (a list of their log states: a
 * configuration may hold thousands of rules that never log).
 */

static void
ngx_ratelimit_log_folded(ngx_event_t *ev)
{
    ngx_uint_t                 k, level;
    ngx_ratelimit_rule_t      *rule;
    ngx_ratelimit_conf_t      *conf = ev->data;
    ngx_ratelimit_rule_log_t  *lg;

    static const char  *what[] = { "rejections", "delays",
                                   "requests with a bad value (see above)" };

    for (lg = conf->logged; lg != NULL; lg = lg->next) {
        rule = lg->rule;

        for (k = 0; k < 3; k++) {
            if (lg->folded[k] == 0) {
                continue;
            }

            level = (k == NGX_RATELIMIT_FOLD_BAD) ? NGX_LOG_WARN
                                                  : lg->log_level;

            ngx_log_error(level, ev->log, 0,
                          "ratelimit: %ui more %s by rule \"%V\" in zone "
                          "\"%V\" (repeats not logged one by one)",
                          lg->folded[k], what[k], &rule->name,
                          &ngx_ratelimit_zone_of(rule)->name);
            lg->folded[k] = 0;
        }
    }
}


/*
 * A write of a file that happens on a timer (a zone's state file, its
 * overrides file), said as it ends (rc): fmt and its arguments name the
 * file.  A failure is said at error the first time, then the same failure
 * (the same errno) is counted, not written, but for a line every
 * NGX_RATELIMIT_REPEAT_SAY that says how many: a directory that is
 * not writable fails at every interval for as long as it lasts.  Another
 * failure is said at once; the first write that succeeds after failures
 * is said at notice, with their count.
 */

void ngx_cdecl
ngx_ratelimit_log_written(ngx_log_t *log, ngx_ratelimit_repeat_t *rp,
    ngx_int_t rc, ngx_err_t err, const char *fmt, ...)
{
    u_char   *p, *last, line[NGX_MAX_ERROR_STR];
    va_list   args;

    if (rc == NGX_OK && rp->failures == 0) {
        return;
    }

    if (rc != NGX_OK && rp->failures++ != 0 && err == rp->err
        && ngx_current_msec - rp->said < NGX_RATELIMIT_REPEAT_SAY)
    {
        rp->folded++;
        return;
    }

    last = line + sizeof(line);

    va_start(args, fmt);
    p = ngx_vslprintf(line, last, fmt, args);
    va_end(args);

    if (rc == NGX_OK) {
        p = ngx_slprintf(p, last, " written again, after %ui writes that "
                         "failed", rp->failures);
        ngx_log_error(NGX_LOG_NOTICE, log, 0, "%*s", (size_t) (p - line),
                      line);
        rp->failures = 0;
        rp->folded = 0;
        return;
    }

    p = ngx_slprintf(p, last, " could not be written");

    if (rp->folded) {
        p = ngx_slprintf(p, last, " (after %ui more failures, repeats not "
                         "logged one by one)", rp->folded);
    }

    ngx_log_error(NGX_LOG_ERR, log, err, "%*s", (size_t) (p - line), line);

    rp->err = err;
    rp->said = ngx_current_msec;
    rp->folded = 0;
}


/* This worker's folding table and timer. */

ngx_int_t
ngx_ratelimit_log_init(ngx_conf_t *cf, ngx_ratelimit_conf_t *conf)
{
    conf->fold = ngx_pcalloc(cf->pool, NGX_RATELIMIT_FOLD_KEYS
                                       * sizeof(ngx_ratelimit_fold_t));
    if (conf->fold == NULL) {
        return NGX_ERROR;
    }

    conf->fold_event.handler = ngx_ratelimit_log_folded;
    conf->fold_event.data = conf;
    conf->fold_event.log = cf->log;
    conf->fold_event.cancelable = 1;

    return NGX_OK;
}
