// Rule parameters: parsing and validation, once, for the nginx directive and
// the tools alike.  Every message names the parameter, the value and what is
// allowed; the glue prefixes the directive and nginx adds FILE:LINE.
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

#include "algorithms/algorithm.h"
#include "algorithms/exact_time.h"
#include "policy/classes.h"
#include "ratelimit.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/siphash.h"

namespace {

// Where rl_rule_param and rl_rule_finish write a rule's name: the room
// rl_rule_init was given.
char *name_room(rl_rule_t *rule)
{
    return const_cast<char *>(rule->name);
}

using namespace rl;

// Every parameter a rule of any algorithm may give, by name (an
// algorithm's own are its record's rows, OwnParam).
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
    {"zero_cost", P_ZERO_COST},
    {"log_key", P_LOG_KEY},
    {"limit_default", P_LIMIT_DEFAULT},
    {"limit_max", P_LIMIT_MAX},
    {"charge", P_CHARGE},
    {"ban", P_BAN},
    {"abandoned", P_ABANDONED},
    {"priority", P_PRIORITY},
    {"classes", P_CLASSES},
    {"class_default", P_CLASS_DEFAULT},
    {"fair", P_FAIR},
};

// The parameters that may be a $variable, evaluated by the glue per request.
const uint32_t variable_params = P_COST | P_LIMIT | P_BURST;

const Word switches[] = {{"on", 1}, {"off", 0}};
const Word abandons[] = {{"keep", RL_ABANDONED_KEEP}, {"charge", RL_ABANDONED_CHARGE}};

struct Text {
    const char *p;
    size_t len;
    bool is(const char *s) const { return std::strlen(s) == len && std::memcmp(p, s, len) == 0; }
};

bool parse_uint(Text v, uint64_t max, uint64_t *out)
{
    return decimal(v.p, v.len, max, out);
}

bool lookup(const Word *names, size_t n, Text v, uint32_t *out)
{
    for (size_t i = 0; i < n; i++) {
        if (v.is(names[i].text)) {
            *out = names[i].value;
            return true;
        }
    }
    return false;
}

const char *algorithm_name(uint32_t a)
{
    return a < RL_ALGORITHM_COUNT ? algorithm_of(a).name : "?";
}

// The algorithm of a name, by its record: false if none has it.
bool algorithm_named(Text v, uint32_t *out)
{
    for (uint32_t a = 0; a < RL_ALGORITHM_COUNT; a++) {
        if (v.is(algorithm_of(a).name)) {
            *out = a;
            return true;
        }
    }
    return false;
}

// "gcra, token_bucket, ... or concurrency", from the records.
void algorithm_list(char *out, size_t len)
{
    size_t at = 0;
    for (uint32_t a = 0; a < RL_ALGORITHM_COUNT && at < len; a++) {
        at += (size_t) std::snprintf(out + at, len - at, "%s%s",
                                     a == 0                       ? ""
                                     : a + 1 < RL_ALGORITHM_COUNT ? ", "
                                                                  : " or ",
                                     algorithm_of(a).name);
    }
}

// An algorithm's own parameter of this name (nullptr: none).
const OwnParam *own_row(const Algorithm &a, const char *name, size_t len)
{
    for (size_t i = 0; i < a.nown; i++) {
        if (std::strlen(a.own[i].name) == len && std::memcmp(a.own[i].name, name, len) == 0) {
            return &a.own[i];
        }
    }
    return nullptr;
}

// The first algorithm's own parameter of this name (nullptr: none).
const OwnParam *own_row(Text name)
{
    for (uint32_t a = 0; a < RL_ALGORITHM_COUNT; a++) {
        if (const OwnParam *p = own_row(algorithm_of(a), name.p, name.len)) {
            return p;
        }
    }
    return nullptr;
}

