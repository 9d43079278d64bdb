// Rule parameters: parsing and validation, once, for the nginx directive and
// the tools alike.  Every message names the parameter, the value and what is
// allowed; the glue prefixes the directive and nginx adds FILE:LINE.
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "algorithms/exact_time.h"
#include "ratelimit.h"
#include "util/error.h"
#include "util/siphash.h"

namespace {

using rl::fail;

enum Param : uint32_t {
    P_ALGORITHM = 1u << 0,
    P_LIMIT = 1u << 1,
    P_PERIOD = 1u << 2,
    P_BURST = 1u << 3,
    P_COST = 1u << 4,
    P_NAME = 1u << 5,
    P_ALIGN = 1u << 6,
    P_BUCKETS = 1u << 7,
    P_MAX_DELAY = 1u << 8,
    P_RESET = 1u << 9,
    P_UTC_OFFSET = 1u << 10,
    P_ZERO_COST = 1u << 11,
    P_LOG_KEY = 1u << 12,
    P_LIMIT_DEFAULT = 1u << 13,
    P_LIMIT_MAX = 1u << 14,
    P_DELAY = 1u << 15,
    P_CHARGE = 1u << 16,
    P_BAN = 1u << 17,
    P_MAX_WAIT = 1u << 18,
    P_ABANDONED = 1u << 19,
};

// Every parameter the core parses, by name.
const struct {
    const char *name;
    uint32_t bit;
} params[] = {
    {"algorithm", P_ALGORITHM},
    {"limit", P_LIMIT},
    {"period", P_PERIOD},
    {"burst", P_BURST},
    {"cost", P_COST},
    {"name", P_NAME},
    {"align", P_ALIGN},
    {"buckets", P_BUCKETS},
    {"max_delay", P_MAX_DELAY},
    {"delay", P_DELAY},  // limit_req's delay=
    {"reset", P_RESET},
    {"utc_offset", P_UTC_OFFSET},
    {"zero_cost", P_ZERO_COST},
    {"log_key", P_LOG_KEY},
    {"limit_default", P_LIMIT_DEFAULT},
    {"limit_max", P_LIMIT_MAX},
    {"charge", P_CHARGE},
    {"ban", P_BAN},
    {"max_wait", P_MAX_WAIT},
    {"abandoned", P_ABANDONED},
};

// The parameters that may be a $variable, evaluated by the glue per request.
const uint32_t variable_params = P_COST | P_LIMIT | P_BURST;

struct Name {
    const char *text;
    uint32_t value;
};

const Name algorithms[] = {
    {"gcra", RL_GCRA},
    {"token_bucket", RL_TOKEN_BUCKET},
    {"fixed_window", RL_FIXED_WINDOW},
    {"sliding_window", RL_SLIDING_WINDOW},
    {"sliding_log", RL_SLIDING_LOG},
    {"leaky_bucket", RL_LEAKY_BUCKET},
    {"quota", RL_QUOTA},
    {"concurrency", RL_CONCURRENCY},
};
const char *const algorithm_list =
    "gcra, token_bucket, fixed_window, sliding_window, sliding_log, leaky_bucket, quota or concurrency";

const Name aligns[] = {{"epoch", RL_ALIGN_EPOCH}, {"first", RL_ALIGN_FIRST}};
const Name switches[] = {{"off", 0}, {"on", 1}};
const Name resets[] = {{"daily", RL_RESET_DAILY}, {"weekly", RL_RESET_WEEKLY}, {"monthly", RL_RESET_MONTHLY}};
const Name abandons[] = {{"keep", RL_ABANDONED_KEEP}, {"charge", RL_ABANDONED_CHARGE}};

// Parameters that belong to one algorithm only: [bit, name, algorithm].
const struct {
    uint32_t bit;
    const char *name;
    uint32_t algorithm;
} specific[] = {
    {P_ALIGN, "align", RL_FIXED_WINDOW},
    {P_BUCKETS, "buckets", RL_SLIDING_WINDOW},
    {P_MAX_DELAY, "max_delay", RL_LEAKY_BUCKET},
    {P_DELAY, "delay", RL_LEAKY_BUCKET},
    {P_RESET, "reset", RL_QUOTA},
    {P_UTC_OFFSET, "utc_offset", RL_QUOTA},
    {P_MAX_WAIT, "max_wait", RL_CONCURRENCY},
};

// "+HH:MM" or "-HH:MM", at most 14:00 either way.
bool parse_offset(const char *p, size_t len, int32_t *minutes)
{
    if (len != 6 || (p[0] != '+' && p[0] != '-') || p[3] != ':') {
        return false;
    }
    for (size_t i : {1, 2, 4, 5}) {
        if (p[i] < '0' || p[i] > '9') {
            return false;
        }
    }
    const int h = (p[1] - '0') * 10 + (p[2] - '0'), m = (p[4] - '0') * 10 + (p[5] - '0');
    if (m > 59 || h * 60 + m > RL_UTC_OFFSET_MAX_MIN) {
        return false;
    }
    *minutes = (p[0] == '-' ? -1 : 1) * (h * 60 + m);
    return true;
}

struct Text {
    const char *p;
    size_t len;
    bool is(const char *s) const { return std::strlen(s) == len && std::memcmp(p, s, len) == 0; }
};

bool parse_uint(Text v, uint64_t max, uint64_t *out)
{
    if (v.len == 0) {
        return false;
    }
    uint64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.p[i] < '0' || v.p[i] > '9') {
            return false;
        }
        n = n * 10 + (uint64_t) (v.p[i] - '0');
        if (n > max) {
            return false;
        }
    }
    *out = n;
    return true;
}

