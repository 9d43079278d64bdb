// Redis: the RESP reader, the key names, the commands (a request's, a
// settle's, with bans), and the script in a real redis-server on cases
// worked by hand: a debt and its Retry-After, a ban and its reset, expiry,
// NOSCRIPT.  (tests/redis_trace_test.cc compares the script with the core
// on random traces.)
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "helpers.h"
#include "policy/request.h"
#include "redis_server.h"

namespace {

// A check of the rule for a key (a literal: it outlives the check), as the
// glue fills one; no table (a Redis zone's command needs none).
rl_check_t one_check(const rl_rule_t *rule, uint64_t identity, const char *key, uint64_t cost)
{
    rl_check_t c{};
    c.rule = rule;
    c.identity = identity;
    c.key = key;
    c.key_len = std::strlen(key);
    c.cost = cost;
    return c;
}

using rltest::Redis;
using rltest::redis_server;
using rltest::script_sha;

// ---- RESP, keys, command ---------------------------------------------------

TEST(Resp, ParsesEveryTypeAndWaitsForMore)
{
    rl_resp_t r;
    EXPECT_EQ(rl_resp_parse("+OK\r\n", 5, &r), 5);
    EXPECT_EQ(r.type, RL_RESP_STATUS);
    EXPECT_EQ(std::string(r.str, r.str_len), "OK");
    EXPECT_EQ(rl_resp_parse("-NOSCRIPT No matching script\r\n", 30, &r), 30);
    EXPECT_EQ(r.type, RL_RESP_ERROR);
    EXPECT_EQ(std::string(r.str, 8), "NOSCRIPT");
    EXPECT_EQ(rl_resp_parse(":-42\r\n", 6, &r), 6);
    EXPECT_EQ(r.integer, -42);
    EXPECT_EQ(rl_resp_parse("$3\r\nabc\r\n", 9, &r), 9);
    EXPECT_EQ(std::string(r.str, r.str_len), "abc");
    EXPECT_EQ(rl_resp_parse("$-1\r\n", 5, &r), 5);
    EXPECT_EQ(r.integer, -1);
    const std::string arr = "*3\r\n:1\r\n:-2\r\n:9007199254740993\r\n";
    EXPECT_EQ(rl_resp_parse(arr.data(), arr.size(), &r), (long) arr.size());
    ASSERT_EQ(r.nitems, 3u);
    EXPECT_EQ(r.integers, 1);
    EXPECT_EQ(r.items[2], 9007199254740993LL);
    // every strict prefix is incomplete, never an error
    for (size_t n = 0; n < arr.size(); n++) {
        EXPECT_EQ(rl_resp_parse(arr.data(), n, &r), 0) << n;
    }
    const std::string mixed = "*2\r\n$1\r\nx\r\n*1\r\n:5\r\n";
    EXPECT_EQ(rl_resp_parse(mixed.data(), mixed.size(), &r), (long) mixed.size());
    EXPECT_EQ(r.integers, 0);
}

TEST(Resp, RejectsWhatIsNotResp)
{
    rl_resp_t r;
    EXPECT_EQ(rl_resp_parse("HTTP/1.1 200\r\n", 14, &r), -1);
    EXPECT_EQ(rl_resp_parse(":12a\r\n", 6, &r), -1);
    EXPECT_EQ(rl_resp_parse("$3\r\nabcd\r\n", 10, &r), -1);
    EXPECT_EQ(rl_resp_parse("*-5\r\n", 5, &r), -1);
    EXPECT_EQ(rl_resp_parse(":99999999999999999999\r\n", 23, &r), -1);
    std::string deep;
    for (int i = 0; i < 20; i++) {
        deep += "*1\r\n";
    }
    deep += ":1\r\n";
    EXPECT_EQ(rl_resp_parse(deep.data(), deep.size(), &r), -1);
}

TEST(Redis, KeyIsPrefixAndSha256OfIdentityAndKey)
{
    char a[64], b[64], c[64];
    EXPECT_EQ(rl_redis_key(a, "rl:", 3, 0, 1, "alice", 5), 35u);
    rl_redis_key(b, "rl:", 3, 0, 1, "alice", 5);
    rl_redis_key(c, "rl:", 3, 0, 2, "alice", 5);
    EXPECT_EQ(std::string(a, 35), std::string(b, 35));
    EXPECT_NE(std::string(a, 35), std::string(c, 35));
    EXPECT_EQ(std::string(a, 3), "rl:");
    // SHA-256 of the 8 bytes of identity 1 (little endian) then "alice"
    // (computed with sha256sum: printf '\x01\0\0\0\0\0\0\0alice' | sha256sum)
    EXPECT_EQ(std::string(a + 3, 32), std::string("7722d5739177bb0bf55354c4ef9cd6b0"));
}

TEST(Redis, ClusterKeysOfOneKeyValueShareASlot)
{
    // Redis's own examples: CRC16 of "123456789" is 0x31c3; a hash tag
    // names the slot
    EXPECT_EQ(rl_redis_slot("123456789", 9), 0x31c3u);
    EXPECT_EQ(rl_redis_slot("{user1000}.following", 20), rl_redis_slot("user1000", 8));
    EXPECT_EQ(rl_redis_slot("foo{}{bar}", 10), rl_redis_slot("foo{}{bar}", 10));
    EXPECT_EQ(rl_redis_slot("foo{}{bar}", 10), rl_redis_slot("foo{}{bar}x", 10));
    char a[80], b[80];
    const size_t la = rl_redis_key(a, "rl:", 3, 1, 1, "alice", 5);
    const size_t lb = rl_redis_key(b, "rl:", 3, 1, 2, "alice", 5);
    ASSERT_EQ(la, 3u + RL_REDIS_TAG_LEN + RL_REDIS_HASH_LEN);
    EXPECT_EQ(a[3], '{');
    EXPECT_EQ(a[3 + RL_REDIS_TAG_LEN - 1], '}');
    EXPECT_NE(std::string(a, la), std::string(b, lb));
    EXPECT_EQ(rl_redis_slot(a, la), rl_redis_slot(b, lb));
    EXPECT_EQ(rl_redis_slot(a, la), rl_redis_key_slot("alice", 5));
    EXPECT_LT(rl_redis_key_slot("bob", 3), 16384u);
}

TEST(Redis, RulesTooFineForLuaNumbersAreRefused)
{
    rl_rule_t ok = rule_of("algorithm=gcra limit=1000000 period=1d");
    rl_rule_t fine = rule_of("algorithm=gcra limit=1000000000 period=1h");
    rl_rule_t quota = rule_of("algorithm=quota limit=1000000000 reset=monthly");
    char err[RL_ERR_MAX];
    EXPECT_EQ(rl_redis_rule_ok(&ok, err, sizeof(err)), RL_OK);
    EXPECT_EQ(rl_redis_rule_ok(&fine, err, sizeof(err)), RL_ERROR);
    EXPECT_NE(std::string(err).find("2^50"), std::string::npos) << err;
    EXPECT_EQ(rl_redis_rule_ok(&quota, err, sizeof(err)), RL_OK);
}

// The arguments of a command, as strings (a command is an array of bulk
// strings).
std::vector<std::string> args_of(const std::string &cmd)
{
    std::vector<std::string> out;
    size_t p = cmd.find("\r\n") + 2;
    while (p < cmd.size()) {
        const size_t eol = cmd.find("\r\n", p);
        const size_t len = std::stoul(cmd.substr(p + 1, eol - p - 1));
        out.push_back(cmd.substr(eol + 2, len));
        p = eol + 2 + len + 2;
    }
    return out;
}

// The script knows its algorithms by name: the spec's number is read
// through the names embed.sh wrote from enum rl_algorithm, which must be
// the records' names, in the registry's order.
TEST(Redis, ScriptNamesEveryAlgorithmAsItsRecordDoes)
{
    size_t len = 0;
    const char *text = rl_redis_script(&len);
    const std::string script(text, len);
    std::string names = "local ALGORITHM_NAMES = {[0] = ";
    for (uint32_t a = 0; a < RL_ALGORITHM_COUNT; a++) {
        names += std::string(a > 0 ? ", '" : "'") + rl::algorithm_of(a).name + "'";
    }
    EXPECT_NE(script.find(names + "}\n"), std::string::npos) << names;
    for (uint32_t a = 0; a < RL_ALGORITHM_COUNT; a++) {
        if (rl::algorithm_of(a).no_redis == nullptr) {
            EXPECT_NE(script.find("\n  " + std::string(rl::algorithm_of(a).name) + " = {"), std::string::npos)
                << rl::algorithm_of(a).name;
        }
    }
}

TEST(Redis, CommandIsOneFcallWithKeysThenArguments)
{
    rl_rule_t r = rule_of("algorithm=gcra limit=10 period=1m");
    rl_check_t c = one_check(&r, 7, "bob", 2);
    const std::string sha(40, 'f');
    rl_request_t rq = request_of(&c, 1, RL_COMBINE_ANY);
    for (int via : {RL_REDIS_FCALL, RL_REDIS_EVALSHA}) {
        std::string cmd(rl_redis_command_size(1, 3, sha.size()), '\0');
        cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), via, RL_REDIS_DECIDE, "rl:", 3, 0, &rq, -1));
        rl_resp_t parsed;
        EXPECT_EQ(rl_resp_parse(cmd.data(), cmd.size(), &parsed), (long) cmd.size());
        EXPECT_EQ(parsed.integer, 3 + 1 + 2 + 2);
        const std::vector<std::string> a = args_of(cmd);
        ASSERT_EQ(a.size(), 8u);
        EXPECT_EQ(a[0], via == RL_REDIS_FCALL ? "FCALL" : "EVALSHA");
        // the library's function, named by the script's SHA-1
        EXPECT_EQ(a[1], via == RL_REDIS_FCALL ? "ratelimit_" + sha : sha);
        EXPECT_EQ(a[2], "1");
        EXPECT_EQ(a[4], "");   // Redis's clock
        EXPECT_EQ(a[5], "1");  // any
        // the spec: gcra, limit 10, burst 10, a minute, align epoch, the
        // default buckets and max_delay; no reset, offset, delay, ban,
        // charge, lease
        EXPECT_EQ(a[6], "0 10 10 60000 0 10 60000 0 0 0 0 0 0");
        EXPECT_EQ(a[7], "2");  // cost 2: no share, override, lease, not full
    }

    // a concurrency check: its lease's time (in the spec), its name, and
    // whether its server holds the limit already (a decision's only)
    rl_rule_t slots = rule_of("algorithm=concurrency limit=3 lease=2s");
    rl_check_t s = one_check(&slots, 9, "bob", 1);
    s.lease = 5;
    s.full_here = 1;
    rl_request_t srq = request_of(&s, 1, RL_COMBINE_ALL);
    srq.server = 0xaa;
    srq.lease = 0xbb;
    srq.holder = 42;
    for (int call : {RL_REDIS_DECIDE, RL_REDIS_RESTORE}) {
        std::string cmd(rl_redis_command_size(1, 3, sha.size()), '\0');
        cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), RL_REDIS_FCALL, call, "rl:", 3, 0, &srq, -1));
        const std::vector<std::string> a = args_of(cmd);
        ASSERT_EQ(a.size(), 8u);
        EXPECT_EQ(a[6].substr(a[6].size() - 5), " 2000") << a[6];
        EXPECT_EQ(a[7], std::string(call == RL_REDIS_DECIDE ? "1 0 0 1" : "1 0 0 0") +
                            " 00000000000000aa:00000000000000bb:42:5")
            << call;
    }
}

