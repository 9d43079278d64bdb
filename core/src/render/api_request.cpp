// A key API request read: the path after the location's prefix, the method,
// each query parameter its resource takes (once, %-decoded, checked), and
// every error the API answers, as JSON, with its status.  Anything a client
// sent that a message shows is escaped as log lines escape keys.
//
//   GET    zones                     the zones, their rules and figures
//   GET    zones/NAME                one of them
//   GET    zones/NAME/keys?key=K     a key's state in each rule of the zone
//          (&rule=R: in one), or ?fingerprint=F&rule=R
//   DELETE zones/NAME/keys?...       resets it (where writes are enabled)
//   GET    zones/NAME/top[?rule=R]   the keys each rule refuses most
//   GET    zones/NAME/overrides[?rule=R&from=N&count=N]  its overrides, a page
//   GET    zones/NAME/overrides?key=K|range=CIDR[&rule=R]  one of them
//   PUT    zones/NAME/overrides?...  writes one from a JSON body (where
//          writes are enabled); DELETE removes it
#include <cstdarg>
#include <cstdio>

#include "util/out.h"

namespace rl {

namespace {

const char *const kResources[] = {"zones", "zone", "keys", "top", "overrides"};

// what each resource takes, for a message naming an unknown parameter
const char *const kExpected[] = {
    "none", "none", "key=, fingerprint= or rule=", "rule=", "key=, range=, rule=, keyed=, from= or count="};

enum { kKey, kFingerprint, kRule, kRange, kFrom, kCount, kKeyed, kParams };

struct Param {
    const char *name;
    unsigned resources;  // bits of 1 << enum rl_api_resource
};

const Param kParam[kParams] = {
    {"key", 1u << RL_API_KEYS | 1u << RL_API_OVERRIDES},
    {"fingerprint", 1u << RL_API_KEYS},
    {"rule", 1u << RL_API_KEYS | 1u << RL_API_TOP | 1u << RL_API_OVERRIDES},
    {"range", 1u << RL_API_OVERRIDES},
    {"from", 1u << RL_API_OVERRIDES},
    {"count", 1u << RL_API_OVERRIDES},
    {"keyed", 1u << RL_API_OVERRIDES},
};

bool is(rl_str_t s, const char *word)
{
    const size_t n = std::strlen(word);
    return s.len == n && std::memcmp(s.data, word, n) == 0;
}

int hex_digit(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    c = (char) (c | 0x20);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

// bytes a client chose, shown in a message as log lines show keys
struct Shown {
    char s[kShownBytes];
    int n;
    explicit Shown(rl_str_t v) : n((int) shown(s, v.data, v.len, false)) {}
    Shown(const void *data, size_t len) : n((int) shown(s, data, len, false)) {}
};

int fail(rl_api_request_t *q, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// {"error":"..."} and its status
int fail(rl_api_request_t *q, int status, const char *fmt, ...)
{
    char msg[RL_API_ERROR_MAX / 2];
    va_list ap;
    va_start(ap, fmt);
    const int n = std::vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    Out o(q->error, sizeof(q->error));
    o.put("{\"error\":");
    o.json(msg, n < 0 ? 0 : (size_t) n < sizeof(msg) ? (size_t) n : sizeof(msg) - 1);
    o.put("}\n");
    q->error_len = o.len() < sizeof(q->error) ? o.len() : sizeof(q->error);
    q->status = status;
    return status;
}

// zones, zones/NAME, zones/NAME/keys or zones/NAME/top after the prefix; a
// prefix without a trailing "/" is followed by one ("location /rl" answers
// /rl/zones, not /rlzones)
bool path(rl_api_request_t *q, rl_str_t prefix, rl_str_t uri)
{
    if (uri.len < prefix.len || std::memcmp(uri.data, prefix.data, prefix.len) != 0) {
        return false;
    }
    rl_str_t rest{uri.data + prefix.len, uri.len - prefix.len};
    if (prefix.len == 0 || prefix.data[prefix.len - 1] != '/') {
        if (rest.len == 0 || rest.data[0] != '/') {
            return false;
        }
        rest = rl_str_t{rest.data + 1, rest.len - 1};
    }
    if (is(rest, "zones")) {
        q->resource = RL_API_ZONES;
        return true;
    }
    if (rest.len < 7 || std::memcmp(rest.data, "zones/", 6) != 0) {
        return false;
    }
    rest = rl_str_t{rest.data + 6, rest.len - 6};
    const char *slash = static_cast<const char *>(std::memchr(rest.data, '/', rest.len));
    q->zone = rl_str_t{rest.data, slash != nullptr ? (size_t) (slash - rest.data) : rest.len};
    if (q->zone.len == 0) {
        return false;
    }
    if (slash == nullptr) {
        q->resource = RL_API_ZONE;
        return true;
    }
    rest = rl_str_t{slash + 1, rest.len - q->zone.len - 1};
    if (is(rest, "keys")) {
        q->resource = RL_API_KEYS;
        return true;
    }
    if (is(rest, "top")) {
        q->resource = RL_API_TOP;
        return true;
    }
    if (is(rest, "overrides")) {
        q->resource = RL_API_OVERRIDES;
        return true;
    }
    return false;
}

// from= and count=: a list's page, an integer (count: from 1 to
// RL_API_PAGE_MAX).
int page_arg(rl_api_request_t *q, int which, rl_str_t v)
{
    uint64_t n = 0;
    bool digits = v.len > 0 && v.len <= 9;
    for (size_t i = 0; digits && i < v.len; i++) {
        digits = v.data[i] >= '0' && v.data[i] <= '9';
        n = n * 10 + (uint64_t) (v.data[i] - '0');
    }
    if (which == kFrom && digits) {
        q->from = n;
        return 0;
    }
    if (which == kCount && digits && n >= 1 && n <= RL_API_PAGE_MAX) {
        q->count = n;
        return 0;
    }
    return which == kFrom ? fail(q, 400, "from=: expected an integer from 0 to 999999999")
                          : fail(q, 400, "count=: expected an integer from 1 to %d", RL_API_PAGE_MAX);
}

// One parameter's value: every "%" starts an escape of two hex digits; at
// most RL_API_KEY_MAX bytes decoded; then what the parameter takes.
int arg(rl_api_request_t *q, int which, rl_str_t v)
{
    size_t escapes = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.data[i] != '%') {
            continue;
        }
        if (i + 2 >= v.len || hex_digit(v.data[i + 1]) < 0 || hex_digit(v.data[i + 2]) < 0) {
            return fail(q, 400, "parameter \"%s\": a %% not followed by two hex digits", kParam[which].name);
        }
        escapes++;
    }
    const size_t len = v.len - 2 * escapes;
    if (v.len > 3 * RL_API_KEY_MAX || len > RL_API_KEY_MAX) {
        return fail(q, 400, "parameter \"%s\" longer than %d bytes", kParam[which].name, RL_API_KEY_MAX);
    }

    if (which == kFrom || which == kCount) {
        return page_arg(q, which, v);
    }
    if (which == kRange && len >= sizeof(q->range)) {
        return fail(q, 400, "range=: expected an address range as ADDRESS/LENGTH, e.g. 10.1.0.0/16");
    }
    if (which == kKeyed && (len == 0 || len >= sizeof(q->keyed))) {
        return fail(q, 400,
                    "keyed=: expected a key expression as the rules write it (e.g. $http_x_api_key), 1 to %d "
                    "bytes",
                    (int) sizeof(q->keyed) - 1);
    }
    uint8_t fp[16];
    uint8_t *out = which == kKey     ? q->key
                   : which == kRule  ? (uint8_t *) q->rule
                   : which == kRange ? (uint8_t *) q->range
                   : which == kKeyed ? (uint8_t *) q->keyed
                                     : fp;
    if (which == kKey && len == 0) {
        return fail(q, 400, "an empty key: a request whose key is empty is exempt from the rule, it has no state");
    }
    if (which == kRule && (len == 0 || len >= RL_NAME_MAX)) {
        return fail(q, 400, "rule=: expected a rule's name, 1 to %d bytes", RL_NAME_MAX - 1);
    }
    if (which == kFingerprint && len != sizeof(fp)) {
        goto bad_fingerprint;
    }

    for (size_t i = 0, o = 0; i < v.len; o++) {
        if (v.data[i] == '%') {
            out[o] = (uint8_t) (hex_digit(v.data[i + 1]) << 4 | hex_digit(v.data[i + 2]));
            i += 3;
        } else {
            out[o] = (uint8_t) v.data[i++];
        }
    }

    switch (which) {
    case kKey:
        q->has_key = 1;
        q->key_len = len;
        return 0;
    case kRule:
        q->rule[len] = '\0';
        q->rule_len = len;
        return 0;
    case kRange:
        q->range[len] = '\0';
        q->range_len = len;
        q->has_range = 1;
        return 0;
    case kKeyed:
        q->keyed[len] = '\0';
        return std::memchr(q->keyed, '\0', len) != nullptr ? fail(q, 400, "keyed=: a NUL byte") : 0;
    default:
        for (size_t i = 0; i < sizeof(fp); i++) {
            const int d = hex_digit((char) fp[i]);
            if (d < 0) {
                goto bad_fingerprint;
            }
            q->fingerprint = q->fingerprint << 4 | (uint64_t) d;
        }
        q->has_fingerprint = 1;
        return 0;
    }

bad_fingerprint:
    return fail(q, 400, "fingerprint=: expected 16 hex digits, as log lines and $ratelimit_fingerprint show it");
}

// The query string: each parameter the resource takes, once.
int args(rl_api_request_t *q, rl_str_t a)
{
    unsigned seen = 0;
    for (size_t i = 0; i < a.len;) {
        const char *start = a.data + i;
        const char *amp = static_cast<const char *>(std::memchr(start, '&', a.len - i));
        const size_t n = amp != nullptr ? (size_t) (amp - start) : a.len - i;
        const char *eq = static_cast<const char *>(std::memchr(start, '=', n));
        const rl_str_t name{start, eq != nullptr ? (size_t) (eq - start) : n};
        const rl_str_t value = eq != nullptr ? rl_str_t{eq + 1, n - name.len - 1} : rl_str_t{start + n, 0};
        i += n + 1;

        if (name.len == 0 && value.len == 0) {
            continue;  // "&&"
        }
        int which = 0;
        while (which < kParams && !(is(name, kParam[which].name) && (kParam[which].resources & 1u << q->resource))) {
            which++;
        }
        if (which == kParams) {
            const Shown s(name);
            return fail(q, 400, "unknown parameter \"%.*s\" for %s: expected %s", s.n, s.s, kResources[q->resource],
                        kExpected[q->resource]);
        }
        if (seen & 1u << which) {
            return fail(q, 400, "parameter \"%s\" given twice", kParam[which].name);
        }
        seen |= 1u << which;
        if (const int rc = arg(q, which, value)) {
            return rc;
        }
    }

    if (q->resource == RL_API_OVERRIDES) {
        if (q->has_key && q->has_range) {
            return fail(q, 400, "key= and range= name an override's target: give one");
        }
        if ((q->put || q->reset) && !q->has_key && !q->has_range) {
            return fail(q, 400, "which override? expected key=K (the key's value, %%-encoded) or range=ADDRESS/LENGTH");
        }
        if (q->keyed[0] != '\0' && (q->rule_len != 0 || !q->has_key)) {
            return fail(q, 400,
                        "keyed= names the rules of a key's override in every rule (key= without rule=); a range "
                        "applies to every rule keyed on the client's address");
        }
        if (q->count == 0) {
            q->count = RL_API_PAGE;
        }
        return 0;
    }
    if (q->resource != RL_API_KEYS) {
        return 0;
    }
    if (!q->has_key && !q->has_fingerprint) {
        return fail(q, 400, "which key? expected key=K (the key's value, %%-encoded) or fingerprint=F&rule=R");
    }
    if (q->has_key && q->has_fingerprint) {
        return fail(q, 400, "key= and fingerprint= name the same thing: give one");
    }
    if (q->has_fingerprint && q->rule_len == 0) {
        return fail(q, 400, "a fingerprint is of one rule's key: give rule= too");
    }
    return 0;
}

}  // namespace

}  // namespace rl

