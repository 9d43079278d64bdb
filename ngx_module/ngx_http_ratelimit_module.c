
/*
 * ngx-ratelimit: the nginx glue.
 *
 * Directives, zone set-up, the preaccess handler, the header filter and the
 * variables.  It evaluates keys and costs and hands them to the core
 * (core/include/ratelimit.h), which holds every algorithm, the parameter
 * parser and the shared-memory key table.
 *
 * Clock: the core gets nginx's cached wall-clock time in milliseconds
 * (ngx_timeofday()).  Wall time because fixed windows are aligned to the
 * Unix epoch and a zone's state must mean the same after a reload; the core
 * is jump-safe, so a clock stepping backwards never admits more.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ratelimit.h"
#include "ngx_http_ratelimit_redis.h"


#define NGX_HTTP_RATELIMIT_PASSED            1
#define NGX_HTTP_RATELIMIT_DELAYED           2
#define NGX_HTTP_RATELIMIT_REJECTED          3
#define NGX_HTTP_RATELIMIT_DELAYED_DRY_RUN   4
#define NGX_HTTP_RATELIMIT_REJECTED_DRY_RUN  5
#define NGX_HTTP_RATELIMIT_EXEMPT            6

/* $ratelimit_decided_by: where the decision was taken */
#define NGX_HTTP_RATELIMIT_BY_LOCAL          1
#define NGX_HTTP_RATELIMIT_BY_REDIS          2
#define NGX_HTTP_RATELIMIT_BY_FALLBACK_LOCAL 3
#define NGX_HTTP_RATELIMIT_BY_FALLBACK_ALLOW 4
#define NGX_HTTP_RATELIMIT_BY_FALLBACK_DENY  5

#define NGX_HTTP_RATELIMIT_HEADERS_LEGACY    0x01
#define NGX_HTTP_RATELIMIT_HEADERS_IETF      0x02

/* The documented minimum: room for the slab pool header and the table. */
#define NGX_HTTP_RATELIMIT_ZONE_MIN          (32 * 1024)

/* Bytes of a key shown in log lines, escaped. */
#define NGX_HTTP_RATELIMIT_KEY_LOG_MAX       64


typedef struct {
    ngx_str_t                    name;      /* as declared */
    ngx_slab_pool_t             *shpool;    /* its mutex is the zone's lock */
    void                        *table;     /* rl table inside the zone */
    ngx_array_t                  blobs;     /* uint32_t: its rules' block sizes */
    u_char                      *file;      /* where it is declared */
    ngx_uint_t                   line;
    ngx_http_ratelimit_redis_t  *redis;     /* NULL: decided in the zone */
} ngx_http_ratelimit_zone_t;


typedef struct {
    ngx_shm_zone_t              *shm_zone;  /* data: ngx_http_ratelimit_zone_t */
    rl_rule_t                    rule;
    uint64_t                     identity;
    ngx_str_t                    name;      /* rule.name */
    ngx_http_complex_value_t     key;
    ngx_int_t                    key_index; /* a key that is one variable */
    ngx_http_complex_value_t    *cost;      /* NULL: rule.cost */
    ngx_flag_t                   cost_warned;
    ngx_str_t                    limit;     /* header texts known in advance */
    ngx_str_t                    policy;    /* "name";q=N;w=  */
    ngx_int_t                    stats;     /* its counters in the zone */
} ngx_http_ratelimit_rule_t;


typedef struct {
    ngx_array_t                  rules;     /* ngx_http_ratelimit_rule_t */
    ngx_uint_t                   combine;
    ngx_uint_t                   status_code;
    ngx_uint_t                   headers;
    ngx_flag_t                   dry_run;
    ngx_uint_t                   log_level;
} ngx_http_ratelimit_loc_conf_t;


typedef struct {
    ngx_shm_zone_t              *shm_zone;
    u_char                      *file;
    ngx_uint_t                   line;
    uint32_t                     blob;      /* the rule's block size, or 0 */
    ngx_array_t                 *rules;     /* the rule: rules->elts[index] */
    ngx_uint_t                   index;
} ngx_http_ratelimit_zone_ref_t;


typedef struct {
    ngx_array_t                  zone_refs; /* ngx_http_ratelimit_zone_ref_t */
} ngx_http_ratelimit_main_conf_t;


/* Per request, on r->main; found again after internal redirects. */
typedef struct {
    ngx_uint_t                   status;    /* NGX_HTTP_RATELIMIT_* */
    ngx_uint_t                   headers;   /* mode of the checking location */
    ngx_http_ratelimit_rule_t   *rule;      /* binding rule, or NULL */
    rl_decision_t                decision;  /* binding rule's decision */

    /* a delayed request's reservations, given back if it is abandoned */
    rl_check_t                  *held;
    ngx_http_ratelimit_rule_t  **held_rules;
    ngx_uint_t                   nheld;

    ngx_uint_t                   decided_by; /* NGX_HTTP_RATELIMIT_BY_* */

    /* a request decided in Redis: its checks wait there */
    ngx_http_ratelimit_redis_wait_t  redis;
    ngx_http_ratelimit_rule_t  **redis_rules;
    ngx_int_t                    rc;         /* the handler's, once decided */

    unsigned                     headers_done:1;
    unsigned                     waiting:1;  /* delayed, not yet released */
    unsigned                     redis_waiting:1;
    unsigned                     resume:1;   /* the handler returns rc */
} ngx_http_ratelimit_ctx_t;


static ngx_int_t ngx_http_ratelimit_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_ratelimit_key(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule, ngx_str_t *key);
static ngx_int_t ngx_http_ratelimit_decided(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, rl_check_t *checks,
    ngx_http_ratelimit_rule_t **used, ngx_uint_t n, int allowed,
    size_t binding);
static ngx_int_t ngx_http_ratelimit_check_local(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, rl_check_t *checks,
    ngx_http_ratelimit_rule_t **used, ngx_uint_t n);
static ngx_int_t ngx_http_ratelimit_check_redis(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, rl_check_t *checks,
    ngx_http_ratelimit_rule_t **used, ngx_uint_t n);
static void ngx_http_ratelimit_redis_done(ngx_http_ratelimit_redis_wait_t *w,
    rl_resp_t *reply);
static ngx_int_t ngx_http_ratelimit_redis_fallback(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, rl_check_t *checks,
    ngx_http_ratelimit_rule_t **used, ngx_uint_t n);
static ngx_int_t ngx_http_ratelimit_delay_request(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, rl_check_t *checks,
    ngx_http_ratelimit_rule_t **rules, ngx_uint_t n, ngx_msec_t delay);
static void ngx_http_ratelimit_delay(ngx_http_request_t *r);
static ngx_int_t ngx_http_ratelimit_header_filter(ngx_http_request_t *r);
static ngx_http_ratelimit_ctx_t *ngx_http_ratelimit_get_ctx(
    ngx_http_request_t *r);
static void ngx_http_ratelimit_ctx_cleanup(void *data);
static uint64_t ngx_http_ratelimit_cost(ngx_http_request_t *r,
    ngx_http_ratelimit_rule_t *rule);
static void ngx_http_ratelimit_count(rl_check_t *checks,
    ngx_http_ratelimit_rule_t **rules, ngx_uint_t n, ngx_uint_t allowed,
    ngx_flag_t dry_run);
static void ngx_http_ratelimit_lock(rl_check_t *checks,
    ngx_http_ratelimit_rule_t **rules, ngx_uint_t n, ngx_uint_t lock);
static void ngx_http_ratelimit_log(ngx_http_request_t *r, ngx_uint_t level,
    const char *what, ngx_http_ratelimit_rule_t *rule, rl_check_t *check);
static ngx_int_t ngx_http_ratelimit_add_header(ngx_http_request_t *r,
    ngx_str_t *name, u_char *value, size_t len);
static u_char *ngx_http_ratelimit_number(u_char *p, uint64_t n);
static uint64_t ngx_http_ratelimit_seconds(int64_t ms);

static ngx_int_t ngx_http_ratelimit_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_shm_zone_t *ngx_http_ratelimit_lookup_zone(
    ngx_list_t *shared_memory, ngx_str_t *name);
static ngx_int_t ngx_http_ratelimit_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_ratelimit_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static size_t ngx_http_ratelimit_table_size(size_t zone_size);
static ngx_int_t ngx_http_ratelimit_check_redis_rule(ngx_conf_t *cf,
    ngx_http_ratelimit_zone_ref_t *ref);
static ngx_int_t ngx_http_ratelimit_check_layout(ngx_conf_t *cf,
    ngx_shm_zone_t *shm_zone);