// The spec of a rule of each algorithm, as the script reads it: its own
// parameters in their places (align, buckets, max_delay, reset,
// utc_offset, delay, lease), and where another algorithm's stand the
// values every rule has always sent (align 0, buckets 10, max_delay the
// period, the rest 0).
TEST(Redis, TheSpecHoldsEachAlgorithmsOwnParametersInTheirPlaces)
{
    const std::string sha(40, 'f');
    auto spec_of = [&sha](const char *text) {
        rl_rule_t r = rule_of(text);
        rl_check_t c = one_check(&r, 7, "bob", 1);
        rl_request_t rq = request_of(&c, 1, RL_COMBINE_ANY);
        std::string cmd(rl_redis_command_size(1, 3, sha.size()), '\0');
        cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), RL_REDIS_FCALL, RL_REDIS_DECIDE, "rl:", 3, 0,
                                    &rq, -1));
        const std::vector<std::string> a = args_of(cmd);
        return a.size() == 8 ? a[6] : "(" + std::to_string(a.size()) + " arguments)";
    };
    // the rule, and its spec: algorithm, limit, burst, period, align,
    // buckets, max_delay, reset, utc_offset, delay, ban, charge, lease
    const struct {
        const char *rule, *spec;
    } rules[] = {
        {"algorithm=token_bucket limit=5 burst=8 period=1m", "1 5 8 60000 0 10 60000 0 0 0 0 0 0"},
        {"algorithm=fixed_window limit=5 period=1m align=first", "2 5 5 60000 1 10 60000 0 0 0 0 0 0"},
        {"algorithm=sliding_window limit=5 period=1m buckets=6", "3 5 5 60000 0 6 60000 0 0 0 0 0 0"},
        {"algorithm=sliding_log limit=5 period=1m", "4 5 5 60000 0 10 60000 0 0 0 0 0 0"},
        {"algorithm=leaky_bucket limit=5 max_delay=2s delay=3", "5 5 5 1000 0 10 2000 0 0 3 0 0 0"},
        {"algorithm=leaky_bucket limit=5 period=1m", "5 5 5 60000 0 10 60000 0 0 0 0 0 0"},
        {"algorithm=quota limit=5 reset=weekly utc_offset=-05:30", "6 5 5 604800000 0 10 604800000 1 -330 0 0 0 0"},
        {"algorithm=concurrency limit=3 lease=5s", "7 3 3 1000 0 10 1000 0 0 0 0 0 5000"},
        {"algorithm=concurrency limit=3", "7 3 3 1000 0 10 1000 0 0 0 0 0 30000"},
    };
    for (const auto &r : rules) {
        EXPECT_EQ(spec_of(r.rule), r.spec) << r.rule;
    }
}

