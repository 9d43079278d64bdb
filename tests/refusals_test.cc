// Refusals remembered for a Redis zone (rl_refusals_*): a request the cache
// refuses is one the decision it stands for would refuse too, with the same
// Retry-After; and the requests admitted are the same with and without it.
// The core's own decisions stand for Redis's here: the script is the same
// arithmetic (redis_trace_test.cc).
#include <random>
#include <string>
#include <vector>

#include "helpers.h"

namespace {

struct Cache {
    std::vector<uint64_t> mem;
    size_t size;
    explicit Cache(size_t zone_size = 1 << 20) : size(rl_refusals_size(zone_size)), mem(rl_refusals_size(zone_size) / 8)
    {
    }
    void *p() { return mem.data(); }
};

// A location's rules on one key, decided by "Redis" (a zone's own
// decisions) unless the cache refuses first.
struct Location {
    std::vector<rl_rule_t> rules;
    TestZone zone;
    int combine;
    std::string key = "k";
    std::vector<rl_check_t> c;
    rl_request_t rq{};

    Location(std::vector<std::string> texts, int combine_)
        : rules(parse(texts)), zone(64 * 1024, rules, nullptr), combine(combine_)
    {
    }

    static std::vector<rl_rule_t> parse(const std::vector<std::string> &texts)
    {
        std::vector<rl_rule_t> r;
        for (const std::string &t : texts) {
            r.push_back(rule_of(t));
        }
        return r;
    }

    rl_request_t &request(const std::vector<uint64_t> &costs, void *mem = nullptr)
    {
        c.clear();
        for (size_t i = 0; i < rules.size(); i++) {
            c.push_back(check_of(mem ? mem : zone.mem, &rules[i], identity_of(rules[i]), key, costs[i]));
        }
        rq = hashed(request_of(c.data(), c.size(), combine));
        return rq;
    }
};

struct Trace {
    uint64_t admitted = 0, refused = 0, cached = 0;
    std::vector<int> verdicts;
};

// A trace of requests (random steps and costs) on a location: with the
// cache, each hit is checked against what "Redis" would decide on a copy
// of its state.
Trace trace(const std::vector<std::string> &texts, int combine, bool use_cache, uint32_t seed, int steps = 6000)
{
    Location loc(texts, combine);
    Cache cache;
    std::mt19937_64 rng(seed);
    int64_t now = kT0 + 123;
    Trace run;
    std::vector<uint64_t> stored_costs;
    for (int s = 0; s < steps; s++) {
        const uint64_t pick = rng() % 100;
        now += pick < 60 ? (int64_t) (rng() % 50) : pick < 95 ? (int64_t) (rng() % 2000) : (int64_t) (rng() % 90000);
        std::vector<uint64_t> costs;
        for (size_t i = 0; i < texts.size(); i++) {
            const uint64_t k = rng() % 20;
            costs.push_back(k == 0 ? 0 : k < 14 ? 1 : k < 18 ? 2 : 5);
        }
        rl_request_t &rq = loc.request(costs);
        if (use_cache && rl_refusals_find(cache.p(), cache.size, &rq, now)) {
            run.cached++;
            EXPECT_EQ(rq.verdict, RL_VERDICT_REJECTED);
            const rl_decision_t mine = rq.checks[rq.binding].decision;
            TestZone twin(loc.zone);
            Location copy(texts, combine);
            rl_request_t &real = copy.request(costs, twin.mem);
            EXPECT_EQ(rl_decide(&real, now), RL_VERDICT_REJECTED)
                << "cached refusal at step " << s << " of a request Redis admits (seed " << seed << ")";
            if (costs == stored_costs) {
                const rl_decision_t &d = real.checks[real.binding].decision;
                EXPECT_EQ(mine.retry_after_ms, d.retry_after_ms) << "step " << s;
                // a ban's reset is the later of its end and the rule's own
                // reset had it admitted the request: in a ban's last moments
                // the cache shows its end
                if (d.banned_ms > 0) {
                    EXPECT_LE(mine.reset_ms, d.reset_ms) << "step " << s;
                    EXPECT_GE(mine.reset_ms, d.banned_ms) << "step " << s;
                } else {
                    EXPECT_EQ(mine.reset_ms, d.reset_ms) << "step " << s;
                }
                EXPECT_EQ(mine.banned_ms, d.banned_ms) << "step " << s;
                EXPECT_EQ(rl_retry_after_seconds(&mine), rl_retry_after_seconds(&d));
            }
            run.refused++;
            run.verdicts.push_back(RL_VERDICT_REJECTED);
            continue;
        }
        const int v = rl_decide(&rq, now);
        run.verdicts.push_back(v);
        if (v == RL_VERDICT_REJECTED) {
            run.refused++;
            const uint32_t epoch = rl_refusals_epoch(cache.p());
            if (use_cache && rl_refusals_store(cache.p(), cache.size, &rq, epoch, now, now)) {
                stored_costs = costs;
            }
        } else {
            run.admitted++;
            if (use_cache) {
                rl_refusals_store(cache.p(), cache.size, &rq, rl_refusals_epoch(cache.p()), now, now);
                stored_costs.clear();  // forgotten: it spent more
            }
        }
    }
    return run;
}

struct Case {
    std::vector<std::string> rules;
    int combine;
};

const Case kCases[] = {
    {{"algorithm=gcra limit=5 period=1s burst=3"}, RL_COMBINE_ALL},
    {{"algorithm=token_bucket limit=4 period=2s"}, RL_COMBINE_ALL},
    {{"algorithm=fixed_window limit=5 period=3s"}, RL_COMBINE_ALL},
    {{"algorithm=sliding_window limit=6 period=4s buckets=4"}, RL_COMBINE_ALL},
    {{"algorithm=sliding_log limit=4 period=2s"}, RL_COMBINE_ALL},
    {{"algorithm=leaky_bucket limit=3 period=1s max_delay=500ms"}, RL_COMBINE_ALL},
    {{"algorithm=quota limit=20 reset=daily"}, RL_COMBINE_ALL},
    {{"algorithm=gcra limit=3 period=1s ban=5s"}, RL_COMBINE_ALL},
    {{"algorithm=fixed_window limit=3 period=2s ban=10s"}, RL_COMBINE_ALL},
    {{"limit=10 period=10s name=wide", "algorithm=sliding_log limit=3 period=1s name=narrow"}, RL_COMBINE_ALL},
    {{"limit=10 period=10s name=wide", "algorithm=fixed_window limit=3 period=1s name=narrow"}, RL_COMBINE_ANY},
    {{"algorithm=gcra limit=2 period=1s ban=3s name=b", "algorithm=fixed_window limit=5 period=5s name=w"},
     RL_COMBINE_ALL},
    {{"algorithm=token_bucket limit=2 period=1s name=a", "algorithm=sliding_window limit=4 period=2s name=s",
      "algorithm=gcra limit=1 period=3s ban=2s name=z"},
     RL_COMBINE_ANY},
};

}  // namespace