static void *ngx_http_ratelimit_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_ratelimit_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_ratelimit_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_http_ratelimit_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_ratelimit(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_ratelimit_set_enum(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_ratelimit_set_status(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_ratelimit_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_ratelimit_init_module(ngx_cycle_t *cycle);
static void ngx_http_ratelimit_exit_process(ngx_cycle_t *cycle);
static char *ngx_http_ratelimit_stats(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_shm_zone_t *ngx_http_ratelimit_stats_zone(ngx_uint_t n);
static ngx_int_t ngx_http_ratelimit_stats_handler(ngx_http_request_t *r);
typedef struct ngx_http_ratelimit_snapshot_s  ngx_http_ratelimit_snapshot_t;
static u_char *ngx_http_ratelimit_stats_json_redis(u_char *p,
    ngx_http_ratelimit_snapshot_t *z);
static u_char *ngx_http_ratelimit_stats_prometheus_redis(u_char *p,
    ngx_http_ratelimit_snapshot_t *z, ngx_uint_t nz);


/* Values of an enum directive, and how its error message lists them. */
typedef struct {
    ngx_conf_enum_t             *values;
    char                        *allowed;
} ngx_http_ratelimit_enum_t;


static ngx_conf_enum_t  ngx_http_ratelimit_combine_values[] = {
    { ngx_string("all"), RL_COMBINE_ALL },
    { ngx_string("any"), RL_COMBINE_ANY },
    { ngx_null_string, 0 }
};

static ngx_http_ratelimit_enum_t  ngx_http_ratelimit_combine_enum = {
    ngx_http_ratelimit_combine_values, "\"all\" or \"any\""
};


static ngx_conf_enum_t  ngx_http_ratelimit_headers_values[] = {
    { ngx_string("off"), 0 },
    { ngx_string("legacy"), NGX_HTTP_RATELIMIT_HEADERS_LEGACY },
    { ngx_string("ietf"), NGX_HTTP_RATELIMIT_HEADERS_IETF },
    { ngx_string("both"), NGX_HTTP_RATELIMIT_HEADERS_LEGACY
                          |NGX_HTTP_RATELIMIT_HEADERS_IETF },
    { ngx_null_string, 0 }
};

static ngx_http_ratelimit_enum_t  ngx_http_ratelimit_headers_enum = {
    ngx_http_ratelimit_headers_values,
    "\"off\", \"legacy\", \"ietf\" or \"both\""
};


static ngx_conf_enum_t  ngx_http_ratelimit_log_levels[] = {
    { ngx_string("info"), NGX_LOG_INFO },
    { ngx_string("notice"), NGX_LOG_NOTICE },
    { ngx_string("warn"), NGX_LOG_WARN },
    { ngx_string("error"), NGX_LOG_ERR },
    { ngx_null_string, 0 }
};

static ngx_http_ratelimit_enum_t  ngx_http_ratelimit_log_level_enum = {
    ngx_http_ratelimit_log_levels,
    "\"info\", \"notice\", \"warn\" or \"error\""
};


static ngx_command_t  ngx_http_ratelimit_commands[] = {

    { ngx_string("ratelimit_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_ratelimit_zone,
      0,
      0,
      NULL },

    { ngx_string("ratelimit"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_ratelimit,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ratelimit_combine"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_ratelimit_set_enum,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, combine),
      &ngx_http_ratelimit_combine_enum },

    { ngx_string("ratelimit_status"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_ratelimit_set_status,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, status_code),
      NULL },

    { ngx_string("ratelimit_headers"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_ratelimit_set_enum,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, headers),
      &ngx_http_ratelimit_headers_enum },

    { ngx_string("ratelimit_dry_run"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, dry_run),
      NULL },

    { ngx_string("ratelimit_log_level"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_ratelimit_set_enum,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_ratelimit_loc_conf_t, log_level),
      &ngx_http_ratelimit_log_level_enum },

    { ngx_string("ratelimit_stats"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_ratelimit_stats,
      0,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_ratelimit_module_ctx = {
    ngx_http_ratelimit_add_variables,      /* preconfiguration */
    ngx_http_ratelimit_init,               /* postconfiguration */

    ngx_http_ratelimit_create_main_conf,   /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_ratelimit_create_loc_conf,    /* create location configuration */
    ngx_http_ratelimit_merge_loc_conf      /* merge location configuration */
};


ngx_module_t  ngx_http_ratelimit_module = {
    NGX_MODULE_V1,
    &ngx_http_ratelimit_module_ctx,        /* module context */
    ngx_http_ratelimit_commands,           /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    ngx_http_ratelimit_init_module,        /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_ratelimit_exit_process,       /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;


enum {
    NGX_HTTP_RATELIMIT_VAR_STATUS = 0,
    NGX_HTTP_RATELIMIT_VAR_LIMIT,
    NGX_HTTP_RATELIMIT_VAR_REMAINING,
    NGX_HTTP_RATELIMIT_VAR_RESET,
    NGX_HTTP_RATELIMIT_VAR_RETRY_AFTER,
    NGX_HTTP_RATELIMIT_VAR_RULE,
    NGX_HTTP_RATELIMIT_VAR_DECIDED_BY
};


static ngx_http_variable_t  ngx_http_ratelimit_vars[] = {

    { ngx_string("ratelimit_status"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_STATUS, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_limit"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_LIMIT, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_remaining"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_REMAINING, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_reset"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_RESET, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_retry_after"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_RETRY_AFTER, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_rule"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_RULE, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ratelimit_decided_by"), NULL, ngx_http_ratelimit_variable,
      NGX_HTTP_RATELIMIT_VAR_DECIDED_BY, NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


static ngx_str_t  ngx_http_ratelimit_status_names[] = {
    ngx_null_string,
    ngx_string("PASSED"),
    ngx_string("DELAYED"),
    ngx_string("REJECTED"),
    ngx_string("DELAYED_DRY_RUN"),
    ngx_string("REJECTED_DRY_RUN"),
    ngx_string("EXEMPT")
};


static ngx_str_t  ngx_http_ratelimit_decided_by_names[] = {
    ngx_null_string,
    ngx_string("local"),
    ngx_string("redis"),
    ngx_string("fallback_local"),
    ngx_string("fallback_allow"),
    ngx_string("fallback_deny")
};


static ngx_str_t  ngx_http_ratelimit_limit_header =
    ngx_string("X-RateLimit-Limit");
static ngx_str_t  ngx_http_ratelimit_remaining_header =
    ngx_string("X-RateLimit-Remaining");
static ngx_str_t  ngx_http_ratelimit_reset_header =
    ngx_string("X-RateLimit-Reset");
static ngx_str_t  ngx_http_ratelimit_policy_header =
    ngx_string("RateLimit-Policy");
static ngx_str_t  ngx_http_ratelimit_ietf_header =
    ngx_string("RateLimit");
static ngx_str_t  ngx_http_ratelimit_retry_after_header =
    ngx_string("Retry-After");


static ngx_int_t
ngx_http_ratelimit_handler(ngx_http_request_t *r)
{
    ngx_str_t                       key;
    ngx_uint_t                      i, n;
    rl_check_t                      checks[RL_RULES_MAX];
    ngx_http_ratelimit_ctx_t       *ctx;
    ngx_http_ratelimit_zone_t      *zone;
    ngx_http_ratelimit_rule_t      *rules, *used[RL_RULES_MAX];
    ngx_http_ratelimit_loc_conf_t  *rlcf;
    ngx_pool_cleanup_t             *cln;

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);

    if (rlcf->rules.nelts == 0) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_ratelimit_get_ctx(r);

    if (ctx != NULL) {
        if (ctx->resume) {   /* decided in Redis meanwhile */
            ctx->resume = 0;
            return ctx->rc;
        }

        /* waiting for Redis; or checked already: an internal redirect or
           a subrequest */
        return ctx->redis_waiting ? NGX_AGAIN : NGX_DECLINED;
    }

    /* the context and its pool cleanup in one allocation */

    cln = ngx_pcalloc(r->main->pool,
                      sizeof(ngx_pool_cleanup_t)
                      + sizeof(ngx_http_ratelimit_ctx_t));
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx = (ngx_http_ratelimit_ctx_t *) (cln + 1);
    cln->handler = ngx_http_ratelimit_ctx_cleanup;
    cln->data = ctx;
    cln->next = r->main->pool->cleanup;
    r->main->pool->cleanup = cln;
    ngx_http_set_ctx(r->main, ctx, ngx_http_ratelimit_module);

    ctx->headers = rlcf->headers;

    rules = rlcf->rules.elts;
    n = 0;

    for (i = 0; i < rlcf->rules.nelts; i++) {

        if (ngx_http_ratelimit_key(r, &rules[i], &key) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        zone = rules[i].shm_zone->data;

        if (key.len == 0) {
            /* an empty key exempts the request from this rule */
            rl_table_count(zone->table, rules[i].stats, RL_OUTCOME_EXEMPT);
            continue;
        }

        ngx_memzero(&checks[n], sizeof(rl_check_t));
        checks[n].table = zone->table;
        checks[n].rule = &rules[i].rule;
        checks[n].identity = rules[i].identity;
        checks[n].key = key.data;
        checks[n].key_len = key.len;
        checks[n].cost = ngx_http_ratelimit_cost(r, &rules[i]);
        used[n++] = &rules[i];
    }

    if (n == 0) {
        ctx->status = NGX_HTTP_RATELIMIT_EXEMPT;
        return NGX_DECLINED;
    }

    zone = used[0]->shm_zone->data;

    if (zone->redis != NULL) {
        return ngx_http_ratelimit_check_redis(r, ctx, checks, used, n);
    }

    ctx->decided_by = NGX_HTTP_RATELIMIT_BY_LOCAL;

    return ngx_http_ratelimit_check_local(r, ctx, checks, used, n);
}


/* The request decided in its zones, under their locks. */

static ngx_int_t
ngx_http_ratelimit_check_local(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, rl_check_t *checks,
    ngx_http_ratelimit_rule_t **used, ngx_uint_t n)
{
    int                             allowed;
    size_t                          binding;
    int64_t                         now;
    ngx_time_t                     *tp;
    ngx_http_ratelimit_loc_conf_t  *rlcf;

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);

    rl_check_hash(checks, n);   /* outside the locks */

    tp = ngx_timeofday();
    now = (int64_t) tp->sec * 1000 + tp->msec;

    ngx_http_ratelimit_lock(checks, used, n, 1);
    allowed = rl_check(checks, n, rlcf->combine, now, &binding);
    ngx_http_ratelimit_lock(checks, used, n, 0);

    return ngx_http_ratelimit_decided(r, ctx, checks, used, n, allowed,
                                      binding);
}


/*
 * What a decision means for the request: counters, status, log, and the
 * handler's result (the status of a rejection, NGX_DECLINED to go on, or
 * NGX_AGAIN while a shaping rule holds it).
 */

static ngx_int_t
ngx_http_ratelimit_decided(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, rl_check_t *checks,
    ngx_http_ratelimit_rule_t **used, ngx_uint_t n, int allowed,
    size_t binding)
{
    ngx_uint_t                      i;
    ngx_msec_t                      delay;
    ngx_http_ratelimit_loc_conf_t  *rlcf;

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);

    ngx_http_ratelimit_count(checks, used, n, allowed, rlcf->dry_run);

    if (!allowed) {
        ctx->status = rlcf->dry_run ? NGX_HTTP_RATELIMIT_REJECTED_DRY_RUN
                                    : NGX_HTTP_RATELIMIT_REJECTED;
        ctx->rule = used[binding];
        ctx->decision = checks[binding].decision;

        ngx_http_ratelimit_log(r, rlcf->log_level,
                               rlcf->dry_run ? "would reject (dry run)"
                                             : "rejected",
                               used[binding], &checks[binding]);

        return rlcf->dry_run ? NGX_DECLINED : (ngx_int_t) rlcf->status_code;
    }

    /* a shaping rule may hold the request: the longest delay binds */

    delay = 0;

    for (i = 0; i < n; i++) {
        if (checks[i].decision.allowed
            && (ngx_msec_t) checks[i].decision.delay_ms > delay)
        {
            delay = checks[i].decision.delay_ms;
            binding = i;
        }
    }

    ctx->rule = used[binding];
    ctx->decision = checks[binding].decision;

    if (delay == 0) {
        ctx->status = NGX_HTTP_RATELIMIT_PASSED;
        return NGX_DECLINED;
    }

    ngx_http_ratelimit_log(r, rlcf->log_level == NGX_LOG_INFO
                              ? NGX_LOG_INFO : rlcf->log_level + 1,
                           rlcf->dry_run ? "would delay (dry run)"
                                         : "delaying",
                           used[binding], &checks[binding]);

    if (rlcf->dry_run) {
        ctx->status = NGX_HTTP_RATELIMIT_DELAYED_DRY_RUN;
        return NGX_DECLINED;
    }

    ctx->status = NGX_HTTP_RATELIMIT_DELAYED;

    return ngx_http_ratelimit_delay_request(r, ctx, checks, used, n, delay);
}


/*
 * Sends the request's rules to Redis, one script call for all of them, and
 * waits for the reply on the event loop: the worker serves other requests
 * meanwhile.  The checks are copied into the request's pool for the wait.
 */

static ngx_int_t
ngx_http_ratelimit_check_redis(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, rl_check_t *checks,
    ngx_http_ratelimit_rule_t **used, ngx_uint_t n)
{
    ngx_http_ratelimit_zone_t        *zone;
    ngx_http_ratelimit_loc_conf_t    *rlcf;
    ngx_http_ratelimit_redis_wait_t  *w;

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);
    zone = used[0]->shm_zone->data;
    w = &ctx->redis;

    w->checks = ngx_palloc(r->pool, n * sizeof(rl_check_t));
    ctx->redis_rules = ngx_palloc(r->pool,
                                  n * sizeof(ngx_http_ratelimit_rule_t *));
    if (w->checks == NULL || ctx->redis_rules == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(w->checks, checks, n * sizeof(rl_check_t));
    ngx_memcpy(ctx->redis_rules, used, n * sizeof(ngx_http_ratelimit_rule_t *));

    w->request = r;
    w->handler = ngx_http_ratelimit_redis_done;
    w->n = n;
    w->combine = rlcf->combine;

    if (ngx_http_ratelimit_redis_send(zone->redis, w) != NGX_OK) {
        /* Redis unreachable now: no waiting at all */
        return ngx_http_ratelimit_redis_fallback(r, ctx, w->checks,
                                                 ctx->redis_rules, n);
    }

    ctx->redis_waiting = 1;

    if (r->connection->read->ready) {
        ngx_post_event(r->connection->read, &ngx_posted_events);

    } else if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;

    return NGX_AGAIN;
}


/* Redis answered (reply) or failed (NULL): decide, and run the phases on. */

static void
ngx_http_ratelimit_redis_done(ngx_http_ratelimit_redis_wait_t *w,
    rl_resp_t *reply)
{
    int                         allowed;
    size_t                      binding;
    ngx_int_t                   rc;
    ngx_http_request_t         *r = w->request;
    ngx_http_ratelimit_ctx_t   *ctx;
    ngx_http_ratelimit_zone_t  *zone;

    ctx = ngx_http_ratelimit_get_ctx(r);
    zone = ctx->redis_rules[0]->shm_zone->data;
    ctx->redis_waiting = 0;

    ngx_http_set_log_request(r->connection->log, r);

    allowed = reply ? rl_redis_decode(reply, w->checks, w->n, &binding) : -1;

    if (reply != NULL && allowed < 0) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "ratelimit: redis %V: unexpected reply of type '%c' "
                      "to the script: is it another script under its SHA-1?",
                      &zone->redis->server, reply->type);
        (void) ngx_atomic_fetch_add(&zone->redis->stats->errors, 1);
    }

    if (allowed < 0) {
        rc = ngx_http_ratelimit_redis_fallback(r, ctx, w->checks,
                                               ctx->redis_rules, w->n);

    } else {
        (void) ngx_atomic_fetch_add(&zone->redis->stats->decisions, 1);
        ctx->decided_by = NGX_HTTP_RATELIMIT_BY_REDIS;
        rc = ngx_http_ratelimit_decided(r, ctx, w->checks, ctx->redis_rules,
                                        w->n, allowed, binding);
    }

    if (rc == NGX_AGAIN) {
        return;   /* held by a shaping rule: its timer runs the phases on */
    }

    /* the phase engine calls the handler again, which returns rc */

    ctx->rc = rc;
    ctx->resume = 1;
    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}


/*
 * on_redis_error: local decides in the zone with the same rules; allow
 * passes the request, deny rejects it (both without rate-limit headers:
 * there is no decision to describe).
 */

static ngx_int_t
ngx_http_ratelimit_redis_fallback(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, rl_check_t *checks,
    ngx_http_ratelimit_rule_t **used, ngx_uint_t n)
{
    ngx_http_ratelimit_zone_t      *zone;
    ngx_http_ratelimit_loc_conf_t  *rlcf;

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);
    zone = used[0]->shm_zone->data;

    (void) ngx_atomic_fetch_add(&zone->redis->stats->fallbacks, 1);

    switch (zone->redis->on_error) {

    case NGX_HTTP_RATELIMIT_REDIS_ALLOW:
        ctx->decided_by = NGX_HTTP_RATELIMIT_BY_FALLBACK_ALLOW;
        ctx->status = NGX_HTTP_RATELIMIT_PASSED;
        return NGX_DECLINED;

    case NGX_HTTP_RATELIMIT_REDIS_DENY:
        ctx->decided_by = NGX_HTTP_RATELIMIT_BY_FALLBACK_DENY;

        if (rlcf->dry_run) {
            ctx->status = NGX_HTTP_RATELIMIT_REJECTED_DRY_RUN;
            return NGX_DECLINED;
        }

        ctx->status = NGX_HTTP_RATELIMIT_REJECTED;
        return rlcf->status_code;

    default: /* NGX_HTTP_RATELIMIT_REDIS_LOCAL */
        ctx->decided_by = NGX_HTTP_RATELIMIT_BY_FALLBACK_LOCAL;
        return ngx_http_ratelimit_check_local(r, ctx, checks, used, n);
    }
}


/*
 * Holds a request for its delay on a timer, as limit_req does: the worker
 * serves others meanwhile, and a client that closes is noticed.  What the
 * request reserved is kept in its context, to be given back by the context's
 * cleanup if it is abandoned before its release.
 */

static ngx_int_t
ngx_http_ratelimit_delay_request(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, rl_check_t *checks,
    ngx_http_ratelimit_rule_t **rules, ngx_uint_t n, ngx_msec_t delay)
{
    ngx_uint_t  i;

    ctx->held = ngx_palloc(r->pool, n * sizeof(rl_check_t));
    ctx->held_rules = ngx_palloc(r->pool,
                                 n * sizeof(ngx_http_ratelimit_rule_t *));
    if (ctx->held == NULL || ctx->held_rules == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    for (i = 0; i < n; i++) {
        /* what Redis reserved stays reserved: only a zone gives back */
        if (checks[i].decision.allowed && checks[i].cost > 0
            && ctx->decided_by != NGX_HTTP_RATELIMIT_BY_REDIS)
        {
            ctx->held[ctx->nheld] = checks[i];
            ctx->held[ctx->nheld].key = NULL;   /* hashed already */
            ctx->held_rules[ctx->nheld++] = rules[i];
        }
    }

    if (r->connection->read->ready) {
        ngx_post_event(r->connection->read, &ngx_posted_events);

    } else {
        if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    ctx->waiting = 1;
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_ratelimit_delay;

    r->connection->write->delayed = 1;
    ngx_add_timer(r->connection->write, delay);

    return NGX_AGAIN;
}


static void
ngx_http_ratelimit_delay(ngx_http_request_t *r)
{
    ngx_event_t               *wev;
    ngx_http_ratelimit_ctx_t  *ctx;

    wev = r->connection->write;

    if (wev->delayed) {
        if (ngx_handle_write_event(wev, 0) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        }

        return;
    }

    ctx = ngx_http_ratelimit_get_ctx(r);
    if (ctx != NULL) {
        ctx->waiting = 0;
    }

    if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;

    ngx_http_core_run_phases(r);
}


/*
 * The request's context.  Internal redirects (error_page, try_files, ...)
 * clear module contexts, so the context also lives as a cleanup of the main
 * request's pool, where it is found again: a redirected request is neither
 * counted twice nor left without its headers and variables.
 */

static ngx_http_ratelimit_ctx_t *
ngx_http_ratelimit_get_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t        *cln;
    ngx_http_ratelimit_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r->main, ngx_http_ratelimit_module);

    if (ctx != NULL || !r->main->internal) {
        return ctx;
    }

    for (cln = r->main->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_ratelimit_ctx_cleanup) {
            ctx = cln->data;
            ngx_http_set_ctx(r->main, ctx, ngx_http_ratelimit_module);
            return ctx;
        }
    }

    return NULL;
}


static void
ngx_http_ratelimit_ctx_cleanup(void *data)
{
    ngx_http_ratelimit_ctx_t  *ctx = data;

    if (ctx->redis_waiting) {
        ngx_http_ratelimit_redis_cancel(&ctx->redis);
    }

    /* a delayed request abandoned before its release */

    if (ctx->waiting && ctx->nheld) {
        ngx_http_ratelimit_lock(ctx->held, ctx->held_rules, ctx->nheld, 1);
        rl_check_cancel(ctx->held, ctx->nheld);
        ngx_http_ratelimit_lock(ctx->held, ctx->held_rules, ctx->nheld, 0);
    }
}


/*
 * A key that is a single variable is read in place; any other is built by
 * the complex value's script.
 */

static ngx_int_t
ngx_http_ratelimit_key(ngx_http_request_t *r, ngx_http_ratelimit_rule_t *rule,
    ngx_str_t *key)
{
    ngx_http_variable_value_t  *vv;

    if (rule->key_index == NGX_ERROR) {
        return ngx_http_complex_value(r, &rule->key, key);
    }

    vv = ngx_http_get_indexed_variable(r, rule->key_index);

    if (vv == NULL || vv->not_found) {
        key->len = 0;
        key->data = NULL;
        return vv == NULL ? NGX_ERROR : NGX_OK;
    }

    key->len = vv->len;
    key->data = vv->data;

    return NGX_OK;
}


/*
 * cost=$variable: a non-negative integer; anything else is logged once per
 * worker and rule and counts as 1.
 */

static uint64_t
ngx_http_ratelimit_cost(ngx_http_request_t *r, ngx_http_ratelimit_rule_t *rule)
{
    ngx_int_t  cost;
    ngx_str_t  value;

    if (rule->cost == NULL) {
        return rule->rule.cost;
    }

    if (ngx_http_complex_value(r, rule->cost, &value) != NGX_OK) {
        return 1;
    }

    cost = ngx_atoi(value.data, value.len);   /* digits only, no overflow */

    if (cost != NGX_ERROR) {
        return (uint64_t) cost;
    }

    if (!rule->cost_warned) {
        rule->cost_warned = 1;
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "ratelimit: rule \"%V\": cost \"%V\" is not a "
                      "non-negative integer, counted as 1 (logged once per "
                      "worker)", &rule->name, &rule->cost->value);
    }

    return 1;
}


/*
 * Each rule's outcome in its zone's counters: a rejected request counts
 * against the rules that denied it, a passed one for the rules that allowed
 * (and spent), as delayed where the rule delayed it.
 */

static void
ngx_http_ratelimit_count(rl_check_t *checks, ngx_http_ratelimit_rule_t **rules,
    ngx_uint_t n, ngx_uint_t allowed, ngx_flag_t dry_run)
{
    int                         outcome;
    ngx_uint_t                  i;
    ngx_http_ratelimit_zone_t  *zone;

    for (i = 0; i < n; i++) {
        if (checks[i].decision.allowed != (int32_t) allowed) {
            continue;
        }

        if (!allowed) {
            outcome = dry_run ? RL_OUTCOME_DRY_RUN_REJECTED
                              : RL_OUTCOME_REJECTED;

        } else {
            outcome = checks[i].decision.delay_ms > 0 && !dry_run
                      ? RL_OUTCOME_DELAYED : RL_OUTCOME_ALLOWED;
        }

        zone = rules[i]->shm_zone->data;
        rl_table_count(zone->table, rules[i]->stats, outcome);
    }
}


/*
 * Locks (lock = 1) or unlocks every zone the checks use, each once, in
 * address order so that two requests never wait for each other.
 */

static void
ngx_http_ratelimit_lock(rl_check_t *checks, ngx_http_ratelimit_rule_t **rules,
    ngx_uint_t n, ngx_uint_t lock)
{
    ngx_uint_t                  i, j, k, m;
    ngx_slab_pool_t            *pools[RL_RULES_MAX], *p;
    ngx_http_ratelimit_zone_t  *zone;

    if (n == 1) {
        zone = rules[0]->shm_zone->data;
        (lock ? ngx_shmtx_lock : ngx_shmtx_unlock)(&zone->shpool->mutex);
        return;
    }

    m = 0;

    for (i = 0; i < n; i++) {
        zone = rules[i]->shm_zone->data;
        p = zone->shpool;

        for (j = 0; j < m && pools[j] < p; j++) { /* void */ }

        if (j < m && pools[j] == p) {
            continue;
        }

        for (k = m++; k > j; k--) {
            pools[k] = pools[k - 1];
        }

        pools[j] = p;
    }

    if (lock) {
        for (i = 0; i < m; i++) {
            ngx_shmtx_lock(&pools[i]->mutex);
        }

    } else {
        for (i = m; i-- > 0; /* void */) {
            ngx_shmtx_unlock(&pools[i]->mutex);
        }
    }
}


static void
ngx_http_ratelimit_log(ngx_http_request_t *r, ngx_uint_t level,
    const char *what, ngx_http_ratelimit_rule_t *rule, rl_check_t *check)
{
    u_char       *p, *last, c;
    size_t        i, len;
    u_char        key[NGX_HTTP_RATELIMIT_KEY_LOG_MAX * 4 + 4];
    const u_char *data;

    if (r->connection->log->log_level < level) {
        return;
    }

    /* the key, escaped and truncated: it is client-controlled */

    data = check->key;
    len = ngx_min(check->key_len, NGX_HTTP_RATELIMIT_KEY_LOG_MAX);
    p = key;
    last = key + sizeof(key);

    for (i = 0; i < len; i++) {
        c = data[i];

        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            *p++ = c;

        } else {
            p = ngx_snprintf(p, last - p, "\\x%02xd", c);
        }
    }

    if (check->key_len > len) {
        p = ngx_cpymem(p, "...", 3);
    }

    if (check->decision.allowed) {
        ngx_log_error(level, r->connection->log, 0,
                      "ratelimit: %s by rule \"%V\" in zone \"%V\", key "
                      "\"%*s\", cost %uL, for %L ms", what, &rule->name,
                      &((ngx_http_ratelimit_zone_t *) rule->shm_zone->data)->name,
                      (size_t) (p - key), key,
                      check->cost, check->decision.delay_ms);
        return;
    }

    ngx_log_error(level, r->connection->log, 0,
                  "ratelimit: %s by rule \"%V\" in zone \"%V\", key \"%*s\","
                  " cost %uL%s, retry after %L ms", what, &rule->name,
                  &((ngx_http_ratelimit_zone_t *) rule->shm_zone->data)->name,
                  (size_t) (p - key), key,
                  check->cost,
                  check->decision.never ? " (more than the rule ever admits)"
                                        : "",
                  check->decision.retry_after_ms);
}


static ngx_int_t
ngx_http_ratelimit_header_filter(ngx_http_request_t *r)
{
    u_char                     *p, *v;
    uint64_t                    reset;
    ngx_http_ratelimit_ctx_t   *ctx;
    ngx_http_ratelimit_rule_t  *rule;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_ratelimit_get_ctx(r);

    if (ctx == NULL || ctx->rule == NULL || ctx->headers == 0
        || ctx->headers_done)
    {
        return ngx_http_next_header_filter(r);
    }

    ctx->headers_done = 1;
    rule = ctx->rule;
    reset = ngx_http_ratelimit_seconds(ctx->decision.reset_ms);

    /* every value in one buffer: at most a policy and five numbers */

    p = ngx_pnalloc(r->pool, 2 * (RL_NAME_MAX + 32) + 5 * NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    if (ctx->headers & NGX_HTTP_RATELIMIT_HEADERS_LEGACY) {

        if (ngx_http_ratelimit_add_header(r, &ngx_http_ratelimit_limit_header,
                                          rule->limit.data, rule->limit.len)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        v = p;
        p = ngx_http_ratelimit_number(p, ctx->decision.remaining);
        if (ngx_http_ratelimit_add_header(r,
                                          &ngx_http_ratelimit_remaining_header,
                                          v, p - v)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        v = p;
        p = ngx_http_ratelimit_number(p, reset);
        if (ngx_http_ratelimit_add_header(r, &ngx_http_ratelimit_reset_header,
                                          v, p - v)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    if (ctx->headers & NGX_HTTP_RATELIMIT_HEADERS_IETF) {

        /* "name";q=limit;w=window and "name";r=remaining;t=reset */

        v = p;
        p = ngx_cpymem(p, rule->policy.data, rule->policy.len);
        p = ngx_http_ratelimit_number(p, ngx_http_ratelimit_seconds(
                                             ctx->decision.window_ms));
        if (ngx_http_ratelimit_add_header(r, &ngx_http_ratelimit_policy_header,
                                          v, p - v)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        v = p;
        *p++ = '"';
        p = ngx_cpymem(p, rule->name.data, rule->name.len);
        p = ngx_cpymem(p, "\";r=", 4);
        p = ngx_http_ratelimit_number(p, ctx->decision.remaining);
        p = ngx_cpymem(p, ";t=", 3);
        p = ngx_http_ratelimit_number(p, reset);
        if (ngx_http_ratelimit_add_header(r, &ngx_http_ratelimit_ietf_header,
                                          v, p - v)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    if (ctx->status == NGX_HTTP_RATELIMIT_REJECTED) {
        v = p;
        p = ngx_http_ratelimit_number(p, ngx_max(ngx_http_ratelimit_seconds(
                                          ctx->decision.retry_after_ms), 1));
        if (ngx_http_ratelimit_add_header(r,
                                          &ngx_http_ratelimit_retry_after_header,
                                          v, p - v)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return ngx_http_next_header_filter(r);
}


static ngx_int_t
ngx_http_ratelimit_add_header(ngx_http_request_t *r, ngx_str_t *name,
    u_char *value, size_t len)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key = *name;
    h->value.data = value;
    h->value.len = len;
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif

    return NGX_OK;
}


/* A number in decimal: cheaper than ngx_sprintf on every response. */

static u_char *
ngx_http_ratelimit_number(u_char *p, uint64_t n)
{
    u_char   digits[NGX_INT64_LEN], *d;

    d = digits + NGX_INT64_LEN;

    do {
        *--d = (u_char) ('0' + n % 10);
        n /= 10;
    } while (n);

    return ngx_cpymem(p, d, digits + NGX_INT64_LEN - d);
}


/* Whole seconds, rounded up: headers never promise too early. */

static uint64_t
ngx_http_ratelimit_seconds(int64_t ms)
{
    return ms <= 0 ? 0 : ((uint64_t) ms + 999) / 1000;
}


static ngx_int_t
ngx_http_ratelimit_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                    *p;
    ngx_str_t                 *s;
    ngx_http_ratelimit_ctx_t  *ctx;

    ctx = ngx_http_ratelimit_get_ctx(r);

    if (ctx == NULL || ctx->status == 0
        || (data != NGX_HTTP_RATELIMIT_VAR_STATUS
            && data != NGX_HTTP_RATELIMIT_VAR_DECIDED_BY && ctx->rule == NULL)
        || (data == NGX_HTTP_RATELIMIT_VAR_DECIDED_BY && ctx->decided_by == 0))
    {
        v->not_found = 1;
        return NGX_OK;
    }

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;

    if (data == NGX_HTTP_RATELIMIT_VAR_DECIDED_BY) {
        s = &ngx_http_ratelimit_decided_by_names[ctx->decided_by];
        v->len = s->len;
        v->data = s->data;
        return NGX_OK;
    }

    if (data == NGX_HTTP_RATELIMIT_VAR_STATUS) {
        s = &ngx_http_ratelimit_status_names[ctx->status];
        v->len = s->len;
        v->data = s->data;
        return NGX_OK;
    }

    if (data == NGX_HTTP_RATELIMIT_VAR_RULE) {
        v->len = ctx->rule->name.len;
        v->data = ctx->rule->name.data;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->data = p;

    switch (data) {

    case NGX_HTTP_RATELIMIT_VAR_LIMIT:
        p = ngx_http_ratelimit_number(p, ctx->rule->rule.limit);
        break;

    case NGX_HTTP_RATELIMIT_VAR_REMAINING:
        p = ngx_http_ratelimit_number(p, ctx->decision.remaining);
        break;

    case NGX_HTTP_RATELIMIT_VAR_RESET:
        p = ngx_http_ratelimit_number(p, ngx_http_ratelimit_seconds(
                                             ctx->decision.reset_ms));
        break;

    default: /* NGX_HTTP_RATELIMIT_VAR_RETRY_AFTER */
        p = ngx_http_ratelimit_number(p, ctx->decision.allowed ? 0
                 : ngx_max(ngx_http_ratelimit_seconds(
                               ctx->decision.retry_after_ms), 1));
        break;
    }

    v->len = p - v->data;

    return NGX_OK;
}


/*
 * A zone is the slab pool header (its mutex is the zone lock, which the
 * master releases if a worker dies holding it) followed by the core's table.
 * Reloaded with the same name and size, the table is kept as it is.
 */

static ngx_int_t
ngx_http_ratelimit_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_ratelimit_zone_t  *ozone = data;

    size_t                             size;
    ngx_shm_zone_t                    *old;
    ngx_http_ratelimit_zone_t         *zone;
    ngx_http_ratelimit_redis_stats_t  *rs;
    char                               err[RL_ERR_MAX];

    zone = shm_zone->data;
    zone->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;
    size = ngx_http_ratelimit_table_size(shm_zone->shm.size);
    rs = (ngx_http_ratelimit_redis_stats_t *)
         ((u_char *) zone->shpool + ngx_align(sizeof(ngx_slab_pool_t), 64));

    if (zone->redis) {
        zone->redis->stats = rs;
    }

    if (ozone != NULL
        && rl_table_valid(ozone->table, size, zone->blobs.elts,
                          zone->blobs.nelts))
    {
        zone->table = ozone->table;
        return NGX_OK;
    }

    if (shm_zone->shm.exists) {
        zone->table = zone->shpool->data;
        return NGX_OK;
    }

    ngx_memzero(rs, sizeof(ngx_http_ratelimit_redis_stats_t));
    zone->table = (u_char *) rs
                  + ngx_align(sizeof(ngx_http_ratelimit_redis_stats_t), 64);

    if (rl_table_init(zone->table, size, zone->blobs.elts, zone->blobs.nelts,
                      NULL, err, sizeof(err))
        != RL_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "ratelimit_zone \"%V\": %s", &zone->name, err);
        return NGX_ERROR;
    }

    zone->shpool->data = zone->table;

    /* the previous cycle's zone of this name, if any, is not reused */

    old = ngx_http_ratelimit_lookup_zone((ngx_list_t *)
                                         &ngx_cycle->shared_memory,
                                         &zone->name);

    if (old != NULL && old->shm.size != shm_zone->shm.size) {
        ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                      "ratelimit_zone \"%V\" changed size from %uz to %uz "
                      "bytes: its state starts empty", &zone->name,
                      old->shm.size, shm_zone->shm.size);

    } else if (old != NULL) {
        ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                      "ratelimit_zone \"%V\": its rules' state sizes changed: "
                      "its state starts empty", &zone->name);
    }

    return NGX_OK;
}


/*
 * The slab pool header (whose mutex is the lock), then the Redis counters,
 * then the table, each at a 64-byte boundary: shared memory is
 * page-aligned, so this is the same for every zone of a size.
 */

static size_t
ngx_http_ratelimit_table_size(size_t zone_size)
{
    return (zone_size - ngx_align(sizeof(ngx_slab_pool_t), 64)
            - ngx_align(sizeof(ngx_http_ratelimit_redis_stats_t), 64))
           & ~(size_t) 63;
}


static ngx_int_t
ngx_http_ratelimit_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_ratelimit_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


static void *
ngx_http_ratelimit_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_ratelimit_main_conf_t  *rmcf;

    rmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_ratelimit_main_conf_t));
    if (rmcf == NULL) {
        return NULL;
    }

    if (ngx_array_init(&rmcf->zone_refs, cf->pool, 4,
                       sizeof(ngx_http_ratelimit_zone_ref_t))
        != NGX_OK)
    {
        return NULL;
    }

    return rmcf;
}


static void *
ngx_http_ratelimit_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_ratelimit_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_ratelimit_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     conf->rules.elts = NULL;
     */

    conf->combine = NGX_CONF_UNSET_UINT;
    conf->status_code = NGX_CONF_UNSET_UINT;
    conf->headers = NGX_CONF_UNSET_UINT;
    conf->dry_run = NGX_CONF_UNSET;
    conf->log_level = NGX_CONF_UNSET_UINT;

    return conf;
}


static char *
ngx_http_ratelimit_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_ratelimit_loc_conf_t *prev = parent;
    ngx_http_ratelimit_loc_conf_t *conf = child;

    /* rules are inherited only by a level that has none, as limit_req's */

    if (conf->rules.elts == NULL) {
        conf->rules = prev->rules;
    }

    ngx_conf_merge_uint_value(conf->combine, prev->combine, RL_COMBINE_ALL);
    ngx_conf_merge_uint_value(conf->status_code, prev->status_code,
                              NGX_HTTP_TOO_MANY_REQUESTS);
    ngx_conf_merge_uint_value(conf->headers, prev->headers,
                              NGX_HTTP_RATELIMIT_HEADERS_LEGACY);
    ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level, NGX_LOG_ERR);

    return NGX_CONF_OK;
}


/*
 * This module's zone declared as NAME in a cycle's list of shared memory
 * zones (their own names may carry a layout, see check_layout).
 */

static ngx_shm_zone_t *
ngx_http_ratelimit_lookup_zone(ngx_list_t *shared_memory, ngx_str_t *name)
{
    ngx_str_t                  *declared;
    ngx_uint_t                  i;
    ngx_list_part_t            *part;
    ngx_shm_zone_t             *zone;
    ngx_http_ratelimit_zone_t  *z;

    part = &shared_memory->part;
    zone = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }
            part = part->next;
            zone = part->elts;
            i = 0;
        }

        if (zone[i].tag != &ngx_http_ratelimit_module) {
            continue;
        }

        z = zone[i].data;
        declared = z != NULL ? &z->name : &zone[i].shm.name;

        if (declared->len == name->len
            && ngx_strncmp(declared->data, name->data, name->len) == 0)
        {
            return &zone[i];
        }
    }
}


