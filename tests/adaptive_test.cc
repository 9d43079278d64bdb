// algorithm=adaptive through the core as nginx uses it (rl_decide takes a
// slot, rl_request_end gives it back with the upstream's latency and
// status), against a simulated upstream: W workers each serving one
// request at a time, service times log-normal, requests beyond W queued in
// arrival order; arrivals open-loop (Poisson) at a set rate.  Seeded: a
// trace gives the same limits every run.
#include <cmath>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "helpers.h"

namespace {

const uint8_t kSecret[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};

struct Flight {
    std::vector<rl_check_t> checks;
    rl_request_t rq;
    int64_t arrived;
};

// The upstream and the rule in front of it.
struct Sim {
    rl_rule_t rule;
    std::unique_ptr<TestZone> zone;
    std::string key = "backend_a";
    int counters;
    std::mt19937_64 rng{42};
    uint32_t workers = 8;
    double mean_ms = 20;  // service time's mean
    double sigma = 0.5;   // of its logarithm

    // the upstream: who is served (until when), who waits
    std::vector<std::pair<int64_t, Flight *>> serving;
    std::queue<Flight *> waiting;
    std::vector<std::unique_ptr<Flight>> flights;
    int64_t now = 1'000'000;
    uint64_t refused = 0, served = 0;
    std::vector<int64_t> latencies;  // of the requests served, since the last take

    explicit Sim(const std::string &text) : rule(rule_of(text))
    {
        std::vector<rl_rule_t> rules{rule};
        zone = std::make_unique<TestZone>(1 << 20, rules, kSecret);
        counters = 1 + rl_table_rule_slot(zone->mem, rule.name);
    }

    double service()
    {
        const double mu = std::log(mean_ms) - sigma * sigma / 2;
        return std::exp(std::normal_distribution<double>(mu, sigma)(rng));
    }

    void start(Flight *f) { serving.emplace_back(now + (int64_t) std::llround(service()), f); }

    // A request of the key decided now (*verdict: rl_decide's).
    std::unique_ptr<Flight> decide(int *verdict)
    {
        auto f = std::make_unique<Flight>();
        f->checks.push_back(check_of(zone->mem, &rule, 100, key, 1, counters));
        f->rq = hashed(request_of(f->checks.data(), 1));
        f->rq.holder = 1;
        f->arrived = now;
        *verdict = rl_decide(&f->rq, now);
        return f;
    }

    void arrive()
    {
        int verdict;
        auto f = decide(&verdict);
        if (verdict != RL_VERDICT_PASSED) {
            refused++;
            return;
        }
        Flight *p = f.get();
        flights.push_back(std::move(f));
        if (serving.size() < workers) {
            start(p);
        } else {
            waiting.push(p);
        }
    }

    void end(Flight *f, uint32_t status)
    {
        f->rq.latency_ms = now - f->arrived;
        f->rq.end_status = status;
        rl_request_end(&f->rq, now);
        latencies.push_back(now - f->arrived);
        served++;
    }

    // Runs ms milliseconds at rate requests a second.
    void run(int64_t ms, double rate)
    {
        std::exponential_distribution<double> gap(rate / 1000.0);
        double next = (double) now + (rate > 0 ? gap(rng) : 1e18);
        const int64_t until = now + ms;
        for (; now < until; now++) {
            for (size_t i = 0; i < serving.size();) {
                if (serving[i].first <= now) {
                    Flight *f = serving[i].second;
                    serving.erase(serving.begin() + (long) i);
                    end(f, 200);
                    if (!waiting.empty()) {
                        start(waiting.front());
                        waiting.pop();
                    }
                } else {
                    i++;
                }
            }
            while (next <= (double) now) {
                arrive();
                next += gap(rng);
            }
        }
    }

    rl_peek_t peek()
    {
        rl_peek_t pk{};
        rl_table_peek(zone->mem, &rule, rl_table_tag(zone->mem, 100, key.data(), key.size()), 1, now, &pk);
        return pk;
    }
    uint32_t limit() { return peek().limit_now; }
};

// capacity: W / S = 8 / 20 ms = 400 requests a second
constexpr double kCapacity = 400;

}  // namespace

