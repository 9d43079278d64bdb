// Redis replies are input: rl_redis_answer against hostile replies (every
// value at its bound and one past it, wrong types, wrong counts, error
// replies, redirections out of shape), the reader's length bound, and the
// core's own decisions on random steady traces (what the script gives, as
// tests/redis_test.cc shows) always taken.
#include <random>
#include <string>
#include <vector>

#include "helpers.h"

namespace {

// An answer of the script for one check: {request, then the check's 8}.
struct Reply {
    rl_resp_t r{};

    explicit Reply(std::vector<int64_t> items)
    {
        r.type = RL_RESP_ARRAY;
        r.integer = (int64_t) items.size();
        r.integers = 1;
        r.nitems = items.size();
        for (size_t i = 0; i < items.size() && i < RL_RESP_ITEMS_MAX; i++) {
            r.items[i] = items[i];
        }
    }
};

// A request of one check of the rule, with this cost.
struct One {
    rl_rule_t rule;
    rl_check_t c{};
    rl_request_t rq{};

    One(const std::string &text, uint64_t cost) : rule(var_rule_of(text))
    {
        c.rule = &rule;
        c.key = "k";
        c.key_len = 1;
        c.cost = cost;
        rq.checks = &c;
        rq.n = 1;
    }

    // The kind of the answer; why in *why.
    int answer(const std::vector<int64_t> &items, std::string *why = nullptr, int call = RL_REDIS_DECIDE)
    {
        Reply reply(items);
        rl_redis_answer_t a;
        const int kind = rl_redis_answer(&rq, call, &reply.r, &a);
        if (why != nullptr) {
            *why = a.why;
        }
        return kind;
    }
};

// {allowed, never, remaining, reset, retry, delay, window, available}
std::vector<int64_t> request(int64_t allowed, std::vector<int64_t> check)
{
    check.insert(check.begin(), allowed);
    return check;
}

const int64_t kSlack = RL_REDIS_CLOCK_SLACK_MS;

rl_resp_t error_reply(const std::string &text)
{
    rl_resp_t r{};
    r.type = RL_RESP_ERROR;
    static std::string keep;
    keep = text;
    r.str = keep.data();
    r.str_len = keep.size();
    return r;
}

TEST(RedisAnswer, ADecisionInRangeConcludesTheRequest)
{
    One one("algorithm=gcra limit=10 period=1m", 1);
    std::string why;
    ASSERT_EQ(one.answer(request(1, {1, 0, 9, 6000, 0, 0, 60000, 6000}), &why), RL_REDIS_DECIDED) << why;
    EXPECT_EQ(one.c.decision.remaining, 9u);
    EXPECT_EQ(one.c.decision.reset_ms, 6000);
    EXPECT_EQ(one.c.decision.quota, 10u);  // the policy is the core's
    Reply r(request(0, {0, 0, 0, 60000, 6000, 0, 60000, 6000}));
    rl_redis_answer_t a;
    ASSERT_EQ(rl_redis_answer(&one.rq, RL_REDIS_DECIDE, &r.r, &a), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(a.verdict, RL_VERDICT_REJECTED);
    EXPECT_EQ(one.c.decision.retry_after_ms, 6000);
}

// Every value at the most the rule can produce, then one past it.
TEST(RedisAnswer, EachValueAtItsBoundIsTakenAndOnePastIsNot)
{
    // gcra 10/min, burst 10: a full bucket's debt is 60 s
    const int64_t longest = 60000 + kSlack;
    One g("algorithm=gcra limit=10 period=1m", 1);
    std::string why;
    const std::vector<int64_t> ok = {0, 0, 0, longest, longest, 0, 60000, longest};
    ASSERT_EQ(g.answer(request(0, ok), &why), RL_REDIS_DECIDED) << why;
    struct Case {
        size_t item;
        int64_t value;
        const char *says;
    } cases[] = {
        {3, longest + 1, "reset_ms of rule \"gcra_10_1m\" is 120001: it can only be 0 to 120000"},
        {4, longest + 1, "retry_after_ms of rule \"gcra_10_1m\" is 120001: it can only be 1 to 120000"},
        {7, longest + 1, "available_ms of rule \"gcra_10_1m\" is 120001: it can only be 0 to 120000"},
        {4, 0, "retry_after_ms of rule \"gcra_10_1m\" is 0: it can only be 1 to 120000"},
        {3, -1, "reset_ms of rule \"gcra_10_1m\" is -1"},
        {2, 11, "remaining of rule \"gcra_10_1m\" is 11: it can only be 0 to 10"},
        {2, -1, "remaining of rule \"gcra_10_1m\" is -1"},
        {5, 1, "delay_ms of rule \"gcra_10_1m\" is 1: it can only be 0"},
        {6, 60001, "window_ms of rule \"gcra_10_1m\" is 60001: it can only be 60000"},
        {1, 1, "never of rule \"gcra_10_1m\" is 1: it can only be 0"},
        {0, 2, "allowed of rule \"gcra_10_1m\" is 2: it can only be 0 to 1"},
        {3, INT64_MAX, "reset_ms of rule \"gcra_10_1m\" is 9223372036854775807"},
        {4, 1LL << 62, "retry_after_ms of rule \"gcra_10_1m\" is 4611686018427387904"},
        {3, INT64_MIN, "reset_ms of rule \"gcra_10_1m\" is -9223372036854775808"},
    };
    for (const Case &k : cases) {
        std::vector<int64_t> v = ok;
        v[k.item] = k.value;
        EXPECT_EQ(g.answer(request(0, v), &why), RL_REDIS_FAILED) << k.says;
        EXPECT_EQ(why.find(k.says), 0u) << why;
    }
    // admitted: no Retry-After
    EXPECT_EQ(g.answer(request(1, {1, 0, 9, 6000, 0, 0, 60000, 6000})), RL_REDIS_DECIDED);
    EXPECT_EQ(g.answer(request(1, {1, 0, 9, 6000, 1, 0, 60000, 6000}), &why), RL_REDIS_FAILED);
    EXPECT_EQ(why, "retry_after_ms of rule \"gcra_10_1m\" is 1: it can only be 0");
}

TEST(RedisAnswer, EachAlgorithmsLongestWait)
{
    struct Case {
        const char *rule;
        int64_t longest;  // on a steady clock
        int64_t window;
        uint64_t quota;
    } cases[] = {
        {"algorithm=gcra limit=10 period=1m burst=30", 180000, 60000, 30},
        {"algorithm=token_bucket limit=7 period=1s", 1000, 1000, 7},
        {"algorithm=token_bucket limit=1 period=100ms", 1000, 100, 1},  // never's retry: 1 s
        {"algorithm=fixed_window limit=5 period=1h", 3600000, 3600000, 5},
        {"algorithm=sliding_window limit=5 period=1m buckets=6", 70000, 60000, 5},
        {"algorithm=sliding_log limit=5 period=10s", 10000, 10000, 5},
        // the queue: delay x T + (max_delay + T) x limit units, 1/limit ms
        {"algorithm=leaky_bucket limit=10 period=1s max_delay=2s delay=3", 3300, 1000, 24},
        {"algorithm=quota limit=100 reset=daily", 86400000, 86400000, 100},
        {"algorithm=quota limit=100 reset=weekly", 7 * 86400000LL, 7 * 86400000LL, 100},
        // limit=$var: a key's state may hold limit_max's burst, 50 x 1 min
        {"algorithm=gcra limit=$v limit_default=10 limit_max=50 period=1m", 300000, 60000, 10},
    };
    for (const Case &k : cases) {
        One one(k.rule, 1);
        const int64_t most = k.longest + kSlack;
        std::string why;
        EXPECT_EQ(one.answer(request(0, {0, 0, (int64_t) k.quota, most, most, 0, k.window, most}), &why),
                  RL_REDIS_DECIDED)
            << k.rule << ": " << why;
        EXPECT_EQ(one.answer(request(0, {0, 0, (int64_t) k.quota + 1, most, most, 0, k.window, most})), RL_REDIS_FAILED)
            << k.rule;
        EXPECT_EQ(one.answer(request(0, {0, 0, 0, most + 1, most, 0, k.window, most})), RL_REDIS_FAILED) << k.rule;
        EXPECT_EQ(one.answer(request(0, {0, 0, 0, most, most + 1, 0, k.window, most})), RL_REDIS_FAILED) << k.rule;
    }
    // a month is 28 to 31 days
    One month("algorithm=quota limit=100 reset=monthly", 1);
    EXPECT_EQ(month.answer(request(1, {1, 0, 99, 86400000, 0, 0, 28 * 86400000LL, 86400000})), RL_REDIS_DECIDED);
    EXPECT_EQ(month.answer(request(1, {1, 0, 99, 86400000, 0, 0, 31 * 86400000LL, 86400000})), RL_REDIS_DECIDED);
    EXPECT_EQ(month.answer(request(1, {1, 0, 99, 86400000, 0, 0, 32 * 86400000LL, 86400000})), RL_REDIS_FAILED);
    EXPECT_EQ(month.answer(request(1, {1, 0, 99, 86400000, 0, 0, 27 * 86400000LL, 86400000})), RL_REDIS_FAILED);
}

// A delay only from a shaper admitting, at most max_delay; "never" exactly
// when the cost exceeds what the rule admits (a cost capped where it is
// sent, as Lua's numbers need).
TEST(RedisAnswer, ADelayIsAShapersAndNeverFollowsTheCost)
{
    const char *const shaper = "algorithm=leaky_bucket limit=10 period=1s max_delay=2s";
    const char *const window = "algorithm=fixed_window limit=5 period=1m";
    struct Case {
        const char *rule;
        uint64_t cost;
        std::vector<int64_t> reply;
        int kind;
        const char *why;  // "": not checked
    } cases[] = {
        {shaper, 1, {1, 1, 0, 0, 2100, 0, 2000, 1000, 100}, RL_REDIS_DECIDED, ""},
        {shaper,
         1,
         {1, 1, 0, 0, 2100, 0, 2001, 1000, 100},
         RL_REDIS_FAILED,
         "delay_ms of rule \"leaky_bucket_10_1s\" is 2001: it can only be 0 to 2000"},
        {shaper, 1, {1, 1, 0, 0, 2100, 0, 1LL << 62, 1000, 100}, RL_REDIS_FAILED, ""},
        {shaper, 1, {1, 1, 0, 0, 2100, 0, -1, 1000, 100}, RL_REDIS_FAILED, ""},
        {shaper, 1, {0, 0, 0, 0, 3100, 100, 5, 1000, 100}, RL_REDIS_FAILED, ""},  // refused: no delay
        {window, 6, {0, 0, 1, 5, 0, 1000, 0, 60000, 0}, RL_REDIS_DECIDED, ""},
        {window,
         6,
         {0, 0, 0, 5, 0, 1000, 0, 60000, 0},
         RL_REDIS_FAILED,
         "never of rule \"fixed_window_5_1m\" is 0: it can only be 1"},
        {window,
         6,
         {1, 1, 1, 5, 0, 0, 0, 60000, 0},
         RL_REDIS_FAILED,
         "allowed of rule \"fixed_window_5_1m\" is 1: it can only be 0"},
        {window, UINT64_MAX, {0, 0, 1, 5, 0, 1000, 0, 60000, 0}, RL_REDIS_DECIDED, ""},
    };
    for (const Case &k : cases) {
        One one(k.rule, k.cost);
        std::string why;
        EXPECT_EQ(one.answer(k.reply, &why), k.kind) << k.rule << " cost " << k.cost << ": " << why;
        if (*k.why) {
            EXPECT_EQ(why, k.why);
        }
    }
}

TEST(RedisAnswer, TheRequestsAnswerFollowsItsRulesAndCombine)
{
    rl_rule_t a = rule_of("algorithm=fixed_window limit=5 period=1m name=a");
    rl_rule_t b = rule_of("algorithm=fixed_window limit=5 period=1m name=b");
    rl_check_t c[3] = {};
    const rl_rule_t *rules[3] = {&a, &b, &a};
    for (int i = 0; i < 3; i++) {
        c[i].rule = rules[i];
        c[i].key = i == 1 ? "" : "k";  // the second is exempt: not in the reply
        c[i].key_len = i == 1 ? 0 : 1;
        c[i].cost = 1;
    }
    rl_request_t rq{};
    rq.checks = c;
    rq.n = 3;
    const std::vector<int64_t> yes = {1, 0, 4, 60000, 0, 0, 60000, 60000};
    const std::vector<int64_t> no = {0, 0, 0, 60000, 60000, 0, 60000, 60000};
    auto reply = [&](int64_t all, const std::vector<int64_t> &x, const std::vector<int64_t> &y) {
        std::vector<int64_t> v = {all};
        v.insert(v.end(), x.begin(), x.end());
        v.insert(v.end(), y.begin(), y.end());
        return Reply(v);
    };
    rl_redis_answer_t out;
    Reply r = reply(1, yes, yes);
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &r.r, &out), RL_REDIS_DECIDED) << out.why;
    EXPECT_EQ(out.verdict, RL_VERDICT_PASSED);
    r = reply(1, yes, no);
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &r.r, &out), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(out.why), "the request's answer is 1 where its rules' answers make it 0 (1 of 2 allowing)");
    rq.combine = RL_COMBINE_ANY;
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &r.r, &out), RL_REDIS_DECIDED) << out.why;
    r = reply(0, yes, no);
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &r.r, &out), RL_REDIS_FAILED);
    // a peek combines with all, whatever the request's combine
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_PEEK, &r.r, &out), RL_REDIS_DECIDED) << out.why;
    EXPECT_EQ(c[0].decision.remaining, 4u);
    EXPECT_EQ(c[2].decision.retry_after_ms, 60000);
    // the exempt check's place is not in the reply: 17 items
    Reply three = Reply(std::vector<int64_t>(1 + 8 * 3, 0));
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &three.r, &out), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(out.why), "an array of 25 items, expected 17 integers");
}

