// leaky_bucket (the shaper) and quota (calendar budgets), and the calendar.
#include <ctime>
#include <random>

#include "algorithms/calendar.h"
#include "helpers.h"

// ---- leaky_bucket ----------------------------------------------------------

TEST(LeakyBucket, DelaysToTheSlotAndRejectsPastMaxDelay)
{
    Key k("algorithm=leaky_bucket limit=10 period=1s max_delay=300ms");  // T = 100 ms
    int64_t expect[] = {0, 100, 200, 300};
    for (int64_t e : expect) {
        rl_decision_t d = k.hit(kT0);
        ASSERT_TRUE(d.allowed);
        EXPECT_EQ(d.delay_ms, e);
    }
    rl_decision_t d = k.hit(kT0);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 100);  // a wait of 400 ms, 100 over max_delay
    d = k.hit(kT0 + 100);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.delay_ms, 300);
}

TEST(LeakyBucket, HeadersDescribeTheKeyAtRelease)
{
    Key k("algorithm=leaky_bucket limit=10 period=1s max_delay=1s");
    rl_decision_t d = k.hit(kT0);
    EXPECT_EQ(d.delay_ms, 0);
    EXPECT_EQ(d.reset_ms, 100);
    EXPECT_EQ(d.remaining, 10u);  // 10 more fit within a 1 s wait
    d = k.hit(kT0);
    EXPECT_EQ(d.delay_ms, 100);
    EXPECT_EQ(d.reset_ms, 100);   // released at 100 ms, drained at 200 ms
    EXPECT_EQ(d.remaining, 10u);  // as seen at its release
    d = k.hit(kT0 + 50);
    EXPECT_EQ(d.delay_ms, 150);
    EXPECT_EQ(d.reset_ms, 100);
}

TEST(LeakyBucket, PacesAtTheRate)
{
    Key k("algorithm=leaky_bucket limit=7 period=1m max_delay=2h");
    int64_t last_release = 0;
    for (int i = 0; i < 700; i++) {
        rl_decision_t d = k.hit(kT0);
        ASSERT_TRUE(d.allowed);
        last_release = d.delay_ms;
    }
    EXPECT_EQ(last_release, (699 * 60000 + 6) / 7);  // ceil(699 T), exact
}

TEST(LeakyBucket, ZeroCostLooksWithoutDelay)
{
    Key k("algorithm=leaky_bucket limit=1 period=1s max_delay=2s");
    k.hit(kT0);
    k.hit(kT0);
    rl_decision_t d = k.hit(kT0, 0);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.delay_ms, 0);
    EXPECT_EQ(d.remaining, 1u);
}

// ---- quota -----------------------------------------------------------------

TEST(Quota, DailyResetsAtMidnightOfTheOffset)
{
    Key k("algorithm=quota limit=2 reset=daily");
    const int64_t ten = kT0 + 10 * 3600000LL;  // 2026-01-01T10:00Z
    rl_decision_t d = k.hit(ten);
    EXPECT_EQ(d.reset_ms, 14 * 3600000LL);
    EXPECT_EQ(d.window_ms, 86400000);
    k.hit(ten);
    d = k.hit(ten);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 14 * 3600000LL);
    EXPECT_FALSE(k.hit(kT0 + 86400000 - 1).allowed);
    EXPECT_TRUE(k.hit(kT0 + 86400000).allowed);

    Key ist("algorithm=quota limit=1 reset=daily utc_offset=+05:30");
    EXPECT_EQ(ist.hit(ten).reset_ms, 8 * 3600000LL + 30 * 60000);  // midnight IST = 18:30Z
    Key west("algorithm=quota limit=1 reset=daily utc_offset=-14:00");
    EXPECT_EQ(west.hit(ten).reset_ms, 4 * 3600000LL);  // 10:00Z is 20:00 the day before
}

TEST(Quota, WeeklyResetsOnMonday)
{
    Key k("algorithm=quota limit=5 reset=weekly");
    // 2026-01-01 is a Thursday: the week ends on Monday 2026-01-05T00:00Z
    rl_decision_t d = k.hit(kT0 + 3600000);
    EXPECT_EQ(d.reset_ms, 4 * 86400000LL - 3600000);
    EXPECT_EQ(d.window_ms, 7 * 86400000LL);
    Key sunday("algorithm=quota limit=5 reset=weekly");
    EXPECT_EQ(sunday.hit(kT0 + 4 * 86400000LL - 1).reset_ms, 1);
    Key monday("algorithm=quota limit=5 reset=weekly");
    EXPECT_EQ(monday.hit(kT0 + 4 * 86400000LL).reset_ms, 7 * 86400000LL);
}

TEST(Quota, MonthlyOnRealMonthLengthsAndLeapYears)
{
    struct {
        int y, m, d;
        int64_t days_left, month_days;
    } cases[] = {
        {2028, 2, 10, 20, 29},                         // leap February
        {2027, 2, 10, 19, 28}, {2026, 12, 31, 1, 31},  // into the next year
        {2026, 4, 1, 30, 30},  {2100, 2, 1, 28, 28},   // not a leap year
        {2000, 2, 1, 29, 29},                          // a leap year
    };
    for (auto &c : cases) {
        std::tm tm{};
        tm.tm_year = c.y - 1900;
        tm.tm_mon = c.m - 1;
        tm.tm_mday = c.d;
        const int64_t at = (int64_t) timegm(&tm) * 1000;
        Key k("algorithm=quota limit=1000000 reset=monthly");
        rl_decision_t d = k.hit(at);
        EXPECT_EQ(d.reset_ms, c.days_left * 86400000) << c.y << "-" << c.m << "-" << c.d;
        EXPECT_EQ(d.window_ms, c.month_days * 86400000) << c.y << "-" << c.m;
    }
}

TEST(Quota, ExhaustedUntilTheBoundaryThenFresh)
{
    Key k("algorithm=quota limit=3 reset=monthly");
    const int64_t jan20 = kT0 + 19 * 86400000LL;
    EXPECT_TRUE(k.hit(jan20, 3).allowed);
    rl_decision_t d = k.hit(jan20 + 1000);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 12 * 86400000LL - 1000);
    const int64_t feb1 = kT0 + 31 * 86400000LL;
    EXPECT_FALSE(k.hit(feb1 - 1).allowed);
    d = k.hit(feb1);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 2u);
    // the clock steps back into January: February's count is kept
    EXPECT_EQ(k.hit(jan20, 0).remaining, 2u);
}

// ---- the calendar ----------------------------------------------------------

TEST(Calendar, RoundTripsOverCenturiesAndAgreesWithTheCLibrary)
{
    // every day from 1600-01-01 to 2400-12-31 (292,556 days)
    const int64_t from = -135140, to = 157476;
    for (int64_t z = from; z <= to; z++) {
        const time_t secs = (time_t) z * 86400;
        std::tm tm{};
        ASSERT_NE(gmtime_r(&secs, &tm), nullptr);
        const int64_t y = tm.tm_year + 1900;
        const unsigned m = (unsigned) tm.tm_mon + 1, d = (unsigned) tm.tm_mday;
        ASSERT_EQ(rl::days_from_civil(y, m, d), z) << y << "-" << m << "-" << d;
        const rl::Civil c = rl::civil_from_days(z);
        ASSERT_EQ(c.y, y);
        ASSERT_EQ(c.m, m);
        ASSERT_EQ(c.d, d);
        ASSERT_EQ(rl::weekday_from_monday(z), (unsigned) (tm.tm_wday + 6) % 7);
    }
}
