// Parity with nginx's limit_req (leaky_bucket's delay=, two-stage limiting)
// and the IETF RateLimit headers as the draft means them: t (available_ms)
// is when more units are available, never after Retry-After, and the
// policy's quota bounds what remaining can show.
#include <random>

#include "helpers.h"

namespace {

// A look (cost 0, nothing written) at the key at `at`.
rl_decision_t look(const Key &k, int64_t at)
{
    std::vector<uint8_t> copy = k.state;
    rl_decision_t d;
    rl_transition(&k.rule, copy.data(), at, 0, 0, &d);
    return d;
}

// nginx's limit_req as its documentation and source describe it, kept the
// way it keeps it: a key's excess (requests beyond the rate, decaying at the
// rate; a new key's first request has none) and the time of its last
// admission.  A request whose excess would pass burst is rejected and
// changes nothing; one whose excess passes delay waits (excess - delay)
// intervals.  Here in exact units of 1/limit ms (excess x period), where
// nginx keeps thousandths of a request.
struct LimitReq {
    uint64_t limit, period, burst, delay;
    bool seen = false;
    uint64_t excess = 0;  // x period
    int64_t last = 0;

    // -1: rejected; else the delay in ms
    int64_t request(int64_t now)
    {
        uint64_t e = 0;
        if (seen) {
            const uint64_t decayed = (uint64_t) (now - last) * limit;
            e = excess + period > decayed ? excess + period - decayed : 0;
        }
        if (e > burst * period) {
            return -1;
        }
        seen = true;
        excess = e;
        last = now;
        return e > delay * period ? (int64_t) ((e - delay * period + limit - 1) / limit) : 0;
    }
};

}  // namespace

// ---- leaky_bucket delay=: limit_req's burst=B delay=D ------------------------

// nginx's own test of delay= (limit_req_delay.t): rate=30r/m burst=2
// delay=1, four requests at once: served, served at once (the one request
// of delay), delayed one interval, rejected.
TEST(LeakyDelay, LimitReqDelayScenario)
{
    Key k("algorithm=leaky_bucket limit=30 period=1m delay=1 max_delay=2s");
    rl_decision_t d = k.hit(kT0);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.delay_ms, 0);
    d = k.hit(kT0);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.delay_ms, 0);  // the first excess request: served at once
    d = k.hit(kT0);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.delay_ms, 2000);  // the second: delayed one interval
    d = k.hit(kT0);
    EXPECT_FALSE(d.allowed);  // the third: past burst
    EXPECT_EQ(d.retry_after_ms, 2000);
    EXPECT_EQ(d.available_ms, 2000);
    EXPECT_EQ(std::string(k.rule.name), "leaky_bucket_30_1m_d1");
}

// burst=5 nodelay is delay=5 max_delay=0: six at once, then one an interval.
TEST(LeakyDelay, NodelayIsDelayEqualToBurst)
{
    Key k("algorithm=leaky_bucket limit=10 period=1s delay=5 max_delay=0");
    for (int i = 0; i < 6; i++) {
        rl_decision_t d = k.hit(kT0);
        ASSERT_TRUE(d.allowed) << i;
        EXPECT_EQ(d.delay_ms, 0);
    }
    rl_decision_t d = k.hit(kT0);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 100);
    EXPECT_FALSE(k.hit(kT0 + 99).allowed);
    d = k.hit(kT0 + 100);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.delay_ms, 0);
}

