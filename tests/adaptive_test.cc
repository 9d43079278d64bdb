// algorithm=adaptive through the core as nginx uses it (rl_decide takes a
// slot, rl_request_end gives it back with the upstream's latency and
// status), against a simulated upstream: W workers each serving one
// request at a time, service times log-normal, requests beyond W queued in
// arrival order; arrivals open-loop (Poisson) at a set rate.  Seeded: a
// trace gives the same limits every run.
#include <cmath>
#include <cstring>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/algorithm.h"
#include "helpers.h"

namespace {

const uint8_t kSecret[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};

// What a request asks of the upstream: a service time of its mean times
// factor, and the status it ends with; what became of those of its kind.
struct Kind {
    double factor = 1;
    uint32_t status = 200;
    uint64_t served = 0, refused = 0;
};

struct Flight {
    std::vector<rl_check_t> checks;
    rl_request_t rq;
    int64_t arrived;
    size_t kind;
    int client;  // its closed-loop client (-1: an open-loop arrival)
};

// A client that sends its next request once the last one is answered
// (after a refusal, retry_ms later).
struct Client {
    size_t kind;
    int64_t next;
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
    std::vector<Kind> kinds{Kind{}};
    std::vector<double> mix;  // an open-loop arrival's kind: kind i + 1 with probability mix[i], else kind 0
    std::vector<Client> clients;
    int64_t think_ms = 2, retry_ms = 5;  // a client's next request after an answer, after a refusal

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

    // A kind of request (its index in kinds).
    size_t kind(double factor, uint32_t status = 200)
    {
        kinds.push_back(Kind{factor, status});
        return kinds.size() - 1;
    }

    // n closed-loop clients of a kind.
    void add_clients(size_t n, size_t k)
    {
        for (size_t i = 0; i < n; i++) {
            clients.push_back(Client{k, now + (int64_t) i});
        }
    }

    double service(double factor)
    {
        const double mu = std::log(mean_ms * factor) - sigma * sigma / 2;
        return std::exp(std::normal_distribution<double>(mu, sigma)(rng));
    }

    void start(Flight *f) { serving.emplace_back(now + (int64_t) std::llround(service(kinds[f->kind].factor)), f); }

    // A request of the key decided now (*verdict: rl_decide's).
    std::unique_ptr<Flight> decide(int *verdict)
    {
        auto f = std::make_unique<Flight>();
        f->checks.push_back(check_of(zone->mem, &rule, 100, key, 1, counters));
        f->rq = hashed(request_of(f->checks.data(), 1));
        f->rq.holder = 1;
        f->arrived = now;
        f->kind = 0;
        f->client = -1;
        *verdict = rl_decide(&f->rq, now);
        return f;
    }

