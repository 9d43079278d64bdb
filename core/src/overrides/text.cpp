// Overrides as text: an API request's target and JSON body read and checked
// against the rule, an override as JSON, and the lines of a zone's
// overrides file (ratelimit_override.h).  Every message names the field and
// what it takes; bytes a client chose are shown as log lines show keys.
#include <arpa/inet.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "algorithms/algorithm.h"
#include "overrides/json.h"
#include "overrides/store.h"
#include "util/address.h"
#include "util/decimal.h"
#include "util/out.h"

namespace rl {

namespace {

int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return RL_ERROR;
}

struct Text {
    const char *p;
    size_t len;
    bool is(const char *w) const { return len == std::strlen(w) && std::memcmp(p, w, len) == 0; }
};

// A range in CIDR notation: the network's address and its prefix length.
int parse_range(rl_override_target_t &t, Text r, char *err, size_t errlen)
{
    char text[64];
    const char *slash = static_cast<const char *>(std::memchr(r.p, '/', r.len));
    char shown[kShownBytes];
    const int n = (int) rl::shown(shown, r.p, r.len, false);
    if (slash == nullptr || (size_t) (slash - r.p) >= sizeof(text) || slash + 1 == r.p + r.len) {
        return fail(err, errlen,
                    "range=\"%.*s\": expected an address range as ADDRESS/LENGTH, e.g. 10.1.0.0/16 "
                    "or 2001:db8::/32",
                    n, shown);
    }
    const size_t alen = (size_t) (slash - r.p);
    std::memcpy(text, r.p, alen);
    text[alen] = '\0';
    uint8_t addr[16] = {};
    if (inet_pton(AF_INET, text, addr) == 1) {
        t.family = 4;
    } else if (inet_pton(AF_INET6, text, addr) == 1) {
        t.family = 6;
    } else {
        return fail(err, errlen, "range=\"%.*s\": \"%.*s\" is not an IPv4 or IPv6 address", n, shown,
                    (int) rl::shown(shown, r.p, alen, false), shown);
    }
    const uint32_t most = t.family == 6 ? 128 : 32;
    uint32_t prefix = 0;
    for (const char *p = slash + 1; p < r.p + r.len; p++) {
        if (*p < '0' || *p > '9' || prefix > most) {
            return fail(err, errlen, "range=\"%.*s\": the prefix length must be an integer from 0 to %u", n, shown,
                        most);
        }
        prefix = prefix * 10 + (uint32_t) (*p - '0');
    }
    if (prefix > most) {
        return fail(err, errlen, "range=\"%.*s\": the prefix length must be an integer from 0 to %u", n, shown, most);
    }
    for (uint32_t bit = prefix; bit < most; bit++) {
        if (addr[bit / 8] & (0x80u >> (bit % 8))) {
            return fail(err, errlen, "range=\"%.*s\" is not a network: the address has bits set beyond its /%u prefix",
                        n, shown, prefix);
        }
    }
    t.prefix = prefix;
    t.key_len = t.family == 6 ? 16 : 4;
    std::memcpy(t.key, addr, t.key_len);
    if (t.family == 6 && prefix >= 96 && mapped_prefix(RL_KEY_ADDR_BINARY, addr, 16) != 0) {
        // IPv4-mapped addresses are matched as IPv4 ones (util/address.h):
        // ::ffff:10.1.2.0/120 is 10.1.2.0/24
        t.family = 4;
        t.prefix = prefix - 96;
        t.key_len = 4;
        std::memcpy(t.key, addr + 12, 4);
    }
    return RL_OK;
}

enum Field { kLimit, kBurst, kPeriod, kAction, kExpire, kFields };
const char *const kFieldNames[kFields] = {"limit", "burst", "period", "action", "expire"};

int set_number(rl_override_t &ov, Field f, const Value &v, char *err, size_t errlen)
{
    if (v.type != Value::kInteger || v.number < 1 || v.number > RL_LIMIT_MAX) {
        return fail(err, errlen, "\"%s\": expected an integer from 1 to %u%s%s", kFieldNames[f], RL_LIMIT_MAX,
                    v.type != Value::kInteger ? ", not " : "", v.type != Value::kInteger ? type_of(v) : "");
    }
    if (f == kLimit) {
        ov.limit = (uint32_t) v.number;
        ov.given |= RL_OVERRIDE_GIVE_LIMIT;
    } else {
        ov.burst = (uint32_t) v.number;
        ov.given |= RL_OVERRIDE_GIVE_BURST;
    }
    return RL_OK;
}

int set_time(rl_override_t &ov, Field f, const Value &v, int64_t now, char *err, size_t errlen)
{
    int64_t ms = 0;
    const int64_t most = f == kPeriod ? RL_PERIOD_MAX_MS : RL_OVERRIDE_TTL_MAX_MS;
    if (f == kExpire && v.type == Value::kNull) {
        ov.expires_ms = 0;
        return RL_OK;
    }
    if (v.type != Value::kString || rl_parse_time_ms(v.text, v.len, &ms) != RL_OK || ms < 1 || ms > most) {
        return fail(err, errlen, "\"%s\": expected a time from 1ms to 366d as a string, e.g. \"1m\", \"7d\"%s%s%s",
                    kFieldNames[f], f == kExpire ? ", or null for none" : "", v.type != Value::kString ? ", not " : "",
                    v.type != Value::kString ? type_of(v) : "");
    }
    if (f == kPeriod) {
        ov.period_ms = ms;
        ov.given |= RL_OVERRIDE_GIVE_PERIOD;
    } else {
        ov.expires_ms = now + ms;
    }
    return RL_OK;
}

int set_action(rl_override_t &ov, const Value &v, char *err, size_t errlen)
{
    static const struct {
        const char *word;
        int kind;
    } kinds[] = {{"limit", RL_OVERRIDE_LIMIT}, {"deny", RL_OVERRIDE_DENY}, {"allow", RL_OVERRIDE_ALLOW}};
    for (const auto &k : kinds) {
        if (v.type == Value::kString && Text{v.text, v.len}.is(k.word)) {
            ov.kind = k.kind;
            return RL_OK;
        }
    }
    return fail(err, errlen, "\"action\": expected \"limit\", \"deny\" or \"allow\"%s%s",
                v.type != Value::kString ? ", not " : "", v.type != Value::kString ? type_of(v) : "");
}

int set_field(rl_override_t &ov, Field f, const Value &v, int64_t now, char *err, size_t errlen)
{
    switch (f) {
    case kLimit:
    case kBurst:
        return set_number(ov, f, v, err, errlen);
    case kPeriod:
    case kExpire:
        return set_time(ov, f, v, now, err, errlen);
    default:
        return set_action(ov, v, err, errlen);
    }
}

void put_encoded(Out &o, const void *data, size_t len);

// A range as CIDR text, a key %-encoded as the key API's key= takes it.
void put_target(Out &o, const rl_override_target_t &t)
{
    if (t.family != 0) {
        char text[INET6_ADDRSTRLEN + 8];
        inet_ntop(t.family == 6 ? AF_INET6 : AF_INET, t.key, text, sizeof(text));
        const size_t n = std::strlen(text);
        std::snprintf(text + n, sizeof(text) - n, "/%u", t.prefix);
        o.put(text);
        return;
    }
    put_encoded(o, t.key, t.key_len);
}

// Bytes %-encoded as the key API's key= takes them: printable ASCII as it
// is, but for the bytes a query or a line holds apart.
void put_encoded(Out &o, const void *data, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    const uint8_t *p = static_cast<const uint8_t *>(data);
    for (size_t i = 0; i < len; i++) {
        const uint8_t c = p[i];
        if (c > 0x20 && c < 0x7f && c != '%' && c != '"' && c != '\\' && c != '&' && c != '+' && c != '#') {
            o.put(reinterpret_cast<const char *>(&c), 1);
        } else {
            const char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            o.put(e, 3);
        }
    }
}

const char *kind_word(int kind)
{
    return kind == RL_OVERRIDE_DENY ? "deny" : kind == RL_OVERRIDE_ALLOW ? "allow" : "limit";
}

// An override as JSON (rl_override_json).
void put_override(Out &o, const rl_override_t &ov, int64_t now)
{
    o.put("{\"rule\":");
    if (ov.target.rule[0] == '\0') {
        o.put("null");
    } else {
        o.json(ov.target.rule, std::strlen(ov.target.rule));
    }
    if (ov.target.keyed[0] != '\0') {
        o.put(",\"keyed\":");
        o.json(ov.target.keyed, std::strlen(ov.target.keyed));
    }
    o.put(ov.target.family ? ",\"range\":\"" : ",\"key\":\"");
    put_target(o, ov.target);
    o.put("\",\"action\":\"");
    o.put(kind_word(ov.kind));
    o.put("\"");
    if (ov.given & RL_OVERRIDE_GIVE_LIMIT) {
        o.field("limit", ov.limit);
    }
    if (ov.given & RL_OVERRIDE_GIVE_BURST) {
        o.field("burst", ov.burst);
    }
    if (ov.given & RL_OVERRIDE_GIVE_PERIOD) {
        o.field("period_ms", (uint64_t) ov.period_ms);
    }
    o.put(",\"expires_in_ms\":");
    if (ov.expires_ms == 0) {
        o.put("null");
    } else {
        o.num0(ov.expires_ms - now);
    }
    o.field("created_ms", (uint64_t) ov.created_ms);
    o.put("}");
}

// A key expression as written, alike (a rule's, and a target's keyed).
bool same_expr(const rl_override_rule_t &r, const char *expr, size_t len)
{
    return r.key_len == len && (len == 0 || std::memcmp(r.key, expr, len) == 0);
}

// How far in the future a server may say an override was written (another
// server's clock, ahead of this one's).
constexpr int64_t kCreatedAhead = 86400000;

// A key in every rule bound to its rules' key expression (rl_override_bind):
// *keyed, a rule keyed on it.
int bind_keyed(rl_override_target_t &t, const rl_override_rule_t *rules, size_t n, const rl_override_rule_t **keyed,
               char *err, size_t errlen)
{
    const size_t len = std::strlen(t.keyed);
    const rl_override_rule_t *other = nullptr;
    for (size_t i = 0; i < n && *keyed == nullptr; i++) {
        *keyed = len == 0 || same_expr(rules[i], t.keyed, len) ? &rules[i] : nullptr;
    }
    for (size_t i = 0; i < n && len == 0 && *keyed != nullptr && other == nullptr; i++) {
        other = same_expr(rules[i], (*keyed)->key, (*keyed)->key_len) ? nullptr : &rules[i];
    }
    char shown[kShownBytes], second[kShownBytes];
    if (*keyed == nullptr) {
        const int m = (int) rl::shown(shown, t.keyed, len, false);
        return len ? fail(err, errlen,
                          "no rule of the zone is keyed on \"%.*s\": an override of every rule's key applies to the "
                          "rules keyed on the expression it names",
                          m, shown)
                   : fail(err, errlen, "the zone has no rules");
    }
    if (other != nullptr) {
        const int a = (int) rl::shown(shown, (*keyed)->key, (*keyed)->key_len, false);
        const int b = (int) rl::shown(second, other->key, other->key_len, false);
        return fail(err, errlen,
                    "the zone's rules are keyed on different expressions (rule \"%s\" on \"%.*s\", rule \"%s\" on "
                    "\"%.*s\"): a key in every rule would meet the same bytes in rules where they are another "
                    "key; name the rule (rule=), or the key expression of the rules it applies to (keyed=, e.g. "
                    "keyed=%.*s), or, for a client's address, give range=ADDRESS/32 (every rule keyed on the "
                    "client's address)",
                    (*keyed)->rule->name, a, shown, other->rule->name, b, second, a, shown);
    }
    if ((*keyed)->key_len >= RL_OVERRIDE_KEYED_MAX) {
        return fail(err, errlen,
                    "rule \"%s\" is keyed on an expression of over %d bytes, which an override of every rule cannot "
                    "name: name the rule (rule=)",
                    (*keyed)->rule->name, RL_OVERRIDE_KEYED_MAX - 1);
    }
    std::memcpy(t.keyed, (*keyed)->key, (*keyed)->key_len);
    t.keyed[(*keyed)->key_len] = '\0';
    return RL_OK;
}

}  // namespace

}  // namespace rl

