// Checking a request against several rules: all/any combination, atomic
// commit with no partial consumption, the binding rule, shared state.
#include <string>
#include <vector>

#include "helpers.h"

namespace {

struct Zone : TestZone {
    explicit Zone(size_t n = 256 * 1024, std::vector<uint32_t> blobs = {}) : TestZone(n, BlockSizes{std::move(blobs)})
    {
    }
};

uint32_t blob_of(const char *rule)
{
    rl_rule_t r = rule_of(rule);
    return rl_rule_block_size(&r);
}

struct Request {
    std::vector<rl_rule_t> rules;
    std::vector<Zone *> zones;
    std::vector<std::string> keys;
    int combine = RL_COMBINE_ALL;
    std::vector<rl_check_t> c;
    size_t binding = 99;

    void add(Zone &z, const std::string &rule, const std::string &key)
    {
        rules.push_back(rule_of(rule));
        zones.push_back(&z);
        keys.push_back(key);
    }

    bool send(int64_t now, uint64_t cost = 1)
    {
        c.clear();
        for (size_t i = 0; i < rules.size(); i++) {
            c.push_back(check_of(zones[i]->mem, &rules[i], identity_of(rules[i]), keys[i], cost));
        }
        return decide(c.data(), c.size(), combine, now, &binding);
    }
};

}  // namespace

TEST(Check, AllDeniesWithNoPartialConsumption)
{
    Zone z1, z2;
    Request r;
    r.add(z1, "limit=10 period=1m name=wide", "k");
    r.add(z2, "limit=3 period=1m name=narrow", "k");
    for (int i = 0; i < 3; i++) {
        ASSERT_TRUE(r.send(kT0));
    }
    for (int i = 0; i < 50; i++) {
        ASSERT_FALSE(r.send(kT0));
        EXPECT_EQ(r.binding, 1u);
    }
    // the wide rule spent exactly the 3 admitted requests
    Request wide;
    wide.add(z1, "limit=10 period=1m name=wide", "k");
    ASSERT_TRUE(wide.send(kT0));
    EXPECT_EQ(wide.c[0].decision.remaining, 6u);
}

TEST(Check, BindingRuleIsFewestRemainingWhenAllowedLongestWaitWhenDenied)
{
    Zone z;
    Request r;
    r.add(z, "limit=10 period=10s name=a", "k");
    r.add(z, "limit=4 period=1s name=b", "k");
    r.add(z, "limit=5 period=100s name=c", "k");
    ASSERT_TRUE(r.send(kT0));
    EXPECT_EQ(r.binding, 1u);  // b: 3 left, c: 4, a: 9
    for (int i = 0; i < 3; i++)
        r.send(kT0);
    ASSERT_FALSE(r.send(kT0));  // b denies (250 ms), c does not yet
    EXPECT_EQ(r.binding, 1u);
    ASSERT_TRUE(r.send(kT0 + 250));   // c's fifth
    ASSERT_FALSE(r.send(kT0 + 260));  // b and c deny; c waits longest
    EXPECT_EQ(r.binding, 2u);
    EXPECT_EQ(r.c[1].decision.retry_after_ms, 240);    // TAT 1250 + 250 - 1000 - 260
    EXPECT_EQ(r.c[2].decision.retry_after_ms, 19740);  // TAT 100 s + 20 s - 100 s - 0.26 s
}

TEST(Check, AnyAllowsWhenOneAllowsAndOnlyAllowingRulesConsume)
{
    Zone z;
    Request r;
    r.combine = RL_COMBINE_ANY;
    r.add(z, "limit=2 period=1m name=free", "k");
    r.add(z, "limit=1 period=1m name=paid", "k");
    ASSERT_TRUE(r.send(kT0));
    ASSERT_TRUE(r.send(kT0));  // paid is spent; free still allows
    EXPECT_FALSE(r.c[1].decision.allowed);
    EXPECT_TRUE(r.c[0].decision.allowed);
    EXPECT_EQ(r.binding, 0u);
    ASSERT_FALSE(r.send(kT0));
    EXPECT_EQ(r.c[0].decision.remaining, 0u);
    EXPECT_EQ(r.c[1].decision.remaining, 0u);
}

