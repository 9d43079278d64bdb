// Concurrency rules through the core as nginx uses it: rl_decide takes a
// slot or a place in the queue, rl_request_end gives them back.
#include <set>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "helpers.h"

namespace {

const uint8_t kSecret[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6};

std::set<uint32_t> g_dead;
int alive(uint32_t pid)
{
    return g_dead.count(pid) ? 0 : 1;
}

// A zone holding the rules; a request is its checks (one a rule).
struct Zone {
    std::vector<rl_rule_t> rules;
    TestZone zone;

    explicit Zone(const std::vector<std::string> &texts) : rules(parse(texts)), zone(1 << 20, rules, kSecret) {}

    static std::vector<rl_rule_t> parse(const std::vector<std::string> &texts)
    {
        std::vector<rl_rule_t> r;
        for (const auto &t : texts) {
            r.push_back(rule_of(t));
        }
        return r;
    }
};

// A request of one key through every rule of the zone, held by a process.
struct Request {
    std::string key;
    std::vector<rl_check_t> checks;
    rl_request_t rq;

    Request(Zone &z, const std::string &k, uint32_t holder, int combine = RL_COMBINE_ALL) : key(k)
    {
        for (size_t i = 0; i < z.rules.size(); i++) {
            checks.push_back(check_of(z.zone.mem, &z.rules[i], 100 + i, key, 1,
                                      1 + rl_table_rule_slot(z.zone.mem, z.rules[i].name)));
        }
        rq = hashed(request_of(checks.data(), checks.size(), combine));
        rq.holder = holder;
        rq.alive = alive;
    }
    Request(const Request &) = delete;  // its checks point into it

    int decide(int64_t now) { return rl_decide(&rq, now); }
    int end(int64_t now) { return rl_request_end(&rq, now); }
};

rl_rule_stats_t stats_of(Zone &z, const char *name)
{
    rl_rule_stats_t st[RL_RULE_STATS_MAX];
    const size_t n = rl_table_rule_stats(z.zone.mem, st, RL_RULE_STATS_MAX);
    for (size_t i = 0; i < n; i++) {
        if (std::string(st[i].name) == name) {
            return st[i];
        }
    }
    return rl_rule_stats_t{};
}

}  // namespace

TEST(Concurrency, RuleParameters)
{
    rl_rule_t r;
    char err[RL_ERR_MAX];
    ASSERT_EQ(rl_rule_parse(&r, name_room(), "algorithm=concurrency limit=2 max_wait=10s", err, sizeof(err)), RL_OK)
        << err;
    EXPECT_STREQ(r.name, "concurrency_2_at_once");
    EXPECT_EQ(rl::own_value(r, "max_wait"), 10000);
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "algorithm=concurrency limit=2 period=1m", err, sizeof(err)), RL_ERROR);
    EXPECT_NE(std::string(err).find("\"period=\" does not apply to algorithm=concurrency"), std::string::npos) << err;
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "algorithm=concurrency limit=2 cost=3", err, sizeof(err)), RL_ERROR);
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "algorithm=concurrency limit=5000", err, sizeof(err)), RL_ERROR);
    EXPECT_NE(std::string(err).find("at most 4096"), std::string::npos) << err;
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "limit=2 max_wait=1s", err, sizeof(err)), RL_ERROR);
    EXPECT_NE(std::string(err).find("max_wait is for concurrency"), std::string::npos) << err;
    EXPECT_EQ(rl_redis_rule_ok(&r, err, sizeof(err)), RL_OK);
    // a Redis zone holds slots as leases; a wait there is refused
    ASSERT_EQ(rl_rule_parse(&r, name_room(), "algorithm=concurrency limit=2", err, sizeof(err)), RL_OK);
    EXPECT_EQ(rl_redis_rule_ok(&r, err, sizeof(err)), RL_OK) << err;
    EXPECT_EQ(rl::own_value(r, "lease"), RL_LEASE_DEFAULT_MS);
    ASSERT_EQ(rl_rule_parse(&r, name_room(), "algorithm=concurrency limit=2 max_wait=1s", err, sizeof(err)), RL_OK);
    EXPECT_EQ(rl_redis_rule_ok(&r, err, sizeof(err)), RL_ERROR);
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "algorithm=concurrency limit=2 lease=500ms", err, sizeof(err)), RL_ERROR);
    EXPECT_STREQ(err, "invalid \"lease=500ms\": expected a time from 1s to 1h, like 10s, 30s, 5m");
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "limit=2 lease=10s", err, sizeof(err)), RL_ERROR);
    EXPECT_NE(std::string(err).find("lease"), std::string::npos) << err;
}

