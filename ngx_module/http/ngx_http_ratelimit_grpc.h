
/*
 * ngx-ratelimit: a refused gRPC call's answer
 * (ngx_http_ratelimit_grpc.c).
 */

#ifndef NGX_HTTP_RATELIMIT_GRPC_H
#define NGX_HTTP_RATELIMIT_GRPC_H


#include "ngx_http_ratelimit_types.h"


ngx_uint_t ngx_http_ratelimit_grpc_kind(ngx_http_request_t *r,
    ngx_http_ratelimit_loc_conf_t *rlcf, size_t *type_len);
ngx_int_t ngx_http_ratelimit_grpc_answer(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx);
ngx_uint_t ngx_http_ratelimit_refusal_status(ngx_http_ratelimit_ctx_t *ctx,
    ngx_http_ratelimit_loc_conf_t *rlcf, ngx_uint_t grpc);


#endif /* NGX_HTTP_RATELIMIT_GRPC_H */
