// Exact arithmetic for the algorithms that keep one instant per key (gcra,
// token_bucket, leaky_bucket): the instant is t - n/limit ms with 0 <= n <
// limit, so that t is the first whole ms at or after it, the instant from
// which the key is certainly back to full budget (what the table and the
// eviction summary read).  In the unit u = 1/limit ms the emission interval
// period/limit is exactly period_ms units, so pacing never drifts: 7 per
// minute is 60000/7 ms each, with no rounding (nginx's limit_req stores 1r/m
// as 62.5 s).
#pragma once

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
    if (ms >= kUnitsMax / limit) {
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

}  // namespace rl