bool lookup(const Name *names, size_t n, Text v, uint32_t *out)
{
    for (size_t i = 0; i < n; i++) {
        if (v.is(names[i].text)) {
            *out = names[i].value;
            return true;
        }
    }
    return false;
}

// The word of a value, the other way round: "?" for none.
const char *name_of(const Name *names, size_t n, uint32_t value)
{
    for (size_t i = 0; i < n; i++) {
        if (names[i].value == value) {
            return names[i].text;
        }
    }
    return "?";
}

const char *algorithm_name(uint32_t a)
{
    return name_of(algorithms, sizeof(algorithms) / sizeof(algorithms[0]), a);
}

// The shortest exact spelling of a period: 60000 -> "1m", 1500 -> "1500ms".
void format_period(int64_t ms, char *buf, size_t len)
{
    static const struct {
        int64_t ms;
        const char *unit;
    } units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}};
    for (const auto &u : units) {
        if (ms % u.ms == 0) {
            std::snprintf(buf, len, "%lld%s", (long long) (ms / u.ms), u.unit);
            return;
        }
    }
}

// The exact arithmetic (exact_time.h) works in units of 1/limit ms: a
// bucket's capacity, burst x period, or a shaper's queue,
// limit x (period + max_delay) + delay x period, must fit in 2^61 units.
constexpr uint64_t kUnitsBound = 1ull << 61;

bool too_large(const rl_rule_t &rule)
{
    const bool bucket = rule.algorithm == RL_GCRA || rule.algorithm == RL_TOKEN_BUCKET;
    const bool leaky = rule.algorithm == RL_LEAKY_BUCKET;
    // with charge=, a bucket may owe a limit beyond its burst (RL_DEBT)
    const uint64_t count = bucket ? (uint64_t) rule.burst + (rule.charge ? rule.limit : 0) : rule.limit;
    const uint64_t span = (uint64_t) rule.period_ms + (leaky ? (uint64_t) rule.max_delay_ms : 0);
    const unsigned __int128 served = leaky ? (unsigned __int128) rule.delay * (uint64_t) rule.period_ms : 0;
    return (bucket || leaky) && (unsigned __int128) count * span + served > kUnitsBound;
}

// A request's value of a variable, for a message: at most 32 bytes,
// escaped (rl_escape: the client may have chosen it).
constexpr size_t kValueShown = 32;
constexpr size_t kQuotedMax = RL_ESCAPED_MAX(kValueShown) + 1;

void quote_value(Text v, char (&buf)[kQuotedMax])
{
    buf[rl_escape(buf, v.p, v.len, kValueShown)] = '\0';
}

bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
}

