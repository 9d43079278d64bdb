// The key API's core: a key read as a request would find it, without
// spending; a reset that leaves the key fresh, also when the eviction
// summary says it owes; and the keys a rule refuses most (a Space-Saving
// summary over two epochs), exact for heavy keys, in fixed memory.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "helpers.h"
#include "table/table.h"

namespace {

const uint8_t kSecret[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};

struct Zone : TestZone {
    explicit Zone(size_t n, const std::vector<rl_rule_t> &rules = {}) : TestZone(n, rules, kSecret) {}
};

// A rule as a location holds it: its identity and its counters' slot.
struct Rule {
    rl_rule_t rule;
    uint64_t identity;
    int slot;
    Rule(Zone &z, const std::string &text)
        : rule(rule_of(text)), identity(identity_of(rule)), slot(rl_table_rule_slot(z.mem, rule.name))
    {
    }
};

struct Result {
    bool allowed;
    rl_decision_t d;
};

Result hit(Zone &z, const Rule &r, const std::string &key, int64_t now, uint64_t cost = 1, bool dry_run = false)
{
    rl_check_t c = check_of(z.mem, &r.rule, r.identity, key, cost, r.slot + 1);
    rl_request_t rq = hashed(request_of(&c, 1));
    rq.dry_run = dry_run;
    const int verdict = rl_decide(&rq, now);
    return Result{verdict != RL_VERDICT_REJECTED, c.decision};
}

uint64_t tag_of(Zone &z, const Rule &r, const std::string &key)
{
    return rl_table_tag(z.mem, r.identity, key.data(), key.size());
}

rl_peek_t peek(Zone &z, const Rule &r, const std::string &key, int64_t now)
{
    rl_peek_t p;
    rl_table_peek(z.mem, &r.rule, tag_of(z, r, key), 1, now, &p);
    return p;
}

rl_top_t top_of(Zone &z, const Rule &r, int64_t now)
{
    rl_top_t t;
    rl_table_top(z.mem, r.slot, now, &t);
    return t;
}

// A time at the start of an epoch of the top keys.
constexpr int64_t kEpoch0 = kT0 / RL_TOP_EPOCH_MS * RL_TOP_EPOCH_MS;

const char *const kRules[] = {
    "algorithm=gcra limit=5 period=1h",         "algorithm=token_bucket limit=5 period=1h burst=3",
    "algorithm=fixed_window limit=5 period=1h", "algorithm=sliding_window limit=5 period=1h buckets=10",
    "algorithm=sliding_log limit=5 period=1h",  "algorithm=leaky_bucket limit=5 period=1h max_delay=1h",
    "algorithm=quota limit=5 reset=daily",
};

class Keys : public ::testing::TestWithParam<const char *> {};

}  // namespace

// A look tells what a request would be told, and changes nothing: the
// request after it is decided as if nobody had looked.
TEST_P(Keys, PeekShowsWhatTheNextRequestIsToldAndSpendsNothing)
{
    Zone z(256 * 1024, {rule_of(GetParam())}), twin(256 * 1024, {rule_of(GetParam())});
    Rule r(z, GetParam()), rt(twin, GetParam());
    int64_t now = kT0 + 5000;

    rl_peek_t p = peek(z, r, "k", now);
    EXPECT_EQ(p.held, 0);
    EXPECT_EQ(p.owed, 0);
    EXPECT_GE(p.look.remaining, 3u);
    EXPECT_EQ(p.next.allowed, 1);

    for (int i = 0; i < 12; i++, now += 7) {
        p = peek(z, r, "k", now);
        const Result a = hit(z, r, "k", now), b = hit(twin, rt, "k", now);
        ASSERT_EQ(a.allowed, b.allowed) << i;
        ASSERT_EQ(a.d.remaining, b.d.remaining) << i;
        ASSERT_EQ(a.d.retry_after_ms, b.d.retry_after_ms) << i;
        // the look, before it: the request's own decision
        EXPECT_EQ((bool) p.next.allowed, a.allowed) << i;
        EXPECT_EQ(p.next.retry_after_ms, a.d.retry_after_ms) << i;
        EXPECT_EQ(p.next.delay_ms, a.d.delay_ms) << i;
        if (!a.allowed) {
            EXPECT_EQ(p.look.remaining, a.d.remaining) << i;  // a refusal leaves it unchanged
        }
    }
    p = peek(z, r, "k", now);
    EXPECT_EQ(p.held, 1);
    EXPECT_EQ(p.next.allowed, 0);
    EXPECT_GT(p.next.retry_after_ms, 0);
    EXPECT_GT(p.look.reset_ms, 0);
}

