// redis_sync: the journal (add, take, units given back when Redis did not
// take them), the calls (numbered, sent again as they were, never mixed),
// the fold of the fleet's totals (fixed_window, quota, sliding_window:
// never lowers a count, never admits more than the limit less the others'
// units, waits for a call in doubt), the judging of a reply, and the
// script in a real redis-server (a call adds its units once, whatever its
// copies).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "helpers.h"
#include "ratelimit_sync.h"
#include "redis_server.h"

namespace {

using rltest::Redis;
using rltest::redis_server;

constexpr int64_t kInterval = 100;

// The servers of a fleet hash a key alike here (nginx: each its own
// secret; a server folds only the keys it sent).
const uint8_t kSecret[16] = {5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// A zone with redis_sync: a table for one rule and its journal.
struct SyncZone {
    rl_rule_t rule;
    uint64_t identity;
    TestZone zone;
    uint32_t keys;
    void *journal;

    explicit SyncZone(const char *text, uint32_t keys = RL_SYNC_KEYS_MIN)
        : rule(rule_of(text)), identity(identity_of(rule)), zone(256 * 1024, std::vector<rl_rule_t>{rule}, kSecret),
          keys(keys)
    {
        const size_t size = (rl_sync_size(keys) + 63) & ~size_t{63};
        journal = std::aligned_alloc(64, size);
        std::memset(journal, 0, size);
        EXPECT_EQ(rl_sync_init(journal, size, keys), 0);
    }
    SyncZone(const SyncZone &) = delete;
    SyncZone &operator=(const SyncZone &) = delete;
    ~SyncZone() { std::free(journal); }

    // n requests of key, decided here and noted in the journal: how many
    // were admitted.
    int spend(const std::string &key, int n, int64_t now)
    {
        int admitted = 0;
        for (int i = 0; i < n; i++) {
            rl_check_t c = check_of(zone.mem, &rule, identity, key);
            rl_request_t rq = hashed(request_of(&c, 1));
            admitted += rl_decide(&rq, now) != RL_VERDICT_REJECTED;
            rl_sync_note(journal, zone.mem, &rq, now);
        }
        return admitted;
    }

    // What the key has left at now (a look, nothing spent).
    uint64_t remaining(const std::string &key, int64_t now)
    {
        rl_check_t c = check_of(zone.mem, &rule, identity, key, 0);
        rl_request_t rq = hashed(request_of(&c, 1));
        rl_decide(&rq, now);
        return c.decision.remaining;
    }

    std::vector<rl_sync_item_t> take(int64_t now)
    {
        std::vector<rl_sync_item_t> out(keys);
        int due = 0;
        out.resize(rl_sync_take(journal, now, kInterval, out.data(), &due));
        return out;
    }

    uint64_t pending()
    {
        rl_sync_figures_t f;
        rl_sync_get_figures(journal, &f);
        return f.pending;
    }

    void apply(const std::vector<rl_sync_item_t> &items, const std::vector<rl_sync_total_t> &totals, int64_t now)
    {
        ASSERT_EQ(totals.size(), rl_sync_totals(items.data(), items.size()));
        rl_sync_apply(journal, zone.mem, items.data(), totals.data(), items.size(), now);
    }
};

const char *const kFixed = "algorithm=fixed_window limit=10 period=10s name=w";
const char *const kQuota = "algorithm=quota limit=10 reset=daily name=q";
const char *const kSliding = "algorithm=sliding_window limit=10 period=10s buckets=10 name=s";

// A reply of these integers, as rl_resp_parse makes it.
rl_resp_t reply_of(const std::vector<int64_t> &v)
{
    rl_resp_t r{};
    r.type = RL_RESP_ARRAY;
    r.integer = (int64_t) v.size();
    r.integers = 1;
    r.nitems = v.size();
    for (size_t i = 0; i < v.size(); i++) {
        r.items[i] = v[i];
    }
    return r;
}

}  // namespace

TEST(Sync, RulesThatMergeAreTaken)
{
    char err[RL_ERR_MAX];
    for (const char *ok : {kFixed, kQuota, kSliding, "algorithm=fixed_window limit=5 period=1m align=first name=a"}) {
        rl_rule_t r = rule_of(ok);
        EXPECT_EQ(rl_sync_rule_ok(&r, err, sizeof(err)), RL_OK) << ok << ": " << err;
    }
    for (const char *bad : {"algorithm=gcra limit=5 period=1s name=g", "algorithm=sliding_log limit=5 name=l",
                            "algorithm=fixed_window limit=5 period=1m charge=1 name=c"}) {
        rl_rule_t r = rule_of(bad);
        EXPECT_EQ(rl_sync_rule_ok(&r, err, sizeof(err)), RL_ERROR) << bad;
        EXPECT_NE(std::strstr(err, "redis_sync"), nullptr) << err;
    }
}

TEST(Sync, AJournalHalfFullIsTakenBeforeItsIntervalWhileRedisTakesIt)
{
    SyncZone z(kFixed);
    const int half = RL_SYNC_KEYS_MIN / 2;
    std::vector<rl_sync_item_t> out(RL_SYNC_KEYS_MIN);
    int due = 0;
    // an exchange at kT0: the next is due at kT0 + 100
    EXPECT_EQ(rl_sync_take(z.journal, kT0, kInterval, out.data(), &due), 0u);
    EXPECT_EQ(due, 1);
    for (int k = 0; k < half - 1; k++) {
        z.spend("k" + std::to_string(k), 1, kT0 + 1);
    }
    EXPECT_EQ(rl_sync_urgent(z.journal), 0);
    EXPECT_EQ(rl_sync_take(z.journal, kT0 + 2, kInterval, out.data(), &due), 0u) << "not due, not half full";
    // the key that fills half: the note says so, and the take is due
    const std::string last = "last";
    rl_check_t c = check_of(z.zone.mem, &z.rule, z.identity, last);
    rl_request_t rq = hashed(request_of(&c, 1));
    rl_decide(&rq, kT0 + 3);
    EXPECT_EQ(rl_sync_note(z.journal, z.zone.mem, &rq, kT0 + 3), 1);
    EXPECT_EQ(rl_sync_urgent(z.journal), 1);
    // a key already noted adds no item: still half full
    EXPECT_EQ(rl_sync_note(z.journal, z.zone.mem, &rq, kT0 + 3), 1);
    std::vector<rl_sync_item_t> sent(RL_SYNC_KEYS_MIN);
    sent.resize(rl_sync_take(z.journal, kT0 + 4, kInterval, sent.data(), &due));
    EXPECT_EQ(due, 1);
    EXPECT_EQ(sent.size(), (size_t) half) << "taken 96 ms before its interval";
    EXPECT_EQ(rl_sync_urgent(z.journal), 0);
    // Redis did not take them: back in the journal, half full, and not
    // taken again before the interval (a request would not take it each)
    rl_sync_requeue(z.journal, sent.data(), sent.size());
    EXPECT_EQ(rl_sync_urgent(z.journal), 0);
    EXPECT_EQ(rl_sync_take(z.journal, kT0 + 5, kInterval, out.data(), &due), 0u);
    EXPECT_EQ(due, 0);
    // the interval's exchange takes them; Redis takes it: early takes again
    out.resize(rl_sync_take(z.journal, kT0 + 104, kInterval, out.data(), &due));
    EXPECT_EQ(out.size(), (size_t) half);
    rl_sync_record(z.journal, out.size(), out.size(), 0, 0, 1, kT0 + 105);
    for (int k = 0; k < half; k++) {
        z.spend("again" + std::to_string(k), 1, kT0 + 106);
    }
    EXPECT_EQ(rl_sync_urgent(z.journal), 1);
    out.resize(RL_SYNC_KEYS_MIN);
    EXPECT_EQ(rl_sync_take(z.journal, kT0 + 107, kInterval, out.data(), &due), (size_t) half);
}

TEST(Sync, JournalAddsTakesAndGetsBackWhatRedisDidNotTake)
{
    SyncZone z(kFixed);
    EXPECT_EQ(z.spend("a", 3, kT0), 3);
    EXPECT_EQ(z.spend("b", 2, kT0), 2);
    std::vector<rl_sync_item_t> sent = z.take(kT0 + 1);
    ASSERT_EQ(sent.size(), 2u);
    EXPECT_EQ(sent[0].units, 3u);
    EXPECT_EQ(sent[1].units, 2u);
    EXPECT_EQ(sent[0].end, kT0 + 10000);
    EXPECT_EQ(sent[0].ticks, 0u);
    // emptied, and not due again within the interval
    EXPECT_EQ(z.spend("a", 1, kT0 + 2), 1);
    int due = 1;
    std::vector<rl_sync_item_t> out(RL_SYNC_KEYS_MIN);
    EXPECT_EQ(rl_sync_take(z.journal, kT0 + 50, kInterval, out.data(), &due), 0u);
    EXPECT_EQ(due, 0);
    // Redis did not answer: the call comes back as it was, apart from the
    // unit spent since
    rl_sync_requeue(z.journal, sent.data(), sent.size());
    rl_sync_figures_t f;
    rl_sync_get_figures(z.journal, &f);
    EXPECT_EQ(f.pending, 3u);
    std::vector<rl_sync_item_t> again = z.take(kT0 + 101);
    ASSERT_EQ(again.size(), 2u);
    EXPECT_EQ(again[0].units, 3u);
    EXPECT_EQ(again[1].units, 2u);
    EXPECT_EQ(again[0].call, sent[0].call);
    // then, the call answered, the unit spent since
    std::vector<rl_sync_item_t> since = z.take(kT0 + 201);
    ASSERT_EQ(since.size(), 1u);
    EXPECT_EQ(since[0].units, 1u);
    EXPECT_GT(since[0].call, sent[0].call);
    // a window that is over is never sent
    EXPECT_EQ(z.spend("a", 1, kT0 + 300), 1);
    EXPECT_TRUE(z.take(kT0 + 10000).empty());
}

TEST(Sync, JournalFullDropsAndCounts)
{
    SyncZone z(kFixed);
    for (int i = 0; i < RL_SYNC_KEYS_MIN + 3; i++) {
        z.spend("k" + std::to_string(i), 1, kT0);
    }
    rl_sync_figures_t f;
    rl_sync_get_figures(z.journal, &f);
    EXPECT_EQ(f.pending, (uint64_t) RL_SYNC_KEYS_MIN);
    EXPECT_EQ(f.dropped, 3u);
}

TEST(Sync, SlidingWindowJournalsByTick)
{
    SyncZone z(kSliding);
    const int64_t k = kT0 / 1000;  // ticks of 1 s
    EXPECT_EQ(z.spend("a", 2, kT0 + 10), 2);
    EXPECT_EQ(z.spend("a", 3, kT0 + 1500), 3);
    std::vector<rl_sync_item_t> sent = z.take(kT0 + 1600);
    ASSERT_EQ(sent.size(), 2u);
    EXPECT_EQ(sent[0].tick, k);
    EXPECT_EQ(sent[0].units, 2u);
    EXPECT_EQ(sent[0].end, kT0 + 11000);  // when tick k leaves the window
    EXPECT_EQ(sent[1].tick, k + 1);
    EXPECT_EQ(sent[1].units, 3u);
    EXPECT_EQ(sent[1].ticks, 10u);
    EXPECT_EQ(sent[1].period_ms, 10000);
    EXPECT_EQ(rl_sync_totals(sent.data(), sent.size()), 22u);
}

// A fixed_window or quota key counts the fleet's total plus what it spent
// since it sent; a smaller total changes nothing.
TEST(Sync, FoldOfCountsNeverLowersAndAdmitsOnlyWhatIsLeft)
{
    for (const char *rule : {kFixed, kQuota}) {
        SyncZone z(rule);
        const int64_t t = kT0 + 5;
        EXPECT_EQ(z.spend("a", 3, t), 3);
        std::vector<rl_sync_item_t> sent = z.take(t);
        ASSERT_EQ(sent.size(), 1u);
        EXPECT_EQ(z.spend("a", 1, t + 1), 1);  // spent since it sent
        // the fleet: these 3 and 4 of other servers
        z.apply(sent, {{sent[0].end, 7}}, t + 2);
        EXPECT_EQ(z.remaining("a", t + 2), 10u - 8u) << rule;
        EXPECT_EQ(z.spend("a", 5, t + 3), 2) << rule;  // limit less the others' 4 and its own 4
        // a total below its count: nothing lowered
        std::vector<rl_sync_item_t> more = z.take(t + 200);
        z.apply(more, {{sent[0].end, 1}}, t + 201);
        EXPECT_EQ(z.remaining("a", t + 201), 0u) << rule;
        // the fleet's window over: nothing changes
        SyncZone y(rule);
        EXPECT_EQ(y.spend("b", 1, t), 1);
        std::vector<rl_sync_item_t> b = y.take(t);
        y.apply(b, {{t + 1, 9}}, t + 2);
        EXPECT_EQ(y.remaining("b", t + 2), 9u) << rule;
    }
}

TEST(Sync, FoldOfAKeyTheTableDoesNotHold)
{
    SyncZone z(kFixed), other(kFixed);
    EXPECT_EQ(other.spend("a", 1, kT0), 1);
    std::vector<rl_sync_item_t> sent = other.take(kT0);
    // z never saw the key: it learns the fleet's 6
    z.apply(sent, {{kT0 + 10000, 6}}, kT0 + 1);
    EXPECT_EQ(z.remaining("a", kT0 + 1), 4u);
}

// A sliding_window key's ring folded tick by tick: each tick the largest of
// its own count and the fleet's plus what it spent in it since.
TEST(Sync, FoldOfSlidingWindowTickByTick)
{
    SyncZone z(kSliding);
    const int64_t k = kT0 / 1000;
    EXPECT_EQ(z.spend("a", 2, kT0 + 100), 2);  // tick k
    std::vector<rl_sync_item_t> sent = z.take(kT0 + 100);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(z.spend("a", 1, kT0 + 200), 1);  // tick k, since it sent
    // the fleet: 3 in tick k - 2 (others), and 2 + 2 in tick k
    std::vector<rl_sync_total_t> ticks;
    for (int64_t j = k - 10; j <= k; j++) {
        ticks.push_back({j, j == k - 2 ? 3u : j == k ? 4u : 0u});
    }
    z.apply(sent, ticks, kT0 + 300);
    // 3 + 4 + 1 of 10 in the window
    EXPECT_EQ(z.remaining("a", kT0 + 300), 2u);
    EXPECT_EQ(z.spend("a", 5, kT0 + 400), 2);
    // smaller counts lower nothing
    std::vector<rl_sync_item_t> more = z.take(kT0 + 500);
    ASSERT_EQ(more.size(), 1u);
    std::vector<rl_sync_total_t> less;
    for (int64_t j = k - 10; j <= k; j++) {
        less.push_back({j, j == k - 2 || j == k ? 1u : 0u});
    }
    z.apply(more, less, kT0 + 501);
    EXPECT_EQ(z.remaining("a", kT0 + 501), 0u);
    // tick k - 2 (its 3 units) has left the window by tick k + 9; tick k
    // (the other 7) leaves it during tick k + 10, by half midway
    EXPECT_EQ(z.remaining("a", kT0 + 9000), 3u);
    EXPECT_EQ(z.remaining("a", kT0 + 10500), 6u);
    EXPECT_EQ(z.remaining("a", kT0 + 11000), 10u);
}

TEST(Sync, FoldOfSlidingWindowIntoAFreshKeyAndALaterTick)
{
    SyncZone z(kSliding), other(kSliding);
    const int64_t k = kT0 / 1000;
    EXPECT_EQ(other.spend("a", 1, kT0 + 2100), 1);  // tick k + 2
    std::vector<rl_sync_item_t> sent = other.take(kT0 + 2100);
    ASSERT_EQ(sent.size(), 1u);
    std::vector<rl_sync_total_t> ticks;
    for (int64_t j = k + 2 - 10; j <= k + 2; j++) {
        ticks.push_back({j, j == k ? 5u : j == k + 2 ? 1u : 0u});
    }
    // z spent 2 in tick k, and its ring moves on to the fleet's tick
    EXPECT_EQ(z.spend("a", 2, kT0), 2);
    z.take(kT0);
    z.apply(sent, ticks, kT0 + 2200);
    EXPECT_EQ(z.remaining("a", kT0 + 2200), 4u);  // 5 + 1 of 10
    EXPECT_EQ(z.spend("a", 9, kT0 + 2300), 4);
}

TEST(Sync, CallsAreCutByTheirReply)
{
    std::vector<rl_sync_item_t> items(300);
    EXPECT_EQ(rl_sync_batch(items.data(), items.size()), (size_t) RL_SYNC_BATCH);
    EXPECT_EQ(rl_sync_batch(items.data(), 5), 5u);
    for (auto &it : items) {
        it.ticks = 10;
    }
    EXPECT_EQ(rl_sync_batch(items.data(), items.size()), (size_t) (RL_SYNC_REPLY_MAX / 11));
    for (auto &it : items) {
        it.ticks = RL_BUCKETS_MAX;
    }
    EXPECT_EQ(rl_sync_batch(items.data(), items.size()), (size_t) (RL_SYNC_REPLY_MAX / (RL_BUCKETS_MAX + 1)));
    EXPECT_GE(rl_sync_batch(items.data(), 1), 1u);
}

TEST(Sync, ReplyJudged)
{
    const int64_t now = kT0;
    char why[128];
    rl_sync_item_t items[2]{};
    items[0].tick = -1;
    items[1].tick = 100;
    items[1].ticks = 2;
    rl_sync_total_t totals[4];
    int status = 9;

    rl_resp_t good = reply_of({RL_SYNC_ADDED, now + 5000, 7, 1, 0, 3});
    ASSERT_EQ(rl_sync_answer(&good, items, 2, now, totals, &status, why, sizeof(why)), RL_REDIS_DECIDED) << why;
    EXPECT_EQ(status, RL_SYNC_ADDED);
    EXPECT_EQ(totals[0].end, now + 5000);
    EXPECT_EQ(totals[0].total, 7u);
    EXPECT_EQ(totals[1].end, 98);  // the oldest tick first
    EXPECT_EQ(totals[1].total, 1u);
    EXPECT_EQ(totals[3].end, 100);
    EXPECT_EQ(totals[3].total, 3u);

    // a copy that found the call's marker, or came too late: the totals
    for (int did : {RL_SYNC_SEEN, RL_SYNC_LATE}) {
        rl_resp_t r = reply_of({did, now + 5000, 7, 1, 0, 3});
        ASSERT_EQ(rl_sync_answer(&r, items, 2, now, totals, &status, why, sizeof(why)), RL_REDIS_DECIDED) << why;
        EXPECT_EQ(status, did);
        EXPECT_EQ(totals[0].total, 7u);
    }

    const std::vector<std::vector<int64_t>> bad = {
        {1, now + 5000, 7, 1, 0},                            // a tick short
        {1, now + 5000, 7, 1, 0, 3, 4},                      // one too many
        {now + 5000, 7, 1, 0, 3},                            // what the call did missing
        {2, now + 5000, 7, 1, 0, 3},                         // a call that did what no call does
        {-2, now + 5000, 7, 1, 0, 3},                        //
        {1, now + 5000, -1, 1, 0, 3},                        // a negative total
        {1, now + 5000, 4ll * RL_LIMIT_MAX + 1, 1, 0, 3},    // beyond any limit
        {1, now + 5000, 7, 1, -2, 3},                        // a negative tick
        {1, now + 5000, 7, 1, 0, 4ll * RL_LIMIT_MAX + 1},    // a tick beyond any limit
        {1, now + RL_PERIOD_MAX_MS + 86400000, 7, 1, 0, 3},  // a window's end years off
        {1, now - RL_PERIOD_MAX_MS - 1, 7, 1, 0, 3},
    };
    for (const auto &v : bad) {
        rl_resp_t r = reply_of(v);
        EXPECT_EQ(rl_sync_answer(&r, items, 2, now, totals, &status, why, sizeof(why)), RL_REDIS_FAILED) << v[2];
    }
    rl_resp_t mixed = reply_of({1, now + 5000, 7, 1, 0, 3});
    mixed.integers = 0;  // a string among the integers
    EXPECT_EQ(rl_sync_answer(&mixed, items, 2, now, totals, &status, why, sizeof(why)), RL_REDIS_FAILED);

    rl_resp_t err{};
    err.type = RL_RESP_ERROR;
    err.str = "NOSCRIPT No matching script";
    err.str_len = std::strlen(err.str);
    EXPECT_EQ(rl_sync_answer(&err, items, 2, now, totals, &status, why, sizeof(why)), RL_REDIS_NOSCRIPT);
    err.str = "ERR out of memory";
    err.str_len = std::strlen(err.str);
    EXPECT_EQ(rl_sync_answer(&err, items, 2, now, totals, &status, why, sizeof(why)), RL_REDIS_FAILED);
    err.str = "READONLY You can't write against a read only replica.";
    err.str_len = std::strlen(err.str);
    EXPECT_EQ(rl_sync_answer(&err, items, 2, now, totals, &status, why, sizeof(why)), RL_REDIS_READONLY);
}

TEST(Sync, CommandCarriesEachItemsTickAndBuckets)
{
    rl_sync_item_t items[2]{};
    items[0].tick = -1;
    items[0].units = 3;
    items[0].end = kT0 + 10000;
    items[1].tick = 1767225600;
    items[1].ticks = 10;
    items[1].units = 2;
    items[1].end = kT0 + 11000;
    for (rl_sync_item_t &it : items) {
        it.call = 0x2a;
        it.deadline = kT0 + 12000;
    }
    std::memset(items[0].name, 'a', RL_REDIS_HASH_LEN);
    std::memset(items[1].name, 'b', RL_REDIS_HASH_LEN);
    std::vector<char> buf(rl_sync_command_size(2, 2, 40));
    const size_t n = rl_sync_command(buf.data(), "0123456789012345678901234567890123456789", 40, 0, "p:", 2,
                                     0x0123456789abcdefull, items, 2, kT0);
    ASSERT_LE(n, buf.size());
    const std::string cmd(buf.data(), n);
    // EVALSHA, the script, 3 keys (the marker first), now, the deadline,
    // 4 arguments an item
    EXPECT_EQ(cmd.rfind("*16\r\n$7\r\nEVALSHA\r\n$40\r\n0123456789012345678901234567890123456789\r\n$1\r\n3\r\n"
                        "$36\r\np:c:0123456789abcdef000000000000002a\r\n$36\r\np:s:aaaa",
                        0),
              0u)
        << cmd;
    EXPECT_NE(cmd.find("p:s:" + std::string(RL_REDIS_HASH_LEN, 'b')), std::string::npos);
    EXPECT_NE(cmd.find("$13\r\n1767225600000\r\n$13\r\n1767225612000\r\n$1\r\n3\r\n"), std::string::npos) << cmd;
    // units, end, tick (0 for a count rule's key), buckets
    EXPECT_NE(cmd.find("$1\r\n3\r\n$13\r\n1767225610000\r\n$1\r\n0\r\n$1\r\n0\r\n"), std::string::npos) << cmd;
    EXPECT_NE(cmd.find("$1\r\n2\r\n$13\r\n1767225611000\r\n$10\r\n1767225600\r\n$2\r\n10\r\n"), std::string::npos)
        << cmd;
}

// A window the same on every server: a counter named by its end, answered
// by its total alone; align=first keeps the script's "END TOTAL".
TEST(Sync, AlignedWindowsAreCountersNamedByTheirEnd)
{
    SyncZone epoch(kFixed), first("algorithm=fixed_window limit=10 period=10s align=first name=f"), quota(kQuota);
    epoch.spend("a", 1, kT0 + 5);
    first.spend("a", 1, kT0 + 5);
    quota.spend("a", 1, kT0 + 5);
    rl_sync_item_t items[3] = {epoch.take(kT0 + 5)[0], first.take(kT0 + 5)[0], quota.take(kT0 + 5)[0]};
    EXPECT_EQ(items[0].aligned, 1);
    EXPECT_EQ(items[1].aligned, 0);
    EXPECT_EQ(items[2].aligned, 1);
    EXPECT_EQ(rl_sync_batch(items, 3), 3u);

    std::vector<char> buf(rl_sync_command_size(3, 2, 40));
    const std::string cmd(buf.data(), rl_sync_command(buf.data(), "0123456789012345678901234567890123456789", 40, 0,
                                                      "p:", 2, 1, items, 3, kT0 + 5));
    EXPECT_NE(cmd.find("p:s:" + std::string(items[0].name, RL_REDIS_HASH_LEN) + ":1767225610000\r\n"),
              std::string::npos)
        << cmd;
    EXPECT_NE(cmd.find("p:s:" + std::string(items[1].name, RL_REDIS_HASH_LEN) + "\r\n"), std::string::npos) << cmd;
    EXPECT_NE(cmd.find("$13\r\n1767225610000\r\n$1\r\n0\r\n$2\r\n-1\r\n"), std::string::npos) << cmd;

    char why[128];
    rl_sync_total_t totals[3];
    int status;
    rl_resp_t good = reply_of({1, 7, kT0 + 10005, 2, 9});
    ASSERT_EQ(rl_sync_answer(&good, items, 3, kT0 + 5, totals, &status, why, sizeof(why)), RL_REDIS_DECIDED) << why;
    EXPECT_EQ(totals[0].end, items[0].end);
    EXPECT_EQ(totals[0].total, 7u);
    EXPECT_EQ(totals[1].end, kT0 + 10005);
    EXPECT_EQ(totals[1].total, 2u);
    EXPECT_EQ(totals[2].end, items[2].end);
    EXPECT_EQ(totals[2].total, 9u);
    for (const auto &v : std::vector<std::vector<int64_t>>{{1, 7, kT0 + 10005, 2},
                                                           {1, 7, kT0 + 10005, 2, 9, 1},
                                                           {1, -7, kT0 + 10005, 2, 9},
                                                           {1, 7, kT0 + 10005, 2, -1}}) {
        rl_resp_t r = reply_of(v);
        EXPECT_EQ(rl_sync_answer(&r, items, 3, kT0 + 5, totals, &status, why, sizeof(why)), RL_REDIS_FAILED)
            << v.size();
    }
    // folded as any count
    epoch.apply({items[0]}, {totals[0]}, kT0 + 6);
    EXPECT_EQ(epoch.remaining("a", kT0 + 6), 3u);
}

// ---- calls: numbered, sent again as they were, added once ----------------

namespace {

// An item as the journal keeps it, its chain aside.
std::string bytes_of(rl_sync_item_t it)
{
    it.next = 0;
    return std::string(reinterpret_cast<const char *>(&it), sizeof(it));
}

bool same_items(const std::vector<rl_sync_item_t> &a, const std::vector<rl_sync_item_t> &b)
{
    if (a.size() != b.size()) {
        return false;
    }
    for (size_t i = 0; i < a.size(); i++) {
        if (bytes_of(a[i]) != bytes_of(b[i])) {
            return false;
        }
    }
    return true;
}

}  // namespace

TEST(SyncCalls, EachCallIsNumberedInItsJournal)
{
    SyncZone z(kFixed, 256), other(kFixed);
    EXPECT_NE(rl_sync_nonce(z.journal), 0u);
    EXPECT_NE(rl_sync_nonce(z.journal), rl_sync_nonce(other.journal)) << "each journal's nonce is random";
    // 200 keys: two calls, cut as rl_sync_batch cuts them
    for (int k = 0; k < 200; k++) {
        z.spend("k" + std::to_string(k), 1, kT0);
    }
    std::vector<rl_sync_item_t> sent = z.take(kT0 + 1);
    ASSERT_EQ(sent.size(), 200u);
    const uint64_t first = sent[0].call;
    EXPECT_GE(first, 1u) << "0 is units never sent";
    for (size_t i = 0; i < sent.size(); i++) {
        EXPECT_EQ(sent[i].call, i < RL_SYNC_BATCH ? first : first + 1) << i;
        // the call's deadline: a second after its last window (10 s)
        EXPECT_EQ(sent[i].deadline, kT0 + 10000 + 1000) << i;
    }
    EXPECT_EQ(rl_sync_batch(sent.data(), sent.size()), (size_t) RL_SYNC_BATCH);
    EXPECT_EQ(rl_sync_batch(sent.data() + RL_SYNC_BATCH, 200 - RL_SYNC_BATCH), 200u - RL_SYNC_BATCH);
    // the next exchange's call comes after them
    z.spend("k0", 1, kT0 + 2);
    std::vector<rl_sync_item_t> next = z.take(kT0 + 101);
    ASSERT_EQ(next.size(), 1u);
    EXPECT_EQ(next[0].call, first + 2);
    // the journal kept (a reload): its nonce and numbers too
    const uint64_t nonce = rl_sync_nonce(z.journal);
    const size_t size = (rl_sync_size(256) + 63) & ~size_t{63};
    EXPECT_EQ(rl_sync_init(z.journal, size, 256), 1);
    EXPECT_EQ(rl_sync_nonce(z.journal), nonce);
    z.spend("k0", 1, kT0 + 102);
    EXPECT_EQ(z.take(kT0 + 201)[0].call, first + 3);

    // a window longer than RL_SYNC_DOUBT_MS: the deadline is that long
    SyncZone q(kQuota);
    q.spend("a", 1, kT0 + 5);
    std::vector<rl_sync_item_t> day = q.take(kT0 + 5);
    ASSERT_EQ(day.size(), 1u);
    EXPECT_EQ(day[0].end, kT0 + 86400000);
    EXPECT_EQ(day[0].deadline, kT0 + 5 + RL_SYNC_DOUBT_MS + 1000);
}

TEST(SyncCalls, ACallInDoubtIsSentAgainAsItWas)
{
    SyncZone z(kFixed);
    z.spend("a", 3, kT0);
    z.spend("b", 2, kT0);
    z.spend("c", 1, kT0);
    std::vector<rl_sync_item_t> sent = z.take(kT0 + 1);
    ASSERT_EQ(sent.size(), 3u);
    // spent meanwhile: a again, and d
    z.spend("a", 1, kT0 + 2);
    z.spend("d", 1, kT0 + 2);
    // no answer: the call comes back, apart from what was spent since
    rl_sync_requeue(z.journal, sent.data(), sent.size());
    EXPECT_EQ(z.pending(), 5u);
    std::vector<rl_sync_item_t> again = z.take(kT0 + 101);
    EXPECT_TRUE(same_items(again, sent)) << "the same call, its items as they were";
    EXPECT_EQ(z.pending(), 2u) << "the units spent since wait";
    // and again, as often as Redis does not answer
    rl_sync_requeue(z.journal, again.data(), again.size());
    z.spend("a", 1, kT0 + 150);
    EXPECT_TRUE(same_items(z.take(kT0 + 201), sent));
    // answered: the units spent since go in a call of their own
    std::vector<rl_sync_item_t> since = z.take(kT0 + 301);
    ASSERT_EQ(since.size(), 2u);
    EXPECT_EQ(since[0].units, 2u);  // a: 1 + 1
    EXPECT_EQ(since[1].units, 1u);  // d
    EXPECT_GT(since[0].call, sent[0].call);
    EXPECT_EQ(since[1].call, since[0].call);
    EXPECT_EQ(z.pending(), 0u);

    // an item whose window is over is left out of its call; the rest is
    // sent as it was
    SyncZone w(kFixed);
    w.spend("x", 1, kT0);
    w.spend("y", 1, kT0 + 5000);  // the same 10 s window
    std::vector<rl_sync_item_t> two = w.take(kT0 + 5001);
    ASSERT_EQ(two.size(), 2u);
    rl_sync_requeue(w.journal, two.data(), two.size());
    EXPECT_EQ(w.take(kT0 + 6000).size(), 2u);
    rl_sync_requeue(w.journal, two.data(), two.size());
    EXPECT_TRUE(w.take(kT0 + 10000).empty()) << "their window is over";
}

TEST(SyncCalls, CallsInDoubtComeBackByNumberEachAsItWas)
{
    SyncZone z(kFixed, 512);
    for (int k = 0; k < 200; k++) {
        z.spend("k" + std::to_string(k), 1 + k % 3, kT0);
    }
    std::vector<rl_sync_item_t> first = z.take(kT0 + 1);
    for (int k = 0; k < 30; k++) {
        z.spend("j" + std::to_string(k), 1, kT0 + 2);
    }
    std::vector<rl_sync_item_t> second = z.take(kT0 + 101);
    ASSERT_EQ(first.size(), 200u);
    ASSERT_EQ(second.size(), 30u);
    // three calls; the last answered first, then the others fail, in any
    // order
    rl_sync_requeue(z.journal, second.data(), second.size());
    rl_sync_requeue(z.journal, first.data() + RL_SYNC_BATCH, first.size() - RL_SYNC_BATCH);
    rl_sync_requeue(z.journal, first.data(), RL_SYNC_BATCH);
    z.spend("k1", 1, kT0 + 150);
    std::vector<rl_sync_item_t> again = z.take(kT0 + 201);
    std::vector<rl_sync_item_t> want = first;
    want.insert(want.end(), second.begin(), second.end());
    EXPECT_TRUE(same_items(again, want));
    // cut into the same three calls
    size_t i = 0, calls = 0;
    for (; i < again.size(); calls++) {
        const size_t n = rl_sync_batch(again.data() + i, again.size() - i);
        for (size_t j = i; j < i + n; j++) {
            EXPECT_EQ(again[j].call, again[i].call);
        }
        i += n;
    }
    EXPECT_EQ(calls, 3u);
    EXPECT_EQ(z.pending(), 1u);
}

TEST(SyncCalls, UnitsSpentWhileAKeyIsInDoubtStayApart)
{
    for (const char *rule : {kFixed, kSliding}) {
        SyncZone z(rule);
        z.spend("a", 3, kT0 + 100);
        std::vector<rl_sync_item_t> sent = z.take(kT0 + 100);
        ASSERT_EQ(sent.size(), 1u);
        z.spend("a", 2, kT0 + 200);  // before the call failed
        rl_sync_requeue(z.journal, sent.data(), sent.size());
        z.spend("a", 4, kT0 + 300);  // after
        EXPECT_EQ(z.pending(), 2u) << rule << ": the call's item, and the units not sent";
        std::vector<rl_sync_item_t> again = z.take(kT0 + 400);
        ASSERT_EQ(again.size(), 1u);
        EXPECT_EQ(again[0].units, 3u) << rule;
        EXPECT_EQ(again[0].call, sent[0].call) << rule;
        std::vector<rl_sync_item_t> rest = z.take(kT0 + 500);
        ASSERT_EQ(rest.size(), 1u);
        EXPECT_EQ(rest[0].units, 6u) << rule;
        // the journal full: a call's items that find no room are dropped,
        // never merged into other units
        SyncZone full(rule);
        full.spend("a", 1, kT0 + 100);
        std::vector<rl_sync_item_t> one = full.take(kT0 + 100);
        for (int k = 0; k < RL_SYNC_KEYS_MIN; k++) {
            full.spend(k == 0 ? std::string("a") : "k" + std::to_string(k), 1, kT0 + 200);
        }
        rl_sync_requeue(full.journal, one.data(), one.size());
        rl_sync_figures_t f;
        rl_sync_get_figures(full.journal, &f);
        EXPECT_EQ(f.dropped, 1u) << rule;
        EXPECT_EQ(f.pending, (uint64_t) RL_SYNC_KEYS_MIN) << rule;
    }
}

TEST(SyncCalls, ACallInDoubtTooLongIsGivenUpAndCounted)
{
    SyncZone q(kQuota);  // a day's window: longer than RL_SYNC_DOUBT_MS
    q.spend("a", 5, kT0 + 5);
    std::vector<rl_sync_item_t> sent = q.take(kT0 + 5);
    ASSERT_EQ(sent.size(), 1u);
    rl_sync_requeue(q.journal, sent.data(), sent.size());
    EXPECT_EQ(q.take(kT0 + 5 + RL_SYNC_DOUBT_MS - 100).size(), 1u);
    rl_sync_requeue(q.journal, sent.data(), sent.size());
    EXPECT_TRUE(q.take(kT0 + 5 + RL_SYNC_DOUBT_MS).empty()) << "Redis would not run it";
    rl_sync_figures_t f;
    rl_sync_get_figures(q.journal, &f);
    EXPECT_EQ(f.dropped, 5u);
    EXPECT_EQ(f.pending, 0u);
}

TEST(SyncCalls, BatchesNeverMixCalls)
{
    std::vector<rl_sync_item_t> items(300);
    const uint64_t calls[] = {4, 4, 5, 5, 5, 7};
    for (size_t i = 0; i < 6; i++) {
        items[i].call = calls[i];
    }
    EXPECT_EQ(rl_sync_batch(items.data(), 6), 2u);
    EXPECT_EQ(rl_sync_batch(items.data() + 2, 4), 3u);
    EXPECT_EQ(rl_sync_batch(items.data() + 5, 1), 1u);
    for (auto &it : items) {
        it.call = 9;
    }
    EXPECT_EQ(rl_sync_batch(items.data(), items.size()), (size_t) RL_SYNC_BATCH);
}

// A fold counts the units not sent; a key with units in a call in doubt
// (which Redis may hold already) keeps its own count until that call is
// answered, then counts the fleet's total and the units not sent.
TEST(SyncCalls, AFoldWaitsForTheKeysCallsInDoubt)
{
    SyncZone z(kFixed);
    const int64_t t = kT0 + 5;
    EXPECT_EQ(z.spend("a", 3, t), 3);
    std::vector<rl_sync_item_t> x = z.take(t);  // a call that will fail
    EXPECT_EQ(z.spend("a", 2, t + 100), 2);
    std::vector<rl_sync_item_t> y = z.take(t + 100);  // a call answered
    ASSERT_EQ(x.size(), 1u);
    ASSERT_EQ(y.size(), 1u);
    EXPECT_EQ(z.spend("a", 1, t + 150), 1);  // not sent
    rl_sync_requeue(z.journal, x.data(), x.size());
    // Redis ran x and y (x's reply lost), and 2 units of another server:
    // 7; x's 3 counted again would make 3 + 7 + 1 = 11
    z.apply(y, {{y[0].end, 7}}, t + 200);
    EXPECT_EQ(z.remaining("a", t + 200), 10u - 6u) << "its own 6 units";
    std::vector<rl_sync_item_t> again = z.take(t + 300);
    ASSERT_EQ(again.size(), 1u);
    z.apply(again, {{again[0].end, 7}}, t + 301);
    EXPECT_EQ(z.remaining("a", t + 301), 10u - 8u) << "the fleet's 7 and the unit not sent";

    // sliding_window, tick by tick: a tick in doubt keeps its own count
    SyncZone s(kSliding);
    const int64_t k = kT0 / 1000;
    EXPECT_EQ(s.spend("a", 3, kT0 + 100), 3);  // tick k
    std::vector<rl_sync_item_t> sx = s.take(kT0 + 100);
    EXPECT_EQ(s.spend("a", 2, kT0 + 1100), 2);  // tick k + 1
    std::vector<rl_sync_item_t> sy = s.take(kT0 + 1100);
    ASSERT_EQ(sx.size(), 1u);
    ASSERT_EQ(sy.size(), 1u);
    rl_sync_requeue(s.journal, sx.data(), sx.size());
    std::vector<rl_sync_total_t> ticks;
    for (int64_t j = k + 1 - 10; j <= k + 1; j++) {
        ticks.push_back({j, j == k ? 3u : j == k + 1 ? 4u : 0u});  // 2 units of another server in k + 1
    }
    s.apply(sy, ticks, kT0 + 1200);
    EXPECT_EQ(s.remaining("a", kT0 + 1200), 10u - 7u) << "tick k its own 3, tick k + 1 the fleet's 4";
}

// ---- the script in a real redis-server -------------------------------------

namespace {

int64_t wall_ms()
{
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// A call of items sent with EVAL: what it did, and its totals.
struct Sent {
    int kind = 0;
    int status = 9;
    std::vector<rl_sync_total_t> totals;
};

Sent send(const std::string &prefix, uint64_t nonce, const std::vector<rl_sync_item_t> &items, int64_t now)
{
    size_t slen;
    const char *script = rl_sync_script(&slen);
    std::vector<char> buf(rl_sync_command_size(items.size(), prefix.size(), slen));
    const size_t n = rl_sync_command(buf.data(), script, slen, 1, prefix.data(), prefix.size(), nonce, items.data(),
                                     items.size(), now);
    rl_resp_t r = Redis::instance().call(std::string(buf.data(), n));
    Sent out;
    out.totals.resize(rl_sync_totals(items.data(), items.size()));
    char why[128] = "";
    out.kind = rl_sync_answer(&r, items.data(), items.size(), now, out.totals.data(), &out.status, why, sizeof(why));
    EXPECT_EQ(out.kind, RL_REDIS_DECIDED) << why << ": " << std::string(r.str ? r.str : "", r.str_len);
    return out;
}

std::string totals_of(const Sent &s)
{
    std::string out;
    for (const rl_sync_total_t &t : s.totals) {
        out += std::to_string(t.end) + "=" + std::to_string(t.total) + " ";
    }
    return out;
}

int64_t integer(const rl_resp_t &r)
{
    return r.integer;
}

}  // namespace

TEST(SyncScript, ACallAddsItsUnitsOnceWhateverItsCopies)
{
    NEED_REDIS();
    const int64_t now = wall_ms();
    const uint64_t nonce = std::random_device{}() * 0x100000001ull + 1;
    const std::string prefix = "synct:";
    // a window named by its end, one chosen by the key's first request, a
    // sliding_window tick (10 ticks of 1 min)
    rl_sync_item_t aligned{}, first{}, tick{};
    aligned.tick = -1;
    aligned.aligned = 1;
    aligned.end = now + 60000;
    aligned.units = 3;
    std::memset(aligned.name, 'a', RL_REDIS_HASH_LEN);
    first.tick = -1;
    first.end = now + 60000;
    first.units = 2;
    std::memset(first.name, 'b', RL_REDIS_HASH_LEN);
    tick.tick = now / 60000;
    tick.ticks = 10;
    tick.period_ms = 600000;
    tick.end = (tick.tick + 1 + 10) * 60000;
    tick.units = 4;
    std::memset(tick.name, 'c', RL_REDIS_HASH_LEN);
    std::vector<rl_sync_item_t> call = {aligned, first, tick};
    for (rl_sync_item_t &it : call) {
        it.call = 1;
        it.deadline = tick.end + 1000;
    }

    const Sent one = send(prefix, nonce, call, now);
    EXPECT_EQ(one.status, RL_SYNC_ADDED);
    ASSERT_EQ(one.totals.size(), 13u);
    EXPECT_EQ(one.totals[0].total, 3u);
    EXPECT_EQ(one.totals[1].end, now + 60000);
    EXPECT_EQ(one.totals[1].total, 2u);
    EXPECT_EQ(one.totals[12].end, tick.tick);
    EXPECT_EQ(one.totals[12].total, 4u);

    // the same call again (its reply lost, or a copy a paused Redis ran
    // when it resumed): nothing added, the totals answered
    const Sent two = send(prefix, nonce, call, now + 50);
    EXPECT_EQ(two.status, RL_SYNC_SEEN);
    EXPECT_EQ(totals_of(two), totals_of(one));
    // as sent again with an item left out (its window over)
    const Sent part = send(prefix, nonce, {call[0], call[2]}, now + 60);
    EXPECT_EQ(part.status, RL_SYNC_SEEN);
    EXPECT_EQ(part.totals[0].total, 3u);

    // another call of the same keys adds its units
    std::vector<rl_sync_item_t> next = call;
    for (rl_sync_item_t &it : next) {
        it.call = 2;
    }
    const Sent three = send(prefix, nonce, next, now + 100);
    EXPECT_EQ(three.status, RL_SYNC_ADDED);
    EXPECT_EQ(three.totals[0].total, 6u);
    EXPECT_EQ(three.totals[1].total, 4u);
    EXPECT_EQ(three.totals[12].total, 8u);
    // a call of another journal (nonce) with the same number is another
    const Sent other = send(prefix, nonce + 1, next, now + 100);
    EXPECT_EQ(other.status, RL_SYNC_ADDED);
    EXPECT_EQ(other.totals[0].total, 9u);

    // the marker: the prefix, "c:", the nonce and the number in hex,
    // expiring at the call's deadline
    char id[40];
    std::snprintf(id, sizeof(id), "%016llx%016llx", (unsigned long long) nonce, 1ull);
    const std::string marker = prefix + "c:" + id;
    const int64_t pttl = integer(redis.command({"PTTL", marker}));
    EXPECT_GT(pttl, tick.end + 1000 - wall_ms() - 1000) << marker;
    EXPECT_LE(pttl, tick.end + 1000 - now);
    // every key expires: the keys under the prefix, and those without
    // an expiry
    const char *const count = "local n, never = 0, 0\n"
                              "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do\n"
                              "  n = n + 1\n"
                              "  if redis.call('PTTL', k) < 0 then never = never + 1 end\n"
                              "end\n"
                              "return {n, never}\n";
    rl_resp_t keys = redis.command({"EVAL", count, "0", prefix + "*"});
    ASSERT_EQ(keys.nitems, 2u);
    EXPECT_EQ(keys.items[0], 6) << "three markers (two journals), three keys";
    EXPECT_EQ(keys.items[1], 0) << "keys that never expire";

    // a copy that finds its marker adds nothing, and makes no key
    std::vector<rl_sync_item_t> absent = call;
    absent[0].name[0] = absent[1].name[0] = absent[2].name[0] = 'z';
    const Sent seen = send(prefix, nonce, absent, now + 200);
    EXPECT_EQ(seen.status, RL_SYNC_SEEN);
    EXPECT_EQ(seen.totals[0].total, 0u);
    for (const rl_sync_item_t &it : absent) {
        const std::string key = prefix + "s:" + std::string(it.name, RL_REDIS_HASH_LEN);
        EXPECT_EQ(integer(redis.command({"EXISTS", key + (it.aligned ? ":" + std::to_string(it.end) : "")})), 0);
    }

    // a copy that runs after its deadline adds nothing
    std::vector<rl_sync_item_t> late = call;
    for (rl_sync_item_t &it : late) {
        it.call = 3;
        it.deadline = now - 1;
    }
    const Sent past = send(prefix, nonce, late, now + 300);
    EXPECT_EQ(past.status, RL_SYNC_LATE);
    EXPECT_EQ(past.totals[0].total, 9u);
    std::snprintf(id, sizeof(id), "%016llx%016llx", (unsigned long long) nonce, 3ull);
    EXPECT_EQ(integer(redis.command({"EXISTS", prefix + "c:" + id})), 0);

    // an older tick's units sent late never bring its key's expiry sooner
    const std::string hash = prefix + "s:" + std::string(tick.name, RL_REDIS_HASH_LEN);
    const int64_t before = integer(redis.command({"PTTL", hash}));
    rl_sync_item_t old = tick;
    old.tick -= 5;
    old.end -= 5 * 60000;
    old.call = 4;
    old.deadline = old.end + 1000;
    const Sent older = send(prefix, nonce, {old}, now + 400);
    EXPECT_EQ(older.status, RL_SYNC_ADDED);
    EXPECT_GE(integer(redis.command({"PTTL", hash})), before - 1000);
}