// The algorithms with any of these traits, or taking this parameter as
// their own: "gcra and token_bucket".
std::string whose(uint32_t traits, const char *param)
{
    std::string names;
    for (uint32_t a = 0; a < RL_ALGORITHM_COUNT; a++) {
        const Algorithm &r = algorithm_of(a);
        if ((r.traits & traits) || (param != nullptr && own_row(r, param, std::strlen(param)) != nullptr)) {
            names += (names.empty() ? "" : " and ") + std::string(r.name);
        }
    }
    return names;
}

// The shortest exact spelling of a period: 60000 -> "1m", 1500 -> "1500ms".
void format_period(int64_t ms, char *buf, size_t len)
{
    rl_rule_t r{};
    r.period_ms = ms;
    period_tail(r, buf, len);
}

constexpr uint64_t kUnitsBound = 1ull << 61;

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

// The parameters that are numbers, times or words: each its field, its
// bounds or its words, and what a bad value is told to be instead.
struct NumberParam {
    uint32_t bit;
    uint32_t rl_rule_t::*field;
    uint64_t min, max;
};
const NumberParam number_params[] = {
    {P_LIMIT, &rl_rule_t::limit, 1, RL_LIMIT_MAX},
    {P_LIMIT_DEFAULT, &rl_rule_t::limit, 1, RL_LIMIT_MAX},  // the limit until a request's variable says
    {P_BURST, &rl_rule_t::burst, 1, RL_LIMIT_MAX},
    {P_COST, &rl_rule_t::cost, 0, RL_LIMIT_MAX},
    {P_LIMIT_MAX, &rl_rule_t::limit_max, 1, RL_LIMIT_MAX},
};

struct TimeParam {
    uint32_t bit;
    int64_t rl_rule_t::*field;
    int64_t min, max;
    const char *expected;
};
const TimeParam time_params[] = {
    {P_PERIOD, &rl_rule_t::period_ms, 1, RL_PERIOD_MAX_MS, "a time from 1ms to 366d, like 500ms, 1s, 1m, 1h, 7d"},
    {P_BAN, &rl_rule_t::ban_ms, 1, RL_BAN_MAX_MS, "a time from 1ms to 366d, like 30s, 15m, 1h"},
};

struct WordParam {
    uint32_t bit;
    uint8_t rl_rule_t::*field;
    const Word *words;
    size_t n;
};
const WordParam word_params[] = {
    {P_ABANDONED, &rl_rule_t::abandoned, abandons, 2},
    {P_ZERO_COST, &rl_rule_t::zero_cost, switches, 2},
    {P_LOG_KEY, &rl_rule_t::log_key, switches, 2},
};

// The value of a number, a time or a word parameter, or the message
// saying what it may be: "expected an integer from 1 to 100", "expected
// reset=daily, reset=weekly or reset=monthly".
int number_of(Text v, uint64_t min, uint64_t max, bool variable, Text whole, uint64_t *n, char *err, size_t errlen)
{
    if (!parse_uint(v, max, n) || *n < min) {
        return fail(err, errlen, "invalid \"%.*s\": expected an integer from %llu to %llu%s", (int) whole.len, whole.p,
                    (unsigned long long) min, (unsigned long long) max, variable ? ", or a $variable" : "");
    }
    return RL_OK;
}

int time_of(Text v, int64_t min, int64_t max, const char *expected, Text whole, int64_t *ms, char *err, size_t errlen)
{
    if (rl_parse_time_ms(v.p, v.len, ms) != RL_OK || *ms < min || *ms > max) {
        return fail(err, errlen, "invalid \"%.*s\": expected %s", (int) whole.len, whole.p, expected);
    }
    return RL_OK;
}

int word_of(const Word *words, size_t n, Text name, Text v, Text whole, uint32_t *word, char *err, size_t errlen)
{
    if (lookup(words, n, v, word)) {
        return RL_OK;
    }
    char expected[RL_ERR_MAX / 2] = "";
    size_t at = 0;
    for (size_t i = 0; i < n && at < sizeof(expected); i++) {
        at += (size_t) std::snprintf(expected + at, sizeof(expected) - at, "%s%.*s=%s",
                                     i == 0      ? ""
                                     : i + 1 < n ? ", "
                                                 : " or ",
                                     (int) name.len, name.p, words[i].text);
    }
    return fail(err, errlen, "invalid \"%.*s\": expected %s", (int) whole.len, whole.p, expected);
}