/* ratelimit_zone NAME SIZE; */

static char *
ngx_http_ratelimit_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ssize_t                     size;
    ngx_int_t                   rc;
    ngx_uint_t                  i;
    ngx_http_ratelimit_redis_t *redis;
    ngx_str_t                  *value, name;
    ngx_shm_zone_t             *shm_zone;
    ngx_http_ratelimit_zone_t  *zone;

    value = cf->args->elts;
    name = value[1];

    if (name.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: empty zone name");
        return NGX_CONF_ERROR;
    }

    size = ngx_parse_size(&value[2]);

    if (size == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: invalid size \"%V\" "
                           "of zone \"%V\": expected a size like 32k, 10m "
                           "or 1g", &value[2], &name);
        return NGX_CONF_ERROR;
    }

    if (size < NGX_HTTP_RATELIMIT_ZONE_MIN) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: size \"%V\" of zone "
                           "\"%V\" is too small: the minimum is 32k",
                           &value[2], &name);
        return NGX_CONF_ERROR;
    }

    redis = NULL;

    for (i = 3; i < cf->args->nelts; i++) {
        rc = ngx_http_ratelimit_redis_param(cf, &redis, &value[i], &name);

        if (rc == NGX_ERROR) {
            return NGX_CONF_ERROR;
        }

        if (rc == NGX_DECLINED) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit_zone\" directive: unknown "
                               "parameter \"%V\" of zone \"%V\": expected "
                               "NAME SIZE [redis=HOST:PORT ...]",
                               &value[i], &name);
            return NGX_CONF_ERROR;
        }
    }

    if (redis != NULL
        && ngx_http_ratelimit_redis_finish(cf, redis, &name) != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    shm_zone = ngx_http_ratelimit_lookup_zone(&cf->cycle->shared_memory,
                                              &name);

    if (shm_zone != NULL && shm_zone->data != NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: zone \"%V\" is "
                           "already declared (size %uz): each zone is "
                           "declared once", &name, shm_zone->shm.size);
        return NGX_CONF_ERROR;
    }

    shm_zone = ngx_shared_memory_add(cf, &name, size,
                                     &ngx_http_ratelimit_module);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    zone = ngx_pcalloc(cf->pool, sizeof(ngx_http_ratelimit_zone_t));
    if (zone == NULL) {
        return NGX_CONF_ERROR;
    }

    if (ngx_array_init(&zone->blobs, cf->pool, 2, sizeof(uint32_t))
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    zone->name = name;
    zone->redis = redis;
    zone->file = cf->conf_file->file.name.data;
    zone->line = cf->conf_file->line;

    shm_zone->init = ngx_http_ratelimit_init_zone;
    shm_zone->data = zone;

    return NGX_CONF_OK;
}