int set_param(rl_rule_t *rule, Text name, Text v, Text whole, char *err, size_t errlen)
{
    const int w = (int) whole.len;
    uint32_t bit;
    uint64_t n;

    if (name.is("zone") || name.is("key")) {
        return RL_DECLINED;
    }

    bit = 0;
    for (const auto &p : params) {
        if (name.is(p.name)) {
            bit = p.bit;
        }
    }
    if (bit == 0) {
        char expected[RL_ERR_MAX] = "zone=, key=";
        const size_t n = sizeof(params) / sizeof(params[0]);
        for (size_t i = 0; i < n; i++) {
            const size_t at = std::strlen(expected);
            std::snprintf(expected + at, sizeof(expected) - at, "%s%s=", i + 1 < n ? ", " : " or ", params[i].name);
        }
        return fail(err, errlen, "unknown parameter \"%.*s\": expected %s", w, whole.p, expected);
    }

    if (rule->given & bit) {
        return fail(err, errlen, "duplicate parameter \"%.*s\": each parameter may be given once", w, whole.p);
    }
    rule->given |= bit;

    if (bit == P_CHARGE) {
        if (v.len == 0) {
            return fail(err, errlen, "invalid \"%.*s\": expected a value, like charge=$upstream_http_x_tokens", w,
                        whole.p);
        }
        rule->charge = 1;
        return RL_DECLINED;  // the glue evaluates it when the request ends
    }

    if ((bit & variable_params) && v.len > 0 && v.p[0] == '$') {
        (bit == P_COST ? rule->cost_var : bit == P_LIMIT ? rule->limit_var : rule->burst_var) = 1;
        return RL_DECLINED;  // the glue evaluates it per request
    }

    switch (bit) {
    case P_ALGORITHM:
        if (!lookup(algorithms, sizeof(algorithms) / sizeof(algorithms[0]), v, &rule->algorithm)) {
            return fail(err, errlen, "invalid \"%.*s\": expected algorithm=%s", w, whole.p, algorithm_list);
        }
        return RL_OK;

    case P_LIMIT:
    case P_BURST:
    case P_COST:
    case P_DELAY:
    case P_LIMIT_DEFAULT:
    case P_LIMIT_MAX: {
        const uint64_t min = bit == P_COST || bit == P_DELAY ? 0 : 1;
        if (!parse_uint(v, RL_LIMIT_MAX, &n) || n < min) {
            return fail(err, errlen, "invalid \"%.*s\": expected an integer from %llu to %u%s", w, whole.p,
                        (unsigned long long) min, RL_LIMIT_MAX, (bit & variable_params) ? ", or a $variable" : "");
        }
        // limit_default= is the limit until a request's variable says otherwise
        uint32_t *field = bit == P_LIMIT || bit == P_LIMIT_DEFAULT ? &rule->limit
                          : bit == P_BURST                         ? &rule->burst
                          : bit == P_COST                          ? &rule->cost
                          : bit == P_DELAY                         ? &rule->delay
                                                                   : &rule->limit_max;
        *field = (uint32_t) n;
        return RL_OK;
    }

    case P_PERIOD: {
        int64_t ms;
        if (rl_parse_time_ms(v.p, v.len, &ms) != RL_OK || ms < 1 || ms > RL_PERIOD_MAX_MS) {
            return fail(err, errlen, "invalid \"%.*s\": expected a time from 1ms to 366d, like 500ms, 1s, 1m, 1h, 7d",
                        w, whole.p);
        }
        rule->period_ms = ms;
        return RL_OK;
    }

    case P_NAME:
        if (!rl_name_valid(v.p, v.len)) {
            return fail(err, errlen, "invalid \"%.*s\": expected " RL_NAME_EXPECTED, w, whole.p);
        }
        std::memcpy(rule->name, v.p, v.len);
        rule->name[v.len] = '\0';
        return RL_OK;

    case P_BUCKETS:
        if (!parse_uint(v, RL_BUCKETS_MAX, &n) || n < 1) {
            return fail(err, errlen, "invalid \"%.*s\": expected an integer from 1 to %u", w, whole.p, RL_BUCKETS_MAX);
        }
        rule->buckets = (uint32_t) n;
        return RL_OK;

    case P_BAN:
        if (rl_parse_time_ms(v.p, v.len, &rule->ban_ms) != RL_OK || rule->ban_ms < 1 || rule->ban_ms > RL_BAN_MAX_MS) {
            return fail(err, errlen, "invalid \"%.*s\": expected a time from 1ms to 366d, like 30s, 15m, 1h", w,
                        whole.p);
        }
        return RL_OK;

    case P_MAX_WAIT:
        if (rl_parse_time_ms(v.p, v.len, &rule->max_wait_ms) != RL_OK || rule->max_wait_ms > 3600000) {
            return fail(err, errlen, "invalid \"%.*s\": expected a time from 0ms to 1h, like 500ms, 10s, 1m", w,
                        whole.p);
        }
        return RL_OK;

    case P_MAX_DELAY:
        if (rl_parse_time_ms(v.p, v.len, &rule->max_delay_ms) != RL_OK || rule->max_delay_ms > RL_PERIOD_MAX_MS) {
            return fail(err, errlen, "invalid \"%.*s\": expected a time from 0ms to 366d, like 500ms, 5s, 1m", w,
                        whole.p);
        }
        return RL_OK;

    case P_RESET:
        if (!lookup(resets, 3, v, &rule->reset)) {
            return fail(err, errlen, "invalid \"%.*s\": expected reset=daily, reset=weekly or reset=monthly", w,
                        whole.p);
        }
        return RL_OK;

    case P_UTC_OFFSET:
        if (!parse_offset(v.p, v.len, &rule->utc_offset_min)) {
            return fail(err, errlen, "invalid \"%.*s\": expected +HH:MM or -HH:MM, at most 14:00, like +05:30", w,
                        whole.p);
        }
        return RL_OK;

    case P_ZERO_COST:
    case P_LOG_KEY: {
        uint32_t on;
        if (!lookup(switches, 2, v, &on)) {
            return fail(err, errlen, "invalid \"%.*s\": expected %.*s=on or %.*s=off", w, whole.p, (int) name.len,
                        name.p, (int) name.len, name.p);
        }
        (bit == P_ZERO_COST ? rule->zero_cost : rule->log_key) = on;
        return RL_OK;
    }

    case P_ABANDONED:
        if (!lookup(abandons, 2, v, &rule->abandoned)) {
            return fail(err, errlen, "invalid \"%.*s\": expected abandoned=keep or abandoned=charge", w, whole.p);
        }
        return RL_OK;

    default: /* P_ALIGN */
        if (!lookup(aligns, 2, v, &rule->align)) {
            return fail(err, errlen, "invalid \"%.*s\": expected align=epoch or align=first", w, whole.p);
        }
        return RL_OK;
    }
}

}  // namespace

