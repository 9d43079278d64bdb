// What the algorithms that keep one instant a key share (gcra,
// token_bucket, leaky_bucket: exact_time.h): a charge moves the instant
// later, a refund earlier, and the eviction summary keeps the fraction of
// their capacity the instant stands for.
#include "algorithms/algorithm.h"
#include "algorithms/exact_time.h"

namespace rl {

namespace {

// A paced key's capacity in units of 1/limit ms: the burst, or the longest
// queue a shaper admits (what it serves at once, max_delay, and the
// request's own cost).
uint64_t paced_capacity(const rl_rule_t &rule)
{
    const uint64_t T = (uint64_t) rule.period_ms;
    if (has(rule, kShaper)) {
        const Queue q = queue_of(rule);
        return (uint64_t) q.wait_ms * rule.limit + ((uint64_t) rule.limit + q.at_once) * T;
    }
    return (uint64_t) rule.burst * T;
}

}  // namespace

// charge=: the instant moves by the charge's time, up to a limit's time (a
// period) beyond a key that spent its whole burst.
uint64_t paced_charge(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped)
{
    const uint64_t T = (uint64_t) rule.period_ms;
    const uint64_t most = ((uint64_t) rule.burst + rule.limit) * T;  // fits: rl_rule_finish
    const uint64_t ahead = paced_ahead(rule, s, now);
    const uint64_t room = ahead < most ? (most - ahead) / T : 0;
    const uint64_t add = units < room ? units : room;
    *capped = add < units;
    if (add > 0) {
        paced_store(rule, s, now, ahead + add * T);
    }
    return add;
}

// The instant moves back by cost units of time, never to before now: the
// requests queued behind keep their slots, and the next one finds the
// queue as long as the requests really waiting make it.
void paced_refund(const rl_rule_t &rule, State &s, uint64_t cost, rl_state_t, int64_t, int64_t now)
{
    const uint64_t ahead = paced_ahead(rule, s, now);
    const uint64_t back = cost * (uint64_t) rule.period_ms;
    paced_store(rule, s, now, ahead > back ? ahead - back : 0);
}

// The tokens a bucket is missing of its burst, the queue a shaper holds;
// a key ahead by one request at most owes nothing (summary.cpp).
uint32_t paced_owed(const rl_rule_t &rule, const State &s, const rl_decision_t &, int64_t now)
{
    const uint64_t ahead = paced_ahead(rule, s, now);
    return ahead <= (uint64_t) rule.period_ms ? 0 : fraction(ahead, paced_capacity(rule));
}

// The earlier of `until` and the fraction's worth of time.
State paced_restore(const rl_rule_t &rule, Owed o, int64_t now)
{
    State s{rl_state_t{0, 0}, nullptr};
    const uint64_t by_time = units_ahead(rl_state_t{o.until, 0}, now, rule.limit);
    const uint64_t by_frac = part_of(o.frac, paced_capacity(rule));
    s.head = instant_after(now, o.frac == kFracFull || by_frac > by_time ? by_time : by_frac, rule.limit);
    return s;
}

// A head-only state's instant, written again with the block (limit=$var).
void paced_restore_block(const rl_rule_t &rule, State &s, int64_t now)
{
    paced_store(rule, s, now, units_ahead(s.head, now, rule.limit));
}

// An override's carry-over: a key owing U units is U x period units of
// 1/limit ms ahead (exact_time.h), whatever the limit: the units ahead at
// `at` under `from` are written again under `to`, scaled by the periods
// when they differ (rounded up: a change never forgives a fraction).
void paced_carry(const rl_rule_t &from, const rl_rule_t &to, State &s, int64_t at)
{
    uint64_t u = paced_ahead(from, s, at);
    if (from.period_ms != to.period_ms && u > 0) {
        const unsigned __int128 scaled =
            ((unsigned __int128) u * (uint64_t) to.period_ms + (uint64_t) from.period_ms - 1) /
            (uint64_t) from.period_ms;
        u = scaled < kUnitsMax ? (uint64_t) scaled : kUnitsMax;
    }
    paced_store(to, s, at, u);
}

// The time the policy's quota takes to come back at limit per period.
int64_t paced_window(const rl_rule_t &rule)
{
    const uint64_t T = (uint64_t) rule.period_ms;
    return rule.limit ? ceil_div(rule.policy_quota * T, rule.limit) : 0;
}

size_t paced_block_size(const rl_rule_t &rule)
{
    return rule.limit_var ? sizeof(PacedBlock) : 0;
}

}  // namespace rl
