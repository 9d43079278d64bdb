// Fixed window (seed 001, seed 004): at most `limit` cost units per window
// of `period`.  Windows start at multiples of period since the Unix epoch
// (align=epoch) or at a key's first request (align=first, seed 001's
// "user-defined start").  State: t = the window's end, n = units spent in it.
//
// Known trade-off (documented): up to 2 x limit can pass across one
// boundary.  Jump-safe: a window whose end lies further ahead than the
// current window's (the clock stepped back) is kept, count and all.
#include "algorithms/algorithms.h"

namespace rl {

rl_decision_t windowed_count(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply, int64_t end,
                             int64_t window)
{
    if (s.head.t > end) {
        end = s.head.t;  // the clock stepped back: keep the later window
    }
    const uint64_t spent = s.head.t == end ? s.head.n : 0;
    const uint64_t left = spent < rule.limit ? rule.limit - spent : 0;
    const int64_t to_end = end - now;

    if (cost > rule.limit) {
        return never(window, left, spent ? to_end : 0);
    }

    rl_decision_t d{};
    d.window_ms = window;

    // units come back all at once, at the window's end
    if (cost <= left) {
        d.allowed = 1;
        d.remaining = left - cost;
        d.reset_ms = spent + cost ? to_end : 0;
        d.available_ms = d.reset_ms;
        if (apply && cost > 0) {
            s.head = rl_state_t{end, (uint32_t) (spent + cost)};
        }
    } else {
        d.remaining = left;
        d.reset_ms = to_end;
        d.retry_after_ms = to_end;
        d.available_ms = to_end;
    }
    return d;
}

rl_decision_t fixed_window(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    const int64_t period = rule.period_ms;
    int64_t end;

    if (rule.align == RL_ALIGN_FIRST) {
        end = s.head.t > now ? s.head.t : now + period;
    } else {
        end = floor_div(now, period) * period + period;
    }
    return windowed_count(rule, s, now, cost, apply, end, period);
}

}  // namespace rl
