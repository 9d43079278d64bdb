// ratelimit-replay's reading of its inputs: trace lines, log times, request
// times, --charge-status, log formats.
#include <gtest/gtest.h>

#include "replay.h"

using replay::TraceLine;

TEST(ReplayTrace, ColumnsAndWhatIsLeftOut)
{
    TraceLine t;
    ASSERT_TRUE(replay::parse_trace_line("1000 alice", &t));
    EXPECT_EQ(t.time_ms, 1000);
    EXPECT_EQ(t.key, "alice");
    EXPECT_EQ(t.cost, 1u);
    EXPECT_FALSE(t.has_charge);
    EXPECT_EQ(t.duration_ms, 0);

    ASSERT_TRUE(replay::parse_trace_line("1000 alice 3", &t));
    EXPECT_EQ(t.cost, 3u);
    EXPECT_FALSE(t.has_charge);

    ASSERT_TRUE(replay::parse_trace_line("1000\talice 0 400", &t));
    EXPECT_EQ(t.cost, 0u);
    EXPECT_TRUE(t.has_charge);
    EXPECT_EQ(t.charge, 400u);

    ASSERT_TRUE(replay::parse_trace_line("1000 alice 1 0 2500", &t));
    EXPECT_TRUE(t.has_charge);
    EXPECT_EQ(t.charge, 0u);
    EXPECT_EQ(t.duration_ms, 2500);

    ASSERT_TRUE(replay::parse_trace_line("1000 alice - - 2500", &t));  // "-": left out
    EXPECT_EQ(t.cost, 1u);
    EXPECT_FALSE(t.has_charge);
    EXPECT_EQ(t.duration_ms, 2500);

    // the longest duration: a year; a charge as large as 19 digits
    EXPECT_TRUE(replay::parse_trace_line("1 k - - 31622400000", &t));
    EXPECT_FALSE(replay::parse_trace_line("1 k - - 31622400001", &t));
    EXPECT_TRUE(replay::parse_trace_line("1 k 1 9999999999999999999", &t));
    EXPECT_FALSE(replay::parse_trace_line("1 k 1 99999999999999999999", &t));
}

TEST(ReplayTrace, BadLines)
{
    TraceLine t;
    for (const char *bad : {"", "1000", "alice 1000", "-1 alice", "1000 alice x", "1000 alice 1 -3",
                            "1000 alice 1 1 1.5", "1000 alice 1 1 10 extra", "1e3 alice", "1000 alice 1 0x10"}) {
        EXPECT_FALSE(replay::parse_trace_line(bad, &t)) << bad;
    }
}

TEST(ReplayLog, Times)
{
    int64_t ms;
    EXPECT_TRUE(replay::parse_seconds("0.250", &ms));
    EXPECT_EQ(ms, 250);
    EXPECT_TRUE(replay::parse_seconds("12.005", &ms));
    EXPECT_EQ(ms, 12005);
    for (const char *bad : {"", "-", "1", "1.", "1.5", "1.2345", ".250", "a.250", "-1.000", "1,250"}) {
        EXPECT_FALSE(replay::parse_seconds(bad, &ms)) << bad;
    }
    std::map<std::string, std::string> f{{"msec", "1700000000.123"}};
    ASSERT_TRUE(replay::parse_log_time(f, &ms));
    EXPECT_EQ(ms, 1700000000123);
    f = {{"time_local", "22/Nov/2026:11:43:07 +0100"}};
    ASSERT_TRUE(replay::parse_log_time(f, &ms));
    EXPECT_EQ(ms, 1795344187000);
    f = {{"time_iso8601", "2026-11-22T10:43:07+00:00"}};
    ASSERT_TRUE(replay::parse_log_time(f, &ms));
    EXPECT_EQ(ms, 1795344187000);
    f = {{"status", "200"}};
    EXPECT_FALSE(replay::parse_log_time(f, &ms));
}

TEST(ReplayLog, ChargeStatus)
{
    replay::StatusList s;
    ASSERT_TRUE(s.parse("401,403"));
    EXPECT_TRUE(s.matches("401"));
    EXPECT_TRUE(s.matches("403"));
    EXPECT_FALSE(s.matches("402"));
    EXPECT_FALSE(s.matches("200"));
    EXPECT_FALSE(s.matches("-"));
    ASSERT_TRUE(s.parse("5xx,429"));
    EXPECT_TRUE(s.matches("500"));
    EXPECT_TRUE(s.matches("599"));
    EXPECT_TRUE(s.matches("429"));
    EXPECT_FALSE(s.matches("430"));
    EXPECT_FALSE(s.matches("4291"));
    for (const char *bad : {"", ",", "401,", "40", "4011", "600", "4x1", "abc", "401,,403", "401 403"}) {
        EXPECT_FALSE(s.parse(bad)) << bad;
    }
}

TEST(ReplayLog, FormatsAndExpressions)
{
    std::string err;
    replay::LogFormat f("$msec $request_time ${http_x_user}:$status", &err);
    ASSERT_EQ(err, "");
    std::map<std::string, std::string> fields;
    ASSERT_TRUE(f.match("1700000000.123 0.250 ann:401", fields));
    EXPECT_EQ(fields["request_time"], "0.250");
    EXPECT_EQ(fields["http_x_user"], "ann");
    EXPECT_EQ(fields["status"], "401");
    EXPECT_TRUE(f.has("request_time"));
    EXPECT_FALSE(f.has("remote_addr"));

    bool missing = false;
    EXPECT_EQ(replay::expand("$http_x_user/${status}", fields, &missing), "ann/401");
    EXPECT_FALSE(missing);
    fields["http_x_user"] = "-";  // nginx's empty value
    EXPECT_EQ(replay::expand("$http_x_user", fields, &missing), "");
    EXPECT_FALSE(missing);
    EXPECT_EQ(replay::expand("$upstream_http_x_tokens", fields, &missing), "");
    EXPECT_TRUE(missing);

    EXPECT_EQ(replay::variables_of("$a-${b}c $d"), (std::vector<std::string>{"a", "b", "d"}));
    EXPECT_EQ(replay::variables_of("5"), std::vector<std::string>{});

    replay::LogFormat bad("$msec $ x", &err);
    EXPECT_EQ(err, "\"$\" without a variable name at offset 6");
    EXPECT_FALSE(bad.match("1 $ x", fields));
    EXPECT_FALSE(f.match("1700000000.123 0.250 ann", fields));
}