int set_number(rl_rule_t *rule, const NumberParam &p, Text v, Text whole, char *err, size_t errlen)
{
    uint64_t n = 0;
    if (number_of(v, p.min, p.max, p.bit & variable_params, whole, &n, err, errlen) != RL_OK) {
        return RL_ERROR;
    }
    rule->*p.field = (uint32_t) n;
    return RL_OK;
}

int set_time(rl_rule_t *rule, const TimeParam &p, Text v, Text whole, char *err, size_t errlen)
{
    return time_of(v, p.min, p.max, p.expected, whole, &(rule->*p.field), err, errlen);
}

int set_word(rl_rule_t *rule, const WordParam &p, Text name, Text v, Text whole, char *err, size_t errlen)
{
    uint32_t word;
    if (word_of(p.words, p.n, name, v, whole, &word, err, errlen) != RL_OK) {
        return RL_ERROR;
    }
    rule->*p.field = (uint8_t) word;
    return RL_OK;
}

// An algorithm's own parameter, into the rule's block where its row says.
int set_own(rl_rule_t *rule, const OwnParam &p, Text name, Text v, Text whole, char *err, size_t errlen)
{
    unsigned char *field = reinterpret_cast<unsigned char *>(rule->own) + p.offset;
    uint64_t n = 0;
    int64_t ms = 0;
    uint32_t word = 0;
    switch (p.kind) {
    case OwnParam::kNumber:
        if (number_of(v, (uint64_t) p.min, (uint64_t) p.max, false, whole, &n, err, errlen) != RL_OK) {
            return RL_ERROR;
        }
        word = (uint32_t) n;
        std::memcpy(field, &word, sizeof(word));
        return RL_OK;
    case OwnParam::kTime:
        if (time_of(v, p.min, p.max, p.expected, whole, &ms, err, errlen) != RL_OK) {
            return RL_ERROR;
        }
        std::memcpy(field, &ms, sizeof(ms));
        return RL_OK;
    case OwnParam::kWord:
        if (word_of(p.words, p.nwords, name, v, whole, &word, err, errlen) != RL_OK) {
            return RL_ERROR;
        }
        *field = (uint8_t) word;
        return RL_OK;
    default:
        if (!p.parse(v.p, v.len, field)) {
            return fail(err, errlen, "invalid \"%.*s\": expected %s", (int) whole.len, whole.p, p.expected);
        }
        return RL_OK;
    }
}

// The parameters of their own kind: algorithm=, name=.
int set_other(rl_rule_t *rule, uint32_t bit, Text v, Text whole, char *err, size_t errlen)
{
    const int w = (int) whole.len;
    if (bit == P_ALGORITHM) {
        if (!algorithm_named(v, &rule->algorithm)) {
            char list[RL_ERR_MAX / 2];
            algorithm_list(list, sizeof(list));
            return fail(err, errlen, "invalid \"%.*s\": expected algorithm=%s", w, whole.p, list);
        }
        return RL_OK;
    }
    if (!rl_name_valid(v.p, v.len)) {  // P_NAME
        return fail(err, errlen, "invalid \"%.*s\": expected " RL_NAME_EXPECTED, w, whole.p);
    }
    std::memcpy(name_room(rule), v.p, v.len);
    name_room(rule)[v.len] = '\0';
    return RL_OK;
}

// The parameter's bit in the table of parameters (0: none), and the list
// of them for a message: every rule's, then the algorithms' own, each
// once, in the records' order.
uint32_t param_bit(Text name)
{
    for (const auto &p : params) {
        if (name.is(p.name)) {
            return p.bit;
        }
    }
    return 0;
}

