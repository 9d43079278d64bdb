// A zone's key states in a file (ratelimit_state.h): a zone restored from
// its file decides every later request as the zone it was written from,
// the time between applied as for any idle key; what cannot apply any more
// (a rule gone, a block of another size, another zone size's summary) is
// dropped and said; a file cut short, damaged, or of another version is
// refused whole, the zone left empty.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "helpers.h"
#include "ratelimit_state.h"
#include "table/table.h"

namespace {

const uint8_t kSecret[16] = {2, 7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, 4, 5};

struct Rule {
    rl_rule_t rule;
    uint64_t identity;
    explicit Rule(const std::string &text) : rule(rule_of(text)), identity(identity_of(rule)) {}
};

bool hit(TestZone &z, const Rule &r, const std::string &key, int64_t now, rl_decision_t *d = nullptr)
{
    rl_check_t c = check_of(z.mem, &r.rule, r.identity, key, 1);
    rl_request_t rq = hashed(request_of(&c, 1));
    const int verdict = rl_decide(&rq, now);
    if (d != nullptr) {
        *d = c.decision;
    }
    return verdict != RL_VERDICT_REJECTED;
}

std::vector<rl_state_rule_t> state_rules(const std::vector<const Rule *> &rules)
{
    std::vector<rl_state_rule_t> out;
    for (const Rule *r : rules) {
        rl_state_rule_t s{};
        s.identity = r->identity;
        s.algorithm = r->rule.algorithm;
        s.rule = &r->rule;
        std::snprintf(s.name, sizeof(s.name), "%s", r->rule.name);
        out.push_back(s);
    }
    return out;
}

// The file of a zone, written a chunk of `buckets` buckets at a time.
std::vector<uint8_t> write_file(TestZone &z, const std::vector<rl_state_rule_t> &rules, int64_t now,
                                uint64_t buckets = 1 << 20)
{
    rl_state_write_t w;
    rl_state_write_begin(&w, rules.data(), rules.size(), now);
    std::vector<uint8_t> chunk(RL_STATE_CHUNK_MIN), file;
    size_t n;
    int more;
    do {
        more = rl_state_write_next(&w, z.mem, chunk.data(), chunk.size(), buckets, &n);
        file.insert(file.end(), chunk.begin(), chunk.begin() + (long) n);
    } while (more);
    return file;
}

int restore(TestZone &z, const std::vector<uint8_t> &file, const std::vector<rl_state_rule_t> &rules, int64_t now,
            rl_state_report_t *report)
{
    char err[RL_ERR_MAX] = "";
    return rl_state_restore(z.mem, file.data(), file.size(), rules.data(), rules.size(), now, report, err, sizeof(err));
}

const char *const kRules[] = {
    "algorithm=gcra limit=5 period=1h burst=3", "algorithm=token_bucket limit=5 period=1h burst=3",
    "algorithm=fixed_window limit=5 period=1h", "algorithm=sliding_window limit=5 period=1h buckets=10",
    "algorithm=sliding_log limit=5 period=1h",  "algorithm=leaky_bucket limit=5 period=1h max_delay=1h",
    "algorithm=quota limit=5 reset=daily",      "algorithm=gcra limit=2 period=1m ban=1h",
};

class StateRoundTrip : public ::testing::TestWithParam<const char *> {};

}  // namespace

// Keys spent, the file written, nginx down 10 minutes, the file read into
// a new zone (another secret at first, then the file's): every later
// request is decided as the first zone decides it.
TEST_P(StateRoundTrip, ARestoredZoneDecidesAsTheOneItWasWrittenFrom)
{
    const Rule r(GetParam());
    TestZone a(256 * 1024, {r.rule}, kSecret);
    const int64_t t0 = kT0 + 5000;
    for (int k = 0; k < 40; k++) {
        const std::string key = "key" + std::to_string(k);
        for (int i = 0; i < k % 9; i++) {
            hit(a, r, key, t0 + i * 100);
        }
    }
    const auto rules = state_rules({&r});
    const std::vector<uint8_t> file = write_file(a, rules, t0 + 1000);

    TestZone b(256 * 1024, {r.rule}, nullptr);
    rl_state_report_t rep;
    const int64_t back = t0 + 10 * 60 * 1000;
    ASSERT_EQ(restore(b, file, rules, back, &rep), RL_OK);
    EXPECT_EQ(rep.rules_gone, 0u);
    EXPECT_GT(rep.restored, 0u);
    EXPECT_EQ(rep.no_block, 0u);
    EXPECT_TABLE_VALID(b.table());
    for (int k = 0; k < 40; k++) {
        const std::string key = "key" + std::to_string(k);
        for (int i = 0; i < 8; i++) {
            rl_decision_t da, db;
            const bool ya = hit(a, r, key, back + i * 1000, &da);
            const bool yb = hit(b, r, key, back + i * 1000, &db);
            ASSERT_EQ(ya, yb) << key << " request " << i;
            EXPECT_EQ(da.remaining, db.remaining) << key << " request " << i;
            EXPECT_EQ(da.retry_after_ms, db.retry_after_ms) << key << " request " << i;
        }
    }
    EXPECT_TABLE_VALID(b.table());
}

