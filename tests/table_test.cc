// The shared-memory key table: hashing, lookups, cuckoo moves, eviction
// order, and the density figure.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <unordered_set>
#include <vector>

#include "helpers.h"
#include "table/table.h"
#include "util/siphash.h"

namespace {

using Block = TestZone;

const uint8_t kSecret[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

}  // namespace

TEST(SipHash, ReferenceVectors)
{
    // Appendix A of the SipHash paper: key 00..0f, message 00..(len-1).
    uint8_t key[16], msg[64];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t) i;
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t) i;
    struct {
        size_t len;
        uint64_t out;
    } v[] = {{0, 0x726fdb47dd0e0e31ull}, {1, 0x74f839c593dc67fdull},  {7, 0xab0200f58b01d137ull},
             {8, 0x93f5f5799a932462ull}, {15, 0xa129ca6149be45e5ull}, {63, 0x958a324ceb064572ull}};
    for (auto &e : v) {
        rl::SipHash h(key);
        h.update(msg, e.len);
        EXPECT_EQ(h.finish(), e.out) << "len " << e.len;
        // the same message fed in pieces
        rl::SipHash p(key);
        for (size_t i = 0; i < e.len; i++)
            p.update(msg + i, 1);
        EXPECT_EQ(p.finish(), e.out) << "len " << e.len << " bytewise";
    }
}

TEST(SipHash, OneThreeReferenceVectors)
{
    // SipHash-1-3 (a table's tags) of "" and "siphash" under the zero key,
    // as other SipHash-1-3 implementations give them (printed big-endian)
    const uint8_t zero[16] = {};
    rl::SipHash13 e(zero), s(zero);
    s.update("siphash", 7);
    EXPECT_EQ(e.finish(), 0xd1fba762150c532cull);
    EXPECT_EQ(s.finish(), 0x8264ceeccb16bcbeull);
}

template <typename H> void expect_bytes_as_streamed()
{
    // a key's hash, in one call, is the streamed hash of the same message,
    // whatever the key's length (every tail, several words)
    uint8_t msg[80];
    for (int i = 0; i < 80; i++)
        msg[i] = (uint8_t) (i * 37 + 11);
    for (size_t len = 0; len <= 72; len++) {
        H h(kSecret);
        h.update(msg + 3, len);
        EXPECT_EQ(H::bytes(kSecret, msg + 3, len), h.finish()) << "len " << len;
    }
}

TEST(SipHash, BytesAsStreamed)
{
    expect_bytes_as_streamed<rl::SipHash>();
    expect_bytes_as_streamed<rl::SipHash13>();
}

TEST(Table, SameKeyHashesDifferentlyInTwoZones)
{
    Block a(64 * 1024), b(64 * 1024);  // two random secrets
    EXPECT_NE(a.table()->tag(1, "10.0.0.1", 8), b.table()->tag(1, "10.0.0.1", 8));
    EXPECT_EQ(a.table()->tag(1, "10.0.0.1", 8), a.table()->tag(1, "10.0.0.1", 8));
    EXPECT_NE(a.table()->tag(1, "10.0.0.1", 8), a.table()->tag(2, "10.0.0.1", 8));
    EXPECT_NE(memcmp(a.table()->layout().secret, b.table()->layout().secret, 16), 0);
}

// A rule's tag is made of the key's hash (once a request per zone) and the
// rule's identity by a bijection: one key's tags under many rules, and many
// keys' tags under two rules, all differ.
TEST(Table, TagsOfOneKeyHashAndEachRule)
{
    Block b(64 * 1024, kSecret);
    const rl::Table *t = b.table();
    EXPECT_EQ(t->tag(7, "k", 1), rl::Table::of_hash(t->hash("k", 1), 7));
    std::unordered_set<uint64_t> seen;
    for (uint64_t identity = 1; identity <= 1000; identity++) {
        seen.insert(t->tag(identity * 0x9e3779b97f4a7c15ull, "k", 1));
    }
    EXPECT_EQ(seen.size(), 1000u);
    seen.clear();
    for (uint64_t i = 0; i < 100000; i++) {
        seen.insert(t->tag(1, &i, sizeof(i)));
        seen.insert(t->tag(2, &i, sizeof(i)));
    }
    EXPECT_EQ(seen.size(), 200000u);
}