TEST(RedisAnswer, RepliesOfTheWrongShape)
{
    One one("limit=10", 1);
    rl_redis_answer_t a;
    auto kind_of = [&](const std::string &bytes) {
        rl_resp_t r;
        EXPECT_EQ(rl_resp_parse(bytes.data(), bytes.size(), &r), (long) bytes.size()) << bytes;
        return rl_redis_answer(&one.rq, RL_REDIS_DECIDE, &r, &a);
    };
    EXPECT_EQ(kind_of("+OK\r\n"), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(a.why), "a status reply, expected an array of 9 integers");
    EXPECT_EQ(kind_of(":1\r\n"), RL_REDIS_FAILED);
    EXPECT_EQ(kind_of("$-1\r\n"), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(a.why), "a nil, expected an array of 9 integers");
    EXPECT_EQ(kind_of("$5\r\nhello\r\n"), RL_REDIS_FAILED);
    EXPECT_EQ(kind_of("*-1\r\n"), RL_REDIS_FAILED);
    EXPECT_EQ(kind_of("*0\r\n"), RL_REDIS_FAILED);
    EXPECT_EQ(kind_of("*2\r\n:1\r\n:1\r\n"), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(a.why), "an array of 2 items, expected 9 integers");
    // nine items, one of them nested, or a string
    std::string nested = "*9\r\n:1\r\n*1\r\n:0\r\n";
    std::string text = "*9\r\n:1\r\n$1\r\n0\r\n";
    for (int i = 0; i < 7; i++) {
        nested += ":0\r\n";
        text += ":0\r\n";
    }
    EXPECT_EQ(kind_of(nested), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(a.why), "an array of 9 items not all integers, expected 9 integers");
    EXPECT_EQ(kind_of(text), RL_REDIS_FAILED);
}