// A batch: one call of the script, each request's keys in turn, then the
// clock, "batch", and each request's call, its rules and their arguments.
TEST(Redis, ABatchIsOneCallOfEveryRequestsKeysThenEachRequestsArguments)
{
    rl_rule_t r = rule_of("algorithm=gcra limit=10 period=1m");
    rl_rule_t b = rule_of("algorithm=fixed_window limit=5 period=1s ban=1m");
    rl_check_t one = one_check(&r, 7, "bob", 2);
    rl_check_t two[2] = {one_check(&r, 7, "amy", 1), one_check(&b, 8, "amy", 3)};
    rl_request_t rq1 = request_of(&one, 1, RL_COMBINE_ALL), rq2 = request_of(two, 2, RL_COMBINE_ANY);
    const rl_request_t *rqs[] = {&rq1, &rq2};
    const std::string sha(40, 'f');
    std::string cmd(rl_redis_batch_size(rqs, 2, 3, sha.size()), '\0');
    cmd.resize(rl_redis_batch_command(cmd.data(), sha.data(), sha.size(), RL_REDIS_FCALL, "rl:", 3, rqs, 2, -1));
    const std::vector<std::string> a = args_of(cmd);
    // FCALL name 4 keys (bob's; amy's two states and her ban), "", batch,
    // then 0 1 spec cost, then 1 2 spec cost spec cost
    ASSERT_EQ(a.size(), 3u + 4 + 2 + 4 + 6);
    EXPECT_EQ(a[1], "ratelimit_" + sha);
    EXPECT_EQ(a[2], "4");
    char key[128];
    EXPECT_EQ(a[3], std::string(key, rl_redis_key(key, "rl:", 3, 0, 7, "bob", 3)));
    EXPECT_EQ(a[4], std::string(key, rl_redis_key(key, "rl:", 3, 0, 7, "amy", 3)));
    EXPECT_EQ(a[5], std::string(key, rl_redis_key(key, "rl:", 3, 0, 8, "amy", 3)));
    EXPECT_NE(a[6], a[5]);  // the ban's
    EXPECT_EQ(a[7], "");
    EXPECT_EQ(a[8], "batch");
    EXPECT_EQ(a[9], "0");
    EXPECT_EQ(a[10], "1");
    EXPECT_EQ(a[12], "2");
    EXPECT_EQ(a[13], "1");  // any
    EXPECT_EQ(a[14], "2");
    EXPECT_EQ(a[16], "1");
    EXPECT_EQ(a[18], "3");
    EXPECT_EQ(a[11], a[15]);  // one rule, one spec
}

// A batch takes RL_REDIS_BATCH_MAX requests at most, and no more than
// their longest answers fit in one reply; its reply's answers are read one
// after the other, and anything else (an error) answers each of them.
TEST(Redis, ABatchsAnswersFitOneReplyAndAreReadInTurn)
{
    rl_rule_t r = rule_of("algorithm=gcra limit=10 period=1m");
    rl_check_t one = one_check(&r, 7, "bob", 1);
    rl_request_t rq = request_of(&one, 1, RL_COMBINE_ALL);
    size_t bytes = 0, n = 0;
    while (rl_redis_batch_takes(&bytes, n, &rq)) {
        n++;
    }
    // one rule's answer: 14 integers of 23 bytes at most and its head
    EXPECT_EQ(n, (size_t) (RL_RESP_REPLY_MAX - 8) / (8 + 14 * 23));
    EXPECT_LE(bytes, (size_t) RL_RESP_REPLY_MAX);
    EXPECT_EQ(rl_redis_answer_max(&rq), 8u + 14 * 23);

    std::vector<rl_rule_t> many(RL_RULES_MAX, r);
    std::vector<rl_check_t> cs;
    for (rl_rule_t &m : many) {
        cs.push_back(one_check(&m, 7, "bob", 1));
    }
    rl_request_t big = request_of(cs.data(), cs.size(), RL_COMBINE_ALL);
    bytes = 0;
    EXPECT_EQ(rl_redis_batch_takes(&bytes, 0, &big), 1);  // a request alone always fits
    EXPECT_EQ(rl_redis_batch_takes(&bytes, 1, &big), 0);
    bytes = 0;
    EXPECT_EQ(rl_redis_batch_takes(&bytes, RL_REDIS_BATCH_MAX - 1, &rq), 1);
    EXPECT_EQ(rl_redis_batch_takes(&bytes, RL_REDIS_BATCH_MAX, &rq), 0);

    const std::string reply = "*2\r\n*2\r\n:1\r\n:5\r\n*2\r\n:0\r\n:6\r\n";
    rl_resp_t whole;
    ASSERT_EQ(rl_resp_parse(reply.data(), reply.size(), &whole), (long) reply.size());
    long off = rl_resp_batch(reply.data(), reply.size(), 2);
    ASSERT_EQ(off, 4);
    for (int64_t first : {1, 0}) {
        rl_resp_t item;
        const long used = rl_resp_parse(reply.data() + off, reply.size() - (size_t) off, &item);
        ASSERT_GT(used, 0);
        EXPECT_EQ(item.nitems, 2u);
        EXPECT_EQ(item.items[0], first);
        off += used;
    }
    EXPECT_EQ((size_t) off, reply.size());
    EXPECT_EQ(rl_resp_batch(reply.data(), reply.size(), 3), -1);  // not its count
    EXPECT_EQ(rl_resp_batch(reply.data(), reply.size(), 1), -1);
    for (const std::string other :
         {"-NOSCRIPT No matching script\r\n", ":2\r\n", "*\r\n", "*-1\r\n", "*2", "*22\r\n"}) {
        EXPECT_EQ(rl_resp_batch(other.data(), other.size(), 2), -1) << other;
    }
}

