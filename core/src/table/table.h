// The shared-memory key table: fixed-size slots keyed by a 64-bit SipHash of
// (rule identity, key bytes) under a per-table random secret, state inline.
//
// Layout: its TableLayout (sizes, offsets, secret, counts, journal), buckets
// of one cache line each holding three slots (tag, t, n: 20 bytes a key),
// then, only when rules of the zone need more
// state than a slot holds (sliding_window, sliding_log), one pool of
// fixed-size blocks per block size.
//
// Bucketized cuckoo hashing with two choices: a key lives in one of two
// buckets derived from its tag, so a lookup reads at most two cache lines,
// and the table fills past 90% before it must evict.  When a key finds no
// room (both buckets full and no cuckoo path of moves to a free slot), one
// of its six candidate slots is evicted: a key already back to full budget
// if any (nothing lost), otherwise the one owing least (the fraction of its
// budget it owes, times how long).  A full pool evicts the same way among a
// few blocks swept by a clock hand, and drops the owning key's slot with
// the block.
//
// The eviction summary: what an evicted key still owes outlives it in a
// small array of cells (count-min style, three cells a key from its tag), so
// that a key evicted and seen again comes back no better off than it left.
// A cell holds the latest instant any key mapped to it is back to full
// budget and the largest fraction of its rule's capacity any such key owes;
// a key not in the table starts from the smallest of its cells
// (summary.cpp turns that into a state).  Each slot keeps the fraction its
// key owed at its last update, for its eviction (Debt).
//
// Not thread-safe: the caller holds the table's lock.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "algorithms/algorithms.h"
#include "ratelimit.h"
#include "util/mix.h"
#include "util/siphash.h"

