// Giving back what an admitted request reserved, when it is abandoned
// before it is served (a delayed request whose client left, or that another
// module finalized): the key's state moves back by the request's cost, as if
// it had not come, but never to before now, and only units still counted.
//
// gcra, token_bucket and leaky_bucket move their instant back by cost units
// of time (so the requests queued behind keep their slots, and the next one
// finds the queue as long as the requests really waiting make it); windows
// uncount the cost where the request counted it, if that window or tick or
// time is still held.
#include "algorithms/algorithms.h"
#include "algorithms/exact_time.h"

namespace rl {

void refund(const rl_rule_t &rule, State &s, uint64_t cost, rl_state_t after, int64_t at, int64_t now)
{
    switch (rule.algorithm) {
    case RL_GCRA:
    case RL_TOKEN_BUCKET:
    case RL_LEAKY_BUCKET: {
        const uint64_t ahead = paced_ahead(rule, s, now);
        const uint64_t back = cost * (uint64_t) rule.period_ms;
        paced_store(rule, s, now, ahead > back ? ahead - back : 0);
        return;
    }
    case RL_SLIDING_WINDOW:
        sliding_window_refund(rule, s, cost, at);
        return;
    case RL_SLIDING_LOG:
        sliding_log_refund(rule, s, cost, after.t - rule.period_ms);
        return;
    default:  // fixed_window, quota: the head is {window end, units}
        if (s.head.t == after.t) {
            s.head.n -= (uint32_t) (cost < s.head.n ? cost : s.head.n);
        } else if ((s.head.n & kCarried) && s.head.t > after.t) {
            // its window is full, and a charge's excess carried into the
            // next: the unit freed there is taken off the carried ones
            const uint32_t carried = s.head.n & ~kCarried;
            s.head.n = (carried - (uint32_t) (cost < carried ? cost : carried)) | kCarried;
        }
        return;
    }
}

}  // namespace rl
