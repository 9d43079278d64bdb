// The dispatch to the algorithm a rule names: inline, so that a request's
// gcra rule is decided without a call, and its decision written in place.
#pragma once

#include <new>

#include "algorithms/algorithms.h"
#include "algorithms/gcra.h"

namespace rl {

RL_HOT rl_decision_t transition(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    switch (rule.algorithm) {
    case RL_FIXED_WINDOW:
        return fixed_window(rule, s, now, cost, apply);
    case RL_SLIDING_WINDOW:
        return sliding_window(rule, s, now, cost, apply);
    case RL_SLIDING_LOG:
        return sliding_log(rule, s, now, cost, apply);
    case RL_LEAKY_BUCKET:
        return leaky_bucket(rule, s, now, cost, apply);
    case RL_QUOTA:
        return quota(rule, s, now, cost, apply);
    case RL_CONCURRENCY:
        return concurrency(rule, s, now, cost, apply);
    default:  // gcra, and token_bucket, which is gcra
        return gcra(rule, s, now, cost, apply);
    }
}

// The same into d: the decision written where it is kept rather than copied
// there (an assignment of the result would go through a temporary).
RL_HOT void transition_into(rl_decision_t &d, const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    ::new (&d) rl_decision_t(transition(rule, s, now, cost, apply));
}

}  // namespace rl
