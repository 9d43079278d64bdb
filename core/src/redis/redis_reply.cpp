// Redis replies are input, not truth: whatever answers on Redis's port (a
// Redis server, a broken one, or anything else listening there) is judged
// here, once for each reply, before the glue acts on it (rl_redis_answer).
// The script's answer is taken only in the shape its call gives (so many
// integers) and with every value within what its check's rule can produce;
// an error reply is the script not being loaded (NOSCRIPT, or FCALL's
// function not found), FCALL not known or not allowed, a Redis Cluster
// redirection (MOVED, ASK), a replica's refusal to write (READONLY: a
// failure after which the connection is opened again), or a failure.  A
// failure is described in words
// and numbers, never with the reply's bytes: the glue shows those escaped.
#include <strings.h>

#include <algorithm>
#include <cstring>

#include "algorithms/algorithm.h"
#include "algorithms/exact_time.h"
#include "policy/request.h"
#include "redis/resp.h"
#include "util/error.h"

namespace {

// The script's answer for each rule, in this order, after the request's
// answer and the script's clock.
enum Item {
    kAllowed,
    kNever,
    kRemaining,
    kReset,
    kRetry,
    kDelay,
    kWindow,
    kAvailable,
    kBanned,
    kAfter,
    kReserved,
    kBanning,
    kReplyPerRule,
    kHere = kReplyPerRule  // a peek's one more: a concurrency rule's live
                           // leases of this server (rq->server)
};

const char *const kItemNames[kReplyPerRule] = {"allowed",        "never",    "remaining", "reset_ms",
                                               "retry_after_ms", "delay_ms", "window_ms", "available_ms",
                                               "banned_ms",      "after",    "reserved",  "banning"};

const size_t kReplyHead = 2;      // the request's answer, the script's clock
const size_t kSettlePerRule = 3;  // charged, in debt, capped

// What the decisions of a rule can be, on Redis's clock running steadily,
// whatever state the rule (under any value of a variable limit or burst)
// left in Redis.
struct Range {
    uint64_t capacity;  // the largest cost it ever admits: "never" above
    int64_t quota;      // the most remaining shows
    int64_t longest;    // reset_ms, retry_after_ms and available_ms, with
                        // RL_REDIS_CLOCK_SLACK_MS
    int64_t window_min;
    int64_t window_max;
    int64_t max_delay;      // leaky_bucket's; 0 for the others
    uint64_t most_charged;  // a charge's units, at most (charge=)
};

int64_t capped(unsigned __int128 v)
{
    return v > (unsigned __int128) (INT64_MAX / 2) ? INT64_MAX / 2 : (int64_t) v;
}

Range range_of(const rl_rule_t &rule, bool carried)
{
    const rl::Algorithm &a = rl::algorithm_of(rule);
    Range g{};
    g.capacity = (a.traits & rl::kBucket) ? rule.burst : rule.limit;
    rl_decision_t policy{};
    rl::policy(rule, policy);
    g.quota = capped(policy.quota);
    g.max_delay = rl::queue_of(rule).wait_ms;
    // with charge=, a key may owe a limit beyond an empty budget: a
    // bucket's debt, a window carried into the next, a log moved a period
    // later, a sliding window owing up to a period after it
    g.most_charged = (uint64_t) g.capacity + rule.limit;
    rl::Bounds b{};
    a.bounds(rule, rule.charge != 0, b);
    g.window_min = b.window_min;
    g.window_max = b.window_max;
    unsigned __int128 longest = b.longest;
    if ((unsigned __int128) rule.ban_ms > longest) {
        longest = (uint64_t) rule.ban_ms;  // a ban's refusals wait for its end
    }
    if (carried && rule.limit > 0) {
        // an override's key may owe what other parameters let it spend
        // (at most RL_LIMIT_MAX units), repaid at this rule's pace
        const unsigned __int128 owed = (unsigned __int128) RL_LIMIT_MAX * (uint64_t) rule.period_ms / rule.limit;
        longest = owed > longest ? owed : longest;
    }
    // a cost that can never pass waits at least a second (never())
    g.longest = capped((longest > 1000 ? longest : 1000) + RL_REDIS_CLOCK_SLACK_MS);
    return g;
}

// A check's: its rule's, as an override may have carried its key over.
Range range_of(const rl_check_t &c)
{
    return range_of(*c.rule, c.configured != nullptr || c.since != 0);
}

int failed(rl_redis_answer_t &out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int failed(rl_redis_answer_t &out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(out.why, sizeof(out.why), fmt, ap);
    va_end(ap);
    out.kind = RL_REDIS_FAILED;
    return out.kind;
}

bool starts(const rl_resp_t &r, const char *word)
{
    const size_t len = std::strlen(word);
    return r.str_len >= len && std::memcmp(r.str, word, len) == 0;
}

// A number of at most `digits` digits, at most `max`, from p to its end.
bool number(const char *p, const char *end, size_t digits, uint64_t max, uint64_t *v)
{
    if (p == end || (size_t) (end - p) > digits) {
        return false;
    }
    *v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9') {
            return false;
        }
        *v = *v * 10 + (uint64_t) (*p - '0');
    }
    return *v <= max;
}