using rl::fail;

extern "C" {

int rl_override_target(rl_override_target_t *t, const char *rule, size_t rule_len, const void *key, size_t key_len,
                       const char *range, size_t range_len, char *err, size_t errlen)
{
    std::memset(t, 0, sizeof(*t));
    if (rule_len > 0) {
        if (!rl_name_valid(rule, rule_len)) {
            return fail(err, errlen, "rule=: expected a rule's name, 1 to %d bytes", RL_NAME_MAX - 1);
        }
        std::memcpy(t->rule, rule, rule_len);
    }
    if ((key != nullptr) == (range != nullptr)) {
        return fail(err, errlen, "which key? expected key=K (the key's value, %%-encoded) or range=ADDRESS/LENGTH");
    }
    if (range != nullptr) {
        return rl::parse_range(*t, rl::Text{range, range_len}, err, errlen);
    }
    if (key_len == 0 || key_len > RL_OVERRIDE_KEY_MAX) {
        return fail(err, errlen, "key=: an override's key is 1 to %d bytes", RL_OVERRIDE_KEY_MAX);
    }
    t->key_len = (uint32_t) key_len;
    std::memcpy(t->key, key, key_len);
    return RL_OK;
}

int rl_override_body(rl_override_t *ov, const char *body, size_t len, int64_t now_ms, char *err, size_t errlen)
{
    const rl_override_target_t target = ov->target;
    std::memset(ov, 0, sizeof(*ov));
    ov->target = target;
    ov->kind = RL_OVERRIDE_LIMIT;
    rl::Json j{body, body + len};
    unsigned seen = 0;
    if (!j.eat('{')) {
        return fail(err, errlen,
                    "the body: expected a JSON object, e.g. {\"limit\":1000,\"period\":\"1m\",\"expire\":\"7d\"}");
    }
    bool first = true;
    while (!j.eat('}')) {
        char name[32];
        size_t nlen = 0;
        if ((!first && !j.eat(',')) || !j.string(name, sizeof(name), &nlen) || !j.eat(':')) {
            return fail(err, errlen, "the body: not a JSON object of fields (at byte %zu)", (size_t) (j.p - body));
        }
        first = false;
        int f = 0;
        while (f < rl::kFields && !rl::Text{name, nlen}.is(rl::kFieldNames[f])) {
            f++;
        }
        if (f == rl::kFields) {
            char shown[rl::kShownBytes];
            const int n = (int) rl::shown(shown, name, nlen, false);
            return fail(err, errlen, "unknown field \"%.*s\": expected limit, burst, period, action or expire", n,
                        shown);
        }
        if (seen & 1u << f) {
            return fail(err, errlen, "field \"%s\" given twice", rl::kFieldNames[f]);
        }
        seen |= 1u << f;
        rl::Value v{};
        j.space();
        const char *at = j.p;
        if (const char *bad = rl::read_value(j, v)) {
            // the value's first bytes, as log lines show bytes a client chose
            char shown[rl::kShownBytes];
            const size_t left = (size_t) (j.end - at);
            const int n = (int) rl::shown(shown, at, left < 16 ? left : 16, left > 16);
            return fail(err, errlen, "\"%s\": not JSON at \"%.*s\": %s", rl::kFieldNames[f], n, shown, bad);
        }
        if (rl::set_field(*ov, (rl::Field) f, v, now_ms, err, errlen) != RL_OK) {
            return RL_ERROR;
        }
    }
    j.space();
    if (j.p != j.end) {
        return fail(err, errlen, "the body: text after the JSON object (at byte %zu)", (size_t) (j.p - body));
    }
    if (ov->kind == RL_OVERRIDE_LIMIT && ov->given == 0) {
        return fail(err, errlen,
                    "a limit override sets limit, burst or period (or give \"action\":\"deny\" or "
                    "\"allow\")");
    }
    if (ov->kind != RL_OVERRIDE_LIMIT && ov->given != 0) {
        return fail(err, errlen, "\"action\":\"%s\" takes no limit, burst or period: only \"expire\"",
                    rl::kind_word(ov->kind));
    }
    return RL_OK;
}

int rl_override_bind(rl_override_target_t *t, const rl_override_rule_t *rules, size_t n,
                     const rl_override_rule_t **rule, char *err, size_t errlen)
{
    *rule = nullptr;
    const rl_override_rule_t *keyed = nullptr;
    if (t->keyed[0] != '\0' && (!rl::every_rule(*t) || t->family != 0)) {
        return fail(err, errlen,
                    "a key expression is named by an override of every rule's key only (a range applies to the "
                    "rules keyed on the client's address, whatever their expression)");
    }
    if (!rl::every_rule(*t)) {
        for (size_t i = 0; i < n && *rule == nullptr; i++) {
            *rule = std::strcmp(rules[i].rule->name, t->rule) == 0 ? &rules[i] : nullptr;
        }
        if (*rule == nullptr) {
            return fail(err, errlen, "the zone has no rule \"%s\"", t->rule);
        }
        keyed = *rule;
    } else if (t->family == 0 && rl::bind_keyed(*t, rules, n, &keyed, err, errlen) != RL_OK) {
        return RL_ERROR;
    }
    // a key of rules keyed on the client's address, as their requests'
    const size_t skip = t->family == 0 ? rl::mapped_prefix(keyed->rule->key_addr, t->key, t->key_len) : 0;
    std::memmove(t->key, t->key + skip, t->key_len - skip);
    t->key_len -= (uint32_t) skip;
    return RL_OK;
}

int rl_override_admit(rl_override_t *ov, const rl_override_rule_t *rules, size_t n, int redis, int64_t now_ms,
                      const rl_override_rule_t **rule, char *err, size_t errlen)
{
    if (ov->kind == RL_OVERRIDE_LIMIT && rl::every_rule(ov->target)) {
        return rl_override_check(ov, nullptr, redis, err, errlen);  // which says it needs its rule
    }
    if (rl_override_bind(&ov->target, rules, n, rule, err, errlen) != RL_OK ||
        rl_override_check(ov, *rule != nullptr ? (*rule)->rule : nullptr, redis, err, errlen) != RL_OK) {
        return RL_ERROR;
    }
    if (ov->expires_ms < 0 || (ov->expires_ms != 0 && ov->expires_ms - now_ms > RL_OVERRIDE_TTL_MAX_MS)) {
        return fail(err, errlen,
                    "it expires %lld days from now: an override expires at most 366 days from when it is written",
                    (long long) ((ov->expires_ms - now_ms) / 86400000));
    }
    if (ov->created_ms < 0 || ov->created_ms - now_ms > rl::kCreatedAhead) {
        return fail(err, errlen, "it was written %lld s from now, in the future",
                    (long long) ((ov->created_ms - now_ms) / 1000));
    }
    return ov->expires_ms != 0 && ov->expires_ms <= now_ms ? RL_DECLINED : RL_OK;
}

int rl_override_check(const rl_override_t *ov, const rl_rule_t *rule, int redis, char *err, size_t errlen)
{
    if (ov->target.family != 0 && (rule == nullptr ? false : !rule->key_addr)) {
        return fail(err, errlen,
                    "range=: rule \"%s\" is not keyed on the client's address ($binary_remote_addr or "
                    "$remote_addr): a range applies to such rules only",
                    rule->name);
    }
    if (ov->kind != RL_OVERRIDE_LIMIT) {
        return RL_OK;
    }
    if (rule == nullptr) {
        return fail(err, errlen,
                    "a limit override names its rule (rule=): rules differ in algorithm and period; "
                    "deny and allow may apply to every rule");
    }
    if (ov->target.family != 0) {
        return fail(err, errlen,
                    "a range takes \"action\":\"deny\" or \"allow\": new limits apply to one key, whose spent units "
                    "carry over to them");
    }
    const rl::Algorithm &a = rl::algorithm_of(*rule);
    static const struct {
        uint32_t give, param;
        const char *name;
    } params[] = {{RL_OVERRIDE_GIVE_LIMIT, rl::P_LIMIT, "limit"},
                  {RL_OVERRIDE_GIVE_BURST, rl::P_BURST, "burst"},
                  {RL_OVERRIDE_GIVE_PERIOD, rl::P_PERIOD, "period"}};
    for (const auto &p : params) {
        if ((ov->given & p.give) && !(a.overridable & p.param)) {
            return fail(err, errlen, "\"%s\": rule \"%s\" (algorithm=%s) takes no %s override", p.name, rule->name,
                        a.name, p.name);
        }
    }
    rl_rule_t out;
    rl::apply_override(*rule, *ov, out);
    if (out.limit_var && out.limit > out.limit_max) {
        return fail(err, errlen,
                    "\"limit\": rule \"%s\" keeps room for at most %u a key (limit_max, or its limit "
                    "as configured): an override's limit may be at most that",
                    rule->name, out.limit_max);
    }
    char why[RL_ERR_MAX];
    out.given |= rl::P_LIMIT;
    if (a.finish != nullptr && a.finish(out, why, sizeof(why)) != RL_OK) {
        return fail(err, errlen, "rule \"%s\" with this override: %s", rule->name, why);
    }
    if (rl::too_large(out)) {
        return fail(err, errlen,
                    "\"limit\", \"burst\" and \"period\" are too large together for rule \"%s\": its "
                    "exact arithmetic holds (burst or limit) x period in ms up to 2^61",
                    rule->name);
    }
    const uint32_t capacity = (a.traits & rl::kBucket) ? out.burst : out.limit;
    if (rule->cost > capacity) {
        return fail(err, errlen, "rule \"%s\" costs %u a request: an override's %s may not be below it", rule->name,
                    rule->cost, (a.traits & rl::kBucket) ? "burst" : "limit");
    }
    if (redis && rl_redis_rule_ok(&out, why, sizeof(why)) != RL_OK) {
        return fail(err, errlen, "rule \"%s\" with this override, in Redis: %s", rule->name, why);
    }
    return RL_OK;
}

void rl_override_apply(const rl_rule_t *rule, const rl_override_t *ov, rl_rule_t *out)
{
    rl::apply_override(*rule, *ov, *out);
}

size_t rl_override_json(const rl_override_t *ov, int64_t now_ms, char *buf, size_t cap)
{
    rl::Out o(buf, cap);
    rl::put_override(o, *ov, now_ms);
    return o.len();
}

size_t rl_overrides_file_line(const rl_override_t *ov, char *buf)
{
    rl::Out o(buf, RL_OVERRIDE_LINE_MAX);
    o.put(ov->target.rule[0] ? ov->target.rule : "*");
    if (ov->target.keyed[0] != '\0') {
        o.put("=");
        rl::put_encoded(o, ov->target.keyed, std::strlen(ov->target.keyed));
    }
    o.put(ov->target.family ? " range " : " key ");
    rl::put_target(o, ov->target);
    o.put(" ");
    o.put(rl::kind_word(ov->kind));
    char nums[128];
    std::snprintf(nums, sizeof(nums), " %u %u %u %lld %lld %lld\n", ov->given, ov->limit, ov->burst,
                  (long long) ov->period_ms, (long long) ov->expires_ms, (long long) ov->created_ms);
    o.put(nums);
    return o.len() < RL_OVERRIDE_LINE_MAX ? o.len() : RL_OVERRIDE_LINE_MAX;
}

}  // extern "C"

