// GCRA, the generic cell rate algorithm (seed 003; seed 004's default).
//
// Emission interval T = period/limit, tolerance tau = T * burst.  The state
// is the theoretical arrival time TAT: the instant the key is back to full
// budget.  A request of cost q is admitted iff max(TAT, now) + q*T - tau <=
// now (allow on equality); then TAT = max(TAT, now) + q*T.  A cold key
// admits exactly burst requests at once.  In units of 1/limit ms (see
// exact_time.h) T = period_ms and tau = burst * period_ms exactly.
#include "algorithms.h"
#include "exact_time.h"

namespace rl {

Step gcra(const rl_rule_t &rule, rl_state_t s, int64_t now, uint64_t cost)
{
    const uint64_t T = (uint64_t) rule.period_ms;
    const uint64_t tau = (uint64_t) rule.burst * T;
    const uint64_t ahead = units_ahead(s, now, rule.limit);   // TAT - now
    const uint64_t room = ahead < tau ? tau - ahead : 0;

    if (cost > rule.burst) {
        return never(s, room / T, ceil_div(ahead, rule.limit));
    }

    const uint64_t need = ahead + cost * T;   // TAT - now after admitting
    Step r{};

    if (need <= tau || cost == 0) {   // looking (cost 0) is always allowed
        r.decision.allowed = 1;
        r.decision.remaining = (need <= tau ? tau - need : 0) / T;
        r.decision.reset_ms = ceil_div(need, rule.limit);
        r.next = instant_after(now, need, rule.limit);
        r.commit = cost > 0;
    } else {
        r.decision.remaining = room / T;
        r.decision.reset_ms = ceil_div(ahead, rule.limit);
        r.decision.retry_after_ms = ceil_div(need - tau, rule.limit);
        r.next = s;
    }
    return r;
}

}  // namespace rl