TEST(Check, RulesSharingIdentityAndKeyShareState)
{
    Zone z;
    Request r;
    r.add(z, "limit=5 period=1m name=same", "k");
    r.add(z, "limit=5 period=1m name=same", "k");
    ASSERT_TRUE(r.send(kT0));
    EXPECT_EQ(r.c[1].decision.remaining, 3u);  // both requests' units spent in one state
    ASSERT_TRUE(r.send(kT0));
    ASSERT_FALSE(r.send(kT0));  // 4 spent, the pair needs 2
}

TEST(Check, DistinctKeysAreIndependent)
{
    Zone z;
    Request a, b;
    a.add(z, "limit=1 period=1h", "alice");
    b.add(z, "limit=1 period=1h", "bob");
    EXPECT_TRUE(a.send(kT0));
    EXPECT_FALSE(a.send(kT0));
    EXPECT_TRUE(b.send(kT0));
}

TEST(Check, BlockStatesCommitAtomicallyWithHeadOnlyOnes)
{
    const char *log = "algorithm=sliding_log limit=3 period=1m name=log";
    const char *win = "algorithm=sliding_window limit=5 period=1m name=win";
    Zone z(256 * 1024, {blob_of(log), blob_of(win)});
    Request r;
    r.add(z, log, "k");
    r.add(z, win, "k");
    r.add(z, "limit=4 period=1m name=gcra", "k");
    for (int i = 0; i < 3; i++) {
        ASSERT_TRUE(r.send(kT0 + i));
    }
    for (int i = 0; i < 5; i++) {
        ASSERT_FALSE(r.send(kT0 + 10));  // the log is full
        EXPECT_EQ(r.binding, 0u);
    }
    // the window and gcra spent only the 3 admitted
    EXPECT_EQ(r.c[1].decision.remaining, 1u);
    EXPECT_EQ(r.c[2].decision.remaining, 0u);
    Request w;
    w.add(z, win, "k");
    ASSERT_TRUE(w.send(kT0 + 20));
    EXPECT_EQ(w.c[0].decision.remaining, 1u);  // 5 - 3 - 1
    ASSERT_TRUE(w.send(kT0 + 20));
    ASSERT_FALSE(w.send(kT0 + 20));
}

// A key's block is written as its rule decides, in one step, when the
// request's admission follows from it: with all, the last rule with a
// block once every other rule allowed; with any, whichever rule allows.
// A refused request spends nothing, wherever its rules were decided.
TEST(Check, BlocksWrittenAsDecidedOnlyWhenTheRequestIsAdmitted)
{
    const char *win = "algorithm=sliding_window limit=5 period=1m name=win";
    const char *log = "algorithm=sliding_log limit=2 period=1m name=log";
    Zone z(256 * 1024, {blob_of(win), blob_of(log)});
    auto left = [&](const char *rule, const char *key) {
        Request look;
        look.add(z, rule, key);
        EXPECT_TRUE(look.send(kT0 + 1, 0));
        return look.c[0].decision.remaining;
    };

    // all, two requests admitted then one refused by the other rule of the
    // pair: the rule that allowed it spent only the two
    auto refused_third = [&](const char *first, const char *second, const char *key, size_t allowing) {
        Request r;
        r.add(z, first, key);
        r.add(z, second, key);
        ASSERT_TRUE(r.send(kT0));
        ASSERT_TRUE(r.send(kT0));
        ASSERT_FALSE(r.send(kT0));
        EXPECT_TRUE(r.c[allowing].decision.allowed);
        EXPECT_EQ(left(allowing ? second : first, key), 3u) << first << ", " << second;
    };
    refused_third(win, "limit=2 period=1m name=g2", "a", 0);  // the window, decided last, allows
    refused_third(log, "limit=5 period=1m name=g5", "b", 1);  // the log, decided last, refuses

    // any: the log refuses, the window allows: only the window spends
    Request c;
    c.combine = RL_COMBINE_ANY;
    c.add(z, log, "c");
    c.add(z, win, "c");
    for (int i = 0; i < 3; i++) {
        ASSERT_TRUE(c.send(kT0));
    }
    EXPECT_FALSE(c.c[0].decision.allowed);
    EXPECT_EQ(left(win, "c"), 2u);
    EXPECT_EQ(left(log, "c"), 0u);
    for (int i = 0; i < 2; i++) {
        ASSERT_TRUE(c.send(kT0));
    }
    ASSERT_FALSE(c.send(kT0));
    EXPECT_EQ(left(win, "c"), 0u);
}

