// What each rule derives once, a denial for a cost never admitted, and the
// C entry points of the transitions (the dispatch is transition.h).
#include <cstring>

#include "algorithms/algorithm.h"
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

// What the rule's requests read and none changes, from its algorithm's
// record: its traits, its block's size, and the policy the headers
// advertise (policy()): a quota that bounds what remaining can show, over
// the time it takes to come back (-1: the decision's own window).
void derive(rl_rule_t &rule)
{
    const Algorithm &a = algorithm_of(rule);
    rule.traits = a.traits;
    rule.block = (uint32_t) a.block_size(rule);
    a.policy(rule);
    rule.horizon_ms = kNoHorizon;
    if (!(a.traits & kSlots)) {
        // a rule of slots marks the slots held far ahead: not a wait
        Bounds b{};
        a.bounds(rule, rule.charge != 0, b);
        rule.horizon_ms = b.longest < (unsigned __int128) kNoHorizon ? (int64_t) b.longest : kNoHorizon;
    }
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