INSTANTIATE_TEST_SUITE_P(EveryAlgorithm, StateRoundTrip, ::testing::ValuesIn(kRules), RuleName());

// Only keys that still owe are written: a key back to full budget, or
// holding concurrency slots (no request survives a restart), is not.
TEST(State, WritesOnlyKeysThatOweAndNoHeldSlots)
{
    const Rule g("algorithm=gcra limit=1 period=1s name=g");
    const Rule c("algorithm=concurrency limit=2 name=c");
    TestZone z(256 * 1024, {g.rule, c.rule}, kSecret);
    const int64_t now = kT0;
    EXPECT_TRUE(hit(z, g, "a", now));
    EXPECT_TRUE(hit(z, g, "b", now - 5000));  // back to full budget by now
    EXPECT_TRUE(hit(z, c, "a", now));         // a slot held
    const auto rules = state_rules({&g, &c});
    const std::vector<uint8_t> file = write_file(z, rules, now);
    TestZone y(256 * 1024, {g.rule, c.rule}, nullptr);
    rl_state_report_t rep;
    ASSERT_EQ(restore(y, file, rules, now, &rep), RL_OK);
    EXPECT_EQ(rep.keys, 1u);
    EXPECT_EQ(rep.restored, 1u);
    EXPECT_FALSE(hit(y, g, "a", now + 10));
    EXPECT_TRUE(hit(y, g, "b", now + 10));
    EXPECT_TRUE(hit(y, c, "a", now + 10));
    EXPECT_TRUE(hit(y, c, "a", now + 10));
    EXPECT_FALSE(hit(y, c, "a", now + 10));
}

// A file read after every key's state has run out restores nothing.
TEST(State, TimeDownPassesAsForAnIdleKey)
{
    const Rule r("algorithm=gcra limit=1 period=10m name=r");
    TestZone z(64 * 1024, {r.rule}, kSecret);
    EXPECT_TRUE(hit(z, r, "k", kT0));
    EXPECT_FALSE(hit(z, r, "k", kT0 + 1));
    const auto rules = state_rules({&r});
    const std::vector<uint8_t> file = write_file(z, rules, kT0 + 1);

    // back 4 minutes later: refused for 6 more
    TestZone y(64 * 1024, {r.rule}, nullptr);
    rl_state_report_t rep;
    ASSERT_EQ(restore(y, file, rules, kT0 + 4 * 60000, &rep), RL_OK);
    rl_decision_t d;
    EXPECT_FALSE(hit(y, r, "k", kT0 + 4 * 60000, &d));
    EXPECT_EQ(d.retry_after_ms, 6 * 60000);

    TestZone late(64 * 1024, {r.rule}, nullptr);
    ASSERT_EQ(restore(late, file, rules, kT0 + 10 * 60000, &rep), RL_OK);
    EXPECT_EQ(rep.expired, 1u);
    EXPECT_EQ(rep.restored, 0u);
    EXPECT_EQ(late.stats().keys, 0u);
}

// Written a few buckets at a time (the lock released between chunks), the
// file is the one written at once.
TEST(State, ChunksMakeTheSameFile)
{
    const Rule r("algorithm=sliding_window limit=5 period=1h name=w");
    TestZone z(256 * 1024, {r.rule}, kSecret);
    for (int k = 0; k < 500; k++) {
        hit(z, r, "k" + std::to_string(k), kT0);
    }
    const auto rules = state_rules({&r});
    const std::vector<uint8_t> whole = write_file(z, rules, kT0 + 1), chunked = write_file(z, rules, kT0 + 1, 3);
    ASSERT_EQ(whole.size(), chunked.size());
    for (size_t i = 0; i < whole.size(); i++) {
        ASSERT_EQ(whole[i], chunked[i]) << i;
    }
}