bool host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
           c == '_' || c == ':';
}

// "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>" (an IPv6
// address without brackets: the port follows the last colon).
int redirect(const rl_resp_t &r, bool ask, rl_redis_answer_t &out)
{
    const char *p = r.str + (ask ? 4 : 6);
    const char *end = r.str + r.str_len;
    const char *sp = static_cast<const char *>(std::memchr(p, ' ', (size_t) (end - p)));
    const char *host = sp ? sp + 1 : end;
    const char *colon = end;
    for (const char *q = end; q > host; q--) {
        if (q[-1] == ':') {
            colon = q - 1;
            break;
        }
    }
    uint64_t slot, port;
    bool ok = sp != nullptr && number(p, sp, 5, 16383, &slot) && colon != end && colon > host &&
              (size_t) (colon - host) <= RL_REDIS_HOST_MAX && number(colon + 1, end, 5, 65535, &port) && port > 0;
    for (const char *q = host; ok && q < colon; q++) {
        ok = host_char(*q);
    }
    if (!ok) {
        return failed(out,
                      "a MOVED or ASK reply out of shape: expected \"%s <slot> <host>:<port>\", a slot up to "
                      "16383, a port from 1 to 65535",
                      ask ? "ASK" : "MOVED");
    }
    out.kind = RL_REDIS_REDIRECT;
    out.slot = (unsigned) slot;
    out.ask = ask;
    out.host = host;
    out.host_len = (size_t) (colon - host);
    out.port = (unsigned) port;
    return out.kind;
}

const char *type_name(const rl_resp_t &r)
{
    switch (r.type) {
    case RL_RESP_STATUS:
        return "status reply";
    case RL_RESP_INTEGER:
        return "single integer";
    case RL_RESP_BULK:
        return r.integer < 0 ? "nil" : "bulk string";
    default:
        return "array";
    }
}

