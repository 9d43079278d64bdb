// redis_sync: the journal (add, take, units given back when Redis did not
// take them), the fold of the fleet's totals (fixed_window, quota,
// sliding_window: never lowers a count, never admits more than the limit
// less the others' units), and the judging of a reply.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "helpers.h"
#include "ratelimit_sync.h"

namespace {

constexpr int64_t kInterval = 100;

// The servers of a fleet hash a key alike here (nginx: each its own
// secret; a server folds only the keys it sent).
const uint8_t kSecret[16] = {5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// A zone with redis_sync: a table for one rule and its journal.
struct SyncZone {
    rl_rule_t rule;
    uint64_t identity;
    TestZone zone;
    void *journal;

    explicit SyncZone(const char *text, uint32_t keys = RL_SYNC_KEYS_MIN)
        : rule(rule_of(text)), identity(identity_of(rule)), zone(256 * 1024, std::vector<rl_rule_t>{rule}, kSecret)
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
        std::vector<rl_sync_item_t> out(RL_SYNC_KEYS_MIN);
        int due = 0;
        out.resize(rl_sync_take(journal, now, kInterval, out.data(), &due));
        return out;
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
    rl_sync_record(z.journal, out.size(), out.size(), 0, 1, kT0 + 105);
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
    EXPECT_EQ(sent[0].buckets, 0u);
    // emptied, and not due again within the interval
    EXPECT_EQ(z.spend("a", 1, kT0 + 2), 1);
    int due = 1;
    std::vector<rl_sync_item_t> out(RL_SYNC_KEYS_MIN);
    EXPECT_EQ(rl_sync_take(z.journal, kT0 + 50, kInterval, out.data(), &due), 0u);
    EXPECT_EQ(due, 0);
    // Redis did not answer: the units come back, added to what was spent since
    rl_sync_requeue(z.journal, sent.data(), sent.size());
    rl_sync_figures_t f;
    rl_sync_get_figures(z.journal, &f);
    EXPECT_EQ(f.pending, 2u);
    std::vector<rl_sync_item_t> again = z.take(kT0 + 101);
    ASSERT_EQ(again.size(), 2u);
    EXPECT_EQ(again[0].units, 4u);
    EXPECT_EQ(again[1].units, 2u);
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
    EXPECT_EQ(sent[1].buckets, 10u);
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
        it.buckets = 10;
    }
    EXPECT_EQ(rl_sync_batch(items.data(), items.size()), (size_t) (RL_SYNC_REPLY_MAX / 11));
    for (auto &it : items) {
        it.buckets = RL_BUCKETS_MAX;
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
    items[1].buckets = 2;
    rl_sync_total_t totals[4];

    rl_resp_t good = reply_of({now + 5000, 7, 1, 0, 3});
    ASSERT_EQ(rl_sync_answer(&good, items, 2, now, totals, why, sizeof(why)), RL_REDIS_DECIDED) << why;
    EXPECT_EQ(totals[0].end, now + 5000);
    EXPECT_EQ(totals[0].total, 7u);
    EXPECT_EQ(totals[1].end, 98);  // the oldest tick first
    EXPECT_EQ(totals[1].total, 1u);
    EXPECT_EQ(totals[3].end, 100);
    EXPECT_EQ(totals[3].total, 3u);

    const std::vector<std::vector<int64_t>> bad = {
        {now + 5000, 7, 1, 0},                            // a tick short
        {now + 5000, 7, 1, 0, 3, 4},                      // one too many
        {now + 5000, -1, 1, 0, 3},                        // a negative total
        {now + 5000, 4ll * RL_LIMIT_MAX + 1, 1, 0, 3},    // beyond any limit
        {now + 5000, 7, 1, -2, 3},                        // a negative tick
        {now + 5000, 7, 1, 0, 4ll * RL_LIMIT_MAX + 1},    // a tick beyond any limit
        {now + RL_PERIOD_MAX_MS + 86400000, 7, 1, 0, 3},  // a window's end years off
        {now - RL_PERIOD_MAX_MS - 1, 7, 1, 0, 3},
    };
    for (const auto &v : bad) {
        rl_resp_t r = reply_of(v);
        EXPECT_EQ(rl_sync_answer(&r, items, 2, now, totals, why, sizeof(why)), RL_REDIS_FAILED) << v[1];
    }
    rl_resp_t mixed = reply_of({now + 5000, 7, 1, 0, 3});
    mixed.integers = 0;  // a string among the integers
    EXPECT_EQ(rl_sync_answer(&mixed, items, 2, now, totals, why, sizeof(why)), RL_REDIS_FAILED);

    rl_resp_t err{};
    err.type = RL_RESP_ERROR;
    err.str = "NOSCRIPT No matching script";
    err.str_len = std::strlen(err.str);
    EXPECT_EQ(rl_sync_answer(&err, items, 2, now, totals, why, sizeof(why)), RL_REDIS_NOSCRIPT);
    err.str = "ERR out of memory";
    err.str_len = std::strlen(err.str);
    EXPECT_EQ(rl_sync_answer(&err, items, 2, now, totals, why, sizeof(why)), RL_REDIS_FAILED);
    err.str = "READONLY You can't write against a read only replica.";
    err.str_len = std::strlen(err.str);
    EXPECT_EQ(rl_sync_answer(&err, items, 2, now, totals, why, sizeof(why)), RL_REDIS_READONLY);
}

TEST(Sync, CommandCarriesEachItemsTickAndBuckets)
{
    rl_sync_item_t items[2]{};
    items[0].tick = -1;
    items[0].units = 3;
    items[0].end = kT0 + 10000;
    items[1].tick = 1767225600;
    items[1].buckets = 10;
    items[1].units = 2;
    items[1].end = kT0 + 11000;
    std::memset(items[0].name, 'a', RL_REDIS_HASH_LEN);
    std::memset(items[1].name, 'b', RL_REDIS_HASH_LEN);
    std::vector<char> buf(rl_sync_command_size(2, 2, 40));
    const size_t n =
        rl_sync_command(buf.data(), "0123456789012345678901234567890123456789", 40, 0, "p:", 2, items, 2, kT0);
    ASSERT_LE(n, buf.size());
    const std::string cmd(buf.data(), n);
    EXPECT_EQ(cmd.rfind("*14\r\n$7\r\nEVALSHA\r\n", 0), 0u) << cmd;
    EXPECT_NE(cmd.find("p:s:" + std::string(RL_REDIS_HASH_LEN, 'b')), std::string::npos);
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
                                                      "p:", 2, items, 3, kT0 + 5));
    EXPECT_NE(cmd.find("p:s:" + std::string(items[0].name, RL_REDIS_HASH_LEN) + ":1767225610000\r\n"),
              std::string::npos)
        << cmd;
    EXPECT_NE(cmd.find("p:s:" + std::string(items[1].name, RL_REDIS_HASH_LEN) + "\r\n"), std::string::npos) << cmd;
    EXPECT_NE(cmd.find("$13\r\n1767225610000\r\n$1\r\n0\r\n$2\r\n-1\r\n"), std::string::npos) << cmd;