TEST(Redis, ABanHasAKeyOfItsOwnAfterTheStatesInTheSameSlot)
{
    rl_rule_t banning = rule_of("algorithm=sliding_log limit=5 period=1s ban=1h");
    rl_rule_t plain = rule_of("limit=10");
    rl_check_t c[2] = {};
    const rl_rule_t *rules[2] = {&banning, &plain};
    for (int i = 0; i < 2; i++) {
        c[i].rule = rules[i];
        c[i].identity = 7 + (uint64_t) i;
        c[i].key = "bob";
        c[i].key_len = 3;
        c[i].cost = 1;
    }
    rl_request_t rq = request_of(c, 2, RL_COMBINE_ALL);
    const std::string sha(40, 'f');
    for (int cluster = 0; cluster < 2; cluster++) {
        std::string cmd(rl_redis_command_size(2, 3, sha.size()), '\0');
        cmd.resize(
            rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_DECIDE, "rl:", 3, cluster, &rq, -1));
        const std::vector<std::string> a = args_of(cmd);
        ASSERT_EQ(a.size(), 3u + 3 + 2 + 2 * 2);
        EXPECT_EQ(a[2], "3");  // two states, one ban
        char key[80];
        EXPECT_EQ(a[3], std::string(key, rl_redis_key(key, "rl:", 3, cluster, 7, "bob", 3)));
        EXPECT_EQ(a[4], std::string(key, rl_redis_key(key, "rl:", 3, cluster, 8, "bob", 3)));
        // the ban's: named as a state is, under another identity
        EXPECT_EQ(a[5].size(), a[3].size());
        EXPECT_NE(a[5], a[3]);
        EXPECT_NE(a[5], a[4]);
        if (cluster) {
            EXPECT_EQ(rl_redis_slot(a[5].data(), a[5].size()), rl_redis_slot(a[3].data(), a[3].size()));
        }
        // the first rule's spec: sliding_log, 5 a second, ban=, no charge=
        EXPECT_EQ(a[8], "4 5 5 1000 0 10 1000 0 0 0 3600000 0 0");
    }
}

TEST(Redis, ASettleSendsTheChecksThatSettleWithWhatTheirAdmissionLeft)
{
    rl_rule_t tokens = rule_of("algorithm=gcra limit=1000 period=1000s charge=$c ban=1m name=tokens");
    rl_rule_t plain = rule_of("limit=10 name=plain");
    rl_check_t c[3] = {};
    const rl_rule_t *rules[3] = {&plain, &tokens, &tokens};
    for (int i = 0; i < 3; i++) {
        c[i].rule = rules[i];
        c[i].identity = 10 + (uint64_t) i;
        c[i].key = "k";
        c[i].key_len = 1;
        c[i].cost = 2;
        c[i].reserved = 2;  // as its decision reserved
        c[i].outcome = RL_OUTCOME_ALLOWED;
        c[i].charge = 400;
        c[i].at = kT0;
        c[i].after.t = kT0 + 2000;
    }
    c[2].outcome = RL_OUTCOME_REJECTED;  // never charged
    rl_request_t rq = request_of(c, 3, RL_COMBINE_ALL);
    const std::string sha(40, 'f');
    std::string cmd(rl_redis_command_size(3, 3, sha.size()), '\0');
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_SETTLE, "rl:", 3, 0, &rq, -1));
    const std::vector<std::string> a = args_of(cmd);
    ASSERT_EQ(a.size(), 3u + 2 + 2 + 5);
    EXPECT_EQ(a[2], "2");  // the state (a settle touches no ban), its reservations in flight
    char key[80];
    EXPECT_EQ(a[3], std::string(key, rl_redis_key(key, "rl:", 3, 0, 11, "k", 1)));
    EXPECT_EQ(a[4], std::string(key, rl_redis_key(key, "rl:", 3, 0, ~uint64_t{11}, "k", 1)));
    EXPECT_EQ(a[5], "");  // Redis's clock
    EXPECT_EQ(a[6], "settle");
    // the spec (ban 60000, charge=), the reservation given back (2: no
    // share, override or lease); the charge, the head after, when
    const std::vector<std::string> tail(a.end() - 5, a.end());
    EXPECT_EQ(tail, (std::vector<std::string>{"0 1000 1000 1000000 0 10 1000000 0 0 0 60000 1 0", "2", "400",
                                              std::to_string(kT0 + 2000), std::to_string(kT0)}));
    // a charge too large for Lua's numbers: sent capped, the debt's bound
    // caps it anyway
    c[1].charge = RL_NO_CHARGE - 1;
    cmd.assign(rl_redis_command_size(3, 3, sha.size()), '\0');
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_SETTLE, "rl:", 3, 0, &rq, -1));
    EXPECT_EQ(args_of(cmd)[a.size() - 3], std::to_string(RL_REDIS_UNITS_MAX));
    // its reservation stands: sent all the same (its reservations in
    // flight end), with -1 for units
    c[1].charge = RL_NO_CHARGE;
    cmd.assign(rl_redis_command_size(3, 3, sha.size()), '\0');
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_SETTLE, "rl:", 3, 0, &rq, -1));
    EXPECT_EQ(args_of(cmd).size(), a.size());
    EXPECT_EQ(args_of(cmd)[a.size() - 3], "-1");
    // nothing admitted: no check sent
    c[1].outcome = RL_OUTCOME_REJECTED;
    cmd.assign(rl_redis_command_size(3, 3, sha.size()), '\0');
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_SETTLE, "rl:", 3, 0, &rq, -1));
    EXPECT_EQ(args_of(cmd).size(), 3u + 2);
}

TEST(Redis, RulesWithChargesAndBansAreDecidedInRedis)
{
    char err[RL_ERR_MAX];
    for (const char *ok :
         {"algorithm=sliding_log limit=5 period=15m charge=$c ban=1h",
          "algorithm=gcra limit=100000 period=1h charge=$c", "algorithm=quota limit=5 reset=daily charge=$c"}) {
        rl_rule_t r = rule_of(ok);
        EXPECT_EQ(rl_redis_rule_ok(&r, err, sizeof(err)), RL_OK) << ok << ": " << err;
    }
    // a bucket owes a limit beyond its burst: (burst + limit) x period
    rl_rule_t fits = rule_of("algorithm=gcra limit=1000000 period=6d charge=$c");
    rl_rule_t debt = rule_of("algorithm=gcra limit=1000000 period=10d charge=$c");
    rl_rule_t plain = rule_of("algorithm=gcra limit=1000000 period=10d");
    EXPECT_EQ(rl_redis_rule_ok(&fits, err, sizeof(err)), RL_OK) << err;
    EXPECT_EQ(rl_redis_rule_ok(&plain, err, sizeof(err)), RL_OK) << err;
    EXPECT_EQ(rl_redis_rule_ok(&debt, err, sizeof(err)), RL_ERROR);
    EXPECT_NE(std::string(err).find("(burst + limit) x period of 2000000 per 864000000 ms"), std::string::npos) << err;
}