// Whether the values v can be a decision of check c's rule (of a peek:
// one that writes nothing); else why not.
bool in_range(const rl_check_t &c, const int64_t *v, bool peek, rl_redis_answer_t &out)
{
    const Range g = range_of(c);
    const uint64_t cost = c.cost < RL_REDIS_UNITS_MAX ? c.cost : RL_REDIS_UNITS_MAX;  // as sent
    const int64_t never = cost > g.capacity;
    const bool refused = v[kAllowed] != 1;
    // a slot refused has no time to wait for: it comes back when a request
    // ends (concurrency)
    const bool waits = refused && !rl::has(*c.rule, rl::kSlots);
    const int64_t ban = c.rule->ban_ms > 0 ? c.rule->ban_ms + RL_REDIS_CLOCK_SLACK_MS : 0;
    const int64_t want[kBanned + 1][2] = {
        {0, never ? 0 : 1},                        // allowed: never when it never can be
        {never, never},                            // never: exactly when the cost exceeds the capacity
        {0, g.quota},                              // remaining
        {0, g.longest},                            // reset_ms
        {waits ? 1 : 0, refused ? g.longest : 0},  // retry_after_ms: when refused only
        {0, refused ? 0 : g.max_delay},            // delay_ms: an admitted shaper's only
        {g.window_min, g.window_max},              // window_ms
        {0, g.longest},                            // available_ms
        // banned_ms: a ban= rule's, refusing (a peek's look shows it too)
        {0, refused || (peek && cost == 0) ? ban : 0},
    };
    // reserved: the cost, or a charge= rule's reservation, at most what
    // the key can hold; banning: 1 for a ban= rule's refusal, 2 for a
    // charge= rule's that only the key's requests in flight caused (no
    // ban), not a peek's
    const uint64_t most = c.rule->charge && !peek && g.capacity > cost ? g.capacity : cost;
    if (v[kReserved] < (int64_t) cost || (uint64_t) v[kReserved] > most) {
        failed(out, "reserved of rule \"%s\" is %lld: it can only be %llu to %llu", c.rule->name,
               (long long) v[kReserved], (unsigned long long) cost, (unsigned long long) most);
        return false;
    }
    const bool bans = refused && ban > 0 && !peek, flies = refused && c.rule->charge && !peek;
    if (v[kBanning] < 0 || v[kBanning] > (flies ? 2 : bans ? 1 : 0) || (v[kBanning] == 1 && !bans)) {
        failed(out, "banning of rule \"%s\" is %lld: it can only be 0%s%s", c.rule->name, (long long) v[kBanning],
               bans ? " or 1" : "",
               flies  ? " or 2 (refused in flight)"
               : bans ? ""
                      : " (no ban started)");
        return false;
    }
    for (size_t k = 0; k <= kBanned; k++) {
        if (v[k] < want[k][0] || v[k] > want[k][1]) {
            char expected[48];
            if (want[k][0] == want[k][1]) {
                std::snprintf(expected, sizeof(expected), "%lld", (long long) want[k][0]);
            } else {
                std::snprintf(expected, sizeof(expected), "%lld to %lld", (long long) want[k][0],
                              (long long) want[k][1]);
            }
            failed(out, "%s of rule \"%s\" is %lld: it can only be %s", kItemNames[k], c.rule->name, (long long) v[k],
                   expected);
            return false;
        }
    }
    return true;
}

// Whether the head's t after a commit is there exactly when the check
// committed (committed), and then after the script's clock by at most what
// the rule waits; else why not.
bool after_in_range(const rl_check_t &c, int64_t after, int64_t now, bool committed, rl_redis_answer_t &out)
{
    const int64_t most = committed ? now + range_of(c).longest : 0;
    if (committed ? after >= now && after <= most : after == 0) {
        return true;
    }
    if (committed) {
        failed(out, "after of rule \"%s\" is %lld: it can only be %lld to %lld", c.rule->name, (long long) after,
               (long long) now, (long long) most);
    } else {
        failed(out, "after of rule \"%s\" is %lld: it can only be 0 (nothing committed)", c.rule->name,
               (long long) after);
    }
    return false;
}