namespace rl {

struct alignas(64) Bucket {
    uint64_t tag[3];  // 0 = empty slot
    int64_t t[3];     // head.t
    uint32_t n[3];    // head.n; for a key with a block: pool << 24 | block
    uint32_t meta;    // per slot: owns a block, and its Debt
};
static_assert(sizeof(Bucket) == 64, "a bucket is one cache line");

// What a slot says its key owes, for the summary: the fraction (Owed), and
// whether that came back from the summary (then not added to it again).
struct Debt {
    uint32_t frac;
    bool inherited;
};

// A bucket's meta word: bit i says slot i owns a block; bit 3 + i that
// slot i's key came back from the summary and has not been back to full
// budget since; 8 bits a slot from bit 6 hold the fraction its key owes.
inline bool has_block(uint32_t meta, int i)
{
    return (meta >> i) & 1u;
}
inline Debt debt_of(uint32_t meta, int i)
{
    return Debt{(meta >> (6 + 8 * i)) & kFracFull, ((meta >> (3 + i)) & 1u) != 0};
}
constexpr uint32_t debt_bits(int i)
{
    return 1u << (3 + i) | kFracFull << (6 + 8 * i);
}
inline uint32_t slot_bits(int i)
{
    return 1u << i | debt_bits(i);
}
inline uint32_t with_debt(uint32_t meta, int i, Debt d)
{
    // slot i's debt bits from a table: a load, not two shifts
    static constexpr uint32_t kDebtBits[3] = {debt_bits(0), debt_bits(1), debt_bits(2)};
    const uint32_t frac = d.frac < kFracFull ? d.frac : kFracFull;
    return (meta & ~kDebtBits[i]) | (uint32_t) d.inherited << (3 + i) | frac << (6 + 8 * i);
}

// The fewest buckets a zone has.
constexpr uint64_t kMinBuckets = 16;
constexpr uint32_t kPoolsMax = 8;
// The most rule names a zone counts (what a table plans room for).
constexpr uint32_t kRulesRoomMax = 1u << 20;
constexpr uint32_t kBlocksMax = 1u << 24;

struct Pool {
    uint64_t offset;      // bytes from the table's start
    uint32_t block_size;  // an owner tag, then the algorithm's block
    uint32_t blocks;
    uint32_t fresh;      // blocks [fresh, blocks) never used yet
    uint32_t free_head;  // a freed block + 1, 0 if none
    uint32_t used;
    uint32_t hand;  // where the next eviction sweep starts
};

struct RuleCounters {
    char name[RL_NAME_MAX];  // "" = free
    uint64_t count[RL_OUTCOMES];
    uint64_t top;           // its TopList, from the table's start; 0: none yet
    uint64_t charged;       // charge=: units charged when requests ended
    uint64_t debts;         // requests whose charge left the key in debt
    int64_t flight;         // concurrency: slots held now,
    int64_t peak;           //   the most held at once,
    uint64_t waited;        //   requests that waited for one
    uint64_t bans;          // ban=: bans started,
    uint64_t dry_run_bans;  // and dry-run refusals that would start one
    uint64_t overridden;    // requests that met an override
    // an algorithm that learns its limit (its record's slot_ended): the
    // last interval decided by a key of the rule: its limit, baseline and
    // typical latency (us)
    uint32_t limit_now;
    uint32_t baseline_us;
    uint32_t recent_us;
    // bandwidth (bandwidth/bandwidth.cpp): bytes granted, the second they
    // were last granted in and its bytes and the second's before, the
    // connections sending and those of them waiting for their slice
    uint64_t bytes;
    int64_t second;
    uint64_t second_bytes;
    uint64_t previous_bytes;
    int64_t connections;
    int64_t delayed;
};

// The keys a rule refuses most (top.cpp): a Space-Saving summary of
// RL_TOP_ENTRIES entries for each of two epochs (the current one and the
// one before, by parity), in the zone's room for them, claimed by the
// rule's first refusal.  An entry whose tag is 0 holds the refusals of a
// key that was reset since: counted, under no key.
struct TopEntry {
    uint64_t tag;
    uint32_t count;  // an upper bound of the key's refusals in the epoch,
    uint32_t error;  // at most this much above them
};

// A kept key: its length (up to RL_TOP_KEY_MAX; the high bit: cut), then
// its bytes.
constexpr uint32_t kTopKeyBytes = 1 + RL_TOP_KEY_MAX;
// A rule whose summary found no room left.
constexpr uint64_t kTopNoRoom = 1;

struct alignas(64) TopList {
    int64_t epoch[2];  // the epoch each half counts (now / RL_TOP_EPOCH_MS)
    uint32_t used[2];  // its entries in use
    uint32_t keys;     // 1: each entry keeps its key (kTopKeyBytes), after
                       // the list
    uint32_t kib;      // 1: a bandwidth rule's, whose counts are the KiB
                       // granted its keys, not refusals
    TopEntry half[2][RL_TOP_ENTRIES];

    static size_t bytes(bool keys) { return sizeof(TopList) + (keys ? 2 * RL_TOP_ENTRIES * kTopKeyBytes : 0); }
    uint8_t *key(uint32_t h, uint32_t i)
    {
        return reinterpret_cast<uint8_t *>(this + 1) + (h * RL_TOP_ENTRIES + i) * kTopKeyBytes;
    }
    const uint8_t *key(uint32_t h, uint32_t i) const { return const_cast<TopList *>(this)->key(h, i); }

