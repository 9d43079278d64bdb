// sliding_window and sliding_log: exact boundaries, exact retry-after, the
// Cloudflare worked example, and agreement with reference implementations.
#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <vector>

#include "helpers.h"

namespace {

// Drives a key with requests until the first denial's retry-after has been
// checked: one ms before it still denied, at it admitted.
void expect_retry_exact(Key &k, int64_t now, uint64_t cost)
{
    rl_decision_t d = k.hit(now, cost);
    ASSERT_FALSE(d.allowed);
    const int64_t at = now + d.retry_after_ms;
    if (d.retry_after_ms > 1) {
        EXPECT_FALSE(k.hit(at - 1, cost).allowed) << "retry_after " << d.retry_after_ms << " is too long";
    }
    EXPECT_TRUE(k.hit(at, cost).allowed) << "retry_after " << d.retry_after_ms << " is too short";
}

}  // namespace

// ---- sliding_window --------------------------------------------------------

TEST(SlidingWindow, CloudflareWorkedExampleWithOneBucket)
{
    // 50 per minute; 42 in the previous minute, 18 in the current one, 15 s
    // in: estimate = 42 * (60 - 15) / 60 + 18 = 49.5 (the example the
    // reference library, seeds/004, cites).
    Key k("algorithm=sliding_window limit=50 period=1m buckets=1");
    ASSERT_TRUE(k.hit(kT0 + 30000, 42).allowed);
    ASSERT_TRUE(k.hit(kT0 + 75000, 18).allowed);  // 31.5 + 18 <= 50
    rl_decision_t d = k.hit(kT0 + 75000, 0);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 0u);  // floor(50 - 49.5)
    d = k.hit(kT0 + 75000, 1);   // 49.5 + 1 > 50
    EXPECT_FALSE(d.allowed);
    // 42 * (60000 - e) / 60000 + 18 + 1 <= 50  <=>  e >= 15714.29 ms
    EXPECT_EQ(d.retry_after_ms, 715);
    EXPECT_FALSE(k.hit(kT0 + 75714, 1).allowed);
    EXPECT_TRUE(k.hit(kT0 + 75715, 1).allowed);
    // 30 s in: 42 * 0.5 + 19 = 40 -> 10 left after one more
    EXPECT_EQ(k.hit(kT0 + 90000, 1).remaining, 9u);
}

TEST(SlidingWindow, OneBucketIsTheClassicTwoCounterEstimate)
{
    std::mt19937_64 rng(11);
    const int64_t W = 10000;
    Key k("algorithm=sliding_window limit=40 period=10s buckets=1");
    std::map<int64_t, uint64_t> per_window;  // admitted units per fixed window
    int64_t now = kT0;
    for (int i = 0; i < 3000; i++) {
        now += (int64_t) (rng() % 400);
        const int64_t win = now / W;
        const double elapsed = (double) (now - win * W);
        const double estimate = (double) per_window[win - 1] * (W - elapsed) / W + (double) per_window[win];
        const uint64_t cost = rng() % 3;
        rl_decision_t d = k.hit(now, cost);
        ASSERT_EQ((bool) d.allowed, estimate + (double) cost <= 40.0 + 1e-9) << "at " << now - kT0;
        if (d.allowed) {
            per_window[win] += cost;
            EXPECT_EQ(d.remaining, (uint64_t) (40.0 - estimate - (double) cost + 1e-9));
        }
    }
}

TEST(SlidingWindow, NeverTwiceTheLimitAcrossABoundaryUnlikeFixedWindow)
{
    // The limit spent in the last millisecond of a window, then hammering
    // just after the boundary: the fixed window admits the limit again at
    // once; the sliding window admits nothing until that spend slides out.
    for (const char *alg : {"fixed_window", "sliding_window"}) {
        Key k(std::string("algorithm=") + alg + " limit=100 period=1s");
        int admitted = 0;
        for (int i = 0; i < 150; i++) {
            admitted += k.hit(kT0 + 999).allowed;
        }
        ASSERT_EQ(admitted, 100);
        for (int64_t t = 1000; t < 1900; t++) {
            admitted += k.hit(kT0 + t).allowed;
        }
        EXPECT_EQ(admitted, std::string(alg) == "fixed_window" ? 200 : 100) << alg;
    }
}

