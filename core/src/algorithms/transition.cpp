// What each rule derives once, a denial for a cost never admitted, and the
// C entry points of the transitions (the dispatch is transition.h).
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/exact_time.h"
#include "algorithms/transition.h"

namespace rl {

rl_decision_t never(int64_t window, uint64_t remaining, int64_t reset_ms)
{
    // Retrying cannot help; Retry-After points at the key's full budget, and
    // is at least one second like every other Retry-After.
    rl_decision_t d{};
    d.never = 1;
    d.remaining = remaining;
    d.reset_ms = reset_ms;
    d.retry_after_ms = reset_ms > 1000 ? reset_ms : 1000;
    d.available_ms = reset_ms;
    d.window_ms = window;
    return d;
}

// The policy the headers advertise (policy()): a quota that bounds what
// remaining can show, over the time it takes to come back.  A bucket holds
// burst; a shaper admits, when rested, delay + max_delay / T + 1 requests
// (at once or delayed); both restore them at limit per period.  Windows hold
// limit, over the window the decision names.
void derive(rl_rule_t &rule)
{
    switch (rule.algorithm) {
    case RL_SLIDING_WINDOW:
        rule.block = (uint32_t) sliding_window_blob_size(rule);
        break;
    case RL_SLIDING_LOG:
        rule.block = (uint32_t) sliding_log_blob_size(rule);
        break;
    case RL_CONCURRENCY:
        rule.block = (uint32_t) concurrency_blob_size(rule);
        break;
    default:
        rule.block = (uint32_t) paced_block_size(rule);
        break;
    }

    const uint64_t T = (uint64_t) rule.period_ms;  // units of 1/limit ms
    rule.policy_window_ms = -1;
    switch (rule.algorithm) {
    case RL_GCRA:
    case RL_TOKEN_BUCKET:
        rule.policy_quota = rule.burst;
        break;
    case RL_LEAKY_BUCKET:
        rule.policy_quota = rule.delay + (uint64_t) rule.max_delay_ms * rule.limit / T + 1;
        break;
    case RL_CONCURRENCY:
        rule.policy_quota = rule.limit;
        rule.policy_window_ms = 0;  // no window: slots come back as requests end
        return;
    default:
        rule.policy_quota = rule.limit;
        return;
    }
    rule.policy_window_ms = rule.limit ? ceil_div(rule.policy_quota * T, rule.limit) : 0;
}

}  // namespace rl

extern "C" {

size_t rl_state_size(const rl_rule_t *rule)
{
    return sizeof(rl_state_t) + rl::blob_size(*rule);
}

int rl_transition(const rl_rule_t *rule, void *state, int64_t now_ms, uint64_t cost, int apply, rl_decision_t *d)
{
    try {
        uint8_t *p = static_cast<uint8_t *>(state);
        rl::State s{};
        std::memcpy(&s.head, p, sizeof(rl_state_t));
        s.blob = rl::blob_size(*rule) ? p + sizeof(rl_state_t) : nullptr;
        *d = rl::transition(*rule, s, now_ms, cost, apply != 0);
        rl::policy(*rule, *d);
        const bool changed = apply && d->allowed && cost > 0;
        if (changed) {
            std::memcpy(p, &s.head, sizeof(rl_state_t));
        }
        return changed ? 1 : 0;
    } catch (...) {
        *d = rl_decision_t{};
        return 0;
    }
}

}  // extern "C"
