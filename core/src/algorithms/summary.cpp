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
// instant: paced keys take the earlier of `until` and the fraction's worth
// of time (paced.cpp); window keys count the units until `until`, but
// never past the end of a window opened now.  What a key owes, and the
// state it is restored to, are its algorithm's (algorithm.h).
#include "algorithms/algorithm.h"

namespace rl {

uint32_t fraction(uint64_t part, uint64_t whole)
{
    if (part >= whole) {
        return kFracFull;
    }
    if (whole <= UINT64_MAX >> 8) {  // part * 255 + whole - 1 < 256 * whole fits: no 128-bit division
        return (uint32_t) ((part * kFracFull + whole - 1) / whole);
    }
    return (uint32_t) (((unsigned __int128) part * kFracFull + whole - 1) / whole);
}

uint64_t part_of(uint32_t frac, uint64_t whole)
{
    return (uint64_t) ((unsigned __int128) frac * whole / kFracFull);
}

// A key owing no more than one request of cost 1 owes nothing here: that
// much every new key gets, so forgetting it never lets a key do more than
// the new keys it takes to evict it, and a flood of keys admitted once
// each leaves the summary empty (no new key then starts owing anything).
uint32_t owed_frac_of(const rl_rule_t &rule, const State &s, const rl_decision_t &d, int64_t now)
{
    const Algorithm &a = algorithm_of(rule);
    return a.owed != nullptr ? a.owed(rule, s, d, now) : 0;
}

// A count in a window owes the units it counts.
uint32_t window_owed(const rl_rule_t &rule, const State &, const rl_decision_t &d, int64_t)
{
    const uint64_t units = rule.limit - (d.remaining < rule.limit ? d.remaining : rule.limit);
    return units <= 1 ? 0 : fraction(units, rule.limit);
}

State restore(const rl_rule_t &rule, Owed o, int64_t now)
{
    const Algorithm &a = algorithm_of(rule);
    if (o.until <= now || o.frac == 0 || a.restore == nullptr) {
        return State{rl_state_t{0, 0}, nullptr};
    }
    return a.restore(rule, o, now);
}

// The units until `until`, but never past the end of the window opened
// now (a cell may carry a longer rule's `until`).
State restore_window(const rl_rule_t &rule, Owed o, int64_t, int64_t end, bool aligned)
{
    State s{rl_state_t{0, 0}, nullptr};
    const uint64_t units = part_of(o.frac, rule.limit);
    if (units == 0 || (aligned && o.until < end)) {
        return s;  // whatever it stands for was counted in an earlier window
    }
    s.head = rl_state_t{o.until < end ? o.until : end, (uint32_t) units};
    return s;
}

void restore_block(const rl_rule_t &rule, State &s, int64_t now)
{
    void (*write)(const rl_rule_t &, State &, int64_t) = algorithm_of(rule).restore_block;
    if (write != nullptr) {
        write(rule, s, now);
    }
}

}  // namespace rl