TEST(Table, KeysOfAnyLengthCostOneSlot)
{
    Block b(64 * 1024, kSecret);
    std::string big(1 << 20, 'x');
    uint64_t t1 = b.table()->tag(1, big.data(), big.size());
    uint64_t t0 = b.table()->tag(1, "", 0);
    b.table()->store(t1, {kT0 + 5, 1}, rl::Debt{1, false}, kT0);
    b.table()->store(t0, {kT0 + 6, 2}, rl::Debt{1, false}, kT0);
    rl::State s;
    ASSERT_TRUE(b.table()->find(t1, &s));
    EXPECT_EQ(s.head.t, kT0 + 5);
    ASSERT_TRUE(b.table()->find(t0, &s));
    EXPECT_EQ(s.head.n, 2u);
    EXPECT_EQ(s.blob, nullptr);
    EXPECT_EQ(b.stats().keys, 2u);
}

TEST(Table, ValidAfterInitOnlyForTheSameSize)
{
    Block b(64 * 1024);
    EXPECT_TRUE(rl_table_valid(b.mem, b.size, nullptr, 0));
    EXPECT_FALSE(rl_table_valid(b.mem, b.size - 64, nullptr, 0));
    const uint32_t blob = 52;
    EXPECT_FALSE(rl_table_valid(b.mem, b.size, &blob, 1));  // another layout
    memset(b.mem, 0, 64);
    EXPECT_FALSE(rl_table_valid(b.mem, b.size, nullptr, 0));
}

TEST(Table, CuckooMovesKeepEveryStateWithItsKey)
{
    // A small table filled to 90%: many keys share buckets and get moved to
    // their other bucket; each must still find exactly its own state.
    Block b(rl_table_min_size() * 4, kSecret);
    const uint64_t cap = b.stats().capacity;
    std::map<uint64_t, rl_state_t> want;
    for (uint64_t i = 0; want.size() < cap * 9 / 10; i++) {
        uint64_t tag = b.table()->tag(7, &i, sizeof(i));
        rl_state_t s{kT0 + 1000000 + (int64_t) i, (uint32_t) i};
        b.table()->store(tag, s, rl::Debt{1, false}, kT0);
        EXPECT_TABLE_VALID(b.table());
        want[tag] = s;
    }
    EXPECT_EQ(b.stats().live_evictions, 0u);
    EXPECT_EQ(b.stats().keys, want.size());
    for (auto &[tag, s] : want) {
        rl::State got;
        ASSERT_TRUE(b.table()->find(tag, &got));
        EXPECT_EQ(got.head.t, s.t);
        EXPECT_EQ(got.head.n, s.n);
    }
}

TEST(Table, FullTableEvictsKeysBackAtFullBudgetFirst)
{
    Block b(rl_table_min_size(), kSecret);
    const uint64_t cap = b.stats().capacity;
    // Fill every slot we can with keys whose budget is already full again.
    for (uint64_t i = 0; i < cap * 4; i++) {
        b.table()->store(b.table()->tag(1, &i, sizeof(i)), {kT0 - 1, 0}, rl::Debt{1, false}, kT0);
    }
    rl_table_stats_t st = b.stats();
    EXPECT_EQ(st.live_evictions, 0u);
    EXPECT_EQ(st.keys, cap);
    EXPECT_EQ(st.evictions, cap * 4 - cap);  // every later key took an expired one's slot
}