// Reset, and the key is fresh: its next request is admitted with its whole
// budget, as a key never seen.
TEST_P(Keys, ResetMakesASpentKeyFresh)
{
    Zone z(256 * 1024, {rule_of(GetParam())});
    Rule r(z, GetParam());
    const int64_t now = kT0 + 5000;
    while (hit(z, r, "k", now).allowed) {
    }
    const uint64_t keys = z.stats().keys;
    EXPECT_EQ(rl_table_reset(z.mem, tag_of(z, r, "k"), now + 1), RL_RESET_HELD);
    EXPECT_EQ(z.stats().keys, keys - 1);
    EXPECT_EQ(z.stats().evictions, 0u);  // a reset is no eviction
    EXPECT_TABLE_VALID(z.table());
    const rl_peek_t p = peek(z, r, "k", now + 1), fresh = peek(z, r, "never seen", now + 1);
    EXPECT_EQ(p.held + p.owed, 0);
    EXPECT_EQ(p.look.remaining, fresh.look.remaining);
    EXPECT_EQ(p.look.reset_ms, fresh.look.reset_ms);
    // its next request is told what a key never seen is told
    const Result a = hit(z, r, "k", now + 1), b = hit(z, r, "never seen", now + 1);
    EXPECT_TRUE(a.allowed);
    EXPECT_EQ(a.d.delay_ms, 0);
    EXPECT_EQ(a.d.remaining, b.d.remaining);
    EXPECT_EQ(a.d.reset_ms, b.d.reset_ms);
    EXPECT_EQ(rl_table_reset(z.mem, tag_of(z, r, "k"), now + 1), RL_RESET_HELD);
    EXPECT_EQ(rl_table_reset(z.mem, tag_of(z, r, "not seen"), now), 0);
}

// A key evicted while it owed comes back refused (the summary); a reset
// clears what the summary says it owes.
TEST_P(Keys, ResetForgivesWhatTheSummaryKeepsOfAnEvictedKey)
{
    Zone z(256 * 1024, {rule_of(GetParam())});
    Rule r(z, GetParam());
    const int64_t now = kT0 + 5000;
    while (hit(z, r, "k", now).allowed) {
    }
    z.table()->evict(tag_of(z, r, "k"), now);
    rl_peek_t p = peek(z, r, "k", now + 1);
    EXPECT_EQ(p.held, 0);
    EXPECT_EQ(p.owed, 1);
    EXPECT_EQ(p.next.allowed, 0);
    EXPECT_EQ(rl_table_reset(z.mem, tag_of(z, r, "k"), now + 1), RL_RESET_FORGIVEN);
    EXPECT_TABLE_VALID(z.table());
    p = peek(z, r, "k", now + 1);
    EXPECT_EQ(p.owed, 0);
    EXPECT_TRUE(hit(z, r, "k", now + 1).allowed);
}

INSTANTIATE_TEST_SUITE_P(EveryAlgorithm, Keys, ::testing::ValuesIn(kRules), RuleName());

