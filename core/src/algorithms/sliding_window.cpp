// Sliding window, the sub-bucketed counter (an approximated sliding
// window).  The window W = period is cut into
// S = buckets ticks; a key counts the units admitted in each of the last
// S + 1 ticks.  The window ending now covers the S newest ticks (the current
// one partly) and a part of the oldest: its estimated count is
//
//     estimate = (sum of the S newest ticks) + oldest * (W - e) / W
//
// where e is how far now is into the current tick, in units of 1/S ms (a
// tick is W of them).  A request of cost q is admitted iff estimate + q <=
// limit.  Only the oldest tick is approximated, so the error is at most one
// tick's count; S = 1 is the classic two-counter estimate previous *
// (W - elapsed) / W + current.  Unlike fixed windows it never admits twice
// the limit across a boundary.  All comparisons are exact integer ones.
//
// Block: the newest tick stored, then S + 1 counters in a ring; with
// charge=, then the instant until which the key owes what a charge put
// beyond the limit (sliding_window_charge).
#include <cstring>

#include "algorithms/algorithms.h"

namespace rl {

namespace {

struct Block {
    int64_t tick;       // the newest tick with a counter
    uint32_t count[1];  // [S + 1], tick j at j % (S + 1)
};

using wide = unsigned __int128;

struct Window {
    const rl_rule_t &rule;
    const Block *b;   // nullptr: nothing counted
    int64_t S, W;     // ticks per window, and a tick's length in 1/S ms
    int64_t xk;       // a tick counted `xc` more than the block says: the
    uint64_t xc = 0;  // window as a request admitted in it leaves it

    uint64_t count(int64_t j) const
    {
        const uint64_t x = j == xk ? xc : 0;
        if (b == nullptr || j > b->tick || j <= b->tick - (S + 1)) {
            return x;
        }
        return x + b->count[j % (S + 1)];
    }

    // The sum of the S newest ticks at tick k.
    uint64_t newest(int64_t k) const
    {
        uint64_t sum = 0;
        for (int64_t j = k - S + 1; j <= k; j++) {
            sum += count(j);
        }
        return sum;
    }

    // The estimate at tick k, e into it, scaled by W: sum*W + oldest*(W-e),
    // sum = newest(k).
    wide used(int64_t k, int64_t e, uint64_t sum) const
    {
        return (wide) sum * (uint64_t) W + (wide) count(k - S) * (uint64_t) (W - e);
    }

