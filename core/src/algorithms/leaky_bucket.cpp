// Leaky bucket, the shaper (a "wait-until" limiter): requests leave at a
// steady limit per period.  A request
// over the pace is not rejected but delayed to its slot; only one that would
// wait longer than max_delay is rejected.
//
// The state is the instant the queue drains (the wait-until timestamp,
// which is GCRA's TAT): a request's slot starts at max(drain, now), and it
// moves the drain instant cost * T later.  A rejection consumes nothing,
// like every other algorithm's, so the drain instant never passes
// now + (delay + cost) * T + max_delay.
//
// Two stages, as nginx's limit_req with burst=B delay=D: the first `delay`
// requests over the pace are served at once (their slots are still taken),
// the rest wait `delay` slots less than their slot, and a request that would
// wait longer than max_delay is rejected.  With limit_req's words, a request
// whose excess (the requests queued ahead of it, ahead / T) is at most D
// passes at once, one whose excess is at most B waits (excess - D) * T:
// delay=D max_delay=(B - D) * T.  delay=0 (the default) delays from the
// first request over the pace.
#include "algorithms/algorithms.h"
#include "algorithms/exact_time.h"

namespace rl {

namespace {

// Requests of cost 1 admissible (at once or delayed) with the queue
// `queued` units long, and the units of time until there is one more (or,
// if none can come, the queue is empty).
void headroom(uint64_t queued, uint64_t most, uint64_t T, uint32_t limit, rl_decision_t &d)
{
    d.remaining = queued <= most ? (most - queued) / T + 1 : 0;
    const uint64_t more = queued + d.remaining * T - most;  // one more fits
    d.available_ms = ceil_div(more < queued ? more : queued, limit);
}

}  // namespace

rl_decision_t leaky_bucket(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    // in units of 1/limit ms: an interval, the queue served at once, the
    // longest queue admitted, and the wait until this request's slot
    const uint64_t T = (uint64_t) rule.period_ms;
    const uint64_t served = (uint64_t) rule.delay * T;
    const uint64_t most = served + (uint64_t) rule.max_delay_ms * rule.limit;
    const uint64_t wait = paced_ahead(rule, s, now);

    rl_decision_t d{};  // the one object returned, built in the caller's
    if (cost > rule.limit) {
        d = never(rule.period_ms, 0, ceil_div(wait, rule.limit));
        return d;
    }

    d.window_ms = rule.period_ms;

    if (cost == 0) {  // looking: never delayed
        d.allowed = 1;
        d.reset_ms = ceil_div(wait, rule.limit);
        headroom(wait, most, T, rule.limit, d);
        return d;
    }

    if (wait > most) {
        d.reset_ms = ceil_div(wait, rule.limit);
        d.retry_after_ms = ceil_div(wait - most, rule.limit);
        d.available_ms = d.retry_after_ms;
        return d;
    }

    // Admitted, released after `delay`; what follows describes the key as
    // of the release (the headers of a delayed response are sent then).
    const uint64_t drain = wait + cost * T;  // from now
    d.allowed = 1;
    d.delay_ms = wait > served ? ceil_div(wait - served, rule.limit) : 0;
    const uint64_t released = (uint64_t) d.delay_ms * rule.limit;
    const uint64_t queued = drain > released ? drain - released : 0;
    d.reset_ms = ceil_div(queued, rule.limit);
    headroom(queued, most, T, rule.limit, d);
    if (apply) {
        paced_store(rule, s, now, drain);
    }
    return d;
}

}  // namespace rl