// An innocent key whose three cells all hold others' debts starts refused;
// a reset frees it, and only the cell whose debts end first is cleared.
TEST(KeyReset, ClearsOneCellOfAKeyOwingOthersDebts)
{
    Zone z(64 * 1024);
    Rule r(z, "algorithm=gcra limit=5 period=1h");
    const int64_t now = kT0 + 5000;
    // spent keys, evicted, until some never-seen key owes in all its cells
    std::string innocent;
    for (int i = 0; innocent.empty(); i++) {
        const std::string k = "spent" + std::to_string(i);
        while (hit(z, r, k, now).allowed) {
        }
        z.table()->evict(tag_of(z, r, k), now);
        for (int j = 0; j < 200 && innocent.empty(); j++) {
            const std::string n = "new" + std::to_string(j);
            if (peek(z, r, n, now).owed) {
                innocent = n;
            }
        }
        ASSERT_LT(i, 100000);
    }
    const std::vector<uint64_t> before(
        reinterpret_cast<uint64_t *>(static_cast<char *>(z.mem) + z.table()->layout().sketch_offset),
        reinterpret_cast<uint64_t *>(static_cast<char *>(z.mem) + z.table()->layout().sketch_offset) +
            z.table()->layout().ncells);
    EXPECT_FALSE(hit(z, r, innocent, now + 1).allowed);
    EXPECT_EQ(rl_table_reset(z.mem, tag_of(z, r, innocent), now + 1), RL_RESET_FORGIVEN);
    const uint64_t *after =
        reinterpret_cast<uint64_t *>(static_cast<char *>(z.mem) + z.table()->layout().sketch_offset);
    size_t changed = 0;
    for (size_t i = 0; i < before.size(); i++) {
        changed += before[i] != after[i];
        EXPECT_TRUE(after[i] == before[i] || after[i] == 0) << "cell " << i;  // nobody owes more
    }
    EXPECT_EQ(changed, 1u);
    EXPECT_TRUE(hit(z, r, innocent, now + 1).allowed);
}

// Three keys refused 600, 300 and 100 times, then 1,000
// other keys once each: the three on top, in that order, with exactly
// those counts.
TEST(TopKeys, HeavyKeysOnTopWithExactCounts)
{
    Zone z(1 << 20);
    Rule r(z, "algorithm=gcra limit=1 period=1h name=per_key");
    const int64_t now = kEpoch0 + 1000;
    const std::pair<const char *, int> heavy[] = {{"heavy-a", 600}, {"heavy-b", 300}, {"heavy-c", 100}};
    for (auto &[key, n] : heavy) {
        for (int i = 0; i < n; i++) {
            ASSERT_FALSE(hit(z, r, key, now, 2).allowed);  // a cost beyond the burst: refused
        }
    }
    for (int i = 0; i < 1000; i++) {
        ASSERT_FALSE(hit(z, r, "light" + std::to_string(i), now, 2).allowed);
    }
    const rl_top_t t = top_of(z, r, now + 1);
    EXPECT_EQ(t.state, RL_TOP_KEPT);
    EXPECT_EQ(t.refusals, 2000u);
    EXPECT_EQ(t.keys, 0);
    ASSERT_EQ(t.n, (size_t) RL_TOP_ENTRIES);
    for (int i = 0; i < 3; i++) {
        EXPECT_EQ(t.top[i].tag, tag_of(z, r, heavy[i].first)) << i;
        EXPECT_EQ(t.top[i].refused, (uint64_t) heavy[i].second) << i;
        EXPECT_EQ(t.top[i].error, 0u) << i;
        EXPECT_EQ(t.top[i].key_len, 0u);  // the rule does not log keys in clear
    }
    EXPECT_LT(t.top[3].refused, 100u);
    for (size_t i = 3; i < t.n; i++) {
        EXPECT_LE(t.top[i].refused - t.top[i].error, 1u);  // each light key refused once
    }
}

// A flood of 100,000 distinct refused keys: the memory is what it is after
// the first refusal, and a key refused more often than (all refusals /
// entries) is listed, whatever the flood around it.
TEST(TopKeys, FloodKeepsMemoryFixedAndEveryHeavyKeyListed)
{
    Zone z(1 << 20);
    Rule r(z, "algorithm=gcra limit=1 period=1h name=flooded");
    const int64_t now = kEpoch0 + 1000;
    ASSERT_FALSE(hit(z, r, "first", now, 2).allowed);
    const uint64_t top_used = z.table()->layout().top_used, used = rl_table_bytes_used(z.mem);
    std::mt19937_64 rng(7);
    uint64_t heavy = 0;
    const uint64_t n = 100000;
    for (uint64_t i = 0; i < n; i++) {
        if (rng() % 25 == 0) {  // about 4% of the refusals: more than 1/32
            ASSERT_FALSE(hit(z, r, "heavy", now, 2).allowed);
            heavy++;
        }
        ASSERT_FALSE(hit(z, r, "flood" + std::to_string(i), now, 2).allowed);
    }
    EXPECT_EQ(z.table()->layout().top_used, top_used);
    EXPECT_EQ(rl_table_bytes_used(z.mem), used + 0);  // refused keys take no slot either
    const rl_top_t t = top_of(z, r, now);
    EXPECT_EQ(t.refusals, n + heavy + 1);
    ASSERT_GT(heavy * RL_TOP_ENTRIES, t.refusals);
    ASSERT_GE(t.n, 1u);
    EXPECT_EQ(t.top[0].tag, tag_of(z, r, "heavy"));
    EXPECT_GE(t.top[0].refused, heavy);
    EXPECT_LE(t.top[0].refused - t.top[0].error, heavy);
    EXPECT_TABLE_VALID(z.table());
}

