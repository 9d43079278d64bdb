// The rule parser: every parameter, its bounds, and the messages.
#include <cstring>
#include <string>

#include "algorithms/algorithm.h"
#include "helpers.h"

namespace {

std::string error_of(const std::string &text)
{
    rl_rule_t r;
    char err[RL_ERR_MAX] = "";
    EXPECT_EQ(rl_rule_parse(&r, name_room(), text.c_str(), err, sizeof(err)), RL_ERROR) << text;
    return err;
}

int64_t ms_of(const char *s)
{
    int64_t ms = -1;
    return rl_parse_time_ms(s, std::strlen(s), &ms) == RL_OK ? ms : -1;
}

}  // namespace

TEST(Rule, DefaultsAndDerivedName)
{
    rl_rule_t r = rule_of("limit=100");
    EXPECT_EQ(r.algorithm, (uint32_t) RL_GCRA);
    EXPECT_EQ(r.period_ms, 1000);
    EXPECT_EQ(r.burst, 100u);
    EXPECT_EQ(r.cost, 1u);
    EXPECT_STREQ(r.name, "gcra_100_1s");
    EXPECT_STREQ(rule_of("limit=100 period=1m burst=20").name, "gcra_100_1m_b20");
    EXPECT_STREQ(rule_of("algorithm=fixed_window limit=5 period=90s").name, "fixed_window_5_90s");
    EXPECT_STREQ(rule_of("limit=5 period=1500ms name=login").name, "login");
}

TEST(Rule, AcceptsEdgeValues)
{
    EXPECT_EQ(rule_of("limit=1 period=1ms").limit, 1u);
    EXPECT_EQ(rule_of("limit=1000000000 period=1s").limit, 1000000000u);
    EXPECT_EQ(rule_of("limit=1 period=366d").period_ms, 366LL * 86400000);
    EXPECT_EQ(rule_of("limit=5 cost=0").cost, 0u);
    EXPECT_EQ(rule_of("limit=5 burst=7 cost=7").cost, 7u);
    EXPECT_EQ(rl::own_value(rule_of("algorithm=fixed_window limit=5 align=first"), "align"), (uint32_t) RL_ALIGN_FIRST);
    EXPECT_EQ(rule_of("zone=api key=$remote_addr limit=5").limit, 5u);  // the glue's, ignored
}