TEST(SlidingWindow, ErrorIsBoundedByOneBucketOnAnyTrace)
{
    // Against an exact log of what it admitted: in every window of length W
    // the true count stays within limit + one bucket's count.
    std::mt19937_64 rng(5);
    const int64_t W = 6000, S = 6;
    Key k("algorithm=sliding_window limit=60 period=6s buckets=6");
    std::deque<std::pair<int64_t, uint64_t>> log;
    std::map<int64_t, uint64_t> per_tick;
    int64_t now = kT0;
    for (int i = 0; i < 20000; i++) {
        now += (int64_t) (rng() % 40);
        uint64_t cost = 1 + rng() % 2;
        if (k.hit(now, cost).allowed) {
            log.emplace_back(now, cost);
            per_tick[now * S / W] += cost;
        }
        while (!log.empty() && log.front().first <= now - W) {
            log.pop_front();
        }
        uint64_t exact = 0;
        for (auto &e : log) {
            exact += e.second;
        }
        uint64_t biggest = 0;
        for (int64_t j = now * S / W - S; j <= now * S / W; j++) {
            biggest = std::max(biggest, per_tick[j]);
        }
        ASSERT_LE(exact, 60 + biggest) << "at " << now - kT0;
    }
}

TEST(SlidingWindow, RetryAfterIsExact)
{
    std::mt19937_64 rng(9);
    for (int trial = 0; trial < 200; trial++) {
        const uint32_t limit = 1 + rng() % 30, S = 1 + rng() % 12;
        const int64_t period = 100 + rng() % 20000;
        Key k("algorithm=sliding_window limit=" + std::to_string(limit) + " period=" + std::to_string(period) +
              "ms buckets=" + std::to_string(S));
        int64_t now = kT0 + (int64_t) (rng() % 100000);
        while (k.hit(now, 1).allowed) {
            now += (int64_t) (rng() % (2 * period / limit + 1));
        }
        const uint64_t cost = 1 + rng() % limit;
        expect_retry_exact(k, now, cost);
    }
}

TEST(SlidingWindow, BackwardClockStepNeverAdmitsMore)
{
    Key k("algorithm=sliding_window limit=5 period=10s");
    for (int i = 0; i < 5; i++) {
        ASSERT_TRUE(k.hit(kT0 + 50000).allowed);
    }
    EXPECT_FALSE(k.hit(kT0 + 20000).allowed);
    EXPECT_FALSE(k.hit(kT0 + 50500).allowed);
    rl_decision_t d = k.hit(kT0 + 50000);
    EXPECT_EQ(d.reset_ms, 11000);  // the tick [50 s, 51 s) leaves the window at 61 s
}

TEST(SlidingWindow, ResetIsWhenTheNewestTickLeaves)
{
    Key k("algorithm=sliding_window limit=10 period=10s buckets=10");
    rl_decision_t d = k.hit(kT0 + 2500);
    EXPECT_EQ(d.reset_ms, 10500);  // tick [2 s, 3 s) fully out of the window at 13 s
    EXPECT_EQ(d.window_ms, 10000);
    EXPECT_EQ(k.head().t, kT0 + 13000);
    EXPECT_EQ(k.hit(kT0 + 13000, 0).remaining, 10u);
    EXPECT_EQ(k.hit(kT0 + 12999, 0).remaining, 9u);
}

// The block keeps the sum of its ring's counters (a request within the
// newest tick reads it instead of the counters).  A process that dies
// between writing a counter and the sum leaves it wrong (the table does not
// save blocks): within a turn of the ring the key is decided as its
// counters say again, and the sum is theirs.
TEST(SlidingWindow, AWrongSumIsRightAgainWithinATurnOfTheRing)
{
    const int64_t turn = 11000;  // 10 buckets of 1 s, and the oldest
    auto sum_of = [](Key &k) -> uint32_t & {
        return *reinterpret_cast<uint32_t *>(k.state.data() + sizeof(rl_state_t) + 8);
    };
    auto counted = [](const Key &k) {
        uint32_t n = 0, c;
        for (int i = 0; i < 11; i++) {
            std::memcpy(&c, k.state.data() + sizeof(rl_state_t) + 12 + 4 * i, 4);
            n += c;
        }
        return n;
    };
    for (const uint32_t wrong : {0u, 3u, 1000u, 0xffffffffu}) {
        Key k("algorithm=sliding_window limit=50 period=10s buckets=10");
        int64_t now = kT0 + 12345;
        for (; now < kT0 + 22345; now += 250) {
            ASSERT_TRUE(k.hit(now).allowed);
        }
        sum_of(k) = wrong == 3u ? counted(k) + 3 : wrong;
        const int64_t died = now;
        uint64_t compared = 0;
        for (; now < died + 4 * turn; now += 250) {
            Key truth = k;  // the same counters, their sum right
            sum_of(truth) = counted(truth);
            const rl_decision_t d = k.hit(now), t = truth.hit(now);
            // whatever the sum says, t is never after the reset, for a
            // request or a look, in this tick or a later one
            for (const int64_t later : {0, 1100, 2300}) {
                Key look = k;
                const rl_decision_t l = look.hit(now + later, 0);
                ASSERT_TRUE(!l.allowed || l.available_ms <= l.reset_ms)
                    << "wrong sum " << wrong << ", " << now - died << " ms on";
            }
            if (d.allowed) {
                ASSERT_LE(d.available_ms, d.reset_ms) << "wrong sum " << wrong << ", " << now - died << " ms on";
            }
            if (now >= died + turn + 1000) {
                ASSERT_EQ(d.allowed, t.allowed) << "wrong sum " << wrong << ", " << now - died << " ms on";
                ASSERT_EQ(d.remaining, t.remaining) << "wrong sum " << wrong << ", " << now - died << " ms on";
                ASSERT_EQ(sum_of(k), counted(k));
                compared++;
            }
        }
        EXPECT_GT(compared, 100u);
    }
    // a sum of units no counter holds (they never leave the ring): t is
    // still no later than the reset
    Key p("algorithm=sliding_window limit=50 period=10s buckets=10");
    ASSERT_TRUE(p.hit(kT0 + 500).allowed);
    std::memset(p.state.data() + sizeof(rl_state_t) + 12, 0, 4 * 11);
    sum_of(p) = 2;
    for (const int64_t later : {0, 1100, 2300, 5000}) {
        Key look = p;
        const rl_decision_t l = look.hit(kT0 + 500 + later, 0);
        EXPECT_TRUE(!l.allowed || l.available_ms <= l.reset_ms) << later << " ms on";
    }
}

