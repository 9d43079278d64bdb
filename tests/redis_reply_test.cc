// Redis replies are input: rl_redis_answer against hostile replies (every
// value at its bound and one past it, wrong types, wrong counts, error
// replies, redirections out of shape), the reader's length bound, and the
// core's own decisions on random steady traces (what the script gives, as
// tests/redis_trace_test.cc shows) always taken.
#include <random>
#include <string>
#include <vector>

#include "helpers.h"

namespace {

// The script's clock in the answers here.
const int64_t kNow = kT0;

// An answer of the script: {request, clock, then each check's 12 (a
// peek's 13)}.
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

    // The script's whole answer from {request, the check's first 8}: its
    // clock (kNow), no ban, the head's t after a commit as the script
    // gives it (a millisecond after its clock) when the check commits, the
    // cost reserved, no ban started.
    std::vector<int64_t> of(std::vector<int64_t> items, int call = RL_REDIS_DECIDE) const
    {
        const bool committed = call == RL_REDIS_DECIDE && items[0] == 1 && items[1] == 1 && c.cost > 0;
        items.insert(items.begin() + 1, kNow);
        items.push_back(0);
        items.push_back(committed ? kNow + 1 : 0);
        items.push_back((int64_t) std::min<uint64_t>(c.cost, RL_REDIS_UNITS_MAX));  // as sent
        items.push_back(0);
        if (call == RL_REDIS_PEEK) {
            items.push_back(0);  // leases of this server
        }
        return items;
    }

    // The kind of the answer (given as of() takes it, or whole); why in
    // *why.
    int answer(const std::vector<int64_t> &items, std::string *why = nullptr, int call = RL_REDIS_DECIDE)
    {
        Reply reply(items.size() == 9 ? of(items, call) : items);
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
    Reply r(one.of(request(0, {0, 0, 0, 60000, 6000, 0, 60000, 6000})));
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
    const std::vector<int64_t> yes = {1, 0, 4, 60000, 0, 0, 60000, 60000, 0};
    const std::vector<int64_t> no = {0, 0, 0, 60000, 60000, 0, 60000, 60000, 0};
    // each check's 9, then after (the head's t once committed, else 0),
    // the cost reserved and no ban started (and a peek's leases here: 0)
    auto reply = [&](int64_t all, std::vector<int64_t> x, int64_t xa, std::vector<int64_t> y, int64_t ya,
                     bool peek = false) {
        std::vector<int64_t> v = {all, kNow};
        x.insert(x.end(), {xa, 1, 0});
        y.insert(y.end(), {ya, 1, 0});
        if (peek) {
            x.push_back(0);
            y.push_back(0);
        }
        v.insert(v.end(), x.begin(), x.end());
        v.insert(v.end(), y.begin(), y.end());
        return Reply(v);
    };
    const int64_t end = kNow + 60000;
    rl_redis_answer_t out;
    Reply r = reply(1, yes, end, yes, end);
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &r.r, &out), RL_REDIS_DECIDED) << out.why;
    EXPECT_EQ(out.verdict, RL_VERDICT_PASSED);
    EXPECT_EQ(c[0].at, kNow);  // what settling a charge gives back
    EXPECT_EQ(c[2].after.t, end);
    r = reply(1, yes, end, no, 0);
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &r.r, &out), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(out.why), "the request's answer is 1 where its rules' answers make it 0 (1 of 2 allowing)");
    rq.combine = RL_COMBINE_ANY;
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &r.r, &out), RL_REDIS_DECIDED) << out.why;
    r = reply(0, yes, 0, no, 0);
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &r.r, &out), RL_REDIS_FAILED);
    // a peek combines with all, whatever the request's combine, and commits
    // nothing
    r = reply(0, yes, end, no, 0, true);
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_PEEK, &r.r, &out), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(out.why), "after of rule \"a\" is 1767225660000: it can only be 0 (nothing committed)");
    r = reply(0, yes, 0, no, 0);  // a decision's shape: no leases here
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_PEEK, &r.r, &out), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(out.why), "an array of 26 items, expected 28 integers");
    r = reply(0, yes, 0, no, 0, true);
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_PEEK, &r.r, &out), RL_REDIS_DECIDED) << out.why;
    EXPECT_EQ(c[0].decision.remaining, 4u);
    EXPECT_EQ(c[2].decision.retry_after_ms, 60000);
    // the exempt check's place is not in the reply: 26 items
    Reply three = Reply(std::vector<int64_t>(2 + 12 * 3, 0));
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &three.r, &out), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(out.why), "an array of 38 items, expected 26 integers");
}