    // A refusal of a key, or `weight` of them (its bytes kept if the list
    // keeps keys and bytes is not null); the list as the API shows it; a
    // reset key taken off.
    void note(uint64_t tag, const void *bytes, size_t len, int64_t now, uint32_t weight = 1);
    void read(int64_t now, rl_top_t *out) const;
    void forget(uint64_t tag);
};

// What table operations change besides buckets, blocks and cells: one
// cache line.
struct alignas(64) Counts {
    uint64_t keys;  // slots in use
    uint64_t evictions;
    uint64_t live_evictions;
    uint64_t summary_refusals;  // requests refused because of the summary
    int64_t sketch_until;       // no cell owes anything from then on
    int64_t restored_until;     // keys a state file restored may owe more
                                // than their rule lets a key owe until then
};
static_assert(sizeof(Counts) == 64, "the counts are one cache line");

// Every operation that changes the table's structure first saves each cache
// line it is about to change; a process that dies holding the lock leaves
// `active` set, and the next holder puts the saved lines back before
// anything else (Table::recover): the table is as before the operation.
// What an algorithm writes into its own key's block is not saved: a key
// being written when its process died may lose its state, and no other.
constexpr int kJournalLines = 48;

struct alignas(64) Journal {
    uint32_t active;
    uint32_t lines;
    uint64_t offset[kJournalLines];  // of each saved line, from the table's start
    alignas(64) uint8_t saved[kJournalLines][64];
};

// What the zone's start says of the table: its sizes and where each part
// is, its secret, its counts and its journal.
struct alignas(64) TableLayout {
    char magic[8];
    uint32_t version;
    uint32_t layout_size;
    uint64_t size;  // bytes of the whole block
    uint64_t nbuckets;
    uint8_t secret[16];
    uint32_t npools;
    uint32_t nrules;
    // the overrides' store (overrides/store.h), from the table's start,
    // while it holds any: a request reads this line anyway, and a zone
    // without overrides costs it nothing more
    uint64_t overrides_live;
    uint64_t sketch_offset;  // the eviction summary's cells (uint64_t each)
    uint64_t ncells;
    uint64_t top_offset;  // the room for rules' top keys (TopList)
    uint64_t top_bytes;
    uint64_t top_used;   // claimed, from top_offset on
    uint64_t overrides;  // the overrides' store, from the table's start (0: none)
    Counts counts;
    alignas(64) Pool pools[kPoolsMax];
    Journal journal;
    // The rules' counters, claimed by name (rl_table_rule_slot): room for
    // rules_max names, laid out after this layout (Table::counters), then
    // their index by name: names_mask + 1 entries, each a slot + 1 (0:
    // empty), probed linearly from the name's hash.  Written under the
    // lock, read without it.
    uint32_t rules_max;
    uint32_t names_mask;
    uint32_t slots16;  // the stack it was laid out for (Layout)
};

// Where a block size's pool is, for a table of `size` bytes whose rules
// need blocks of these sizes.
struct Layout {
    uint64_t nbuckets;
    uint64_t sketch_offset;
    uint64_t ncells;
    uint64_t top_offset;
    uint64_t top_bytes;
    uint32_t rules_max;  // room for so many rule names' counters
    uint32_t slots16;    // the stack planned for: slots a key with a block
                         // takes for each block, in sixteenths (0: unknown)
    uint32_t npools;
    Pool pools[kPoolsMax];
};

class Table {
public:
    static Table *at(void *mem) { return static_cast<Table *>(mem); }
    static const Table *at(const void *mem) { return static_cast<const Table *>(mem); }

    // The layout, its rules' counters and their index by name, for room
    // for rules_max names.
    static size_t layout_bytes(uint32_t rules_max)
    {
        return fixed_layout_bytes() + align64(rules_max * sizeof(RuleCounters)) +
               align64(index_entries(rules_max) * sizeof(uint32_t));
    }
    static size_t fixed_layout_bytes() { return align64(sizeof(TableLayout)); }
    static size_t align64(size_t n) { return (n + 63) & ~size_t{63}; }
    // Index entries for rules_max names: a power of two, at least twice as
    // many (so that a probe ends soon).
    static uint32_t index_entries(uint32_t rules_max)
    {
        uint32_t n = 64;
        while (n < 2 * rules_max) {
            n *= 2;
        }
        return n;
    }
    // The room for names a table plans for a configuration of `names`:
    // RL_RULE_STATS_MAX at least, and a quarter more than it has, for
    // names a reload adds while the zone is kept.
    static uint32_t rules_room(size_t names)
    {
        const size_t want = names + names / 4;
        return want <= RL_RULE_STATS_MAX ? RL_RULE_STATS_MAX
                                         : (uint32_t) std::min<size_t>((want + 63) & ~size_t{63}, kRulesRoomMax);
    }
    // The pool block holding an algorithm block of `blob` bytes.
    static uint32_t block_size_for(size_t blob) { return (uint32_t) ((8 + blob + 15) & ~size_t{15}); }
    static bool plan(size_t size, const uint32_t *blobs, size_t n, uint32_t rules_max, uint32_t slots16, Layout *out,
                     char *err, size_t errlen);

