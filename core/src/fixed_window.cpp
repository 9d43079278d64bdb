// Fixed window (seed 001, seed 004): at most `limit` cost units per window
// of `period`.  Windows start at multiples of period since the Unix epoch
// (align=epoch) or at a key's first request (align=first, seed 001's
// "user-defined start").  State: t = the window's end, n = units spent in it.
//
// Known trade-off (documented): up to 2 x limit can pass across one
// boundary.  Jump-safe: a window whose end lies further ahead than the
// current window's (the clock stepped back) is kept, count and all.
#include "algorithms.h"

namespace rl {

Step fixed_window(const rl_rule_t &rule, rl_state_t s, int64_t now, uint64_t cost)
{
    const int64_t period = rule.period_ms;
    int64_t end;
    uint64_t spent;

    if (rule.align == RL_ALIGN_FIRST) {
        end = s.t > now ? s.t : now + period;
    } else {
        end = now - now % period + period;
        end = s.t > end ? s.t : end;
    }
    spent = s.t == end ? s.n : 0;

    const uint64_t left = spent < rule.limit ? rule.limit - spent : 0;
    const int64_t to_end = end - now;

    if (cost > rule.limit) {
        return never(s, left, spent ? to_end : 0);
    }

    Step r{};

    if (cost <= left) {
        r.decision.allowed = 1;
        r.decision.remaining = left - cost;
        r.decision.reset_ms = spent + cost ? to_end : 0;
        r.next = rl_state_t{end, (uint32_t) (spent + cost)};
        r.commit = cost > 0;
    } else {
        r.decision.remaining = left;
        r.decision.reset_ms = to_end;
        r.decision.retry_after_ms = to_end;
        r.next = s;
    }
    return r;
}

}  // namespace rl
