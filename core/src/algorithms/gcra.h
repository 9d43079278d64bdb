// GCRA, the generic cell rate algorithm (the default algorithm).
//
// Emission interval T = period/limit, tolerance tau = T * burst.  The state
// is the theoretical arrival time TAT: the instant the key is back to full
// budget.  A request of cost q is admitted iff max(TAT, now) + q*T - tau <=
// now (allow on equality); then TAT = max(TAT, now) + q*T.  A cold key
// admits exactly burst requests at once.  In units of 1/limit ms (see
// exact_time.h) T = period_ms and tau = burst * period_ms exactly.
//
// token_bucket is this transition too: a bucket of burst tokens refilled
// continuously at limit per period, starting full, holds at any instant
// burst - (TAT - now) * limit / period tokens, so "cost tokens present" is
// exactly "TAT + cost*T - tau <= now" (tests/algorithms_test.cc checks the
// rule token_bucket against a bucket of tokens kept the plain way).
//
// Inline: most rules are gcra, decided on every request (transition.h).
#pragma once

#include "algorithms/algorithms.h"
#include "algorithms/exact_time.h"

namespace rl {

RL_HOT rl_decision_t gcra(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    const uint64_t T = (uint64_t) rule.period_ms;
    const uint64_t tau = (uint64_t) rule.burst * T;
    const uint64_t ahead = paced_ahead(rule, s, now);  // TAT - now
    const uint64_t room = ahead < tau ? tau - ahead : 0;

    rl_decision_t d{};  // the one object returned, built in the caller's
    if (cost > rule.burst) {
        d = never(rule.period_ms, room / T, ceil_div(ahead, rule.limit));
        return d;
    }

    const uint64_t need = ahead + cost * T;  // TAT - now after admitting
    d.window_ms = rule.period_ms;

    if (need <= tau || cost == 0) {  // looking (cost 0) is always allowed
        d.allowed = 1;
        d.remaining = (need <= tau ? tau - need : 0) / T;
        d.reset_ms = ceil_div(need, rule.limit);
        // one more token when need + (remaining + 1) * T - tau units have
        // passed; none can come to a full bucket (need 0)
        d.available_ms = need > 0 ? ceil_div(need + (d.remaining + 1) * T - tau, rule.limit) : 0;
        if (apply && cost > 0) {
            paced_store(rule, s, now, need);
        }
    } else {
        d.remaining = room / T;
        d.reset_ms = ceil_div(ahead, rule.limit);
        d.retry_after_ms = ceil_div(need - tau, rule.limit);
        d.available_ms = d.retry_after_ms;
    }
    return d;
}

}  // namespace rl