// The guarantee, against exact counts, over random skewed streams that
// cross epochs: every key refused more than refusals / RL_TOP_ENTRIES times
// in the window is listed; a listed key's count less its error is at most
// its refusals; a key in one epoch only is counted at least its refusals.
TEST(TopKeys, SpaceSavingGuaranteeOverTwoEpochs)
{
    std::mt19937_64 rng(11);
    for (int round = 0; round < 20; round++) {
        Zone z(1 << 20);
        Rule r(z, "algorithm=gcra limit=1 period=1h name=zipf");
        std::map<uint64_t, std::map<int64_t, uint64_t>> truth;  // tag -> epoch -> refusals
        int64_t now = kEpoch0 + (int64_t) (rng() % RL_TOP_EPOCH_MS);
        const int keys = 50 + (int) (rng() % 500);
        for (int i = 0; i < 5000; i++) {
            now += (int64_t) (rng() % 60);  // about five epochs a round
            // a skewed choice: key k with weight 1/(k+1)
            const double u = std::uniform_real_distribution<double>(0, 1)(rng);
            const int k = (int) (std::pow((double) keys + 1, u)) - 1;
            const std::string key = "z" + std::to_string(k);
            ASSERT_FALSE(hit(z, r, key, now, 2).allowed);
            truth[tag_of(z, r, key)][now / RL_TOP_EPOCH_MS]++;
        }
        const rl_top_t t = top_of(z, r, now);
        const int64_t e = now / RL_TOP_EPOCH_MS;
        uint64_t total = 0;
        for (auto &[tag, by] : truth) {
            total += (by.count(e) ? by.at(e) : 0) + (by.count(e - 1) ? by.at(e - 1) : 0);
        }
        EXPECT_EQ(t.refusals, total) << round;
        for (auto &[tag, by] : truth) {
            const uint64_t cur = by.count(e) ? by.at(e) : 0, prev = by.count(e - 1) ? by.at(e - 1) : 0;
            const rl_top_key_t *listed = nullptr;
            for (size_t i = 0; i < t.n; i++) {
                if (t.top[i].tag == tag) {
                    listed = &t.top[i];
                }
            }
            if ((cur + prev) * RL_TOP_ENTRIES > total) {
                ASSERT_NE(listed, nullptr) << "round " << round << ": a key refused " << cur + prev << " of " << total;
            }
            if (listed != nullptr) {
                EXPECT_LE(listed->refused - listed->error, cur + prev) << round;
                if (cur == 0 || prev == 0) {
                    EXPECT_GE(listed->refused, cur + prev) << round;
                }
            }
        }
        for (size_t i = 1; i < t.n; i++) {
            EXPECT_GE(t.top[i - 1].refused, t.top[i].refused);
        }
    }
}

// Recent: an epoch's refusals are shown during it and the next, then gone;
// counts split by a boundary add up.
TEST(TopKeys, TheWindowIsTheCurrentEpochAndTheOneBefore)
{
    Zone z(1 << 20);
    Rule r(z, "algorithm=gcra limit=1 period=1h name=w");
    const int64_t e0 = kEpoch0;
    for (int i = 0; i < 3; i++) {
        hit(z, r, "k", e0 + RL_TOP_EPOCH_MS - 1, 2);
    }
    for (int i = 0; i < 4; i++) {
        hit(z, r, "k", e0 + RL_TOP_EPOCH_MS, 2);
    }
    rl_top_t t = top_of(z, r, e0 + RL_TOP_EPOCH_MS);
    ASSERT_EQ(t.n, 1u);
    EXPECT_EQ(t.top[0].refused, 7u);
    EXPECT_EQ(t.since_ms, e0);
    t = top_of(z, r, e0 + 2 * RL_TOP_EPOCH_MS);
    ASSERT_EQ(t.n, 1u);
    EXPECT_EQ(t.top[0].refused, 4u);  // the first epoch has gone by
    t = top_of(z, r, e0 + 3 * RL_TOP_EPOCH_MS);
    EXPECT_EQ(t.n, 0u);
    EXPECT_EQ(t.refusals, 0u);
    EXPECT_EQ(t.state, RL_TOP_KEPT);
    hit(z, r, "k", e0 + 3 * RL_TOP_EPOCH_MS, 2);  // a new epoch in an old half
    t = top_of(z, r, e0 + 3 * RL_TOP_EPOCH_MS);
    ASSERT_EQ(t.n, 1u);
    EXPECT_EQ(t.top[0].refused, 1u);
}