TEST(RedisAnswer, ErrorRepliesNoscriptAndRedirections)
{
    One one("limit=10", 1);
    rl_redis_answer_t a;
    auto kind_of = [&](const std::string &text) {
        rl_resp_t r = error_reply(text);
        return rl_redis_answer(&one.rq, RL_REDIS_DECIDE, &r, &a);
    };
    EXPECT_EQ(kind_of("NOSCRIPT No matching script. Please use EVAL."), RL_REDIS_NOSCRIPT);
    EXPECT_EQ(kind_of("NOSCRIPT"), RL_REDIS_NOSCRIPT);
    EXPECT_EQ(kind_of("NOSCRIPTS"), RL_REDIS_FAILED);
    EXPECT_EQ(kind_of("ERR Error running script\nforged line"), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(a.why), "an error reply");  // the text is the glue's to show, escaped

    ASSERT_EQ(kind_of("MOVED 3999 127.0.0.1:6381"), RL_REDIS_REDIRECT) << a.why;
    EXPECT_EQ(a.slot, 3999u);
    EXPECT_EQ(a.ask, 0);
    EXPECT_EQ(std::string(a.host, a.host_len), "127.0.0.1");
    EXPECT_EQ(a.port, 6381u);
    ASSERT_EQ(kind_of("ASK 16383 ::1:7000"), RL_REDIS_REDIRECT) << a.why;
    EXPECT_EQ(a.ask, 1);
    EXPECT_EQ(a.slot, 16383u);
    EXPECT_EQ(std::string(a.host, a.host_len), "::1");
    EXPECT_EQ(a.port, 7000u);
    ASSERT_EQ(kind_of("MOVED 0 redis-2.internal:6379"), RL_REDIS_REDIRECT);
    EXPECT_EQ(std::string(a.host, a.host_len), "redis-2.internal");
    for (const char *bad :
         {"MOVED 16384 127.0.0.1:6381", "MOVED -1 127.0.0.1:6381", "MOVED 3999 127.0.0.1", "MOVED 3999 127.0.0.1:0",
          "MOVED 3999 127.0.0.1:65536", "MOVED 3999 :6381", "MOVED 3999 127.0.0.1:6381 extra",
          "MOVED 3999  127.0.0.1:6381", "MOVED 3999 127.0.0.1\n:6381", "MOVED 3999 a\"b:1", "MOVED 123456 h:1",
          "ASK x h:1", "MOVED 3999 127.0.0.1:99999999999999999999"}) {
        EXPECT_EQ(kind_of(bad), RL_REDIS_FAILED) << bad;
        EXPECT_EQ(std::string(a.why).find("a MOVED or ASK reply out of shape"), 0u) << bad << ": " << a.why;
    }
    EXPECT_EQ(kind_of("MOVED 1 " + std::string(256, 'h') + ":1"), RL_REDIS_FAILED);
    EXPECT_EQ(kind_of("MOVED 1 " + std::string(255, 'h') + ":1"), RL_REDIS_REDIRECT);
}

