// The transition of the algorithm a rule names: through its record
// (algorithm.h), but gcra's (and token_bucket's, the same) inline, so that
// most requests are decided without a call and their decision written in
// place.  With registry.cpp, the table of the algorithms.
#pragma once

#include <new>

#include "algorithms/algorithm.h"
#include "algorithms/gcra.h"

namespace rl {

RL_HOT rl_decision_t transition(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    if (rule.algorithm <= RL_TOKEN_BUCKET) {
        return gcra(rule, s, now, cost, apply);
    }
    return algorithm_of(rule).transition(rule, s, now, cost, apply);
}

// The same into d: the decision written where it is kept rather than copied
// there (an assignment of the result would go through a temporary).
RL_HOT void transition_into(rl_decision_t &d, const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    ::new (&d) rl_decision_t(transition(rule, s, now, cost, apply));
}

}  // namespace rl
