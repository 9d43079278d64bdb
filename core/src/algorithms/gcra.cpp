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
    return Algorithm{
        .name = name,
        .traits = kPaced | kBucket,
        .name_tail = period_tail,
        .block_size = paced_block_size,
        .policy = bucket_policy,
        .transition = gcra_transition,
        .charge = paced_charge,
        .refund = paced_refund,
        .owed = paced_owed,
        .restore = paced_restore,
        .restore_block = paced_restore_block,
        .redis_units = bucket_units,
        .bounds = bucket_bounds,
        .no_sync = "keeps a time, not a count",
        .api_fields = bucket_fields,
        .overridable = P_LIMIT | P_BURST | P_PERIOD,
        .carry = paced_carry,
    };
}

}  // namespace

extern const Algorithm kGcra = bucket("gcra");
// token_bucket is gcra's transition (gcra.h says why), under its own name
extern const Algorithm kTokenBucket = bucket("token_bucket");

}  // namespace rl
