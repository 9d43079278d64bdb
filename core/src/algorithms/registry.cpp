// The table of the algorithms' records, by enum rl_algorithm, and what the
// concerns reach through it: a charge, a refund.  The records' shared
// parts (a period's name, policy and bounds) are here too.
#include <cstdio>
#include <cstring>

#include "algorithms/algorithm.h"
#include "util/error.h"

namespace rl {

extern const Algorithm kGcra, kTokenBucket, kFixedWindow, kSlidingWindow, kSlidingLog, kLeakyBucket, kQuota,
    kConcurrency, kAdaptive;

const Algorithm *const kAlgorithms[RL_ALGORITHM_COUNT] = {
    &kGcra,         // RL_GCRA
    &kTokenBucket,  // RL_TOKEN_BUCKET
    &kFixedWindow,  // RL_FIXED_WINDOW
    &kSlidingWindow, &kSlidingLog, &kLeakyBucket, &kQuota, &kConcurrency, &kAdaptive,
};
static_assert(RL_GCRA == 0 && RL_TOKEN_BUCKET == 1 && RL_FIXED_WINDOW == 2 && RL_SLIDING_WINDOW == 3 &&
                  RL_SLIDING_LOG == 4 && RL_LEAKY_BUCKET == 5 && RL_QUOTA == 6 && RL_CONCURRENCY == 7 &&
                  RL_ADAPTIVE == 8 && RL_ALGORITHM_COUNT == 9,
              "kAlgorithms is in the order of enum rl_algorithm");

uint64_t charge(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped)
{
    *capped = false;
    const Algorithm &a = algorithm_of(rule);
    return units == 0 || a.charge == nullptr ? 0 : a.charge(rule, s, now, units, capped);
}

void refund(const rl_rule_t &rule, State &s, uint64_t cost, rl_state_t after, int64_t at, int64_t now)
{
    const Algorithm &a = algorithm_of(rule);
    if (a.refund != nullptr) {
        a.refund(rule, s, cost, after, at, now);
    }
}

uint64_t own_bit(const char *name)
{
    // in the records' order, each name once (a row two records share has
    // one bit)
    unsigned bit = kOwnFirst;
    for (uint32_t a = 0; a < RL_ALGORITHM_COUNT; a++) {
        const Algorithm &r = algorithm_of(a);
        for (size_t i = 0; i < r.nown; i++) {
            if (std::strcmp(r.own[i].name, name) == 0) {
                return 1ull << bit;
            }
            bool before = false;
            for (uint32_t b = 0; b < a && !before; b++) {
                const Algorithm &o = algorithm_of(b);
                for (size_t j = 0; j < o.nown && !before; j++) {
                    before = std::strcmp(o.own[j].name, r.own[i].name) == 0;
                }
            }
            bit += before ? 0 : 1;
        }
    }
    return 0;
}

int64_t own_value(const rl_rule_t &rule, const char *name)
{
    const Algorithm &a = algorithm_of(rule);
    for (size_t i = 0; i < a.nown; i++) {
        const OwnParam &p = a.own[i];
        if (std::strcmp(p.name, name) != 0) {
            continue;
        }
        const unsigned char *field = reinterpret_cast<const unsigned char *>(rule.own) + p.offset;
        int64_t ms;
        uint32_t n;
        int32_t parsed;
        switch (p.kind) {
        case OwnParam::kTime:
            std::memcpy(&ms, field, sizeof(ms));
            return ms;
        case OwnParam::kNumber:
            std::memcpy(&n, field, sizeof(n));
            return n;
        case OwnParam::kWord:
            return *field;
        default:
            std::memcpy(&parsed, field, sizeof(parsed));
            return parsed;
        }
    }
    return 0;
}

void spec_of(const rl_rule_t &rule, int64_t (&fields)[kSpecOwn])
{
    // a sliding window's default buckets, a shaper's default max_delay
    fields[kSpecAlign] = fields[kSpecReset] = fields[kSpecUtcOffset] = fields[kSpecDelay] = fields[kSpecLease] = 0;
    fields[kSpecBuckets] = 10;
    fields[kSpecMaxDelay] = rule.period_ms;
    const Algorithm &a = algorithm_of(rule);
    if (a.spec != nullptr) {
        a.spec(rule, fields);
    }
}

void period_tail(const rl_rule_t &rule, char *out, size_t len)
{
    static const struct {
        int64_t ms;
        const char *unit;
    } units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}};
    for (const auto &u : units) {
        if (rule.period_ms % u.ms == 0) {
            std::snprintf(out, len, "%lld%s", (long long) (rule.period_ms / u.ms), u.unit);
            return;
        }
    }
}

// limit units, over the window the decision names
void limit_policy(rl_rule_t &rule)
{
    rule.policy_quota = rule.limit;
    rule.policy_window_ms = -1;
}

// the window, or two with a debt
void period_bounds(const rl_rule_t &rule, bool debt, Bounds &b)
{
    const uint64_t T = rule.period_ms > 0 ? (uint64_t) rule.period_ms : 1;
    b.longest = (unsigned __int128) T * (debt ? 2 : 1);
    b.window_min = b.window_max = (int64_t) T;
}

size_t no_block(const rl_rule_t &)
{
    return 0;
}

int limit_known(const rl_rule_t &rule, const char *keeps, uint32_t example, uint32_t most, char *err, size_t errlen)
{
    if (rule.limit_var && !(rule.given & P_LIMIT_MAX)) {
        return fail(err, errlen,
                    "missing \"limit_max=\" for algorithm=%s with limit=$variable: its state keeps %s, sized by the "
                    "largest limit, e.g. limit_max=%u (at most %u)",
                    algorithm_of(rule).name, keeps, example, most);
    }
    return RL_OK;
}

int limit_at_most(const rl_rule_t &rule, uint32_t most, const char *before, const char *after, char *err, size_t errlen)
{
    if (largest_limit(rule) > most) {
        return fail(err, errlen, "\"%s=%u\" is too large for algorithm=%s: %s%u%s",
                    rule.limit_var ? "limit_max" : "limit", largest_limit(rule), algorithm_of(rule).name, before, most,
                    after);
    }
    return RL_OK;
}

}  // namespace rl
