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
// Block: the newest tick stored, the sum of the ring's counters, then S + 1
// counters in a ring; with charge=, then the instant until which the key
// owes what a charge put beyond the limit (sliding_window_charge).  The sum
// spares a request within the newest tick a walk over the ring; a request in
// a later tick walks it, and the sum is made again from the counters then
// (so that a block a process died writing is right again a tick later).
#include <cstring>

#include "algorithms/algorithm.h"
#include "util/out.h"

namespace rl {

namespace {

// Its own parameter: the ticks of a window (buckets=, default 10).
struct SlidingWindowParams {
    uint32_t buckets;
};

const OwnParam own[] = {
    number_param("buckets", offsetof(SlidingWindowParams, buckets), 1, RL_BUCKETS_MAX),
};

uint32_t buckets_of(const rl_rule_t &rule)
{
    return params_of<SlidingWindowParams>(rule).buckets;
}

// buckets= not given (0: a value given is 1 or more)
void sliding_window_follow(rl_rule_t &rule)
{
    if (buckets_of(rule) == 0) {
        set_params(rule, SlidingWindowParams{10});
    }
}

void sliding_window_spec(const rl_rule_t &rule, int64_t (&fields)[kSpecOwn])
{
    fields[kSpecBuckets] = buckets_of(rule);
}

struct Block {
    int64_t tick;       // the newest tick with a counter
    uint32_t total;     // the sum of count[]
    uint32_t count[1];  // [S + 1], tick j at slot_of(j, S + 1)
};

// Tick j's counter in a ring of `ring` (ticks are times since 1970: never
// negative but in a block a process left half written, which then stays
// within the ring).
inline int64_t slot_of(int64_t j, int64_t ring)
{
    return (int64_t) ((uint64_t) j % (uint64_t) ring);
}

using wide = unsigned __int128;

// a / b, without the 128-bit division's call when a fits in 64 bits (it
// does, but for limits and periods near their bounds).
uint64_t quotient(wide a, uint64_t b)
{
    return (uint64_t) (a >> 64) == 0 ? (uint64_t) a / b : (uint64_t) (a / b);
}

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
        return x + b->count[slot_of(j, S + 1)];
    }

    // The sum of the S newest ticks at tick k (no earlier than the block's
    // newest), and the oldest tick's count (k - S): the ring's sum less the
    // ticks that have left.  Once a turn of the ring (the tick at index 0),
    // and whenever the sum cannot be right, from the counters instead.
    void at(int64_t k, uint64_t *sum, uint64_t *old) const
    {
        *sum = *old = 0;
        if (b == nullptr || (uint64_t) k - (uint64_t) b->tick > (uint64_t) S) {
            return;  // every tick counted has left (or the block's tick is years off)
        }
        const int64_t ring = S + 1;
        const int64_t first = slot_of(k - S, ring);  // tick k - S's counter
        *old = b->count[first];
        if (first != 0 || k == b->tick) {
            // the ticks that have left, b->tick - S .. k - S - 1, before it
            uint64_t left = *old;
            for (int64_t j = k - S - 1, i = first; j >= b->tick - S; j--) {
                i = i == 0 ? S : i - 1;
                left += b->count[i];
            }
            if (b->total >= left) {
                *sum = b->total - left;
                return;
            }
        }
        // ticks k - S + 1 .. b->tick, counted
        for (int64_t j = k - S + 1, i = first; j <= b->tick; j++) {
            i = i + 1 == ring ? 0 : i + 1;
            *sum += b->count[i];
        }
    }

    // The first ms (>= from) at which cost fits, with no further requests;
    // newer = the S newest ticks' sum at tick k, and old the count of the
    // tick before them.  In tick j the newer ticks must leave room for cost
    // (newer + cost <= limit: cap = limit x W is common to both sides), and
    // the oldest's share of the window, old x (W - e), fit in what is left:
    // e >= W - floor(room / old).  By tick k + S + 1 every tick counted has
    // left, and cost (at most limit) fits: the walk ends there, whatever a
    // block a process left half written says.
    RL_HOT int64_t admissible_at(int64_t k, uint64_t newer, uint64_t old, int64_t from, uint64_t cost) const
    {
        int64_t at;
        if (fits(k, newer, old, cost, &at)) {
            return at > from ? at : from;
        }
        return admissible_later(k, newer, from, cost);
    }

