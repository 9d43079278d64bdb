
/*
 * ngx-ratelimit: the files a zone keeps (its state file, its overrides
 * file).  Their directory must be writable by the workers' user, and the
 * master, as root, reads them at start and writes the state file as it
 * exits: whoever runs as that user (a handler's code, an exploit of a
 * worker) may plant anything there.  So:
 *
 *   a file is read without following a symbolic link at its name (a link
 *   could name any file root may read) and without waiting (a FIFO would
 *   hold the master's start), and only if it is a regular file;
 *
 *   a file is written whole to a temporary file beside it, of a name
 *   nobody can guess (16 random hex digits), created new (O_EXCL: nothing
 *   planted at that name is followed or reused), checked to be a regular
 *   file of this process's user, then renamed over the name (a rename
 *   replaces a link planted there, it does not follow it).
 *
 * And two names of one file (two zones', a zone's and a log's) are told
 * apart from two files.
 */


#include "ngx_ratelimit_file.h"

#include <sys/random.h>


/* tries of a random name taken already (by chance, or planted) */
#define NGX_RATELIMIT_FILE_TRIES  8


static void ngx_ratelimit_file_resolve(ngx_str_t *name, u_char *buf);


/*
 * A file to read: its descriptor, and its information (fi), or
 * NGX_INVALID_FILE with *err the open's errno or 0, and *why what the name
 * is when not a file that may be read (else NULL).  Without follow, a
 * symbolic link at the name is not followed.
 */

ngx_fd_t
ngx_ratelimit_file_open(u_char *name, ngx_uint_t follow,
    ngx_file_info_t *fi, ngx_err_t *err, const char **why)
{
    ngx_fd_t  fd;

    *err = 0;
    *why = NULL;

    fd = ngx_open_file(name, NGX_FILE_RDONLY|NGX_FILE_NONBLOCK
                             |(follow ? 0 : NGX_FILE_NOFOLLOW),
                       NGX_FILE_OPEN, 0);

    if (fd == NGX_INVALID_FILE) {
        *err = ngx_errno;

        if (*err == NGX_ELOOP && !follow) {
            *err = 0;
            *why = "is a symbolic link, which is not followed (name the "
                   "file itself)";
        }

        return NGX_INVALID_FILE;
    }

    if (ngx_fd_info(fd, fi) == NGX_FILE_ERROR) {
        *err = ngx_errno;

    } else if (!ngx_is_file(fi)) {
        *why = "is not a regular file";

    } else {
        return fd;
    }

    (void) ngx_close_file(fd);

    return NGX_INVALID_FILE;
}


/*
 * A zone's file (state=, overrides_file=) read whole as the zone starts,
 * into memory of its own (ngx_free()), *n bytes; NULL where it is not
 * read, with a line that says why (a notice where there is no file) and
 * what the zone starts with instead.  A symbolic link is not followed.
 */

u_char *
ngx_ratelimit_file_read(ngx_ratelimit_file_read_t *rd, ssize_t *n,
    ngx_log_t *log)
{
    u_char           *data;
    ngx_fd_t          fd;
    ngx_err_t         err;
    ngx_uint_t        level;
    const char       *why;
    ngx_file_info_t   fi;

    fd = ngx_ratelimit_file_open(rd->name->data, 0, &fi, &err, &why);

    if (fd == NGX_INVALID_FILE) {
        level = (err == NGX_ENOENT) ? NGX_LOG_NOTICE : NGX_LOG_ERR;
        ngx_log_error(level, log, err,
                      "ratelimit_zone \"%V\": %s \"%V\" %s: %s",
                      rd->zone, rd->what, rd->name,
                      why ? why : "could not be opened", rd->instead);
        return NULL;
    }

    if (ngx_file_size(&fi) > rd->max) {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "ratelimit_zone \"%V\": %s \"%V\" is too large (%O "
                      "bytes) %s: %s", rd->zone, rd->what, rd->name,
                      ngx_file_size(&fi), rd->bound, rd->instead);
        (void) ngx_close_file(fd);
        return NULL;
    }

    err = 0;
    data = ngx_alloc(ngx_file_size(&fi) + 1, log);

    if (data == NULL) {
        err = ngx_errno;

    } else {
        *n = ngx_read_fd(fd, data, ngx_file_size(&fi));

        if (*n < 0) {
            err = ngx_errno;
            ngx_free(data);
            data = NULL;
        }
    }

    if (data == NULL) {
        ngx_log_error(NGX_LOG_ERR, log, err,
                      "ratelimit_zone \"%V\": %s \"%V\" could not be read: "
                      "%s", rd->zone, rd->what, rd->name, rd->instead);
    }

    (void) ngx_close_file(fd);

    return data;
}


/*
 * A new temporary file beside name, for the whole of what name is to hold
 * (f->fd); NGX_ERROR with f->err.  f is ngx_ratelimit_file_discard's
 * either way.
 */

