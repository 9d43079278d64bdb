// Boundaries of every algorithm: the exact request first denied, the exact
// retry-after, the remaining sequence, recovery after the wait, clocks
// stepping backwards, long periods, cost > 1 and cost 0.
#include <algorithm>
#include <random>

#include "algorithms/algorithms.h"
#include "helpers.h"

// ---- gcra ----------------------------------------------------------------

TEST(Gcra, ColdKeyAdmitsExactlyBurstThenDenies)
{
    Key k("limit=10 period=1s burst=5");
    for (uint64_t i = 0; i < 5; i++) {
        rl_decision_t d = k.hit(kT0);
        ASSERT_TRUE(d.allowed) << "request " << i + 1;
        EXPECT_EQ(d.remaining, 4 - i);
    }
    rl_decision_t d = k.hit(kT0);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.remaining, 0u);
    EXPECT_EQ(d.retry_after_ms, 100);  // T = 100 ms
    EXPECT_EQ(d.reset_ms, 500);        // five emissions ahead
}

TEST(Gcra, AllowsOnEqualityAndNotOneMsBefore)
{
    Key k("limit=10 period=1s burst=5");
    for (int i = 0; i < 5; i++) {
        k.hit(kT0);
    }
    EXPECT_FALSE(k.hit(kT0 + 99).allowed);
    EXPECT_EQ(k.hit(kT0 + 99).retry_after_ms, 1);
    rl_decision_t d = k.hit(kT0 + 100);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 0u);
    EXPECT_FALSE(k.hit(kT0 + 100).allowed);
}

TEST(Gcra, PacesAtExactlyOnePerTWithNoDrift)
{
    // 7 per minute: T = 60000/7 ms is not an integer.  Hammered every 10 ms
    // for 1000 minutes, the key gets its burst of 7 and then exactly 7000:
    // the 7000th paced admission is due at exactly 60,000,000 ms.  A T
    // rounded to 8571 ms would admit it 3 s early, 8572 ms 3.5 s late.
    Key k("limit=7 period=1m");
    int64_t admitted = 0;
    for (int64_t t = 0; t < 60000000; t += 10) {
        admitted += k.hit(kT0 + t).allowed;
    }
    EXPECT_EQ(admitted, 7 + 6999);
    EXPECT_TRUE(k.hit(kT0 + 60000000).allowed);
    EXPECT_FALSE(k.hit(kT0 + 60000000).allowed);
}

TEST(Gcra, RecoversFullBudgetAfterReset)
{
    Key k("limit=100 period=1m burst=20");
    rl_decision_t last{};
    for (int i = 0; i < 20; i++) {
        last = k.hit(kT0);
    }
    EXPECT_EQ(last.reset_ms, 12000);  // 20 x 600 ms
    rl_decision_t d = k.hit(kT0 + 12000);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 19u);
}

TEST(Gcra, CostSpendsSeveralUnitsAndZeroLooks)
{
    Key k("limit=10 period=10s");
    rl_decision_t d = k.hit(kT0, 0);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 10u);
    EXPECT_EQ(d.reset_ms, 0);
    EXPECT_EQ(k.head().t, 0);  // looking stores nothing

    d = k.hit(kT0, 7);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 3u);
    d = k.hit(kT0, 4);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.remaining, 3u);
    EXPECT_EQ(d.retry_after_ms, 1000);
    EXPECT_TRUE(k.hit(kT0, 3).allowed);
    EXPECT_TRUE(k.hit(kT0, 0).allowed);
    EXPECT_EQ(k.hit(kT0, 0).remaining, 0u);
}

TEST(Gcra, CostAboveBurstIsNeverAdmitted)
{
    Key k("limit=10 period=1s burst=5");
    rl_decision_t d = k.hit(kT0, 6);
    EXPECT_FALSE(d.allowed);
    EXPECT_TRUE(d.never);
    EXPECT_EQ(d.remaining, 5u);
    EXPECT_GE(d.retry_after_ms, 1000);
    EXPECT_FALSE(k.hit(kT0 + 3600000, 6).allowed);
}

TEST(Gcra, ThirtyDayPeriod)
{
    Key k("limit=3 period=30d");
    for (int i = 0; i < 3; i++) {
        ASSERT_TRUE(k.hit(kT0).allowed);
    }
    rl_decision_t d = k.hit(kT0);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 10LL * 86400000);
    EXPECT_EQ(d.reset_ms, 30LL * 86400000);
    EXPECT_TRUE(k.hit(kT0 + 10LL * 86400000).allowed);
}

TEST(Gcra, HugeLimitAndSubMillisecondInterval)
{
    Key k("limit=1000000000 period=1s burst=1000000000");
    EXPECT_TRUE(k.hit(kT0, 1000000000).allowed);
    rl_decision_t d = k.hit(kT0, 1);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 1);                // 1 ns of refill, rounded up to 1 ms
    EXPECT_TRUE(k.hit(kT0 + 1, 1000000).allowed);  // 1 ms refills a million
    EXPECT_FALSE(k.hit(kT0 + 1, 1).allowed);
}