    void arrive(size_t k = 0, int client = -1)
    {
        int verdict;
        auto f = decide(&verdict);
        f->kind = k;
        f->client = client;
        if (verdict != RL_VERDICT_PASSED) {
            refused++;
            kinds[k].refused++;
            if (client >= 0) {
                clients[(size_t) client].next = now + retry_ms;
            }
            return;
        }
        if (client >= 0) {
            clients[(size_t) client].next = INT64_MAX;
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
        kinds[f->kind].served++;
        if (f->client >= 0) {
            clients[(size_t) f->client].next = now + think_ms;
        }
    }

    size_t open_kind()
    {
        double u = std::uniform_real_distribution<double>(0, 1)(rng);
        for (size_t i = 0; i < mix.size(); i++) {
            if (u < mix[i]) {
                return i + 1;
            }
            u -= mix[i];
        }
        return 0;
    }

    // Runs ms milliseconds, open-loop arrivals at rate requests a second
    // beside the clients.
    void run(int64_t ms, double rate)
    {
        std::exponential_distribution<double> gap(rate > 0 ? rate / 1000.0 : 1);
        double next = (double) now + (rate > 0 ? gap(rng) : 1e18);
        const int64_t until = now + ms;
        for (; now < until; now++) {
            for (size_t i = 0; i < serving.size();) {
                if (serving[i].first <= now) {
                    Flight *f = serving[i].second;
                    serving.erase(serving.begin() + (long) i);
                    end(f, kinds[f->kind].status);
                    if (!waiting.empty()) {
                        start(waiting.front());
                        waiting.pop();
                    }
                } else {
                    i++;
                }
            }
            while (next <= (double) now) {
                arrive(open_kind());
                next += gap(rng);
            }
            // the clients due, from one drawn at random: none comes first always
            const size_t first = clients.empty() ? 0 : (size_t) (rng() % clients.size());
            for (size_t k = 0; k < clients.size(); k++) {
                const size_t c = (first + k) % clients.size();
                if (clients[c].next <= now) {
                    arrive(clients[c].kind, (int) c);
                }
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
    EXPECT_EQ(rl::own_value(r, "min"), 1);
    EXPECT_EQ(rl::own_value(r, "tolerance"), 120);
    EXPECT_EQ(rl::own_value(r, "interval"), 500);
    ASSERT_EQ(rl_rule_parse(&r, name_room(), "algorithm=adaptive limit=64 min=4 initial=16 tolerance=1.5 interval=1s",
                            err, sizeof(err)),
              RL_OK)
        << err;
    EXPECT_EQ(rl::own_value(r, "min"), 4);
    EXPECT_EQ(rl::own_value(r, "initial"), 16);
    EXPECT_EQ(rl::own_value(r, "tolerance"), 150);
    EXPECT_EQ(rl::own_value(r, "interval"), 1000);
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
    EXPECT_EQ(rl::own_value(r, "tolerance"), 1000);
    ASSERT_EQ(rl_rule_parse(&r, name_room(), "algorithm=adaptive limit=8 tolerance=1.05", err, sizeof(err)), RL_OK)
        << err;
    EXPECT_EQ(rl::own_value(r, "tolerance"), 105);
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
    // at half capacity (2,000 requests), nothing refused but a Poisson burst
    // past the limit the overload left, which raises it: at most one in 500
    EXPECT_LE(s.refused - refused, 4u);

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

// 502, 503 and 504 answers are drops: in more than a tenth of an
// interval's requests, at least 3 of them and 16 requests ended, the limit
// times 0.9; their latencies are not samples, nor are a 404's.
TEST(Adaptive, DropsInMoreThanATenthLowerTheLimit)
{
    // one interval's ends: 404s, then drops; the limit after each
    auto limits = [](uint32_t status, const std::vector<uint32_t> &ends) {
        Sim s("algorithm=adaptive limit=40 interval=100ms");
        std::vector<uint32_t> out;
        std::vector<std::unique_ptr<Flight>> fl;
        for (size_t i = 0; i < ends.size(); i++) {
            int v;
            fl.push_back(s.decide(&v));
            EXPECT_EQ(v, RL_VERDICT_PASSED);
        }
        for (size_t i = 0; i < ends.size(); i++) {
            fl[i]->rq.latency_ms = 1;
            fl[i]->rq.end_status = ends[i] != 0 ? ends[i] : status;
            rl_request_end(&fl[i]->rq, s.now);
            s.now += i == 0 ? 100 : 0;  // the first starts the interval
            out.push_back(s.limit());
        }
        EXPECT_EQ(s.peek().baseline_us, 0u);  // no latency learned from them
        return out;
    };
    for (uint32_t status : {502u, 503u, 504u}) {
        SCOPED_TRACE(status);
        // 2 drops of 16 (12.5%), then 3 of 21
        std::vector<uint32_t> ends(14, 404);
        ends.insert(ends.end(), {0, 0, 404, 404, 404, 404, 0});
        std::vector<uint32_t> want(20, 40);
        want.push_back(36);
        EXPECT_EQ(limits(status, ends), want);
        // 3 drops of 30 (a tenth), then 4 of 31
        ends.assign(27, 404);
        ends.insert(ends.end(), {0, 0, 0, 0});
        want.assign(30, 40);
        want.push_back(36);
        EXPECT_EQ(limits(status, ends), want);
    }
}

// A trace of fast requests beside slow ones (20 times as slow), at an
// upstream with room to spare (it never queues), behind `rule`: the
// requests of each kind served, and the lowest limit of its intervals.
struct Trace {
    size_t fast, slow;           // closed-loop clients,
    int64_t think, retry;        //   their pauses after an answer and after a refusal (ms)
    double rate, slow_share;     // open-loop arrivals a second, a share of them slow
    uint32_t slow_status = 200;  // what the slow ones end with (504: they time out)
};

std::vector<uint64_t> served_behind(const char *rule, const Trace &t, uint32_t *lowest, double *mean)
{
    Sim s(rule);
    s.workers = 1000;
    const size_t slow = s.kind(20, t.slow_status);
    s.mix = {t.slow_share};
    s.add_clients(t.fast, 0);
    s.add_clients(t.slow, slow);
    s.think_ms = t.think;
    s.retry_ms = t.retry;
    *lowest = s.limit();
    *mean = 0;
    for (int i = 0; i < 120; i++) {
        s.run(500, t.rate);
        *lowest = std::min(*lowest, s.limit());
        *mean += s.limit() / 120.0;
    }
    return {s.kinds[0].served, s.kinds[slow].served};
}

// 5% of the requests slow, open-loop (they hold half of the slots): the
// limit stays within 25% of limit= in every interval, and the fast
// requests' goodput within 10% of what a static limit of 16 lets through.
TEST(Adaptive, AMinorityOfSlowRequestsKeepsTheLimit)
{
    for (const Trace &t : {Trace{0, 0, 0, 0, 380, 0.05}, Trace{0, 0, 0, 0, 450, 0.05}}) {
        uint32_t lowest, ignored;
        double mean;
        const std::vector<uint64_t> served = served_behind("algorithm=adaptive limit=16", t, &lowest, &mean);
        const std::vector<uint64_t> ref = served_behind("algorithm=concurrency limit=16", t, &ignored, &mean);
        SCOPED_TRACE(testing::Message() << "rate " << t.rate << ": slow share "
                                        << (double) served[1] / (double) (served[0] + served[1]));
        EXPECT_GE(lowest, 12u);
        EXPECT_GE((double) served[0], 0.9 * (double) ref[0]) << ref[0];
        EXPECT_GT(served[1], 0u);
    }
}

// The closed-loop clients of an API, 12 on a slow endpoint beside 20 on a
// fast one, whatever their pauses: a tenth of the requests slow, holding two
// thirds of the slots, and more of them whenever the limit is lower, so that
// a lower limit makes the typical request slower (the mix, not a queue).  A
// step down after which the typical request is slower is taken back: the
// limit does not collapse (its mean within 10% of limit=, its lowest within
// half), nor does the fast clients' goodput (within 10% of a static limit's).
TEST(Adaptive, SlowClientsBesideFastOnesDoNotCollapseTheLimit)
{
    for (const Trace &t : {Trace{20, 12, 0, 20, 0, 0}, Trace{20, 12, 1, 5, 0, 0}, Trace{20, 12, 2, 5, 0, 0},
                           Trace{20, 12, 2, 40, 0, 0}, Trace{20, 12, 3, 2, 0, 0}, Trace{20, 12, 5, 1, 0, 0}}) {
        uint32_t lowest, ignored;
        double mean;
        const std::vector<uint64_t> served = served_behind("algorithm=adaptive limit=16", t, &lowest, &mean);
        double unused;
        const std::vector<uint64_t> ref = served_behind("algorithm=concurrency limit=16", t, &ignored, &unused);
        SCOPED_TRACE(testing::Message() << "think " << t.think << ", retry " << t.retry << ": slow share "
                                        << (double) served[1] / (double) (served[0] + served[1]));
        EXPECT_GE(mean, 0.9 * 16);
        EXPECT_GE(lowest, 8u);
        EXPECT_GE((double) served[0], 0.9 * (double) ref[0]) << ref[0];
    }
}

// The same where the slow endpoint times out (504), its requests a tenth to
// a fifth of all: drops in more than a tenth of the requests are an
// overload, which the controller cannot tell from an endpoint failing on
// its own (it needs a rule of its own).  A step down after which more
// requests fail, with fewer in flight, is taken back: the limit comes down
// but not to min= (its mean above half of limit=; under 3 without that).
TEST(Adaptive, ClientsOfATimingOutEndpointDoNotCollapseTheLimit)
{
    for (const Trace &t :
         {Trace{20, 12, 0, 20, 0, 0, 504}, Trace{20, 12, 2, 5, 0, 0, 504}, Trace{20, 12, 5, 1, 0, 0, 504}}) {
        uint32_t lowest;
        double mean;
        const std::vector<uint64_t> served = served_behind("algorithm=adaptive limit=16", t, &lowest, &mean);
        SCOPED_TRACE(testing::Message() << "think " << t.think << ", retry " << t.retry << ": timeouts' share "
                                        << (double) served[1] / (double) (served[0] + served[1]));
        EXPECT_GE(mean, 16 / 2.0);
    }
}

// A real overload with the same slow minority: an upstream of W = 8 at
// twice what it can serve.  The limit still comes down near W, and the
// upstream serves within 10% of what a static limit of W lets it.
TEST(Adaptive, AnOverloadWithASlowMinorityIsShed)
{
    auto run = [](const char *rule, uint32_t *highest) {
        Sim s(rule);
        const size_t slow = s.kind(20);
        s.mix = {0.05};
        const double capacity = s.workers * 1000 / (s.mean_ms * (0.95 + 0.05 * 20));  // 205 a second
        s.run(10000, 0.5 * capacity);
        const uint64_t refused = s.refused;
        s.run(10000, 2 * capacity);
        const uint64_t served = s.served;
        for (int i = 0; i < 120; i++) {
            s.run(500, 2 * capacity);
            *highest = std::max(*highest, s.limit());
        }
        EXPECT_GT(s.kinds[slow].served, 0u);
        return std::make_pair((double) (s.served - served) / 60, refused);
    };
    uint32_t highest = 0, ignored = 0;
    const auto [adaptive, quiet_refused] = run("algorithm=adaptive limit=64", &highest);
    const double oracle = run("algorithm=concurrency limit=8", &ignored).first;
    EXPECT_EQ(quiet_refused, 0u);  // at half its capacity, nothing refused
    EXPECT_LE(highest, 16u);
    EXPECT_GE(adaptive, 0.9 * oracle) << oracle;
}

// Fast answers that are errors, a flood of them: 404s and 500s at a tenth
// of the upstream's latency, as many clients as the real ones; and a thread
// of 502s (8 a second) beside 20 clients.  The baseline is the real
// requests' (as with the same clients alone), the limit stays within 25% of
// limit=, the real clients' goodput within 10% of what a static limit of 16
// lets through.
TEST(Adaptive, FastErrorsAreNoEvidence)
{
    auto run = [](const char *rule, uint32_t status, size_t clients, bool thread) {
        auto s = std::make_unique<Sim>(rule);
        s->workers = 1000;
        s->add_clients(20, 0);
        const size_t err = s->kind(status == 502 ? 0.05 : 0.1, status);
        s->add_clients(clients, err);
        s->retry_ms = 20;
        uint32_t lowest = 16;
        for (int i = 0; i < 60; i++) {
            for (int k = 0; k < 4; k++) {
                s->run(125, 0);
                if (thread) {
                    s->arrive(err);
                }
            }
            lowest = std::min(lowest, s->limit());
        }
        return std::make_pair(std::move(s), lowest);
    };
    const uint32_t baseline = run("algorithm=adaptive limit=16", 200, 0, false).first->peek().baseline_us;
    for (const auto &c :
         {std::make_tuple(404u, 20, false), std::make_tuple(500u, 20, false), std::make_tuple(502u, 0, true)}) {
        const auto r = run("algorithm=adaptive limit=16", std::get<0>(c), (size_t) std::get<1>(c), std::get<2>(c));
        const uint64_t ref =
            run("algorithm=concurrency limit=16", std::get<0>(c), (size_t) std::get<1>(c), std::get<2>(c))
                .first->kinds[0]
                .served;
        SCOPED_TRACE(testing::Message() << std::get<0>(c));
        EXPECT_GT(r.first->kinds[1].served, 100u);  // there were many
        EXPECT_GE(r.first->peek().baseline_us, baseline * 85 / 100);
        EXPECT_LE(r.first->peek().baseline_us, baseline * 115 / 100);
        EXPECT_GE(r.second, 12u);
        EXPECT_GE((double) r.first->kinds[0].served, 0.9 * (double) ref) << ref;
    }
}

// An upstream that dies fails every request at once (502 in a millisecond):
// no latency learned from that, the baseline stays; the limit comes down
// (every request a drop), and back once the upstream is back.
TEST(Adaptive, ADeadUpstreamIsNotAFastOne)
{
    Sim s("algorithm=adaptive limit=16");
    s.workers = 1000;
    s.add_clients(20, 0);
    s.run(10000, 0);
    const rl_peek_t healthy = s.peek();
    ASSERT_GT(healthy.baseline_us, 10000u);
    s.kinds[0].factor = 0.05;
    s.kinds[0].status = 502;
    s.run(12000, 0);
    EXPECT_EQ(s.peek().baseline_us, healthy.baseline_us);
    EXPECT_LE(s.limit(), 4u);
    s.kinds[0] = Kind{};
    s.run(10000, 0);
    EXPECT_EQ(s.limit(), 16u);
    EXPECT_GE(s.peek().baseline_us, healthy.baseline_us * 85 / 100);
}

// A controller a dead process half wrote (every byte of it garbage: the
// latencies not numbers or far past any, a limit past limit=, a step taken
// in the future, a histogram full) is read as a fresh one where it cannot
// be right: the limit stays within min= and limit=, and the key learns
// again (its baseline the upstream's, its limit limit=, as it never queues).
TEST(Adaptive, AControllerHalfWrittenLearnsAgain)
{
    const rl_rule_t slots = rule_of("algorithm=concurrency limit=16");
    for (int garbage : {0xff, 0x7f}) {
        Sim s("algorithm=adaptive limit=16");
        s.workers = 1000;
        s.add_clients(20, 0);
        s.run(5000, 0);
        const uint32_t baseline = s.peek().baseline_us;
        ASSERT_GT(baseline, 10000u);
        rl::State st{};
        ASSERT_TRUE(rl::Table::at(s.zone->mem)->find(rl_table_tag(s.zone->mem, 100, s.key.data(), s.key.size()), &st));
        const size_t from = (rl_state_size(&slots) - sizeof(rl_state_t) + 7) & ~(size_t) 7;  // after the slots
        std::memset(st.blob + from, garbage, rl_state_size(&s.rule) - sizeof(rl_state_t) - from);
        uint32_t lowest = 16, highest = 0;
        for (int i = 0; i < 20; i++) {
            s.run(500, 0);
            lowest = std::min(lowest, s.limit());
            highest = std::max(highest, s.limit());
        }
        SCOPED_TRACE(garbage);
        EXPECT_GE(lowest, 1u);
        EXPECT_LE(highest, 16u);
        EXPECT_EQ(s.limit(), 16u);
        EXPECT_GE(s.peek().baseline_us, baseline * 80 / 100);
        EXPECT_LE(s.peek().baseline_us, baseline * 120 / 100);
    }
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