int unknown_param(Text whole, char *err, size_t errlen)
{
    std::string expected = "zone=, key=";
    for (const auto &p : params) {
        expected += std::string(", ") + p.name + "=";
    }
    for (uint32_t a = 0; a < RL_ALGORITHM_COUNT; a++) {
        const Algorithm &r = algorithm_of(a);
        for (size_t i = 0; i < r.nown; i++) {
            if (own_row(Text{r.own[i].name, std::strlen(r.own[i].name)}) == &r.own[i]) {
                expected += std::string(", ") + r.own[i].name + "=";
            }
        }
    }
    expected.replace(expected.rfind(", "), 2, " or ");
    return fail(err, errlen, "unknown parameter \"%.*s\": expected %s", (int) whole.len, whole.p, expected.c_str());
}

// The rule gives a parameter once.
int given_once(rl_rule_t *rule, uint64_t bit, Text whole, char *err, size_t errlen)
{
    if (rule->given & bit) {
        return fail(err, errlen, "duplicate parameter \"%.*s\": each parameter may be given once", (int) whole.len,
                    whole.p);
    }
    rule->given |= bit;
    return RL_OK;
}

int set_param(rl_rule_t *rule, Text name, Text v, Text whole, char *err, size_t errlen)
{
    if (name.is("zone") || name.is("key")) {
        return RL_DECLINED;
    }
    const uint32_t bit = param_bit(name);
    if (bit == 0) {
        // an algorithm's own, whichever the rule's is: check_given
        // refuses another's
        const OwnParam *own = own_row(name);
        if (own == nullptr) {
            return unknown_param(whole, err, errlen);
        }
        return given_once(rule, own_bit(own->name), whole, err, errlen) != RL_OK
                   ? RL_ERROR
                   : set_own(rule, *own, name, v, whole, err, errlen);
    }
    if (given_once(rule, bit, whole, err, errlen) != RL_OK) {
        return RL_ERROR;
    }

    if (bit == P_CHARGE) {
        if (v.len == 0) {
            return fail(err, errlen, "invalid \"%.*s\": expected a value, like charge=$upstream_http_x_tokens",
                        (int) whole.len, whole.p);
        }
        rule->charge = 1;
        return RL_DECLINED;  // the glue evaluates it when the request ends
    }
    if (bit & (P_PRIORITY | P_CLASSES | P_CLASS_DEFAULT | P_FAIR)) {
        return class_param(*rule, bit, v.p, v.len, whole.p, whole.len, err, errlen);
    }
    if ((bit & variable_params) && v.len > 0 && v.p[0] == '$') {
        (bit == P_COST ? rule->cost_var : bit == P_LIMIT ? rule->limit_var : rule->burst_var) = 1;
        return RL_DECLINED;  // the glue evaluates it per request
    }
    for (const auto &p : number_params) {
        if (p.bit == bit) {
            return set_number(rule, p, v, whole, err, errlen);
        }
    }
    for (const auto &p : time_params) {
        if (p.bit == bit) {
            return set_time(rule, p, v, whole, err, errlen);
        }
    }
    for (const auto &p : word_params) {
        if (p.bit == bit) {
            return set_word(rule, p, name, v, whole, err, errlen);
        }
    }
    return set_other(rule, bit, v, whole, err, errlen);
}

