
/*
 * ngx-ratelimit: the Redis parameters of ratelimit_zone, from a table: each
 * parameter's name, parser, field, range, and what its error message says
 * is allowed.  A parameter given twice is an error.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_sha1.h>

#include "ngx_ratelimit_redis_conf.h"
#include "ngx_ratelimit_file.h"
#include "ngx_ratelimit_redis_tls.h"


typedef struct ngx_ratelimit_redis_param_s
    ngx_ratelimit_redis_param_t;

/* NULL if the value is valid (and set), else why not ("" for no more than
   what it expects) */
typedef const char *(*ngx_ratelimit_redis_parse_pt)(ngx_conf_t *cf,
    ngx_str_t *value, void *field, ngx_ratelimit_redis_param_t *p);

struct ngx_ratelimit_redis_param_s {
    ngx_str_t                           name;
    ngx_ratelimit_redis_parse_pt        parse;
    size_t                              offset;
    ngx_uint_t                          min;     /* a number's range, or a */
    ngx_uint_t                          max;     /* string's length's */
    ngx_conf_enum_t                    *values;  /* for an enum */
    const char                         *expected;
};


static const char *ngx_ratelimit_redis_server(ngx_conf_t *cf,
    ngx_str_t *value, void *field, ngx_ratelimit_redis_param_t *p);
static const char *ngx_ratelimit_redis_msec(ngx_conf_t *cf,
    ngx_str_t *value, void *field, ngx_ratelimit_redis_param_t *p);
static const char *ngx_ratelimit_redis_number(ngx_conf_t *cf,
    ngx_str_t *value, void *field, ngx_ratelimit_redis_param_t *p);
static const char *ngx_ratelimit_redis_string(ngx_conf_t *cf,
    ngx_str_t *value, void *field, ngx_ratelimit_redis_param_t *p);
static const char *ngx_ratelimit_redis_enum(ngx_conf_t *cf,
    ngx_str_t *value, void *field, ngx_ratelimit_redis_param_t *p);
static const char *ngx_ratelimit_redis_name(ngx_conf_t *cf,
    ngx_str_t *value, void *field, ngx_ratelimit_redis_param_t *p);
static char *ngx_ratelimit_redis_together(ngx_conf_t *cf,
    ngx_ratelimit_redis_t *redis, ngx_str_t *zone);
static ngx_uint_t ngx_ratelimit_redis_given(
    ngx_ratelimit_redis_t *redis, const char *name);
static char *ngx_ratelimit_redis_read_password(ngx_conf_t *cf,
    ngx_ratelimit_redis_t *redis, ngx_str_t *zone);


static ngx_conf_enum_t  ngx_ratelimit_redis_switch[] = {
    { ngx_string("on"), 1 },
    { ngx_string("off"), 0 },
    { ngx_null_string, 0 }
};

static ngx_conf_enum_t  ngx_ratelimit_redis_on_error[] = {
    { ngx_string("local"), NGX_RATELIMIT_REDIS_LOCAL },
    { ngx_string("allow"), NGX_RATELIMIT_REDIS_ALLOW },
    { ngx_string("deny"), NGX_RATELIMIT_REDIS_DENY },
    { ngx_null_string, 0 }
};


#define ngx_ratelimit_redis_field(f)                                          \
    offsetof(ngx_ratelimit_redis_t, f)