// A rule renamed: its keys are no one's any more, said by name; the other
// rule's keys are restored.  A rule whose state's block changed size (its
// limit, for sliding_log) loses its keys.
TEST(State, AnotherRuleSetRestoresWhatStillApplies)
{
    const Rule keep("algorithm=gcra limit=1 period=1h name=keep");
    const Rule old("algorithm=gcra limit=1 period=1h name=old");
    const Rule log5("algorithm=sliding_log limit=5 period=1h name=log");
    TestZone z(256 * 1024, {keep.rule, old.rule, log5.rule}, kSecret);
    EXPECT_TRUE(hit(z, keep, "k", kT0));
    EXPECT_TRUE(hit(z, old, "k", kT0));
    EXPECT_TRUE(hit(z, log5, "k", kT0));
    const std::vector<uint8_t> file = write_file(z, state_rules({&keep, &old, &log5}), kT0);

    const Rule renamed("algorithm=gcra limit=1 period=1h name=renamed");
    const Rule log7("algorithm=sliding_log limit=7 period=1h name=log");
    TestZone y(256 * 1024, {keep.rule, renamed.rule, log7.rule}, nullptr);
    rl_state_report_t rep;
    ASSERT_EQ(restore(y, file, state_rules({&keep, &renamed, &log7}), kT0 + 1, &rep), RL_OK);
    EXPECT_EQ(rep.rules, 3u);
    EXPECT_EQ(rep.rules_gone, 1u);
    EXPECT_STREQ(rep.gone, "old");
    EXPECT_EQ(rep.no_block, 1u);
    EXPECT_FALSE(hit(y, keep, "k", kT0 + 2));
    EXPECT_TRUE(hit(y, renamed, "k", kT0 + 2));
    EXPECT_TRUE(hit(y, log7, "k", kT0 + 2));
    EXPECT_TABLE_VALID(y.table());
}

// What the eviction summary keeps of an evicted key is restored in a zone
// of the same size, and dropped (said) in one of another size.
TEST(State, TheSummarysDebtsSurviveInAZoneOfTheSameSize)
{
    const Rule r("algorithm=gcra limit=5 period=1h name=r");
    TestZone z(256 * 1024, {r.rule}, kSecret);
    while (hit(z, r, "k", kT0)) {
    }
    z.table()->evict(rl_table_tag(z.mem, r.identity, "k", 1), kT0);
    EXPECT_FALSE(hit(z, r, "k", kT0 + 1));
    const auto rules = state_rules({&r});
    const std::vector<uint8_t> file = write_file(z, rules, kT0 + 1);

    TestZone same(256 * 1024, {r.rule}, nullptr);
    rl_state_report_t rep;
    ASSERT_EQ(restore(same, file, rules, kT0 + 2, &rep), RL_OK);
    EXPECT_GT(rep.cells, 0u);
    EXPECT_FALSE(hit(same, r, "k", kT0 + 3));

    TestZone other(512 * 1024, {r.rule}, nullptr);
    ASSERT_EQ(restore(other, file, rules, kT0 + 2, &rep), RL_OK);
    EXPECT_EQ(rep.cells, 0u);
    EXPECT_GT(rep.cells_dropped, 0u);
    EXPECT_TABLE_VALID(other.table());
}

// Every truncation, every single damaged byte, and another version: the
// file is refused whole and the zone stays empty.
TEST(State, ADamagedOrTruncatedFileIsRefusedWhole)
{
    const Rule r("algorithm=sliding_log limit=3 period=1h name=r");
    TestZone z(64 * 1024, {r.rule}, kSecret);
    for (int k = 0; k < 20; k++) {
        hit(z, r, "k" + std::to_string(k), kT0);
    }
    const auto rules = state_rules({&r});
    const std::vector<uint8_t> file = write_file(z, rules, kT0);
    rl_state_report_t rep;
    for (size_t len = 0; len < file.size(); len++) {
        TestZone y(64 * 1024, {r.rule}, nullptr);
        const std::vector<uint8_t> cut(file.begin(), file.begin() + (long) len);
        ASSERT_EQ(restore(y, cut, rules, kT0, &rep), RL_ERROR) << len;
        ASSERT_EQ(y.stats().keys, 0u);
    }
    std::mt19937_64 rng(7);
    for (size_t i = 0; i < file.size(); i++) {
        std::vector<uint8_t> bad = file;
        bad[i] ^= (uint8_t) (1 + rng() % 255);
        TestZone y(64 * 1024, {r.rule}, nullptr);
        ASSERT_EQ(restore(y, bad, rules, kT0, &rep), RL_ERROR) << i;
        ASSERT_EQ(y.stats().keys, 0u);
    }
    std::vector<uint8_t> other = file;
    other[8] ^= 2;  // the format's version
    TestZone y(64 * 1024, {r.rule}, nullptr);
    char err[RL_ERR_MAX];
    EXPECT_EQ(
        rl_state_restore(y.mem, other.data(), other.size(), rules.data(), rules.size(), kT0, &rep, err, sizeof(err)),
        RL_ERROR);
    EXPECT_NE(std::strstr(err, "another version"), nullptr) << err;
    TestZone ok(64 * 1024, {r.rule}, nullptr);
    EXPECT_EQ(restore(ok, file, rules, kT0, &rep), RL_OK);
    EXPECT_EQ(rep.restored, 20u);
}