namespace rl {

namespace {

// The next word of a line (words are separated by one space).
bool next_word(Text &line, Text &w)
{
    if (line.len == 0) {
        return false;
    }
    const char *sp = static_cast<const char *>(std::memchr(line.p, ' ', line.len));
    w = Text{line.p, sp != nullptr ? (size_t) (sp - line.p) : line.len};
    line = sp != nullptr ? Text{sp + 1, line.len - w.len - 1} : Text{line.p + line.len, 0};
    return w.len > 0;
}

bool number(Text w, int64_t most, int64_t *out)
{
    uint64_t n;
    if (!decimal(w.p, w.len, (uint64_t) most, &n)) {
        return false;
    }
    *out = (int64_t) n;
    return true;
}

int hex(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
}

// A key %-encoded as put_target writes it.
bool decode(Text w, uint8_t *out, size_t *len)
{
    size_t n = 0;
    for (size_t i = 0; i < w.len; n++) {
        if (n >= RL_OVERRIDE_KEY_MAX) {
            return false;
        }
        if (w.p[i] == '%') {
            if (i + 2 >= w.len) {
                return false;
            }
            const int a = hex(w.p[i + 1]), b = hex(w.p[i + 2]);
            if (a < 0 || b < 0) {
                return false;
            }
            out[n] = (uint8_t) (a << 4 | b);
            i += 3;
        } else {
            out[n] = (uint8_t) w.p[i++];
        }
    }
    *len = n;
    return true;
}

}  // namespace

}  // namespace rl