extern "C" {

int rl_api_request(rl_api_request_t *q, rl_str_t prefix, rl_str_t uri, rl_str_t method, int write, rl_str_t args)
{
    std::memset(q, 0, sizeof(*q));

    if (!rl::path(q, prefix, uri)) {
        return rl::fail(q, 404,
                        "no such resource: expected zones, zones/NAME, zones/NAME/keys, zones/NAME/top or "
                        "zones/NAME/overrides");
    }

    const bool keys = q->resource == RL_API_KEYS;
    const bool overrides = q->resource == RL_API_OVERRIDES;
    const bool del = rl::is(method, "DELETE");
    const bool put = rl::is(method, "PUT");
    if (!(rl::is(method, "GET") || rl::is(method, "HEAD") || (del && (keys || overrides)) || (put && overrides))) {
        const rl::Shown m(method);
        q->allow = overrides ? "GET, HEAD, PUT, DELETE" : keys ? "GET, HEAD, DELETE" : "GET, HEAD";
        return rl::fail(q, 405, "method %.*s not allowed on %s: %s", m.n, m.s, rl::kResources[q->resource], q->allow);
    }
    if ((del || put) && !write) {
        return rl::fail(q, 403, "writes are not enabled here (ratelimit_api write=on enables them)");
    }
    q->reset = del;
    q->put = put;

    return rl::args(q, args);
}

int rl_api_message(rl_api_request_t *q, int status, const char *message)
{
    return rl::fail(q, status, "%s", message);
}

int rl_api_error(rl_api_request_t *q, int error)
{
    const rl::Shown zone(q->zone);
    const rl::Shown rule(q->rule, q->rule_len);

    switch (error) {
    case RL_API_NO_ZONE:
        return rl::fail(q, 404, "no zone \"%.*s\"", zone.n, zone.s);
    case RL_API_NO_RULE:
        return rl::fail(q, 404, "zone \"%.*s\" has no rule \"%.*s\"", zone.n, zone.s, rule.n, rule.s);
    case RL_API_REDIS_FINGERPRINT:
        return rl::fail(q, 400,
                        "zone \"%.*s\" is decided in Redis, where a key's state is named by a SHA-256 of the key, "
                        "not by this server's fingerprint: give key=",
                        zone.n, zone.s);
    case RL_API_REDIS_FAILED:
        return rl::fail(q, 409,
                        "zone \"%.*s\" is decided in Redis, which did not answer (not reachable, too slow, or an "
                        "answer refused: see the error log): its %s cannot be %s now, try again",
                        zone.n, zone.s, q->resource == RL_API_OVERRIDES ? "overrides" : "keys",
                        q->reset ? (q->resource == RL_API_OVERRIDES ? "removed" : "reset")
                        : q->put ? "written"
                                 : "read");
    case RL_API_NO_OVERRIDE:
        return rl::fail(q, 404, "zone \"%.*s\" has no override of that %s%s%.*s", zone.n, zone.s,
                        q->has_range ? "range" : "key", q->rule_len ? " in rule " : " in every rule", rule.n, rule.s);
    case RL_API_OVERRIDES_FULL:
        return rl::fail(q, 409,
                        "zone \"%.*s\" holds as many overrides as it has room for (ratelimit_zone overrides=): "
                        "nothing was changed; remove one, or give the zone more room",
                        zone.n, zone.s);
    case RL_API_NO_OVERRIDES:
        return rl::fail(q, 409, "zone \"%.*s\" has no room for overrides (ratelimit_zone overrides=0)", zone.n, zone.s);
    case RL_API_OVERRIDE_NOT_TAKEN:
        return rl::fail(q, 409,
                        "zone \"%.*s\": the override was %s in Redis, but this server could not take it (Redis did "
                        "not answer the read that follows, this server has no room for it, or Redis holds another "
                        "hash now: see the error log); it may apply on other servers, and here once the cause is gone",
                        zone.n, zone.s, q->reset ? "removed" : "written");
    default:
        return rl::fail(q, 500, "an error of the key API");
    }
}

}  // extern "C"