TEST(Refusals, NeverRefusesWhatRedisAdmitsAndAdmitsTheSame)
{
    uint64_t cached = 0;
    for (const Case &k : kCases) {
        for (uint32_t seed = 1; seed <= 3; seed++) {
            SCOPED_TRACE(k.rules[0] + (k.rules.size() > 1 ? " +" : ""));
            const Trace with = trace(k.rules, k.combine, true, seed);
            const Trace without = trace(k.rules, k.combine, false, seed);
            EXPECT_EQ(with.admitted, without.admitted) << k.rules[0];
            EXPECT_EQ(with.verdicts, without.verdicts) << k.rules[0];
            cached += with.cached;
            EXPECT_GT(with.cached, 0u) << k.rules[0] << ": the cache never served";
        }
    }
    EXPECT_GT(cached, 5000u);
}

namespace {

// A spent key, refused once by "Redis" at kT0 and remembered.
struct Spent {
    Location loc;
    Cache cache;
    rl_decision_t refused{};

    explicit Spent(const std::string &rule, uint64_t cost = 1, int64_t sent = kT0, int64_t came = kT0)
        : loc({rule}, RL_COMBINE_ALL)
    {
        while (rl_decide(&loc.request({cost}), kT0) != RL_VERDICT_REJECTED) {
            // each admitted request ends at once, charged its cost (a
            // charge= rule's requests in flight would refuse in its stead)
            for (size_t i = 0; i < loc.rq.n; i++) {
                loc.c[i].charge = loc.c[i].cost;
            }
            rl_request_end(&loc.rq, kT0);
        }
        refused = loc.c[0].decision;
        stored = rl_refusals_store(cache.p(), cache.size, &loc.rq, rl_refusals_epoch(cache.p()), sent, came);
    }
    int stored;

