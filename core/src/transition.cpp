// Dispatch to the algorithm a rule names, and the C entry point.
#include "algorithms.h"

namespace rl {

Step never(rl_state_t s, uint64_t remaining, int64_t reset_ms)
{
    // Retrying cannot help; Retry-After points at the key's full budget, and
    // is at least one second like every other Retry-After.
    Step r{};
    r.decision.never = 1;
    r.decision.remaining = remaining;
    r.decision.reset_ms = reset_ms;
    r.decision.retry_after_ms = reset_ms > 1000 ? reset_ms : 1000;
    r.next = s;
    return r;
}

Step transition(const rl_rule_t &rule, rl_state_t s, int64_t now, uint64_t cost)
{
    switch (rule.algorithm) {
    case RL_TOKEN_BUCKET:
        return token_bucket(rule, s, now, cost);
    case RL_FIXED_WINDOW:
        return fixed_window(rule, s, now, cost);
    default:
        return gcra(rule, s, now, cost);
    }
}

}  // namespace rl

extern "C" int rl_transition(const rl_rule_t *rule, const rl_state_t *state,
    int64_t now_ms, uint64_t cost, rl_state_t *next, rl_decision_t *d)
{
    try {
        rl::Step r = rl::transition(*rule, *state, now_ms, cost);
        *next = r.next;
        *d = r.decision;
        return r.commit ? 1 : 0;
    } catch (...) {
        *next = *state;
        *d = rl_decision_t{};
        return 0;
    }
}