TEST(RedisAnswer, AConnectionsOwnCommandWantsOk)
{
    rl_redis_answer_t a;
    rl_resp_t r;
    ASSERT_EQ(rl_resp_parse("+OK\r\n", 5, &r), 5);
    EXPECT_EQ(rl_redis_answer(nullptr, RL_REDIS_DECIDE, &r, &a), RL_REDIS_DECIDED);
    ASSERT_EQ(rl_resp_parse("+QUEUED\r\n", 9, &r), 9);
    EXPECT_EQ(rl_redis_answer(nullptr, RL_REDIS_DECIDE, &r, &a), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(a.why), "a status reply, expected \"+OK\"");
    ASSERT_EQ(rl_resp_parse(":1\r\n", 4, &r), 4);
    EXPECT_EQ(rl_redis_answer(nullptr, RL_REDIS_DECIDE, &r, &a), RL_REDIS_FAILED);
    r = error_reply("MOVED 1 127.0.0.1:1");  // no redirection for AUTH
    EXPECT_EQ(rl_redis_answer(nullptr, RL_REDIS_DECIDE, &r, &a), RL_REDIS_FAILED);
    r = error_reply("NOSCRIPT");
    EXPECT_EQ(rl_redis_answer(nullptr, RL_REDIS_DECIDE, &r, &a), RL_REDIS_FAILED);
}