// The parameters given that the rule's algorithm does not take: burst=
// but for a bucket, another algorithm's own, charge= where it cannot
// spend.  Every rule needs a limit.
int check_given(const rl_rule_t &rule, const Algorithm &a, char *err, size_t errlen)
{
    if (!(rule.given & P_LIMIT)) {
        return fail(err, errlen, "missing \"limit=\": every rule needs one, e.g. limit=100");
    }
    if ((rule.given & P_BURST) && !(a.traits & kBucket)) {
        char burst[16] = "";
        if (!rule.burst_var) {
            std::snprintf(burst, sizeof(burst), "%u", rule.burst);
        }
        return fail(err, errlen, "\"burst=%s\" does not apply to algorithm=%s: burst is for %s", burst, a.name,
                    whose(kBucket, nullptr).c_str());
    }
    // the classes' parameters: the in-flight algorithms'
    static const struct {
        Param bit;
        const char *name;
    } kClassParams[] = {
        {P_PRIORITY, "priority"}, {P_CLASSES, "classes"}, {P_CLASS_DEFAULT, "class_default"}, {P_FAIR, "fair"}};
    for (const auto &p : kClassParams) {
        if ((rule.given & p.bit) && !(a.traits & kSlots)) {
            return fail(err, errlen, "\"%s=\" does not apply to algorithm=%s: %s is for %s", p.name, a.name, p.name,
                        whose(kSlots, nullptr).c_str());
        }
    }
    for (uint32_t other = 0; other < RL_ALGORITHM_COUNT; other++) {
        const Algorithm &o = algorithm_of(other);
        for (size_t i = 0; i < o.nown; i++) {
            const char *name = o.own[i].name;
            if ((rule.given & own_bit(name)) && own_row(a, name, std::strlen(name)) == nullptr) {
                return fail(err, errlen, "\"%s=\" does not apply to algorithm=%s: %s is for %s", name, a.name, name,
                            whose(0, name).c_str());
            }
        }
    }
    if (rule.charge && a.charge == nullptr) {
        return fail(err, errlen, "\"charge=\" does not apply to algorithm=%s: %s", a.name, a.no_charge);
    }
    if ((rule.given & P_ABANDONED) && !rule.charge) {
        return fail(err, errlen,
                    "\"abandoned=\" applies to rules with charge= only: it says what a request its client "
                    "abandoned spends, its reservation (keep) or its charge");
    }
    if ((rule.given & P_ZERO_COST) && !rule.cost_var) {
        return fail(err, errlen,
                    "\"zero_cost=\" applies to cost=$variable only: a constant cost=0 always looks without "
                    "spending");
    }
    return RL_OK;
}

// A variable limit or burst: the limit a bad value falls back to, and the
// largest it may give.
int check_variables(const rl_rule_t &rule, char *err, size_t errlen)
{
    if (rule.limit_var && !(rule.given & P_LIMIT_DEFAULT)) {
        return fail(err, errlen,
                    "missing \"limit_default=\" for limit=$variable: the limit a request gets when the variable's "
                    "value is not a valid limit, e.g. limit_default=100");
    }
    if (!rule.limit_var && (rule.given & P_LIMIT_DEFAULT)) {
        return fail(err, errlen, "\"limit_default=\" applies to limit=$variable only");
    }
    if (!(rule.limit_var || rule.burst_var) && (rule.given & P_LIMIT_MAX)) {
        return fail(err, errlen, "\"limit_max=\" applies to limit=$variable or burst=$variable only");
    }
    return RL_OK;
}

// The 2^61 bound (too_large): the message names the largest time for this
// count, and the largest count for this time.
int too_large_error(const rl_rule_t &rule, const Algorithm &a, char *err, size_t errlen)
{
    const uint64_t max_units = kUnitsBound;
    const bool bucket = a.traits & kBucket, leaky = a.traits & kShaper;
    const uint64_t count = bucket ? rule.burst : rule.limit;
    const Queue q = queue_of(rule);
    const uint64_t span = (uint64_t) rule.period_ms + (uint64_t) q.wait_ms;
    char period[32];
    format_period(rule.period_ms, period, sizeof(period));
    if (leaky && q.at_once > 0) {
        return fail(err, errlen,
                    "limit=%u and delay=%u with \"period=%s\" and max_delay are too large: (limit + delay) x period "
                    "+ limit x max_delay in ms may be at most 2^61",
                    rule.limit, q.at_once, period);
    }
    if (bucket && rule.charge) {
        return fail(err, errlen,
                    "burst=%u and limit=%u with \"period=%s\" are too large for charge=: a key may owe a limit "
                    "beyond its burst, and (burst + limit) x period in ms may be at most 2^61",
                    rule.burst, rule.limit, period);
    }
    const uint64_t most_ms = max_units / count;
    return fail(err, errlen,
                "%s=%u with \"period=%s\"%s is too large: %s in ms may be at most 2^61: with %s=%u, %s may be at "
                "most %llums (%llu.%llu days); with %s, %s=%llu at most",
                bucket ? "burst" : "limit", (unsigned) count, period, leaky ? " and max_delay" : "",
                bucket ? "burst x period" : "limit x (period + max_delay)", bucket ? "burst" : "limit",
                (unsigned) count, bucket ? "period" : "period + max_delay", (unsigned long long) most_ms,
                (unsigned long long) (most_ms / 86400000), (unsigned long long) (most_ms / 8640000 % 10),
                bucket ? "this period" : "these times", bucket ? "burst" : "limit",
                (unsigned long long) (max_units / span));
}