static ngx_ratelimit_redis_param_t  ngx_ratelimit_redis_params[] = {

    { ngx_string("redis"), ngx_ratelimit_redis_server, 0, 0, 0, NULL,
      "redis=HOST:PORT" },

    { ngx_string("redis_timeout"), ngx_ratelimit_redis_msec,
      ngx_ratelimit_redis_field(timeout), 1, 60000, NULL,
      "redis_timeout=1ms..60s" },

    { ngx_string("redis_pool"), ngx_ratelimit_redis_number,
      ngx_ratelimit_redis_field(pool), 1, 64, NULL,
      "redis_pool=1..64" },

    { ngx_string("redis_password"), ngx_ratelimit_redis_string,
      ngx_ratelimit_redis_field(password), 1, 4096, NULL,
      "a non-empty redis_password" },

    { ngx_string("redis_password_file"), ngx_ratelimit_redis_string,
      ngx_ratelimit_redis_field(password_file), 1, 4096, NULL,
      "redis_password_file=FILE" },

    { ngx_string("redis_user"), ngx_ratelimit_redis_string,
      ngx_ratelimit_redis_field(user), 1, 256, NULL,
      "redis_user=NAME of 1 to 256 bytes" },

    { ngx_string("redis_db"), ngx_ratelimit_redis_number,
      ngx_ratelimit_redis_field(db), 0, 65535, NULL,
      "redis_db=0..65535" },

    { ngx_string("redis_prefix"), ngx_ratelimit_redis_string,
      ngx_ratelimit_redis_field(prefix), 0, 256, NULL,
      "redis_prefix of at most 256 bytes" },

    { ngx_string("redis_cluster"), ngx_ratelimit_redis_enum,
      ngx_ratelimit_redis_field(cluster), 0, 0,
      ngx_ratelimit_redis_switch, "redis_cluster=on|off" },

    { ngx_string("redis_tls"), ngx_ratelimit_redis_enum,
      ngx_ratelimit_redis_field(tls), 0, 0,
      ngx_ratelimit_redis_switch, "redis_tls=on|off" },

    { ngx_string("redis_tls_verify"), ngx_ratelimit_redis_enum,
      ngx_ratelimit_redis_field(tls_verify), 0, 0,
      ngx_ratelimit_redis_switch, "redis_tls_verify=on|off" },

    { ngx_string("redis_tls_ca"), ngx_ratelimit_redis_string,
      ngx_ratelimit_redis_field(tls_ca), 1, 4096, NULL,
      "redis_tls_ca=FILE (PEM certificates)" },

    { ngx_string("redis_tls_name"), ngx_ratelimit_redis_name,
      ngx_ratelimit_redis_field(tls_name), 1, 253, NULL,
      "redis_tls_name=NAME, a host name or an IP address" },

    { ngx_string("redis_tls_cert"), ngx_ratelimit_redis_string,
      ngx_ratelimit_redis_field(tls_cert), 1, 4096, NULL,
      "redis_tls_cert=FILE (a PEM certificate)" },

    { ngx_string("redis_tls_key"), ngx_ratelimit_redis_string,
      ngx_ratelimit_redis_field(tls_key), 1, 4096, NULL,
      "redis_tls_key=FILE (a PEM private key)" },

    { ngx_string("on_redis_error"), ngx_ratelimit_redis_enum,
      ngx_ratelimit_redis_field(on_error), 0, 0,
      ngx_ratelimit_redis_on_error, "on_redis_error=local|allow|deny" },

    { ngx_null_string, NULL, 0, 0, 0, NULL, NULL }
};


ngx_int_t
ngx_ratelimit_redis_param(ngx_conf_t *cf,
    ngx_ratelimit_redis_t **redisp, ngx_str_t *param, ngx_str_t *zone)
{
    u_char                       *eq, *last;
    u_char                        names[512];
    ngx_str_t                     name, value;
    const char                   *why;
    ngx_uint_t                    i;
    ngx_ratelimit_redis_t        *redis;
    ngx_ratelimit_redis_param_t  *p;

    eq = ngx_strlchr(param->data, param->data + param->len, '=');
    if (eq == NULL) {
        return NGX_DECLINED;
    }

    name.data = param->data;
    name.len = eq - param->data;
    value.data = eq + 1;
    value.len = param->data + param->len - value.data;

    p = ngx_ratelimit_redis_params;

    for (i = 0; p[i].name.len; i++) {
        if (p[i].name.len == name.len
            && ngx_strncmp(p[i].name.data, name.data, name.len) == 0)
        {
            break;
        }
    }

    if (p[i].name.len == 0) {
        if (!(name.len > 6 && ngx_strncmp(name.data, "redis_", 6) == 0)) {
            return NGX_DECLINED;   /* not one of ours: the caller says so */
        }

        last = names;

        for (i = 0; p[i].name.len; i++) {
            last = ngx_slprintf(last, names + sizeof(names), "%s%V=",
                                i == 0 ? "" : p[i + 1].name.len ? ", "
                                                                : " or ",
                                &p[i].name);
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: unknown parameter "
                           "\"%V\" of zone \"%V\": expected %*s", param, zone,
                           last - names, names);
        return NGX_ERROR;
    }

    redis = *redisp;

    if (redis == NULL) {
        redis = ngx_pcalloc(cf->pool, sizeof(ngx_ratelimit_redis_t));
        if (redis == NULL) {
            return NGX_ERROR;
        }

        redis->timeout = NGX_CONF_UNSET_MSEC;
        redis->pool = NGX_CONF_UNSET_UINT;
        redis->db = NGX_CONF_UNSET_UINT;
        redis->on_error = NGX_CONF_UNSET_UINT;
        redis->tls_verify = NGX_CONF_UNSET_UINT;
        *redisp = redis;
    }

    if (redis->given & (1 << i)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: duplicate "
                           "parameter \"%V\" of zone \"%V\": each parameter "
                           "may be given once", param, zone);
        return NGX_ERROR;
    }

    redis->given |= 1 << i;

    why = p[i].parse(cf, &value, (u_char *) redis + p[i].offset, &p[i]);

    if (why != NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: invalid \"%V\" of "
                           "zone \"%V\": %s%sexpected %s", param, zone, why,
                           *why ? "; " : "", p[i].expected);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* redis=HOST:PORT, resolved now: no DNS at request time. */