extern "C" {

void rl_rule_init(rl_rule_t *rule)
{
    std::memset(rule, 0, sizeof(*rule));
    rule->algorithm = RL_GCRA;
    rule->period_ms = 1000;
    rule->cost = 1;
    rule->align = RL_ALIGN_EPOCH;
}

int rl_rule_param(rl_rule_t *rule, const char *param, size_t len, char *err, size_t errlen)
{
    try {
        const char *eq = static_cast<const char *>(std::memchr(param, '=', len));
        if (eq == nullptr || eq == param) {
            return fail(err, errlen, "invalid parameter \"%.*s\": expected name=value", (int) len, param);
        }
        Text name{param, (size_t) (eq - param)};
        Text value{eq + 1, len - name.len - 1};
        return set_param(rule, name, value, Text{param, len}, err, errlen);
    } catch (...) {
        return fail(err, errlen, "internal error");
    }
}

int rl_rule_finish(rl_rule_t *rule, char *err, size_t errlen)
{
    try {
        const uint32_t a = rule->algorithm;
        const char *alg = algorithm_name(a);
        const bool bucket = a == RL_GCRA || a == RL_TOKEN_BUCKET;

        if (!(rule->given & P_LIMIT)) {
            return fail(err, errlen, "missing \"limit=\": every rule needs one, e.g. limit=100");
        }
        if ((rule->given & P_BURST) && !bucket) {
            char burst[16] = "";
            if (!rule->burst_var) {
                std::snprintf(burst, sizeof(burst), "%u", rule->burst);
            }
            return fail(err, errlen, "\"burst=%s\" does not apply to algorithm=%s: burst is for gcra and token_bucket",
                        burst, alg);
        }
        for (const auto &p : specific) {
            if ((rule->given & p.bit) && a != p.algorithm) {
                return fail(err, errlen, "\"%s=\" does not apply to algorithm=%s: %s is for %s", p.name, alg, p.name,
                            algorithm_name(p.algorithm));
            }
        }

        if (rule->charge && a == RL_LEAKY_BUCKET) {
            return fail(err, errlen,
                        "\"charge=\" does not apply to algorithm=leaky_bucket: a shaper sets each request's "
                        "delay before it is served, so what the request spends cannot change after it");
        }

        if ((rule->given & P_ABANDONED) && !rule->charge) {
            return fail(err, errlen,
                        "\"abandoned=\" applies to rules with charge= only: it says what a request its client "
                        "abandoned spends, its reservation (keep) or its charge");
        }

        if ((rule->given & P_ZERO_COST) && !rule->cost_var) {
            return fail(err, errlen,
                        "\"zero_cost=\" applies to cost=$variable only: a constant cost=0 always looks without "
                        "spending");
        }

        if (rule->limit_var && !(rule->given & P_LIMIT_DEFAULT)) {
            return fail(err, errlen,
                        "missing \"limit_default=\" for limit=$variable: the limit a request gets when the "
                        "variable's value is not a valid limit, e.g. limit_default=100");
        }
        if (!rule->limit_var && (rule->given & P_LIMIT_DEFAULT)) {
            return fail(err, errlen, "\"limit_default=\" applies to limit=$variable only");
        }
        const bool var = rule->limit_var || rule->burst_var;
        if (!var && (rule->given & P_LIMIT_MAX)) {
            return fail(err, errlen, "\"limit_max=\" applies to limit=$variable or burst=$variable only");
        }
        if (var && !(rule->given & P_LIMIT_MAX)) {
            if (a == RL_CONCURRENCY) {
                return fail(err, errlen,
                            "missing \"limit_max=\" for algorithm=concurrency with limit=$variable: its state "
                            "keeps who holds each slot, sized by the largest limit, e.g. limit_max=100 (at most %u)",
                            RL_CONCURRENCY_MAX);
            }
            if (a == RL_SLIDING_LOG) {
                return fail(err, errlen,
                            "missing \"limit_max=\" for algorithm=sliding_log with limit=$variable: its state "
                            "keeps one time a unit, sized by the largest limit, e.g. limit_max=1000 (at most %u)",
                            RL_LOG_LIMIT_MAX);
            }
            rule->limit_max = RL_LIMIT_MAX;
        }
        if (var && rule->limit > rule->limit_max) {
            return fail(err, errlen, "\"%s=%u\" exceeds limit_max=%u", rule->limit_var ? "limit_default" : "limit",
                        rule->limit, rule->limit_max);
        }

        if (a == RL_CONCURRENCY) {
            if (rule->given & P_PERIOD) {
                return fail(err, errlen,
                            "\"period=\" does not apply to algorithm=concurrency: it limits the requests of a "
                            "key in flight at once, not a rate (add a rule of another algorithm for a rate)");
            }
            if ((rule->given & P_COST) || rule->charge) {
                return fail(err, errlen,
                            "\"%s=\" does not apply to algorithm=concurrency: each request holds one slot while "
                            "it runs",
                            rule->charge ? "charge" : "cost");
            }
            const uint32_t most = rule->limit_var ? rule->limit_max : rule->limit;
            if (most > RL_CONCURRENCY_MAX) {
                return fail(err, errlen,
                            "\"%s=%u\" is too large for algorithm=concurrency: a key holds at most %u requests in "
                            "flight (its state keeps who holds each)",
                            rule->limit_var ? "limit_max" : "limit", most, RL_CONCURRENCY_MAX);
            }
        }
        if (a == RL_QUOTA) {
            if (rule->given & P_PERIOD) {
                return fail(err, errlen,
                            "\"period=\" does not apply to algorithm=quota: its period is the calendar's, "
                            "set by reset=daily, weekly or monthly");
            }
            if (!(rule->given & P_RESET)) {
                return fail(err, errlen,
                            "missing \"reset=\" for algorithm=quota: expected reset=daily, weekly or monthly");
            }
            static const int64_t lengths[] = {86400000, 7 * 86400000LL, 30 * 86400000LL};
            rule->period_ms = lengths[rule->reset];  // nominal: names and docs; decisions use the calendar
        }
        if (a == RL_SLIDING_LOG) {
            const uint32_t most = rule->limit_var ? rule->limit_max : rule->limit;
            if (most > RL_LOG_LIMIT_MAX) {
                return fail(err, errlen,
                            "\"%s=%u\" is too large for algorithm=sliding_log: it keeps one time a unit, at most "
                            "%u; use sliding_window for larger limits",
                            rule->limit_var ? "limit_max" : "limit", most, RL_LOG_LIMIT_MAX);
            }
            if (rule->period_ms > RL_LOG_PERIOD_MAX_MS) {
                return fail(err, errlen,
                            "\"period=\" is too long for algorithm=sliding_log: at most 24d (2^31 ms); use "
                            "sliding_window or quota for longer periods");
            }
        }
        if (!(rule->given & P_BURST) || rule->burst_var) {
            rule->burst = rule->limit;
        }
        if (!(rule->given & P_BUCKETS)) {
            rule->buckets = 10;
        }
        if (!(rule->given & P_MAX_DELAY)) {
            rule->max_delay_ms = rule->period_ms;
        }

        const uint32_t capacity = bucket ? rule->burst : rule->limit;
        if (rule->cost > capacity) {
            return fail(err, errlen, "\"cost=%u\" can never be admitted: it exceeds %s=%u", rule->cost,
                        bucket ? "burst" : "limit", capacity);
        }

        // The 2^61 bound (too_large): the message names the largest time for
        // this count, and the largest count for this time.
        const uint64_t max_units = kUnitsBound;
        const bool leaky = a == RL_LEAKY_BUCKET;
        const uint64_t count = bucket ? rule->burst : rule->limit;
        const uint64_t span = (uint64_t) rule->period_ms + (leaky ? (uint64_t) rule->max_delay_ms : 0);
        if (too_large(*rule) && leaky && rule->delay > 0) {
            char period[32];
            format_period(rule->period_ms, period, sizeof(period));
            return fail(err, errlen,
                        "limit=%u and delay=%u with \"period=%s\" and max_delay are too large: "
                        "(limit + delay) x period + limit x max_delay in ms may be at most 2^61",
                        rule->limit, rule->delay, period);
        }
        if (too_large(*rule) && bucket && rule->charge) {
            char period[32];
            format_period(rule->period_ms, period, sizeof(period));
            return fail(err, errlen,
                        "burst=%u and limit=%u with \"period=%s\" are too large for charge=: a key may owe a "
                        "limit beyond its burst, and (burst + limit) x period in ms may be at most 2^61",
                        rule->burst, rule->limit, period);
        }
        if (too_large(*rule)) {
            char period[32];
            format_period(rule->period_ms, period, sizeof(period));
            const uint64_t most_ms = max_units / count;
            return fail(err, errlen,
                        "%s=%u with \"period=%s\"%s is too large: %s in ms may be at most 2^61: with %s=%u, "
                        "%s may be at most %llums (%llu.%llu days); with %s, %s=%llu at most",
                        bucket ? "burst" : "limit", (unsigned) count, period, leaky ? " and max_delay" : "",
                        bucket ? "burst x period" : "limit x (period + max_delay)", bucket ? "burst" : "limit",
                        (unsigned) count, bucket ? "period" : "period + max_delay", (unsigned long long) most_ms,
                        (unsigned long long) (most_ms / 86400000), (unsigned long long) (most_ms / 8640000 % 10),
                        bucket ? "this period" : "these times", bucket ? "burst" : "limit",
                        (unsigned long long) (max_units / span));
        }

        if (!(rule->given & P_NAME)) {
            char period[32];
            if (a == RL_QUOTA) {
                std::snprintf(period, sizeof(period), "%s", name_of(resets, 3, rule->reset));
            } else if (a == RL_CONCURRENCY) {
                std::snprintf(period, sizeof(period), "%s", "at_once");
            } else {
                format_period(rule->period_ms, period, sizeof(period));
            }
            // a variable limit or burst is "var": gcra_var_1h, gcra_100_1m_bvar
            char limit[16], burst[16] = "";
            std::snprintf(limit, sizeof(limit), rule->limit_var ? "var" : "%u", rule->limit);
            if (rule->burst_var) {
                std::snprintf(burst, sizeof(burst), "_bvar");
            } else if (bucket && rule->burst != rule->limit) {
                std::snprintf(burst, sizeof(burst), "_b%u", rule->burst);
            } else if (rule->delay > 0) {
                std::snprintf(burst, sizeof(burst), "_d%u", rule->delay);
            }
            std::snprintf(rule->name, RL_NAME_MAX, "%s_%s_%s%s", alg, limit, period, burst);
        }
        rl::derive(*rule);
        return RL_OK;
    } catch (...) {
        return fail(err, errlen, "internal error");
    }
}

int rl_rule_parse(rl_rule_t *rule, const char *text, char *err, size_t errlen)
{
    rl_rule_init(rule);
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n') {
            p++;
        }
        if (*p == '\0') {
            break;
        }
        const char *start = p;
        while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\n') {
            p++;
        }
        int rc = rl_rule_param(rule, start, (size_t) (p - start), err, errlen);
        if (rc == RL_ERROR) {
            return RL_ERROR;
        }
        // zone= and key= name nginx's things; charge= is spent by the caller
        if (rc == RL_DECLINED && std::strncmp(start, "zone=", 5) != 0 && std::strncmp(start, "key=", 4) != 0 &&
            std::strncmp(start, "charge=", 7) != 0) {
            return fail(err, errlen, "invalid \"%.*s\": variables are only known inside nginx", (int) (p - start),
                        start);
        }
    }
    return rl_rule_finish(rule, err, errlen);
}

