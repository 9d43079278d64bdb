// The eviction summary: a key evicted from a full table comes back no
// better off than it left, for every algorithm; exactly as it left when its
// cells hold only its own debt; a colliding newcomer starts only as far
// down as the keys it collides with; and a flood of live keys neither frees
// a spent key nor refuses fresh ones.
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "algorithms/transition.h"
#include "helpers.h"
#include "table/table.h"

namespace {

const uint8_t kSecret[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6};

// A zone: one table, with the block sizes its rules need.
struct Zone : TestZone {
    Zone(size_t n, const std::vector<rl_rule_t> &rules) : TestZone(n, rules, kSecret) {}
};

struct Result {
    bool allowed;
    rl_decision_t d;
};

Result hit(Zone &z, const rl_rule_t &rule, const std::string &key, int64_t now, uint64_t cost = 1)
{
    rl_check_t c = check_of(z.mem, &rule, identity_of(rule), key, cost);
    const bool allowed = decide(&c, 1, RL_COMBINE_ALL, now);
    return Result{allowed, c.decision};
}

uint64_t tag_of(Zone &z, const rl_rule_t &rule, const std::string &key)
{
    return z.table()->tag(identity_of(rule), key.data(), key.size());
}

// The smallest zone that fits the rule, as nginx would make it (32k), or
// the size nginx -t names for a sliding_log.
size_t smallest_zone(const rl_rule_t &rule)
{
    for (size_t size = 32 * 1024;; size += 1024) {
        const uint32_t blob = rl_rule_block_size(&rule);
        char err[RL_ERR_MAX];
        if (rl_table_plan(size, &blob, blob ? 1 : 0, err, sizeof(err)) == RL_OK) {
            return size;
        }
    }
}

const char *const kRules[] = {
    "algorithm=gcra limit=5 period=1h",
    "algorithm=token_bucket limit=5 period=1h burst=5",
    "algorithm=fixed_window limit=5 period=1h",
    "algorithm=fixed_window limit=5 period=1h align=first",
    "algorithm=sliding_window limit=5 period=1h buckets=10",
    "algorithm=sliding_log limit=5 period=1h",
    "algorithm=leaky_bucket limit=5 period=1h max_delay=1h",
    "algorithm=quota limit=5 reset=daily",
};

class Summary : public ::testing::TestWithParam<const char *> {};

// A spent key (until refused) and a partly spent one are evicted alone:
// from then on every decision for them is the one they would have had.
TEST_P(Summary, EvictedKeyComesBackExactlyAsItLeft)
{
    const rl_rule_t rule = rule_of(GetParam());
    for (int spent_all : {1, 0}) {
        Zone a(256 * 1024, {rule});
        const int64_t t0 = kT0 + 1234567;  // inside every window
        int admitted = 0;
        for (int i = 0; i < 100 && hit(a, rule, "victim", t0).allowed; i++) {
            admitted++;
            if (!spent_all && admitted == 2) {
                break;
            }
        }
        Zone b(a);  // the twin that keeps the key
        a.table()->evict(tag_of(a, rule, "victim"), t0 + 100);
        rl::State s;
        ASSERT_FALSE(a.table()->find(tag_of(a, rule, "victim"), &s));
        EXPECT_EQ(a.stats().live_evictions, 1u);

        // probe both at instants over the next two periods, on copies
        const int64_t span = 2 * rule.period_ms;
        for (int64_t dt = 100; dt < span; dt += span / 997 + 1) {
            Zone pa(a), pb(b);
            const Result ra = hit(pa, rule, "victim", t0 + dt), rb = hit(pb, rule, "victim", t0 + dt);
            ASSERT_EQ(ra.allowed, rb.allowed) << "at +" << dt << " ms, spent_all " << spent_all;
            ASSERT_EQ(ra.d.remaining, rb.d.remaining) << "at +" << dt << " ms";
            ASSERT_EQ(ra.d.retry_after_ms, rb.d.retry_after_ms) << "at +" << dt << " ms";
            ASSERT_EQ(ra.d.delay_ms, rb.d.delay_ms) << "at +" << dt << " ms";
        }
        // and at the exact instant the twin admits again, not one ms later
        if (spent_all) {
            const Result rb = hit(b, rule, "victim", t0 + 200);
            ASSERT_FALSE(rb.allowed);
            const int64_t at = t0 + 200 + rb.d.retry_after_ms;
            Zone p1(a), p2(a);
            EXPECT_FALSE(hit(p1, rule, "victim", at - 1).allowed);
            EXPECT_TRUE(hit(p2, rule, "victim", at).allowed);
        }
    }
}

// Keys evicted at random while requests go on: whatever the summary
// restores, no key is ever admitted beyond its rule's window bounds.  Only
// keys whose debt the summary takes are evicted here: not a key owing one
// request or less (what any new key gets), nor one whose debt came from the
// summary (see owed_frac and Table::remember).
TEST_P(Summary, NeverBetterOffUnderRandomEvictions)
{
    const rl_rule_t rule = rule_of(GetParam());
    Zone z(smallest_zone(rule), {rule});
    std::mt19937_64 rng(42);
    const int keys = 50;
    std::vector<std::vector<std::pair<int64_t, uint64_t>>> admitted(keys);
    int64_t now = kT0 + 1000;
    const int64_t window = rule.algorithm == RL_QUOTA ? 86400000 : rule.period_ms;
    const bool bucket = rule.algorithm == RL_GCRA || rule.algorithm == RL_TOKEN_BUCKET;
    uint64_t restored_refusals = 0;

    for (int op = 0; op < 20000; op++) {
        now += (int64_t) (rng() % (uint64_t) (window / 50));
        const int k = (int) (rng() % keys);
        const std::string key = "k" + std::to_string(k);
        if (rng() % 4 == 0) {
            rl::State st;
            rl::Table::Ref ref{};
            const uint64_t tag = tag_of(z, rule, key);
            const rl::Debt debt = z.table()->find(tag, &st, &ref) ? rl::Table::debt(ref) : rl::Debt{0, false};
            if (debt.frac > 0 && !debt.inherited && st.head.t > now) {
                z.table()->evict(tag, now);
            }
            continue;
        }
        const uint64_t cost = 1 + rng() % 2;
        const Result r = hit(z, rule, key, now, cost);
        std::string why;
        ASSERT_TRUE(z.table()->check(&why)) << why;
        if (!r.allowed) {
            continue;
        }
        auto &log = admitted[(size_t) k];
        log.emplace_back(now + r.d.delay_ms, cost);
        // the bound of every run of admissions ending now
        uint64_t units = 0;
        for (size_t j = log.size(); j-- > 0;) {
            units += log[j].second;
            const int64_t span = log.back().first - log[j].first;
            if (bucket) {
                ASSERT_LE(units * (uint64_t) rule.period_ms,
                          (uint64_t) span * rule.limit + (uint64_t) rule.burst * rule.period_ms);
            } else if (rule.algorithm == RL_LEAKY_BUCKET) {
                // released at least T apart, each one's own cost
                ASSERT_LE((units - log.back().second) * (uint64_t) rule.period_ms, (uint64_t) span * rule.limit);
            } else if (rule.algorithm == RL_SLIDING_LOG && span < window) {
                ASSERT_LE(units, rule.limit);
            } else if (span < window) {
                ASSERT_LE(units, 2u * rule.limit);
            }
        }
        if (log.size() > 300) {
            log.erase(log.begin(), log.begin() + 100);
        }
    }
    restored_refusals = z.stats().summary_refusals;
    EXPECT_GT(z.stats().live_evictions, 500u);
    if (rule.algorithm != RL_LEAKY_BUCKET) {  // which delays, mostly
        EXPECT_GT(restored_refusals, 0u);     // the summary did refuse evicted keys
    }
}

// 100 times the zone's capacity in distinct live keys, each admitted once,
// after a key spent its limit: the spent key is refused until the very
// instant its twin (never evicted) is admitted again, and fresh keys are
// not refused on their first request.
TEST_P(Summary, FloodOfLiveKeysNeitherFreesASpentKeyNorRefusesFreshOnes)
{
    const rl_rule_t rule = rule_of(GetParam());
    Zone a(smallest_zone(rule), {rule});
    const int64_t t0 = kT0 + 1234567;
    while (hit(a, rule, "victim", t0).allowed) {
    }
    Zone b(a);
    const uint64_t flood = 100 * a.stats().capacity;
    for (uint64_t i = 0; i < flood; i++) {
        // spread over a minute: each flood key is live for most of an hour
        const Result r = hit(a, rule, "flood" + std::to_string(i), t0 + 1 + (int64_t) (i * 60000 / flood));
        ASSERT_TRUE(r.allowed) << "flood key " << i << " of " << flood << ", remaining " << r.d.remaining << " retry "
                               << r.d.retry_after_ms << " evictions " << a.stats().evictions << " live "
                               << a.stats().live_evictions;
    }
    EXPECT_GE(a.stats().evictions, flood - a.stats().capacity);
    const int64_t after = t0 + 60001;
    uint64_t fresh_refused = 0;
    for (int i = 0; i < 10000; i++) {
        Zone p(a);
        fresh_refused += !hit(p, rule, "fresh" + std::to_string(i), after).allowed;
    }
    EXPECT_LE(fresh_refused, 100u) << "fresh keys refused on their first request";
    const Result rb = hit(b, rule, "victim", after);
    ASSERT_FALSE(rb.allowed);
    const int64_t at = after + rb.d.retry_after_ms;
    for (int64_t t = after; t < at; t += (at - after) / 50 + 1) {
        Zone p(a);
        ASSERT_FALSE(hit(p, rule, "victim", t).allowed) << "admitted " << at - t << " ms early";
    }
    Zone p1(a), p2(a);
    EXPECT_FALSE(hit(p1, rule, "victim", at - 1).allowed);
    EXPECT_TRUE(hit(p2, rule, "victim", at).allowed) << "not admitted when its twin is";
}

// What a commit writes for the summary is decided inline for most keys
// (rl::owed_frac): it is owed_frac_of's fraction for every state a key
// reaches, admitted or looked at, in debt after a charge or not, whatever
// the burst (a burst of 1 too).
TEST_P(Summary, TheInlineFractionIsTheFullOnes)
{
    for (const std::string extra : {"", " burst=1", " burst=3"}) {
        const bool bucket = std::string(GetParam()).find("gcra") != std::string::npos ||
                            std::string(GetParam()).find("token_bucket") != std::string::npos;
        if (!bucket && !extra.empty()) {
            continue;
        }
        std::string text = GetParam();
        if (!extra.empty() && text.find(" burst=") != std::string::npos) {
            text.erase(text.find(" burst="));  // the last parameter
        }
        // charge= (a shaper has none): the key may owe beyond its budget
        const bool charges = text.find("leaky_bucket") == std::string::npos;
        const rl_rule_t rule = rule_of(text + extra + (charges ? " charge=$c" : ""));
        std::vector<uint8_t> state(rl_state_size(&rule), 0);
        rl::State s{};
        s.blob = rl_rule_block_size(&rule) ? state.data() + sizeof(rl_state_t) : nullptr;
        std::mt19937_64 rng(7);
        int64_t now = kT0 + 1234567;
        uint64_t compared = 0, owing = 0;
        for (int i = 0; i < 20000; i++) {
            now += (int64_t) (rng() % (uint64_t) (rule.period_ms / 5 + 1));
            const uint64_t cost = rng() % 4;
            if (rng() % 8 == 0 && charges) {
                bool capped;
                rl::charge(rule, s, now, 1 + rng() % 8, &capped);  // in debt, maybe
            }
            const rl_decision_t d = rl::transition(rule, s, now, cost, true);
            if (!d.allowed && cost > 0) {
                continue;
            }
            const uint32_t full = rl::owed_frac_of(rule, s, d, now);
            ASSERT_EQ(rl::owed_frac(rule, s, d, now), full) << "step " << i << " cost " << cost;
            compared++;
            owing += full > 0;
        }
        EXPECT_GT(compared, 5000u);
        EXPECT_GT(owing, 100u) << "the states compared include keys that owe";
    }
}

INSTANTIATE_TEST_SUITE_P(EveryAlgorithm, Summary, ::testing::ValuesIn(kRules), RuleName());

// A key that spent 2 of 4 units makes a newcomer sharing all its cells
// start 2 units down: not refused.  One that spent 1 leaves nothing.
TEST(SummaryCells, CollidingNewcomerStartsAsFarDownAsTheKeyItCollidesWith)
{
    for (const char *text : {"limit=4 period=1h", "algorithm=fixed_window limit=4 period=1h"}) {
        const rl_rule_t rule = rule_of(text);
        Zone z(32 * 1024, {rule});
        rl::Table *t = z.table();
        const int64_t t0 = kT0 + 1000;
        ASSERT_TRUE(hit(z, rule, "light", t0).allowed);
        t->evict(tag_of(z, rule, "light"), t0);
        EXPECT_EQ(t->owed(tag_of(z, rule, "light"), t0 + 1).frac, 0u) << "one request is forgotten";
        ASSERT_TRUE(hit(z, rule, "spender", t0).allowed);
        ASSERT_TRUE(hit(z, rule, "spender", t0).allowed);
        const uint64_t spender = tag_of(z, rule, "spender");
        t->evict(spender, t0 + 1);
        // a key whose cells are the spender's
        std::string other;
        for (int i = 0; other.empty(); i++) {
            const std::string k = "n" + std::to_string(i);
            const uint64_t tag = tag_of(z, rule, k);
            if (rl::Owed o = t->owed(tag, t0 + 2); o.frac > 0) {
                other = k;
            }
        }
        const Result r = hit(z, rule, other, t0 + 2);
        EXPECT_TRUE(r.allowed) << text;
        EXPECT_EQ(r.d.remaining, 1u) << text << ": two units down, then this request";
        EXPECT_EQ(z.stats().summary_refusals, 0u);
    }
}

TEST(SummaryCells, NothingOwedOnceEveryDebtHasExpired)
{
    const rl_rule_t rule = rule_of("limit=2 period=2m");
    Zone z(32 * 1024, {rule});
    ASSERT_TRUE(hit(z, rule, "k", kT0).allowed);
    ASSERT_TRUE(hit(z, rule, "k", kT0).allowed);
    z.table()->evict(tag_of(z, rule, "k"), kT0 + 1);
    EXPECT_FALSE(hit(z, rule, "k", kT0 + 59999).allowed);
    EXPECT_EQ(z.stats().summary_refusals, 1u);
    EXPECT_TRUE(hit(z, rule, "k", kT0 + 60000).allowed);
    const rl::Owed o = z.table()->owed(tag_of(z, rule, "other"), kT0 + 60000);
    EXPECT_EQ(o.frac, 0u);
}

}  // namespace