TEST(RedisAnswer, RepliesOfTheWrongShape)
{
    One one("limit=10", 1);
    rl_redis_answer_t a;
    std::string why;
    auto kind_of = [&](const std::string &bytes) {
        rl_resp_t r;
        EXPECT_EQ(rl_resp_parse(bytes.data(), bytes.size(), &r), (long) bytes.size()) << bytes;
        return rl_redis_answer(&one.rq, RL_REDIS_DECIDE, &r, &a);
    };
    EXPECT_EQ(kind_of("+OK\r\n"), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(a.why), "a status reply, expected an array of 14 integers");
    EXPECT_EQ(kind_of(":1\r\n"), RL_REDIS_FAILED);
    EXPECT_EQ(kind_of("$-1\r\n"), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(a.why), "a nil, expected an array of 14 integers");
    EXPECT_EQ(kind_of("$5\r\nhello\r\n"), RL_REDIS_FAILED);
    EXPECT_EQ(kind_of("*-1\r\n"), RL_REDIS_FAILED);
    EXPECT_EQ(kind_of("*0\r\n"), RL_REDIS_FAILED);
    EXPECT_EQ(kind_of("*2\r\n:1\r\n:1\r\n"), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(a.why), "an array of 2 items, expected 14 integers");
    // fourteen items, one of them nested, or a string
    std::string nested = "*14\r\n:1\r\n*1\r\n:0\r\n";
    std::string text = "*14\r\n:1\r\n$1\r\n0\r\n";
    for (int i = 0; i < 12; i++) {
        nested += ":0\r\n";
        text += ":0\r\n";
    }
    EXPECT_EQ(kind_of(nested), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(a.why), "an array of 14 items not all integers, expected 14 integers");
    EXPECT_EQ(kind_of(text), RL_REDIS_FAILED);
    // the script's clock: a time from 1970 that Lua's numbers hold exactly
    for (int64_t now : {(int64_t) 0, (int64_t) -1, (int64_t) RL_REDIS_UNITS_MAX + 1}) {
        std::vector<int64_t> v = one.of({0, 0, 0, 0, 1000, 1000, 0, 1000, 1000});
        v[1] = now;
        EXPECT_EQ(one.answer(v, &why), RL_REDIS_FAILED) << now;
        EXPECT_EQ(why.find("the script's clock is "), 0u) << why;
    }
}

// The kind of a string answer (a bulk string of text) to rq's decision.
int string_answer(rl_request_t &rq, const std::string &text, rl_redis_answer_t &a)
{
    const std::string bytes = "$" + std::to_string(text.size()) + "\r\n" + text + "\r\n";
    rl_resp_t r;
    EXPECT_EQ(rl_resp_parse(bytes.data(), bytes.size(), &r), (long) bytes.size()) << bytes;
    return rl_redis_answer(&rq, RL_REDIS_DECIDE, &r, &a);
}

