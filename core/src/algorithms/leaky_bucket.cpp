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
#include "algorithms/algorithm.h"
#include "algorithms/exact_time.h"
#include "util/out.h"

namespace rl {

namespace {

// Its own parameters: the longest a request waits (max_delay=, default
// the period) and the requests over the pace served at once (delay=, 0).
struct LeakyBucketParams {
    int64_t max_delay_ms;
    uint32_t delay;
};

const OwnParam own[] = {
    time_param("max_delay", offsetof(LeakyBucketParams, max_delay_ms), 0, RL_PERIOD_MAX_MS,
               "a time from 0ms to 366d, like 500ms, 5s, 1m"),
    number_param("delay", offsetof(LeakyBucketParams, delay), 0, RL_LIMIT_MAX),  // limit_req's delay=
};

Queue shaper_queue(const rl_rule_t &rule)
{
    const LeakyBucketParams p = params_of<LeakyBucketParams>(rule);
    return Queue{p.max_delay_ms, p.delay};
}

// max_delay= not given follows the period
void shaper_follow(rl_rule_t &rule)
{
    static const uint64_t max_delay = own_bit("max_delay");
    if (!(rule.given & max_delay)) {
        LeakyBucketParams p = params_of<LeakyBucketParams>(rule);
        p.max_delay_ms = rule.period_ms;
        set_params(rule, p);
    }
}

void shaper_spec(const rl_rule_t &rule, int64_t (&fields)[kSpecOwn])
{
    const LeakyBucketParams p = params_of<LeakyBucketParams>(rule);
    fields[kSpecMaxDelay] = p.max_delay_ms;
    fields[kSpecDelay] = p.delay;
}

// Requests of cost 1 admissible (at once or delayed) with the queue
// `queued` units long, and the units of time until there is one more (or,
// if none can come, the queue is empty).
void headroom(uint64_t queued, uint64_t most, uint64_t T, uint32_t limit, rl_decision_t &d)
{
    d.remaining = queued <= most ? (most - queued) / T + 1 : 0;
    const uint64_t more = queued + d.remaining * T - most;  // one more fits
    d.available_ms = ceil_div(more < queued ? more : queued, limit);
}

rl_decision_t leaky_bucket(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    // in units of 1/limit ms: an interval, the queue served at once, the
    // longest queue admitted, and the wait until this request's slot
    const uint64_t T = (uint64_t) rule.period_ms;
    const LeakyBucketParams p = params_of<LeakyBucketParams>(rule);
    const uint64_t served = (uint64_t) p.delay * T;
    const uint64_t most = served + (uint64_t) p.max_delay_ms * rule.limit;
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

// The policy: what a rested key admits at once or delayed, restored at
// limit per period.
void shaper_policy(rl_rule_t &rule)
{
    const LeakyBucketParams p = params_of<LeakyBucketParams>(rule);
    rule.policy_quota = p.delay + (uint64_t) p.max_delay_ms * rule.limit / (uint64_t) rule.period_ms + 1;
    rule.policy_window_ms = paced_window(rule);
}

// Its script computes in units of 1/limit ms: the longest queue, delay x
// period served at once and a count's worth of period and max_delay.
unsigned __int128 shaper_units(const rl_rule_t &rule, uint64_t count)
{
    const LeakyBucketParams p = params_of<LeakyBucketParams>(rule);
    return (unsigned __int128) count * (uint64_t) (rule.period_ms + p.max_delay_ms) +
           (unsigned __int128) p.delay * (uint64_t) rule.period_ms;
}

// The longest queue: what is served at once, max_delay of waiting, and the
// last request admitted (limit units at most).
void shaper_bounds(const rl_rule_t &rule, bool, Bounds &b)
{
    const uint64_t T = rule.period_ms > 0 ? (uint64_t) rule.period_ms : 1;
    const uint64_t limit = rule.limit > 0 ? rule.limit : 1;
    const uint64_t count = rule.limit_var || rule.burst_var ? rule.limit_max : rule.limit;
    b.longest = (shaper_units(rule, count) + limit - 1) / limit;
    b.window_min = b.window_max = (int64_t) T;
}

void shaper_fields(Out &o, const rl_rule_t &rule)
{
    o.field("period_ms", (uint64_t) rule.period_ms);
    o.field("max_delay_ms", (uint64_t) params_of<LeakyBucketParams>(rule).max_delay_ms);
}

}  // namespace

extern const Algorithm kLeakyBucket = {
    .name = "leaky_bucket",
    .traits = kPaced | kShaper,
    .own = own,
    .nown = 2,
    .follow = shaper_follow,
    .name_tail = period_tail,
    .block_size = paced_block_size,
    .policy = shaper_policy,
    .transition = leaky_bucket,
    .queue = shaper_queue,
    .no_charge =
        "a shaper sets each request's delay before it is served, so what the request spends cannot change after it",
    .refund = paced_refund,
    .owed = paced_owed,
    .restore = paced_restore,
    .restore_block = paced_restore_block,
    .redis_units = shaper_units,
    .bounds = shaper_bounds,
    .spec = shaper_spec,
    .no_sync = "keeps a time, not a count",
    .api_fields = shaper_fields,
    .overridable = P_LIMIT | P_PERIOD,
    .carry = paced_carry,
};

}  // namespace rl
