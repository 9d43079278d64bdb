// A refused gRPC call answered in gRPC's own terms: which requests are gRPC
// calls, the grpc-message and grpc-retry-pushback-ms of a refusal, and the
// trailers frame of a gRPC-Web body.  Pure: the glue
// (ngx_module/ngx_http_ratelimit_grpc.c) sends what these write.
//
// The wire formats: gRPC's PROTOCOL-HTTP2 (Content-Type, Trailers-Only,
// grpc-message percent-encoded), PROTOCOL-WEB (the trailers frame, flags
// 0x80, and base64 for grpc-web-text), and gRFC A6 (grpc-retry-pushback-ms:
// a signed 32-bit count of ms; a negative one means "do not retry").

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "ratelimit.h"

namespace {

// RFC 9110's tchar: what a "+format" suffix may hold, so that the response
// can carry the request's type as it came.
bool tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr);
}

bool prefix(const char *p, size_t len, const char *word)
{
    const size_t n = std::strlen(word);
    if (len < n) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) p[i];
        if (c >= 'A' && c <= 'Z') {
            c = (unsigned char) (c - 'A' + 'a');
        }
        if (c != (unsigned char) word[i]) {
            return false;
        }
    }
    return true;
}

size_t base64(char *out, const unsigned char *in, size_t len)
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = out;
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        const uint32_t v = (uint32_t) in[i] << 16 | (uint32_t) in[i + 1] << 8 | in[i + 2];
        *o++ = digits[v >> 18];
        *o++ = digits[(v >> 12) & 63];
        *o++ = digits[(v >> 6) & 63];
        *o++ = digits[v & 63];
    }
    if (i < len) {
        const uint32_t v = (uint32_t) in[i] << 16 | (i + 1 < len ? (uint32_t) in[i + 1] << 8 : 0);
        *o++ = digits[v >> 18];
        *o++ = digits[(v >> 12) & 63];
        *o++ = i + 1 < len ? digits[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    return (size_t) (o - out);
}

size_t append(char *p, const char *s, size_t len)
{
    std::memcpy(p, s, len);
    return len;
}

}  // namespace

extern "C" RL_API int rl_grpc_kind(int post, const char *content_type, size_t len, size_t *type_len)
{
    static const char base[] = "application/grpc";
    const char *p = content_type;
    int kind = RL_GRPC_NATIVE;

    *type_len = 0;
    if (!post || p == nullptr || !prefix(p, len, base)) {
        return RL_GRPC_NONE;
    }
    size_t i = sizeof(base) - 1;
    if (prefix(p + i, len - i, "-web-text")) {
        kind = RL_GRPC_WEB_TEXT;
        i += 9;
    } else if (prefix(p + i, len - i, "-web")) {
        kind = RL_GRPC_WEB;
        i += 4;
    }
    if (i < len && p[i] == '+') {
        const size_t start = ++i;
        while (i < len && tchar((unsigned char) p[i]) && p[i] != '+') {
            i++;
        }
        if (i == start) {
            return RL_GRPC_NONE;  // "application/grpc+": no format
        }
    }
    const size_t end = i;
    while (i < len && (p[i] == ' ' || p[i] == '\t')) {
        i++;
    }
    if (i < len && p[i] != ';') {
        return RL_GRPC_NONE;  // application/grpcx, application/grpc-webx, ...
    }
    *type_len = end;
    return kind;
}

extern "C" RL_API size_t rl_grpc_percent_encode(char *out, const void *in, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *p = static_cast<const unsigned char *>(in);
    char *o = out;

    for (size_t i = 0; i < len; i++) {
        const unsigned char c = p[i];
        if (c >= 0x20 && c <= 0x7e && c != '%') {
            *o++ = (char) c;
        } else {
            *o++ = '%';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 0xf];
        }
    }
    return (size_t) (o - out);
}