namespace {

// A file's 8-byte words, changed in place, and its checksum made again:
// what anyone who can write the state directory can write.
uint64_t word(const std::vector<uint8_t> &f, size_t i)
{
    uint64_t w;
    std::memcpy(&w, f.data() + 8 * i, 8);
    return w;
}
void set_word(std::vector<uint8_t> &f, size_t i, uint64_t w)
{
    std::memcpy(f.data() + 8 * i, &w, 8);
}
void reseal(std::vector<uint8_t> &f)
{
    set_word(f, f.size() / 8 - 1, rl_state_checksum(f.data(), f.size()));
}

// Each key record's first word: after the header (7 words) and the rules
// (identity, algorithm, name).
std::vector<size_t> key_records(const std::vector<uint8_t> &f)
{
    std::vector<size_t> at;
    for (size_t i = 7 + word(f, 6) * (2 + RL_NAME_MAX / 8); word(f, i) != 0; i += 3 + (word(f, i + 2) >> 48)) {
        at.push_back(i);
    }
    return at;
}

// The longest any request of the rule can be told to wait.
int64_t longest_wait(const rl_rule_t &r)
{
    return std::max({r.horizon_ms, r.ban_ms, int64_t{1000}});
}

}  // namespace

// A file written by a clock a day ahead of the one reading it (stepped back
// between the stop and the start): read as if written now.  A gcra key that
// had spent 1 of 5 still has 4; a key refused for 12 minutes still is, for
// 12 minutes; an hour's ban still lasts an hour, not a day and an hour.
TEST(State, AFileFromAClockAheadIsReadAsOfNow)
{
    const Rule r("algorithm=gcra limit=5 period=1h name=r");
    const Rule b("algorithm=gcra limit=1 period=1m ban=1h name=b");
    TestZone z(64 * 1024, {r.rule, b.rule}, kSecret);
    const int64_t ahead = kT0 + 24 * 3600 * 1000ll;
    EXPECT_TRUE(hit(z, r, "spent1", ahead));
    for (int i = 0; i < 5; i++) {
        EXPECT_TRUE(hit(z, r, "spent5", ahead));
    }
    EXPECT_TRUE(hit(z, b, "banned", ahead));
    EXPECT_FALSE(hit(z, b, "banned", ahead));  // and banned for an hour
    const auto rules = state_rules({&r, &b});
    const std::vector<uint8_t> file = write_file(z, rules, ahead + 1);

    TestZone y(64 * 1024, {r.rule, b.rule}, nullptr);
    rl_state_report_t rep;
    ASSERT_EQ(restore(y, file, rules, kT0, &rep), RL_OK);
    EXPECT_EQ(rep.ahead, 24 * 3600 * 1000ll + 1);
    EXPECT_EQ(rep.bounded, 0u);
    rl_decision_t d;
    EXPECT_TRUE(hit(y, r, "spent1", kT0, &d));
    EXPECT_EQ(d.remaining, 3u);  // 5, less the one spent, less this one
    EXPECT_FALSE(hit(y, r, "spent5", kT0, &d));
    EXPECT_EQ(d.retry_after_ms, 12 * 60000 - 1);  // the first unit back 12 min after it was spent
    EXPECT_FALSE(hit(y, b, "banned", kT0, &d));
    EXPECT_EQ(d.banned_ms, 3600 * 1000 - 1);
    EXPECT_TRUE(hit(y, r, "spent5", kT0 + 12 * 60000 - 1));
    EXPECT_TABLE_VALID(y.table());
}