TEST(Rule, ErrorsNameTheParameterValueAndWhatIsAllowed)
{
    EXPECT_EQ(error_of("limit=5 algorithm=magic"),
              "invalid \"algorithm=magic\": expected algorithm=gcra, token_bucket, fixed_window, sliding_window, "
              "sliding_log, leaky_bucket, quota, concurrency or adaptive");
    EXPECT_EQ(error_of("limit=0"), "invalid \"limit=0\": expected an integer from 1 to 1000000000, or a $variable");
    EXPECT_EQ(error_of("limit=-3"), "invalid \"limit=-3\": expected an integer from 1 to 1000000000, or a $variable");
    EXPECT_EQ(error_of("limit=abc"), "invalid \"limit=abc\": expected an integer from 1 to 1000000000, or a $variable");
    EXPECT_EQ(error_of("limit=1000000001"),
              "invalid \"limit=1000000001\": expected an integer from 1 to 1000000000, or a $variable");
    EXPECT_EQ(error_of("limit=99999999999999999999999"),
              "invalid \"limit=99999999999999999999999\": expected an integer from 1 to 1000000000, or a $variable");
    EXPECT_EQ(error_of("limit=5 burst=0"),
              "invalid \"burst=0\": expected an integer from 1 to 1000000000, or a $variable");
    EXPECT_EQ(error_of("limit=5 period=fast"),
              "invalid \"period=fast\": expected a time from 1ms to 366d, like 500ms, 1s, 1m, 1h, 7d");
    EXPECT_EQ(error_of("limit=5 period=0"),
              "invalid \"period=0\": expected a time from 1ms to 366d, like 500ms, 1s, 1m, 1h, 7d");
    EXPECT_EQ(error_of("limit=5 period=367d"),
              "invalid \"period=367d\": expected a time from 1ms to 366d, like 500ms, 1s, 1m, 1h, 7d");
    EXPECT_EQ(error_of("limit=5 colour=red"),
              "unknown parameter \"colour=red\": expected zone=, key=, algorithm=, limit=, period=, burst=, "
              "cost=, name=, zero_cost=, log_key=, limit_default=, limit_max=, charge=, ban=, abandoned=, "
              "priority=, classes=, class_default=, fair=, align=, buckets=, max_delay=, delay=, reset=, "
              "utc_offset=, max_wait=, lease=, min=, initial=, tolerance= or interval=");
    EXPECT_EQ(error_of("limit=5 zero_cost=on"),
              "\"zero_cost=\" applies to cost=$variable only: a constant cost=0 always looks without spending");
    EXPECT_EQ(error_of("limit=5 zero_cost=maybe"),
              "invalid \"zero_cost=maybe\": expected zero_cost=on or zero_cost=off");
    EXPECT_EQ(error_of("limit=5 log_key=yes"), "invalid \"log_key=yes\": expected log_key=on or log_key=off");
    EXPECT_EQ(error_of("limit=5 abandoned=charge"),
              "\"abandoned=\" applies to rules with charge= only: it says what a request its client abandoned "
              "spends, its reservation (keep) or its charge");
    EXPECT_EQ(error_of("limit=5 abandoned=free"),
              "invalid \"abandoned=free\": expected abandoned=keep or abandoned=charge");
    EXPECT_EQ(error_of("limit=5 fast"), "invalid parameter \"fast\": expected name=value");
    EXPECT_EQ(error_of("limit=5 limit=6"), "duplicate parameter \"limit=6\": each parameter may be given once");
    EXPECT_EQ(error_of("limit=5 cost=2 cost=$a"), "duplicate parameter \"cost=$a\": each parameter may be given once");
    EXPECT_EQ(error_of("period=1s"), "missing \"limit=\": every rule needs one, e.g. limit=100");
    EXPECT_EQ(error_of("algorithm=fixed_window limit=5 burst=2"),
              "\"burst=2\" does not apply to algorithm=fixed_window: burst is for gcra and token_bucket");
    EXPECT_EQ(error_of("limit=5 align=first"),
              "\"align=\" does not apply to algorithm=gcra: align is for fixed_window");
    EXPECT_EQ(error_of("algorithm=fixed_window limit=5 align=noon"),
              "invalid \"align=noon\": expected align=epoch or align=first");
    EXPECT_EQ(error_of("limit=5 cost=6"), "\"cost=6\" can never be admitted: it exceeds burst=5");
    EXPECT_EQ(error_of("algorithm=fixed_window limit=5 cost=6"),
              "\"cost=6\" can never be admitted: it exceeds limit=5");
    EXPECT_EQ(error_of("limit=5 cost=x"),
              "invalid \"cost=x\": expected an integer from 0 to 1000000000, or a $variable");
    EXPECT_EQ(error_of("limit=5 name=a\"b"),
              "invalid \"name=a\"b\": expected 1 to 63 letters, digits, \"_\", \"-\" or \".\"");
    EXPECT_EQ(error_of("limit=5 name="), "invalid \"name=\": expected 1 to 63 letters, digits, \"_\", \"-\" or \".\"");
    EXPECT_EQ(error_of("limit=5 name=" + std::string(64, 'n')),
              "invalid \"name=" + std::string(64, 'n') + "\": expected " RL_NAME_EXPECTED);
    EXPECT_EQ(error_of("limit=5 cost=$arg_c"), "invalid \"cost=$arg_c\": variables are only known inside nginx");
    EXPECT_NE(error_of("limit=1000000000 period=366d").find("is too large"), std::string::npos);
}

// A bucket holds burst x period and a shaper limit x (period + max_delay),
// in ms, at most 2^61 (README, "ratelimit"): each edge, and one past it.
// Rules' and zones' names alike (ratelimit_zone checks its NAME with it).
TEST(Rule, NamesAreLettersDigitsAndThreeMarks)
{
    auto valid = [](const std::string &s) { return rl_name_valid(s.data(), s.size()); };
    for (const char *ok : {"a", "Z", "0", "_", "-", ".", "per_ip-v1.2", "__proto__", "constructor", "toString"}) {
        EXPECT_EQ(valid(ok), 1) << ok;
    }
    EXPECT_EQ(valid(std::string(63, 'n')), 1);
    EXPECT_EQ(valid(std::string(64, 'n')), 0);
    EXPECT_EQ(valid(""), 0);
    for (const char *bad : {"a/b", "a b", "a\nb", "a\"b", "<b>", "a\\b", "\xff", "caf\xc3\xa9", "a:b", "a{b}", "%41"}) {
        EXPECT_EQ(valid(bad), 0) << bad;
    }
    EXPECT_EQ(valid(std::string("a\0b", 3)), 0);
}