    // admissible_at(), cost not fitting in tick k.
    RL_HOT int64_t admissible_later(int64_t k, uint64_t newer, int64_t from, uint64_t cost) const
    {
        int64_t at;
        // tick j = i + S: tick i has left the newer ticks, and is its oldest
        // (the ring holds ticks up to hi, from b->tick - S < k - S + 1 on;
        // ticks after it count only what xc adds); a tick that is empty
        // changes nothing but the oldest's share
        const int64_t ring = S + 1;
        const int64_t hi = b == nullptr ? k - S : b->tick < k ? b->tick : k;
        int64_t i = k - S + 1, at_i = slot_of(i, ring);
        if (newer + cost > rule.limit) {
            // the empty ticks first: at once when the newest tick holds the
            // whole ring (a key whose requests all came in this tick), else
            // in one sweep (a young window's)
            if (i < hi && b->count[at_i] == 0 && hi == b->tick && hi <= xk) {  // (i < hi: a block holds tick hi)
                int64_t at_hi = at_i + (hi - i);
                at_hi -= at_hi >= ring ? ring : 0;
                if (b->count[at_hi] == b->total) {
                    at_i = at_hi;
                    i = hi;
                }
            }
            while (i <= hi && i != xk && b->count[at_i] == 0) {
                i++;
                at_i = at_i + 1 == ring ? 0 : at_i + 1;
            }
        }
        for (; i <= k; i++, at_i = at_i + 1 == ring ? 0 : at_i + 1) {
            const uint64_t leaving = (i == xk ? xc : 0) + (i <= hi ? b->count[at_i] : 0);
            if (leaving == 0 && newer + cost > rule.limit) {
                continue;
            }
            newer = newer > leaving ? newer - leaving : 0;
            if (fits(i + S, newer, leaving, cost, &at)) {
                return at > from ? at : from;
            }
        }
        // every tick counted has left (a tick shorter than a ms may hold no
        // whole ms: the next)
        for (int64_t j = k + S + 1;; j++) {
            if (fits(j, 0, 0, cost < rule.limit ? cost : rule.limit, &at)) {
                return at > from ? at : from;
            }
        }
    }

    // In tick j, the first ms cost fits (at), if it does within it.
    bool fits(int64_t j, uint64_t newer, uint64_t old, uint64_t cost, int64_t *at) const
    {
        if (newer + cost > rule.limit) {
            return false;  // the newer ticks alone are too many
        }
        int64_t e = 0;
        if (old > 0) {
            const wide room = (wide) (rule.limit - newer - cost) * (uint64_t) W;
            if (room < (wide) old * (uint64_t) W) {
                e = W - (int64_t) quotient(room, old);
            }
        }
        *at = ceil_div((uint64_t) (j * W + e), (uint64_t) S);
        return *at * S < (j + 1) * W;  // still within tick j
    }
};

size_t sliding_window_blob_size(const rl_rule_t &rule)
{
    return offsetof(Block, count) + sizeof(uint32_t) * (buckets_of(rule) + 1) + (rule.charge ? sizeof(int64_t) : 0);
}

// charge=: the instant until which a key owes units beyond the limit, after
// the ring (unaligned: the ring's size is any multiple of 4).
int64_t owed_until(const rl_rule_t &rule, const Block *b)
{
    int64_t t = 0;
    if (rule.charge && b != nullptr) {
        std::memcpy(&t, &b->count[buckets_of(rule) + 1], sizeof(t));
    }
    return t;
}

void set_owed_until(const rl_rule_t &rule, Block *b, int64_t t)
{
    std::memcpy(&b->count[buckets_of(rule) + 1], &t, sizeof(t));
}

// A block from a state file: its ticks and what a charge owes beyond the
// limit moved back with the clock that wrote it; no tick counted after
// now's (its units would stay in the window past the period), and owed no
// longer than the rule lets a key owe.
void sliding_window_bound(const rl_rule_t &rule, State &s, int64_t now, int64_t back)
{
    Block *b = reinterpret_cast<Block *>(s.blob);
    const int64_t S = buckets_of(rule), W = rule.period_ms;
    const int64_t k = floor_div(now * S, W);
    const int64_t tick = (int64_t) ((uint64_t) b->tick - (uint64_t) floor_div(back * S, W));  // any tick reads safely
    b->tick = tick > k ? k : tick;
    const int64_t owed = owed_until(rule, b);
    if (owed <= now) {
        return;  // owes nothing beyond the window now
    }
    const int64_t t = owed - back;
    set_owed_until(rule, b, t > now + rule.horizon_ms ? now + rule.horizon_ms : t);
}

