// Per-request limits (limit=$var, burst=$var): the parameters, what a bad
// value becomes, and a key keeping the units it spent across a change of
// limit, through the transitions, the table (blocks, refunds, eviction)
// and the cost of a variable.
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "helpers.h"
#include "table/table.h"

namespace {

std::string finish_error(const std::string &text)
{
    rl_rule_t r;
    rl_rule_init(&r, name_room());
    char err[RL_ERR_MAX] = "";
    std::istringstream in(text);
    std::string p;
    while (in >> p) {
        if (rl_rule_param(&r, p.data(), p.size(), err, sizeof(err)) == RL_ERROR) {
            return err;
        }
    }
    return rl_rule_finish(&r, err, sizeof(err)) == RL_OK ? "" : err;
}

rl_rule_t applied(const rl_rule_t &rule, const std::string &limit, const std::string &burst = "", int *rc = nullptr,
                  std::string *msg = nullptr)
{
    rl_rule_t out;
    char err[RL_ERR_MAX];
    const int r = rl_rule_apply(&rule, limit.data(), limit.size(), burst.data(), burst.size(), &out, err, sizeof(err));
    if (rc) {
        *rc = r;
    }
    if (msg) {
        *msg = err;
    }
    return out;
}

}  // namespace

TEST(Plans, Parameters)
{
    rl_rule_t r = var_rule_of("limit=$plan limit_default=100 period=1h");
    EXPECT_EQ(r.limit_var, 1u);
    EXPECT_EQ(r.limit, 100u);
    EXPECT_EQ(r.burst, 100u);
    EXPECT_EQ(r.limit_max, RL_LIMIT_MAX);
    EXPECT_STREQ(r.name, "gcra_var_1h");
    EXPECT_STREQ(var_rule_of("limit=10 burst=$b period=1m").name, "gcra_10_1m_bvar");
    EXPECT_EQ(var_rule_of("algorithm=sliding_log limit=$p limit_default=5 limit_max=50").limit_max, 50u);

    EXPECT_EQ(finish_error("limit=$plan period=1h"),
              "missing \"limit_default=\" for limit=$variable: the limit a request gets when the variable's value "
              "is not a valid limit, e.g. limit_default=100");
    EXPECT_EQ(finish_error("limit=5 limit_default=3"), "\"limit_default=\" applies to limit=$variable only");
    EXPECT_EQ(finish_error("limit=5 limit_max=30"),
              "\"limit_max=\" applies to limit=$variable or burst=$variable only");
    EXPECT_EQ(finish_error("algorithm=sliding_log limit=$p limit_default=5"),
              "missing \"limit_max=\" for algorithm=sliding_log with limit=$variable: its state keeps one time a "
              "unit, sized by the largest limit, e.g. limit_max=1000 (at most 10000)");
    EXPECT_EQ(finish_error("algorithm=sliding_log limit=$p limit_default=5 limit_max=20000"),
              "\"limit_max=20000\" is too large for algorithm=sliding_log: it keeps one time a unit, at most 10000; "
              "use sliding_window for larger limits");
    EXPECT_EQ(finish_error("limit=$p limit_default=50 limit_max=10"), "\"limit_default=50\" exceeds limit_max=10");
    EXPECT_EQ(finish_error("algorithm=fixed_window limit=5 burst=$b"),
              "\"burst=\" does not apply to algorithm=fixed_window: burst is for gcra and token_bucket");
    EXPECT_EQ(finish_error("limit=$p limit_default=0"),
              "invalid \"limit_default=0\": expected an integer from 1 to 1000000000");

    // the tools know no variables
    rl_rule_t t;
    char err[RL_ERR_MAX];
    EXPECT_EQ(rl_rule_parse(&t, name_room(), "limit=$plan limit_default=3", err, sizeof(err)), RL_ERROR);
    EXPECT_STREQ(err, "invalid \"limit=$plan\": variables are only known inside nginx");
}

