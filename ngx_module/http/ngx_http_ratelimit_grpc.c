
/*
 * ngx-ratelimit: a refused gRPC call answered as gRPC.
 *
 * nginx's answer to a refusal, an HTTP error status, is what gRPC clients
 * read as UNAVAILABLE and retry at once.  A location with
 * ratelimit_grpc_status (on by default, RESOURCE_EXHAUSTED) answers a
 * refused gRPC call in gRPC's terms instead: HTTP 200 with the request's own
 * gRPC content type, grpc-status, grpc-message saying when to come back, and
 * grpc-retry-pushback-ms, the wait a client's retry policy keeps to (gRFC
 * A6); the rate-limit headers go with them, as metadata (the header
 * filter).  What the answer says, and which requests are gRPC calls, is the
 * core's (rl_grpc_kind, rl_grpc_answer, rl_grpc_web_body).
 *
 * gRPC (HTTP/2; HTTP/3 where nginx has it): a Trailers-Only response, one
 * HEADERS frame that ends the stream (r->header_only: nginx's HTTP/2 and
 * HTTP/3 filters set END_STREAM, or the stream's FIN, on it).  gRPC-Web:
 * the status in a trailers frame in the body, as a browser client can
 * always read it (a header needs CORS's Access-Control-Expose-Headers), in
 * base64 for grpc-web-text.
 *
 * The answer is sent here, in the preaccess phase, never through nginx's
 * special responses: no error_page can turn it into an HTML page.
 */


#include "ngx_http_ratelimit_grpc.h"
#include "ngx_http_ratelimit_headers.h"
#include "ngx_http_ratelimit_answer.h"


static ngx_int_t ngx_http_ratelimit_grpc_trailers_only(ngx_http_request_t *r,
    ngx_uint_t status, rl_grpc_answer_t *a);


/*
 * The kind of gRPC call a refused request is (enum rl_grpc_kind), where its
 * location answers them as gRPC: RL_GRPC_NONE for any other request, and
 * for a subrequest, whose refusal is no answer to the client.
 */

ngx_uint_t
ngx_http_ratelimit_grpc_kind(ngx_http_request_t *r,
    ngx_http_ratelimit_loc_conf_t *rlcf, size_t *type_len)
{
    ngx_table_elt_t  *ct;

    ct = r->headers_in.content_type;
    *type_len = 0;

    if (rlcf->grpc_status == 0 || r != r->main || ct == NULL) {
        return RL_GRPC_NONE;
    }

    return rl_grpc_kind(r->method == NGX_HTTP_POST, (char *) ct->value.data,
                        ct->value.len, type_len);
}


/*
 * The status of a refusal, HTTP's or (grpc) gRPC's: the location's, or
 * where it gives none, the refusing rule's (rl_request_refusal).
 */

ngx_uint_t
ngx_http_ratelimit_refusal_status(ngx_http_ratelimit_ctx_t *ctx,
    ngx_http_ratelimit_loc_conf_t *rlcf, ngx_uint_t grpc)
{
    uint32_t  status, grpc_status;

    rl_request_refusal(&ctx->rq, &status, &grpc_status);

    if (grpc) {
        return rlcf->grpc_status == NGX_HTTP_RATELIMIT_BY_RULE
               ? grpc_status : rlcf->grpc_status;
    }

    return rlcf->status_code == NGX_HTTP_RATELIMIT_BY_RULE
           ? status : rlcf->status_code;
}


/*
 * Answers the refused gRPC call and finalizes it; the handler returns
 * NGX_DONE to the phase engine, which runs no other phase for it.
 */

ngx_int_t
ngx_http_ratelimit_grpc_answer(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx)
{
    size_t                          len;
    ngx_int_t                       rc;
    ngx_buf_t                      *b;
    ngx_uint_t                      kind;
    ngx_chain_t                     out;
    rl_grpc_answer_t                a;
    ngx_http_ratelimit_loc_conf_t  *rlcf;

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module);
    kind = ngx_http_ratelimit_grpc_kind(r, rlcf, &len);

    if (kind == RL_GRPC_NONE) {
        return ngx_http_ratelimit_refusal_status(ctx, rlcf, 0);
    }

    /* no binding rule: a fail mode refused it (on_redis_error=deny) */

    rl_grpc_answer(ctx->rule ? &ctx->decision : NULL, &a);

    /* the call's messages are not read: dropped as they come */

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        r->keepalive = 0;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_type.data = r->headers_in.content_type->value.data;
    r->headers_out.content_type.len = len;
    r->headers_out.content_type_len = len;
    r->headers_out.content_type_lowcase = NULL;

    if (kind == RL_GRPC_NATIVE) {
        rc = ngx_http_ratelimit_grpc_trailers_only(r,
                 ngx_http_ratelimit_refusal_status(ctx, rlcf, 1), &a);
        ngx_http_finalize_request(r, rc);
        return NGX_DONE;
    }

    b = ngx_create_temp_buf(r->pool, RL_GRPC_WEB_BODY_MAX);
    if (b == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return NGX_DONE;
    }

    b->last += rl_grpc_web_body((char *) b->pos, kind,
                                ngx_http_ratelimit_refusal_status(ctx, rlcf, 1),
                                &a);
    b->last_buf = 1;
    b->last_in_chain = 1;

    r->headers_out.content_length_n = b->last - b->pos;

    rc = ngx_http_send_header(r);

    if (rc != NGX_ERROR && rc <= NGX_OK && !r->header_only) {
        out.buf = b;
        out.next = NULL;
        rc = ngx_http_output_filter(r, &out);
    }

    ngx_http_finalize_request(r, rc);

    return NGX_DONE;
}


/*
 * A Trailers-Only response: the status and its metadata in the response's
 * headers, no body.  Over HTTP/1 it ends by its length, 0.
 */

static ngx_int_t
ngx_http_ratelimit_grpc_trailers_only(ngx_http_request_t *r,
    ngx_uint_t status, rl_grpc_answer_t *a)
{
    u_char        *p;
    ngx_uint_t     n;
    ngx_keyval_t   h[3];

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN + a->message_len + a->pushback_len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ngx_str_set(&h[0].key, "grpc-status");
    h[0].value.data = p;
    p = ngx_http_ratelimit_number(p, status);
    h[0].value.len = p - h[0].value.data;

    ngx_str_set(&h[1].key, "grpc-message");
    h[1].value.data = p;
    h[1].value.len = a->message_len;
    p = ngx_cpymem(p, a->message, a->message_len);

    ngx_str_set(&h[2].key, "grpc-retry-pushback-ms");
    h[2].value.data = p;
    h[2].value.len = a->pushback_len;
    ngx_memcpy(p, a->pushback, a->pushback_len);

    n = a->pushback_len ? 3 : 2;

    if (ngx_http_ratelimit_add_headers(r, h, n) != NGX_OK) {
        return NGX_ERROR;
    }

    r->header_only = 1;

    if (r->http_version < NGX_HTTP_VERSION_20) {
        r->headers_out.content_length_n = 0;
    }

    return ngx_http_send_header(r);
}