// A peek's count of the live leases of this server: none but a
// concurrency rule's, and at most what its key holds (all of the limit
// but what remains, when something remains).
bool here_in_range(const rl_check_t &c, int64_t here, int64_t remaining, rl_redis_answer_t &out)
{
    const int64_t limit = c.rule->limit;
    int64_t most = RL_LIMIT_MAX;
    if (!rl::has(*c.rule, rl::kSlots)) {
        most = 0;
    } else if (remaining > 0 && remaining <= limit) {
        most = limit - remaining;
    }
    if (here >= 0 && here <= most) {
        return true;
    }
    if (most == 0) {
        failed(out, "leases here of rule \"%s\" is %lld: it can only be 0", c.rule->name, (long long) here);
    } else {
        failed(out, "leases here of rule \"%s\" is %lld: it can only be 0 to %lld", c.rule->name, (long long) here,
               (long long) most);
    }
    return false;
}

// A settle's answer for each check it settles: the units charged, the key
// in debt, capped (a check whose reservation stands, RL_NO_CHARGE: none).
int settled(rl_request_t *rq, const rl_resp_t &r, rl_redis_answer_t &out)
{
    const int64_t *v = r.items + 1;
    for (size_t i = 0; i < rq->n; i++) {
        rl_check_t &c = rq->checks[i];
        if (!rl::charges(c)) {
            continue;
        }
        const uint64_t sent = !rl::settles(c) ? 0 : c.charge < RL_REDIS_UNITS_MAX ? c.charge : RL_REDIS_UNITS_MAX;
        const uint64_t most = std::min<uint64_t>(sent, range_of(c).most_charged);
        if (v[0] < 0 || (uint64_t) v[0] > most || v[1] < 0 || v[1] > (v[0] > 0) || v[2] < 0 || v[2] > 1 ||
            (v[2] == 0 && (uint64_t) v[0] != sent)) {
            return failed(out,
                          "the settle of rule \"%s\" says %lld units charged, in debt %lld, capped %lld: expected "
                          "0 to %llu charged of %llu, in debt 0 or 1 (0 if nothing charged), capped 0 or 1 (1 if "
                          "less than the charge)",
                          c.rule->name, (long long) v[0], (long long) v[1], (long long) v[2], (unsigned long long) most,
                          (unsigned long long) sent);
        }
        v += kSettlePerRule;
    }
    v = r.items + 1;
    for (size_t i = 0; i < rq->n; i++) {
        rl_check_t &c = rq->checks[i];
        if (rl::settles(c)) {
            c.charged = (uint64_t) v[0];
            c.in_debt = (int32_t) v[1];
            c.capped = (int32_t) v[2];
        }
        v += rl::charges(c) ? kSettlePerRule : 0;
    }
    out.kind = RL_REDIS_DECIDED;
    return out.kind;
}

// A check's decision, and what settling a charge needs, from its values.
void take(rl_check_t &c, const int64_t *v, int64_t now)
{
    rl_decision_t &d = c.decision;
    d = rl_decision_t{};
    d.allowed = (int32_t) v[kAllowed];
    d.never = (int32_t) v[kNever];
    d.remaining = (uint64_t) v[kRemaining];
    d.reset_ms = v[kReset];
    d.retry_after_ms = v[kRetry];
    d.delay_ms = v[kDelay];
    d.window_ms = v[kWindow];
    d.available_ms = v[kAvailable];
    d.banned_ms = v[kBanned];
    c.at = now;
    c.after = rl_state_t{v[kAfter], 0};
    c.reserved = (uint64_t) v[kReserved];
    c.banning = v[kBanning] == 1;
    c.in_flight = v[kBanning] == 2;
}

// The error's text holds word, in any case.
bool mentions(const rl_resp_t &r, const char *word)
{
    const size_t len = std::strlen(word);
    for (size_t i = 0; i + len <= r.str_len; i++) {
        if (strncasecmp(r.str + i, word, len) == 0) {
            return true;
        }
    }
    return false;
}

