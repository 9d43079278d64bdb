// A process killed anywhere inside a table operation: nginx's master
// releases the zone's lock, and the next holder finds the operation half
// done.  With the core built to abandon an operation at its N-th step (as a
// killed process would), for every N in turn: the next holder's recover()
// leaves a table that passes every invariant (Table::check), in which no
// key but the one being written has lost anything.
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "helpers.h"
#include "table/table.h"
#include "util/fault.h"

namespace rl {
long fault_countdown = 0;
}

namespace {

const uint8_t kSecret[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
const int64_t kNow = kT0 + 5000;

// A small table with a pool of blocks, filled past full with keys with and
// without blocks, many of them live: inserts now evict, move keys along
// cuckoo paths and recycle blocks.
struct Zone {
    size_t size = 48 * 1024;
    std::vector<uint8_t> mem;
    uint32_t blob = 56;  // the block of a sliding_window of 10 buckets
    explicit Zone(std::mt19937_64 &rng) : mem(size + 64)
    {
        char err[RL_ERR_MAX];
        EXPECT_EQ(rl_table_init(table(), size, &blob, 1, kSecret, err, sizeof(err)), RL_OK) << err;
        for (uint64_t i = 0; i < 5000; i++) {
            const uint64_t tag = table()->tag(1, &i, sizeof(i));
            const int64_t t = kNow + 1 + (int64_t) (rng() % 100000);
            if (i % 3 == 0) {
                rl::State s = table()->acquire(tag, 0, kNow);
                std::memset(s.blob, (int) (i & 0xff), blob);
                table()->set_t(tag, t, rl::Debt{(uint32_t) (rng() % 255), false});
            } else {
                table()->store(tag, {t, (uint32_t) i}, rl::Debt{(uint32_t) (rng() % 255), i % 7 == 0}, kNow);
            }
        }
    }
    rl::Table *table() { return rl::Table::at(mem.data() + (64 - (uintptr_t) mem.data() % 64) % 64); }
};

struct Key {
    rl_state_t head;
    std::vector<uint8_t> blob;
};

// Every key in the table, with its state.
std::map<uint64_t, Key> keys_of(rl::Table *t, size_t blob)
{
    std::map<uint64_t, Key> out;
    const rl::TableLayout &h = t->layout();
    const rl::Bucket *b = reinterpret_cast<const rl::Bucket *>(reinterpret_cast<const char *>(t) + h.layout_size);
    for (uint64_t i = 0; i < h.nbuckets; i++) {
        for (int s = 0; s < 3; s++) {
            if (b[i].tag[s] == 0) {
                continue;
            }
            rl::State st;
            EXPECT_TRUE(t->find(b[i].tag[s], &st));
            Key k{st.head, {}};
            if (st.blob != nullptr) {
                k.blob.assign(st.blob, st.blob + blob);
            }
            out[b[i].tag[s]] = k;
        }
    }
    return out;
}

// Runs op on copies of the zone, abandoning it at step 1, 2, ... until it
// completes.  After each abandon, recover() and check(); every key of before
// but `written` and those op legitimately evicts (`evicted`, whose debt the
// summary then holds) must be there unchanged.  Returns the steps op has.
long crash_everywhere(Zone &zone, const std::function<void(rl::Table *)> &op, uint64_t written,
                      const std::function<bool(uint64_t tag, rl::Table *after)> &evicted)
{
    const std::vector<uint8_t> pristine = zone.mem;
    const std::map<uint64_t, Key> before = keys_of(zone.table(), zone.blob);
    long step = 1;
    for (;; step++) {
        zone.mem = pristine;
        rl::Table *t = zone.table();
        rl::fault_countdown = step;
        bool crashed = false;
        try {
            op(t);
        } catch (const rl::Crash &) {
            crashed = true;
        }
        rl::fault_countdown = 0;
        if (!crashed) {
            break;
        }
        EXPECT_EQ(t->layout().journal.active, 1u) << "step " << step << ": died inside an operation";
        t->recover();
        std::string why;
        EXPECT_TRUE(t->check(&why)) << "after dying at step " << step << ": " << why;
        const std::map<uint64_t, Key> after = keys_of(t, zone.blob);
        for (const auto &[tag, key] : before) {
            if (tag == written) {
                continue;
            }
            auto it = after.find(tag);
            if (it == after.end()) {
                EXPECT_TRUE(evicted(tag, t)) << "step " << step << ": a key other than the one written is gone";
                continue;
            }
            EXPECT_EQ(it->second.head.t, key.head.t) << "step " << step;
            EXPECT_EQ(it->second.head.n == key.head.n || !key.blob.empty(), true) << "step " << step;
            EXPECT_EQ(it->second.blob, key.blob) << "step " << step << ": another key's block changed";
        }
        for (const auto &[tag, key] : after) {
            EXPECT_TRUE(tag == written || before.count(tag)) << "step " << step << ": a key from nowhere";
        }
        if (::testing::Test::HasFailure()) {
            break;
        }
        // and the next operation goes through on the repaired table
        op(t);
        EXPECT_TRUE(t->check(&why)) << "the operation again after step " << step << ": " << why;
    }
    EXPECT_TRUE(zone.table()->check(nullptr));
    return step;
}

bool never(uint64_t, rl::Table *)
{
    return false;
}

class Fault : public ::testing::TestWithParam<int> {};

TEST_P(Fault, StoreOfANewKeyIntoAFullTable)
{
    std::mt19937_64 rng(GetParam());
    Zone zone(rng);
    for (int k = 0; k < 20; k++) {
        const uint64_t i = 1000000 + rng() % 1000000;
        const uint64_t tag = zone.table()->tag(1, &i, sizeof(i));
        // a new key evicts one owing least: it may be one of the keys before
        const long steps = crash_everywhere(
            zone,
            [&](rl::Table *t) {
                t->store(tag, {kNow + 999999, 7}, rl::Debt{200, false}, kNow);
            },
            tag, never);
        EXPECT_GT(steps, 3);
        zone.table()->store(tag, {kNow + 999999, 7}, rl::Debt{200, false}, kNow);
    }
}

TEST_P(Fault, AcquireOfABlockFromAFullPool)
{
    std::mt19937_64 rng(GetParam() + 100);
    Zone zone(rng);
    for (int k = 0; k < 20; k++) {
        const uint64_t i = 2000000 + rng() % 1000000;
        const uint64_t tag = zone.table()->tag(1, &i, sizeof(i));
        // the pool gives up a block first, in its own operation: that key is
        // evicted (its debt in the summary), not lost
        const long steps = crash_everywhere(
            zone, [&](rl::Table *t) { t->acquire(tag, 0, kNow); }, tag,
            [](uint64_t, rl::Table *t) { return t->layout().counts.evictions > 0; });
        EXPECT_GT(steps, 3);
        zone.table()->acquire(tag, 0, kNow);
    }
}

TEST_P(Fault, StoreOverAKeyWithABlockAndEvict)
{
    std::mt19937_64 rng(GetParam() + 200);
    Zone zone(rng);
    const std::map<uint64_t, Key> keys = keys_of(zone.table(), zone.blob);
    int done = 0;
    for (const auto &[tag, key] : keys) {
        if (key.blob.empty()) {
            continue;
        }
        if (done++ == 10) {
            break;
        }
        const uint64_t t = tag;
        crash_everywhere(
            zone,
            [&](rl::Table *tb) {
                tb->store(t, {kNow + 5, 1}, rl::Debt{3, false}, kNow);
            },
            t, never);
        crash_everywhere(
            zone, [&](rl::Table *tb) { tb->evict(t, kNow); }, t, never);
    }
    EXPECT_EQ(done, 11);
}

// A reset (the key API's): the key and its block forgotten, and, for a key
// owing in the summary, one of its cells cleared.
TEST_P(Fault, ResetOfAKeyWithABlockOrOwingInTheSummary)
{
    std::mt19937_64 rng(GetParam() + 300);
    Zone zone(rng);
    const std::map<uint64_t, Key> keys = keys_of(zone.table(), zone.blob);
    int done = 0;
    for (const auto &[tag, key] : keys) {
        if (key.blob.empty() || key.head.t <= kNow) {
            continue;
        }
        if (done++ == 5) {
            break;
        }
        const uint64_t t = tag;
        const long steps = crash_everywhere(
            zone, [&](rl::Table *tb) { tb->forget(t, kNow); }, t, never);
        EXPECT_GE(steps, 4);
    }
    EXPECT_EQ(done, 6);
    // keys not held that the summary says owe (the zone's evictions)
    int owing = 0;
    for (uint64_t i = 100000; owing < 5 && i < 200000; i++) {
        const uint64_t t = zone.table()->tag(1, &i, sizeof(i));
        if (zone.table()->owed(t, kNow).until == 0) {
            continue;
        }
        owing++;
        const long steps = crash_everywhere(
            zone, [&](rl::Table *tb) { tb->forget(t, kNow); }, t, never);
        EXPECT_GE(steps, 2);
    }
    EXPECT_EQ(owing, 5);
}

// A whole request through rl_check: two rules, one with a block, in a table
// where committing inserts, evicts and allocates.
TEST_P(Fault, RequestWithTwoRules)
{
    std::mt19937_64 rng(GetParam() + 300);
    Zone zone(rng);
    const rl_rule_t head = rule_of("limit=5 period=1m name=h");
    const rl_rule_t block = rule_of("algorithm=sliding_window limit=5 period=1m buckets=10 name=b");
    ASSERT_EQ(rl_rule_block_size(&block), zone.blob);
    for (int k = 0; k < 10; k++) {
        const std::string key = "client" + std::to_string(rng() % 1000000);
        rl_check_t c[2] = {check_of(zone.table(), &head, identity_of(head), key),
                           check_of(zone.table(), &block, identity_of(block), key)};
        rl_request_t rq = hashed(request_of(c, 2));
        // two keys are written (one a rule); each table operation is whole
        auto written = [&](uint64_t tag, rl::Table *t) { return tag == c[1].tag || t->layout().counts.evictions > 0; };
        crash_everywhere(
            zone,
            [&](rl::Table *t) {
                for (auto &x : c) {
                    x.table = t;
                }
                rl_decide(&rq, kNow);
            },
            c[0].tag, written);
        for (auto &x : c) {
            x.table = zone.table();
        }
        rl_decide(&rq, kNow);
        EXPECT_TABLE_VALID(zone.table());
    }
}

INSTANTIATE_TEST_SUITE_P(Seeds, Fault, ::testing::Values(1, 2, 3));

// A process that dies while recovering leaves the journal unchanged: the
// next one recovers the same way.
TEST(FaultRecover, RecoveringTwiceIsRecoveringOnce)
{
    std::mt19937_64 rng(9);
    Zone zone(rng);
    const std::vector<uint8_t> pristine = zone.mem;
    const uint64_t i = 123456789;
    const uint64_t tag = zone.table()->tag(1, &i, sizeof(i));
    rl::fault_countdown = 3;
    EXPECT_THROW(zone.table()->store(tag, {kNow + 1, 1}, rl::Debt{1, false}, kNow), rl::Crash);
    rl::fault_countdown = 0;
    const std::vector<uint8_t> half = zone.mem;
    zone.table()->recover();
    const std::vector<uint8_t> once = zone.mem;
    zone.mem = half;
    zone.table()->recover();
    zone.table()->recover();
    EXPECT_EQ(zone.mem, once);
    EXPECT_TABLE_VALID(zone.table());
}

}  // namespace