/*
 * ratelimit zone=NAME [key=STRING] [cost=N|$var] ...;
 * zone=, key= and variable costs are the glue's; the core parses the rest.
 */

static char *
ngx_http_ratelimit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ratelimit_loc_conf_t *rlcf = conf;

    int                                 rc;
    u_char                              c;
    ngx_str_t                          *value, zone, key, s;
    ngx_uint_t                          i;
    ngx_http_ratelimit_rule_t          *rule;
    ngx_http_ratelimit_zone_ref_t      *ref;
    ngx_http_ratelimit_main_conf_t     *rmcf;
    ngx_http_compile_complex_value_t    ccv;
    char                                err[RL_ERR_MAX];

    static ngx_str_t  default_key = ngx_string("$binary_remote_addr");

    if (rlcf->rules.elts == NULL) {
        if (ngx_array_init(&rlcf->rules, cf->pool, 2,
                           sizeof(ngx_http_ratelimit_rule_t))
            != NGX_OK)
        {
            return NGX_CONF_ERROR;
        }
    }

    if (rlcf->rules.nelts == RL_RULES_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit\" directive: too many rules: at most "
                           "%d apply to one request", RL_RULES_MAX);
        return NGX_CONF_ERROR;
    }

    rule = ngx_array_push(&rlcf->rules);
    if (rule == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(rule, sizeof(ngx_http_ratelimit_rule_t));
    rl_rule_init(&rule->rule);

    value = cf->args->elts;
    ngx_str_null(&zone);
    ngx_str_null(&key);

    for (i = 1; i < cf->args->nelts; i++) {

        rc = rl_rule_param(&rule->rule, (char *) value[i].data, value[i].len,
                           err, sizeof(err));

        if (rc == RL_ERROR) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ratelimit\" directive: %s", err);
            return NGX_CONF_ERROR;
        }

        if (rc == RL_OK) {
            continue;
        }

        /* RL_DECLINED: zone=, key= or cost=$variable */

        if (ngx_strncmp(value[i].data, "zone=", 5) == 0) {
            s.data = value[i].data + 5;
            s.len = value[i].len - 5;

            if (zone.data != NULL || s.len == 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "\"ratelimit\" directive: %s \"%V\": "
                                   "expected one zone=NAME",
                                   zone.data ? "duplicate parameter"
                                             : "invalid", &value[i]);
                return NGX_CONF_ERROR;
            }

            zone = s;
            continue;
        }

        if (ngx_strncmp(value[i].data, "key=", 4) == 0) {
            if (key.data != NULL) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "\"ratelimit\" directive: duplicate "
                                   "parameter \"%V\": each parameter may be "
                                   "given once", &value[i]);
                return NGX_CONF_ERROR;
            }

            key.data = value[i].data + 4;
            key.len = value[i].len - 4;
            continue;
        }

        /* cost=$variable */

        rule->cost = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
        if (rule->cost == NULL) {
            return NGX_CONF_ERROR;
        }

        s.data = value[i].data + 5;
        s.len = value[i].len - 5;

        ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));
        ccv.cf = cf;
        ccv.value = &s;
        ccv.complex_value = rule->cost;

        if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }

    if (zone.data == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit\" directive: missing \"zone=\": "
                           "expected zone=NAME of a \"ratelimit_zone\"");
        return NGX_CONF_ERROR;
    }

    if (rl_rule_finish(&rule->rule, err, sizeof(err)) != RL_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit\" directive: %s", err);
        return NGX_CONF_ERROR;
    }

    if (key.data == NULL) {
        key = default_key;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));
    ccv.cf = cf;
    ccv.value = &key;
    ccv.complex_value = &rule->key;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    rule->name.data = (u_char *) rule->rule.name;
    rule->name.len = ngx_strlen(rule->rule.name);
    rule->identity = rl_rule_identity(&rule->rule, (char *) key.data, key.len);

    /* a key that is exactly one variable is read without copying it */

    rule->key_index = NGX_ERROR;

    if (key.len > 1 && key.data[0] == '$'
        && ngx_http_script_variables_count(&key) == 1)
    {
        s.data = key.data + 1;
        s.len = key.len - 1;

        for (i = 0; i < s.len; i++) {
            c = s.data[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
                  || (c >= '0' && c <= '9') || c == '_'))
            {
                break;
            }
        }

        if (i == s.len) {
            rule->key_index = ngx_http_get_variable_index(cf, &s);
            if (rule->key_index == NGX_ERROR) {
                return NGX_CONF_ERROR;
            }
        }
    }

    /* the parts of the headers known now */

    rule->limit.data = ngx_pnalloc(cf->pool, NGX_INT64_LEN);
    rule->policy.data = ngx_pnalloc(cf->pool, rule->name.len + 32);
    if (rule->limit.data == NULL || rule->policy.data == NULL) {
        return NGX_CONF_ERROR;
    }

    rule->limit.len = ngx_sprintf(rule->limit.data, "%uD", rule->rule.limit)
                      - rule->limit.data;
    rule->policy.len = ngx_sprintf(rule->policy.data, "\"%V\";q=%uD;w=",
                                   &rule->name, rule->rule.limit)
                       - rule->policy.data;

    /* a zone may be declared after its use; checked in postconfiguration */

    rule->shm_zone = ngx_shared_memory_add(cf, &zone, 0,
                                           &ngx_http_ratelimit_module);
    if (rule->shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    rmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module);

    ref = ngx_array_push(&rmcf->zone_refs);
    if (ref == NULL) {
        return NGX_CONF_ERROR;
    }

    ref->shm_zone = rule->shm_zone;
    ref->file = cf->conf_file->file.name.data;
    ref->line = cf->conf_file->line;
    ref->blob = (uint32_t) (rl_state_size(&rule->rule) - sizeof(rl_state_t));
    ref->rules = &rlcf->rules;
    ref->index = rlcf->rules.nelts - 1;
    rule->stats = -1;

    return NGX_CONF_OK;
}