    // Over zeroed memory (rl_table_init): writes the layout only.
    void init(size_t size, const Layout &layout, const uint8_t secret[16]);
    bool valid(size_t size, const Layout &layout) const;

    // A key's tag under a rule is
    //
    //     tag(rule, key) = F(H(key) xor identity(rule))
    //
    // where H is SipHash-1-3 under the table's secret, and F a fixed bijection
    // (of_hash): a request hashes a key once, whatever the number of the
    // zone's rules on it, and each rule's tag costs a few multiplications.  Collisions are as
    // hard to craft as with H of (identity, key) as one message.  F being a
    // bijection, two tags are equal exactly when H(k) xor H(k') = identity(r)
    // xor identity(r').  For one key under two rules that is identity(r) =
    // identity(r'): the same rule, whose state is shared by design.  For two
    // keys k != k', it is a given difference between H's outputs on two inputs
    // the attacker chose without seeing the secret or any hash: H is a PRF, so
    // that happens with probability 2^-64 whatever the difference, the odds of
    // a plain collision of H (the case r = r').  F also spreads the identity
    // over the whole tag, so that one key's buckets under two rules are
    // unrelated.  (0 stands for an empty slot: a tag of 0 is stored as 1.)
    uint64_t tag(uint64_t identity, const void *key, size_t len) const { return of_hash(hash(key, len), identity); }
    uint64_t hash(const void *key, size_t len) const { return SipHash13::bytes(h_.secret, key, len); }
    static uint64_t of_hash(uint64_t hash, uint64_t identity)
    {
        const uint64_t x = splitmix64_mix(hash ^ identity);  // a bijection of 64-bit words
        return x != 0 ? x : 1;                               // 0 marks an empty slot
    }
    // Keys live in their first bucket whenever it has room (see make_room),
    // so the first is the one worth fetching early.  A random bucket of a
    // large zone costs a cache miss and a TLB miss: read it now, before the
    // caller takes the zone's lock, so that they are not paid while holding
    // it.
    void prefetch(uint64_t tag) const
    {
        const volatile uint64_t *word = &buckets()[first(tag)].tag[0];
        (void) *word;
    }

    // The tag under which a key's ban (ban=) is kept: its halves swapped,
    // so that it lives in the same two buckets as the key (the look-up
    // reads no other cache line), and never the key's own tag.
    static uint64_t ban_tag(uint64_t tag)
    {
        const uint64_t b = tag << 32 | tag >> 32;
        return b != tag ? b : tag ^ 1;
    }

    // The tag under which a key's reservations in flight (charge=) are
    // kept: a bijection of the key's tag, so never another flight's, and
    // another key's only by a 64-bit chance.
    static uint64_t flight_tag(uint64_t tag)
    {
        const uint64_t f = of_hash(tag, 0x666c69676874ull);  // "flight"
        return f != tag ? f : f ^ 1;
    }

    // The pool for an algorithm block of `blob` bytes, or -1.
    int pool_for(size_t blob) const;
    // The same, the pool of a found key's block when it is that one.
    int pool_for(size_t blob, const State &found) const
    {
        const uint32_t p = found.head.n >> 24;
        if (found.blob != nullptr && p < h_.npools && h_.pools[p].block_size == block_size_for(blob)) {
            return (int) p;
        }
        return pool_for(blob);
    }