TEST(Gcra, BackwardClockStepNeverAdmitsMore)
{
    Key k("limit=10 period=10s");
    for (int i = 0; i < 10; i++) {
        ASSERT_TRUE(k.hit(kT0 + 5000).allowed);
    }
    // The clock steps back a minute.  The key's schedule stays in absolute
    // time: nothing is admitted before it would have been without the step,
    // and Retry-After says so honestly.
    const int64_t back = kT0 + 5000 - 60000;
    rl_decision_t d = k.hit(back);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.remaining, 0u);
    EXPECT_EQ(d.retry_after_ms, 61000);
    EXPECT_FALSE(k.hit(kT0 + 5999).allowed);
    EXPECT_TRUE(k.hit(kT0 + 6000).allowed);
    // a step back of decades saturates instead of overflowing
    EXPECT_FALSE(k.hit(kT0 - 40LL * 365 * 86400000).allowed);
}

// ---- token_bucket --------------------------------------------------------

TEST(TokenBucket, StartsFullSpendsAndRefillsContinuously)
{
    Key k("algorithm=token_bucket limit=2 period=1s burst=4");  // 1 token per 500 ms
    for (uint64_t i = 0; i < 4; i++) {
        rl_decision_t d = k.hit(kT0);
        ASSERT_TRUE(d.allowed);
        EXPECT_EQ(d.remaining, 3 - i);
    }
    rl_decision_t d = k.hit(kT0 + 250);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 250);
    EXPECT_EQ(d.reset_ms, 1750);
    EXPECT_TRUE(k.hit(kT0 + 500).allowed);
    // idle for an hour: the bucket holds burst, not more
    EXPECT_EQ(k.hit(kT0 + 3600000).remaining, 3u);
}

// token_bucket is GCRA (gcra.cpp): here against a bucket of tokens kept
// the plain way, in exact integers (tokens x period), on random traces.
TEST(TokenBucket, DecisionsEqualABucketOfTokensOnRandomTraces)
{
    std::mt19937_64 rng(42);
    for (int trial = 0; trial < 50; trial++) {
        const uint64_t limit = 1 + rng() % 50, burst = 1 + rng() % 60;
        const int64_t period = 1 + (int64_t) (rng() % 100000);
        Key t("algorithm=token_bucket limit=" + std::to_string(limit) + " period=" + std::to_string(period) +
              "ms burst=" + std::to_string(burst));
        uint64_t tokens = burst * (uint64_t) period;  // full, scaled by period
        int64_t now = kT0, last = kT0;
        for (int i = 0; i < 2000; i++) {
            now += (int64_t) (rng() % (uint64_t) (2 * period / (int64_t) limit + 2));
            tokens = std::min<uint64_t>(burst * (uint64_t) period, tokens + (uint64_t) (now - last) * limit);
            last = now;
            const uint64_t cost = rng() % (burst + 2), spend = cost * (uint64_t) period;
            const rl_decision_t d = t.hit(now, cost);
            if (cost > burst) {
                ASSERT_FALSE(d.allowed);
                continue;
            }
            ASSERT_EQ((bool) d.allowed, tokens >= spend) << "trial " << trial << " step " << i;
            if (d.allowed) {
                tokens -= spend;
                ASSERT_EQ(d.remaining, tokens / (uint64_t) period);
            } else {
                ASSERT_EQ(d.remaining, tokens / (uint64_t) period);
                ASSERT_EQ((uint64_t) d.retry_after_ms, (spend - tokens + limit - 1) / limit);  // ceil
            }
        }
    }
}

TEST(TokenBucket, BackwardStepDoesNotRefill)
{
    Key k("algorithm=token_bucket limit=1 period=1s burst=1");
    EXPECT_TRUE(k.hit(kT0).allowed);
    EXPECT_FALSE(k.hit(kT0 - 10000).allowed);
    EXPECT_FALSE(k.hit(kT0 + 999).allowed);
    EXPECT_TRUE(k.hit(kT0 + 1000).allowed);
}

// ---- fixed_window --------------------------------------------------------

TEST(FixedWindow, ExactlyLimitPerEpochAlignedWindow)
{
    Key k("algorithm=fixed_window limit=3 period=1m");
    const int64_t start = kT0 + 20000;  // 20 s into a window
    for (uint64_t i = 0; i < 3; i++) {
        rl_decision_t d = k.hit(start);
        ASSERT_TRUE(d.allowed);
        EXPECT_EQ(d.remaining, 2 - i);
        EXPECT_EQ(d.reset_ms, 40000);
    }
    rl_decision_t d = k.hit(start + 1000);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 39000);  // to the window's end, exactly
    EXPECT_FALSE(k.hit(kT0 + 59999).allowed);
    d = k.hit(kT0 + 60000);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 2u);
    EXPECT_EQ(d.reset_ms, 60000);
}