/* An enum directive whose error names the directive, value and choices. */

static char *
ngx_http_ratelimit_set_enum(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_str_t                  *value;
    ngx_uint_t                 *np, i;
    ngx_conf_enum_t            *e;
    ngx_http_ratelimit_enum_t  *choices;

    np = (ngx_uint_t *) (p + cmd->offset);

    if (*np != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;
    choices = cmd->post;

    for (e = choices->values, i = 0; e[i].name.len != 0; i++) {
        if (e[i].name.len == value[1].len
            && ngx_strcasecmp(e[i].name.data, value[1].data) == 0)
        {
            *np = e[i].value;
            return NGX_CONF_OK;
        }
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive: expected %s",
                       &value[1], &cmd->name, choices->allowed);

    return NGX_CONF_ERROR;
}


static char *
ngx_http_ratelimit_set_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ratelimit_loc_conf_t *rlcf = conf;

    ngx_int_t   status;
    ngx_str_t  *value;

    if (rlcf->status_code != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;
    status = ngx_atoi(value[1].data, value[1].len);

    if (status < 400 || status > 599) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"ratelimit_status\" "
                           "directive: expected a status code from 400 to "
                           "599", &value[1]);
        return NGX_CONF_ERROR;
    }

    rlcf->status_code = status;

    return NGX_CONF_OK;
}