TEST(Plans, ApplyTakesValidValuesAndNeverGoesUnlimited)
{
    const rl_rule_t r = var_rule_of("limit=$plan limit_default=100 limit_max=10000 period=1h");
    int rc;
    std::string msg;
    rl_rule_t a = applied(r, "2500", "", &rc, &msg);
    EXPECT_EQ(rc, RL_OK);
    EXPECT_EQ(a.limit, 2500u);
    EXPECT_EQ(a.burst, 2500u) << "a burst not given follows the limit applied";
    EXPECT_STREQ(a.name, r.name);

    EXPECT_EQ(applied(r, "1").limit, 1u);
    EXPECT_EQ(applied(r, "10000").limit, 10000u);
    for (const char *bad : {"", "0", "10001", "-1", "abc", "1e3", " 5", "5 ", "99999999999999999999999", "+5"}) {
        a = applied(r, bad, "", &rc, &msg);
        EXPECT_EQ(rc, RL_DECLINED) << bad;
        EXPECT_EQ(a.limit, 100u) << bad;
        EXPECT_EQ(a.burst, 100u) << bad;
    }
    applied(r, "a\"b\x01" + std::string(100, 'x'), "", &rc, &msg);
    EXPECT_EQ(msg, "limit \"a\\x22b\\x01" + std::string(28, 'x') +
                       "...\" is not an integer from 1 to 10000: limit_default=100 applies");

    const rl_rule_t b = var_rule_of("limit=$plan burst=$burst limit_default=10 limit_max=1000 period=1m");
    a = applied(b, "20", "60", &rc);
    EXPECT_EQ(rc, RL_OK);
    EXPECT_EQ(a.limit, 20u);
    EXPECT_EQ(a.burst, 60u);
    a = applied(b, "20", "lots", &rc, &msg);
    EXPECT_EQ(rc, RL_DECLINED);
    EXPECT_EQ(a.burst, 20u) << "a bad burst is the limit applied";
    EXPECT_EQ(msg, "burst \"lots\" is not an integer from 1 to 1000: the limit applies");
    a = applied(b, "x", "y", &rc, &msg);
    EXPECT_EQ(a.limit, 10u);
    EXPECT_EQ(a.burst, 10u);
    EXPECT_EQ(msg, "limit \"x\" is not an integer from 1 to 1000: limit_default=10 applies; burst \"y\" is not an "
                   "integer from 1 to 1000: the limit applies");

    // a value the period cannot hold (2^61 units) falls back to the defaults
    const rl_rule_t big = var_rule_of("limit=$p limit_default=1000 period=366d");
    a = applied(big, "1000000000", "", &rc, &msg);
    EXPECT_EQ(rc, RL_DECLINED);
    EXPECT_EQ(a.limit, 1000u);
    EXPECT_EQ(msg, "limit 1000000000 and burst 1000000000 are too large for the period (2^61 units): "
                   "limit_default=1000 applies");

    // constant parameters are left alone
    const rl_rule_t k = var_rule_of("limit=7 burst=$b period=1m");
    EXPECT_EQ(applied(k, "999", "9").limit, 7u);
}

// What a rule's requests read and none changes (its block's size, the
// policy its headers advertise) is worked out once per rule, and again for
// the limit and burst a request applies: the policy is the applied rule's.
TEST(Plans, TheAppliedRulesPolicyIsItsOwn)
{
    struct Case {
        const char *rule, *limit, *burst;
        uint64_t quota;
        int64_t window_ms;
    } cases[] = {
        {"limit=$plan limit_default=100 limit_max=10000 period=1h", "2500", "", 2500, 3600000},
        {"limit=$plan limit_default=100 limit_max=10000 period=1h burst=$b", "2500", "50", 50, 72000},
        {"algorithm=leaky_bucket limit=$p limit_default=10 limit_max=1000 period=1s max_delay=2s", "100", "", 201,
         2010},
        {"algorithm=sliding_window limit=$p limit_default=10 limit_max=1000 period=1m", "70", "", 70, 60000},
    };
    for (const Case &c : cases) {
        const rl_rule_t r = var_rule_of(c.rule);
        const rl_rule_t a = applied(r, c.limit, c.burst);
        EXPECT_EQ(rl_rule_block_size(&a), rl_rule_block_size(&r)) << c.rule;
        std::vector<uint8_t> state(rl_state_size(&a), 0);
        rl_decision_t d;
        rl_transition(&a, state.data(), kT0, 1, 1, &d);
        EXPECT_EQ(d.quota, c.quota) << c.rule;
        EXPECT_EQ(d.window_ms, c.window_ms) << c.rule;
        rl_transition(&r, state.data(), kT0, 0, 0, &d);
        EXPECT_NE(d.quota, c.quota) << c.rule << ": the rule's own, with its default";
    }
}

