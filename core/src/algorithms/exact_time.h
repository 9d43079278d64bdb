// Exact arithmetic for the algorithms that keep one instant per key (gcra,
// token_bucket, leaky_bucket): the instant is t - n/limit ms with 0 <= n <
// limit, so that t is the first whole ms at or after it, the instant from
// which the key is certainly back to full budget (what the table and the
// eviction summary read).  In the unit u = 1/limit ms the emission interval
// period/limit is exactly period_ms units, so pacing never drifts: 7 per
// minute is 60000/7 ms each, with no rounding (nginx's limit_req stores 1r/m
// as 62.5 s).
//
// A rule whose limit is a variable (limit=$var) may see a key under another
// limit than the one its instant was written in.  The key keeps the units
// it owes: in units of 1/limit ms, what a key owes is U x period for U
// units, whatever the limit, so the number of units from now to the instant
// read under the old limit is the number to write under the new one.  Such a
// rule keeps each key's limit and fraction in a block (PacedBlock; the
// table's slot then holds the block's handle instead of n).
#pragma once

#include <cstring>

#include "algorithms/algorithms.h"
#include "ratelimit.h"

namespace rl {

// Saturation point of units_ahead: leaves room to add a cost (< 2^61 units,
// see rl_rule_finish) without overflow.
constexpr uint64_t kUnitsMax = 1ull << 62;

// Units from now until the stored instant, 0 if it has passed.  The instant
// stays absolute: after the clock steps back by J a key that was spent waits
// J longer, and is never admitted sooner (jump-safe).
inline uint64_t units_ahead(rl_state_t s, int64_t now, uint32_t limit)
{
    if (s.t <= now) {
        return 0;  // t - n/limit <= now: the instant has passed
    }
    uint64_t ms = (uint64_t) (s.t - now);
    // ms >= kUnitsMax / limit, without a division on every request: the
    // one multiple of limit in (kUnitsMax - limit, kUnitsMax] is
    // kUnitsMax / limit * limit
    if ((unsigned __int128) ms * limit > kUnitsMax - limit) {
        return kUnitsMax;
    }
    // n < limit, unless the rule's limit changed under a kept name, or a
    // process died writing the head
    return ms * limit - (s.n < limit ? s.n : limit - 1);
}

// The instant u units after now.
inline rl_state_t instant_after(int64_t now, uint64_t u, uint32_t limit)
{
    const uint64_t ms = (u + limit - 1) / limit;
    return rl_state_t{now + (int64_t) ms, (uint32_t) (ms * limit - u)};
}

// The block of a paced key under a variable limit.
struct PacedBlock {
    uint32_t n;      // the instant is head.t - n/limit
    uint32_t limit;  // it was written in; 0: none yet (n is 0 then)
};

// Units (of 1/limit ms, any limit) from now until a paced key's instant.
inline uint64_t paced_ahead(const rl_rule_t &rule, const State &s, int64_t now)
{
    if (s.blob == nullptr) {
        return units_ahead(s.head, now, rule.limit);
    }
    PacedBlock b;
    std::memcpy(&b, s.blob, sizeof(b));
    if (b.limit == 0) {
        return units_ahead(rl_state_t{s.head.t, 0}, now, rule.limit);
    }
    return units_ahead(rl_state_t{s.head.t, b.n}, now, b.limit);
}

// Writes a paced key's instant, u units after now, in the rule's limit.
inline void paced_store(const rl_rule_t &rule, State &s, int64_t now, uint64_t u)
{
    s.head = instant_after(now, u, rule.limit);
    if (s.blob != nullptr) {
        const PacedBlock b{s.head.n, rule.limit};
        std::memcpy(s.blob, &b, sizeof(b));
    }
}

// What the paced algorithms share, as their records use it (paced.cpp):
// the block of a key under a variable limit; a charge, a refund; what a
// key owes the eviction summary, and the state it is restored to; the
// time the policy's quota takes to come back.
size_t paced_block_size(const rl_rule_t &rule);
uint64_t paced_charge(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped);
void paced_refund(const rl_rule_t &rule, State &s, uint64_t cost, rl_state_t after, int64_t at, int64_t now);
uint32_t paced_owed(const rl_rule_t &rule, const State &s, const rl_decision_t &d, int64_t now);
State paced_restore(const rl_rule_t &rule, Owed o, int64_t now);
void paced_restore_block(const rl_rule_t &rule, State &s, int64_t now);
int64_t paced_window(const rl_rule_t &rule);
void paced_carry(const rl_rule_t &from, const rl_rule_t &to, State &s, int64_t at);

}  // namespace rl