/*
 * A zone's layout (how much of it holds blocks, of which sizes) follows its
 * rules.  Too small a zone for them fails the configuration.  The layout is
 * part of the shared memory zone's name, so a reload that changes it gets a
 * fresh zone from nginx (old workers keep the old one until they exit, and
 * nginx frees it then), while a reload that keeps it keeps the zone.
 */

static ngx_int_t
ngx_http_ratelimit_check_layout(ngx_conf_t *cf, ngx_shm_zone_t *shm_zone)
{
    u_char                     *p;
    size_t                      size;
    uint32_t                    crc;
    ngx_uint_t                  i;
    ngx_http_ratelimit_zone_t  *zone;
    char                        err[RL_ERR_MAX];

    zone = shm_zone->data;
    size = ngx_http_ratelimit_table_size(shm_zone->shm.size);

    if (rl_table_plan(size, zone->blobs.elts, zone->blobs.nelts, err,
                      sizeof(err))
        != RL_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"ratelimit_zone\" directive: zone \"%V\" of size %uz "
                      "is %s, declared in %s:%ui", &zone->name,
                      shm_zone->shm.size, err, zone->file, zone->line);
        return NGX_ERROR;
    }

    if (zone->blobs.nelts == 0 || shm_zone->shm.name.len != zone->name.len) {
        return NGX_OK;   /* no blocks, or named already */
    }

    /* the block sizes, in any order: the layout depends on the set */

    crc = 0;
    for (i = 0; i < zone->blobs.nelts; i++) {
        crc ^= ngx_crc32_short((u_char *) &((uint32_t *) zone->blobs.elts)[i],
                               sizeof(uint32_t));
    }

    p = ngx_pnalloc(cf->pool, zone->name.len + sizeof(" layout=") + 8);
    if (p == NULL) {
        return NGX_ERROR;
    }

    shm_zone->shm.name.data = p;
    shm_zone->shm.name.len = ngx_sprintf(p, "%V layout=%08xD", &zone->name,
                                         crc) - p;

    return NGX_OK;
}


/*
 * A rule of a Redis zone: its arithmetic must stay exact in Lua, and its
 * location's other rules must use the same zone, since one script call
 * decides them all atomically (rules in local zones and in Redis could
 * not be committed together).
 */