// When a unit admitted now has left the window entirely.
int64_t sliding_window_full_at(const rl_rule_t &rule, int64_t now)
{
    const int64_t S = buckets_of(rule), W = rule.period_ms;
    return ceil_div((uint64_t) ((floor_div(now * S, W) + 1 + S) * W), (uint64_t) S);
}

// A restored key's units (summary.cpp) all counted in one tick: the latest
// that has left the window by head.t, and not after the current tick.
void sliding_window_restore(const rl_rule_t &rule, State &s, int64_t now)
{
    if (s.head.n == 0 || s.head.t <= now) {
        return;
    }
    Block *b = reinterpret_cast<Block *>(s.blob);
    const int64_t S = buckets_of(rule), W = rule.period_ms;
    const int64_t k = floor_div(now * S, W);
    // the least j with ceil((j + 1 + S) * W / S) >= t
    int64_t j = floor_div((s.head.t - 1) * S, W) - S;
    if (j > k) {
        j = k;
    }
    b->tick = j;
    b->total = b->count[slot_of(j, S + 1)] = s.head.n < rule.limit ? s.head.n : rule.limit;
    s.head.t = ceil_div((uint64_t) ((j + 1 + S) * W), (uint64_t) S);
}

// Moves the ring on to tick k (after its newest), zeroing the ticks it
// skips; total is the ring's sum then (at(k)'s sum and old: the counters'
// own, as at() read them in a later tick).
void advance(Block *b, int64_t S, int64_t k, uint64_t total)
{
    const int64_t ring = S + 1;
    const int64_t from = (uint64_t) k - (uint64_t) b->tick > (uint64_t) ring ? k - ring + 1 : b->tick + 1;
    for (int64_t j = from, i = slot_of(from, ring); j <= k; j++, i = i + 1 == ring ? 0 : i + 1) {
        b->count[i] = 0;
    }
    b->tick = k;
    b->total = (uint32_t) total;
}

// Counts cost more in the ring's newest tick.
void add(Block *b, int64_t S, uint64_t cost)
{
    b->count[slot_of(b->tick, S + 1)] += (uint32_t) cost;
    b->total += (uint32_t) cost;
}

// floor(units / W) of what a window at tick k, e into it, has left under
// cap = limit x W once `more` is counted: (limit - sum - more - old) +
// floor(old x e / W), the window holding sum x W + old x (W - e).  At least
// 0 only if the window holds no more than cap: the caller knows.
int64_t units_left(uint64_t limit, uint64_t sum, uint64_t old, uint64_t more, int64_t e, int64_t W)
{
    return (int64_t) limit - (int64_t) sum - (int64_t) more - (int64_t) old +
           (int64_t) quotient((wide) old * (uint64_t) e, (uint64_t) W);
}

// A block a process died writing may hold anything (the table does not save
// blocks, table.h): one whose newest tick is more than a year ahead of tick
// k reads as an empty block (not as a clock stepped back by years), and is
// started afresh if the request is admitted.  (One whose newest tick is
// more than a window behind reads as empty anyway, and the ring's advance
// clears it.)
bool unusual_block(const rl_rule_t &rule, const Block *b, int64_t k)
{
    const int64_t S = buckets_of(rule);
    const int64_t year = RL_PERIOD_MAX_MS * S / rule.period_ms + S + 1;
    return b->tick > k + year;
}

void unusual(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply, rl_decision_t &d);

// binds_below of a decision the headers may describe whatever it leaves
// (a rule alone): a constant, so that the test folds away there.
constexpr uint64_t kBinds = ~uint64_t{0};