// Over random traces, delay=D max_delay=(B - D) x T decides every request
// as limit_req burst=B delay=D does: served at once, delayed (by as long),
// or rejected.
TEST(LeakyDelay, EqualsLimitReqOnRandomTraces)
{
    std::mt19937_64 g(15);
    const struct {
        uint64_t limit, period_ms, burst, delay;
    } cases[] = {{30, 60000, 2, 1}, {10, 1000, 12, 8}, {10, 1000, 5, 0},   {10, 1000, 5, 5},
                 {1, 1000, 20, 3},  {7, 63000, 9, 4},  {100, 1000, 50, 49}};
    for (const auto &c : cases) {
        const uint64_t T = c.period_ms / c.limit;  // a whole ms here
        const std::string text = "algorithm=leaky_bucket limit=" + std::to_string(c.limit) +
                                 " period=" + std::to_string(c.period_ms) + "ms delay=" + std::to_string(c.delay) +
                                 " max_delay=" + std::to_string((c.burst - c.delay) * T) + "ms";
        Key k(text);
        LimitReq model{c.limit, c.period_ms, c.burst, c.delay};
        int64_t now = kT0;
        size_t served = 0, delayed = 0, rejected = 0;
        for (int i = 0; i < 20000; i++) {
            // runs of about 2 x burst requests faster than the rate, then a gap
            const bool gap = g() % (2 * (c.burst + 1)) == 0;
            now += (int64_t) (gap ? g() % (2 * T * (c.burst + 1)) : g() % (T / 2 + 1));
            const int64_t expect = model.request(now);
            const rl_decision_t d = k.hit(now);
            ASSERT_EQ(d.allowed != 0, expect >= 0) << text << " request " << i;
            if (expect >= 0) {
                ASSERT_EQ(d.delay_ms, expect) << text << " request " << i;
            }
            (expect < 0 ? rejected : expect == 0 ? served : delayed)++;
        }
        EXPECT_GT(served, 1000u) << text;
        EXPECT_GT(rejected, 100u) << text;
        if (c.burst > c.delay) {
            EXPECT_GT(delayed, 100u) << text;
        }
    }
}

TEST(LeakyDelay, HeadersCountWhatIsServedAtOnce)
{
    // 10 a second, 3 at once, then waits of at most 200 ms: a rested key
    // admits 1 + 3 + 2 = 6
    Key k("algorithm=leaky_bucket limit=10 period=1s delay=3 max_delay=200ms");
    rl_decision_t d = look(k, kT0);
    EXPECT_EQ(d.remaining, 6u);
    EXPECT_EQ(d.quota, 6u);
    EXPECT_EQ(d.window_ms, 600);  // 6 intervals to restore them
    EXPECT_EQ(d.available_ms, 0);
    d = k.hit(kT0);
    EXPECT_EQ(d.remaining, 5u);
    EXPECT_EQ(d.available_ms, 100);
    EXPECT_EQ(d.reset_ms, 100);
    for (int i = 0; i < 5; i++) {
        d = k.hit(kT0);
    }
    EXPECT_EQ(d.delay_ms, 200);  // the sixth waits two intervals
    EXPECT_EQ(d.remaining, 2u);  // seen at its release: the queue is 400 ms
    EXPECT_EQ(d.reset_ms, 400);
    EXPECT_EQ(d.available_ms, 100);
    d = k.hit(kT0);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 100);
}

TEST(LeakyDelay, RuleBoundsAndErrors)
{
    rl_rule_t r;
    char err[RL_ERR_MAX];
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "algorithm=gcra limit=5 delay=2", err, sizeof(err)), RL_ERROR);
    EXPECT_STREQ(err, "\"delay=\" does not apply to algorithm=gcra: delay is for leaky_bucket");
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "algorithm=leaky_bucket limit=5 delay=-1", err, sizeof(err)), RL_ERROR);
    EXPECT_STREQ(err, "invalid \"delay=-1\": expected an integer from 0 to 1000000000");
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "algorithm=leaky_bucket limit=5 delay=$d", err, sizeof(err)), RL_ERROR);
    EXPECT_EQ(
        rl_rule_parse(&r, name_room(), "algorithm=leaky_bucket limit=1 period=366d delay=1000000000", err, sizeof(err)),
        RL_ERROR);
    EXPECT_STREQ(err,
                 "limit=1 and delay=1000000000 with \"period=366d\" and max_delay are too large: (limit + delay) x "
                 "period + limit x max_delay in ms may be at most 2^61");
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "algorithm=leaky_bucket limit=1 period=26d delay=88000000 max_delay=0",
                            err, sizeof(err)),
              RL_OK)
        << err;
    EXPECT_EQ(rl_redis_rule_ok(&r, err, sizeof(err)), RL_ERROR);  // past 2^50 for Redis
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "algorithm=leaky_bucket limit=10 delay=0", err, sizeof(err)), RL_OK);
    EXPECT_STREQ(r.name, "leaky_bucket_10_1s");
}