TEST(Plans, CostOfAVariable)
{
    const rl_rule_t r = var_rule_of("limit=10 cost=$c");
    const rl_rule_t z = var_rule_of("limit=10 cost=$c zero_cost=on");
    uint64_t cost;
    char err[RL_ERR_MAX];
    EXPECT_EQ(rl_rule_cost(&r, "3", 1, &cost, err, sizeof(err)), RL_OK);
    EXPECT_EQ(cost, 3u);
    EXPECT_EQ(rl_rule_cost(&r, "0", 1, &cost, err, sizeof(err)), RL_DECLINED);
    EXPECT_EQ(cost, 1u);
    EXPECT_STREQ(err, "cost \"0\" is 0 without zero_cost=on, counted as 1");
    EXPECT_EQ(rl_rule_cost(&z, "0", 1, &cost, err, sizeof(err)), RL_OK);
    EXPECT_EQ(cost, 0u);
    for (const char *bad : {"", "-1", "abc", "99999999999999999999"}) {
        EXPECT_EQ(rl_rule_cost(&z, bad, std::strlen(bad), &cost, err, sizeof(err)), RL_DECLINED) << bad;
        EXPECT_EQ(cost, 1u);
        EXPECT_NE(std::string(err).find("is not a non-negative integer, counted as 1"), std::string::npos) << err;
    }
}

// The same key under changing limits, through the pure transition: the
// state (with its block) is the key's.
struct PlanKey {
    rl_rule_t rule;
    std::vector<uint8_t> state;
    explicit PlanKey(const std::string &text) : rule(var_rule_of(text)), state(rl_state_size(&rule), 0) {}
    rl_decision_t hit(const std::string &limit, int64_t now, uint64_t cost = 1)
    {
        rl_rule_t a = applied(rule, limit);
        rl_decision_t d;
        rl_transition(&a, state.data(), now, cost, 1, &d);
        return d;
    }
};

TEST(Plans, AKeyKeepsTheUnitsItSpent)
{
    for (const char *alg : {"gcra", "token_bucket", "fixed_window", "sliding_window", "sliding_log", "quota"}) {
        SCOPED_TRACE(alg);
        const std::string base = std::string("algorithm=") + alg + " limit=$p limit_default=2 limit_max=100" +
                                 (std::string(alg) == "quota" ? " reset=daily" : " period=1h");
        // up: 3 of 3 spent, then 7 more of 10
        PlanKey up(base);
        for (int i = 0; i < 3; i++) {
            ASSERT_TRUE(up.hit("3", kT0).allowed);
        }
        EXPECT_FALSE(up.hit("3", kT0).allowed);
        rl_decision_t d = up.hit("10", kT0);
        EXPECT_TRUE(d.allowed);
        EXPECT_EQ(d.remaining, 6u);
        for (int i = 0; i < 6; i++) {
            ASSERT_TRUE(up.hit("10", kT0).allowed);
        }
        EXPECT_FALSE(up.hit("10", kT0).allowed);

        // down: 5 of 10 spent are more than 3 allow
        PlanKey down(base);
        for (int i = 0; i < 5; i++) {
            ASSERT_TRUE(down.hit("10", kT0).allowed);
        }
        d = down.hit("3", kT0);
        EXPECT_FALSE(d.allowed);
        EXPECT_EQ(d.remaining, 0u);
    }
}