    bool find(int64_t now, uint64_t cost = 1)
    {
        return rl_refusals_find(cache.p(), cache.size, &loc.request({cost}), now) == 1;
    }
};

}  // namespace

TEST(Refusals, BoundaryOfTheWaitCostAndReset)
{
    Spent s("limit=2 period=900ms", 2);
    ASSERT_EQ(s.stored, 1);
    ASSERT_GT(s.refused.retry_after_ms, 600);
    ASSERT_LT(s.refused.retry_after_ms, RL_REFUSALS_REFRESH_MS);
    EXPECT_TRUE(s.find(kT0, 2));
    EXPECT_TRUE(s.find(kT0, 3));   // a larger cost waits at least as long
    EXPECT_FALSE(s.find(kT0, 1));  // a smaller one may pass sooner: Redis decides
    EXPECT_FALSE(s.find(kT0, 0));  // a look is never refused from here
    // until the last ms of the wait less one (Redis's ms are whole)
    EXPECT_TRUE(s.find(kT0 + s.refused.retry_after_ms - 2, 2));
    EXPECT_FALSE(s.find(kT0 + s.refused.retry_after_ms - 1, 2));
    // the headers, counted down
    ASSERT_TRUE(s.find(kT0 + 150, 2));
    const rl_decision_t &d = s.loc.c[0].decision;
    EXPECT_EQ(d.allowed, 0);
    EXPECT_EQ(d.remaining, 0u);
    EXPECT_EQ(d.retry_after_ms, s.refused.retry_after_ms - 150);
    EXPECT_EQ(d.reset_ms, s.refused.reset_ms - 150);
    EXPECT_EQ(d.quota, 2u);
    EXPECT_EQ(s.loc.rq.action, RL_ACTION_REFUSE);
    EXPECT_EQ(s.loc.c[0].outcome, RL_OUTCOME_REJECTED);
    // a reset forgets it
    rl_refusals_forget(s.cache.p());
    EXPECT_FALSE(s.find(kT0 + 150, 2));
}

TEST(Refusals, RedisIsAskedAgainWithinTheRefresh)
{
    // a long wait is served a second at most after Redis said it: a reset
    // on another server is seen here then
    Spent s("limit=1 period=1h");
    ASSERT_EQ(s.stored, 1);
    EXPECT_TRUE(s.find(kT0 + RL_REFUSALS_REFRESH_MS - 1));
    EXPECT_FALSE(s.find(kT0 + RL_REFUSALS_REFRESH_MS));
    // Redis refuses again: remembered anew, from its answer's time
    const int64_t later = kT0 + 5000;
    ASSERT_EQ(rl_decide(&s.loc.request({1}), later), RL_VERDICT_REJECTED);
    ASSERT_EQ(rl_refusals_store(s.cache.p(), s.cache.size, &s.loc.rq, 0, later, later), 1);
    EXPECT_TRUE(s.find(later + RL_REFUSALS_REFRESH_MS - 1));
    EXPECT_EQ(s.loc.c[0].decision.retry_after_ms, 3600000 - 5000 - RL_REFUSALS_REFRESH_MS + 1);
}

TEST(Refusals, TheWaitCountsFromTheSendingAndTheHeadersFromTheReply)
{
    // sent at kT0 - 30, the reply came at kT0: refused until kT0 - 30 + R - 1,
    // and Retry-After counts from kT0
    Spent s("limit=1 period=900ms", 1, kT0 - 30, kT0);
    ASSERT_EQ(s.stored, 1);
    const int64_t r = s.refused.retry_after_ms;
    EXPECT_TRUE(s.find(kT0 - 30 + r - 2));
    EXPECT_EQ(s.loc.c[0].decision.retry_after_ms, 30 + 2);
    EXPECT_FALSE(s.find(kT0 - 30 + r - 1));
}