// The defaults, then the bounds every rule keeps: a variable within
// limit_max, a cost the rule can admit, the exact arithmetic's 2^61.
int check_bounds(rl_rule_t &rule, const Algorithm &a, char *err, size_t errlen)
{
    const bool var = rule.limit_var || rule.burst_var;
    if (var && !(rule.given & P_LIMIT_MAX)) {
        rule.limit_max = RL_LIMIT_MAX;
    }
    if (var && rule.limit > rule.limit_max) {
        return fail(err, errlen, "\"%s=%u\" exceeds limit_max=%u", rule.limit_var ? "limit_default" : "limit",
                    rule.limit, rule.limit_max);
    }
    if (!(rule.given & P_BURST) || rule.burst_var) {
        rule.burst = rule.limit;
    }
    if (a.follow != nullptr) {
        a.follow(rule);
    }
    const bool bucket = a.traits & kBucket;
    const uint32_t capacity = bucket ? rule.burst : rule.limit;
    if (rule.cost > capacity) {
        return fail(err, errlen, "\"cost=%u\" can never be admitted: it exceeds %s=%u", rule.cost,
                    bucket ? "burst" : "limit", capacity);
    }
    return too_large(rule) ? too_large_error(rule, a, err, errlen) : RL_OK;
}

// A rule without name=: its algorithm, limit, its record's last word (a
// period, a calendar) and what sets it apart: gcra_100_1m, gcra_var_1h,
// gcra_100_1m_b20, leaky_bucket_10_1s_d5.
void default_name(rl_rule_t &rule, const Algorithm &a)
{
    char tail[32], limit[16], extra[16] = "";
    a.name_tail(rule, tail, sizeof(tail));
    std::snprintf(limit, sizeof(limit), rule.limit_var ? "var" : "%u", rule.limit);
    if (rule.burst_var) {
        std::snprintf(extra, sizeof(extra), "_bvar");
    } else if ((a.traits & kBucket) && rule.burst != rule.limit) {
        std::snprintf(extra, sizeof(extra), "_b%u", rule.burst);
    } else if (queue_of(rule).at_once > 0) {
        std::snprintf(extra, sizeof(extra), "_d%u", queue_of(rule).at_once);
    }
    std::snprintf(name_room(&rule), RL_NAME_MAX, "%s_%s_%s%s", a.name, limit, tail, extra);
}

// rl_rule_parse's words, each as rl_rule_param takes it, then the rule
// finished.
int parse_words(rl_rule_t *rule, const char *text, char *err, size_t errlen)
{
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
        if (std::strncmp(start, "key=", 4) == 0) {
            rule->keyed = rl_rule_keyed(start + 4, (size_t) (p - start) - 4);
        }
        // zone= and key= name nginx's things; charge= is spent by the caller
        if (rc == RL_DECLINED && std::strncmp(start, "zone=", 5) != 0 && std::strncmp(start, "key=", 4) != 0 &&
            std::strncmp(start, "charge=", 7) != 0 && std::strncmp(start, "priority=", 9) != 0 &&
            std::strncmp(start, "fair=", 5) != 0) {
            return fail(err, errlen, "invalid \"%.*s\": variables are only known inside nginx", (int) (p - start),
                        start);
        }
    }
    return rl_rule_finish(rule, err, errlen);
}

}  // namespace