// An error reply: NOSCRIPT (or FCALL's function not loaded), FCALL unknown
// or not allowed, a redirection, a replica's refusal, or a failure.
int error_answer(const rl_request_t *rq, const rl_resp_t &r, rl_redis_answer_t &out)
{
    if (rq != nullptr &&
        ((starts(r, "NOSCRIPT") && (r.str_len == 8 || r.str[8] == ' ')) || starts(r, "ERR Function not found"))) {
        out.kind = RL_REDIS_NOSCRIPT;
        return out.kind;
    }
    // Redis 6 (and a proxy) has no FCALL; an ACL user may not be allowed it
    if (rq != nullptr && (starts(r, "ERR unknown command") || starts(r, "NOPERM")) && mentions(r, "fcall")) {
        failed(out, "FCALL unknown or not allowed");
        out.kind = RL_REDIS_NO_FUNCTIONS;
        return out.kind;
    }
    if (rq != nullptr && (starts(r, "MOVED ") || starts(r, "ASK "))) {
        return redirect(r, r.str[0] == 'A', out);
    }
    if (rl::is_readonly(r)) {
        failed(out, "an error reply of a replica");
        out.kind = RL_REDIS_READONLY;
        return out.kind;
    }
    return failed(out, "an error reply");
}

// A reset's answer: each check, whether it had a state and a ban.
int reset_answer(const rl_request_t *rq, const int64_t *v, rl_redis_answer_t &out)
{
    out.found = 0;
    for (size_t i = 0; i < rq->n; i++) {
        if (!rl::applies(rq->checks[i])) {
            continue;
        }
        if (*v < 0 || *v > 3) {
            return failed(out,
                          "the reset of rule \"%s\" says %lld, expected 0 to 3 (1: a state deleted, 2: a ban lifted)",
                          rq->checks[i].rule->name, (long long) *v);
        }
        out.found |= (uint32_t) (*v & 1) << i;
        out.unbanned |= (uint32_t) (*v >> 1) << i;
        v++;
    }
    out.kind = RL_REDIS_DECIDED;
    return out.kind;
}

// A decision's answer (or a peek's) of n checks: each check's values in
// range, the request's answer as its combine makes it of theirs, each
// head's t after a commit; then the checks' decisions set and the request
// concluded.
int decision_answer(rl_request_t *rq, int call, const int64_t *items, size_t n, rl_redis_answer_t &out)
{
    const int64_t now = items[1];
    if (now < 1 || now > (int64_t) RL_REDIS_UNITS_MAX) {
        return failed(out, "the script's clock is %lld: it can only be 1 to %llu (ms from 1970)", (long long) now,
                      (unsigned long long) RL_REDIS_UNITS_MAX);
    }
    const bool peek = call == RL_REDIS_PEEK;
    const size_t per = kReplyPerRule + (peek ? 1 : 0);
    size_t allowing = 0;
    const int64_t *v = items + kReplyHead;
    for (size_t i = 0; i < rq->n; i++) {
        if (rl::applies(rq->checks[i])) {
            if (!in_range(rq->checks[i], v, peek, out) ||
                (peek && !here_in_range(rq->checks[i], v[kHere], v[kRemaining], out))) {
                return out.kind;
            }
            allowing += (size_t) v[kAllowed];
            v += per;
        }
    }
    // a peek combines with all (the script's default)
    const bool any = call == RL_REDIS_DECIDE && rq->combine == RL_COMBINE_ANY;
    const bool allowed = any ? allowing > 0 || n == 0 : allowing == n;
    if (items[0] != (int64_t) allowed) {
        return failed(out, "the request's answer is %lld where its rules' answers make it %d (%zu of %zu allowing)",
                      (long long) items[0], (int) allowed, allowing, n);
    }
    v = items + kReplyHead;
    for (size_t i = 0; i < rq->n; i++) {
        const rl_check_t &c = rq->checks[i];
        if (rl::applies(c)) {
            const bool committed = !peek && allowed && v[kAllowed] == 1 && v[kReserved] > 0;
            if (!after_in_range(c, v[kAfter], now, committed, out)) {
                return out.kind;
            }
            v += per;
        }
    }
    v = items + kReplyHead;
    for (size_t i = 0; i < rq->n; i++) {
        rl_check_t &c = rq->checks[i];
        if (rl::applies(c)) {
            take(c, v, now);
            // a lease is held where one was taken only
            if (rl::has(*c.rule, rl::kSlots) && (peek || !allowed || v[kAllowed] != 1 || v[kAfter] == 0)) {
                c.lease = 0;
            }
            if (peek) {
                out.here[i] = (uint32_t) v[kHere];
            }
            v += per;
        }
    }
    out.kind = RL_REDIS_DECIDED;
    if (call == RL_REDIS_DECIDE) {
        out.verdict = rl::conclude(*rq, allowed);
    }
    return out.kind;
}