    // The first ms (>= from) at which cost fits, with no further requests;
    // newer = newest(k).
    int64_t admissible_at(int64_t k, uint64_t newer, int64_t from, uint64_t cost) const
    {
        const wide cap = (wide) rule.limit * (uint64_t) W;
        // newer: ticks j - S + 1 .. k, kept as j moves on
        for (int64_t j = k;; newer -= count(j - S + 1), j++) {
            const wide fixed = (wide) (newer + cost) * (uint64_t) W;
            if (fixed > cap) {
                continue;  // the newer ticks alone are too many: next tick
            }
            const wide room = cap - fixed;
            const uint64_t old = count(j - S);
            // old * (W - e) <= room  <=>  e >= W - floor(room / old)
            int64_t e = 0;
            if (old > 0 && room / old < (wide) W) {
                e = W - (int64_t) (room / old);
            }
            const int64_t at = ceil_div((uint64_t) (j * W + e), (uint64_t) S);
            if (at * S < (j + 1) * W) {  // still within tick j
                return at > from ? at : from;
            }
        }
    }
};

}  // namespace

size_t sliding_window_blob_size(const rl_rule_t &rule)
{
    return offsetof(Block, count) + sizeof(uint32_t) * (rule.buckets + 1) + (rule.charge ? sizeof(int64_t) : 0);
}

namespace {

// charge=: the instant until which a key owes units beyond the limit, after
// the ring (unaligned: the ring's size is any multiple of 4).
int64_t owed_until(const rl_rule_t &rule, const Block *b)
{
    int64_t t = 0;
    if (rule.charge && b != nullptr) {
        std::memcpy(&t, &b->count[rule.buckets + 1], sizeof(t));
    }
    return t;
}

void set_owed_until(const rl_rule_t &rule, Block *b, int64_t t)
{
    std::memcpy(&b->count[rule.buckets + 1], &t, sizeof(t));
}

}  // namespace

// When a unit admitted now has left the window entirely.
int64_t sliding_window_full_at(const rl_rule_t &rule, int64_t now)
{
    const int64_t S = rule.buckets, W = rule.period_ms;
    return ceil_div((uint64_t) ((floor_div(now * S, W) + 1 + S) * W), (uint64_t) S);
}

// A restored key's units (summary.cpp) all counted in one tick: the latest
// that has left the window by head.t, and not after the current tick.
void sliding_window_restore(const rl_rule_t &rule, State &s, int64_t now)
{
    Block *b = reinterpret_cast<Block *>(s.blob);
    const int64_t S = rule.buckets, W = rule.period_ms;
    const int64_t k = floor_div(now * S, W);
    // the least j with ceil((j + 1 + S) * W / S) >= t
    int64_t j = floor_div((s.head.t - 1) * S, W) - S;
    if (j > k) {
        j = k;
    }
    b->tick = j;
    b->count[j % (S + 1)] = s.head.n < rule.limit ? s.head.n : rule.limit;
    s.head.t = ceil_div((uint64_t) ((j + 1 + S) * W), (uint64_t) S);
}

namespace {

rl_decision_t sliding_window_counted(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    if (s.blob == nullptr && s.head.n > 0 && s.head.t > now) {
        // restored from the eviction summary: decided on the block it would
        // have (the caller writes it into a real block to commit)
        int64_t local[(sizeof(Block) + sizeof(uint32_t) * RL_BUCKETS_MAX + 7) / 8] = {};
        State v{s.head, reinterpret_cast<uint8_t *>(local)};
        sliding_window_restore(rule, v, now);
        return sliding_window_counted(rule, v, now, cost, false);
    }
    Block *b = reinterpret_cast<Block *>(s.blob);
    const int64_t S = rule.buckets, W = rule.period_ms;

    // tick k holds [k*W, (k+1)*W) in units of 1/S ms
    int64_t k = floor_div(now * S, W);
    int64_t e = now * S - k * W;

    // A block a process died writing may hold anything (the table does not
    // save blocks, table.h): a newest tick more than a year from now reads
    // as an empty block, and is started afresh if the request is admitted.
    const int64_t year = RL_PERIOD_MAX_MS * S / W + S + 1;
    if (b != nullptr && (b->tick > k + year || b->tick < k - year)) {
        State empty{rl_state_t{0, 0}, nullptr};
        const rl_decision_t d = sliding_window_counted(rule, empty, now, cost, false);
        if (!apply || !d.allowed || cost == 0) {
            return d;
        }
        b->tick = k - S - 1;  // the ring's advance zeroes it all
        return sliding_window_counted(rule, s, now, cost, true);
    }

    Window w{rule, b, S, W, k};
    if (b != nullptr && b->tick > k) {
        k = b->tick;  // the clock stepped back: count as of the newest tick
        e = 0;
    }

    const wide cap = (wide) rule.limit * (uint64_t) w.W;
    const uint64_t sum = w.newest(k);
    const wide used = w.used(k, e, sum);
    const int64_t newest = b != nullptr && b->tick > k - (w.S + 1) ? b->tick : INT64_MIN;
    // a tick j has left the window entirely from (j + 1 + S) * W / S ms on
    auto full_at = [&](int64_t j) { return ceil_div((uint64_t) ((j + 1 + w.S) * w.W), (uint64_t) w.S); };
    const int64_t reset = newest == INT64_MIN || used == 0 ? 0 : full_at(newest) - now;

    if (cost > rule.limit) {
        return never(rule.period_ms, (uint64_t) ((cap - (used < cap ? used : cap)) / (uint64_t) w.W), reset);
    }

    rl_decision_t d{};
    d.window_ms = rule.period_ms;
    const wide spend = (wide) cost * (uint64_t) w.W;

    if (used + spend <= cap) {
        d.allowed = 1;
        d.remaining = (uint64_t) ((cap - used - spend) / (uint64_t) w.W);
        d.reset_ms = cost > 0 ? full_at(k) - now : reset;
        // one more unit when the window, this request counted, leaves room
        // for remaining + 1; none can come to an empty window
        w.xk = k;
        w.xc = cost;
        d.available_ms = used + spend > 0 ? w.admissible_at(k, sum + cost, now + 1, d.remaining + 1) - now : 0;
        if (apply && cost > 0) {
            // advance the ring to tick k, zeroing the ticks it skips
            if (b->tick < k) {
                for (int64_t j = b->tick + 1; j <= k && j <= b->tick + w.S + 1; j++) {
                    b->count[j % (w.S + 1)] = 0;
                }
                b->tick = k;
            }
            b->count[k % (w.S + 1)] += (uint32_t) cost;
            s.head.t = full_at(k);
        }
    } else {
        d.remaining = used < cap ? (uint64_t) ((cap - used) / (uint64_t) w.W) : 0;
        d.reset_ms = reset;
        d.retry_after_ms = w.admissible_at(k, sum, now + 1, cost) - now;
        d.available_ms = d.retry_after_ms;
    }
    return d;
}

}  // namespace

// A key that owes what a charge put beyond the limit is refused until it
// has paid (owed_until), then decided on its window as it is then.
rl_decision_t sliding_window(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    const Block *b = reinterpret_cast<const Block *>(s.blob);
    const int64_t owed = owed_until(rule, b);
    if (owed <= now || cost == 0) {
        rl_decision_t d = sliding_window_counted(rule, s, now, cost, apply);
        if (owed > now) {
            d.remaining = 0;
            d.reset_ms = d.reset_ms > owed - now ? d.reset_ms : owed - now;
            d.available_ms = owed - now;
        }
        return d;
    }
    State later = s;
    const rl_decision_t then = sliding_window_counted(rule, later, owed, cost, false);
    if (cost > rule.limit) {
        return never(rule.period_ms, 0, owed - now + then.reset_ms);
    }
    rl_decision_t d{};
    d.window_ms = rule.period_ms;
    d.reset_ms = owed - now + then.reset_ms;
    d.retry_after_ms = owed - now + (then.allowed ? 0 : then.retry_after_ms);
    d.available_ms = d.retry_after_ms;
    return d;
}

uint64_t sliding_window_charge(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped)
{
    Block *b = reinterpret_cast<Block *>(s.blob);
    const int64_t S = rule.buckets, W = rule.period_ms;
    int64_t k = floor_div(now * S, W);
    int64_t e = now * S - k * W;
    if (b->tick > k) {
        k = b->tick;  // the clock stepped back: count in the newest tick
        e = 0;
    }
    // advance the ring to tick k, zeroing the ticks it skips
    if (b->tick < k) {
        for (int64_t j = b->tick + 1; j <= k && j <= b->tick + S + 1; j++) {
            b->count[j % (S + 1)] = 0;
        }
        b->tick = k;
    }
    const Window w{rule, b, S, W, k};
    const uint64_t sum = w.newest(k);
    uint64_t ring = 0;
    for (int64_t j = 0; j <= S; j++) {
        ring += b->count[j];
    }
    // the ring counts at most twice the limit (its counters are 32 bits)
    const uint64_t most = 2 * (uint64_t) rule.limit;
    const uint64_t add = ring < most ? (units < most - ring ? units : most - ring) : 0;
    b->count[k % (S + 1)] += (uint32_t) add;

    // what the window now counts beyond the limit is owed once the window
    // has slid past it, at limit per period: at most a limit, a period
    const uint64_t counted = (uint64_t) ((w.used(k, e, sum) + (wide) add * (uint64_t) W + (uint64_t) W - 1) / W);
    const int64_t full = ceil_div((uint64_t) ((k + 1 + S) * W), (uint64_t) S);
    int64_t owed = owed_until(rule, b);
    if (counted > rule.limit) {
        const uint64_t beyond = counted - rule.limit;
        owed = (owed > full ? owed : full) + ceil_div(beyond * (uint64_t) W, rule.limit);
        owed = owed < full + W ? owed : full + W;
        set_owed_until(rule, b, owed);
    }
    s.head.t = owed > full ? owed : full;
    *capped = add < units || (counted > rule.limit && counted - rule.limit > rule.limit);
    return add;
}

// Uncounts a refunded request from the tick it was counted in, if the ring
// still holds that tick.
void sliding_window_refund(const rl_rule_t &rule, State &s, uint64_t cost, int64_t at)
{
    Block *b = reinterpret_cast<Block *>(s.blob);
    const int64_t S = rule.buckets, W = rule.period_ms;
    const int64_t k = floor_div(at * S, W);
    if (b == nullptr || k > b->tick || k <= b->tick - (S + 1)) {
        return;
    }
    uint32_t &n = b->count[k % (S + 1)];
    n -= (uint32_t) (cost < n ? cost : n);
}

}  // namespace rl