// One request through the script on the trace's clock: its verdict.
int call_script(const std::string &sha, const std::string &prefix, rl_request_t &rq, int call, int64_t now,
                rl_redis_answer_t *a)
{
    std::string cmd(rl_redis_command_size(rq.n, prefix.size(), sha.size()), '\0');
    cmd.resize(
        rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, call, prefix.data(), prefix.size(), 0, &rq, now));
    rl_resp_t reply = Redis::instance().call(cmd);
    EXPECT_EQ(rl_redis_answer(&rq, call, &reply, a), RL_REDIS_DECIDED) << a->why;
    return a->verdict;
}

// A call of the script for one concurrency check of rule r (its
// identity id, the key "acme") naming its lease (full: its server holds the
// limit already): a decision's verdict x 10, plus 1 if it kept its lease;
// a lease call's leases live x 10, plus those found gone.  *remaining: the
// check's after it.
int lease_call(const std::string &sha, const char *prefix, const rl_rule_t &r, uint64_t id, uint32_t lease, int which,
               int64_t now, int full = 0, uint32_t *remaining = nullptr)
{
    rl_redis_answer_t a;
    rl_check_t c = one_check(&r, id, "acme", 1);
    c.lease = lease;
    c.full_here = full;
    rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
    rq.lease = 0xfeedu;
    rq.holder = 4242;
    const int v = call_script(sha, prefix, rq, which, now, &a);
    if (remaining != nullptr) {
        *remaining = c.decision.remaining;
    }
    return which == RL_REDIS_DECIDE ? v * 10 + (c.lease != 0) : (int) (a.leases_done * 10 + a.leases_gone);
}

// The tokens an upstream reports, through the script: 400 a request
// against 1,000 per 1,000 s; three served, the key 200 in debt, the fourth
// refused until the debt and its own unit are repaid (201 s).
TEST(RedisScript, ChargesGoIntoDebtAndTheRefusalSaysWhenItIsRepaid)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    rl_rule_t r = rule_of("limit=1000 period=1000s charge=$c name=tokens");
    rl_redis_answer_t a;
    int64_t now = kT0 + 5;
    for (int i = 0; i < 3; i++, now += 10) {
        rl_check_t c = one_check(&r, 5, "key", 1);
        rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
        ASSERT_EQ(call_script(sha, "tk:", rq, RL_REDIS_DECIDE, now, &a), RL_VERDICT_PASSED) << i;
        EXPECT_EQ(c.at, now);
        c.charge = 400;
        call_script(sha, "tk:", rq, RL_REDIS_SETTLE, now + 5, &a);
        EXPECT_EQ(c.charged, 400u);
        EXPECT_EQ(c.in_debt, i == 2) << i;
        EXPECT_EQ(c.capped, 0);
    }
    rl_check_t c = one_check(&r, 5, "key", 1);
    rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
    ASSERT_EQ(call_script(sha, "tk:", rq, RL_REDIS_DECIDE, now, &a), RL_VERDICT_REJECTED);
    // 1,200 spent as of the first charge (kT0 + 10), at a unit a second:
    // 200 units of debt and this request's one come back 201 s later, 25 ms
    // of which have gone (now is kT0 + 35)
    EXPECT_EQ(c.decision.retry_after_ms, 201000 - 25);
    EXPECT_EQ(c.decision.remaining, 0u);
}

// Two rules of one name share their key's state: the call settling them
// reads it once for both (MGET), and the second settles on what the first
// wrote, not on what the MGET read: both charges count.
TEST(RedisScript, TwoRulesOfOneNameSettleOneAfterTheOther)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    rl_rule_t r = rule_of("limit=1000 period=1000s charge=$c name=tokens");
    rl_redis_answer_t a;
    const int64_t now = kT0 + 5;
    rl_check_t c[2] = {one_check(&r, 5, "key", 1), one_check(&r, 5, "key", 1)};
    rl_request_t rq = request_of(c, 2, RL_COMBINE_ALL);
    ASSERT_EQ(call_script(sha, "two:", rq, RL_REDIS_DECIDE, now, &a), RL_VERDICT_PASSED);
    c[0].charge = c[1].charge = 400;
    call_script(sha, "two:", rq, RL_REDIS_SETTLE, now, &a);
    EXPECT_EQ(c[0].charged, 400u);
    EXPECT_EQ(c[1].charged, 400u);
    rl_check_t look = one_check(&r, 5, "key", 0);  // cost 0: a look
    rl_request_t lq = request_of(&look, 1, RL_COMBINE_ALL);
    call_script(sha, "two:", lq, RL_REDIS_PEEK, now, &a);  // (a decision of cost 0 would reserve)
    EXPECT_EQ(look.decision.remaining, 200u);              // 1,000 less both charges
}