// The lean answer (ratelimit.lua's lean path) to a decision of one gcra,
// token_bucket, fixed_window or quota rule: "ALLOWED NOW" and the key's
// state as the script read it, if any: "T N LIMIT PERIOD" for a paced
// rule (the instant T + N/LIMIT ms, written under the rule's own limit and
// period), "T N" for a count (N units in the window ending T).  The
// figures are its algorithm's on that state at the script's clock, as the
// script's whole way works them out, into items (the integers of the whole
// answer); false if the request is not one the script answers so, or the
// string is out of shape (why).
bool lean_items(const rl_request_t &rq, const rl_resp_t &r, int64_t *items, rl_redis_answer_t &out)
{
    const rl_check_t *c = nullptr;
    for (size_t i = 0; i < rq.n; i++) {
        if (rl::applies(rq.checks[i])) {
            if (c != nullptr) {
                failed(out, "a string answer to a request of more than one rule");
                return false;
            }
            c = &rq.checks[i];
        }
    }
    const rl::Algorithm *a = c != nullptr ? &rl::algorithm_of(*c->rule) : nullptr;
    const bool paced = a != nullptr && (a->traits & rl::kBucket);
    const bool count = a != nullptr && (a->traits & rl::kCount) && !(a->traits & rl::kTicks);
    if (!(paced || count) || c->rule->ban_ms > 0 || c->rule->charge || c->since != 0 || rq.dry_run ||
        c->rule->limit == 0 || (paced && c->rule->period_ms <= 0)) {
        failed(out, "a string answer to a request the script answers with integers");
        return false;
    }
    // its numbers, split at single spaces: 2, and the state's after them
    const size_t fields = paced ? 6 : 4;
    int64_t v[6];
    size_t n = 0;
    const char *p = r.str, *end = r.str + r.str_len;
    while (n < fields) {
        const char *sp = static_cast<const char *>(std::memchr(p, ' ', (size_t) (end - p)));
        const char *e = sp != nullptr ? sp : end;
        const bool minus = n == 2 && e > p && *p == '-';  // T may be before 1970 (a test's clock)
        uint64_t u;
        if (!number(p + minus, e, 16, RL_REDIS_UNITS_MAX << 2, &u)) {
            break;
        }
        v[n++] = minus ? -(int64_t) u : (int64_t) u;
        if (sp == nullptr) {
            p = end + 1;
            break;
        }
        p = sp + 1;
    }
    const rl_rule_t &rule = *c->rule;
    const bool state = n == fields;
    if (p != end + 1 || (n != 2 && !state) || v[0] > 1 ||
        (state && paced && (v[4] != (int64_t) rule.limit || v[5] != rule.period_ms)) ||
        (state && count && v[3] >= (int64_t) rl::kCarried)) {
        if (paced) {
            failed(out,
                   "a string answer out of shape: expected \"ALLOWED NOW\", and \"T N %llu %lld\" after it if the "
                   "key has a state",
                   (unsigned long long) rule.limit, (long long) rule.period_ms);
        } else {
            failed(out, "a string answer out of shape: expected \"ALLOWED NOW\", and \"T N\" after it if the key "
                        "has a state, N below 2^31");
        }
        return false;
    }
    const int64_t now = v[1];
    const uint64_t cost = c->cost < RL_REDIS_UNITS_MAX ? c->cost : RL_REDIS_UNITS_MAX;  // as sent
    rl::State s{rl_state_t{0, 0}, nullptr};
    rl_decision_t d;
    int64_t after = 0;  // the head's t the script wrote, if it did
    if (paced) {
        // the units from now to the instant, as the script counts them; a
        // head that gives them to the core's transition
        uint64_t ahead = 0;
        s.head = rl_state_t{now, 0};
        if (state && v[2] >= now) {
            const uint64_t ms = (uint64_t) (v[2] - now);
            ahead = ms >= rl::kUnitsMax / rule.limit ? rl::kUnitsMax : ms * rule.limit + (uint64_t) v[3];
            s.head = ahead >= rl::kUnitsMax ? rl_state_t{v[2], 0} : rl::instant_after(now, ahead, rule.limit);
        }
        d = a->transition(rule, s, now, cost, false);
        // the script writes the instant's whole ms rounded down
        after = d.allowed && cost > 0 ? now + (int64_t) ((ahead + cost * rule.period_ms) / rule.limit) : 0;
    } else {
        if (state) {
            s.head = rl_state_t{v[2], (uint32_t) v[3]};  // the core's head, as the script keeps it
        }
        d = a->transition(rule, s, now, cost, true);
        after = d.allowed && cost > 0 ? s.head.t : 0;
    }
    const int64_t whole[kReplyHead + kReplyPerRule] = {v[0],
                                                       now,
                                                       d.allowed,
                                                       d.never,
                                                       (int64_t) d.remaining,
                                                       d.reset_ms,
                                                       d.retry_after_ms,
                                                       d.delay_ms,
                                                       d.window_ms,
                                                       d.available_ms,
                                                       d.banned_ms,
                                                       after,
                                                       (int64_t) cost,
                                                       0};
    std::memcpy(items, whole, sizeof(whole));
    return true;
}

