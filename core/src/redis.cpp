// Redis: the command that checks a request in the script, the RESP reply
// reader, and the reply's decisions.  No I/O here: the glue owns the
// connections (nginx events), the conformance test a blocking socket.
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "algorithms.h"
#include "sha256.h"

extern "C" const char rl_redis_script_text[];       // generated from core/redis/ratelimit.lua
extern "C" const size_t rl_redis_script_text_len;

namespace {

const char kHex[] = "0123456789abcdef";

char *hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        *out++ = kHex[b[i] >> 4];
        *out++ = kHex[b[i] & 15];
    }
    return out;
}

// "{" 16 hex characters of SHA-256(key) "}": one slot for one key value.
void key_tag(const void *key, size_t key_len, char *out)
{
    uint8_t digest[32];
    rl::Sha256 h;
    h.update(key, key_len);
    h.finish(digest);
    out[0] = '{';
    hex(digest, 8, out + 1);
    out[RL_REDIS_TAG_LEN - 1] = '}';
}

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), Redis Cluster's key
// hash; bit by bit, as it runs once per request.
unsigned crc16(const char *p, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned) (uint8_t) p[i] << 8;
        for (int b = 0; b < 8; b++) {
            crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
        }
    }
    return crc;
}

// Fields per rule in the script's ARGV and in its reply.
const size_t kArgsPerRule = 10;
const size_t kReplyPerRule = 7;

int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return RL_ERROR;
}

struct Writer {
    char *p;

    void raw(const char *s, size_t len)
    {
        std::memcpy(p, s, len);
        p += len;
    }

    void number(int64_t v)
    {
        char tmp[24];
        size_t len = 0;
        uint64_t u = v < 0 ? 0 - (uint64_t) v : (uint64_t) v;
        do {
            tmp[len++] = (char) ('0' + u % 10);
            u /= 10;
        } while (u);
        if (v < 0) {
            *p++ = '-';
        }
        while (len) {
            *p++ = tmp[--len];
        }
    }

    void header(char type, size_t n)
    {
        *p++ = type;
        number((int64_t) n);
        raw("\r\n", 2);
    }

    void arg(const char *s, size_t len)
    {
        header('$', len);
        raw(s, len);
        raw("\r\n", 2);
    }

    void arg(int64_t v)
    {
        char tmp[24];
        Writer w{tmp};
        w.number(v);
        arg(tmp, (size_t) (w.p - tmp));
    }
};

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
            return -1;   // at most 19 digits: a RESP number is an int64
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

const char *rl_redis_script(size_t *len)
{
    *len = rl_redis_script_text_len;
    return rl_redis_script_text;
}

int rl_redis_rule_ok(const rl_rule_t *rule, char *err, size_t errlen)
{
    unsigned __int128 units = 0;
    switch (rule->algorithm) {
    case RL_GCRA:
    case RL_TOKEN_BUCKET:
        units = (unsigned __int128) (rule->burst > rule->limit ? rule->burst : rule->limit) * (uint64_t) rule->period_ms;
        break;
    case RL_LEAKY_BUCKET:
        units = (unsigned __int128) rule->limit * (uint64_t) (rule->period_ms + rule->max_delay_ms);
        break;
    case RL_SLIDING_WINDOW:
        units = (unsigned __int128) rule->limit * (uint64_t) rule->period_ms;
        break;
    default:
        return RL_OK;   // counters and times only
    }
    if (units > RL_REDIS_UNITS_MAX) {
        return fail(err, errlen,
                    "limit x period of %u per %lld ms is too fine for a Redis zone: at most 2^50 (its script "
                    "computes in units of 1/limit ms, exactly only below 2^53)",
                    rule->algorithm <= RL_TOKEN_BUCKET && rule->burst > rule->limit ? rule->burst : rule->limit,
                    (long long) rule->period_ms);
    }
    return RL_OK;
}

size_t rl_redis_key(char *out, const char *prefix, size_t prefix_len, int cluster, uint64_t identity,
                    const void *key, size_t key_len)
{
    uint8_t id[8], digest[32];
    char *p = out;
    std::memcpy(p, prefix, prefix_len);
    p += prefix_len;
    if (cluster) {
        key_tag(key, key_len, p);
        p += RL_REDIS_TAG_LEN;
    }
    for (int i = 0; i < 8; i++) {
        id[i] = (uint8_t) (identity >> (8 * i));
    }
    rl::Sha256 h;
    h.update(id, sizeof(id));
    h.update(key, key_len);
    h.finish(digest);
    p = hex(digest, RL_REDIS_HASH_LEN / 2, p);
    return (size_t) (p - out);
}