TEST(Plans, PacedKeysRepayAtTheLimitApplied)
{
    // gcra: 3 an hour spent (1 h owed); at 10 an hour 3 units are 18 min
    PlanKey k("limit=$p limit_default=2 limit_max=100 period=1h");
    for (int i = 0; i < 3; i++) {
        ASSERT_TRUE(k.hit("3", kT0).allowed);
    }
    rl_decision_t d = k.hit("10", kT0, 0);  // a look
    EXPECT_EQ(d.remaining, 7u);
    EXPECT_EQ(d.reset_ms, 3 * 360000);
    // a limit of 7 an hour: 3 units owed are 3 x 60/7 min, exactly (1/7 ms units)
    d = k.hit("7", kT0, 0);
    EXPECT_EQ(d.reset_ms, (3 * 3600000 + 6) / 7);
    // after 6 min at 10 an hour one unit is repaid
    // until its next spending the key repays at the limit it last spent
    // under (the plan may have changed at any time since): 6 min at 3 an
    // hour is 0.3 of a unit
    d = k.hit("10", kT0 + 360000, 0);
    EXPECT_EQ(d.remaining, 7u);
    // then at the new one: 6 min at 10 an hour is one unit
    ASSERT_TRUE(k.hit("10", kT0 + 360000).allowed);
    d = k.hit("10", kT0 + 720000, 0);
    EXPECT_EQ(d.remaining, 7u) << "3.7 owed, one spent, one repaid";

    // leaky_bucket: the queue keeps its units, and drains at the new pace
    PlanKey q("algorithm=leaky_bucket limit=$p limit_default=2 limit_max=100 period=1h max_delay=1h");
    ASSERT_EQ(q.hit("2", kT0).delay_ms, 0);
    ASSERT_EQ(q.hit("2", kT0).delay_ms, 1800000);  // 30 min each at 2 an hour
    EXPECT_EQ(q.hit("4", kT0).delay_ms, 2 * 900000) << "two units queued, at 15 min each";
}

namespace {

struct Zone : TestZone {
    Zone(size_t n, std::vector<uint32_t> blobs) : TestZone(n, BlockSizes{std::move(blobs)}) {}
};

// One request of one rule through rl_decide.
struct Sender {
    Zone &zone;
    rl_rule_t rule;
    rl_rule_t now_applied;
    rl_check_t c{};
    Sender(Zone &z, const rl_rule_t &r) : zone(z), rule(r) {}
    rl_decision_t send(const std::string &key, const std::string &limit, int64_t now, uint64_t cost = 1)
    {
        now_applied = applied(rule, limit);
        c = check_of(zone.mem, &now_applied, identity_of(rule), key, cost);
        decide(&c, 1, RL_COMBINE_ALL, now);
        return c.decision;
    }
};

}  // namespace

TEST(Plans, ThroughTheTableWithBlocks)
{
    const rl_rule_t r = var_rule_of("limit=$p limit_default=2 limit_max=100 period=1h");
    const uint32_t blob = rl_rule_block_size(&r);
    EXPECT_EQ(blob, 8u) << "a paced rule with a variable limit keeps its limit with each key";
    const rl_rule_t burst_only = var_rule_of("limit=5 burst=$b period=1h");
    EXPECT_EQ(rl_rule_block_size(&burst_only), 0u) << "a burst needs none";
    rl_rule_t constant = r;
    constant.limit_var = 0;
    EXPECT_NE(rl_rule_identity(&r, "$k", 2), rl_rule_identity(&constant, "$k", 2))
        << "its keys are not those of the same rule with a constant limit";

    Zone z(256 * 1024, {blob});
    Sender s(z, r);
    for (int i = 0; i < 3; i++) {
        ASSERT_TRUE(s.send("k", "3", kT0).allowed);
    }
    EXPECT_FALSE(s.send("k", "3", kT0).allowed);
    rl_decision_t d = s.send("k", "10", kT0);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 6u);

    // a refund under another limit gives back its units
    d = s.send("k", "20", kT0);
    ASSERT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 15u);
    refund(&s.c, 1, kT0);
    EXPECT_EQ(s.send("k", "20", kT0, 0).remaining, 16u);
}

TEST(Plans, AnEvictedKeyComesBackOwingItsUnits)
{
    const rl_rule_t r = var_rule_of("limit=$p limit_default=2 limit_max=1000 period=1h");
    Zone z(64 * 1024, {rl_rule_block_size(&r)});
    Sender s(z, r);
    for (int i = 0; i < 60; i++) {
        ASSERT_TRUE(s.send("victim", "100", kT0).allowed);
    }
    const uint64_t tag = s.c.tag;
    rl::Table::at(z.mem)->evict(tag, kT0);  // as a full table does
    ASSERT_LT(rl::Table::at(z.mem)->bucket_of(tag), 0);
    // it comes back owing its 60 units (the summary rounds up), at its own limit
    const rl_decision_t d = s.send("victim", "100", kT0);
    EXPECT_TRUE(d.allowed);
    EXPECT_LE(d.remaining, 39u);
    EXPECT_GE(d.remaining, 38u);
    std::string why;
    EXPECT_TRUE(rl::Table::at(z.mem)->check(&why)) << why;
}