// A decision of one gcra rule answered with a string: "ALLOWED NOW" and
// the state as the script read it; the figures are the core's, the
// script's admission must be theirs, and anything out of shape is refused.
TEST(RedisAnswer, ALeanStringIsWorkedOutByTheCoreAndJudged)
{
    One one("algorithm=gcra limit=10 period=1m", 1);
    rl_redis_answer_t a;
    auto kind_of = [&](const std::string &text) { return string_answer(one.rq, text, a); };
    const std::string now = std::to_string(kNow);
    // no state: a full bucket of 10, one unit spent (6 s a unit)
    ASSERT_EQ(kind_of("1 " + now), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(a.verdict, RL_VERDICT_PASSED);
    EXPECT_EQ(one.c.decision.remaining, 9u);
    EXPECT_EQ(one.c.decision.reset_ms, 6000);
    EXPECT_EQ(one.c.decision.available_ms, 6000);
    EXPECT_EQ(one.c.decision.window_ms, 60000);
    EXPECT_EQ(one.c.after.t, kNow + 6000);  // the head the script wrote
    EXPECT_EQ(one.c.reserved, 1u);
    // the instant 6 s ahead (a unit spent): 8 left after this one
    ASSERT_EQ(kind_of("1 " + now + " " + std::to_string(kNow + 6000) + " 0 10 60000"), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(one.c.decision.remaining, 8u);
    EXPECT_EQ(one.c.after.t, kNow + 12000);
    // 3 ms and 4 units of 1/10 ms ahead: the fraction counts
    ASSERT_EQ(kind_of("1 " + now + " " + std::to_string(kNow + 3) + " 4 10 60000"), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(one.c.decision.reset_ms, 6004);  // (34 + 60000) / 10, rounded up
    EXPECT_EQ(one.c.after.t, kNow + 6003);     // rounded down, as the script writes it
    // the bucket spent: refused, 6 s to wait (the script's refusal)
    const std::string spent = " " + std::to_string(kNow + 60000) + " 0 10 60000";
    ASSERT_EQ(kind_of("0 " + now + spent), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(a.verdict, RL_VERDICT_REJECTED);
    EXPECT_EQ(one.c.decision.retry_after_ms, 6000);
    EXPECT_EQ(one.c.after.t, 0);
    // an admission the state does not allow, or a refusal it does not make
    EXPECT_EQ(kind_of("1 " + now + spent), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(a.why).find("the request's answer is 1 where its rules' answers make it 0"), 0u) << a.why;
    EXPECT_EQ(kind_of("0 " + now), RL_REDIS_FAILED);
    // out of shape
    for (const std::string &bad : std::vector<std::string>{
             std::string(""), "1", "1 " + now + " ", " 1 " + now, "1  " + now, "2 " + now, "-1 " + now, "1 x",
             "1 " + now + " 5", "1 " + now + " 5 0 10", "1 " + now + " 5 0 11 60000", "1 " + now + " 5 0 10 1000",
             "1 " + now + " 5 0 10 60000 1", "1 " + now + " 5 -1 10 60000", "1 " + now + " 5 0 10 60000 ",
             "1 " + now + " 99999999999999999 0 10 60000"}) {
        EXPECT_EQ(kind_of(bad), RL_REDIS_FAILED) << bad;
        EXPECT_EQ(std::string(a.why).find("a string answer out of shape"), 0u) << bad << ": " << a.why;
    }
    // the script's clock as the whole answer's
    EXPECT_EQ(kind_of("1 0"), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(a.why).find("the script's clock is "), 0u) << a.why;
    // a string to a request the script answers with integers
    for (const char *rule : {"algorithm=sliding_window limit=10", "limit=10 ban=1m", "limit=10 charge=1",
                             "algorithm=leaky_bucket limit=10"}) {
        One other(rule, 1);
        EXPECT_EQ(string_answer(other.rq, "1 " + now, a), RL_REDIS_FAILED) << rule;
        EXPECT_EQ(std::string(a.why), "a string answer to a request the script answers with integers") << rule;
    }
    one.rq.dry_run = 1;
    EXPECT_EQ(kind_of("1 " + now), RL_REDIS_FAILED);
}

// The same of a count: "T N", N units in the window ending T.
TEST(RedisAnswer, ALeanStringOfACountIsItsWindow)
{
    One one("algorithm=fixed_window limit=10 period=1m", 3);
    rl_redis_answer_t a;
    auto kind_of = [&](const std::string &text) { return string_answer(one.rq, text, a); };
    const std::string now = std::to_string(kNow + 15000), end = std::to_string(kNow + 60000);
    ASSERT_EQ(kind_of("1 " + now), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(one.c.decision.remaining, 7u);
    EXPECT_EQ(one.c.decision.reset_ms, 45000);
    EXPECT_EQ(one.c.after.t, kNow + 60000);  // the window the script counted them in
    ASSERT_EQ(kind_of("1 " + now + " " + end + " 6"), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(one.c.decision.remaining, 1u);
    // the last window's count is over: a fresh window
    ASSERT_EQ(kind_of("1 " + now + " " + std::to_string(kNow) + " 9"), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(one.c.decision.remaining, 7u);
    ASSERT_EQ(kind_of("0 " + now + " " + end + " 8"), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(a.verdict, RL_VERDICT_REJECTED);
    EXPECT_EQ(one.c.decision.retry_after_ms, 45000);
    EXPECT_EQ(kind_of("1 " + now + " " + end + " 8"), RL_REDIS_FAILED);
    for (const std::string &bad : std::vector<std::string>{
             "1 " + now + " " + end, "1 " + now + " " + end + " 6 10 60000", "1 " + now + " " + end + " 2147483648"}) {
        EXPECT_EQ(kind_of(bad), RL_REDIS_FAILED) << bad;
        EXPECT_EQ(std::string(a.why).find("a string answer out of shape"), 0u) << bad << ": " << a.why;
    }
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
    // FCALL of a library not loaded (Redis 7, Valkey): load it, call again
    EXPECT_EQ(kind_of("ERR Function not found"), RL_REDIS_NOSCRIPT);
    // FCALL unknown (Redis 6: `FCALL`; 7: 'FCALL'), or not the user's: the
    // script instead; another command unknown, or another's NOPERM, fails
    EXPECT_EQ(kind_of("ERR unknown command `FCALL`, with args beginning with: `ratelimit_0`, "), RL_REDIS_NO_FUNCTIONS);
    EXPECT_EQ(kind_of("ERR unknown command 'fcall', with args beginning with: "), RL_REDIS_NO_FUNCTIONS);
    EXPECT_EQ(kind_of("NOPERM this user has no permissions to run the 'fcall' command"), RL_REDIS_NO_FUNCTIONS);
    EXPECT_EQ(kind_of("NOPERM User limiter has no permissions to run the 'fcall' command"), RL_REDIS_NO_FUNCTIONS);
    EXPECT_EQ(kind_of("NOPERM this user has no permissions to access one of the keys used as arguments"),
              RL_REDIS_FAILED);
    EXPECT_EQ(kind_of("ERR unknown command 'EVALSHA', with args beginning with: "), RL_REDIS_FAILED);
    EXPECT_EQ(kind_of("ERR Error running script\nforged line"), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(a.why), "an error reply");  // the text is the glue's to show, escaped
    // a replica (a failover): failed, and the connection is to be opened again
    EXPECT_EQ(kind_of("READONLY You can't write against a read only replica. script: 5e15, on @user_script:1."),
              RL_REDIS_READONLY);
    EXPECT_EQ(std::string(a.why), "an error reply of a replica");
    EXPECT_EQ(kind_of("READONLY"), RL_REDIS_READONLY);
    EXPECT_EQ(kind_of("READONLYX"), RL_REDIS_FAILED);
    EXPECT_EQ(kind_of("ERR READONLY"), RL_REDIS_FAILED);

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
    EXPECT_EQ(a.unbanned, 0u);
    // 2: a ban lifted (ban=), with or without a state
    Reply bans({1, 3, 2, 0});
    ASSERT_EQ(rl_redis_answer(&rq, RL_REDIS_RESET, &bans.r, &a), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(a.found, 1u);
    EXPECT_EQ(a.unbanned, 3u);
    for (const std::vector<int64_t> &bad :
         std::vector<std::vector<int64_t>>{{1, 1, 0}, {1, 1, 0, 4}, {1, -1, 0, 0}, {0, 1, 0, 1}, {1, 1, 0, 1, 1}}) {
        Reply b(bad);
        EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_RESET, &b.r, &a), RL_REDIS_FAILED);
    }
}

// concurrency: a refusal has no Retry-After; an admission's lease runs at
// most lease= (and the clock's slack) past the script's clock, and the
// check keeps its lease only when it took one.  A release's or a
// renewal's answer: {1, live, expired} of exactly the leases sent.
TEST(RedisAnswer, ConcurrencyLeasesAndTheirReleases)
{
    One o("algorithm=concurrency limit=3 lease=10s", 1);
    o.c.lease = 7;
    std::string why;
    Reply taken(std::vector<int64_t>{1, kNow, 1, 0, 2, 0, 0, 0, 0, 0, 0, kNow + 10000, 1, 0});
    rl_redis_answer_t a;
    ASSERT_EQ(rl_redis_answer(&o.rq, RL_REDIS_DECIDE, &taken.r, &a), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(o.c.lease, 7u);
    EXPECT_EQ(rl_redis_holds_lease(&o.c), 1);
    Reply far(std::vector<int64_t>{1, kNow, 1, 0, 2, 0, 0, 0, 0, 0, 0, kNow + 10001 + kSlack, 1, 0});
    EXPECT_EQ(rl_redis_answer(&o.rq, RL_REDIS_DECIDE, &far.r, &a), RL_REDIS_FAILED);
    Reply refused(std::vector<int64_t>{0, kNow, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0});
    ASSERT_EQ(rl_redis_answer(&o.rq, RL_REDIS_DECIDE, &refused.r, &a), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(a.verdict, RL_VERDICT_REJECTED);
    EXPECT_EQ(o.c.decision.retry_after_ms, 0);
    EXPECT_EQ(o.c.lease, 0u);  // no lease kept
    Reply window(std::vector<int64_t>{0, kNow, 0, 0, 0, 0, 0, 0, 1000, 0, 0, 0, 1, 0});
    EXPECT_EQ(rl_redis_answer(&o.rq, RL_REDIS_DECIDE, &window.r, &a), RL_REDIS_FAILED);

    // a peek: this server's live leases, at most what the key holds (all
    // of the limit but what remains); none for another rule
    One look("algorithm=concurrency limit=3 lease=10s", 0);
    for (int64_t remaining : {0, 1, 2, 3}) {
        const int64_t most = remaining == 0 ? RL_LIMIT_MAX : 3 - remaining;
        for (int64_t here : {(int64_t) 0, most, most + 1, (int64_t) -1}) {
            Reply p(std::vector<int64_t>{1, kNow, 1, 0, remaining, 0, 0, 0, 0, 0, 0, 0, 0, 0, here});
            const bool ok = here >= 0 && here <= most;
            ASSERT_EQ(rl_redis_answer(&look.rq, RL_REDIS_PEEK, &p.r, &a), ok ? RL_REDIS_DECIDED : RL_REDIS_FAILED)
                << remaining << " " << here << " " << a.why;
            if (ok) {
                EXPECT_EQ(a.here[0], (uint32_t) here);
            } else {
                EXPECT_EQ(std::string(a.why), "leases here of rule \"concurrency_3_at_once\" is " +
                                                  std::to_string(here) + ": it can only be 0" +
                                                  (most > 0 ? " to " + std::to_string(most) : ""));
            }
        }
    }
    One rate("algorithm=fixed_window limit=3 period=1m", 0);
    Reply other(std::vector<int64_t>{1, kNow, 1, 0, 3, 0, 0, 0, 60000, 0, 0, 0, 0, 0, 1});
    EXPECT_EQ(rl_redis_answer(&rate.rq, RL_REDIS_PEEK, &other.r, &a), RL_REDIS_FAILED);
    EXPECT_EQ(std::string(a.why), "leases here of rule \"fixed_window_3_1m\" is 1: it can only be 0");

    o.c.lease = 8;
    for (int call : {RL_REDIS_RELEASE, RL_REDIS_RENEW, RL_REDIS_RESTORE}) {
        Reply live({1, 1, 0}), gone({1, 0, 1});
        ASSERT_EQ(rl_redis_answer(&o.rq, call, &live.r, &a), RL_REDIS_DECIDED) << a.why;
        EXPECT_EQ(a.leases_done, 1u);
        ASSERT_EQ(rl_redis_answer(&o.rq, call, &gone.r, &a), RL_REDIS_DECIDED) << a.why;
        EXPECT_EQ(a.leases_gone, 1u);
        for (const std::vector<int64_t> &bad :
             std::vector<std::vector<int64_t>>{{1, 1, 1}, {1, 0, 0}, {0, 1, 0}, {1, -1, 2}, {1, 1}, {1, 1, 0, 0}}) {
            Reply b(bad);
            EXPECT_EQ(rl_redis_answer(&o.rq, call, &b.r, &a), RL_REDIS_FAILED) << bad.size();
        }
    }
}

// ban=: a ban's time only from a ban= rule, at most its length (and the
// clock's slack), and only on a refusal (a peek's look shows it too); its
// refusals wait up to the ban's end.
TEST(RedisAnswer, ABanIsABanRulesRefusalAtMostItsLength)
{
    const int64_t ban = 3600000 + kSlack;
    One banned("algorithm=sliding_log limit=5 period=1s ban=1h", 1);
    std::string why;
    std::vector<int64_t> v = banned.of(request(0, {0, 0, 0, ban, ban, 0, 1000, ban}));
    v[2 + 8] = ban;
    ASSERT_EQ(banned.answer(v, &why), RL_REDIS_DECIDED) << why;
    EXPECT_EQ(banned.c.decision.banned_ms, ban);
    v[2 + 8] = ban + 1;
    EXPECT_EQ(banned.answer(v, &why), RL_REDIS_FAILED);
    EXPECT_EQ(why, "banned_ms of rule \"sliding_log_5_1s\" is 3660001: it can only be 0 to 3660000");
    EXPECT_EQ(banned.answer(request(0, {0, 0, 0, ban, ban + 1, 0, 1000, ban}), &why), RL_REDIS_FAILED);
    // admitted: never banned, but a peek's look (cost 0) shows the ban
    v = banned.of(request(1, {1, 0, 4, 1000, 0, 0, 1000, 1000}));
    v[2 + 8] = 1000;
    EXPECT_EQ(banned.answer(v, &why), RL_REDIS_FAILED);
    EXPECT_EQ(why, "banned_ms of rule \"sliding_log_5_1s\" is 1000: it can only be 0");
    EXPECT_EQ(banned.answer(v, &why, RL_REDIS_PEEK), RL_REDIS_FAILED);
    One look("algorithm=sliding_log limit=5 period=1s ban=1h", 0);
    v = look.of(request(1, {1, 0, 5, 0, 0, 0, 1000, 0}), RL_REDIS_PEEK);
    v[2 + 8] = 1000;
    EXPECT_EQ(look.answer(v, &why, RL_REDIS_PEEK), RL_REDIS_DECIDED) << why;
    EXPECT_EQ(look.c.decision.banned_ms, 1000);
    // a rule without ban=: none
    One plain("algorithm=sliding_log limit=5 period=1s", 1);
    v = plain.of(request(0, {0, 0, 0, 1000, 1000, 0, 1000, 1000}));
    v[2 + 8] = 1;
    EXPECT_EQ(plain.answer(v, &why), RL_REDIS_FAILED);
    EXPECT_EQ(why, "banned_ms of rule \"sliding_log_5_1s\" is 1: it can only be 0");
}

// charge=: a key may owe a limit beyond an empty budget, and waits for it.
TEST(RedisAnswer, ADebtsWaitIsWithinTheRulesBound)
{
    struct Case {
        const char *rule;
        int64_t longest;  // on a steady clock, with a debt
        int64_t window;
    } cases[] = {
        // 10 of debt beyond a burst of 10, at 10 a minute
        {"algorithm=gcra limit=10 period=1m charge=$c", 120000, 60000},
        {"algorithm=token_bucket limit=10 period=1m burst=30 charge=$c", 240000, 60000},
        // carried into the next window
        {"algorithm=fixed_window limit=5 period=1h charge=$c", 7200000, 3600000},
        {"algorithm=quota limit=5 reset=daily charge=$c", 2 * 86400000LL, 86400000},
        // owed up to two windows and a tick, then the window as it is then
        {"algorithm=sliding_window limit=5 period=1m buckets=6 charge=$c", 3 * 60000 + 2 * 10000 + 2, 60000},
        // the log moved a period later
        {"algorithm=sliding_log limit=5 period=10s charge=$c", 20000, 10000},
        // a ban longer than any debt
        {"algorithm=sliding_log limit=5 period=10s charge=$c ban=1h", 3600000, 10000},
    };
    for (const Case &k : cases) {
        One one(k.rule, 1);
        const int64_t most = k.longest + kSlack;
        std::string why;
        EXPECT_EQ(one.answer(request(0, {0, 0, 0, most, most, 0, k.window, most}), &why), RL_REDIS_DECIDED)
            << k.rule << ": " << why;
        EXPECT_EQ(one.answer(request(0, {0, 0, 0, most + 1, most, 0, k.window, most})), RL_REDIS_FAILED) << k.rule;
        EXPECT_EQ(one.answer(request(0, {0, 0, 0, most, most + 1, 0, k.window, most})), RL_REDIS_FAILED) << k.rule;
        EXPECT_EQ(one.answer(request(0, {0, 0, 0, most, most, 0, k.window, most + 1})), RL_REDIS_FAILED) << k.rule;
    }
}

// The head's t after a commit (what settling a charge gives back): there
// exactly when the check commits, from the script's clock to its longest
// wait after it.
TEST(RedisAnswer, AfterIsTheHeadsTimeExactlyWhenTheCheckCommits)
{
    One one("algorithm=fixed_window limit=5 period=1m charge=$c", 1);
    const int64_t most = kNow + 120000 + kSlack;  // a window carried into the next
    std::string why;
    std::vector<int64_t> v = one.of(request(1, {1, 0, 4, 60000, 0, 0, 60000, 60000}));
    for (int64_t after : {kNow, kNow + 60000, most}) {
        v[v.size() - 3] = after;
        EXPECT_EQ(one.answer(v, &why), RL_REDIS_DECIDED) << after << ": " << why;
        EXPECT_EQ(one.c.after.t, after);
        EXPECT_EQ(one.c.at, kNow);
    }
    for (int64_t after : {(int64_t) 0, kNow - 1, most + 1, INT64_MIN}) {
        v[v.size() - 3] = after;
        EXPECT_EQ(one.answer(v, &why), RL_REDIS_FAILED) << after;
        EXPECT_EQ(why.find("after of rule \"fixed_window_5_1m\" is "), 0u) << why;
    }
    // refused, or a look (cost 0): nothing committed
    v = one.of(request(0, {0, 0, 0, 60000, 60000, 0, 60000, 60000}));
    v[v.size() - 3] = kNow + 1;
    EXPECT_EQ(one.answer(v, &why), RL_REDIS_FAILED);
    EXPECT_EQ(why, "after of rule \"fixed_window_5_1m\" is 1767225600001: it can only be 0 (nothing committed)");
    One look("algorithm=fixed_window limit=5 period=1m", 0);
    v = look.of(request(1, {1, 0, 5, 0, 0, 0, 60000, 0}));
    EXPECT_EQ(v[v.size() - 3], 0);
    EXPECT_EQ(look.answer(v, &why), RL_REDIS_DECIDED) << why;
    v[v.size() - 3] = kNow + 1;
    EXPECT_EQ(look.answer(v, &why), RL_REDIS_FAILED);
}

// A settle's answer: for each check that settles (charge= admitted, its
// charge known), the units charged, in debt, capped.
TEST(RedisAnswer, ASettleSaysWhatEachCheckCharged)
{
    rl_rule_t tokens = rule_of("algorithm=gcra limit=10 period=1m charge=$c name=tokens");
    rl_rule_t plain = rule_of("limit=10 name=plain");
    rl_check_t c[4] = {};
    const rl_rule_t *rules[4] = {&tokens, &plain, &tokens, &tokens};
    const int outcomes[4] = {RL_OUTCOME_ALLOWED, RL_OUTCOME_ALLOWED, RL_OUTCOME_REJECTED, RL_OUTCOME_DELAYED};
    for (int i = 0; i < 4; i++) {
        c[i].rule = rules[i];
        c[i].key = "k";
        c[i].key_len = 1;
        c[i].cost = 1;
        c[i].outcome = outcomes[i];
        c[i].charge = 15;
    }
    c[3].charge = RL_NO_CHARGE;  // its value is not known: the reservation stands
    rl_request_t rq{};
    rq.checks = c;
    rq.n = 4;
    rl_redis_answer_t a;
    // the first check's charge, and the last's end (its reservation stands:
    // nothing charged); a bucket of 10 owes at most 10 more: 20
    Reply ok({1, 15, 1, 0, 0, 0, 0});
    ASSERT_EQ(rl_redis_answer(&rq, RL_REDIS_SETTLE, &ok.r, &a), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(c[0].charged, 15u);
    EXPECT_EQ(c[0].in_debt, 1);
    EXPECT_EQ(c[0].capped, 0);
    Reply cut({1, 12, 1, 1, 0, 0, 0});
    ASSERT_EQ(rl_redis_answer(&rq, RL_REDIS_SETTLE, &cut.r, &a), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(c[0].charged, 12u);
    EXPECT_EQ(c[0].capped, 1);
    for (const std::vector<int64_t> &bad : std::vector<std::vector<int64_t>>{
             {1, 16, 1, 1, 0, 0, 0},           // more than the charge
             {1, 12, 1, 0, 0, 0, 0},           // less, not capped
             {1, 0, 1, 1, 0, 0, 0},            // in debt, nothing charged
             {1, -1, 0, 1, 0, 0, 0},           // negative
             {1, 15, 2, 0, 0, 0, 0},           // a flag of 2
             {0, 15, 1, 0, 0, 0, 0},           // not the settle's first item
             {1, 15, 1, 0, 1, 0, 0},           // a charge where the reservation stands
             {1, 15, 1, 0},                    // one check's worth
             {1, 15, 1, 0, 0, 0, 0, 1, 0, 0},  // three checks' worth
         }) {
        Reply b(bad);
        EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_SETTLE, &b.r, &a), RL_REDIS_FAILED) << bad.size();
    }
    Reply b({1, 16, 1, 1, 0, 0, 0});
    rl_redis_answer(&rq, RL_REDIS_SETTLE, &b.r, &a);
    EXPECT_EQ(std::string(a.why),
              "the settle of rule \"tokens\" says 16 units charged, in debt 1, capped 1: expected 0 to 15 charged of "
              "15, in debt 0 or 1 (0 if nothing charged), capped 0 or 1 (1 if less than the charge)");
    // a charge past the bound (the largest rl_rule_charge gives): at most
    // the burst and a limit (20)
    c[0].charge = RL_NO_CHARGE - 1;
    Reply most({1, 20, 1, 1, 0, 0, 0});
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_SETTLE, &most.r, &a), RL_REDIS_DECIDED) << a.why;
    Reply past({1, 21, 1, 1, 0, 0, 0});
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_SETTLE, &past.r, &a), RL_REDIS_FAILED);
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
// gives the core's decisions: tests/redis_trace_test.cc), on random traces of a
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
                rl_state_t head;
                std::memcpy(&head, state.data(), sizeof(head));
                const bool committed = d.allowed && cost > 0;
                Reply r({d.allowed, now, d.allowed, d.never, (int64_t) d.remaining, d.reset_ms + kSlack,
                         d.retry_after_ms ? d.retry_after_ms + kSlack : 0, d.delay_ms, window, d.available_ms + kSlack,
                         0, committed ? head.t + kSlack : 0, (int64_t) cost, 0});
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

// FUNCTION LOAD's reply: the library's name (loaded), or that it exists
// (another server loaded it first) is the library there; any other error
// (not allowed, a Redis that cannot load it) sends the calls as scripts.
TEST(RedisAnswer, TheLibraryIsThereOrCallsGoAsScripts)
{
    rl_redis_answer_t a;
    auto kind_of = [&](const std::string &bytes) {
        rl_resp_t r;
        EXPECT_EQ(rl_resp_parse(bytes.data(), bytes.size(), &r), (long) bytes.size()) << bytes;
        return rl_redis_load_answer(&r, &a);
    };
    EXPECT_EQ(kind_of("$14\r\nratelimit_0123\r\n"), RL_REDIS_DECIDED);
    EXPECT_EQ(kind_of("-ERR Library 'ratelimit_0123' already exists\r\n"), RL_REDIS_DECIDED);
    EXPECT_EQ(kind_of("-NOPERM this user has no permissions to run the 'function|load' command\r\n"),
              RL_REDIS_NO_FUNCTIONS);
    EXPECT_EQ(std::string(a.why), "FUNCTION LOAD refused");
    EXPECT_EQ(kind_of("-ERR unknown command 'FUNCTION', with args beginning with: 'LOAD' \r\n"), RL_REDIS_NO_FUNCTIONS);
    EXPECT_EQ(kind_of("-ERR Error registering functions: user_function:1: syntax error\r\n"), RL_REDIS_NO_FUNCTIONS);
    EXPECT_EQ(kind_of("+OK\r\n"), RL_REDIS_NO_FUNCTIONS);
    EXPECT_EQ(kind_of(":1\r\n"), RL_REDIS_NO_FUNCTIONS);
}

}  // namespace
