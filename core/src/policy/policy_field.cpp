// The RateLimit-Policy field of a location's rules: every policy that
// applies there, as the IETF draft (draft-ietf-httpapi-ratelimit-headers,
// revision 10) lists several, "name";q=Q;w=W, one item a rule, in the
// rules' order.  A location whose rules' policies cannot change from one
// request to the next has it written once, at configuration time.
#include <cstdio>
#include <cstring>

#include "algorithms/algorithm.h"
#include "ratelimit.h"

namespace {

// The policy of a rule as a request sees it at now: the most its remaining
// can show, and the time in which that much comes back (0: none).
void policy_of(const rl_rule_t &rule, int64_t now, uint64_t *quota, int64_t *window)
{
    rl_decision_t d{};
    int64_t (*calendar)(const rl_rule_t &, int64_t) = rl::algorithm_of(rule).policy_window;
    d.window_ms = calendar != nullptr ? calendar(rule, now) : rule.period_ms;
    rl::policy(rule, d);
    *quota = d.quota;
    *window = d.window_ms;
}

}  // namespace

extern "C" {

int rl_rule_policy_fixed(const rl_rule_t *rule)
{
    // a variable limit or burst is the request's; its algorithm's may be
    // (a month is 28 to 31 days)
    int (*fixed)(const rl_rule_t &) = rl::algorithm_of(*rule).policy_fixed;
    return !rule->limit_var && !rule->burst_var && (fixed == nullptr || fixed(*rule));
}

size_t rl_policy_field(const rl_rule_t *const *rules, size_t n, int64_t now_ms, char *out, size_t cap)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t quota;
        int64_t window;
        policy_of(*rules[i], now_ms, &quota, &window);
        char item[RL_NAME_MAX + 64];
        int k = window > 0 ? std::snprintf(item, sizeof(item), "%s\"%s\";q=%llu;w=%llu", i ? ", " : "", rules[i]->name,
                                           (unsigned long long) quota, (unsigned long long) rl_seconds(window))
                           : std::snprintf(item, sizeof(item), "%s\"%s\";q=%llu", i ? ", " : "", rules[i]->name,
                                           (unsigned long long) quota);
        if (k < 0 || len + (size_t) k > cap) {
            break;  // whole items only
        }
        std::memcpy(out + len, item, (size_t) k);
        len += (size_t) k;
    }
    return len;
}

}  // extern "C"
