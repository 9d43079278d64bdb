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

// The same for a rule of a stack whose decision reaches the headers only
// if it leaves fewer units than binds_below (Algorithm::transition_binding).
RL_HOT void transition_binding_into(rl_decision_t &d, const rl_rule_t &rule, State &s, int64_t now, uint64_t cost,
                                    bool apply, uint64_t binds_below)
{
    const BindingTransition t = algorithm_of(rule).transition_binding;
    if (t == nullptr) {
        transition_into(d, rule, s, now, cost, apply);
        return;
    }
    ::new (&d) rl_decision_t(t(rule, s, now, cost, apply, binds_below));
}

}  // namespace rl