TEST(FixedWindow, TwiceTheLimitAcrossOneBoundary)
{
    Key k("algorithm=fixed_window limit=100 period=1s");
    int allowed = 0;
    for (int i = 0; i < 200; i++) {
        allowed += k.hit(kT0 + 999).allowed;
    }
    for (int i = 0; i < 200; i++) {
        allowed += k.hit(kT0 + 1000).allowed;
    }
    EXPECT_EQ(allowed, 200);  // the documented trade-off: 2 x limit in 1 ms
}

TEST(FixedWindow, AlignFirstStartsAtTheFirstRequest)
{
    Key k("algorithm=fixed_window limit=2 period=10s align=first");
    EXPECT_EQ(k.hit(kT0 + 3333).reset_ms, 10000);
    EXPECT_EQ(k.hit(kT0 + 8000).reset_ms, 5333);
    rl_decision_t d = k.hit(kT0 + 13332);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 1);
    d = k.hit(kT0 + 13333);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.reset_ms, 10000);
}

// A state of any bytes (a process died writing it) may end an aligned
// window at either end of the clock, a carried charge's or not: the key is
// refused until a window's end in the future, admitted at once for one in
// the past, and nothing overflows on the way (the sanitized build fails
// on a signed overflow).
TEST(FixedWindow, AlignFirstWindowEndingAtTheClocksEnds)
{
    for (const uint32_t n : {2u, rl::kCarried | 2u}) {
        Key k("algorithm=fixed_window limit=2 period=10s align=first");
        const rl_state_t last{INT64_MAX - 5, n};
        std::memcpy(k.state.data(), &last, sizeof(last));
        rl_decision_t d = k.hit(kT0);
        EXPECT_FALSE(d.allowed) << n;
        EXPECT_EQ(d.retry_after_ms, INT64_MAX - 5 - kT0) << n;

        const rl_state_t first{INT64_MIN + 5, n};
        std::memcpy(k.state.data(), &first, sizeof(first));
        d = k.hit(kT0);
        EXPECT_TRUE(d.allowed) << n;
        EXPECT_EQ(d.reset_ms, 10000) << n;
    }
}

TEST(FixedWindow, CostAndZeroCost)
{
    Key k("algorithm=fixed_window limit=10 period=1s");
    EXPECT_EQ(k.hit(kT0, 0).reset_ms, 0);
    EXPECT_TRUE(k.hit(kT0, 10).allowed);
    rl_decision_t d = k.hit(kT0, 1);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 1000);
    EXPECT_TRUE(k.hit(kT0, 0).allowed);
    d = k.hit(kT0, 11);
    EXPECT_TRUE(d.never);
    EXPECT_FALSE(d.allowed);
}

TEST(FixedWindow, BackwardStepKeepsTheLaterWindow)
{
    Key k("algorithm=fixed_window limit=2 period=1m");
    k.hit(kT0 + 61000);
    k.hit(kT0 + 61000);
    // back into the previous window: still the later window's count
    rl_decision_t d = k.hit(kT0 + 30000);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 90000);
    EXPECT_TRUE(k.hit(kT0 + 120000).allowed);
}

// ---- properties of every algorithm ---------------------------------------

class EveryAlgorithm : public ::testing::TestWithParam<const char *> {};

TEST_P(EveryAlgorithm, AdmitsLimitFromColdThenOnlyWhatTimeRefills)
{
    // Requests as fast as possible, 1 ms out of order at times, for 1.6 s
    // of a 10 s period: exactly the limit plus what refilled (gcra, token
    // bucket: one per 500 ms; windows: nothing within the window).
    std::mt19937_64 rng(7);
    const std::string alg = GetParam();
    Key k(alg + " limit=20 period=10s");
    int admitted = 0;
    int64_t now = kT0 + 1;
    for (int i = 0; i < 5000; i++) {
        admitted += k.hit(now + (int64_t) (rng() % 2)).allowed;
        now += rng() % 3 == 0 ? 1 : 0;
    }
    const int64_t elapsed = now - (kT0 + 1);
    ASSERT_LT(elapsed, 9000);
    const bool windowed = alg.find("window") != std::string::npos;
    if (windowed) {
        EXPECT_EQ(admitted, 20);
    } else {
        EXPECT_GE(admitted, 20 + elapsed / 500 - 1);
        EXPECT_LE(admitted, 20 + (elapsed + 2) / 500);
    }
}

INSTANTIATE_TEST_SUITE_P(All, EveryAlgorithm,
                         ::testing::Values("algorithm=gcra", "algorithm=token_bucket", "algorithm=fixed_window",
                                           "algorithm=fixed_window align=first"),
                         RuleName());