extern "C" {

int rl_overrides_file_read(const char *line, size_t len, rl_override_t *ov, char *err, size_t errlen)
{
    rl::Text l{line, len};
    if (len == 0 || line[0] == '#') {
        return RL_DECLINED;
    }
    rl::Text rule, what, target, action, w[6];
    if (!rl::next_word(l, rule) || !rl::next_word(l, what) || !rl::next_word(l, target) || !rl::next_word(l, action)) {
        return fail(err, errlen, "expected \"RULE key|range TARGET ACTION GIVEN LIMIT BURST PERIOD EXPIRES CREATED\"");
    }
    for (auto &word : w) {
        if (!rl::next_word(l, word)) {
            return fail(err, errlen, "expected six numbers after the action");
        }
    }
    if (l.len != 0) {
        return fail(err, errlen, "text after the last number");
    }
    std::memset(ov, 0, sizeof(*ov));
    // "*": every rule; "*=EXPR": a key in every rule keyed on EXPR
    const bool keyed = rule.len > 2 && rule.p[0] == '*' && rule.p[1] == '=';
    const bool every = rule.is("*") || keyed;
    uint8_t key[RL_OVERRIDE_KEY_MAX];
    size_t klen = 0;
    if (keyed && (!rl::decode(rl::Text{rule.p + 2, rule.len - 2}, key, &klen) || klen >= RL_OVERRIDE_KEYED_MAX ||
                  std::memchr(key, '\0', klen) != nullptr)) {
        return fail(err, errlen, "expected \"*=\" and a key expression, %%-encoded, of 1 to %d bytes",
                    RL_OVERRIDE_KEYED_MAX - 1);
    }
    char expr[RL_OVERRIDE_KEYED_MAX] = "";
    std::memcpy(expr, key, keyed ? klen : 0);
    int rc;
    if (what.is("range")) {
        rc = rl_override_target(&ov->target, rule.p, every ? 0 : rule.len, nullptr, 0, target.p, target.len, err,
                                errlen);
    } else if (what.is("key") && rl::decode(target, key, &klen)) {
        rc = rl_override_target(&ov->target, rule.p, every ? 0 : rule.len, key, klen, nullptr, 0, err, errlen);
    } else {
        return fail(err, errlen, "expected \"key\" with a %%-encoded key, or \"range\" with ADDRESS/LENGTH");
    }
    if (rc != RL_OK) {
        return RL_ERROR;
    }
    std::memcpy(ov->target.keyed, expr, sizeof(expr));
    ov->kind = action.is("limit")   ? RL_OVERRIDE_LIMIT
               : action.is("deny")  ? RL_OVERRIDE_DENY
               : action.is("allow") ? RL_OVERRIDE_ALLOW
                                    : RL_OVERRIDE_NONE;
    int64_t n[6];
    const int64_t most[6] = {7, RL_LIMIT_MAX, RL_LIMIT_MAX, RL_PERIOD_MAX_MS, INT64_MAX / 2, INT64_MAX / 2};
    for (int i = 0; i < 6; i++) {
        if (!rl::number(w[i], most[i], &n[i])) {
            return fail(err, errlen, "number %d after the action is not an integer from 0 to %lld", i + 1,
                        (long long) most[i]);
        }
    }
    ov->given = (uint32_t) n[0];
    ov->limit = (uint32_t) n[1];
    ov->burst = (uint32_t) n[2];
    ov->period_ms = n[3];
    ov->expires_ms = n[4];
    ov->created_ms = n[5];
    const bool limits = ov->kind == RL_OVERRIDE_LIMIT;
    if (ov->kind == RL_OVERRIDE_NONE || limits != (ov->given != 0) ||
        ((ov->given & RL_OVERRIDE_GIVE_LIMIT) && ov->limit == 0) ||
        ((ov->given & RL_OVERRIDE_GIVE_BURST) && ov->burst == 0) ||
        ((ov->given & RL_OVERRIDE_GIVE_PERIOD) && ov->period_ms == 0)) {
        return fail(err, errlen, "expected action limit (with what it sets), deny or allow");
    }
    return RL_OK;
}

}  // extern "C"

