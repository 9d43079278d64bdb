// Charges (charge=): what a request spends when it ends, whatever the key's
// budget.  A key may owe at most one limit beyond an empty budget, and
// time repays it at the rule's rate:
//
//   gcra, token_bucket: the instant moves by the charge's time, up to a
//     limit's time (a period) beyond a key that spent its whole burst;
//   fixed_window, quota: what the window cannot hold is counted in the
//     next window (fixed_window.cpp), up to a limit;
//   sliding_window: the charge counts in the window, and what goes beyond
//     the limit is owed after the window has slid past it, at the rule's
//     rate (sliding_window.cpp);
//   sliding_log: units beyond a full log move the log later by the time
//     they take to come back (sliding_log.cpp).
//
// One limit: a request may then spend up to twice what a key can hold,
// enough for any single request a rule means to admit, while a bad or
// hostile value (an upstream's header) keeps the key out for at most two
// periods.  leaky_bucket has no charge: a shaper fixes each request's delay
// before it is served.
#include "algorithms/algorithms.h"
#include "algorithms/exact_time.h"

namespace rl {

namespace {

uint64_t paced_charge(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped)
{
    const uint64_t T = (uint64_t) rule.period_ms;
    const uint64_t most = ((uint64_t) rule.burst + rule.limit) * T;  // fits: rl_rule_finish
    const uint64_t ahead = paced_ahead(rule, s, now);
    const uint64_t room = ahead < most ? (most - ahead) / T : 0;
    const uint64_t add = units < room ? units : room;
    *capped = add < units;
    if (add > 0) {
        paced_store(rule, s, now, ahead + add * T);
    }
    return add;
}

}  // namespace

uint64_t charge(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped)
{
    *capped = false;
    if (units == 0) {
        return 0;
    }
    switch (rule.algorithm) {
    case RL_GCRA:
    case RL_TOKEN_BUCKET:
        return paced_charge(rule, s, now, units, capped);
    case RL_FIXED_WINDOW:
        return windowed_charge(rule, s, units, fixed_window_span(rule, s, now), capped);
    case RL_QUOTA:
        return windowed_charge(rule, s, units, quota_span(rule, now), capped);
    case RL_SLIDING_WINDOW:
        return sliding_window_charge(rule, s, now, units, capped);
    case RL_SLIDING_LOG:
        return sliding_log_charge(rule, s, now, units, capped);
    default:  // leaky_bucket: refused at rl_rule_finish
        return 0;
    }
}

}  // namespace rl