TEST(Concurrency, AtMostLimitInFlightAndEachEndFreesOne)
{
    Zone z({"algorithm=concurrency limit=2 name=c"});
    Request a(z, "k", 10), b(z, "k", 10), c(z, "k", 10);
    EXPECT_EQ(a.decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(a.checks[0].decision.remaining, 1u);
    EXPECT_EQ(b.decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(b.checks[0].decision.remaining, 0u);
    EXPECT_EQ(c.decide(kT0), RL_VERDICT_REJECTED);
    EXPECT_EQ(c.checks[0].decision.retry_after_ms, 0);  // nobody knows when a slot frees
    EXPECT_EQ(c.end(kT0), 0);                           // a refusal holds nothing
    EXPECT_EQ(stats_of(z, "c").in_flight, 2u);
    EXPECT_EQ(a.end(kT0 + 5), 1);
    EXPECT_EQ(a.end(kT0 + 5), 0);  // once
    Request d(z, "k", 10);
    EXPECT_EQ(d.decide(kT0 + 6), RL_VERDICT_PASSED);
    Request other(z, "other", 10);
    EXPECT_EQ(other.decide(kT0 + 6), RL_VERDICT_PASSED);
    EXPECT_EQ(stats_of(z, "c").in_flight, 3u);
    EXPECT_EQ(stats_of(z, "c").peak, 3u);
    b.end(kT0 + 7);
    d.end(kT0 + 7);
    other.end(kT0 + 7);
    EXPECT_EQ(stats_of(z, "c").in_flight, 0u);
    EXPECT_TABLE_VALID(z.zone.table());
}

TEST(Concurrency, WaitersAreServedFirstComeFirstServed)
{
    Zone z({"algorithm=concurrency limit=1 max_wait=3s name=c"});
    Request a(z, "k", 10), w1(z, "k", 20), w2(z, "k", 10), late(z, "k", 20);
    EXPECT_EQ(a.decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(w1.decide(kT0 + 1), RL_VERDICT_QUEUED);
    EXPECT_EQ(w1.rq.delay_ms, 3000);
    EXPECT_NE(w1.checks[0].ticket, 0u);
    EXPECT_EQ(w2.decide(kT0 + 2), RL_VERDICT_QUEUED);
    a.end(kT0 + 3);
    // a newcomer does not jump the queue, nor does the second waiter
    EXPECT_EQ(late.decide(kT0 + 4), RL_VERDICT_QUEUED);
    EXPECT_EQ(w2.decide(kT0 + 4), RL_VERDICT_QUEUED);
    EXPECT_EQ(w1.decide(kT0 + 4), RL_VERDICT_PASSED);
    EXPECT_EQ(w1.checks[0].ticket, 0u);
    w1.end(kT0 + 5);
    EXPECT_EQ(late.decide(kT0 + 6), RL_VERDICT_QUEUED);
    EXPECT_EQ(w2.decide(kT0 + 6), RL_VERDICT_PASSED);
    // a waiter that gives up leaves its place
    late.end(kT0 + 7);
    w2.end(kT0 + 8);
    Request after(z, "k", 10);
    EXPECT_EQ(after.decide(kT0 + 9), RL_VERDICT_PASSED);
    EXPECT_EQ(stats_of(z, "c").waited, 3u);
    rl_peek_t p;
    rl_table_peek(z.zone.mem, &z.rules[0], after.checks[0].tag, 1, kT0 + 9, &p);
    EXPECT_EQ(p.in_flight, 1u);
    EXPECT_EQ(p.waiting, 0u);
    after.end(kT0 + 10);
    EXPECT_TABLE_VALID(z.zone.table());
}

TEST(Concurrency, SlotsAndPlacesOfADeadHolderComeBack)
{
    Zone z({"algorithm=concurrency limit=2 max_wait=1s name=c"});
    Request a(z, "k", 111), b(z, "k", 111), w(z, "k", 111), c(z, "k", 222);
    EXPECT_EQ(a.decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(b.decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(w.decide(kT0), RL_VERDICT_QUEUED);
    EXPECT_EQ(c.decide(kT0), RL_VERDICT_QUEUED);
    g_dead.insert(111);  // killed: it never ends its requests
    EXPECT_EQ(c.decide(kT0 + 1), RL_VERDICT_PASSED);
    EXPECT_EQ(stats_of(z, "c").in_flight, 1u);
    Request d(z, "k", 222), e(z, "k", 222);
    EXPECT_EQ(d.decide(kT0 + 2), RL_VERDICT_PASSED);
    EXPECT_EQ(e.decide(kT0 + 2), RL_VERDICT_QUEUED);  // never over the limit meanwhile
    g_dead.clear();
    c.end(kT0 + 3);
    d.end(kT0 + 3);
    e.end(kT0 + 3);
    EXPECT_EQ(stats_of(z, "c").in_flight, 0u);
}

TEST(Concurrency, CombinedWithARateAtomically)
{
    Zone z({"limit=3 period=1h name=rate", "algorithm=concurrency limit=1 name=slots"});
    Request a(z, "k", 10), b(z, "k", 10);
    EXPECT_EQ(a.decide(kT0), RL_VERDICT_PASSED);
    // refused for lack of a slot: nothing spent at the rate
    EXPECT_EQ(b.decide(kT0), RL_VERDICT_REJECTED);
    EXPECT_EQ(b.checks[0].decision.allowed, 1);
    a.end(kT0);
    Request c(z, "k", 10), d(z, "k", 10), e(z, "k", 10);
    EXPECT_EQ(c.decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(c.checks[0].decision.remaining, 1u);  // two of three spent
    c.end(kT0);
    EXPECT_EQ(d.decide(kT0), RL_VERDICT_PASSED);
    d.end(kT0);
    // refused by the rate: takes no slot
    EXPECT_EQ(e.decide(kT0), RL_VERDICT_REJECTED);
    EXPECT_EQ(e.checks[1].slot, 0u);
    EXPECT_EQ(stats_of(z, "slots").in_flight, 0u);
}

TEST(Concurrency, ARefusedWaiterLeavesTheQueue)
{
    Zone z({"limit=2 period=1h name=rate", "algorithm=concurrency limit=1 max_wait=10s name=slots"});
    Request a(z, "k", 10), w(z, "k", 10), next(z, "k", 10);
    EXPECT_EQ(a.decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(w.decide(kT0), RL_VERDICT_QUEUED);
    EXPECT_EQ(next.decide(kT0), RL_VERDICT_QUEUED);
    a.end(kT0);
    EXPECT_EQ(w.decide(kT0 + 1), RL_VERDICT_PASSED);  // the rate's second
    w.end(kT0 + 1);
    EXPECT_EQ(next.decide(kT0 + 2), RL_VERDICT_REJECTED);  // the rate refuses it now
    EXPECT_EQ(next.checks[1].ticket, 0u);
    rl_peek_t p;
    rl_table_peek(z.zone.mem, &z.rules[1], next.checks[1].tag, 1, kT0 + 2, &p);
    EXPECT_EQ(p.waiting, 0u);
}

TEST(Concurrency, ABanKeepsTheKeyOutAsForOtherAlgorithms)
{
    Zone z({"algorithm=concurrency limit=1 ban=1m name=c"});
    Request a(z, "k", 10), b(z, "k", 10), c(z, "k", 10);
    EXPECT_EQ(a.decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(b.decide(kT0 + 1), RL_VERDICT_REJECTED);  // no slot: the ban starts
    EXPECT_EQ(b.checks[0].decision.banned_ms, 60000);
    EXPECT_EQ(b.checks[0].decision.retry_after_ms, 60000);
    a.end(kT0 + 2);
    EXPECT_EQ(c.decide(kT0 + 3), RL_VERDICT_REJECTED);  // a slot is free, but banned
    EXPECT_EQ(c.checks[0].decision.retry_after_ms, 59998);
    EXPECT_EQ(c.checks[0].slot, 0u);
    EXPECT_EQ(stats_of(z, "c").in_flight, 0u);
    Request d(z, "k", 10);
    EXPECT_EQ(d.decide(kT0 + 60001), RL_VERDICT_PASSED);
    d.end(kT0 + 60002);
}

// A Redis zone's requests hold their server's slots too
// (rl_request_hold_here, before the call), whoever decides them: a
// request that finds none free is marked full_here (the script refuses
// it); once Redis decided, a request that took no lease gives its slot
// back; a decision of the zone (on_redis_error=local) counts those that
// hold one, and the requests it admits count in the next call's.  The
// rule's figures count leases, not these.
TEST(Concurrency, ARedisZonesRequestsHoldTheirServersSlots)
{
    Zone z({"algorithm=concurrency limit=2 name=c"});
    Request a(z, "k", 10), b(z, "k", 20), c(z, "k", 10);
    EXPECT_EQ(rl_request_hold_here(&a.rq, kT0), 1);
    EXPECT_EQ(rl_request_hold_here(&b.rq, kT0), 1);
    EXPECT_EQ(a.checks[0].full_here, 0);
    EXPECT_EQ(rl_request_hold_here(&c.rq, kT0), 0);  // the server holds two
    EXPECT_EQ(c.checks[0].full_here, 1);
    EXPECT_EQ(c.checks[0].slot, 0u);
    EXPECT_EQ(rl_request_hold_here(&a.rq, kT0), 1);  // once: it holds one
    EXPECT_EQ(stats_of(z, "c").in_flight, 0u);
    // Redis admitted a (a lease), refused b: b's slot given back
    a.checks[0].lease = 7;
    EXPECT_EQ(rl_request_free_here(&a.rq, kT0 + 1, 0), 1);
    EXPECT_EQ(rl_request_free_here(&b.rq, kT0 + 1, 0), 0);
    // Redis away: the zone decides, a's slot counted
    Request d(z, "k", 10), e(z, "k", 10);
    EXPECT_EQ(d.decide(kT0 + 2), RL_VERDICT_PASSED);
    EXPECT_EQ(e.decide(kT0 + 2), RL_VERDICT_REJECTED);
    // Redis back: d, admitted meanwhile, counts in the next call's
    EXPECT_EQ(rl_request_hold_here(&c.rq, kT0 + 3), 0);
    EXPECT_EQ(c.checks[0].full_here, 1);
    EXPECT_EQ(rl_request_free_here(&a.rq, kT0 + 4, 1), 0);  // a ends
    EXPECT_EQ(rl_request_hold_here(&c.rq, kT0 + 5), 1);
    EXPECT_EQ(c.checks[0].full_here, 0);
    // a dead process's slots come back, as in a local zone
    Request f(z, "k", 30);
    EXPECT_EQ(rl_request_hold_here(&f.rq, kT0 + 6), 0);
    g_dead.insert(10);
    EXPECT_EQ(rl_request_hold_here(&f.rq, kT0 + 7), 1);
    g_dead.clear();
    EXPECT_EQ(rl_request_free_here(&f.rq, kT0 + 8, 1), 0);
    rl_peek_t p;
    rl_table_peek(z.zone.mem, &z.rules[0], f.checks[0].tag, 1, kT0 + 8, &p);
    EXPECT_EQ(p.in_flight, 0u);
    EXPECT_TABLE_VALID(z.zone.table());
}
