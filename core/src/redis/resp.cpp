// RESP, Redis's protocol: the reply reader (rl_resp_parse).  It takes any
// bytes: a reply is never read past its length, a number past 19 digits or
// a nesting past 8 levels is not RESP, a reply cut short asks for more, and
// one longer than RL_RESP_REPLY_MAX bytes (or a bulk string or an array
// announcing more) is refused as soon as that is known, so that whoever
// answers on Redis's port cannot make the reader wait for or hold more.
#include "redis/resp.h"

namespace {

// An integer line ending at CRLF: p points after the type byte.
long line_number(const char *p, const char *end, int64_t *v)
{
    const char *q = p;
    bool neg = false;
    uint64_t u = 0;
    if (q < end && *q == '-') {
        neg = true;
        q++;
    }
    const char *digits = q;
    while (q < end && *q >= '0' && *q <= '9') {
        if (q - digits == 19 || u > (uint64_t) INT64_MAX / 10) {
            return -1;  // at most 19 digits: a RESP number is an int64
        }
        u = u * 10 + (uint64_t) (*q++ - '0');
    }
    if (q + 2 > end) {
        return 0;
    }
    if (q == digits || q[0] != '\r' || q[1] != '\n' || u > (uint64_t) INT64_MAX) {
        return -1;
    }
    *v = neg ? -(int64_t) u : (int64_t) u;
    return q + 2 - p;
}

// A bulk string's or an array's length: -1 (nil) or more.
long length_line(const char *p, const char *end, int64_t *v)
{
    long n = line_number(p, end, v);
    return n > 0 && *v < -1 ? -1 : n;
}

long parse(const char *p, size_t len, rl_resp_t *r, int depth)
{
    const char *end = p + len;
    if (len == 0) {
        return 0;
    }
    if (depth > 8) {
        return -1;
    }
    const char type = p[0];
    const char *q = p + 1;

    switch (type) {
    case RL_RESP_STATUS:
    case RL_RESP_ERROR: {
        const char *eol = static_cast<const char *>(std::memchr(q, '\r', (size_t) (end - q)));
        if (eol == nullptr || eol + 1 >= end) {
            return 0;
        }
        if (eol[1] != '\n') {
            return -1;
        }
        if (r) {
            r->type = type;
            r->str = q;
            r->str_len = (size_t) (eol - q);
        }
        return eol + 2 - p;
    }
    case RL_RESP_INTEGER: {
        int64_t v;
        long n = line_number(q, end, &v);
        if (n <= 0) {
            return n;
        }
        if (r) {
            r->type = type;
            r->integer = v;
        }
        return 1 + n;
    }
    case RL_RESP_BULK: {
        int64_t v;
        long n = length_line(q, end, &v);
        if (n <= 0) {
            return n;
        }
        if (v > RL_RESP_REPLY_MAX) {
            return RL_RESP_TOO_LONG;
        }
        q += n;
        if (r) {
            r->type = type;
            r->integer = v;
            r->str = v >= 0 ? q : nullptr;
            r->str_len = v >= 0 ? (size_t) v : 0;
        }
        if (v < 0) {
            return q - p;
        }
        if ((size_t) (end - q) < (size_t) v + 2) {
            return 0;
        }
        if (q[v] != '\r' || q[v + 1] != '\n') {
            return -1;
        }
        return q + v + 2 - p;
    }
    case RL_RESP_ARRAY: {
        int64_t v;
        long n = length_line(q, end, &v);
        if (n <= 0) {
            return n;
        }
        if (v > RL_RESP_REPLY_MAX / 3) {
            return RL_RESP_TOO_LONG;  // an item takes at least 3 bytes
        }
        q += n;
        if (r) {
            r->type = type;
            r->integer = v;
            r->nitems = 0;
            r->integers = 1;
        }
        for (int64_t i = 0; i < v; i++) {
            rl_resp_t item;
            long m = parse(q, (size_t) (end - q), &item, depth + 1);
            if (m <= 0) {
                return m;
            }
            q += m;
            if (r == nullptr) {
                continue;
            }
            if (item.type != RL_RESP_INTEGER) {
                r->integers = 0;
            } else if (r->nitems < RL_RESP_ITEMS_MAX) {
                r->items[r->nitems++] = item.integer;
            }
        }
        return q - p;
    }
    default:
        return -1;
    }
}

}  // namespace

extern "C" {

long rl_resp_parse(const char *p, size_t len, rl_resp_t *r)
{
    try {
        const long n = parse(p, len < RL_RESP_REPLY_MAX ? len : RL_RESP_REPLY_MAX, r, 0);
        return n == 0 && len >= RL_RESP_REPLY_MAX ? RL_RESP_TOO_LONG : n;
    } catch (...) {
        return -1;
    }
}

}  // extern "C"