ngx_int_t
ngx_ratelimit_file_create(ngx_ratelimit_file_t *f, ngx_str_t *name,
    ngx_uint_t access, ngx_log_t *log)
{
    uint64_t         r;
    ngx_uint_t       i;
    ngx_file_info_t  fi;

    f->fd = NGX_INVALID_FILE;
    f->err = 0;
    f->tmp = ngx_alloc(name->len + sizeof(".tmp.") + 16, log);

    if (f->tmp == NULL) {
        f->err = NGX_ENOMEM;
        return NGX_ERROR;
    }

    for (i = 0; i < NGX_RATELIMIT_FILE_TRIES; i++) {
        if (getrandom(&r, sizeof(r), 0) != (ssize_t) sizeof(r)) {
            f->err = ngx_errno;
            break;
        }

        ngx_sprintf(f->tmp, "%V.tmp.%016xL%Z", name, r);

        f->fd = ngx_open_file(f->tmp,
                              NGX_FILE_WRONLY|NGX_FILE_NOFOLLOW|O_EXCL
                              |O_CLOEXEC, NGX_FILE_CREATE_OR_OPEN, access);

        if (f->fd != NGX_INVALID_FILE) {
            break;
        }

        f->err = ngx_errno;

        if (f->err != NGX_EEXIST) {
            break;
        }
    }

    if (f->fd == NGX_INVALID_FILE) {
        ngx_free(f->tmp);
        f->tmp = NULL;
        return NGX_ERROR;
    }

    /* what was made is this user's regular file, or nothing is written */

    if (ngx_fd_info(f->fd, &fi) == NGX_FILE_ERROR) {
        f->err = ngx_errno;
        return NGX_ERROR;
    }

    if (!ngx_is_file(&fi) || fi.st_uid != geteuid()) {
        f->err = NGX_EPERM;
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* len bytes of buf, all of them, into the temporary file. */

ngx_int_t
ngx_ratelimit_file_write(ngx_ratelimit_file_t *f, u_char *buf,
    size_t len)
{
    ssize_t  n;

    while (len) {
        n = ngx_write_fd(f->fd, buf, len);

        if (n <= 0) {
            f->err = n < 0 ? ngx_errno : NGX_ENOSPC;
            return NGX_ERROR;
        }

        buf += n;
        len -= n;
    }

    return NGX_OK;
}


/* The temporary file on the disk, and closed. */

ngx_int_t
ngx_ratelimit_file_close(ngx_ratelimit_file_t *f)
{
    ngx_int_t  rc;

    rc = NGX_OK;

    if (fsync(f->fd) == -1) {
        f->err = ngx_errno;
        rc = NGX_ERROR;
    }

    if (ngx_close_file(f->fd) == NGX_FILE_ERROR && rc == NGX_OK) {
        f->err = ngx_errno;
        rc = NGX_ERROR;
    }

    f->fd = NGX_INVALID_FILE;

    return rc;
}


/* The temporary file (closed) renamed over name: the file now, whole. */

ngx_int_t
ngx_ratelimit_file_rename(ngx_ratelimit_file_t *f, ngx_str_t *name)
{
    if (ngx_rename_file(f->tmp, name->data) == NGX_FILE_ERROR) {
        f->err = ngx_errno;
        return NGX_ERROR;
    }

    ngx_free(f->tmp);
    f->tmp = NULL;

    return NGX_OK;
}


/* Whatever is left of a file written: its temporary file closed and
   removed. */

void
ngx_ratelimit_file_discard(ngx_ratelimit_file_t *f)
{
    if (f->fd != NGX_INVALID_FILE) {
        (void) ngx_close_file(f->fd);
        f->fd = NGX_INVALID_FILE;
    }

    if (f->tmp != NULL) {
        (void) ngx_delete_file(f->tmp);
        ngx_free(f->tmp);
        f->tmp = NULL;
    }
}


/*
 * Whether two full names are one: the same once their directories are
 * resolved (symbolic links, "." and "..").  Not what is at the names now:
 * a link planted in a zone's directory would make a configuration fail.
 */

ngx_uint_t
ngx_ratelimit_file_same(ngx_str_t *a, ngx_str_t *b)
{
    u_char  one[NGX_MAX_PATH + 1], two[NGX_MAX_PATH + 1];

    if (a->len == 0 || b->len == 0
        || a->len > NGX_MAX_PATH || b->len > NGX_MAX_PATH)
    {
        return 0;
    }

    ngx_ratelimit_file_resolve(a, one);
    ngx_ratelimit_file_resolve(b, two);

    return ngx_strcmp(one, two) == 0;
}


/*
 * A full name with its directory resolved (realpath), into buf of
 * NGX_MAX_PATH + 1 bytes; as it is when its directory does not resolve
 * (or the result would not fit).
 */

static void
ngx_ratelimit_file_resolve(ngx_str_t *name, u_char *buf)
{
    size_t   dir, len;
    u_char   path[NGX_MAX_PATH + 1], real[PATH_MAX];

    ngx_cpystrn(buf, name->data, name->len + 1);

    for (dir = name->len; dir > 0 && name->data[dir - 1] != '/'; dir--) {
        /* void */
    }

    if (dir == 0 || dir == name->len) {
        return;   /* not a full name of a file */
    }

    ngx_cpystrn(path, name->data, dir == 1 ? 2 : dir);

    if (realpath((char *) path, (char *) real) == NULL) {
        return;
    }

    len = ngx_strlen(real);

    if (len + 1 + (name->len - dir) > NGX_MAX_PATH) {
        return;
    }

    ngx_sprintf(buf, "%s%s%*s%Z", real, (len == 1) ? "" : "/",
                name->len - dir, name->data + dir);
}