    // Where a found key's head is: valid until the next insertion (b null:
    // none).
    struct Ref {
        Bucket *b;
        int slot;
        bool found() const { return b != nullptr; }
    };
    // Writes a found key's new head and debt in place.
    static void update(const Ref &ref, rl_state_t head, Debt debt)
    {
        ref.b->t[ref.slot] = head.t;
        ref.b->n[ref.slot] = head.n;
        ref.b->meta = with_debt(ref.b->meta, ref.slot, debt);
    }
    // Writes a found key's new t and debt in place (its n, a block's
    // handle, stays).
    static void update_t(const Ref &ref, int64_t t, Debt debt)
    {
        ref.b->t[ref.slot] = t;
        ref.b->meta = with_debt(ref.b->meta, ref.slot, debt);
    }
    static Debt debt(const Ref &ref) { return debt_of(ref.b->meta, ref.slot); }

    // The key's state: its head, and its block (nullptr if none).  False if
    // the key has no slot.  (Inline: every request finds its keys.)
    bool find(uint64_t tag, State *s, Ref *ref = nullptr) const
    {
        Slot slot = locate(tag);
        if (slot.b == nullptr) {
            return false;
        }
        s->head = rl_state_t{slot.b->t[slot.i], slot.b->n[slot.i]};
        s->blob = has_block(slot.b->meta, slot.i) ? block(slot.b->n[slot.i]) + 8 : nullptr;
        if (ref != nullptr) {
            *ref = Ref{slot.b, slot.i};
        }
        return true;
    }

    // A key's state as its rule reads it while keys a state file restored
    // may still owe (counts.restored_until): never owing longer from now
    // than the rule as it is can make a key owe (its horizon).  The file's
    // keys are bounded by the zone's longest rule as they are read (the
    // table does not know a key's rule); this bounds each by its own when
    // a request of its rule first meets it, and writes that down (ref, a
    // found key's; nullptr: a look): a rule relaxed across the restart (same
    // name and algorithm) holds its keys no longer than it now can.
    void bound(const rl_rule_t &rule, State &s, const Ref *ref, int64_t now) const
    {
        const int64_t most = now + rule.horizon_ms;
        if (s.head.t > most && h_.counts.restored_until > now) {
            s.head.t = most;
            if (ref != nullptr && ref->found()) {
                ref->b->t[ref->slot] = most;
            }
        }
    }
    // Until when a key's ban (ban=, its entry under ban_tag) lasts, 0 if it
    // is not banned; bounded by its rule's ban= as a state is (bound), and
    // written down unless `look`.
    int64_t banned_until(const rl_rule_t &rule, uint64_t tag, int64_t now, bool look = false) const
    {
        State b{};
        Ref ref{};
        if (!find(ban_tag(tag), &b, &ref) || b.head.t <= now) {
            return 0;
        }
        if (b.head.t - now > rule.ban_ms && h_.counts.restored_until > now) {
            b.head.t = now + rule.ban_ms;
            if (!look) {
                ref.b->t[ref.slot] = b.head.t;
            }
        }
        return b.head.t;
    }
    // Stores a key's head and debt, inserting (and evicting if need be) when
    // absent; true if it inserted (which may move other keys).
    bool store(uint64_t tag, rl_state_t head, Debt debt, int64_t now);
    // The key's state with a block of `pool`, created zeroed when absent
    // (*fresh set then); a later set_t(tag, t, debt) records its new head.t.
    State acquire(uint64_t tag, int pool, int64_t now, bool *fresh = nullptr);
    void set_t(uint64_t tag, int64_t t, Debt debt);
    // The same for a key of slots (a rule of requests in flight): no debt
    // for the summary while it holds slots or places (t ahead of now: it is
    // never summed there, and is the last a full table evicts).
    void set_held(uint64_t tag, int64_t t, int64_t now) { set_t(tag, t, Debt{t > now ? kFracFull : 0, t > now}); }

    // What the summary says a key absent from the table owes at now:
    // {0, 0} if nothing.
    Owed owed(uint64_t tag, int64_t now) const;
    // Evicts a key as a full table does: what it owes goes to the summary.
    void evict(uint64_t tag, int64_t now);
    // Makes a key fresh (rl_table_reset): RL_RESET_* flags.
    int forget(uint64_t tag, int64_t now);

