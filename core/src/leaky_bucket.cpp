// Leaky bucket, the shaper (seed 002's "wait-until" limiter; seed 004's
// leaky bucket): requests leave at a steady limit per period.  A request
// over the pace is not rejected but delayed to its slot; only one that would
// wait longer than max_delay is rejected.
//
// The state is the instant the queue drains (the wait-until timestamp,
// which is GCRA's TAT): a request's slot starts at max(drain, now), its
// delay is slot - now, and it moves the drain instant cost * T later.  Seed
// 002 also moves the timestamp on a rejected hit (capped); here a rejection
// consumes nothing, like every other algorithm, so the cap is implied:
// the drain instant never passes now + max_delay + cost * T.
#include "algorithms.h"
#include "exact_time.h"

namespace rl {

rl_decision_t leaky_bucket(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    const uint64_t T = (uint64_t) rule.period_ms;  // units of 1/limit ms
    const uint64_t max_wait = (uint64_t) rule.max_delay_ms * rule.limit;
    const uint64_t wait = paced_ahead(rule, s, now);  // until the slot

    if (cost > rule.limit) {
        return never(rule.period_ms, 0, ceil_div(wait, rule.limit));
    }

    rl_decision_t d{};
    d.window_ms = rule.period_ms;

    if (cost == 0) {  // looking: never delayed
        d.allowed = 1;
        d.remaining = wait <= max_wait ? (max_wait - wait) / T + 1 : 0;
        d.reset_ms = ceil_div(wait, rule.limit);
        return d;
    }

    if (wait > max_wait) {
        d.reset_ms = ceil_div(wait, rule.limit);
        d.retry_after_ms = ceil_div(wait - max_wait, rule.limit);
        return d;
    }

    // Admitted, released after `delay`; what follows describes the key as
    // of the release (the headers of a delayed response are sent then).
    const uint64_t drain = wait + cost * T;  // from now
    d.allowed = 1;
    d.delay_ms = ceil_div(wait, rule.limit);
    const uint64_t released = (uint64_t) d.delay_ms * rule.limit;
    const uint64_t queued = drain > released ? drain - released : 0;
    d.reset_ms = ceil_div(queued, rule.limit);
    d.remaining = queued <= max_wait ? (max_wait - queued) / T + 1 : 0;
    if (apply) {
        paced_store(rule, s, now, drain);
    }
    return d;
}

}  // namespace rl