TEST(Adaptive, RuleParameters)
{
    rl_rule_t r;
    char err[RL_ERR_MAX];
    ASSERT_EQ(rl_rule_parse(&r, name_room(), "algorithm=adaptive limit=64", err, sizeof(err)), RL_OK) << err;
    EXPECT_STREQ(r.name, "adaptive_64_adaptive");
    EXPECT_EQ(r.adapt_min, 1u);
    EXPECT_EQ(r.tolerance, 120u);
    EXPECT_EQ(r.interval_ms, 500);
    ASSERT_EQ(rl_rule_parse(&r, name_room(), "algorithm=adaptive limit=64 min=4 initial=16 tolerance=1.5 interval=1s",
                            err, sizeof(err)),
              RL_OK)
        << err;
    EXPECT_EQ(r.adapt_min, 4u);
    EXPECT_EQ(r.adapt_initial, 16u);
    EXPECT_EQ(r.tolerance, 150u);
    EXPECT_EQ(r.interval_ms, 1000);
    const struct {
        const char *text, *says;
    } bad[] = {
        {"algorithm=adaptive limit=8 min=9", "\"min=9\" exceeds limit=8"},
        {"algorithm=adaptive limit=8 min=2 initial=1", "\"initial=1\" is outside min=2 and limit=8"},
        {"algorithm=adaptive limit=8 initial=9", "\"initial=9\" is outside min=1 and limit=8"},
        {"algorithm=adaptive limit=8 tolerance=1", "invalid \"tolerance=1\": expected a number from 1.05 to 10"},
        {"algorithm=adaptive limit=8 tolerance=1.049", "invalid \"tolerance=1.049\""},
        {"algorithm=adaptive limit=8 tolerance=10.01", "invalid \"tolerance=10.01\""},
        {"algorithm=adaptive limit=8 tolerance=x", "invalid \"tolerance=x\""},
        {"algorithm=adaptive limit=8 interval=10ms", "invalid \"interval=10ms\": expected a time from 50ms to 1m"},
        {"algorithm=adaptive limit=8 period=1s", "\"period=\" does not apply to algorithm=adaptive"},
        {"algorithm=adaptive limit=4097", "\"limit=4097\" is too large for algorithm=adaptive"},
        {"algorithm=gcra limit=8 tolerance=2", "\"tolerance=\" does not apply to algorithm=gcra: tolerance is for "
                                               "adaptive"},
    };
    for (const auto &b : bad) {
        ASSERT_EQ(rl_rule_parse(&r, name_room(), b.text, err, sizeof(err)), RL_ERROR) << b.text;
        EXPECT_NE(std::string(err).find(b.says), std::string::npos) << b.text << ": " << err;
    }
    ASSERT_EQ(rl_rule_parse(&r, name_room(), "algorithm=adaptive limit=8 tolerance=10", err, sizeof(err)), RL_OK)
        << err;
    EXPECT_EQ(r.tolerance, 1000u);
    ASSERT_EQ(rl_rule_parse(&r, name_room(), "algorithm=adaptive limit=8 tolerance=1.05", err, sizeof(err)), RL_OK)
        << err;
    EXPECT_EQ(r.tolerance, 105u);
}

TEST(Adaptive, NotDecidedInRedis)
{
    rl_rule_t r = rule_of("algorithm=adaptive limit=8");
    char err[RL_ERR_MAX];
    EXPECT_EQ(rl_redis_rule_ok(&r, err, sizeof(err)), RL_ERROR);
    EXPECT_NE(std::string(err).find("a fleet-wide adaptive limit is not defined"), std::string::npos) << err;
}

// A new key starts at initial= (limit= by default), and the limit holds the
// requests in flight as concurrency's does.
TEST(Adaptive, HoldsAtMostItsLimit)
{
    Sim s("algorithm=adaptive limit=64 initial=3");
    s.workers = 1000;  // never queues
    EXPECT_EQ(s.limit(), 3u);
    std::vector<std::unique_ptr<Flight>> held;
    for (int i = 0; i < 5; i++) {
        int v;
        auto f = s.decide(&v);
        EXPECT_EQ(v, i < 3 ? RL_VERDICT_PASSED : RL_VERDICT_REJECTED) << i;
        EXPECT_EQ(f->rq.checks[0].decision.quota, 3u);
        held.push_back(std::move(f));
    }
    held[0]->rq.latency_ms = 20;
    held[0]->rq.end_status = 200;
    EXPECT_EQ(rl_request_end(&held[0]->rq, s.now + 20), 1);
    EXPECT_EQ(s.peek().in_flight, 2u);
}

// The same latency trace gives the same limit trace.
TEST(Adaptive, DeterministicOnATrace)
{
    std::vector<uint32_t> a, b;
    for (auto *out : {&a, &b}) {
        Sim s("algorithm=adaptive limit=64");
        for (int i = 0; i < 40; i++) {
            s.run(500, i < 10 ? 200 : 800);
            out->push_back(s.limit());
        }
    }
    EXPECT_EQ(a, b);
    EXPECT_NE(a.front(), a.back());  // it moved
}

// Under a sustained 2x load the limit settles near the upstream's W and
// stays there: the baseline does not ratchet up, so neither does the limit
// nor the latency; every worker kept busy (goodput near capacity).
TEST(Adaptive, NoRatchetUnderSustainedOverload)
{
    Sim s("algorithm=adaptive limit=64");
    s.run(10000, 0.5 * kCapacity);
    EXPECT_EQ(s.refused, 0u);  // at half capacity, nothing refused
    const uint32_t quiet_baseline = s.peek().baseline_us;
    ASSERT_GT(quiet_baseline, 10000u);
    ASSERT_LT(quiet_baseline, 25000u);

    s.run(10000, 2 * kCapacity);  // settling
    const uint64_t served_before = s.served;
    uint32_t lowest = 1000, highest = 0;
    for (int i = 0; i < 240; i++) {  // two minutes
        s.run(500, 2 * kCapacity);
        lowest = std::min(lowest, s.limit());
        highest = std::max(highest, s.limit());
    }
    EXPECT_GE(lowest, 6u);
    EXPECT_LE(highest, 11u);
    EXPECT_LE(s.peek().baseline_us, quiet_baseline * 1.15) << quiet_baseline;
    const double goodput = (double) (s.served - served_before) / 120.0;
    EXPECT_GE(goodput, 0.9 * kCapacity);
    EXPECT_GT(s.refused, 0u);
}