static const char *
ngx_ratelimit_redis_server(ngx_conf_t *cf, ngx_str_t *value,
    void *field, ngx_ratelimit_redis_param_t *p)
{
    ngx_url_t               u;
    ngx_ratelimit_redis_t  *redis = field;

    ngx_memzero(&u, sizeof(ngx_url_t));
    u.url = *value;
    u.no_resolve = 0;

    if (value->len == 0 || ngx_parse_url(cf->pool, &u) != NGX_OK
        || u.no_port || u.naddrs == 0)
    {
        return u.err ? u.err : u.no_port ? "no port" : "no address";
    }

    redis->server = *value;
    redis->host = u.host;

    if (u.host.len > 2 && u.host.data[0] == '[') {   /* [IPv6] */
        redis->host.data++;
        redis->host.len -= 2;
    }

    redis->addrs = u.addrs;
    redis->naddrs = u.naddrs;

    return NULL;
}


static const char *
ngx_ratelimit_redis_msec(ngx_conf_t *cf, ngx_str_t *value, void *field,
    ngx_ratelimit_redis_param_t *p)
{
    ngx_int_t  n;

    n = ngx_parse_time(value, 0);

    if (n == NGX_ERROR || (ngx_uint_t) n < p->min || (ngx_uint_t) n > p->max) {
        return "";
    }

    *(ngx_msec_t *) field = (ngx_msec_t) n;

    return NULL;
}


static const char *
ngx_ratelimit_redis_number(ngx_conf_t *cf, ngx_str_t *value,
    void *field, ngx_ratelimit_redis_param_t *p)
{
    ngx_int_t  n;

    n = ngx_atoi(value->data, value->len);

    if (n == NGX_ERROR || (ngx_uint_t) n < p->min || (ngx_uint_t) n > p->max) {
        return "";
    }

    *(ngx_uint_t *) field = n;

    return NULL;
}


static const char *
ngx_ratelimit_redis_string(ngx_conf_t *cf, ngx_str_t *value,
    void *field, ngx_ratelimit_redis_param_t *p)
{
    if (value->len < p->min || value->len > p->max) {
        return "";
    }

    *(ngx_str_t *) field = *value;

    return NULL;
}


static const char *
ngx_ratelimit_redis_enum(ngx_conf_t *cf, ngx_str_t *value, void *field,
    ngx_ratelimit_redis_param_t *p)
{
    ngx_conf_enum_t  *e;

    for (e = p->values; e->name.len; e++) {
        if (e->name.len == value->len
            && ngx_strncmp(e->name.data, value->data, value->len) == 0)
        {
            *(ngx_uint_t *) field = e->value;
            return NULL;
        }
    }

    return "";
}


/*
 * redis_tls_name: the name the server's certificate must hold, sent as SNI
 * unless it is an address; kept NUL-terminated for OpenSSL.
 */