// The decision on the key's window, into d (inline: the usual case; a key
// restored from the summary, or a block a process left half written, are
// unusual()'s).  An admission that leaves binds_below units or more
// (transition_binding, algorithm.h) has its reset for its next unit.
RL_HOT void counted(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply, rl_decision_t &d,
                    uint64_t binds_below = kBinds)
{
    Block *b = reinterpret_cast<Block *>(s.blob);
    const int64_t S = buckets_of(rule), W = rule.period_ms;

    // tick k holds [k*W, (k+1)*W) in units of 1/S ms
    int64_t k = floor_div(now * S, W);
    int64_t e = now * S - k * W;

    if (b == nullptr && s.head.n > 0 && s.head.t > now) {
        unusual(rule, s, now, cost, apply, d);
        return;
    }
    Window w{rule, b, S, W, k};
    if (b != nullptr && b->tick > k) {
        if (b->tick > k + S + 1 && unusual_block(rule, b, k)) {
            unusual(rule, s, now, cost, apply, d);
            return;
        }
        k = b->tick;  // the clock stepped back: count as of the newest tick
        e = 0;
    }

    // the window holds sum x W + old x (W - e) of cap = limit x W (no
    // division: units_left)
    uint64_t sum, old;
    w.at(k, &sum, &old);
    auto within = [&](uint64_t more) {
        return sum + more <= rule.limit &&
               (wide) old * (uint64_t) (W - e) <= (wide) (rule.limit - sum - more) * (uint64_t) W;
    };
    // a tick j has left the window entirely from (j + 1 + S) * W / S ms on
    auto full_at = [&](int64_t j) { return ceil_div((uint64_t) ((j + 1 + S) * W), (uint64_t) S); };
    const int64_t full = full_at(k);
    // until the window is empty, as it is (the newest tick counted leaves)
    auto reset = [&]() {
        const bool counted = b != nullptr && b->tick > k - (S + 1) && (sum > 0 || old > 0);
        return !counted ? 0 : (b->tick == k ? full : full_at(b->tick)) - now;
    };

    d = rl_decision_t{};
    d.window_ms = rule.period_ms;

    if (within(cost)) {  // (never for a cost over the limit)
        // floor((cap - used - cost x W) / W) = limit - sum - cost - old + q
        const uint64_t q = quotient((wide) old * (uint64_t) e, (uint64_t) W);
        d.allowed = 1;
        d.remaining = rule.limit - sum - cost - old + q;
        d.reset_ms = cost > 0 ? full - now : reset();
        // One more unit when the window, this request counted, leaves room
        // for remaining + 1 (none can come to an empty window).  In tick k
        // that is when the oldest's share, old x (W - e'), fits in the
        // (old - q - 1) x W left; with no oldest, in a later tick.  Not
        // worked out for a decision the headers do not describe.
        w.xk = k;
        w.xc = cost;
        const bool binds = binds_below == kBinds || d.remaining < binds_below;
        int64_t at = 0;
        if (binds && old > 0) {
            at = ceil_div((uint64_t) (k * W + W) - quotient((wide) (old - q - 1) * (uint64_t) W, old), (uint64_t) S);
        }
        if (!binds) {
            d.available_ms = d.reset_ms;
        } else if (old > 0 && at * S < (k + 1) * W) {
            d.available_ms = (at > now + 1 ? at : now + 1) - now;
        } else if (sum + cost > 0 || old > 0) {
            d.available_ms = w.admissible_later(k, sum + cost, now + 1, d.remaining + 1) - now;
        }
        // never after the window is empty (the same instant, but for a sum
        // a process left wrong: see Block)
        d.available_ms = d.available_ms < d.reset_ms ? d.available_ms : d.reset_ms;
        if (apply && cost > 0) {
            if (b->tick < k) {
                advance(b, S, k, sum + old);
            }
            add(b, S, cost);
            s.head.t = full;
        }
    } else if (cost > rule.limit) {
        d = never(rule.period_ms, within(0) ? (uint64_t) units_left(rule.limit, sum, old, 0, e, W) : 0, reset());
    } else {
        d.remaining = within(0) ? (uint64_t) units_left(rule.limit, sum, old, 0, e, W) : 0;
        d.reset_ms = reset();
        d.retry_after_ms = w.admissible_at(k, sum, old, now + 1, cost) - now;
        d.available_ms = d.retry_after_ms;
    }
}

void unusual(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply, rl_decision_t &d)
{
    Block *b = reinterpret_cast<Block *>(s.blob);
    if (b == nullptr) {
        // restored from the eviction summary: decided on the block it would
        // have (the caller writes it into a real block to commit)
        int64_t local[(sizeof(Block) + sizeof(uint32_t) * RL_BUCKETS_MAX + 7) / 8] = {};
        State v{s.head, reinterpret_cast<uint8_t *>(local)};
        sliding_window_restore(rule, v, now);
        counted(rule, v, now, cost, false, d);
        return;
    }
    // a block that reads as empty, started afresh if the request is admitted
    State empty{rl_state_t{0, 0}, nullptr};
    counted(rule, empty, now, cost, false, d);
    if (apply && d.allowed && cost > 0) {
        b->tick =
            floor_div(now * buckets_of(rule), rule.period_ms) - buckets_of(rule) - 1;  // the advance zeroes it all
        counted(rule, s, now, cost, true, d);
    }
}