// Keys in clear only for a rule that logs them so, cut after RL_TOP_KEY_MAX
// bytes; a dry run's refusals count; a reset takes the key off the list and
// keeps its refusals counted.
TEST(TopKeys, ClearKeysDryRunsAndResets)
{
    Zone z(1 << 20);
    Rule clear(z, "algorithm=gcra limit=1 period=1h name=clear log_key=on");
    Rule fp(z, "algorithm=gcra limit=1 period=1h name=fp");
    const int64_t now = kEpoch0 + 10;
    const std::string longkey(40, 'x');
    hit(z, clear, "alice", now, 2);
    hit(z, clear, "alice", now, 2);
    hit(z, clear, longkey, now, 2);
    hit(z, fp, "bob", now, 2, true);  // dry run
    rl_top_t t = top_of(z, clear, now);
    EXPECT_EQ(t.keys, 1);
    ASSERT_EQ(t.n, 2u);
    EXPECT_EQ(std::string((const char *) t.top[0].key, t.top[0].key_len), "alice");
    EXPECT_EQ(t.top[0].key_cut, 0u);
    EXPECT_EQ(t.top[1].key_len, (uint32_t) RL_TOP_KEY_MAX);
    EXPECT_EQ(t.top[1].key_cut, 1u);
    t = top_of(z, fp, now);
    EXPECT_EQ(t.keys, 0);
    ASSERT_EQ(t.n, 1u);
    EXPECT_EQ(t.top[0].tag, tag_of(z, fp, "bob"));

    rl_table_reset(z.mem, tag_of(z, clear, "alice"), now);
    t = top_of(z, clear, now);
    ASSERT_EQ(t.n, 1u);
    EXPECT_EQ(t.top[0].key_len, (uint32_t) RL_TOP_KEY_MAX);
    EXPECT_EQ(t.refusals, 3u);
    hit(z, clear, "alice", now, 2);
    t = top_of(z, clear, now);
    EXPECT_EQ(t.refusals, 4u);
    ASSERT_EQ(t.n, 2u);
    const rl_top_key_t &again = t.top[t.top[0].tag == tag_of(z, clear, "alice") ? 0 : 1];
    EXPECT_EQ(std::string((const char *) again.key, again.key_len), "alice");
    EXPECT_EQ(again.refused, 1u);  // its refusals since the reset
}

// The room for top keys is a share of the zone: the smallest zone has room
// for one rule; the next rule refusing finds none, and says so.
TEST(TopKeys, ASmallZoneHasRoomForOneRule)
{
    Zone z(32 * 1024);
    Rule a(z, "algorithm=gcra limit=1 period=1h name=a log_key=on"), b(z, "algorithm=gcra limit=1 period=1h name=b");
    const int64_t now = kEpoch0 + 10;
    EXPECT_EQ(top_of(z, a, now).state, RL_TOP_NONE);
    hit(z, a, "k", now, 2);
    hit(z, b, "k", now, 2);
    rl_top_t t = top_of(z, a, now);
    EXPECT_EQ(t.state, RL_TOP_KEPT);
    EXPECT_EQ(t.keys, 0);  // no room for its keys in clear
    EXPECT_EQ(t.n, 1u);
    EXPECT_EQ(top_of(z, b, now).state, RL_TOP_NO_ROOM);
    EXPECT_TABLE_VALID(z.table());
    // the rules counted here, for a 1 MB zone: fingerprints or clear keys
    Zone big(1 << 20);
    EXPECT_GE(big.table()->layout().top_bytes / rl::TopList::bytes(false), 7u);
    EXPECT_GE(big.table()->layout().top_bytes / rl::TopList::bytes(true), 2u);
}