int rl_rule_apply(const rl_rule_t *rule, const char *limit, size_t limit_len, const char *burst, size_t burst_len,
                  rl_rule_t *out, char *err, size_t errlen)
{
    try {
        *out = *rule;
        err[0] = '\0';
        uint64_t n;
        char value[kQuotedMax];
        size_t len = 0;
        auto bad = [&](const char *what, Text v, const char *instead) {
            quote_value(v, value);
            len += (size_t) std::snprintf(err + len, len < errlen ? errlen - len : 0,
                                          "%s%s \"%s\" is not an integer from 1 to %u: %s applies", len ? "; " : "",
                                          what, value, rule->limit_max, instead);
            len = len < errlen ? len : errlen;
        };

        if (rule->limit_var) {
            if (parse_uint(Text{limit, limit_len}, rule->limit_max, &n) && n >= 1) {
                out->limit = (uint32_t) n;
            } else {
                char instead[32];
                std::snprintf(instead, sizeof(instead), "limit_default=%u", rule->limit);
                bad("limit", Text{limit, limit_len}, instead);
            }
        }
        if (rule->burst_var) {
            if (parse_uint(Text{burst, burst_len}, rule->limit_max, &n) && n >= 1) {
                out->burst = (uint32_t) n;
            } else {
                out->burst = out->limit;
                bad("burst", Text{burst, burst_len}, "the limit");
            }
        } else if (!(rule->given & P_BURST)) {
            out->burst = out->limit;  // a burst not given follows the limit
        }

        if (too_large(*out)) {
            // the defaults fit (rl_rule_finish)
            std::snprintf(err + len, len < errlen ? errlen - len : 0,
                          "%slimit %u and burst %u are too large for the period (2^61 units): limit_default=%u "
                          "applies",
                          len ? "; " : "", out->limit, out->burst, rule->limit);
            out->limit = rule->limit;
            out->burst = rule->burst;
            rl::derive(*out);
            return RL_DECLINED;
        }
        rl::derive(*out);
        return err[0] ? RL_DECLINED : RL_OK;
    } catch (...) {
        *out = *rule;
        return fail(err, errlen, "internal error");
    }
}