TEST(Table, LiveEvictionTakesTheCandidateBackToFullBudgetSoonest)
{
    Block b(rl_table_min_size(), kSecret);
    rl::Table *t = b.table();
    std::mt19937_64 rng(3);
    std::map<uint64_t, int64_t> expiry;
    uint64_t i = 0;
    while (b.stats().live_evictions == 0) {
        uint64_t tag = t->tag(1, &i, sizeof(i));
        int64_t until = kT0 + 1000 + (int64_t) (rng() % 100000);
        t->store(tag, {until, 0}, rl::Debt{1, false}, kT0);
        EXPECT_TABLE_VALID(t);
        expiry[tag] = until;
        i++;
    }
    // Exactly one key is gone: the one the last insert displaced, the
    // soonest to expire of the six slots of the new key's two buckets.
    uint64_t last = t->tag(1, &(i = i - 1), sizeof(i)), gone = 0;
    int missing = 0;
    for (auto &[tag, until] : expiry) {
        if (t->bucket_of(tag) < 0) {
            gone = tag;
            missing++;
        }
    }
    ASSERT_EQ(missing, 1);
    int others = 0;
    for (auto &[tag, until] : expiry) {
        int64_t at = t->bucket_of(tag);
        if (tag != last && (at == t->first(last) || at == t->second(last))) {
            EXPECT_GE(until, expiry[gone]);
            others++;
        }
    }
    EXPECT_EQ(others, t->first(last) == t->second(last) ? 2 : 5);
    EXPECT_GT(b.stats().keys, b.stats().capacity * 8 / 10);
}

TEST(Table, DensityKeysPerMegabyteBeforeTheFirstLiveEviction)
{
    // 1 MiB, every key live for an hour: how many distinct keys fit before
    // one that still holds state must go.  nginx's limit_req keeps ~8,000.
    // The count depends on the secret (where keys fall): over 40 of them.
    const size_t mb = 1 << 20;
    const int secrets = 40;
    uint64_t least = UINT64_MAX, most = 0, sum = 0, capacity = 0;
    for (int r = 0; r < secrets; r++) {
        uint8_t secret[16];
        for (int k = 0; k < 16; k++) {
            secret[k] = (uint8_t) (r * 31 + k * 7 + 1);
        }
        Block b(mb, secret);
        uint64_t i = 0;
        while (b.stats().live_evictions == 0) {
            b.table()->store(b.table()->tag(1, &i, sizeof(i)), {kT0 + 3600000, 1}, rl::Debt{1, false}, kT0);
            i++;
        }
        const uint64_t held = i - 1;
        least = std::min(least, held);
        most = std::max(most, held);
        sum += held;
        capacity = b.stats().capacity;
    }
    const double mean = (double) sum / secrets;
    std::printf("[ density ] 1 MiB holds %.0f live GCRA keys before the first live eviction, mean of %d secrets "
                "(%llu to %llu; %.1f%% of %llu slots; %.1f bytes a key)\n",
                mean, secrets, (unsigned long long) least, (unsigned long long) most, 100.0 * mean / (double) capacity,
                (unsigned long long) capacity, (double) mb / mean);
    EXPECT_GE(least, 32000u);
}

// ---- blocks for the larger states ----------------------------------------

namespace {

// A table with blocks of these sizes.
struct BlobBlock : TestZone {
    BlobBlock(size_t n, std::vector<uint32_t> blocks) : TestZone(n, BlockSizes{std::move(blocks)}, kSecret) {}
};

}  // namespace

TEST(TableBlocks, LayoutGivesBucketsAThirdAndPoolsTheRest)
{
    BlobBlock b(1 << 20, {52, 416, 52});
    const rl::TableLayout &h = b.table()->layout();
    EXPECT_EQ(h.npools, 2u);  // 52 twice is one pool
    EXPECT_EQ(h.pools[0].block_size, 64u);
    EXPECT_EQ(h.pools[1].block_size, 432u);
    // a 1/50 goes to the summary, a 1/128 out of the buckets' third to the top keys
    EXPECT_NEAR((double) h.nbuckets * 64,
                ((1 << 20) - rl::Table::layout_bytes(RL_RULE_STATS_MAX)) * 49 / 50 / 3.0 - (1 << 20) / 128.0, 4096);
    EXPECT_EQ(h.ncells * 8, ((1 << 20) - rl::Table::layout_bytes(RL_RULE_STATS_MAX)) / 50 / 64 * 64);
    EXPECT_EQ(b.table()->pool_for(52), 0);
    EXPECT_EQ(b.table()->pool_for(416), 1);
    EXPECT_EQ(b.table()->pool_for(100), -1);
    // the same sizes in another order make the same layout
    const uint32_t other[] = {416, 52};
    EXPECT_TRUE(rl_table_valid(b.mem, b.size, other, 2));
    char err[RL_ERR_MAX];
    const uint32_t huge = 40016;
    EXPECT_EQ(rl_table_plan(64 * 1024, &huge, 1, err, sizeof(err)), RL_ERROR);
    EXPECT_STREQ(err, "too small for its rules' states of up to 40032 bytes a key: it needs at least 263k");
    EXPECT_EQ(rl_table_plan(262 * 1024, &huge, 1, err, sizeof(err)), RL_OK);  // the size it names is enough
}

