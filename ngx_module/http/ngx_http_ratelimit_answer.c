
/*
 * ngx-ratelimit: what the answers of the module's own locations
 * (ratelimit_stats, ratelimit_api, ratelimit_dashboard) and a refused gRPC
 * call's share: their headers, and their bytes sent.
 */


#include "ngx_http_ratelimit_answer.h"


static ngx_str_t  ngx_http_ratelimit_json_type =
    ngx_string("application/json");


/*
 * The start of a location's own answer that only reads (the stats, the
 * dashboard's page): its headers (cache: Cache-Control, NULL: no-store),
 * GET and HEAD only, any body discarded.  NGX_OK, or what to return.
 */

ngx_int_t
ngx_http_ratelimit_get_only(ngx_http_request_t *r, ngx_str_t *cache)
{
    if (ngx_http_ratelimit_answer_headers(r, cache) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    return ngx_http_discard_request_body(r);
}


/*
 * The headers of every answer of ratelimit_stats, ratelimit_api and
 * ratelimit_dashboard, added by their handlers first, so that errors carry
 * them too (the key API's JSON ones and nginx's own pages alike):
 *
 *   X-Content-Type-Options: nosniff  the answers hold names and keys that
 *                                    clients chose; a browser must never
 *                                    take them for a page or a script
 *   Cache-Control: no-store          they are state (figures, keys), which
 *                                    no cache may keep or serve again; or
 *                                    cache, for a page that holds none
 */

ngx_int_t
ngx_http_ratelimit_answer_headers(ngx_http_request_t *r, ngx_str_t *cache)
{
    ngx_keyval_t  headers[2];

    ngx_str_set(&headers[0].key, "X-Content-Type-Options");
    ngx_str_set(&headers[0].value, "nosniff");
    ngx_str_set(&headers[1].key, "Cache-Control");

    if (cache) {
        headers[1].value = *cache;

    } else {
        ngx_str_set(&headers[1].value, "no-store");
    }

    return ngx_http_ratelimit_add_headers(r, headers, 2);
}


/* Response headers, as they are (nginx's own ngx_table_elt_t fields only). */

ngx_int_t
ngx_http_ratelimit_add_headers(ngx_http_request_t *r, ngx_keyval_t *headers,
    ngx_uint_t n)
{
    ngx_uint_t        i;
    ngx_table_elt_t  *h;

    for (i = 0; i < n; i++) {
        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        h->hash = 1;
        h->key = headers[i].key;
        h->value = headers[i].value;
#if (nginx_version >= 1023000)
        h->next = NULL;
#endif
    }

    return NGX_OK;
}


/*
 * An answer's bytes (in the request's pool, or the configuration's) sent
 * as the response, of the type given (NULL: the one set already).
 */

ngx_int_t
ngx_http_ratelimit_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *type, u_char *data, size_t len)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t   out;

    r->headers_out.status = status;
    r->headers_out.content_length_n = len;

    if (type) {
        r->headers_out.content_type = *type;
        r->headers_out.content_type_len = type->len;
    }

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = data;
    b->last = data + len;
    b->memory = 1;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/* JSON: the key API's answers, errors too. */

ngx_int_t
ngx_http_ratelimit_send_json(ngx_http_request_t *r, ngx_uint_t status,
    u_char *data, size_t len)
{
    return ngx_http_ratelimit_send(r, status, &ngx_http_ratelimit_json_type,
                                   data, len);
}


/*
 * The JSON a core renderer wrote into the buffer it sized first, with 200;
 * data is NULL where the pool had no room for it: a 500.
 */

ngx_int_t
ngx_http_ratelimit_send_rendered(ngx_http_request_t *r, char *data, size_t len)
{
    if (data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_ratelimit_send_json(r, NGX_HTTP_OK, (u_char *) data, len);
}