static ngx_int_t
ngx_http_ratelimit_check_redis_rule(ngx_conf_t *cf,
    ngx_http_ratelimit_zone_ref_t *ref)
{
    ngx_uint_t                  j;
    ngx_http_ratelimit_rule_t  *rule, *rules;
    ngx_http_ratelimit_zone_t  *zone, *other;
    char                        err[RL_ERR_MAX];

    rules = ref->rules->elts;
    rule = &rules[ref->index];
    zone = ref->shm_zone->data;

    for (j = 0; j < ref->rules->nelts; j++) {
        other = rules[j].shm_zone->data;

        if (other != NULL && other != zone
            && (zone->redis != NULL || other->redis != NULL))
        {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"ratelimit\" directive: zone=%V and zone=%V "
                          "in one location: a location's rules must all use "
                          "the same Redis zone, or only local zones, in "
                          "%s:%ui", &zone->name, &other->name,
                          ref->file, ref->line);
            return NGX_ERROR;
        }
    }

    /* Redis Cluster: a request's keys must share a slot, and they do when
       every rule of the location has the same key (the hash tag) */

    for (j = 0; zone->redis != NULL && zone->redis->cluster
                && j < ref->rules->nelts; j++)
    {
        if (rules[j].key.value.len != rule->key.value.len
            || ngx_strncmp(rules[j].key.value.data, rule->key.value.data,
                           rule->key.value.len) != 0)
        {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"ratelimit\" directive: key=%V and key=%V in one "
                          "location of the Redis Cluster zone=%V: its rules "
                          "must have the same key, so that one request's "
                          "state is in one slot, in %s:%ui",
                          &rule->key.value, &rules[j].key.value, &zone->name,
                          ref->file, ref->line);
            return NGX_ERROR;
        }
    }

    if (zone->redis != NULL
        && rl_redis_rule_ok(&rule->rule, err, sizeof(err)) != RL_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"ratelimit\" directive: rule \"%V\" in zone=%V: "
                      "%s, in %s:%ui", &rule->name, &zone->name, err,
                      ref->file, ref->line);
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_ratelimit_init(ngx_conf_t *cf)
{
    uint32_t                        *blob;
    ngx_uint_t                       i;
    ngx_http_handler_pt             *h;
    ngx_http_ratelimit_zone_t       *zone;
    ngx_http_core_main_conf_t       *cmcf;
    ngx_http_ratelimit_zone_ref_t   *refs;
    ngx_http_ratelimit_main_conf_t  *rmcf;

    rmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module);
    refs = rmcf->zone_refs.elts;

    /* every zone used is declared; each learns its rules' block sizes */

    for (i = 0; i < rmcf->zone_refs.nelts; i++) {
        if (refs[i].shm_zone->data == NULL) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"ratelimit\" directive: zone=%V is not declared: "
                          "expected a \"ratelimit_zone %V SIZE;\" in the http "
                          "block, used in %s:%ui",
                          &refs[i].shm_zone->shm.name,
                          &refs[i].shm_zone->shm.name,
                          refs[i].file, refs[i].line);
            return NGX_ERROR;
        }

        if (refs[i].blob) {
            zone = refs[i].shm_zone->data;
            blob = ngx_array_push(&zone->blobs);
            if (blob == NULL) {
                return NGX_ERROR;
            }

            *blob = refs[i].blob;
        }
    }

    for (i = 0; i < rmcf->zone_refs.nelts; i++) {
        if (ngx_http_ratelimit_check_layout(cf, refs[i].shm_zone) != NGX_OK
            || ngx_http_ratelimit_check_redis_rule(cf, &refs[i]) != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_ratelimit_handler;

    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_ratelimit_header_filter;

    return NGX_OK;
}


/*
 * Each rule's counters in its zone, found by name once, in the master after
 * the zones are set up; workers inherit the slot numbers.
 */

static ngx_int_t
ngx_http_ratelimit_init_module(ngx_cycle_t *cycle)
{
    ngx_uint_t                       i;
    ngx_http_ratelimit_zone_t       *zone;
    ngx_http_ratelimit_rule_t       *rule;
    ngx_http_ratelimit_zone_ref_t   *refs;
    ngx_http_ratelimit_main_conf_t  *rmcf;

    rmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_ratelimit_module);
    if (rmcf == NULL) {
        return NGX_OK;
    }

    refs = rmcf->zone_refs.elts;

    for (i = 0; i < rmcf->zone_refs.nelts; i++) {
        rule = (ngx_http_ratelimit_rule_t *) refs[i].rules->elts
               + refs[i].index;
        zone = refs[i].shm_zone->data;

        ngx_shmtx_lock(&zone->shpool->mutex);
        rule->stats = rl_table_rule_slot(zone->table, rule->rule.name);
        ngx_shmtx_unlock(&zone->shpool->mutex);

        if (rule->stats < 0) {
            ngx_log_error(NGX_LOG_WARN, cycle->log, 0,
                          "ratelimit_zone \"%V\" counts %d rule names "
                          "already: rule \"%V\" is not counted in "
                          "ratelimit_stats", &zone->name, RL_RULE_STATS_MAX,
                          &rule->name);
        }
    }

    return NGX_OK;
}


/* A worker's Redis connections are closed as it exits. */

static void
ngx_http_ratelimit_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                       i;
    ngx_http_ratelimit_zone_t       *zone;
    ngx_http_ratelimit_zone_ref_t   *refs;
    ngx_http_ratelimit_main_conf_t  *rmcf;

    if (ngx_get_conf(cycle->conf_ctx, ngx_http_module) == NULL) {
        return;
    }

    rmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_ratelimit_module);
    if (rmcf == NULL) {
        return;
    }

    refs = rmcf->zone_refs.elts;

    for (i = 0; i < rmcf->zone_refs.nelts; i++) {
        zone = refs[i].shm_zone->data;

        if (zone->redis != NULL) {
            ngx_http_ratelimit_redis_close(zone->redis);
        }
    }
}


static char *
ngx_http_ratelimit_stats(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_ratelimit_stats_handler;

    return NGX_CONF_OK;
}


/* A zone's figures, read once for both formats. */

struct ngx_http_ratelimit_snapshot_s {
    ngx_str_t                    name;
    rl_table_stats_t             table;
    uint64_t                     used;
    size_t                       nrules;
    rl_rule_stats_t              rules[RL_RULE_STATS_MAX];
    ngx_http_ratelimit_redis_t  *redis;     /* NULL: a local zone */
    ngx_http_ratelimit_redis_stats_t  rs;
};


/* the Redis counters, in the order of ngx_http_ratelimit_redis_stats_t */
static const char  *ngx_http_ratelimit_redis_counters[] = {
    "decisions", "errors", "timeouts", "fallbacks", "reconnects"
};

static const char  *ngx_http_ratelimit_redis_counter_help[] = {
    "Requests decided in Redis.",
    "Redis error replies and lost connections.",
    "Requests with no Redis reply within redis_timeout.",
    "Requests decided by on_redis_error.",
    "Connections opened to Redis."
};


static const char  *ngx_http_ratelimit_outcomes[] = {
    "allowed", "rejected", "delayed", "dry_run_rejected", "exempt"
};

static const char  *ngx_http_ratelimit_outcome_help[] = {
    "Requests that passed and spent at the rule.",
    "Requests rejected, the rule denying them.",
    "Requests delayed by the rule.",
    "Requests the rule would have rejected (dry run).",
    "Requests exempt from the rule (empty key).",
};


/* A name inside double quotes, in JSON and in Prometheus labels alike. */

static u_char *
ngx_http_ratelimit_quoted(u_char *p, ngx_str_t *name)
{
    size_t  i;

    *p++ = '"';

    for (i = 0; i < name->len; i++) {
        if (name->data[i] == '"' || name->data[i] == '\\') {
            *p++ = '\\';
        }

        *p++ = name->data[i] < 0x20 ? '?' : name->data[i];
    }

    *p++ = '"';

    return p;
}


static u_char *
ngx_http_ratelimit_stats_json_redis(u_char *p, ngx_http_ratelimit_snapshot_t *z)
{
    ngx_uint_t     k;
    ngx_atomic_t  *counter = &z->rs.decisions;

    p = ngx_cpymem(p, ",\"redis\":{\"server\":", 19);
    p = ngx_http_ratelimit_quoted(p, &z->redis->server);

    for (k = 0; k < 5; k++) {
        p = ngx_sprintf(p, ",\"%s\":%uA", ngx_http_ratelimit_redis_counters[k],
                        counter[k]);
    }

    p = ngx_cpymem(p, ",\"latency_us\":{", 15);

    for (k = 0; k < NGX_HTTP_RATELIMIT_REDIS_BUCKETS; k++) {
        p = ngx_sprintf(p, "\"le_%ui\":%uA,",
                        ngx_http_ratelimit_redis_bucket_us[k], z->rs.latency[k]);
    }

    return ngx_sprintf(p, "\"inf\":%uA},\"latency_us_sum\":%uA}",
                       z->rs.latency[k], z->rs.latency_us);
}


static u_char *
ngx_http_ratelimit_stats_json(u_char *p, ngx_http_ratelimit_snapshot_t *z,
    ngx_uint_t nz)
{
    size_t      k, o;
    ngx_str_t   rule;
    ngx_uint_t  i;

    p = ngx_sprintf(p, "{\"version\":\"%s\",\"zones\":{",
                    NGX_HTTP_RATELIMIT_VERSION);

    for (i = 0; i < nz; i++) {
        p = ngx_http_ratelimit_quoted(p, &z[i].name);
        p = ngx_sprintf(p, ":{\"size\":%uL,\"bytes_used\":%uL,\"keys\":%uL,"
                        "\"capacity\":%uL,\"evictions\":%uL,"
                        "\"live_evictions\":%uL,\"rules\":{",
                        z[i].table.size, z[i].used, z[i].table.keys,
                        z[i].table.capacity, z[i].table.evictions,
                        z[i].table.live_evictions);

        for (k = 0; k < z[i].nrules; k++) {
            rule.data = (u_char *) z[i].rules[k].name;
            rule.len = ngx_strlen(z[i].rules[k].name);
            p = ngx_http_ratelimit_quoted(p, &rule);
            *p++ = ':';

            for (o = 0; o < RL_OUTCOMES; o++) {
                p = ngx_sprintf(p, "%c\"%s\":%uL", o ? ',' : '{',
                                ngx_http_ratelimit_outcomes[o],
                                z[i].rules[k].count[o]);
            }

            *p++ = '}';
            if (k + 1 < z[i].nrules) {
                *p++ = ',';
            }
        }

        *p++ = '}';

        if (z[i].redis) {
            p = ngx_http_ratelimit_stats_json_redis(p, &z[i]);
        }

        *p++ = '}';
        if (i + 1 < nz) {
            *p++ = ',';
        }
    }

    return ngx_cpymem(p, "}}\n", 3);
}