// The stack a zone's locations make where a rule keeps a block.
TEST(TableBlocks, StackOfTheLocations)
{
    EXPECT_EQ(rl_table_stack(0, 0), 0u);  // no rule with a block
    EXPECT_EQ(rl_table_stack(5, 0), 0u);
    EXPECT_EQ(rl_table_stack(1, 1), 16u);  // a window alone
    EXPECT_EQ(rl_table_stack(3, 1), 48u);  // gcra, sliding_window, quota
    EXPECT_EQ(rl_table_stack(4, 3), 21u);  // 1 1/3 slot a block
    EXPECT_EQ(rl_table_stack(64, 1), 1024u);
    EXPECT_EQ(rl_table_stack(100000, 1), 1024u);
}

// Buckets and pools share the room so that the slots and the blocks a
// stack takes run out together: a key with a block of 64 bytes and three
// slots (of 24 bytes at the fill a table reaches) gets 72 / 136 of the room
// in buckets; a third at least (a window alone), two thirds at most.  A
// table keeps the stack it was laid out for; one that would leave a pool
// too few blocks is laid out as without it.
TEST(TableBlocks, BucketsFollowTheStack)
{
    auto capacity = [](size_t size, uint32_t blob, uint32_t slots16) {
        TestZone z(size, BlockSizes{{blob}, slots16}, kSecret);
        // its own stack, whatever a reload's configuration stacks now
        EXPECT_TRUE(rl_table_valid(z.mem, z.size, &blob, 1));
        return std::make_pair(z.stats().capacity, (uint64_t) z.table()->layout().pools[0].blocks);
    };
    const uint32_t window = 56;  // in a block of 64 bytes
    const auto none = capacity(1 << 20, window, 0), alone = capacity(1 << 20, window, 16);
    const auto three = capacity(1 << 20, window, 48), most = capacity(1 << 20, window, 1024);
    EXPECT_EQ(alone, none);  // 24 / 88 of the room: a third
    const double share = (double) three.first / 3 * 64 / ((double) three.first / 3 * 64 + (double) three.second * 64);
    EXPECT_NEAR(share, 72.0 / 136, 0.02) << three.first << " slots, " << three.second << " blocks";
    EXPECT_GT(three.first, none.first * 3 / 2);
    EXPECT_LT(three.second, none.second);
    const double most_share = (double) most.first / 3 * 64 / ((double) most.first / 3 * 64 + (double) most.second * 64);
    EXPECT_NEAR(most_share, 2.0 / 3, 0.02);
    // a zone just large enough for its pool's least blocks at a third
    const uint32_t huge = 40016;
    EXPECT_EQ(capacity(259 * 1024, huge, 1024), capacity(259 * 1024, huge, 0));
}

TEST(TableBlocks, AcquireGivesAZeroedBlockThatFindReturns)
{
    BlobBlock b(256 * 1024, {52});
    rl::Table *t = b.table();
    const uint64_t tag = t->tag(1, "k", 1);
    rl::State s = t->acquire(tag, 0, kT0);
    ASSERT_NE(s.blob, nullptr);
    for (int i = 0; i < 52; i++)
        ASSERT_EQ(s.blob[i], 0);
    s.blob[0] = 42;
    t->set_t(tag, kT0 + 1000, rl::Debt{1, false});
    rl::State f;
    ASSERT_TRUE(t->find(tag, &f));
    EXPECT_EQ(f.blob, s.blob);
    EXPECT_EQ(f.blob[0], 42);
    EXPECT_EQ(f.head.t, kT0 + 1000);
    EXPECT_EQ(t->acquire(tag, 0, kT0).blob, s.blob);  // the same block again
    EXPECT_EQ(b.stats().blocks_used, 1u);
}