    // The top keys of the rule counted in `slot`: its list, claimed now if
    // it has none yet (keys: with room for keys in clear, if there is), or
    // nullptr.
    TopList *top_list(int slot, bool claim, bool keys);
    const TopList *top_list(int slot) const;

    // Undoes an operation a dead process left half done.  Every caller
    // holding the lock calls it before using the table (rl_check does);
    // inline, as it finds nothing to undo on every request but one.
    void recover()
    {
        if (h_.journal.active) {
            undo();
        }
    }
    // Every invariant of the table: false, and why, if one does not hold.
    // Walks the whole table (tests, and after a repair).
    bool check(std::string *why) const;

    const TableLayout &layout() const { return h_; }
    TableLayout &layout() { return h_; }

    // The rules' counters (rules_max of them) and their index by name.
    RuleCounters *counters()
    {
        return reinterpret_cast<RuleCounters *>(reinterpret_cast<char *>(this) + fixed_layout_bytes());
    }
    const RuleCounters *counters() const { return const_cast<Table *>(this)->counters(); }
    uint32_t *names_index()
    {
        return reinterpret_cast<uint32_t *>(reinterpret_cast<char *>(this) + fixed_layout_bytes() +
                                            align64(h_.rules_max * sizeof(RuleCounters)));
    }
    // The slot of a rule name's counters, or -1 if it has none; where its
    // index entry is (or would go) in *at.
    int find_rule(const char *name, uint32_t *at) const;
    // The counters of a rule name, claimed if it has none (-1: no room).
    int claim_rule(const char *name);