// A lean answer: its integers worked out, then judged as the whole
// answer's (its request's answer the script's own admission).
int lean_answer(rl_request_t *rq, const rl_resp_t &r, rl_redis_answer_t &out)
{
    int64_t items[kReplyHead + kReplyPerRule];
    if (!lean_items(*rq, r, items, out)) {
        return out.kind;
    }
    return decision_answer(rq, RL_REDIS_DECIDE, items, 1, out);
}

// A release's, a renewal's or a restore's answer: {1, leases live, leases
// expired (or restored)}, one of the two for each lease sent.
int leases_answer(const rl_request_t *rq, int call, const rl_resp_t &r, rl_redis_answer_t &out)
{
    size_t n = 0;
    for (size_t i = 0; i < rq->n; i++) {
        n += rl_redis_holds_lease(&rq->checks[i]) != 0;
    }
    const char *what = call == RL_REDIS_RELEASE ? "release" : call == RL_REDIS_RENEW ? "renewal" : "restore";
    if (r.type != RL_RESP_ARRAY || r.integer != 3 || !r.integers || r.nitems != 3) {
        return failed(out, "a %s, expected an array of 3 integers to a %s", type_name(r), what);
    }
    const int64_t *v = r.items;
    if (v[0] != 1 || v[1] < 0 || v[2] < 0 || (uint64_t) v[1] + (uint64_t) v[2] != n) {
        return failed(out, "a %s's answer is {%lld, %lld, %lld}: expected {1, live, expired} of %zu leases", what,
                      (long long) v[0], (long long) v[1], (long long) v[2], n);
    }
    out.leases_done = (uint32_t) v[1];
    out.leases_gone = (uint32_t) v[2];
    out.kind = RL_REDIS_DECIDED;
    return out.kind;
}