// A refusal bans the key (ban=) for its time, in a Redis key of its own
// that expires with it; refusals during the ban do not extend it; a peek
// shows it, a reset lifts it.
TEST(RedisScript, ARefusalBansTheKeyAndAResetLiftsIt)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    rl_rule_t r = rule_of("algorithm=fixed_window limit=2 period=1s ban=1h name=login");
    auto check = [&](uint64_t cost) {
        rl_check_t c = one_check(&r, 77, "mallory", cost);
        return c;
    };
    rl_redis_answer_t a;
    const int64_t t0 = kT0 + 86400000;
    for (int i = 0; i < 2; i++) {
        rl_check_t c = check(1);
        rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
        EXPECT_EQ(call_script(sha, "bn:", rq, RL_REDIS_DECIDE, t0 + i, &a), RL_VERDICT_PASSED);
    }
    rl_check_t c = check(1);
    rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
    EXPECT_EQ(call_script(sha, "bn:", rq, RL_REDIS_DECIDE, t0 + 10, &a), RL_VERDICT_REJECTED);
    EXPECT_EQ(c.decision.banned_ms, 3600000);
    EXPECT_EQ(c.decision.retry_after_ms, 3600000);
    // the window would admit again: banned, and not for longer
    EXPECT_EQ(call_script(sha, "bn:", rq, RL_REDIS_DECIDE, t0 + 5000, &a), RL_VERDICT_REJECTED);
    EXPECT_EQ(c.decision.banned_ms, 3600000 - 4990);
    EXPECT_EQ(c.decision.retry_after_ms, 3600000 - 4990);
    // a cost it can never admit is refused, and bans nothing more
    rl_check_t big = check(3);
    rl_request_t brq = request_of(&big, 1, RL_COMBINE_ALL);
    EXPECT_EQ(call_script(sha, "bn:", brq, RL_REDIS_DECIDE, t0 + 6000, &a), RL_VERDICT_REJECTED);
    // the ban's own key, expiring with it (a test's clock: a day longer)
    char key[80];
    const size_t len = rl_redis_key(key, "bn:", 3, 0, 77, "mallory", 7);
    rl_resp_t keys = Redis::instance().command({"KEYS", "bn:*"});
    EXPECT_EQ(keys.integer, 2);
    rl_resp_t ttl = Redis::instance().command({"PTTL", std::string(key, len)});
    EXPECT_GT(ttl.integer, 0);
    // a peek: the look shows the ban, the next request is refused by it
    rl_check_t look[2] = {check(0), check(1)};
    rl_request_t prq = request_of(look, 2, RL_COMBINE_ALL);
    call_script(sha, "bn:", prq, RL_REDIS_PEEK, t0 + 7000, &a);
    EXPECT_EQ(look[0].decision.allowed, 1);
    EXPECT_EQ(look[0].decision.banned_ms, 3600000 - 6990);
    EXPECT_EQ(look[1].decision.allowed, 0);
    EXPECT_EQ(look[1].decision.banned_ms, 3600000 - 6990);
    // a reset lifts it: the key is admitted afresh
    rl_check_t gone = check(1);
    rl_request_t rrq = request_of(&gone, 1, RL_COMBINE_ALL);
    call_script(sha, "bn:", rrq, RL_REDIS_RESET, t0 + 8000, &a);
    EXPECT_EQ(a.found, 1u);
    EXPECT_EQ(a.unbanned, 1u);
    EXPECT_EQ(Redis::instance().command({"KEYS", "bn:*"}).integer, 0);
    EXPECT_EQ(call_script(sha, "bn:", rq, RL_REDIS_DECIDE, t0 + 9000, &a), RL_VERDICT_PASSED);
}

TEST(RedisScript, StateExpiresWhenBackToFullBudgetAndHoldsNoKeyBytes)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    rl_rule_t r = rule_of("algorithm=gcra limit=10 period=1m");
    rl_check_t c = one_check(&r, 99, "secret-api-key", 3);
    // Redis's own clock (now < 0): 3 of 10 per minute spent = 18 s to full
    const std::string prefix = "ttl:";
    rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
    std::string cmd(rl_redis_command_size(1, prefix.size(), sha.size()), '\0');
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_DECIDE, prefix.data(), prefix.size(), 0,
                                &rq, -1));
    rl_resp_t reply = redis.call(cmd);
    rl_redis_answer_t a;
    ASSERT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &reply, &a), RL_REDIS_DECIDED) << a.why;
    ASSERT_EQ(a.verdict, RL_VERDICT_PASSED);
    EXPECT_EQ(c.decision.remaining, 7u);
    EXPECT_EQ(c.decision.reset_ms, 18000);
    char key[64];
    rl_redis_key(key, prefix.data(), prefix.size(), 0, 99, "secret-api-key", 14);
    rl_resp_t ttl = redis.command({"PTTL", std::string(key, prefix.size() + RL_REDIS_HASH_LEN)});
    EXPECT_GT(ttl.integer, 17900);
    EXPECT_LE(ttl.integer, 18001);
    rl_resp_t keys = redis.command({"KEYS", "*secret*"});
    EXPECT_EQ(keys.integer, 0);
}

TEST(Redis, ConcurrencyIsDecidedInRedisWithoutWaits)
{
    char err[RL_ERR_MAX];
    rl_rule_t r = rule_of("algorithm=concurrency limit=10");
    EXPECT_EQ(rl_redis_rule_ok(&r, err, sizeof(err)), RL_OK) << err;
    EXPECT_EQ(rl_redis_lease_ms(&r), RL_LEASE_DEFAULT_MS);
    rl_rule_t waits = rule_of("algorithm=concurrency limit=10 max_wait=2s");
    EXPECT_EQ(rl_redis_rule_ok(&waits, err, sizeof(err)), RL_ERROR);
    EXPECT_NE(std::string(err).find("\"max_wait=\" does not apply to algorithm=concurrency in a Redis zone"),
              std::string::npos)
        << err;
    rl_rule_t adaptive = rule_of("algorithm=adaptive limit=10");
    EXPECT_EQ(rl_redis_rule_ok(&adaptive, err, sizeof(err)), RL_ERROR);
    rl_rule_t leased = rule_of("algorithm=concurrency limit=3 lease=10s");
    EXPECT_EQ(rl_redis_lease_ms(&leased), 10000);
}