TEST(Rule, StateBoundEdges)
{
    EXPECT_EQ(rule_of("limit=1000000000 period=2305843009ms").burst, 1000000000u);
    EXPECT_EQ(error_of("limit=1000000000 period=2305843010ms"),
              "burst=1000000000 with \"period=2305843010ms\" is too large: burst x period in ms may be at most "
              "2^61: with burst=1000000000, period may be at most 2305843009ms (26.6 days); with this period, "
              "burst=999999999 at most");
    EXPECT_EQ(rule_of("limit=1000000000 period=26d").period_ms, 26LL * 86400000);
    EXPECT_EQ(error_of("limit=1000000000 period=30d"),
              "burst=1000000000 with \"period=30d\" is too large: burst x period in ms may be at most 2^61: with "
              "burst=1000000000, period may be at most 2305843009ms (26.6 days); with this period, burst=889599926 "
              "at most");
    EXPECT_EQ(rule_of("limit=72918026 period=366d").burst, 72918026u);
    EXPECT_NE(error_of("limit=72918027 period=366d").find("burst=72918026 at most"), std::string::npos);
    EXPECT_EQ(rule_of("limit=1 period=366d burst=72918026").burst, 72918026u);
    EXPECT_NE(error_of("limit=1 period=366d burst=72918027").find("is too large"), std::string::npos);
    EXPECT_NE(error_of("limit=1 burst=1000000000 period=366d").find("burst=72918026 at most"), std::string::npos);
    EXPECT_EQ(rule_of("algorithm=token_bucket limit=1000000000 period=2305843009ms").burst, 1000000000u);
    EXPECT_NE(error_of("algorithm=token_bucket limit=1000000000 period=2305843010ms").find("is too large"),
              std::string::npos);

    // leaky_bucket: max_delay defaults to period
    EXPECT_EQ(rule_of("algorithm=leaky_bucket limit=1000000000 period=1152921504ms").limit, 1000000000u);
    EXPECT_EQ(rule_of("algorithm=leaky_bucket limit=1000000000 period=1s max_delay=2305842009ms").limit, 1000000000u);
    EXPECT_EQ(error_of("algorithm=leaky_bucket limit=1000000000 period=1s max_delay=2305842010ms"),
              "limit=1000000000 with \"period=1s\" and max_delay is too large: limit x (period + max_delay) in ms "
              "may be at most 2^61: with limit=1000000000, period + max_delay may be at most 2305843009ms (26.6 "
              "days); with these times, limit=999999999 at most");
    EXPECT_EQ(rule_of("algorithm=leaky_bucket limit=36459013 period=366d").limit, 36459013u);
    EXPECT_NE(error_of("algorithm=leaky_bucket limit=36459014 period=366d").find("limit=36459013 at most"),
              std::string::npos);

    // the counting algorithms have no such bound: every limit with every period
    for (const char *alg : {"fixed_window", "sliding_window", "quota"}) {
        std::string text = std::string("algorithm=") + alg + " limit=1000000000 " +
                           (std::strcmp(alg, "quota") == 0 ? "reset=monthly" : "period=366d");
        EXPECT_EQ(rule_of(text.c_str()).limit, 1000000000u) << text;
    }
}