unsigned rl_redis_slot(const char *rkey, size_t len)
{
    // Redis Cluster: the part between the first '{' and the next '}', if
    // not empty, else the whole key (cluster-spec, "Hash tags")
    const char *open = static_cast<const char *>(std::memchr(rkey, '{', len));
    if (open != nullptr) {
        const char *from = open + 1;
        const char *close = static_cast<const char *>(std::memchr(from, '}', (size_t) (rkey + len - from)));
        if (close != nullptr && close > from) {
            return crc16(from, (size_t) (close - from)) & 16383;
        }
    }
    return crc16(rkey, len) & 16383;
}

unsigned rl_redis_key_slot(const void *key, size_t key_len)
{
    char tag[RL_REDIS_TAG_LEN];
    key_tag(key, key_len, tag);
    return rl_redis_slot(tag, sizeof(tag));
}

size_t rl_redis_command_size(size_t n, size_t prefix_len, size_t script_len)
{
    const size_t arg = 1 + 20 + 2 + 2;   // $<len>\r\n...\r\n around each argument
    return 1 + 20 + 2 + (arg + 7) + (arg + script_len) + (arg + 20) +
           n * (arg + prefix_len + RL_REDIS_TAG_LEN + RL_REDIS_HASH_LEN) +
           (2 + n * kArgsPerRule) * (arg + 20);
}

size_t rl_redis_command(char *buf, const char *script, size_t script_len, int eval, const char *prefix,
                        size_t prefix_len, int cluster, const rl_check_t *c, size_t n, int combine, int64_t now_ms)
{
    Writer w{buf};
    w.header('*', 3 + n + 2 + n * kArgsPerRule);
    if (eval) {
        w.arg("EVAL", 4);
    } else {
        w.arg("EVALSHA", 7);
    }
    w.arg(script, script_len);
    w.arg((int64_t) n);

    char key[256 + RL_REDIS_TAG_LEN + RL_REDIS_HASH_LEN];
    for (size_t i = 0; i < n; i++) {
        const size_t plen = prefix_len < 256 ? prefix_len : 256;
        w.arg(key, rl_redis_key(key, prefix, plen, cluster, c[i].identity, c[i].key, c[i].key_len));
    }

    if (now_ms >= 0) {
        w.arg(now_ms);
    } else {
        w.arg("", 0);
    }
    w.arg(combine == RL_COMBINE_ANY ? 1 : 0);

    for (size_t i = 0; i < n; i++) {
        const rl_rule_t &r = *c[i].rule;
        w.arg(r.algorithm);
        w.arg(r.limit);
        w.arg(r.burst);
        w.arg(r.period_ms);
        w.arg(r.align);
        w.arg(r.buckets);
        w.arg(r.max_delay_ms);
        w.arg(r.reset);
        w.arg(r.utc_offset_min);
        // a cost beyond what any rule admits is only ever compared: cap it
        // where Lua's doubles are still exact
        w.arg((int64_t) (c[i].cost < RL_REDIS_UNITS_MAX ? c[i].cost : RL_REDIS_UNITS_MAX));
    }
    return (size_t) (w.p - buf);
}

long rl_resp_parse(const char *p, size_t len, rl_resp_t *r)
{
    try {
        return parse(p, len, r, 0);
    } catch (...) {
        return -1;
    }
}

int rl_redis_decode(const rl_resp_t *r, rl_check_t *c, size_t n, size_t *binding)
{
    if (r->type != RL_RESP_ARRAY || !r->integers || n > RL_RULES_MAX ||
        r->integer != (int64_t) (1 + n * kReplyPerRule) || r->nitems != 1 + n * kReplyPerRule) {
        return -1;
    }
    const int64_t *v = r->items + 1;
    for (size_t i = 0; i < n; i++, v += kReplyPerRule) {
        rl_decision_t &d = c[i].decision;
        d.allowed = v[0] != 0;
        d.never = v[1] != 0;
        d.remaining = v[2] > 0 ? (uint64_t) v[2] : 0;
        d.reset_ms = v[3];
        d.retry_after_ms = v[4];
        d.delay_ms = v[5];
        d.window_ms = v[6];
    }
    const bool allowed = r->items[0] != 0;
    *binding = rl::binding_of(c, n, allowed);
    return allowed ? 1 : 0;
}

}  // extern "C"
