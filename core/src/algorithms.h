// The pure algorithm transitions, one file each.  Every transition takes the
// stored state, the time and the cost, and returns the decision plus the
// state to store if the request is admitted.  A denied request never
// consumes: its state is never stored.
#pragma once

#include "ratelimit.h"

namespace rl {

struct Step {
    rl_decision_t decision;
    rl_state_t    next;     // to store when commit
    bool          commit;   // admitted and something was spent
};

Step gcra(const rl_rule_t &rule, rl_state_t s, int64_t now, uint64_t cost);
Step token_bucket(const rl_rule_t &rule, rl_state_t s, int64_t now, uint64_t cost);
Step fixed_window(const rl_rule_t &rule, rl_state_t s, int64_t now, uint64_t cost);

// Dispatches on rule.algorithm.
Step transition(const rl_rule_t &rule, rl_state_t s, int64_t now, uint64_t cost);

// ceil(a / b) for non-negative a and positive b.
inline int64_t ceil_div(uint64_t a, uint64_t b) { return (int64_t) ((a + b - 1) / b); }

// A denial for a cost no state of the rule can ever admit.
Step never(rl_state_t s, uint64_t remaining, int64_t reset_ms);

}  // namespace rl