int rl_rule_cost(const rl_rule_t *rule, const char *value, size_t len, uint64_t *cost, char *err, size_t errlen)
{
    uint64_t n;
    if (parse_uint(Text{value, len}, (uint64_t) INT64_MAX, &n) && (n > 0 || rule->zero_cost)) {
        *cost = n;
        return RL_OK;
    }
    char quoted[kQuotedMax];
    quote_value(Text{value, len}, quoted);
    *cost = 1;
    std::snprintf(err, errlen, "cost \"%s\" is %s, counted as 1", quoted,
                  len > 0 && parse_uint(Text{value, len}, (uint64_t) INT64_MAX, &n) ? "0 without zero_cost=on"
                                                                                    : "not a non-negative integer");
    return RL_DECLINED;
}

int rl_rule_charge(const char *value, size_t len, uint64_t cost, uint64_t *units, char *err, size_t errlen)
{
    bool digits = len > 0;
    uint64_t n = 0;
    for (size_t i = 0; i < len && digits; i++) {
        digits = value[i] >= '0' && value[i] <= '9';
        const uint64_t d = (uint64_t) (value[i] - '0');
        n = n > (RL_NO_CHARGE - 1 - d) / 10 ? RL_NO_CHARGE - 1 : n * 10 + d;  // saturates: the bound caps it
    }
    if (digits) {
        *units = n;
        return RL_OK;
    }
    char quoted[kQuotedMax];
    quote_value(Text{value, len}, quoted);
    *units = cost;
    std::snprintf(err, errlen, "charge \"%s\" is not a non-negative integer, the request's cost (%llu) is charged",
                  quoted, (unsigned long long) cost);
    return RL_DECLINED;
}