TEST(Rule, AlgorithmSpecificParameters)
{
    EXPECT_EQ(rl::own_value(rule_of("algorithm=sliding_window limit=5"), "buckets"), 10);
    EXPECT_EQ(rl::own_value(rule_of("algorithm=sliding_window limit=5 buckets=1"), "buckets"), 1);
    EXPECT_EQ(rl::own_value(rule_of("algorithm=sliding_window limit=5 buckets=100"), "buckets"), 100);
    EXPECT_EQ(rl::own_value(rule_of("algorithm=leaky_bucket limit=5 period=1m"), "max_delay"), 60000);
    EXPECT_EQ(rl::own_value(rule_of("algorithm=leaky_bucket limit=5 max_delay=0"), "max_delay"), 0);
    EXPECT_EQ(rl::own_value(rule_of("algorithm=leaky_bucket limit=5 max_delay=2500ms"), "max_delay"), 2500);
    rl_rule_t q = rule_of("algorithm=quota limit=1000 reset=monthly utc_offset=-05:30");
    EXPECT_EQ(rl::own_value(q, "reset"), RL_RESET_MONTHLY);
    EXPECT_EQ(rl::own_value(q, "utc_offset"), -330);
    EXPECT_STREQ(q.name, "quota_1000_monthly");
    EXPECT_EQ(rl::own_value(rule_of("algorithm=quota limit=1 reset=daily utc_offset=+14:00"), "utc_offset"), 840);
    EXPECT_EQ(rule_of("algorithm=sliding_log limit=10000 period=24d").limit, 10000u);

    EXPECT_EQ(error_of("algorithm=sliding_window limit=5 buckets=0"),
              "invalid \"buckets=0\": expected an integer from 1 to 100");
    EXPECT_EQ(error_of("algorithm=sliding_window limit=5 buckets=101"),
              "invalid \"buckets=101\": expected an integer from 1 to 100");
    EXPECT_EQ(error_of("limit=5 buckets=4"),
              "\"buckets=\" does not apply to algorithm=gcra: buckets is for sliding_window");
    // an algorithm's own parameter before algorithm=, once only, and
    // refused by another algorithm even when that one's own come first
    EXPECT_EQ(rl::own_value(rule_of("buckets=4 algorithm=sliding_window limit=5"), "buckets"), 4);
    EXPECT_EQ(error_of("algorithm=sliding_window limit=5 buckets=4 buckets=5"),
              "duplicate parameter \"buckets=5\": each parameter may be given once");
    EXPECT_EQ(error_of("max_delay=5s delay=2 buckets=3 algorithm=leaky_bucket limit=5"),
              "\"buckets=\" does not apply to algorithm=leaky_bucket: buckets is for sliding_window");
    EXPECT_EQ(error_of("algorithm=concurrency limit=5 max_wait=1s max_wait=2s"),
              "duplicate parameter \"max_wait=2s\": each parameter may be given once");
    EXPECT_EQ(error_of("limit=5 max_wait=1s"),
              "\"max_wait=\" does not apply to algorithm=gcra: max_wait is for concurrency and adaptive");
    EXPECT_EQ(error_of("algorithm=adaptive limit=5 lease=10s"),
              "\"lease=\" does not apply to algorithm=adaptive: lease is for concurrency");
    EXPECT_EQ(error_of("algorithm=sliding_log limit=10001"),
              "\"limit=10001\" is too large for algorithm=sliding_log: it keeps one time a unit, at most 10000; use "
              "sliding_window for larger limits");
    EXPECT_EQ(error_of("algorithm=sliding_log limit=5 period=25d"),
              "\"period=\" is too long for algorithm=sliding_log: at most 24d (2^31 ms); use sliding_window or quota "
              "for longer periods");
    EXPECT_EQ(error_of("algorithm=leaky_bucket limit=5 max_delay=soon"),
              "invalid \"max_delay=soon\": expected a time from 0ms to 366d, like 500ms, 5s, 1m");
    EXPECT_EQ(error_of("algorithm=leaky_bucket limit=5 burst=3"),
              "\"burst=3\" does not apply to algorithm=leaky_bucket: burst is for gcra and token_bucket");
    EXPECT_EQ(error_of("limit=5 max_delay=1s"),
              "\"max_delay=\" does not apply to algorithm=gcra: max_delay is for leaky_bucket");
    EXPECT_EQ(error_of("algorithm=quota limit=5"),
              "missing \"reset=\" for algorithm=quota: expected reset=daily, weekly or monthly");
    EXPECT_EQ(error_of("algorithm=quota limit=5 reset=yearly"),
              "invalid \"reset=yearly\": expected reset=daily, reset=weekly or reset=monthly");
    EXPECT_EQ(error_of("algorithm=quota limit=5 reset=daily period=1d"),
              "\"period=\" does not apply to algorithm=quota: its period is the calendar's, set by reset=daily, "
              "weekly or monthly");
    for (const char *bad : {"+15:00", "+14:01", "5:30", "+05:60", "+0530", "UTC", "+05:3a"}) {
        EXPECT_EQ(error_of(std::string("algorithm=quota limit=5 reset=daily utc_offset=") + bad),
                  std::string("invalid \"utc_offset=") + bad +
                      "\": expected +HH:MM or -HH:MM, at most 14:00, like +05:30");
    }
    EXPECT_EQ(error_of("limit=5 reset=daily"), "\"reset=\" does not apply to algorithm=gcra: reset is for quota");
    EXPECT_EQ(error_of("algorithm=quota limit=5 reset=daily cost=6"),
              "\"cost=6\" can never be admitted: it exceeds limit=5");
    EXPECT_NE(error_of("algorithm=leaky_bucket limit=1000000000 period=366d").find("is too large"), std::string::npos);
    EXPECT_EQ(rl_state_size(&q), sizeof(rl_state_t));
    rl_rule_t sw = rule_of("algorithm=sliding_window limit=5 buckets=10");
    EXPECT_EQ(rl_state_size(&sw), sizeof(rl_state_t) + 12 + 4 * 11);
    rl_rule_t sl = rule_of("algorithm=sliding_log limit=100");
    EXPECT_EQ(rl_state_size(&sl), sizeof(rl_state_t) + 16 + 4 * 100);
}