// ---- RateLimit's t, Retry-After, and the policy -----------------------------

// A rejection's t is its Retry-After, an admission's t when the next unit
// comes back (not the full budget's).
TEST(Headers, TIsWhenUnitsComeBackAndNeverAfterRetryAfter)
{
    Key g("limit=2 period=1m");
    rl_decision_t d = g.hit(kT0);
    EXPECT_EQ(d.available_ms, 30000);
    EXPECT_EQ(d.reset_ms, 30000);
    d = g.hit(kT0);
    EXPECT_EQ(d.available_ms, 30000);  // one unit back in 30 s
    EXPECT_EQ(d.reset_ms, 60000);      // both in 60 s
    d = g.hit(kT0);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 30000);
    EXPECT_EQ(d.available_ms, 30000);

    Key c("limit=5 period=1m cost=4");
    d = c.hit(kT0, 4);
    EXPECT_EQ(d.remaining, 1u);
    EXPECT_EQ(d.available_ms, 12000);
    EXPECT_EQ(d.reset_ms, 48000);
    d = c.hit(kT0, 4);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 36000);  // three units more
    EXPECT_EQ(d.available_ms, 36000);

    Key w("algorithm=sliding_window limit=2 period=1m buckets=1");
    w.hit(kT0);
    w.hit(kT0 + 30000);
    d = w.hit(kT0 + 30000);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.available_ms, d.retry_after_ms);

    Key n("limit=2 period=1m");  // a cost never admitted: t is the full budget
    n.hit(kT0);
    d = n.hit(kT0, 3);
    EXPECT_TRUE(d.never);
    EXPECT_EQ(d.available_ms, 30000);
    EXPECT_EQ(d.retry_after_ms, 30000);

    Key l("algorithm=sliding_log limit=3 period=1m");
    l.hit(kT0);
    d = l.hit(kT0 + 10000);
    EXPECT_EQ(d.available_ms, 50000);  // the first unit leaves first
    EXPECT_EQ(d.reset_ms, 60000);

    Key f("algorithm=fixed_window limit=3 period=1m");
    d = f.hit(kT0 + 15000);
    EXPECT_EQ(d.available_ms, 45000);  // all come back at the window's end
    EXPECT_EQ(d.available_ms, d.reset_ms);
}