uint64_t rl_rule_identity(const rl_rule_t *rule, const char *key_expr, size_t key_expr_len)
{
    // A fixed hash key: identities only need to be distinct, and the table
    // mixes its own secret in when it hashes keys.
    static const uint8_t k[16] = {'n', 'g', 'x', '-', 'r', 'a', 't', 'e', 'l', 'i', 'm', 'i', 't', 'i', 'd', '1'};
    uint8_t buf[1 + RL_NAME_MAX + 512];
    size_t len = 0;

    // A paced rule with a variable limit keeps a block with each key (see
    // exact_time.h): its keys are not those of the same rule with a
    // constant limit.
    buf[len++] = (uint8_t) (rule->algorithm | (rl::paced_block_size(*rule) ? 0x80 : 0));
    size_t nlen = std::strlen(rule->name);
    std::memcpy(buf + len, rule->name, nlen + 1);
    len += nlen + 1;

    rl::SipHash h(k);
    h.update(buf, len);
    if (!(rule->given & P_NAME)) {
        h.update(key_expr, key_expr_len);
    }
    return h.finish();
}

static_assert(RL_NAME_MAX == 64, "RL_NAME_EXPECTED says 1 to 63");

int rl_name_valid(const char *name, size_t len)
{
    if (len == 0 || len >= RL_NAME_MAX) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        if (!name_char(name[i])) {
            return 0;
        }
    }
    return 1;
}