TEST(RedisAnswer, AResetSaysWhichRulesHadAState)
{
    rl_rule_t r = rule_of("limit=10");
    rl_check_t c[3] = {};
    for (int i = 0; i < 3; i++) {
        c[i].rule = &r;
        c[i].key = "k";
        c[i].key_len = 1;
    }
    rl_request_t rq{};
    rq.checks = c;
    rq.n = 3;
    rl_redis_answer_t a;
    Reply ok({1, 1, 0, 1});
    ASSERT_EQ(rl_redis_answer(&rq, RL_REDIS_RESET, &ok.r, &a), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(a.found, 5u);
    for (const std::vector<int64_t> &bad :
         std::vector<std::vector<int64_t>>{{1, 1, 0}, {1, 1, 0, 2}, {1, -1, 0, 0}, {0, 1, 0, 1}, {1, 1, 0, 1, 1}}) {
        Reply b(bad);
        EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_RESET, &b.r, &a), RL_REDIS_FAILED);
    }
}

TEST(Resp, AReplyLongerThanTheBoundIsRefusedAsSoonAsItSaysSo)
{
    rl_resp_t r;
    // a bulk string of 1 MB: refused from its header
    const std::string mb = "$1048576\r\n";
    EXPECT_EQ(rl_resp_parse(mb.data(), mb.size(), &r), RL_RESP_TOO_LONG);
    const std::string max = "$" + std::to_string(RL_RESP_REPLY_MAX) + "\r\n";
    EXPECT_EQ(rl_resp_parse(max.data(), max.size(), &r), 0);  // may still fit: wants more
    const std::string over = "$" + std::to_string(RL_RESP_REPLY_MAX + 1) + "\r\n";
    EXPECT_EQ(rl_resp_parse(over.data(), over.size(), &r), RL_RESP_TOO_LONG);
    // an array announcing more items than the bound has room for
    EXPECT_EQ(rl_resp_parse("*1000000\r\n", 10, &r), RL_RESP_TOO_LONG);
    EXPECT_EQ(rl_resp_parse("*4611686018427387904\r\n:1\r\n", 26, &r), RL_RESP_TOO_LONG);
    // a reply that is all there up to the bound and not over: refused
    std::string lines = "*5000\r\n";
    while (lines.size() < RL_RESP_REPLY_MAX + 10) {
        lines += ":1\r\n";
    }
    EXPECT_EQ(rl_resp_parse(lines.data(), RL_RESP_REPLY_MAX - 1, &r), 0);
    EXPECT_EQ(rl_resp_parse(lines.data(), lines.size(), &r), RL_RESP_TOO_LONG);
    // a status line that never ends
    const std::string endless = "+" + std::string(RL_RESP_REPLY_MAX, 'x');
    EXPECT_EQ(rl_resp_parse(endless.data(), endless.size(), &r), RL_RESP_TOO_LONG);
    // at the bound exactly: taken
    const std::string full =
        "$" + std::to_string(RL_RESP_REPLY_MAX - 10) + "\r\n" + std::string(RL_RESP_REPLY_MAX - 10, 'y') + "\r\n";
    ASSERT_EQ(full.size(), (size_t) RL_RESP_REPLY_MAX);
    EXPECT_EQ(rl_resp_parse(full.data(), full.size(), &r), RL_RESP_REPLY_MAX);
}