// Concurrency's leases through the script: a key's slots held across
// calls, each lease named by its worker and request; a release frees one
// at once, an expired one comes back with no one's action, a renewal
// keeps one, and one expired is not renewed (a restore writes it).  With a
// rate rule (all), a refusal by either takes nothing of the other.  A
// server holding the limit already is refused whatever Redis holds.
TEST(RedisScript, ConcurrencyLeasesAreTakenReleasedRenewedAndExpire)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    rl_rule_t r = rule_of("algorithm=concurrency limit=2 lease=10s name=exports");
    rl_redis_answer_t a;
    const int64_t t0 = kT0 + 2 * 86400000;
    auto call = [&](uint32_t lease, int which, int64_t now) {
        return lease_call(sha, "cc:", r, 31, lease, which, now);
    };
    EXPECT_EQ(call(1, RL_REDIS_DECIDE, t0), RL_VERDICT_PASSED * 10 + 1);
    EXPECT_EQ(call(2, RL_REDIS_DECIDE, t0 + 1), RL_VERDICT_PASSED * 10 + 1);
    EXPECT_EQ(call(3, RL_REDIS_DECIDE, t0 + 2), RL_VERDICT_REJECTED * 10);  // no lease kept
    // the refusal has no time to wait for
    rl_check_t look = one_check(&r, 31, "acme", 0);
    rl_request_t lrq = request_of(&look, 1, RL_COMBINE_ALL);
    call_script(sha, "cc:", lrq, RL_REDIS_PEEK, t0 + 3, &a);
    EXPECT_EQ(look.decision.remaining, 0u);
    EXPECT_EQ(look.decision.retry_after_ms, 0);
    // a release frees its slot at once; a second release finds none
    EXPECT_EQ(call(1, RL_REDIS_RELEASE, t0 + 4), 10);
    EXPECT_EQ(call(1, RL_REDIS_RELEASE, t0 + 5), 1);
    EXPECT_EQ(call(4, RL_REDIS_DECIDE, t0 + 6), RL_VERDICT_PASSED * 10 + 1);
    // lease 2 renewed at 5 s (to 15 s); lease 4 expires at 10.006 s
    EXPECT_EQ(call(2, RL_REDIS_RENEW, t0 + 5000), 10);
    EXPECT_EQ(call(5, RL_REDIS_DECIDE, t0 + 10005), RL_VERDICT_REJECTED * 10);
    EXPECT_EQ(call(5, RL_REDIS_DECIDE, t0 + 10006), RL_VERDICT_PASSED * 10 + 1);
    EXPECT_EQ(call(4, RL_REDIS_RENEW, t0 + 10007), 1);  // expired: not taken again
    EXPECT_EQ(call(6, RL_REDIS_DECIDE, t0 + 10008), RL_VERDICT_REJECTED * 10);
    EXPECT_EQ(call(2, RL_REDIS_RELEASE, t0 + 14000), 10);
    EXPECT_EQ(call(6, RL_REDIS_DECIDE, t0 + 14001), RL_VERDICT_PASSED * 10 + 1);

    // with a rate rule: a rate's refusal takes no slot, a slot's refusal
    // spends no rate
    rl_rule_t rate = rule_of("algorithm=fixed_window limit=3 period=1h name=rate");
    rl_rule_t one = rule_of("algorithm=concurrency limit=1 lease=10s name=one");
    auto both = [&](uint32_t lease, int64_t now, rl_check_t *c) {
        c[0] = one_check(&one, 41, "k", 1);
        c[1] = one_check(&rate, 42, "k", 1);
        c[0].lease = lease;
        rl_request_t rq = request_of(c, 2, RL_COMBINE_ALL);
        rq.lease = 0xfeedu;
        rq.holder = 4242;
        return call_script(sha, "cr:", rq, RL_REDIS_DECIDE, now, &a);
    };
    rl_check_t c[2];
    EXPECT_EQ(both(11, t0, c), RL_VERDICT_PASSED);
    EXPECT_EQ(c[1].decision.remaining, 2u);
    EXPECT_EQ(both(12, t0 + 1, c), RL_VERDICT_REJECTED);  // the slot is taken
    EXPECT_EQ(c[0].lease, 0u);
    EXPECT_EQ(c[1].decision.remaining, 1u);  // looked at, not spent
    rl_check_t held = one_check(&one, 41, "k", 1);
    held.lease = 11;
    rl_request_t hrq = request_of(&held, 1, RL_COMBINE_ALL);
    hrq.lease = 0xfeedu;
    hrq.holder = 4242;
    call_script(sha, "cr:", hrq, RL_REDIS_RELEASE, t0 + 2, &a);
    EXPECT_EQ(both(13, t0 + 3, c), RL_VERDICT_PASSED);
    EXPECT_EQ(c[1].decision.remaining, 1u);
    held.lease = 13;
    call_script(sha, "cr:", hrq, RL_REDIS_RELEASE, t0 + 4, &a);
    EXPECT_EQ(both(14, t0 + 5, c), RL_VERDICT_PASSED);  // the rate's last
    held.lease = 14;
    call_script(sha, "cr:", hrq, RL_REDIS_RELEASE, t0 + 6, &a);
    EXPECT_EQ(both(15, t0 + 7, c), RL_VERDICT_REJECTED);  // the rate refuses
    EXPECT_EQ(c[0].lease, 0u);
    rl_check_t free_look = one_check(&one, 41, "k", 0);
    rl_request_t frq = request_of(&free_look, 1, RL_COMBINE_ALL);
    call_script(sha, "cr:", frq, RL_REDIS_PEEK, t0 + 8, &a);
    EXPECT_EQ(free_look.decision.remaining, 1u);  // no slot taken

    // a request whose server holds the limit of its key already (full_here:
    // some of those may not be in Redis) is refused whatever Redis holds,
    // and takes no lease; a restore writes a lease whether Redis holds it
    // or not (its request runs: admitted while Redis was away, or Redis
    // lost it), where a renewal does not take an expired one again
    const int64_t t1 = kT0 + 4 * 86400000;
    uint32_t remaining = 99;
    auto full = [&](uint32_t lease, int which, int64_t now, int is_full) {
        return lease_call(sha, "cf:", r, 61, lease, which, now, is_full, &remaining);
    };
    EXPECT_EQ(full(1, RL_REDIS_DECIDE, t1, 1), RL_VERDICT_REJECTED * 10);  // none in Redis: refused all the same
    EXPECT_EQ(remaining, 0u);
    EXPECT_EQ(full(2, RL_REDIS_DECIDE, t1 + 1, 0), RL_VERDICT_PASSED * 10 + 1);
    EXPECT_EQ(remaining, 1u);  // the refused one took none
    // lease 3, never in Redis, written (to t1 + 10002); lease 2, live,
    // renewed (to t1 + 10003)
    EXPECT_EQ(full(3, RL_REDIS_RESTORE, t1 + 2, 0), 1);
    EXPECT_EQ(full(2, RL_REDIS_RESTORE, t1 + 3, 0), 10);
    EXPECT_EQ(full(4, RL_REDIS_DECIDE, t1 + 4, 0), RL_VERDICT_REJECTED * 10);  // both count
    // lease 3 expired: a renewal finds it gone and takes it not again, a
    // restore writes it again, beyond the limit (its request runs)
    EXPECT_EQ(full(3, RL_REDIS_RENEW, t1 + 10002, 0), 1);
    EXPECT_EQ(full(5, RL_REDIS_DECIDE, t1 + 10002, 0), RL_VERDICT_PASSED * 10 + 1);
    EXPECT_EQ(full(3, RL_REDIS_RESTORE, t1 + 10002, 0), 1);
    EXPECT_EQ(full(6, RL_REDIS_DECIDE, t1 + 10002, 0), RL_VERDICT_REJECTED * 10);
    look = one_check(&r, 61, "acme", 0);
    call_script(sha, "cf:", lrq, RL_REDIS_PEEK, t1 + 10002, &a);
    EXPECT_EQ(look.decision.remaining, 0u);  // three held: 2, 5 and 3
    EXPECT_EQ(full(2, RL_REDIS_RELEASE, t1 + 10002, 0), 10);
    EXPECT_EQ(full(5, RL_REDIS_RELEASE, t1 + 10002, 0), 10);
    EXPECT_EQ(full(7, RL_REDIS_DECIDE, t1 + 10002, 0), RL_VERDICT_PASSED * 10 + 1);
}

