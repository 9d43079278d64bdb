// Checking a request against several rules: all/any combination, atomic
// commit with no partial consumption, the binding rule, shared state.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "helpers.h"
#include "policy/request.h"

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

// A stack on one key (every check on the same bytes, one variable's value,
// in one zone) is hashed once: each rule's tag is the one the key API names
// it by, as when each check holds its own copy of the key, and the zone is
// locked once.
TEST(Check, AStackOnOneKeyIsHashedOnceWithTheTagsOfEachRule)
{
    Zone z;
    const std::string key = "one key";
    std::vector<rl_rule_t> rules = {rule_of("limit=5 period=1s name=a"), rule_of("limit=50 period=1m name=b"),
                                    rule_of("algorithm=quota limit=500 reset=daily name=c")};
    for (size_t n = 2; n <= rules.size(); n++) {
        std::vector<rl_check_t> shared, copies;
        std::vector<std::string> own(n, key);
        for (size_t i = 0; i < n; i++) {
            shared.push_back(check_of(z.mem, &rules[i], identity_of(rules[i]), key));
            copies.push_back(check_of(z.mem, &rules[i], identity_of(rules[i]), own[i]));
        }
        ASSERT_EQ(shared[0].key, shared[1].key);
        ASSERT_NE(copies[0].key, copies[1].key);
        rl_request_t one = request_of(shared.data(), n), each = request_of(copies.data(), n);
        rl_request_hash(&one);
        rl_request_hash(&each);
        ASSERT_EQ(one.locks, 1u) << n;
        ASSERT_EQ(each.locks, 1u) << n;
        EXPECT_EQ(one.order[0], 0u);
        for (size_t i = 0; i < n; i++) {
            const uint64_t tag = rl_table_tag(z.mem, identity_of(rules[i]), key.data(), key.size());
            EXPECT_EQ(shared[i].tag, tag) << n << " " << i;
            EXPECT_EQ(copies[i].tag, tag) << n << " " << i;
            EXPECT_EQ(shared[i].hash, copies[i].hash) << n << " " << i;
        }
        EXPECT_NE(shared[0].tag, shared[1].tag);
    }
    rl_request_t none{};  // no check at all: no table, nothing read
    none.locks = 7;
    rl_request_hash(&none);
    EXPECT_EQ(none.locks, 0u);
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

// Two zones hold the same keys, states, blocks, summary and counters: their
// bytes are equal but for the journal's scratch (the lines an operation
// saved, which a write in place never needs).
bool same_zone(TestZone &a, TestZone &b)
{
    const size_t journal = offsetof(rl::TableLayout, journal);
    const size_t after = journal + sizeof(rl::Journal);
    return a.size == b.size && std::memcmp(a.mem, b.mem, journal) == 0 &&
           std::memcmp((char *) a.mem + after, (char *) b.mem + after, a.size - after) == 0;
}

// A hashed request decide() takes the two passes for: with all, each rule
// that applies neither bans nor holds slots, and finds its key, on a state
// no other check shares.
bool found_all(const rl_request_t &rq)
{
    size_t applying = 0;
    for (size_t i = 0; i < rq.n; i++) {
        const rl_check_t &c = rq.checks[i];
        if (c.key_len == 0) {
            continue;
        }
        rl::State s{};
        if (c.rule->ban_ms > 0 || c.rule->algorithm == RL_CONCURRENCY || !rl::Table::at(c.table)->find(c.tag, &s)) {
            return false;
        }
        for (size_t j = 0; j < i; j++) {
            if (rq.checks[j].key_len > 0 && rq.checks[j].table == c.table && rq.checks[j].tag == c.tag) {
                return false;
            }
        }
        applying++;
    }
    return rq.combine == RL_COMBINE_ALL && applying > 0;
}

// A request of several rules whose keys are all in the table is decided in
// two passes (decided as found, then written where found): on random
// traces of stacked rules (shared states, bans, slots, dry runs, any, keys
// evicted and back), rl_decide leaves the zones byte for byte as the path
// that decides any request does, and says the same of every check.
TEST(Check, RequestsOfFoundKeysDecideAsEveryRequestDoesOnRandomTraces)
{
    const std::vector<std::string> texts = {
        "limit=5 period=1s name=gcra",
        "algorithm=token_bucket limit=3 period=1s burst=6 name=tb",
        "algorithm=sliding_window limit=7 period=2s name=sw",
        "algorithm=sliding_log limit=4 period=1s name=sl",
        "algorithm=fixed_window limit=6 period=1s name=fw",
        "algorithm=quota limit=40 reset=daily name=quota",
        "algorithm=leaky_bucket limit=5 period=1s name=lb",
        "limit=20 period=1m name=minute",
        "limit=3 period=1s ban=2s name=ban",
        "algorithm=concurrency limit=2 name=slots",
    };
    std::vector<rl_rule_t> rules;
    for (const std::string &t : texts) {
        rules.push_back(rule_of(t));
    }
    const uint8_t secret[16] = {7};
    for (size_t size : {size_t{32} * 1024, size_t{256} * 1024}) {  // a zone that evicts, one that does not
        TestZone a1(size, rules, secret), a2(size, rules, secret);
        std::vector<int> slots;
        for (const std::string &t : texts) {
            const std::string name = t.substr(t.find("name=") + 5);
            slots.push_back(rl_table_rule_slot(a1.mem, name.c_str()) + 1);
            ASSERT_EQ(rl_table_rule_slot(a2.mem, name.c_str()) + 1, slots.back());
        }
        TestZone b1(a1), b2(a2);
        TestZone *fast[2] = {&a1, &a2}, *each[2] = {&b1, &b2};
        std::mt19937_64 rng(size);
        std::vector<std::string> keys;
        for (int k = 0; k < 300; k++) {
            keys.push_back("key" + std::to_string(k));
        }
        int64_t now = kT0;
        size_t taken = 0, found = 0, untimed = 0;
        for (int step = 0; step < 20000; step++) {
            now += (int64_t) (rng() % 4 == 0 ? rng() % 3000 : rng() % 150);
            const size_t n = 2 + rng() % 3;
            const std::string &key = keys[rng() % 8 == 0 ? rng() % keys.size() : rng() % 6];
            // mostly distinct rules that neither ban nor hold slots, each
            // in its zone
            std::vector<size_t> order(rules.size() - 2);
            for (size_t i = 0; i < order.size(); i++) {
                order[i] = i;
            }
            std::shuffle(order.begin(), order.end(), rng);
            std::vector<rl_check_t> cf, ce;
            for (size_t i = 0; i < n; i++) {
                const size_t r = rng() % 16 == 0 ? rng() % rules.size() : order[i];
                const int z = (int) (rng() % 8 == 0 ? rng() % 2 : r % 2);
                const uint64_t cost = rng() % 8 == 0 ? rng() % 3 : 1;
                const std::string &k = rng() % 20 == 0 ? keys[rng() % keys.size()] : key;
                cf.push_back(check_of(fast[z]->mem, &rules[r], identity_of(rules[r]), k, cost, slots[r]));
                ce.push_back(check_of(each[z]->mem, &rules[r], identity_of(rules[r]), k, cost, slots[r]));
                if (rng() % 30 == 0) {
                    cf.back().key_len = ce.back().key_len = 0;  // exempt from this rule
                }
            }
            rl_request_t f = request_of(cf.data(), n, rng() % 10 == 0 ? RL_COMBINE_ANY : RL_COMBINE_ALL);
            f.dry_run = rng() % 10 == 0;
            f.holder = 1;
            rl_request_t e = f;
            e.checks = ce.data();
            rl_request_hash(&f);
            rl_request_hash(&e);
            found += found_all(f);
            const int vf = rl_decide(&f, now);
            const int ve = rl::decide_each(e, now);
            ASSERT_EQ(vf, ve) << step;
            ASSERT_EQ(f.binding, e.binding) << step;
            ASSERT_EQ(f.delay_ms, e.delay_ms) << step;
            ASSERT_EQ(f.action, e.action) << step;
            ASSERT_EQ(f.status, e.status) << step;
            for (size_t i = 0; i < n; i++) {
                // (a check the headers do not describe: untimed_as)
                rl_decision_t d = cf[i].decision;
                untimed += i != f.binding && untimed_as(d, ce[i].decision);
                ASSERT_EQ(0, std::memcmp(&d, &ce[i].decision, sizeof(rl_decision_t))) << step << " " << i;
                ASSERT_EQ(cf[i].outcome, ce[i].outcome) << step << " " << i;
                ASSERT_EQ(cf[i].before.t, ce[i].before.t) << step << " " << i;
                ASSERT_EQ(cf[i].before.n, ce[i].before.n) << step << " " << i;
                ASSERT_EQ(cf[i].after.t, ce[i].after.t) << step << " " << i;
                ASSERT_EQ(cf[i].after.n, ce[i].after.n) << step << " " << i;
                taken += cf[i].slot != 0;
            }
            // a slot taken is given back as its request ends
            rl_request_end(&f, now);
            rl_request_end(&e, now);
            for (int z = 0; z < 2; z++) {
                ASSERT_TRUE(same_zone(*fast[z], *each[z])) << step << " zone " << z;
            }
        }
        EXPECT_GT(taken, 0u);
        EXPECT_GT(found, 3000u) << "requests the two passes decide";
        EXPECT_GT(untimed, 100u) << "windows whose next unit the two passes did not work out";
        if (size < 100000) {
            EXPECT_GT(a1.stats().evictions + a2.stats().evictions, 0u);
        }
    }
}
