// gcra and token_bucket (the transition is gcra.h's, inline): what they
// are beside it, in their records.  A bucket of burst tokens refilled at
// limit per period, one instant a key (exact_time.h); a charge moves the
// instant later, up to a limit's time beyond an empty bucket (paced.cpp).
#include "algorithms/gcra.h"
#include "algorithms/algorithm.h"
#include "algorithms/exact_time.h"
#include "util/out.h"

namespace rl {

namespace {

// The policy: burst, restored at limit per period.
void bucket_policy(rl_rule_t &rule)
{
    rule.policy_quota = rule.burst;
    rule.policy_window_ms = paced_window(rule);
}

// Its script computes in units of 1/limit ms: a count's worth of periods.
unsigned __int128 bucket_units(const rl_rule_t &rule, uint64_t count)
{
    return (unsigned __int128) count * (uint64_t) rule.period_ms;
}

// A full bucket's wait: burst x period units of 1/limit ms, and a limit's
// more with a debt (a variable limit or burst may have been up to
// limit_max when the key's state was written).
void bucket_bounds(const rl_rule_t &rule, bool debt, Bounds &b)
{
    const bool var = rule.limit_var || rule.burst_var;
    const uint64_t T = rule.period_ms > 0 ? (uint64_t) rule.period_ms : 1;
    const uint64_t limit = rule.limit > 0 ? rule.limit : 1;
    const uint64_t count = (var ? rule.limit_max : rule.burst) + (debt ? (var ? rule.limit_max : rule.limit) : 0);
    b.longest = ((unsigned __int128) count * T + limit - 1) / limit;
    b.window_min = b.window_max = (int64_t) T;
}

void bucket_fields(Out &o, const rl_rule_t &rule)
{
    o.field("period_ms", (uint64_t) rule.period_ms);
    o.field("burst", rule.burst);
}

rl_decision_t gcra_transition(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    return gcra(rule, s, now, cost, apply);
}

// gcra's record, under either name
constexpr Algorithm bucket(const char *name)
{
    return Algorithm{name,
                     kPaced | kBucket,
                     0,
                     nullptr,
                     period_tail,
                     paced_block_size,
                     bucket_policy,
                     nullptr,
                     nullptr,
                     gcra_transition,
                     nullptr,
                     paced_charge,
                     nullptr,
                     paced_refund,
                     paced_owed,
                     paced_restore,
                     paced_restore_block,
                     nullptr,
                     bucket_units,
                     bucket_bounds,
                     "keeps a time, not a count",
                     bucket_fields,
                     P_LIMIT | P_BURST | P_PERIOD,
                     paced_carry,
                     nullptr,
                     nullptr,
                     nullptr,
                     nullptr,
                     nullptr};
}

}  // namespace

extern const Algorithm kGcra = bucket("gcra");
// token_bucket is gcra's transition (gcra.h says why), under its own name
extern const Algorithm kTokenBucket = bucket("token_bucket");

}  // namespace rl