const char *rl_algorithm_name(uint32_t algorithm)
{
    return algorithm_name(algorithm);
}

const char *rl_reset_name(uint32_t reset)
{
    return name_of(resets, 3, reset);
}

int rl_parse_time_ms(const char *s, size_t len, int64_t *ms)
{
    // nginx's time syntax for milliseconds: [Nw][Nd][Nh][Nm][Ns][Nms], units
    // in this order, each once; a trailing bare number is seconds.
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = {{"w", 604800000}, {"d", 86400000}, {"h", 3600000}, {"ms", 1}, {"m", 60000}, {"s", 1000}};
    static const int order[] = {0, 1, 2, 5, 3, 4};  // rank of each unit (w d h ms m s -> w d h m s ms)
    const int64_t max = RL_PERIOD_MAX_MS * 1000;
    int64_t total = 0;
    int last_rank = -1;
    size_t i = 0;

    if (len == 0) {
        return RL_ERROR;
    }
    while (i < len) {
        if (s[i] < '0' || s[i] > '9') {
            return RL_ERROR;
        }
        int64_t v = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            v = v * 10 + (s[i++] - '0');
            if (v > max) {
                return RL_ERROR;
            }
        }
        int64_t scale = 1000;  // a bare number (necessarily last) is seconds
        int rank = 4;
        if (i < len) {
            int u = -1;
            for (int k = 0; k < 6; k++) {
                size_t ul = std::strlen(units[k].unit);
                if (i + ul <= len && std::memcmp(s + i, units[k].unit, ul) == 0) {
                    u = k;
                    break;
                }
            }
            if (u < 0) {
                return RL_ERROR;
            }
            i += std::strlen(units[u].unit);
            scale = units[u].ms;
            rank = order[u];
        }
        if (rank <= last_rank) {
            return RL_ERROR;
        }
        last_rank = rank;
        if (v > max / scale) {
            return RL_ERROR;
        }
        total += v * scale;
        if (total > max) {
            return RL_ERROR;
        }
    }
    *ms = total;
    return RL_OK;
}

}  // extern "C"