TEST(Headers, PolicyQuotaBoundsRemaining)
{
    const struct {
        const char *rule;
        uint64_t quota;
        int64_t window_ms;
    } cases[] = {
        {"limit=5 period=1m burst=9", 9, 108000},  // the burst: q=limit would show r=9 > q
        {"limit=5 period=1m", 5, 60000},
        {"algorithm=token_bucket limit=10 period=1s burst=1", 1, 100},
        {"limit=7 period=1m burst=3", 3, 25715},  // ceil(3 x 60000 / 7)
        {"algorithm=leaky_bucket limit=10 period=1s max_delay=500ms", 6, 600},
        {"algorithm=leaky_bucket limit=10 period=1s delay=8 max_delay=400ms", 13, 1300},
        {"algorithm=leaky_bucket limit=1 period=1s max_delay=5s", 6, 6000},
        {"algorithm=fixed_window limit=4 period=1h", 4, 3600000},
        {"algorithm=sliding_window limit=4 period=1h", 4, 3600000},
        {"algorithm=sliding_log limit=4 period=1h", 4, 3600000},
        {"algorithm=quota limit=4 reset=daily", 4, 86400000},
    };
    for (const auto &c : cases) {
        Key k(c.rule);
        rl_decision_t d = look(k, kT0);
        EXPECT_EQ(d.quota, c.quota) << c.rule;
        EXPECT_EQ(d.window_ms, c.window_ms) << c.rule;
        EXPECT_EQ(d.remaining, c.quota) << c.rule << ": a rested key shows the whole quota";
        for (uint64_t i = 0; i < c.quota; i++) {
            d = k.hit(kT0);
            EXPECT_TRUE(d.allowed) << c.rule;
            EXPECT_EQ(d.quota, c.quota) << c.rule;
        }
        d = look(k, kT0);
        EXPECT_EQ(d.remaining, 0u) << c.rule << ": the quota spent at once";
        if (c.window_ms < 3600000) {  // the paced rules: all back within the window
            EXPECT_LE(d.reset_ms, c.window_ms) << c.rule;
            EXPECT_EQ(look(k, kT0 + d.reset_ms).remaining, c.quota) << c.rule;
        }
    }
}

// On random traces of every algorithm: remaining never above the quota; an
// admitted request's t is exactly when remaining next grows (or the key is
// back to full budget), never after its reset; a denied one's t is its
// Retry-After.
TEST(Headers, TIsExactOnRandomTraces)
{
    const char *const rules[] = {
        "algorithm=gcra limit=5 period=1m",
        "algorithm=gcra limit=7 period=10s burst=12",
        "algorithm=token_bucket limit=3 period=1s burst=1",
        "algorithm=fixed_window limit=5 period=10s",
        "algorithm=fixed_window limit=5 period=10s align=first",
        "algorithm=sliding_window limit=6 period=10s buckets=1",
        "algorithm=sliding_window limit=9 period=7s buckets=5",
        "algorithm=sliding_window limit=20 period=1m buckets=100",
        "algorithm=sliding_log limit=6 period=10s",
        "algorithm=leaky_bucket limit=4 period=1s max_delay=1s",
        "algorithm=leaky_bucket limit=3 period=1s delay=2 max_delay=700ms",
        "algorithm=leaky_bucket limit=7 period=1m delay=4 max_delay=0",
        "algorithm=quota limit=5 reset=daily",
    };
    std::mt19937_64 g(5);
    for (const char *text : rules) {
        Key k(text);
        const int64_t P = k.rule.period_ms < 60000 ? k.rule.period_ms : 60000;
        int64_t now = kT0 + (int64_t) (g() % 100000);
        for (int i = 0; i < 3000; i++) {
            now += (int64_t) (g() % 3 == 0 ? g() % (uint64_t) P : g() % (uint64_t) (P / 10 + 1));
            const uint64_t cost = g() % 10 == 0 ? 0 : g() % 10 == 0 ? 1 + g() % 4 : 1;
            const rl_decision_t d = k.hit(now, cost);
            ASSERT_LE(d.remaining, d.quota) << text << " op " << i;
            if (!d.allowed) {
                ASSERT_EQ(d.available_ms, d.never ? d.reset_ms : d.retry_after_ms) << text << " op " << i;
                continue;
            }
            ASSERT_LE(d.available_ms, d.reset_ms) << text << " op " << i;
            const int64_t at = now + d.delay_ms;  // the headers describe the release
            const int64_t t = d.available_ms;
            if (t == 0) {
                ASSERT_EQ(look(k, at).remaining, d.quota) << text << " op " << i << ": t=0 only at full budget";
                continue;
            }
            ASSERT_EQ(look(k, at + t - 1).remaining, d.remaining) << text << " op " << i << " t=" << t;
            const rl_decision_t after = look(k, at + t);
            ASSERT_TRUE(after.remaining > d.remaining || after.reset_ms == 0)
                << text << " op " << i << " t=" << t << ": remaining " << after.remaining;
        }
    }
}
