// The eviction summary, per algorithm: what an evicted key owes, and the
// state a key absent from the table starts from (table.h keeps the cells).
//
// A key owes, until the instant it is back to full budget (its head's t), a
// fraction of its rule's capacity (beyond its first request, see owed_frac): the tokens a gcra or token_bucket key is
// missing of its burst, the queue a leaky_bucket key holds, the units a
// window counts.  Rounded up when stored (8 bits), rounded down when read,
// so that a key restored under the same rule owes exactly what it owed for
// limits up to 255, and at most limit/255 units more above.
//
// A restored state is never better off than the evicted key at any later
// instant: gcra-like keys take the earlier of `until` and the fraction's
// worth of time; window keys count the units until `until`, but never past
// the end of a window opened now (a cell may carry a longer rule's `until`).
#include "algorithms/algorithms.h"
#include "algorithms/exact_time.h"

namespace rl {

namespace {

using wide = unsigned __int128;

// A paced key's capacity in units of 1/limit ms: the burst, or the longest
// queue a leaky bucket admits (what it serves at once, max_delay, and the
// request's own cost).
uint64_t paced_capacity(const rl_rule_t &rule)
{
    const uint64_t T = (uint64_t) rule.period_ms;
    if (rule.algorithm == RL_LEAKY_BUCKET) {
        return (uint64_t) rule.max_delay_ms * rule.limit + ((uint64_t) rule.limit + rule.delay) * T;
    }
    return (uint64_t) rule.burst * T;
}

uint32_t fraction(uint64_t part, uint64_t whole)
{
    if (part >= whole) {
        return kFracFull;
    }
    if (whole <= UINT64_MAX >> 8) {  // part * 255 + whole - 1 < 256 * whole fits: no 128-bit division
        return (uint32_t) ((part * kFracFull + whole - 1) / whole);
    }
    return (uint32_t) (((wide) part * kFracFull + whole - 1) / whole);
}

uint64_t part_of(uint32_t frac, uint64_t whole)
{
    return (uint64_t) ((wide) frac * whole / kFracFull);
}

// The end of the window a unit admitted now is counted in.
int64_t window_end(const rl_rule_t &rule, int64_t now)
{
    const int64_t P = rule.period_ms;
    switch (rule.algorithm) {
    case RL_FIXED_WINDOW:
        return rule.align == RL_ALIGN_FIRST ? now + P : floor_div(now, P) * P + P;
    case RL_QUOTA:
        return quota_end(rule, now);
    case RL_SLIDING_WINDOW:
        return sliding_window_full_at(rule, now);
    default:  // RL_SLIDING_LOG
        return now + P;
    }
}

}  // namespace

// A key owing no more than one request of cost 1 owes nothing here: that
// much every new key gets, so forgetting it never lets a key do more than
// the new keys it takes to evict it, and a flood of keys admitted once
// each leaves the summary empty (no new key then starts owing anything).
uint32_t owed_frac_of(const rl_rule_t &rule, const State &s, const rl_decision_t &d, int64_t now)
{
    if (rule.algorithm == RL_CONCURRENCY) {
        return 0;  // slots are not a debt: kept in the table while held (check.cpp)
    }
    if (paced(rule.algorithm)) {
        const uint64_t ahead = paced_ahead(rule, s, now);
        return ahead <= (uint64_t) rule.period_ms ? 0 : fraction(ahead, paced_capacity(rule));
    }
    const uint64_t units = rule.limit - (d.remaining < rule.limit ? d.remaining : rule.limit);
    return units <= 1 ? 0 : fraction(units, rule.limit);
}

State restore(const rl_rule_t &rule, Owed o, int64_t now)
{
    State s{rl_state_t{0, 0}, nullptr};
    if (o.until <= now || o.frac == 0 || rule.algorithm == RL_CONCURRENCY) {
        return s;
    }
    if (paced(rule.algorithm)) {
        const uint64_t by_time = units_ahead(rl_state_t{o.until, 0}, now, rule.limit);
        const uint64_t by_frac = part_of(o.frac, paced_capacity(rule));
        s.head = instant_after(now, o.frac == kFracFull || by_frac > by_time ? by_time : by_frac, rule.limit);
        return s;
    }
    const uint64_t units = part_of(o.frac, rule.limit);
    const int64_t end = window_end(rule, now);
    const bool aligned =
        rule.algorithm == RL_QUOTA || (rule.algorithm == RL_FIXED_WINDOW && rule.align == RL_ALIGN_EPOCH);
    if (units == 0 || (aligned && o.until < end)) {
        return s;  // whatever it stands for was counted in an earlier window
    }
    s.head = rl_state_t{o.until < end ? o.until : end, (uint32_t) units};
    return s;
}

void restore_block(const rl_rule_t &rule, State &s, int64_t now)
{
    if (paced(rule.algorithm)) {
        // a head-only state: its instant, written again with the block
        paced_store(rule, s, now, units_ahead(s.head, now, rule.limit));
        return;
    }
    if (s.head.n == 0 || s.head.t <= now) {
        return;
    }
    if (rule.algorithm == RL_SLIDING_WINDOW) {
        sliding_window_restore(rule, s, now);
    } else if (rule.algorithm == RL_SLIDING_LOG) {
        sliding_log_restore(rule, s, now);
    }
}

}  // namespace rl