extern "C" {

size_t rl_render_api_overrides(const rl_overrides_view_t *v, char *buf, size_t cap)
{
    rl::Out o(buf, cap);
    o.put("{\"zone\":");
    o.json(v->zone);
    if (v->one) {
        o.put(",\"override\":");
        rl::put_override(o, v->list[0], v->now_ms);
        if (v->removed) {
            o.put(",\"removed\":true");
        }
        o.put("}\n");
        return o.len();
    }
    o.field("capacity", v->capacity);
    o.field("total", v->total);
    o.field("from", v->from);
    o.put(",\"overrides\":[");
    for (size_t i = 0; i < v->n; i++) {
        o.put(i > 0 ? "," : "");
        rl::put_override(o, v->list[i], v->now_ms);
    }
    o.put("]}\n");
    return o.len();
}

}  // extern "C"

extern "C" {

size_t rl_override_name(uint32_t override, const rl_rule_t *rule, const void *key, size_t key_len, char *out)
{
    rl::Out o(out, RL_OVERRIDE_NAME_MAX);
    o.put(rl::kind_word((int) (override & 0xf)));
    o.put(" ");
    o.put(override & RL_OVERRIDE_EVERY_RULE ? "*" : rule->name);
    const uint32_t prefix = override >> 8;
    uint8_t addr[16];
    const int family = prefix ? rl::client_address(*rule, key, key_len, addr) : 0;
    if (family == 0) {
        o.put(" key");
    } else {
        rl_override_target_t t{};
        t.family = family;
        t.prefix = prefix - 1;
        const uint32_t bytes = family == 6 ? 16 : 4;
        for (uint32_t i = 0; i < bytes; i++) {
            const uint32_t bits = t.prefix > 8 * i ? t.prefix - 8 * i : 0;
            t.key[i] = bits >= 8 ? addr[i] : (uint8_t) (addr[i] & (uint8_t) (0xff00u >> bits));
        }
        o.put(" ");
        rl::put_target(o, t);
    }
    return o.len() < RL_OVERRIDE_NAME_MAX ? o.len() : RL_OVERRIDE_NAME_MAX;
}

}  // extern "C"