TEST(TableBlocks, FullPoolEvictsABlockOfAKeyBackAtFullBudgetFirst)
{
    BlobBlock b(64 * 1024, {400});
    rl::Table *t = b.table();
    const uint64_t blocks = b.stats().blocks;
    std::vector<uint64_t> tags;
    for (uint64_t i = 0; i < blocks; i++) {
        tags.push_back(t->tag(1, &i, sizeof(i)));
        t->acquire(tags.back(), 0, kT0);
        t->set_t(tags.back(), i == 5 ? kT0 - 1 : kT0 + 100000, rl::Debt{1, false});  // key 5 is back to full budget
    }
    EXPECT_EQ(b.stats().blocks_used, blocks);
    uint64_t extra = 999999;
    t->acquire(t->tag(1, &extra, sizeof(extra)), 0, kT0);
    rl::State s;
    EXPECT_FALSE(t->find(tags[5], &s));  // its key went with its block
    EXPECT_EQ(b.stats().live_evictions, 0u);
    EXPECT_EQ(b.stats().evictions, 1u);
    uint64_t more = 1000000;
    t->acquire(t->tag(1, &more, sizeof(more)), 0, kT0);
    EXPECT_EQ(b.stats().live_evictions, 1u);  // no expired one left: a live one goes
    EXPECT_EQ(b.stats().blocks_used, blocks);
    EXPECT_EQ(b.stats().keys, blocks);
}

TEST(TableBlocks, EvictedSlotsFreeTheirBlocksAndMovesKeepThem)
{
    // Many keys with blocks and without in a small table: slots are moved
    // by cuckoo and evicted; every key found keeps its own block contents.
    BlobBlock b(64 * 1024, {8});
    rl::Table *t = b.table();
    std::map<uint64_t, uint64_t> owner_of;
    for (uint64_t i = 0; i < 20000; i++) {
        const uint64_t tag = t->tag(2, &i, sizeof(i));
        if (i % 2) {
            rl::State s = t->acquire(tag, 0, kT0);
            std::memcpy(s.blob, &i, sizeof(i));
            t->set_t(tag, kT0 + 1 + (int64_t) (i % 1000), rl::Debt{1, false});
            owner_of[tag] = i;
        } else {
            t->store(tag, {kT0 + 1 + (int64_t) (i % 1000), 0}, rl::Debt{1, false}, kT0);
        }
        ASSERT_TRUE(t->check(nullptr)) << "after operation " << i;
    }
    size_t found = 0;
    for (auto &[tag, i] : owner_of) {
        rl::State s;
        if (t->find(tag, &s)) {
            ASSERT_NE(s.blob, nullptr);
            uint64_t v;
            std::memcpy(&v, s.blob, sizeof(v));
            ASSERT_EQ(v, i);
            found++;
        }
    }
    EXPECT_EQ(found, b.stats().blocks_used);  // no block without its key, no key without its block
    EXPECT_GT(found, 0u);
}

TEST(TableStats, RuleCountersByNameSharedAndBounded)
{
    Block b(64 * 1024, kSecret);
    const int a = rl_table_rule_slot(b.mem, "api"), c = rl_table_rule_slot(b.mem, "login");
    EXPECT_EQ(rl_table_rule_slot(b.mem, "api"), a);  // one slot a name
    EXPECT_NE(a, c);
    rl_table_count(b.mem, a, RL_OUTCOME_ALLOWED);
    rl_table_count(b.mem, a, RL_OUTCOME_ALLOWED);
    rl_table_count(b.mem, c, RL_OUTCOME_REJECTED);
    rl_table_count(b.mem, -1, RL_OUTCOME_REJECTED);  // an untracked rule: ignored
    rl_rule_stats_t st[RL_RULE_STATS_MAX];
    ASSERT_EQ(rl_table_rule_stats(b.mem, st, RL_RULE_STATS_MAX), 2u);
    EXPECT_STREQ(st[0].name, "api");
    EXPECT_EQ(st[0].count[RL_OUTCOME_ALLOWED], 2u);
    EXPECT_EQ(st[1].count[RL_OUTCOME_REJECTED], 1u);
    for (int i = 2; i < RL_RULE_STATS_MAX; i++) {
        EXPECT_GE(rl_table_rule_slot(b.mem, ("r" + std::to_string(i)).c_str()), 0);
    }
    EXPECT_EQ(rl_table_rule_slot(b.mem, "one-too-many"), -1);
    const uint64_t empty = rl_table_bytes_used(b.mem);
    b.table()->store(b.table()->tag(1, "k", 1), {kT0 + 1000, 0}, rl::Debt{1, false}, kT0);
    EXPECT_GT(rl_table_bytes_used(b.mem), empty);
}

