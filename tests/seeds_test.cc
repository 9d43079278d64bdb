// The reference documents' own examples and stated properties
// (../shared/seeds/), replayed through the core's transitions.
#include <ostream>
#include <random>

#include "helpers.h"

TEST(CooldownReference, TraceIsGcraWithLimit3Per60s)
{
    // The cooldown score limiter's worked trace (seeds/000): n = 3, T = 60 s,
    // an integer-second clock; the printed number is the score minus now,
    // which is the time until full budget.
    Key k("limit=3 period=60s");
    struct {
        int64_t s;
        bool allow;
        int64_t shown;
    } trace[] = {{0, true, 20},   {0, true, 40},   {0, true, 60},  {1, false, 59}, {5, false, 55},
                 {10, false, 50}, {15, false, 45}, {21, true, 59}, {22, false, 58}};
    for (auto &e : trace) {
        rl_decision_t d = k.hit(kT0 + e.s * 1000);
        EXPECT_EQ((bool) d.allowed, e.allow) << "t=" << e.s;
        EXPECT_EQ(d.reset_ms / 1000, e.shown) << "t=" << e.s;
    }
}

// GCRA as the explainer (seeds/003) maps "5 requests per minute".
TEST(GcraReference, FivePerMinuteFiveAtOnceThenOneEvery12s)
{
    Key k("limit=5 period=1m");
    for (int i = 0; i < 5; i++) {
        ASSERT_TRUE(k.hit(kT0).allowed);
    }
    rl_decision_t d = k.hit(kT0);
    ASSERT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 12000);
    for (int64_t n = 1; n <= 20; n++) {
        EXPECT_FALSE(k.hit(kT0 + n * 12000 - 1).allowed) << n;
        EXPECT_TRUE(k.hit(kT0 + n * 12000).allowed) << n;
    }
}

TEST(WaitUntilReference, RecurrenceAsLeakyBucket)
{
    // The wait-until limiter (seeds/002): one hit per second, raise past 5 s
    // of accumulated wait.
    // Three hits 1.01 s apart proceed; ten rapid ones wait 0, 1, 2, 3, 4,
    // 5 s, then are raised (rejected) -- a rejection does not accumulate,
    // so the wait stays capped at the threshold plus one interval.
    Key k("algorithm=leaky_bucket limit=1 period=1s max_delay=5s");
    int64_t now = kT0;
    for (int i = 0; i < 3; i++) {
        rl_decision_t d = k.hit(now);
        ASSERT_TRUE(d.allowed);
        EXPECT_EQ(d.delay_ms, 0);
        now += 1010;
    }
    for (int64_t wait = 0; wait <= 5; wait++) {
        rl_decision_t d = k.hit(now);
        ASSERT_TRUE(d.allowed) << wait;
        EXPECT_EQ(d.delay_ms, wait * 1000);
    }
    for (int i = 0; i < 4; i++) {
        rl_decision_t d = k.hit(now);
        EXPECT_FALSE(d.allowed);
        EXPECT_EQ(d.retry_after_ms, 1000);         // the wait is 6 s: 1 s over
        EXPECT_LE(k.head().t, now + 5000 + 1000);  // capped
    }
}

// ---- the properties the reference library (seeds/004) states for every
// algorithm ---------------------------------------------------------------

namespace {

struct Case {
    const char *rule;
    int at_once;       // admitted at once from cold, then denied
    int64_t retry_ms;  // the first denial's exact Retry-After
    int64_t pace_ms;   // after that, one more every pace_ms (0: none)
};

// 10 per 10 s in each algorithm's terms; kT0 is midnight UTC, aligned with
// every window here.
const Case kCases[] = {
    {"algorithm=gcra limit=10 period=10s", 10, 1000, 1000},
    {"algorithm=gcra limit=10 period=10s burst=3", 3, 1000, 1000},
    {"algorithm=token_bucket limit=10 period=10s burst=4", 4, 1000, 1000},
    {"algorithm=fixed_window limit=10 period=10s", 10, 10000, 0},
    {"algorithm=fixed_window limit=10 period=10s align=first", 10, 10000, 0},
    // 10 in tick k; from tick k + 10 they weigh (W - e) / W: one fits at e = W / 10
    {"algorithm=sliding_window limit=10 period=10s", 10, 10100, 0},
    {"algorithm=sliding_log limit=10 period=10s", 10, 10000, 0},
    // delays of 0, 1, ..., 10 s fit max_delay = period
    {"algorithm=leaky_bucket limit=10 period=10s", 11, 1000, 1000},
    {"algorithm=quota limit=10 reset=daily", 10, 86400000, 0},
};

// A failing case names itself: its rule and what it expects.
void PrintTo(const Case &c, std::ostream *os)
{
    *os << '"' << c.rule << "\": " << c.at_once << " at once, Retry-After " << c.retry_ms << " ms";
    if (c.pace_ms > 0) {
        *os << ", then one every " << c.pace_ms << " ms";
    }
}

class ReferenceLibrary : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(ReferenceLibrary, AdmitsExactlyItsCapacityThenDeniesWithAnExactRetryAfter)
{
    const Case &c = GetParam();
    Key k(c.rule);
    for (int i = 0; i < c.at_once; i++) {
        ASSERT_TRUE(k.hit(kT0).allowed) << "request " << i + 1;
    }
    rl_decision_t d = k.hit(kT0);
    ASSERT_FALSE(d.allowed);
    EXPECT_EQ(d.remaining, 0u);
    EXPECT_EQ(d.retry_after_ms, c.retry_ms);
    // denials leave everything unchanged (Key::hit checks the state too)
    rl_decision_t again = k.hit(kT0);
    EXPECT_EQ(again.retry_after_ms, d.retry_after_ms);
    EXPECT_EQ(again.reset_ms, d.reset_ms);
    EXPECT_FALSE(k.hit(kT0 + c.retry_ms - 1).allowed);
    EXPECT_TRUE(k.hit(kT0 + c.retry_ms).allowed);
}

TEST_P(ReferenceLibrary, PacesAtOnePerIntervalAfterTheBurst)
{
    const Case &c = GetParam();
    if (c.pace_ms == 0) {
        return;  // a window refills at its boundary, not at a pace
    }
    Key k(c.rule);
    for (int i = 0; i < c.at_once; i++) {
        k.hit(kT0);
    }
    for (int64_t n = 1; n <= 50; n++) {
        const int64_t at = kT0 + (n - 1) * c.pace_ms + c.retry_ms;
        EXPECT_FALSE(k.hit(at - 1).allowed) << n;
        EXPECT_TRUE(k.hit(at).allowed) << n;
        EXPECT_FALSE(k.hit(at).allowed) << n;
    }
}

TEST_P(ReferenceLibrary, RemainingNeverNegativeRetryOnlyWhenDeniedOnRandomTraffic)
{
    std::mt19937_64 rng(21);
    Key k(GetParam().rule);
    int64_t now = kT0;
    for (int i = 0; i < 5000; i++) {
        now += (int64_t) (rng() % 700) - (rng() % 40 == 0 ? 20000 : 0);
        rl_decision_t d = k.hit(now, rng() % 4);  // Key::hit asserts the invariants
        ASSERT_LE(d.remaining, 11u);
        ASSERT_GE(d.reset_ms, 0);
    }
}

INSTANTIATE_TEST_SUITE_P(EveryAlgorithm, ReferenceLibrary, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case> &info) {
                             return param_name(std::to_string(info.index) + "_" + (info.param.rule + 10));
                         });