/* The Prometheus text exposition format, version 0.0.4. */

static u_char *
ngx_http_ratelimit_stats_prometheus(u_char *p,
    ngx_http_ratelimit_snapshot_t *z, ngx_uint_t nz)
{
    size_t      k, m, o;
    uint64_t    v;
    ngx_str_t   rule;
    ngx_uint_t  i;

    static const struct {
        const char  *name;
        const char  *type;
        const char  *help;
    } zone_metrics[] = {
        { "zone_size_bytes", "gauge", "Size of the zone." },
        { "zone_used_bytes", "gauge", "Bytes of the zone holding keys." },
        { "zone_keys", "gauge", "Keys held in the zone." },
        { "zone_capacity_keys", "gauge", "Key slots of the zone." },
        { "zone_evictions_total", "counter",
          "Keys evicted to make room." },
        { "zone_live_evictions_total", "counter",
          "Keys evicted before they were back to full budget." },
    };

    for (m = 0; m < sizeof(zone_metrics) / sizeof(zone_metrics[0]); m++) {
        p = ngx_sprintf(p, "# HELP nginx_ratelimit_%s %s\n"
                        "# TYPE nginx_ratelimit_%s %s\n",
                        zone_metrics[m].name, zone_metrics[m].help,
                        zone_metrics[m].name, zone_metrics[m].type);

        for (i = 0; i < nz; i++) {
            v = m == 0 ? z[i].table.size : m == 1 ? z[i].used
                : m == 2 ? z[i].table.keys : m == 3 ? z[i].table.capacity
                : m == 4 ? z[i].table.evictions : z[i].table.live_evictions;

            p = ngx_sprintf(p, "nginx_ratelimit_%s{zone=",
                            zone_metrics[m].name);
            p = ngx_http_ratelimit_quoted(p, &z[i].name);
            p = ngx_sprintf(p, "} %uL\n", v);
        }
    }

    for (o = 0; o < RL_OUTCOMES; o++) {
        p = ngx_sprintf(p, "# HELP nginx_ratelimit_%s_total %s\n"
                        "# TYPE nginx_ratelimit_%s_total counter\n",
                        ngx_http_ratelimit_outcomes[o],
                        ngx_http_ratelimit_outcome_help[o],
                        ngx_http_ratelimit_outcomes[o]);

        for (i = 0; i < nz; i++) {
            for (k = 0; k < z[i].nrules; k++) {
                rule.data = (u_char *) z[i].rules[k].name;
                rule.len = ngx_strlen(z[i].rules[k].name);

                p = ngx_sprintf(p, "nginx_ratelimit_%s_total{zone=",
                                ngx_http_ratelimit_outcomes[o]);
                p = ngx_http_ratelimit_quoted(p, &z[i].name);
                p = ngx_cpymem(p, ",rule=", 6);
                p = ngx_http_ratelimit_quoted(p, &rule);
                p = ngx_sprintf(p, "} %uL\n", z[i].rules[k].count[o]);
            }
        }
    }

    return ngx_http_ratelimit_stats_prometheus_redis(p, z, nz);
}


/* Redis counters and a latency histogram, for the zones with redis= */

static u_char *
ngx_http_ratelimit_stats_prometheus_redis(u_char *p,
    ngx_http_ratelimit_snapshot_t *z, ngx_uint_t nz)
{
    ngx_uint_t    i, k;
    ngx_atomic_t  sum;

    for (i = 0; i < nz && z[i].redis == NULL; i++) { /* void */ }

    if (i == nz) {
        return p;   /* no zone uses Redis */
    }

    for (k = 0; k < 5; k++) {
        p = ngx_sprintf(p, "# HELP nginx_ratelimit_redis_%s_total %s\n"
                        "# TYPE nginx_ratelimit_redis_%s_total counter\n",
                        ngx_http_ratelimit_redis_counters[k],
                        ngx_http_ratelimit_redis_counter_help[k],
                        ngx_http_ratelimit_redis_counters[k]);

        for (i = 0; i < nz; i++) {
            if (z[i].redis) {
                p = ngx_sprintf(p, "nginx_ratelimit_redis_%s_total{zone=",
                                ngx_http_ratelimit_redis_counters[k]);
                p = ngx_http_ratelimit_quoted(p, &z[i].name);
                p = ngx_sprintf(p, "} %uA\n", (&z[i].rs.decisions)[k]);
            }
        }
    }

    p = ngx_cpymem(p, "# HELP nginx_ratelimit_redis_latency_seconds Time from "
                   "sending a request's script call to its reply.\n"
                   "# TYPE nginx_ratelimit_redis_latency_seconds histogram\n",
                   156);

    for (i = 0; i < nz; i++) {
        if (z[i].redis == NULL) {
            continue;
        }

        sum = 0;

        for (k = 0; k <= NGX_HTTP_RATELIMIT_REDIS_BUCKETS; k++) {
            sum += z[i].rs.latency[k];
            p = ngx_cpymem(p, "nginx_ratelimit_redis_latency_seconds_bucket"
                           "{zone=", 50);
            p = ngx_http_ratelimit_quoted(p, &z[i].name);

            if (k < NGX_HTTP_RATELIMIT_REDIS_BUCKETS) {
                p = ngx_sprintf(p, ",le=\"%ui.%06ui\"} %uA\n",
                                ngx_http_ratelimit_redis_bucket_us[k] / 1000000,
                                ngx_http_ratelimit_redis_bucket_us[k] % 1000000,
                                sum);

            } else {
                p = ngx_sprintf(p, ",le=\"+Inf\"} %uA\n", sum);
            }
        }

        p = ngx_cpymem(p, "nginx_ratelimit_redis_latency_seconds_sum{zone=",
                       47);
        p = ngx_http_ratelimit_quoted(p, &z[i].name);
        p = ngx_sprintf(p, "} %uA.%06uA\n", z[i].rs.latency_us / 1000000,
                        z[i].rs.latency_us % 1000000);
        p = ngx_cpymem(p, "nginx_ratelimit_redis_latency_seconds_count{zone=",
                       49);
        p = ngx_http_ratelimit_quoted(p, &z[i].name);
        p = ngx_sprintf(p, "} %uA\n", sum);
    }

    return p;
}


/* The n-th zone of this module in the running cycle, or NULL. */

static ngx_shm_zone_t *
ngx_http_ratelimit_stats_zone(ngx_uint_t n)
{
    ngx_uint_t                  i;
    ngx_shm_zone_t             *shm;
    ngx_list_part_t            *part;
    ngx_http_ratelimit_zone_t  *zone;

    part = (ngx_list_part_t *) &ngx_cycle->shared_memory.part;

    for (shm = part->elts, i = 0; /* void */ ; i++) {
        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }
            part = part->next;
            shm = part->elts;
            i = 0;
        }

        zone = shm[i].data;

        if (shm[i].tag == &ngx_http_ratelimit_module && zone != NULL
            && zone->table != NULL && n-- == 0)
        {
            return &shm[i];
        }
    }
}


static ngx_int_t
ngx_http_ratelimit_stats_handler(ngx_http_request_t *r)
{
    size_t                          len;
    u_char                         *p;
    ngx_int_t                       rc;
    ngx_buf_t                      *b;
    ngx_str_t                       format;
    ngx_uint_t                      i, nz, prometheus;
    ngx_chain_t                     out;
    ngx_shm_zone_t                 *shm;
    ngx_http_ratelimit_zone_t      *zone;
    ngx_http_ratelimit_snapshot_t  *z;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    prometheus = ngx_http_arg(r, (u_char *) "format", 6, &format) == NGX_OK
                 && format.len == 10
                 && ngx_strncmp(format.data, "prometheus", 10) == 0;

    /* a snapshot of every zone of this module, read without the locks */

    for (nz = 0; ngx_http_ratelimit_stats_zone(nz) != NULL; nz++) {
        /* void */
    }

    z = ngx_palloc(r->pool, (nz + 1) * sizeof(ngx_http_ratelimit_snapshot_t));
    if (z == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = 0;

    for (i = 0; i < nz; i++) {
        shm = ngx_http_ratelimit_stats_zone(i);
        zone = shm->data;

        z[i].name = zone->name;
        rl_table_get_stats(zone->table, &z[i].table);
        z[i].table.size = shm->shm.size;
        z[i].used = rl_table_bytes_used(zone->table);
        z[i].nrules = rl_table_rule_stats(zone->table, z[i].rules,
                                          RL_RULE_STATS_MAX);
        z[i].redis = zone->redis;

        if (zone->redis) {
            z[i].rs = *zone->redis->stats;
            len += 2048 + 2 * zone->redis->server.len;
        }

        /* room for every line of the zone, names escaped */
        len += (11 + 11 * z[i].nrules) * (2 * zone->name.len + 2 * RL_NAME_MAX
                                           + 160);
    }

    len += 4096;

    b = ngx_create_temp_buf(r->pool, len);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = prometheus ? ngx_http_ratelimit_stats_prometheus(b->last, z, nz)
                   : ngx_http_ratelimit_stats_json(b->last, z, nz);
    b->last = p;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = b->last - b->pos;
    if (prometheus) {
        ngx_str_set(&r->headers_out.content_type, "text/plain; version=0.0.4");

    } else {
        ngx_str_set(&r->headers_out.content_type, "application/json");
    }

    r->headers_out.content_type_len = r->headers_out.content_type.len;

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}