    char why[128];
    rl_sync_total_t totals[3];
    rl_resp_t good = reply_of({7, kT0 + 10005, 2, 9});
    ASSERT_EQ(rl_sync_answer(&good, items, 3, kT0 + 5, totals, why, sizeof(why)), RL_REDIS_DECIDED) << why;
    EXPECT_EQ(totals[0].end, items[0].end);
    EXPECT_EQ(totals[0].total, 7u);
    EXPECT_EQ(totals[1].end, kT0 + 10005);
    EXPECT_EQ(totals[1].total, 2u);
    EXPECT_EQ(totals[2].end, items[2].end);
    EXPECT_EQ(totals[2].total, 9u);
    for (const auto &v : std::vector<std::vector<int64_t>>{
             {7, kT0 + 10005, 2}, {7, kT0 + 10005, 2, 9, 1}, {-7, kT0 + 10005, 2, 9}, {7, kT0 + 10005, 2, -1}}) {
        rl_resp_t r = reply_of(v);
        EXPECT_EQ(rl_sync_answer(&r, items, 3, kT0 + 5, totals, why, sizeof(why)), RL_REDIS_FAILED) << v.size();
    }
    // folded as any count
    epoch.apply({items[0]}, {totals[0]}, kT0 + 6);
    EXPECT_EQ(epoch.remaining("a", kT0 + 6), 3u);
}