// A key that owes what a charge put beyond the limit is refused until it
// has paid (owed_until), then decided on its window as it is then.
RL_HOT rl_decision_t decide_window(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply,
                                   uint64_t binds_below)
{
    const Block *b = reinterpret_cast<const Block *>(s.blob);
    const int64_t owed = owed_until(rule, b);
    rl_decision_t d;  // the one object returned, built in the caller's
    if (owed <= now || cost == 0) {
        counted(rule, s, now, cost, apply, d, binds_below);
        if (owed > now) {
            d.remaining = 0;
            d.reset_ms = d.reset_ms > owed - now ? d.reset_ms : owed - now;
            d.available_ms = owed - now;
        }
        return d;
    }
    State later = s;
    rl_decision_t then;
    counted(rule, later, owed, cost, false, then);
    if (cost > rule.limit) {
        d = never(rule.period_ms, 0, owed - now + then.reset_ms);
        return d;
    }
    d = rl_decision_t{};
    d.window_ms = rule.period_ms;
    d.reset_ms = owed - now + then.reset_ms;
    d.retry_after_ms = owed - now + (then.allowed ? 0 : then.retry_after_ms);
    d.available_ms = d.retry_after_ms;
    return d;
}

rl_decision_t sliding_window(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    return decide_window(rule, s, now, cost, apply, kBinds);
}

rl_decision_t sliding_window_binding(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply,
                                     uint64_t binds_below)
{
    return decide_window(rule, s, now, cost, apply, binds_below);
}

uint64_t sliding_window_charge(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped)
{
    Block *b = reinterpret_cast<Block *>(s.blob);
    const int64_t S = buckets_of(rule), W = rule.period_ms;
    int64_t k = floor_div(now * S, W);
    int64_t e = now * S - k * W;
    if (b->tick > k) {
        k = b->tick;  // the clock stepped back: count in the newest tick
        e = 0;
    }
    const Window w{rule, b, S, W, k};
    uint64_t sum, old;
    w.at(k, &sum, &old);
    if (b->tick < k) {
        advance(b, S, k, sum + old);
    }
    const uint64_t ring = b->total;
    // the ring counts at most twice the limit (its counters are 32 bits)
    const uint64_t most = 2 * (uint64_t) rule.limit;
    const uint64_t more = ring < most ? (units < most - ring ? units : most - ring) : 0;
    add(b, S, more);

    // what the window now counts beyond the limit is owed once the window
    // has slid past it, at limit per period: at most a limit, a period
    const wide used = (wide) sum * (uint64_t) W + (wide) old * (uint64_t) (W - e);
    const uint64_t counted = (uint64_t) ((used + (wide) more * (uint64_t) W + (uint64_t) W - 1) / W);
    const int64_t full = ceil_div((uint64_t) ((k + 1 + S) * W), (uint64_t) S);
    int64_t owed = owed_until(rule, b);
    if (counted > rule.limit) {
        const uint64_t beyond = counted - rule.limit;
        owed = (owed > full ? owed : full) + ceil_div(beyond * (uint64_t) W, rule.limit);
        owed = owed < full + W ? owed : full + W;
        set_owed_until(rule, b, owed);
    }
    s.head.t = owed > full ? owed : full;
    *capped = more < units || (counted > rule.limit && counted - rule.limit > rule.limit);
    return more;
}

// Uncounts a refunded request from the tick it was counted in, if the ring
// still holds that tick.
void sliding_window_refund(const rl_rule_t &rule, State &s, uint64_t cost, rl_state_t, int64_t at, int64_t)
{
    Block *b = reinterpret_cast<Block *>(s.blob);
    const int64_t S = buckets_of(rule), W = rule.period_ms;
    const int64_t k = floor_div(at * S, W);
    if (b == nullptr || k > b->tick || k <= b->tick - (S + 1)) {
        return;
    }
    uint32_t &n = b->count[slot_of(k, S + 1)];
    const uint32_t back = (uint32_t) (cost < n ? cost : n);
    n -= back;
    b->total -= back < b->total ? back : b->total;
}