TEST(Refusals, AReplyFromBeforeAResetIsNotRemembered)
{
    Location loc({"limit=1 period=1m"}, RL_COMBINE_ALL);
    Cache cache;
    const uint32_t epoch = rl_refusals_epoch(cache.p());
    rl_decide(&loc.request({1}), kT0);
    ASSERT_EQ(rl_decide(&loc.request({1}), kT0), RL_VERDICT_REJECTED);
    rl_refusals_forget(cache.p());  // the key API's reset, while the reply was on its way
    EXPECT_EQ(rl_refusals_store(cache.p(), cache.size, &loc.rq, epoch, kT0, kT0), 0);
    EXPECT_EQ(rl_refusals_find(cache.p(), cache.size, &loc.request({1}), kT0), 0);
}

TEST(Refusals, WhatIsNotRemembered)
{
    // a charge= rule's settle may give back before the wait is over
    Spent charged("limit=1 period=1m charge=1");
    EXPECT_EQ(charged.stored, 0);
    // but its ban is its own: until the ban ends, for any cost above 0
    Spent banned("limit=1 period=1m charge=1 ban=30s", 1);
    ASSERT_EQ(banned.stored, 1);
    EXPECT_TRUE(banned.find(kT0 + RL_REFUSALS_REFRESH_MS - 1));
    EXPECT_EQ(banned.loc.c[0].decision.banned_ms, 30000 - RL_REFUSALS_REFRESH_MS + 1);
    Spent short_ban("limit=1 period=1m charge=1 ban=500ms", 1);
    ASSERT_EQ(short_ban.stored, 1);
    EXPECT_TRUE(short_ban.find(kT0 + 498));
    EXPECT_FALSE(short_ban.find(kT0 + 499));
    // a dry run refuses nothing
    Spent dry("limit=1 period=1m");
    dry.loc.request({1});
    dry.loc.rq.dry_run = 1;
    EXPECT_EQ(rl_refusals_find(dry.cache.p(), dry.cache.size, &dry.loc.rq, kT0), 0);
    // another limit (limit=$var, a reload) is another entry
    Spent other("limit=1 period=1m");
    other.loc.rules[0] = rule_of("limit=100 period=1m");
    EXPECT_FALSE(other.find(kT0));
    // a rule of ban= that did not refuse could have: with all, another rule
    // refusing is not enough
    Location loc({"limit=100 period=1m ban=1m name=b", "limit=1 period=1m name=n"}, RL_COMBINE_ALL);
    Cache cache;
    rl_decide(&loc.request({1, 1}), kT0);
    ASSERT_EQ(rl_decide(&loc.request({1, 1}), kT0), RL_VERDICT_REJECTED);
    EXPECT_EQ(rl_refusals_store(cache.p(), cache.size, &loc.rq, 0, kT0, kT0), 0);
}

TEST(Refusals, AFloodOfKeysOnlyReplacesEntries)
{
    const size_t size = rl_refusals_size(1 << 20);
    EXPECT_EQ(size, 64u + 1024 * 64);
    EXPECT_EQ(rl_refusals_size(64 * 1024), 64u + 64 * 64);
    EXPECT_EQ(rl_refusals_size(1ULL << 30), 64u + 8192 * 64);
    Location loc({"limit=1 period=1m"}, RL_COMBINE_ALL);
    Cache cache;
    const std::vector<uint64_t> before = cache.mem;
    size_t stored = 0;
    for (int i = 0; i < 20000; i++) {
        loc.key = "attacker-" + std::to_string(i);
        rl_decide(&loc.request({1}), kT0);
        ASSERT_EQ(rl_decide(&loc.request({1}), kT0), RL_VERDICT_REJECTED);
        stored += (size_t) rl_refusals_store(cache.p(), cache.size, &loc.rq, 0, kT0, kT0);
    }
    EXPECT_EQ(stored, 20000u);
    EXPECT_EQ(cache.mem.size(), before.size());
    size_t found = 0;
    for (int i = 0; i < 20000; i++) {
        loc.key = "attacker-" + std::to_string(i);
        found += (size_t) rl_refusals_find(cache.p(), cache.size, &loc.request({1}), kT0 + 1);
    }
    EXPECT_LE(found, 1024u);
    EXPECT_GT(found, 512u);
    // the latest are there
    EXPECT_EQ(rl_refusals_find(cache.p(), cache.size, &loc.request({1}), kT0 + 1), 1);
}