// The core's own decisions, written as the script writes them (the script
// gives the core's decisions: tests/redis_test.cc), on random traces of a
// steady clock, with variable limits and bursts changing under a key: every
// one is taken, even with all its times RL_REDIS_CLOCK_SLACK_MS later.  A
// bound too tight for what the algorithm produces fails here.
TEST(RedisAnswer, EveryDecisionOfTheCoreOnASteadyClockIsTaken)
{
    const char *const rules[] = {
        "algorithm=gcra limit=10 period=1m burst=25",
        "algorithm=gcra limit=$v limit_default=5 limit_max=40 period=10s",
        "algorithm=token_bucket limit=$v limit_default=5 limit_max=40 burst=$b period=1s",
        "algorithm=token_bucket limit=3 period=700ms",
        "algorithm=fixed_window limit=7 period=1m align=first",
        "algorithm=fixed_window limit=7 period=1m",
        "algorithm=sliding_window limit=9 period=1m buckets=1",
        "algorithm=sliding_window limit=9 period=7s buckets=60",
        "algorithm=sliding_window limit=$v limit_default=4 limit_max=30 period=1s buckets=7",
        "algorithm=sliding_log limit=6 period=5s",
        "algorithm=sliding_log limit=$v limit_default=4 limit_max=30 period=5s",
        "algorithm=leaky_bucket limit=4 period=1s max_delay=3s delay=2",
        "algorithm=leaky_bucket limit=$v limit_default=4 limit_max=20 period=1s max_delay=1s",
        "algorithm=leaky_bucket limit=2 period=1m max_delay=0",
        "algorithm=quota limit=20 reset=daily",
        "algorithm=quota limit=20 reset=monthly utc_offset=-08:00",
    };
    std::mt19937_64 g(24);
    size_t taken = 0;
    for (const char *text : rules) {
        const rl_rule_t base = var_rule_of(text);
        for (int trace = 0; trace < 40 && !HasFailure(); trace++) {
            std::vector<uint8_t> state(rl_state_size(&base), 0);
            int64_t now = kT0 + (int64_t) (g() % (40 * 86400000LL));
            for (int op = 0; op < 300 && !HasFailure(); op++) {
                rl_rule_t rule = base;
                if (base.limit_var || base.burst_var) {
                    const std::string limit = std::to_string(1 + g() % base.limit_max);
                    const std::string burst = std::to_string(1 + g() % base.limit_max);
                    char err[RL_ERR_MAX];
                    rl_rule_apply(&base, limit.data(), limit.size(), burst.data(), burst.size(), &rule, err,
                                  sizeof(err));
                }
                const uint64_t top = std::max(rule.limit, rule.burst);
                const unsigned pick = (unsigned) (g() % 100);
                const uint64_t cost = pick < 70 ? 1 : pick < 80 ? 0 : pick < 97 ? g() % (top + 1) : top + 1;
                rl_decision_t d;
                rl_transition(&rule, state.data(), now, cost, 1, &d);
                // the script's window: the period (policy() is the core's)
                const bool paced =
                    rule.algorithm == RL_GCRA || rule.algorithm == RL_TOKEN_BUCKET || rule.algorithm == RL_LEAKY_BUCKET;
                const int64_t window = paced ? rule.period_ms : d.window_ms;
                rl_check_t c{};
                c.rule = &rule;
                c.key = "k";
                c.key_len = 1;
                c.cost = cost;
                rl_request_t rq{};
                rq.checks = &c;
                rq.n = 1;
                // as on Redis's clock stepped back by all the slack: the
                // steady clock's bound is what is tested
                Reply r({d.allowed, d.allowed, d.never, (int64_t) d.remaining, d.reset_ms + kSlack,
                         d.retry_after_ms ? d.retry_after_ms + kSlack : 0, d.delay_ms, window,
                         d.available_ms + kSlack});
                rl_redis_answer_t a;
                ASSERT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &r.r, &a), RL_REDIS_DECIDED)
                    << text << " (limit " << rule.limit << ", burst " << rule.burst << ") cost " << cost << " at op "
                    << op << ": " << a.why;
                taken++;
                const int64_t period = rule.algorithm == RL_QUOTA ? 86400000 : rule.period_ms;
                const unsigned step = (unsigned) (g() % 100);
                now += step < 60 ? (int64_t) (g() % (uint64_t) (period / 20 + 2))
                                 : (int64_t) (g() % (uint64_t) (2 * period + 1));
            }
        }
    }
    EXPECT_EQ(taken, 16u * 40 * 300);
}

}  // namespace