static const char *
ngx_ratelimit_redis_name(ngx_conf_t *cf, ngx_str_t *value, void *field,
    ngx_ratelimit_redis_param_t *p)
{
    u_char     *c;
    ngx_str_t  *name = field;

    if (value->len < p->min || value->len > p->max) {
        return "";
    }

    for (c = value->data; c < value->data + value->len; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')
              || (*c >= '0' && *c <= '9')
              || *c == '.' || *c == '-' || *c == '_' || *c == ':'))
        {
            return "a character not in a host name or an address";
        }
    }

    name->data = ngx_pnalloc(cf->pool, value->len + 1);
    if (name->data == NULL) {
        return "out of memory";
    }

    ngx_memcpy(name->data, value->data, value->len);
    name->data[value->len] = '\0';
    name->len = value->len;

    return NULL;
}


/* The parameters together, once the directive is read. */

char *
ngx_ratelimit_redis_finish(ngx_conf_t *cf, ngx_ratelimit_conf_t *conf,
    ngx_ratelimit_redis_t *redis, ngx_str_t *zone)
{
    size_t         len;
    u_char         digest[20];
    const char    *script;
    ngx_sha1_t     sha1;

    if (redis->server.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: zone \"%V\" has "
                           "Redis parameters but no redis=HOST:PORT", zone);
        return NGX_CONF_ERROR;
    }

    redis->zone = *zone;
    redis->resolver = conf->resolver;
    redis->resolver_timeout = conf->resolver_timeout;

    ngx_conf_init_msec_value(redis->timeout, 50);
    ngx_conf_init_uint_value(redis->pool, 2);
    ngx_conf_init_uint_value(redis->db, 0);
    ngx_conf_init_uint_value(redis->on_error, NGX_RATELIMIT_REDIS_LOCAL);

    if (redis->prefix.data == NULL) {
        ngx_str_set(&redis->prefix, "ratelimit:");
    }

    /* a brace in the prefix would take the place of the keys' hash tag */

    if (redis->cluster
        && (ngx_strlchr(redis->prefix.data,
                        redis->prefix.data + redis->prefix.len, '{')
            || ngx_strlchr(redis->prefix.data,
                           redis->prefix.data + redis->prefix.len, '}')))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: invalid "
                           "\"redis_prefix=%V\" of zone \"%V\": a Redis "
                           "Cluster zone's prefix may not hold \"{\" or \"}\"",
                           &redis->prefix, zone);
        return NGX_CONF_ERROR;
    }

    if (redis->cluster && redis->db) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: \"redis_db=%ui\" "
                           "of zone \"%V\": Redis Cluster has database 0 "
                           "only", redis->db, zone);
        return NGX_CONF_ERROR;
    }

    if (ngx_ratelimit_redis_together(cf, redis, zone) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    /* EVALSHA names the script by its SHA-1 */

    script = rl_redis_script(&len);
    ngx_sha1_init(&sha1);
    ngx_sha1_update(&sha1, script, len);
    ngx_sha1_final(digest, &sha1);
    ngx_hex_dump(redis->sha, digest, sizeof(digest));

    return NGX_CONF_OK;
}


/* The TLS and ACL parameters: what each needs, the password file read. */