extern "C" RL_API void rl_grpc_answer(const rl_decision_t *d, rl_grpc_answer_t *out)
{
    // every text is printable ASCII of at most 80 bytes: encoded, it fits
    // RL_GRPC_MESSAGE_MAX whatever it holds
    static_assert(RL_GRPC_MESSAGE_MAX >= 3 * 80, "grpc-message's room");
    char text[80];
    int n;
    int64_t pushback = 0;
    bool has_pushback = false;

    if (d == nullptr) {
        n = std::snprintf(text, sizeof(text), "rate limit exceeded");
    } else if (d->never) {
        // retrying cannot help: the rule never admits this cost
        n = std::snprintf(text, sizeof(text), "rate limit exceeded, the call costs more than the limit admits");
        pushback = -1;
        has_pushback = true;
    } else if (rl_retry_after_seconds(d) == 0) {
        // a concurrency slot: nobody can tell when one comes back
        n = std::snprintf(text, sizeof(text), "rate limit exceeded, too many calls in flight");
    } else {
        n = std::snprintf(text, sizeof(text), "rate limit exceeded, retry in %llu s",
                          (unsigned long long) rl_retry_after_seconds(d));
        // the exact wait (never early: retry_after_ms is rounded up); one
        // beyond what A6's signed 32 bits can say: do not retry this call
        pushback = d->retry_after_ms <= INT32_MAX ? d->retry_after_ms : -1;
        has_pushback = true;
    }
    if (n < 0) {
        n = 0;
    }
    out->message_len = rl_grpc_percent_encode(out->message, text, (size_t) n < sizeof(text) ? (size_t) n : 0);
    out->pushback_len = 0;
    if (has_pushback) {
        n = std::snprintf(out->pushback, sizeof(out->pushback), "%lld", (long long) pushback);
        out->pushback_len = n > 0 ? (size_t) n : 0;
    }
}

extern "C" RL_API size_t rl_grpc_web_body(char *out, int kind, unsigned status, const rl_grpc_answer_t *a)
{
    // 5 bytes of frame header, then at most "grpc-status: 16\r\n" (17),
    // "grpc-message: " + 256 + "\r\n" (272), "grpc-retry-pushback-ms: " + 11
    // + "\r\n" (37): 331 bytes, 444 in base64
    unsigned char frame[5 + 17 + 14 + RL_GRPC_MESSAGE_MAX + 2 + 24 + RL_GRPC_PUSHBACK_MAX + 2];
    static_assert((sizeof(frame) + 2) / 3 * 4 <= RL_GRPC_WEB_BODY_MAX, "the body's room");
    char *p = reinterpret_cast<char *>(frame) + 5;

    if (status > RL_GRPC_STATUS_MAX) {
        status = RL_GRPC_RESOURCE_EXHAUSTED;
    }
    p += std::snprintf(p, 18, "grpc-status: %u\r\n", status);
    p += append(p, "grpc-message: ", 14);
    p += append(p, a->message, a->message_len < RL_GRPC_MESSAGE_MAX ? a->message_len : RL_GRPC_MESSAGE_MAX);
    p += append(p, "\r\n", 2);
    if (a->pushback_len > 0 && a->pushback_len <= RL_GRPC_PUSHBACK_MAX) {
        p += append(p, "grpc-retry-pushback-ms: ", 24);
        p += append(p, a->pushback, a->pushback_len);
        p += append(p, "\r\n", 2);
    }

    const size_t block = (size_t) (p - reinterpret_cast<char *>(frame)) - 5;
    frame[0] = 0x80;  // a trailers frame, uncompressed
    frame[1] = (unsigned char) (block >> 24);
    frame[2] = (unsigned char) (block >> 16);
    frame[3] = (unsigned char) (block >> 8);
    frame[4] = (unsigned char) block;

    if (kind == RL_GRPC_WEB_TEXT) {
        return base64(out, frame, block + 5);
    }
    std::memcpy(out, frame, block + 5);
    return block + 5;
}