// Restored into the ticks a unit admitted now is counted in.
State sliding_window_owed_state(const rl_rule_t &rule, Owed o, int64_t now)
{
    return restore_window(rule, o, now, sliding_window_full_at(rule, now), false);
}

// Its script computes in units of 1/buckets of a period: a count's worth.
unsigned __int128 sliding_window_units(const rl_rule_t &rule, uint64_t count)
{
    return (unsigned __int128) count * (uint64_t) rule.period_ms;
}

// Until the tick after the newest spent has left the window; a debt is
// owed for up to two windows and a tick more, then waits for the window
// as it is then.
void sliding_window_bounds(const rl_rule_t &rule, bool debt, Bounds &b)
{
    const uint64_t T = rule.period_ms > 0 ? (uint64_t) rule.period_ms : 1;
    const uint64_t S = buckets_of(rule) > 0 ? buckets_of(rule) : 1;
    const uint64_t tick = (T + S - 1) / S;
    b.longest = debt ? 3 * (unsigned __int128) T + 2 * tick + 2 : T + tick;
    b.window_min = b.window_max = (int64_t) T;
}

void sliding_window_fields(Out &o, const rl_rule_t &rule)
{
    o.field("period_ms", (uint64_t) rule.period_ms);
    o.field("buckets", buckets_of(rule));
}

// redis_sync: a request decided at `at` counts in tick floor(at S / W),
// which leaves the last window holding it at (tick + 1 + S) W / S.
void sliding_window_sync_tick(const rl_rule_t &rule, int64_t at, rl_sync_item_t &item)
{
    const int64_t S = buckets_of(rule), W = rule.period_ms;
    item.tick = floor_div(at * S, W);
    item.end = ceil_div((uint64_t) ((item.tick + 1 + S) * W), (uint64_t) S);
    item.period_ms = W;
    item.ticks = (uint8_t) S;
}

// redis_sync: the fleet's counts of the item's ticks k - S .. k (at[0] the
// oldest) folded into the ring, each tick counting the largest of its own
// count and the fleet's.  A tick that has left the ring is not brought back; a
// newer tick moves the ring on.  The sum is made again from the counters,
// and head.t is when the newest tick leaves the window.
void sliding_window_merge(const rl_sync_item_t &item, State &s, const uint64_t *at)
{
    Block *b = reinterpret_cast<Block *>(s.blob);
    const int64_t k = item.tick, S = item.ticks, W = item.period_ms, ring = S + 1;
    if (b->tick > k + RL_PERIOD_MAX_MS * S / W + ring) {
        return;  // a block a process left half written: the next request's
    }
    if (b->tick < k) {
        advance(b, S, k, 0);
    }
    for (int64_t j = k - S; j <= k; j++) {
        const uint64_t fleet = at[j - (k - S)];
        uint32_t &c = b->count[slot_of(j, ring)];
        if (j > b->tick - ring && fleet > c) {
            c = fleet < UINT32_MAX ? (uint32_t) fleet : UINT32_MAX;
        }
    }
    uint64_t total = 0;
    for (int64_t i = 0; i < ring; i++) {
        total += b->count[i];
    }
    b->total = total < UINT32_MAX ? (uint32_t) total : UINT32_MAX;
    const int64_t full = ceil_div((uint64_t) ((b->tick + 1 + S) * W), (uint64_t) S);
    s.head.t = s.head.t > full ? s.head.t : full;
}

}  // namespace

extern const Algorithm kSlidingWindow = {
    .name = "sliding_window",
    .traits = kCount | kTicks,
    .own = own,
    .nown = 1,
    .follow = sliding_window_follow,
    .name_tail = period_tail,
    .block_size = sliding_window_blob_size,
    .policy = limit_policy,
    .transition = sliding_window,
    .transition_binding = sliding_window_binding,
    .charge = sliding_window_charge,
    .refund = sliding_window_refund,
    .owed = window_owed,
    .restore = sliding_window_owed_state,
    .restore_block = sliding_window_restore,
    .redis_units = sliding_window_units,
    .bounds = sliding_window_bounds,
    .spec = sliding_window_spec,
    .sync_tick = sliding_window_sync_tick,
    .merge = sliding_window_merge,
    .api_fields = sliding_window_fields,
    .overridable = P_LIMIT,
    .bound_block = sliding_window_bound,
};

}  // namespace rl