// The limit comes down within seconds of an overload, back up when the
// load drops and a burst needs it again, and follows an upstream whose
// service time doubles: its W is the same, so is the limit.
TEST(Adaptive, SettlesRecoversAndFollowsASlowerUpstream)
{
    Sim s("algorithm=adaptive limit=64");
    s.run(10000, 0.5 * kCapacity);
    EXPECT_EQ(s.limit(), 64u);  // never reached: never moved
    s.run(10000, 4 * kCapacity);
    EXPECT_GE(s.limit(), 6u);
    EXPECT_LE(s.limit(), 11u);

    s.run(10000, 0.5 * kCapacity);
    const uint64_t refused = s.refused;
    s.run(10000, 0.5 * kCapacity);
    EXPECT_EQ(s.refused, refused);  // at half capacity, nothing refused

    s.run(10000, 2 * kCapacity);
    s.mean_ms = 40;  // the upstream twice as slow, the load the same
    s.run(10000, 2 * kCapacity);
    uint32_t lowest = 1000, highest = 0;
    for (int i = 0; i < 20; i++) {
        s.run(500, 2 * kCapacity);
        lowest = std::min(lowest, s.limit());
        highest = std::max(highest, s.limit());
    }
    EXPECT_GE(lowest, 6u);
    EXPECT_LE(highest, 11u);
    EXPECT_GT(s.peek().baseline_us, 25000u);  // learned again, at no more concurrency
}

// An interval with too few latencies changes nothing, however long: no
// empty window turns into refusals.
TEST(Adaptive, AnEmptyWindowChangesNothing)
{
    Sim s("algorithm=adaptive limit=64");
    s.run(10000, 2 * kCapacity);
    s.run(2000, 0);  // what was in flight ends
    const rl_peek_t before = s.peek();
    ASSERT_GE(before.limit_now, 6u);
    ASSERT_LE(before.limit_now, 11u);
    s.run(120000, 0);  // nothing for two minutes
    s.run(5000, 2);    // a trickle: fewer than an interval needs
    const rl_peek_t after = s.peek();
    EXPECT_EQ(after.limit_now, before.limit_now);
    EXPECT_EQ(after.baseline_us, before.baseline_us);
}

// 502, 503 and 504 answers are drops: the limit times 0.9 an interval that
// saw one (at least one less); their latencies are not samples.
TEST(Adaptive, OverloadAnswersLowerTheLimit)
{
    Sim s("algorithm=adaptive limit=40 interval=100ms");
    for (uint32_t status : {502u, 503u, 504u}) {
        const uint32_t was = s.limit();
        std::vector<std::unique_ptr<Flight>> fl;
        for (int i = 0; i < 4; i++) {
            int v;
            auto f = s.decide(&v);
            ASSERT_EQ(v, RL_VERDICT_PASSED);
            fl.push_back(std::move(f));
        }
        for (auto &f : fl) {
            s.now += 50;  // the first starts the interval, the last ends it
            f->rq.latency_ms = 1;
            f->rq.end_status = status;
            rl_request_end(&f->rq, s.now);
        }
        EXPECT_LT(s.limit(), was) << status;
        EXPECT_GE(s.limit(), was * 81 / 100 - 2) << status;  // one or two intervals, x 0.9 each
    }
    EXPECT_EQ(s.peek().baseline_us, 0u);  // no latency learned from them
}

// A request its client abandoned (499) counts only when it already took
// longer than tolerated: a quick one says nothing.
TEST(Adaptive, AbandonedRequestsCountOnlyWhenSlow)
{
    Sim s("algorithm=adaptive limit=20 interval=100ms");
    s.workers = 1000;
    s.run(2000, 200);  // baseline about 20 ms, limit 20 never reached
    const rl_peek_t before = s.peek();
    ASSERT_GT(before.baseline_us, 0u);
    auto end_all = [&](int64_t latency) {
        std::vector<std::unique_ptr<Flight>> fl;
        for (int i = 0; i < 20; i++) {
            int v;
            auto f = s.decide(&v);
            fl.push_back(std::move(f));
        }
        s.now += 200;
        for (auto &f : fl) {
            f->rq.latency_ms = latency;
            f->rq.end_status = 499;
            rl_request_end(&f->rq, s.now);
        }
    };
    end_all(1);
    EXPECT_EQ(s.limit(), before.limit_now);
    end_all(1000);  // far slower than tolerated, the limit reached: it comes down
    EXPECT_LT(s.limit(), before.limit_now);
}