// The same rule (name, algorithm) relaxed between the stop and the start,
// from 5 an hour to 1000 a second: a key spent under the old rule waits no
// longer than the new rule can make a key wait (its full burst: 1 s), in a
// zone alone (bounded as the file is read) and beside a rule of an hour's
// ban (bounded when a request of its rule first meets it).
TEST(State, ARuleRelaxedSinceBoundsWhatItsKeysOwe)
{
    const Rule hourly("algorithm=gcra limit=5 period=1h name=r");
    const Rule banning("algorithm=gcra limit=1 period=1s ban=1h name=b");
    TestZone z(64 * 1024, {hourly.rule, banning.rule}, kSecret);
    while (hit(z, hourly, "k", kT0)) {
    }
    const std::vector<uint8_t> file = write_file(z, state_rules({&hourly, &banning}), kT0);

    const Rule fast("algorithm=gcra limit=1000 period=1s name=r");
    ASSERT_EQ(fast.identity, hourly.identity);
    rl_state_report_t rep;
    TestZone alone(64 * 1024, {fast.rule}, nullptr);
    ASSERT_EQ(restore(alone, file, state_rules({&fast}), kT0 + 1, &rep), RL_OK);
    EXPECT_EQ(rep.bounded, 1u);
    rl_decision_t d;
    EXPECT_FALSE(hit(alone, fast, "k", kT0 + 1, &d));
    EXPECT_EQ(d.retry_after_ms, 1);
    EXPECT_TRUE(hit(alone, fast, "k", kT0 + 1 + 1000, &d));
    EXPECT_EQ(d.remaining, 999u);

    TestZone y(64 * 1024, {fast.rule, banning.rule}, nullptr);
    ASSERT_EQ(restore(y, file, state_rules({&fast, &banning}), kT0 + 1, &rep), RL_OK);
    EXPECT_EQ(rep.bounded, 0u);  // within the zone's longest: an hour's ban
    EXPECT_FALSE(hit(y, fast, "k", kT0 + 1, &d));
    EXPECT_EQ(d.retry_after_ms, 1);  // spent to its burst: a unit back each ms
    EXPECT_EQ(d.reset_ms, 1000);
    EXPECT_TRUE(hit(y, fast, "k", kT0 + 1 + 1000, &d));
    EXPECT_EQ(d.remaining, 999u);
}

// Files anyone able to write the state directory can write, checksum and
// all: every key's t and block made up.  No request of any algorithm is
// told to wait longer than its rule can make a key wait.
class StateForged : public ::testing::TestWithParam<const char *> {};

TEST_P(StateForged, NoKeyWaitsLongerThanItsRuleCanMakeItWait)
{
    const Rule r(GetParam());
    const int64_t most = longest_wait(r.rule);
    std::mt19937_64 rng(11);
    for (int round = 0; round < 20; round++) {
        TestZone z(256 * 1024, {r.rule}, kSecret);
        for (int k = 0; k < 30; k++) {
            for (int i = 0; i < 6; i++) {
                hit(z, r, "k" + std::to_string(k), kT0 + i);
            }
        }
        const auto rules = state_rules({&r});
        std::vector<uint8_t> file = write_file(z, rules, kT0 + 10);
        for (size_t at : key_records(file)) {
            // up to 2^38 ms ahead: below what reads as slots held
            set_word(file, at + 1, (uint64_t) (kT0 + 10) + (rng() >> 26));
            set_word(file, at + 2, (word(file, at + 2) & ~0xffffffffull) | (rng() & 0xffffffffull));
            const uint64_t words = word(file, at + 2) >> 48;
            if (words > 0) {
                // the block's first word (a log's base, a window's tick) ahead
                set_word(file, at + 3, word(file, at + 3) + (rng() >> (26 + round % 30)));
            }
            for (uint64_t w = 1; w < words && round % 2 == 1; w++) {
                set_word(file, at + 3 + w, rng());
            }
        }
        reseal(file);
        TestZone y(256 * 1024, {r.rule}, nullptr);
        rl_state_report_t rep;
        ASSERT_EQ(restore(y, file, rules, kT0 + 20, &rep), RL_OK);
        for (int k = 0; k < 30; k++) {
            rl_decision_t d;
            hit(y, r, "k" + std::to_string(k), kT0 + 20, &d);
            ASSERT_LE(d.retry_after_ms, most) << "k" << k << " round " << round;
            ASSERT_LE(d.reset_ms, most) << "k" << k << " round " << round;
        }
        EXPECT_TABLE_VALID(y.table());
    }
}

INSTANTIATE_TEST_SUITE_P(EveryAlgorithm, StateForged, ::testing::ValuesIn(kRules), RuleName());