// A key's leases of one server among the fleet's: a peek with a server's
// id counts its live leases (whatever its workers), not another's, not an
// expired one; without an id, none.
TEST(RedisScript, APeekCountsTheLeasesOfItsServer)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    rl_rule_t r = rule_of("algorithm=concurrency limit=5 lease=10s name=exports");
    rl_redis_answer_t a;
    const int64_t t0 = kT0 + 3 * 86400000;
    auto take = [&](uint64_t server, uint64_t worker, uint32_t slot, int64_t now) {
        rl_check_t c = one_check(&r, 51, "acme", 1);
        c.lease = slot;
        rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
        rq.server = server;
        rq.lease = worker;
        rq.holder = 100 + (uint32_t) worker;
        return call_script(sha, "ch:", rq, RL_REDIS_DECIDE, now, &a);
    };
    auto here = [&](uint64_t server, int64_t now) {
        rl_check_t c[2] = {one_check(&r, 51, "acme", 0), one_check(&r, 51, "acme", 1)};
        rl_request_t rq = request_of(c, 2, RL_COMBINE_ALL);
        rq.server = server;
        call_script(sha, "ch:", rq, RL_REDIS_PEEK, now, &a);
        EXPECT_EQ(a.here[0], a.here[1]);
        return std::to_string(5 - c[0].decision.remaining) + " " + std::to_string(a.here[0]);
    };
    const uint64_t one = 0x1111222233334444u, two = 0x1111222233334445u;
    EXPECT_EQ(here(one, t0), "0 0");
    EXPECT_EQ(take(one, 1, 1, t0), RL_VERDICT_PASSED);
    EXPECT_EQ(take(one, 2, 1, t0 + 1), RL_VERDICT_PASSED);  // another worker of it
    EXPECT_EQ(take(two, 3, 1, t0 + 2), RL_VERDICT_PASSED);
    EXPECT_EQ(take(one, 1, 2, t0 + 5000), RL_VERDICT_PASSED);
    EXPECT_EQ(here(one, t0 + 5001), "4 3");
    EXPECT_EQ(here(two, t0 + 5001), "4 1");
    EXPECT_EQ(here(0x42, t0 + 5001), "4 0");  // a server holding none
    EXPECT_EQ(here(0, t0 + 5001), "4 0");     // no id: none counted
    // the first three expire at 10 s (one a millisecond after the other);
    // the fourth lives to 15 s
    EXPECT_EQ(here(one, t0 + 10001), "2 1");
    EXPECT_EQ(here(one, t0 + 10003), "1 1");
    EXPECT_EQ(here(two, t0 + 10003), "1 0");
    EXPECT_EQ(here(one, t0 + 15000), "0 0");
}

TEST(RedisScript, NoscriptIsAnErrorReplyAndEvalLoadsTheScript)
{
    NEED_REDIS();
    redis.command({"SCRIPT", "FLUSH"});
    rl_rule_t r = rule_of("algorithm=fixed_window limit=2 period=1m");
    rl_check_t c = one_check(&r, 0, "x", 1);
    size_t len;
    const char *text = rl_redis_script(&len);
    const std::string sha = "0000000000000000000000000000000000000000";
    rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
    std::string cmd(rl_redis_command_size(1, 2, len), '\0');
    cmd.resize(
        rl_redis_command(cmd.data(), sha.data(), sha.size(), RL_REDIS_EVALSHA, RL_REDIS_DECIDE, "n:", 2, 0, &rq, kT0));
    rl_resp_t reply = redis.call(cmd);
    EXPECT_EQ(reply.type, RL_RESP_ERROR);
    EXPECT_EQ(std::string(reply.str, 8), "NOSCRIPT");
    rl_redis_answer_t a;
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &reply, &a), RL_REDIS_NOSCRIPT);
    cmd.assign(rl_redis_command_size(1, 2, len), '\0');
    cmd.resize(rl_redis_command(cmd.data(), text, len, RL_REDIS_EVAL, RL_REDIS_DECIDE, "n:", 2, 0, &rq, kT0));
    reply = redis.call(cmd);
    ASSERT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &reply, &a), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(a.verdict, RL_VERDICT_PASSED);
    EXPECT_EQ(c.decision.remaining, 1u);
    // EVAL cached it: the real SHA-1 works now
    EXPECT_EQ(script_sha().size(), 40u);
}

// A Redis that lost its functions (a restart without persistence,
// FUNCTION FLUSH): FCALL says so, as NOSCRIPT; FUNCTION LOAD loads the
// library, and the same call is then decided.  Loading it again finds it.
TEST(RedisScript, AFunctionNotFoundIsLoadedThenCalled)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    redis.command({"FUNCTION", "FLUSH"});
    rl_rule_t r = rule_of("algorithm=fixed_window limit=2 period=1m");
    rl_check_t c = one_check(&r, 0, "x", 1);
    rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
    std::string cmd(rl_redis_command_size(1, 3, sha.size()), '\0');
    cmd.resize(
        rl_redis_command(cmd.data(), sha.data(), sha.size(), RL_REDIS_FCALL, RL_REDIS_DECIDE, "fn:", 3, 0, &rq, kT0));
    rl_resp_t reply = redis.call(cmd);
    ASSERT_EQ(reply.type, RL_RESP_ERROR);
    rl_redis_answer_t a;
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &reply, &a), RL_REDIS_NOSCRIPT)
        << std::string(reply.str, reply.str_len);
    for (int i = 0; i < 2; i++) {
        std::string load(rl_redis_load_size(), '\0');
        load.resize(rl_redis_load_command(load.data(), sha.data()));
        rl_resp_t loaded = redis.call(load);
        EXPECT_EQ(loaded.type, i == 0 ? RL_RESP_BULK : RL_RESP_ERROR);  // then: it exists
        EXPECT_EQ(rl_redis_load_answer(&loaded, &a), RL_REDIS_DECIDED) << std::string(loaded.str, loaded.str_len);
    }
    reply = redis.call(cmd);
    ASSERT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &reply, &a), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(a.verdict, RL_VERDICT_PASSED);
    EXPECT_EQ(c.decision.remaining, 1u);
    // the library by its name: another version's would be beside it
    rl_resp_t list = redis.command({"FUNCTION", "LIST", "LIBRARYNAME", "ratelimit_" + sha});
    EXPECT_EQ(list.type, RL_RESP_ARRAY);
    EXPECT_EQ(list.integer, 1);
}

}  // namespace