namespace rl {

// The exact arithmetic (exact_time.h) works in units of 1/limit ms: a
// bucket's capacity, burst x period, or a shaper's queue,
// limit x (period + max_delay) + delay x period, must fit in 2^61 units.
bool too_large(const rl_rule_t &rule)
{
    const uint32_t traits = algorithm_of(rule).traits;
    const bool bucket = traits & kBucket, leaky = traits & kShaper;
    // with charge=, a bucket may owe a limit beyond its burst (RL_DEBT)
    const uint64_t count = bucket ? (uint64_t) rule.burst + (rule.charge ? rule.limit : 0) : rule.limit;
    const Queue q = queue_of(rule);
    const uint64_t span = (uint64_t) rule.period_ms + (uint64_t) q.wait_ms;
    const unsigned __int128 served = (unsigned __int128) q.at_once * (uint64_t) rule.period_ms;
    return (bucket || leaky) && (unsigned __int128) count * span + served > kUnitsBound;
}

}  // namespace rl

extern "C" {

void rl_rule_init(rl_rule_t *rule, char name[RL_NAME_MAX])
{
    std::memset(rule, 0, sizeof(*rule));
    name[0] = '\0';
    rule->name = name;
    rule->algorithm = RL_ALGORITHM_DEFAULT;
    rule->period_ms = 1000;
    rule->cost = 1;
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
        const Algorithm &a = algorithm_of(*rule);
        if (check_given(*rule, a, err, errlen) != RL_OK || check_variables(*rule, err, errlen) != RL_OK ||
            (a.finish != nullptr && a.finish(*rule, err, errlen) != RL_OK) ||
            classes_finish(*rule, err, errlen) != RL_OK || check_bounds(*rule, a, err, errlen) != RL_OK) {
            return RL_ERROR;
        }
        if (!(rule->given & P_NAME)) {
            default_name(*rule, a);
        }
        derive(*rule);
        return RL_OK;
    } catch (...) {
        return fail(err, errlen, "internal error");
    }
}

int rl_rule_parse(rl_rule_t *rule, char name[RL_NAME_MAX], const char *text, char *err, size_t errlen)
{
    return rl_rule_parse_classes(rule, name, nullptr, text, err, errlen);
}

int rl_rule_parse_classes(rl_rule_t *rule, char name[RL_NAME_MAX], rl_classes_t *classes, const char *text, char *err,
                          size_t errlen)
{
    rl_rule_init(rule, name);
    rule->keyed = rl_rule_keyed("", 0);  // key= may name its expression
    if (classes != nullptr) {
        std::memset(classes, 0, sizeof(*classes));
        rule->classes = classes;
    }
    const int rc = parse_words(rule, text, err, errlen);
    if (classes != nullptr && classes->n == 0) {
        rule->classes = nullptr;  // none given: decided as a rule without
    }
    return rc;
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
    const bool paced_block = (rl::algorithm_of(*rule).traits & rl::kPaced) && rule->limit_var;
    buf[len++] = (uint8_t) (rule->algorithm | (paced_block ? 0x80 : 0));
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

uint64_t rl_rule_keyed(const char *key_expr, size_t key_expr_len)
{
    // a fixed hash key, another than the identities': the same text on
    // every server stands for the same keys
    static const uint8_t k[16] = {'n', 'g', 'x', '-', 'r', 'a', 't', 'e', 'l', 'i', 'm', 'i', 't', 'k', 'e', 'y'};
    rl::SipHash h(k);
    h.update(key_expr, key_expr_len);
    return h.finish() | 1;
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