// ---- sliding_log -----------------------------------------------------------

TEST(SlidingLog, FreesASlotExactlyWhenTheOldestHitExits)
{
    Key k("algorithm=sliding_log limit=3 period=10s");
    EXPECT_TRUE(k.hit(kT0).allowed);
    EXPECT_TRUE(k.hit(kT0 + 1000).allowed);
    rl_decision_t d = k.hit(kT0 + 2000);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 0u);
    EXPECT_EQ(d.reset_ms, 10000);
    d = k.hit(kT0 + 2500);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 7500);  // the hit at 0 leaves at 10 s
    EXPECT_EQ(d.reset_ms, 9500);        // the hit at 2 s leaves at 12 s
    EXPECT_FALSE(k.hit(kT0 + 9999).allowed);
    EXPECT_TRUE(k.hit(kT0 + 10000).allowed);
    d = k.hit(kT0 + 10000);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 1000);  // then the hit at 1 s
    d = k.hit(kT0 + 10000, 3);
    EXPECT_EQ(d.retry_after_ms, 10000);  // all three: the newest, at 10 s, leaves at 20 s
}

TEST(SlidingLog, AgreesWithANaiveLogOnRandomTraces)
{
    std::mt19937_64 rng(13);
    for (int trial = 0; trial < 30; trial++) {
        const uint32_t limit = 1 + rng() % 50;
        // long periods too: offsets are rebased past 2^31 ms
        const int64_t period = trial % 3 == 0 ? 20LL * 86400000 : 1 + (int64_t) (rng() % 5000);
        Key k("algorithm=sliding_log limit=" + std::to_string(limit) + " period=" + std::to_string(period) + "ms");
        // every unit admitted, at the time the log holds for it: the newest time
        // logged so far if the clock stepped back (the log never goes back)
        std::vector<int64_t> naive;
        int64_t now = kT0;
        for (int i = 0; i < 3000; i++) {
            now += (int64_t) (rng() % (3 * period / limit + 2)) - (rng() % 50 == 0 ? 3 * period : 0);
            const int64_t t = naive.empty() ? now : std::max(now, naive.back());
            std::vector<int64_t> live;
            for (int64_t x : naive) {
                if (x > t - period)
                    live.push_back(x);
            }
            const uint64_t cost = rng() % 3;
            rl_decision_t d = k.hit(now, cost);
            ASSERT_EQ((bool) d.allowed, live.size() + cost <= limit) << trial << "/" << i;
            if (d.allowed) {
                ASSERT_EQ(d.remaining, limit - live.size() - cost);
                for (uint64_t c = 0; c < cost; c++)
                    naive.push_back(t);
            } else if (cost > limit) {
                ASSERT_TRUE(d.never);
            } else {
                const size_t k_th = live.size() + cost - limit;
                ASSERT_EQ(d.retry_after_ms, live[k_th - 1] + period - now);
            }
        }
    }
}

TEST(SlidingLog, CostAboveLimitIsNever)
{
    Key k("algorithm=sliding_log limit=4 period=1s");
    rl_decision_t d = k.hit(kT0, 5);
    EXPECT_TRUE(d.never);
    EXPECT_EQ(d.remaining, 4u);
}
