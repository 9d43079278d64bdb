// Token bucket (seed 001, seed 004): a bucket of `burst` tokens refilled
// continuously at limit per period, starting full; a request of cost q is
// admitted iff q tokens are present, and spends them.
//
// The bucket is refilled lazily, so all it needs to remember is when it will
// be full again: tokens(now) = burst - (full_at - now) * limit / period.
// Kept exact in units of 1/limit ms (exact_time.h), where one token is
// period_ms units.  Admissions equal GCRA's with the same burst (the unit
// tests prove it); the difference is the vocabulary operators reason in.
#include "algorithms.h"
#include "exact_time.h"

namespace rl {

rl_decision_t token_bucket(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    const uint64_t token = (uint64_t) rule.period_ms;   // one token, in units
    const uint64_t capacity = (uint64_t) rule.burst * token;
    const uint64_t missing = units_ahead(s.head, now, rule.limit);   // until full
    const uint64_t tokens = missing < capacity ? capacity - missing : 0;

    if (cost > rule.burst) {
        return never(rule.period_ms, tokens / token, ceil_div(missing, rule.limit));
    }

    const uint64_t spend = cost * token;
    rl_decision_t d{};
    d.window_ms = rule.period_ms;

    if (tokens >= spend) {
        d.allowed = 1;
        d.remaining = (tokens - spend) / token;
        d.reset_ms = ceil_div(missing + spend, rule.limit);
        if (apply && cost > 0) {
            s.head = instant_after(now, missing + spend, rule.limit);
        }
    } else {
        // the tokens still to come arrive at `limit` units per ms
        d.remaining = tokens / token;
        d.reset_ms = ceil_div(missing, rule.limit);
        d.retry_after_ms = ceil_div(missing + spend - capacity, rule.limit);
    }
    return d;
}

}  // namespace rl