// A table laid out for 1,000 rule names counts each of them apart, finds
// each again by name (through the index, after a claim interrupted between
// its index entry and its count), and has room for a quarter more.
TEST(TableStats, RuleCountersForEveryName)
{
    const size_t size = 4 << 20;
    void *mem = std::aligned_alloc(64, size);
    std::memset(mem, 0, size);
    char err[RL_ERR_MAX];
    ASSERT_EQ(rl_table_plan_names(size, nullptr, 0, 1000, 0, err, sizeof(err)), RL_OK) << err;
    ASSERT_EQ(rl_table_init_names(mem, size, nullptr, 0, 1000, 0, kSecret, err, sizeof(err)), RL_OK) << err;
    EXPECT_EQ(rl_table_rule_room(mem), 1280u);
    EXPECT_TRUE(rl_table_valid(mem, size, nullptr, 0));
    for (int i = 0; i < 1000; i++) {
        const int slot = rl_table_rule_slot(mem, ("tenant" + std::to_string(i)).c_str());
        ASSERT_EQ(slot, i);
        for (int k = 0; k <= i % 3; k++) {
            rl_table_count(mem, slot, RL_OUTCOME_ALLOWED);
        }
    }
    for (int i = 999; i >= 0; i--) {
        ASSERT_EQ(rl_table_rule_slot(mem, ("tenant" + std::to_string(i)).c_str()), i);
    }
    EXPECT_EQ(rl_table_rules_counted(mem), 1000u);
    std::vector<rl_rule_stats_t> st(1000);
    ASSERT_EQ(rl_table_rule_stats(mem, st.data(), st.size()), 1000u);
    for (int i = 0; i < 1000; i++) {
        EXPECT_EQ(std::string(st[i].name), "tenant" + std::to_string(i));
        EXPECT_EQ(st[i].count[RL_OUTCOME_ALLOWED], (uint64_t) (i % 3 + 1));
    }
    // the room planned: names a reload adds are counted up to 1,280
    for (int i = 1000; i < 1280; i++) {
        ASSERT_EQ(rl_table_rule_slot(mem, ("added" + std::to_string(i)).c_str()), i);
    }
    EXPECT_EQ(rl_table_rule_slot(mem, "one-too-many"), -1);
    EXPECT_EQ(rl_table_rule_slot(mem, "tenant500"), 500);
    std::string why;
    EXPECT_TRUE(rl::Table::at(mem)->check(&why)) << why;
    // the zone's layout, kept: valid whatever the number of names now
    EXPECT_TRUE(rl_table_valid(mem, size, nullptr, 0));
    std::free(mem);
}

// A claim interrupted after writing its index entry, before counting its
// slot: the entry is passed over, and the next claim of any name is right.
TEST(TableStats, RuleCounterClaimInterrupted)
{
    Block b(64 * 1024, kSecret);
    rl::Table *t = b.table();
    ASSERT_EQ(rl_table_rule_slot(b.mem, "a"), 0);
    ASSERT_EQ(rl_table_rule_slot(b.mem, "b"), 1);
    // "c" half-claimed: its counters and index entry written, not counted
    ASSERT_EQ(rl_table_rule_slot(b.mem, "c"), 2);
    t->layout().nrules = 2;
    EXPECT_EQ(rl_table_rule_slot(b.mem, "d"), 2);
    EXPECT_EQ(rl_table_rule_slot(b.mem, "c"), 3);
    EXPECT_EQ(rl_table_rule_slot(b.mem, "d"), 2);
    EXPECT_EQ(rl_table_rule_slot(b.mem, "a"), 0);
    EXPECT_EQ(rl_table_rules_counted(b.mem), 4u);
}