TEST(Rule, ParamReportsDeclinedForTheGluesParameters)
{
    rl_rule_t r;
    rl_rule_init(&r, name_room());
    char err[RL_ERR_MAX];
    for (const char *p : {"zone=api", "key=$remote_addr", "cost=$arg_cost"}) {
        EXPECT_EQ(rl_rule_param(&r, p, std::strlen(p), err, sizeof(err)), RL_DECLINED) << p;
    }
}

TEST(Rule, TimeSyntaxIsNginxs)
{
    EXPECT_EQ(ms_of("500ms"), 500);
    EXPECT_EQ(ms_of("1s"), 1000);
    EXPECT_EQ(ms_of("30"), 30000);
    EXPECT_EQ(ms_of("1m"), 60000);
    EXPECT_EQ(ms_of("1m30s"), 90000);
    EXPECT_EQ(ms_of("1m30"), 90000);
    EXPECT_EQ(ms_of("1h"), 3600000);
    EXPECT_EQ(ms_of("7d"), 7 * 86400000LL);
    EXPECT_EQ(ms_of("2w"), 14 * 86400000LL);
    EXPECT_EQ(ms_of("1d12h"), 36 * 3600000LL);
    EXPECT_EQ(ms_of("1s500ms"), 1500);
    EXPECT_EQ(ms_of(""), -1);
    EXPECT_EQ(ms_of("s"), -1);
    EXPECT_EQ(ms_of("1x"), -1);
    EXPECT_EQ(ms_of("1s1m"), -1);
    EXPECT_EQ(ms_of("1s1s"), -1);
    EXPECT_EQ(ms_of("1s5"), -1);
    EXPECT_EQ(ms_of("-1s"), -1);
    EXPECT_EQ(ms_of("1 s"), -1);
    EXPECT_EQ(ms_of("99999999999999999999s"), -1);
}

TEST(Rule, IdentityIsNameAndAlgorithmAndKeyWhenDerived)
{
    rl_rule_t a = rule_of("limit=10 name=api"), b = rule_of("limit=20 name=api");
    rl_rule_t c = rule_of("algorithm=token_bucket limit=10 name=api");
    EXPECT_EQ(rl_rule_identity(&a, "$a", 2), rl_rule_identity(&b, "$b", 2));  // named: limits may change
    EXPECT_NE(rl_rule_identity(&a, "$a", 2), rl_rule_identity(&c, "$a", 2));  // a state is one algorithm's
    rl_rule_t d = rule_of("limit=10");
    EXPECT_NE(rl_rule_identity(&d, "$a", 2), rl_rule_identity(&d, "$b", 2));  // derived: key expression counts
}

// Bytes a client chose never reach a log line raw: every byte outside
// printable ASCII, and '"' and '\', as \xNN; cut after max bytes.
TEST(Escape, EveryByteOutsidePrintableAsciiIsHex)
{
    char out[RL_ESCAPED_MAX(300)];
    std::string all;
    for (int c = 0; c < 256; c++) {
        all.push_back((char) c);
    }
    const std::string s(out, rl_escape(out, all.data(), all.size(), 256));
    std::string expect;
    for (int c = 0; c < 256; c++) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "\\x%02x", c);
        expect += c >= 0x20 && c < 0x7f && c != '"' && c != '\\' ? std::string(1, (char) c) : std::string(hex);
    }
    EXPECT_EQ(s, expect);
    EXPECT_EQ(s.find('\n'), std::string::npos);

    EXPECT_EQ(std::string(out, rl_escape(out, "abcdef", 6, 4)), "abcd...");
    EXPECT_EQ(std::string(out, rl_escape(out, "abcd", 4, 4)), "abcd");
    EXPECT_EQ(rl_escape(out, "", 0, 4), 0u);
    // the bound holds for the worst input
    const std::string worst(300, '\n');
    EXPECT_EQ(rl_escape(out, worst.data(), worst.size(), 64), (size_t) RL_ESCAPED_MAX(64));
}