int answer(rl_request_t *rq, int call, const rl_resp_t &r, rl_redis_answer_t &out)
{
    if (r.type == RL_RESP_ERROR) {
        return error_answer(rq, r, out);
    }
    if (rq == nullptr) {
        if (r.type == RL_RESP_STATUS && r.str_len == 2 && std::memcmp(r.str, "OK", 2) == 0) {
            out.kind = RL_REDIS_DECIDED;
            return out.kind;
        }
        return failed(out, "a %s, expected \"+OK\"", type_name(r));
    }
    if (call == RL_REDIS_RELEASE || call == RL_REDIS_RENEW || call == RL_REDIS_RESTORE) {
        return leases_answer(rq, call, r, out);
    }
    if (rq->n > RL_RULES_MAX) {
        return failed(out, "a call of %zu checks, more than %d", rq->n, RL_RULES_MAX);
    }

    const bool settle = call == RL_REDIS_SETTLE;
    size_t n = 0;
    for (size_t i = 0; i < rq->n; i++) {
        n += settle ? rl::charges(rq->checks[i]) : rl::applies(rq->checks[i]);
    }
    const size_t head = call == RL_REDIS_DECIDE || call == RL_REDIS_PEEK ? kReplyHead : 1;
    const size_t per = call == RL_REDIS_RESET ? 1
                       : settle               ? kSettlePerRule
                                              : (size_t) kReplyPerRule + (call == RL_REDIS_PEEK ? 1 : 0);
    const size_t items = head + n * per;
    if (call == RL_REDIS_DECIDE && r.type == RL_RESP_BULK && r.integer >= 0) {
        return lean_answer(rq, r, out);
    }
    if (r.type != RL_RESP_ARRAY) {
        return failed(out, "a %s, expected an array of %zu integers", type_name(r), items);
    }
    if (r.integer != (int64_t) items || !r.integers || r.nitems != items) {
        return failed(out, "an array of %lld items%s, expected %zu integers", (long long) r.integer,
                      r.integers ? "" : " not all integers", items);
    }
    if (head == 1 && r.items[0] != 1) {
        return failed(out, "a %s's first item is %lld, expected 1", settle ? "settle" : "reset",
                      (long long) r.items[0]);
    }
    return settle                   ? settled(rq, r, out)
           : call == RL_REDIS_RESET ? reset_answer(rq, r.items + 1, out)
                                    : decision_answer(rq, call, r.items, n, out);
}

}  // namespace

extern "C" {

int rl_redis_answer(rl_request_t *rq, int call, const rl_resp_t *r, rl_redis_answer_t *out)
{
    out->kind = RL_REDIS_FAILED;
    out->verdict = 0;
    out->found = 0;
    out->unbanned = 0;
    out->leases_done = 0;
    out->leases_gone = 0;
    if (call == RL_REDIS_PEEK) {
        std::memset(out->here, 0, sizeof(out->here));
    }
    out->why[0] = '\0';
    try {
        return answer(rq, call, *r, *out);
    } catch (...) {
        return failed(*out, "internal error");
    }
}

int rl_redis_lean_items(const rl_request_t *rq, const rl_resp_t *r, int64_t *items)
{
    rl_redis_answer_t out;
    try {
        return r->type == RL_RESP_BULK && r->integer >= 0 && lean_items(*rq, *r, items, out) ? 1 : 0;
    } catch (...) {
        return 0;
    }
}

int rl_redis_load_answer(const rl_resp_t *r, rl_redis_answer_t *out)
{
    std::memset(out, 0, sizeof(*out));
    if (r->type == RL_RESP_BULK ||
        (r->type == RL_RESP_ERROR && starts(*r, "ERR Library ") && mentions(*r, "already exists"))) {
        out->kind = RL_REDIS_DECIDED;
        return out->kind;
    }
    failed(*out, "FUNCTION LOAD refused");
    out->kind = RL_REDIS_NO_FUNCTIONS;
    return out->kind;
}

}  // extern "C"