// A key is hashed once per zone: each rule's tag is the one the key API
// names it by, whichever check hashed the key, and the zones are locked in
// address order, each once.
TEST(Check, OneHashAZoneGivesEachRuleItsOwnTag)
{
    Zone z1, z2;
    Request r;
    r.add(z1, "limit=5 period=1m name=one", "key");
    r.add(z2, "limit=5 period=1m name=two", "key");
    r.add(z1, "limit=5 period=1h name=three", "key");
    r.add(z1, "limit=5 period=1h name=four", "other");
    ASSERT_TRUE(r.send(kT0));
    std::vector<uint64_t> tags;
    for (size_t i = 0; i < r.c.size(); i++) {
        const uint64_t identity = rl_rule_identity(&r.rules[i], "$k", 2);
        EXPECT_EQ(r.c[i].tag, rl_table_tag(r.zones[i]->mem, identity, r.keys[i].data(), r.keys[i].size())) << i;
        tags.push_back(r.c[i].tag);
    }
    EXPECT_NE(tags[0], tags[2]) << "one key under two rules of a zone";
    rl_request_t rq{};
    rq.checks = r.c.data();
    rq.n = r.c.size();
    rl_request_hash(&rq);
    ASSERT_EQ(rq.locks, 2u);
    EXPECT_LT((uintptr_t) r.c[rq.order[0]].table, (uintptr_t) r.c[rq.order[1]].table);
}

TEST(Check, RefundGivesBackAnAbandonedReservationWhereverItIsInTheQueue)
{
    Zone z;
    const char *shaper = "algorithm=leaky_bucket limit=1 period=1s max_delay=100s";
    std::vector<Request> q(5);
    for (int i = 0; i < 5; i++) {
        q[i].add(z, shaper, "k");
        ASSERT_TRUE(q[i].send(kT0));
        EXPECT_EQ(q[i].c[0].decision.delay_ms, 1000 * i);
    }
    refund(q[2].c.data(), 1, kT0);  // the third leaves: one slot less in the queue
    refund(q[3].c.data(), 1, kT0);  // and the fourth
    Request next;
    next.add(z, shaper, "k");
    ASSERT_TRUE(next.send(kT0));
    EXPECT_EQ(next.c[0].decision.delay_ms, 3000);  // behind the three still waiting
    for (int i = 0; i < 4; i++) {                  // never before now, however many leave
        refund(q[i].c.data(), 1, kT0 + 500);
    }
    ASSERT_TRUE(next.send(kT0 + 500));
    EXPECT_EQ(next.c[0].decision.delay_ms, 0);
}

TEST(Check, RefundUncountsWindowsThatStillHoldTheRequest)
{
    for (const char *rule : {"algorithm=fixed_window limit=3 period=1m", "algorithm=sliding_window limit=3 period=1m",
                             "algorithm=sliding_log limit=3 period=1m", "limit=3 period=1m"}) {
        const uint32_t blob = blob_of(rule);
        Zone z(256 * 1024, blob ? std::vector<uint32_t>{blob} : std::vector<uint32_t>{});
        Request r;
        r.add(z, rule, "k");
        ASSERT_TRUE(r.send(kT0 + 10));
        ASSERT_TRUE(r.send(kT0 + 20));
        std::vector<rl_check_t> held = r.c;
        ASSERT_TRUE(r.send(kT0 + 30));
        EXPECT_EQ(r.c[0].decision.remaining, 0u) << rule;
        refund(held.data(), 1, kT0 + 40);  // the second leaves
        ASSERT_TRUE(r.send(kT0 + 50)) << rule;
        EXPECT_EQ(r.c[0].decision.remaining, 0u) << rule;
        EXPECT_FALSE(r.send(kT0 + 60)) << rule;
        // a refund for a window that has passed gives back nothing
        refund(held.data(), 1, kT0 + 120000);
        Request look;
        look.add(z, rule, "k");
        ASSERT_TRUE(look.send(kT0 + 120000, 0));
        EXPECT_EQ(look.c[0].decision.remaining, 3u) << rule;
    }
}