    // Adds one to the outcome of the rule counted in `slot`, under the
    // lock: a plain load and store (no bus-locked add on every request),
    // atomic only so that the stats may read it without the lock.
    void count(int slot, int outcome)
    {
        if (slot >= 0 && (uint32_t) slot < h_.rules_max && outcome >= 0 && outcome < RL_OUTCOMES) {
            uint64_t &n = counters()[slot].count[outcome];
            __atomic_store_n(&n, __atomic_load_n(&n, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
        }
    }

    // Adds a request's charge to the rule counted in `slot` (as count()).
    void count_charge(int slot, uint64_t units, bool debt)
    {
        if (slot >= 0 && (uint32_t) slot < h_.rules_max) {
            RuleCounters &r = counters()[slot];
            __atomic_store_n(&r.charged, __atomic_load_n(&r.charged, __ATOMIC_RELAXED) + units, __ATOMIC_RELAXED);
            __atomic_store_n(&r.debts, __atomic_load_n(&r.debts, __ATOMIC_RELAXED) + debt, __ATOMIC_RELAXED);
        }
    }

    // A ban started (or, dry, one a dry run would have started).
    void count_ban(int slot, bool dry)
    {
        if (slot >= 0 && (uint32_t) slot < h_.rules_max) {
            uint64_t &n = dry ? counters()[slot].dry_run_bans : counters()[slot].bans;
            __atomic_store_n(&n, __atomic_load_n(&n, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
        }
    }

    // A request that met an override.
    void count_override(int slot)
    {
        if (slot >= 0 && (uint32_t) slot < h_.rules_max) {
            uint64_t &n = counters()[slot].overridden;
            __atomic_store_n(&n, __atomic_load_n(&n, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
        }
    }

    // A concurrency rule's slots: delta taken (or given back), and a
    // request that joins a queue.  The count is added to atomically: a
    // Redis zone's leases are given back without the lock (every slot
    // taken, and so the peak, is counted under it).
    void count_flight(int slot, int64_t delta, bool waited)
    {
        if (slot >= 0 && (uint32_t) slot < h_.rules_max) {
            RuleCounters &r = counters()[slot];
            const int64_t now = __atomic_add_fetch(&r.flight, delta, __ATOMIC_RELAXED);
            if (now > __atomic_load_n(&r.peak, __ATOMIC_RELAXED)) {
                __atomic_store_n(&r.peak, now, __ATOMIC_RELAXED);
            }
            __atomic_store_n(&r.waited, __atomic_load_n(&r.waited, __ATOMIC_RELAXED) + waited, __ATOMIC_RELAXED);
        }
    }

    // A key of a rule that learns its limit decided an interval: what it
    // learned.
    void note_learned(int slot, uint32_t limit, uint32_t baseline_us, uint32_t recent_us)
    {
        if (slot >= 0 && (uint32_t) slot < h_.rules_max) {
            RuleCounters &r = counters()[slot];
            __atomic_store_n(&r.limit_now, limit, __ATOMIC_RELAXED);
            __atomic_store_n(&r.baseline_us, baseline_us, __ATOMIC_RELAXED);
            __atomic_store_n(&r.recent_us, recent_us, __ATOMIC_RELAXED);
        }
    }

    // The bucket holding tag, or -1 (tests).
    int64_t bucket_of(uint64_t tag) const;
    // The two buckets a tag may live in.
    uint32_t first(uint64_t tag) const { return (uint32_t) (((tag & 0xffffffffu) * h_.nbuckets) >> 32); }
    uint32_t second(uint64_t tag) const { return (uint32_t) (((tag >> 32) * h_.nbuckets) >> 32); }

private:
    friend struct StateAccess;  // state/state.cpp: the file of a zone's key states

    struct Slot {
        Bucket *b;
        int i;
    };

    Bucket *buckets() { return reinterpret_cast<Bucket *>(reinterpret_cast<char *>(this) + h_.layout_size); }
    const Bucket *buckets() const
    {
        return reinterpret_cast<const Bucket *>(reinterpret_cast<const char *>(this) + h_.layout_size);
    }
    uint8_t *block(uint32_t handle) const
    {
        const Pool &p = h_.pools[handle >> 24];
        return const_cast<uint8_t *>(reinterpret_cast<const uint8_t *>(this)) + p.offset +
               (uint64_t) (handle & (kBlocksMax - 1)) * p.block_size;
    }
    uint32_t other(uint32_t b, uint64_t tag) const { return b == first(tag) ? second(tag) : first(tag); }

    void begin();
    void commit();
    void save(const void *p);

    uint64_t *cells() const
    {
        return reinterpret_cast<uint64_t *>(const_cast<char *>(reinterpret_cast<const char *>(this)) +
                                            h_.sketch_offset);
    }
    uint64_t cell_of(uint64_t tag, int k) const;
    void remember(const Bucket &b, int i, int64_t now);

    // The key's slot: its first bucket, then its second.
    Slot locate(uint64_t tag) const
    {
        Bucket *b = const_cast<Table *>(this)->buckets();
        // (the second bucket's index is worked out only for a key not in
        // its first: most keys are)
        for (int k = 0; k < 2; k++) {
            Bucket *at = &b[k == 0 ? first(tag) : second(tag)];
            for (int s = 0; s < 3; s++) {
                if (at->tag[s] == tag) {
                    return Slot{at, s};
                }
            }
        }
        return Slot{nullptr, 0};
    }
    void undo();
    Slot insert(uint64_t tag, int64_t now);
    Slot make_room(uint32_t b1, uint32_t b2, int64_t now);
    bool cuckoo_path(uint32_t b1, uint32_t b2, int64_t now, Slot *out);
    static uint64_t weight(const Bucket &b, int i, int64_t now);
    int free_slot(const Bucket &b, int64_t now) const;
    void vacate(Bucket &b, int i, int64_t now);
    void drop(Slot s, int64_t now);
    bool pool_full(uint32_t pool) const;
    void evict_block(uint32_t pool, int64_t now);
    uint32_t alloc_block(uint32_t pool);
    void free_block(uint32_t handle);

    TableLayout h_;
};

}  // namespace rl