static char *
ngx_ratelimit_redis_together(ngx_conf_t *cf,
    ngx_ratelimit_redis_t *redis, ngx_str_t *zone)
{
    ngx_uint_t   i;
    const char  *without;

    static const char  *tls_params[] = {
        "redis_tls_verify", "redis_tls_ca", "redis_tls_name",
        "redis_tls_cert", "redis_tls_key", NULL
    };

    if (redis->password.len && redis->password_file.len) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: zone \"%V\" has "
                           "both redis_password= and redis_password_file=: "
                           "give one", zone);
        return NGX_CONF_ERROR;
    }

    if (redis->password_file.len
        && ngx_ratelimit_redis_read_password(cf, redis, zone)
           != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (redis->user.len && redis->password.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: \"redis_user=%V\" "
                           "of zone \"%V\" needs redis_password= or "
                           "redis_password_file= (AUTH user password)",
                           &redis->user, zone);
        return NGX_CONF_ERROR;
    }

    if (!redis->tls) {
        for (i = 0; tls_params[i]; i++) {
            if (ngx_ratelimit_redis_given(redis, tls_params[i])) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "\"ratelimit_zone\" directive: %s= of "
                                   "zone \"%V\" needs redis_tls=on",
                                   tls_params[i], zone);
                return NGX_CONF_ERROR;
            }
        }

        return NGX_CONF_OK;
    }

    without = redis->tls_cert.len && redis->tls_key.len == 0
              ? "redis_tls_cert= without redis_tls_key="
              : redis->tls_key.len && redis->tls_cert.len == 0
                ? "redis_tls_key= without redis_tls_cert=" : NULL;

    if (without) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: zone \"%V\" has "
                           "%s: a client certificate needs both", zone,
                           without);
        return NGX_CONF_ERROR;
    }

    ngx_conf_init_uint_value(redis->tls_verify, 1);

    if (redis->tls_name.len == 0) {
        redis->tls_name_host = 1;
        redis->tls_name.data = ngx_pnalloc(cf->pool, redis->host.len + 1);
        if (redis->tls_name.data == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_memcpy(redis->tls_name.data, redis->host.data, redis->host.len);
        redis->tls_name.data[redis->host.len] = '\0';
        redis->tls_name.len = redis->host.len;
    }

    return ngx_ratelimit_redis_tls_conf(cf, redis);
}


/* 1 if the parameter named was given. */

static ngx_uint_t
ngx_ratelimit_redis_given(ngx_ratelimit_redis_t *redis,
    const char *name)
{
    ngx_uint_t                    i;
    ngx_ratelimit_redis_param_t  *p;

    p = ngx_ratelimit_redis_params;

    for (i = 0; p[i].name.len; i++) {
        if (ngx_strcmp(p[i].name.data, name) == 0) {
            return (redis->given >> i) & 1;
        }
    }

    return 0;
}


/*
 * redis_password_file: read now (and again on every reload), so the
 * secret need not sit in nginx.conf.  One line; its newline is not part of
 * the password.
 */

static char *
ngx_ratelimit_redis_read_password(ngx_conf_t *cf,
    ngx_ratelimit_redis_t *redis, ngx_str_t *zone)
{
    u_char           *buf;
    ssize_t           n;
    ngx_fd_t          fd;
    ngx_str_t         file;
    const char       *why;
    ngx_err_t         err;
    ngx_file_info_t   fi;

    file = redis->password_file;

    if (ngx_conf_full_name(cf->cycle, &file, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    buf = ngx_pnalloc(cf->pool, 4096 + 3);
    if (buf == NULL) {
        return NGX_CONF_ERROR;
    }

    /* a regular file (a FIFO would hold nginx -t and a reload) */

    fd = ngx_ratelimit_file_open(file.data, 1, &fi, &err, &why);

    if (fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, err,
                           "\"ratelimit_zone\" directive: "
                           "\"redis_password_file=%V\" of zone \"%V\": "
                           "cannot open \"%V\"%s%s", &redis->password_file,
                           zone, &file, why ? ": it " : "", why ? why : "");
        return NGX_CONF_ERROR;
    }

    n = ngx_read_fd(fd, buf, 4096 + 3);
    err = ngx_errno;

    (void) ngx_close_file(fd);

    if (n == -1) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, err,
                           "\"ratelimit_zone\" directive: "
                           "\"redis_password_file=%V\" of zone \"%V\": "
                           "cannot read \"%V\"", &redis->password_file, zone,
                           &file);
        return NGX_CONF_ERROR;
    }

    if (n > 0 && buf[n - 1] == '\n') {
        n--;

        if (n > 0 && buf[n - 1] == '\r') {
            n--;
        }
    }

    why = n == 0 ? "it is empty"
          : n > 4096 ? "a password is at most 4096 bytes"
          : ngx_strlchr(buf, buf + n, '\n') || ngx_strlchr(buf, buf + n, '\r')
            ? "it holds more than one line" : NULL;

    if (why) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ratelimit_zone\" directive: "
                           "\"redis_password_file=%V\" of zone \"%V\": %s; "
                           "expected a file of one line, the password",
                           &redis->password_file, zone, why);
        return NGX_CONF_ERROR;
    }

    redis->password.data = buf;
    redis->password.len = n;

    return NGX_CONF_OK;
}
