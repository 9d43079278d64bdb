
/*
 * ngx-ratelimit: the files a zone keeps (its state file, its overrides
 * file), read and written in a directory others may write
 * (ngx_ratelimit_file.c).
 */

#ifndef NGX_RATELIMIT_FILE_H
#define NGX_RATELIMIT_FILE_H


#include "ngx_ratelimit_types.h"


/* A file being written: its temporary file, until renamed or discarded. */
typedef struct {
    u_char                      *tmp;       /* its name; NULL: none */
    ngx_fd_t                     fd;
    ngx_err_t                    err;       /* the failure's, or 0 */
} ngx_ratelimit_file_t;

/* A zone's file read whole as the zone starts (ngx_ratelimit_file_read). */
typedef struct {
    ngx_str_t                   *zone;      /* its name */
    const char                  *what;      /* "state file", ... */
    ngx_str_t                   *name;
    off_t                        max;       /* a larger file is not read */
    const char                  *bound;     /* what max is for */
    const char                  *instead;   /* what the zone starts with */
} ngx_ratelimit_file_read_t;


ngx_fd_t ngx_ratelimit_file_open(u_char *name, ngx_uint_t follow,
    ngx_file_info_t *fi, ngx_err_t *err, const char **why);
u_char *ngx_ratelimit_file_read(ngx_ratelimit_file_read_t *rd, ssize_t *n,
    ngx_log_t *log);
ngx_int_t ngx_ratelimit_file_create(ngx_ratelimit_file_t *f,
    ngx_str_t *name, ngx_uint_t access, ngx_log_t *log);
ngx_int_t ngx_ratelimit_file_write(ngx_ratelimit_file_t *f,
    u_char *buf, size_t len);
ngx_int_t ngx_ratelimit_file_close(ngx_ratelimit_file_t *f);
ngx_int_t ngx_ratelimit_file_rename(ngx_ratelimit_file_t *f,
    ngx_str_t *name);
void ngx_ratelimit_file_discard(ngx_ratelimit_file_t *f);
ngx_uint_t ngx_ratelimit_file_same(ngx_str_t *a, ngx_str_t *b);


#endif /* NGX_RATELIMIT_FILE_H */
