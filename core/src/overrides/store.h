// A zone's overrides (ratelimit_override.h): a store of fixed capacity in
// the zone's shared memory, beside its key table, which links to it.
//
// An entry is found by a 64-bit tag in an open-addressed index (linear
// probing, at most a quarter full, so that a key with no override reads
// one index slot, rarely two), and its rule's identity:
//   - a key's override, in one rule or in every rule keyed on one
//     expression (every_identity: the rules' rl_rule_t.keyed, for
//     identity): the key's hash in the table (Table::hash, the hash its
//     request already has), so that one probe finds both a key's own and
//     its every-rule override, and a key with none reads one slot;
//   - a range's: of_hash of the range's hash (range_hash: the family, the
//     prefix length and the network's address under the table's secret)
//     with the rule's identity or kEveryRule.  The entry's target is
//     compared too: a range's hash is cheap, not a PRF, and ranges are
//     written by operators, not clients.
// A request of a rule keyed on the client's address first reads one bit of
// a filter: for IPv4, whether any range covers the address's /16 (exact);
// for IPv6, whether any range of /32 or longer starts with a /32 hashing
// like the address's (a few false positives), or any range is shorter.
// Only then does it try the prefix lengths the store holds, longest first
// (a mask by family, and by rule or every rule).
//
// Not thread-safe: the caller holds the zone's lock.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ratelimit.h"
#include "ratelimit_override.h"

namespace rl {

class Table;

// The identity standing for "every rule of the zone" in a range's tag.
constexpr uint64_t kEveryRule = 0x6f76657272696465ull;

struct OverrideEntry {
    uint64_t tag;       // 0: a free entry
    uint64_t identity;  // its rule's (every_identity: every rule's; 0: a
                        // rule not configured since the last reload, which
                        // no request meets)
    rl_override_t ov;
};

// The identity of an override of every rule: a range's kEveryRule (it
// meets every rule keyed on the client's address); a key's, the keyed of
// the rules keyed on its expression (rl_rule_keyed of target.keyed).
uint64_t every_identity(const rl_override_target_t &t);

inline bool every_rule(const rl_override_target_t &t)
{
    return t.rule[0] == '\0';
}

struct IndexSlot {
    uint64_t tag;
    uint32_t entry;  // its entry + 1; 0: never used; kTomb: removed
    uint32_t pad;
};
constexpr uint32_t kTomb = 0xffffffffu;

// The prefix lengths ranges use: a family's masks (by rule, by every rule),
// and how many ranges of each length, to clear a bit when the last goes.
struct PrefixLengths {
    uint64_t mask[2][3];  // [by rule, every rule][bits 0..191]
    uint32_t count[2][129];
};

// The filters (see above): a bit a /16 of IPv4, a bit a hash of a /32 of
// IPv6, and how many IPv6 ranges are shorter than /32.
constexpr uint32_t kFilterBits = 65536;
struct Filters {
    uint64_t v4[kFilterBits / 64];
    uint64_t v6[kFilterBits / 64];
    uint32_t v6_short;
    uint32_t pad;
};

// The store's books at its start: its size and index, its free entries,
// its changes and the versions it holds.
struct alignas(64) StoreBooks {
    char magic[8];
    uint32_t version;
    uint32_t capacity;
    uint32_t index_size;  // a power of two, at least 4 x capacity
    uint64_t entries_at;  // bytes from the store's start to its entries
    uint32_t held;
    uint32_t tombs;      // index slots marked removed
    uint32_t free_head;  // a free entry + 1; 0: take `fresh`
    uint32_t fresh;      // entries [fresh, capacity) never used
    uint32_t remote;     // a copy of a Redis zone's (rl_overrides_remote)
    uint64_t change;     // one more at each change
    uint64_t written;    // the change the file holds
    uint64_t source;     // remote: the version of Redis's it holds,
    uint64_t source_id;  //   of the hash made then
    uint64_t said;       // remote: what was said of it last
                         // (rl_overrides_said)
    // the soonest expiry after next_after, while next_valid (no change
    // since): a timer's look costs a compare, not a walk
    int64_t next_after;
    int64_t next_expiry;
    uint32_t next_valid;
    // entries by kind of target: a request looks only where some are
    uint32_t keys_rule;   // a key's, in one rule
    uint32_t keys_every;  // a key's, in every rule
    uint32_t ranges;
    PrefixLengths lengths[2];  // IPv4, IPv6
    Filters filters;
};

class Store {
public:
    static size_t bytes(uint32_t capacity);
    static Store *of(Table *table);
    static const Store *of(const Table *table);

    void init(uint32_t capacity);
    bool valid(uint32_t capacity) const;

    // The entry of a tag in the rule of `identity` (expired or not), or
    // nullptr.
    const OverrideEntry *find(uint64_t tag, uint64_t identity) const
    {
        const IndexSlot *ix = index();
        const uint32_t mask = h_.index_size - 1;
        for (uint32_t i = (uint32_t) tag & mask; ix[i].entry != 0; i = (i + 1) & mask) {
            if (ix[i].tag == tag && ix[i].entry != kTomb && entries()[ix[i].entry - 1].identity == identity) {
                return &entries()[ix[i].entry - 1];
            }
        }
        return nullptr;
    }
    // A key's overrides by its hash, in one probe: its own in the rule of
    // `identity` (returned, expired or not), else its own in every rule
    // keyed on the rule's expression (*every: the identity `keyed`, the
    // rule's rl_rule_t.keyed; expired or not; found before its own, it may
    // be set too).
    const OverrideEntry *find_key(uint64_t hash, uint64_t identity, uint64_t keyed, const OverrideEntry **every) const
    {
        const IndexSlot *ix = index();
        const uint32_t mask = h_.index_size - 1;
        for (uint32_t i = (uint32_t) hash & mask; ix[i].entry != 0; i = (i + 1) & mask) {
            if (ix[i].tag == hash && ix[i].entry != kTomb) {
                const OverrideEntry *e = &entries()[ix[i].entry - 1];
                if (e->identity == identity) {
                    return e;
                }
                *every = e->identity == keyed ? e : *every;
            }
        }
        return nullptr;
    }
    // The longest unexpired range holding a client's address (4 or 16
    // bytes), in the rule of `identity` or in every rule.
    const OverrideEntry *find_range(const Table &table, int family, const uint8_t *addr, uint64_t identity,
                                    int64_t now) const;
    bool has_ranges(int family) const;
    // Whether no range of the store holds the address (a bit read; false:
    // one may).
    bool filtered_out(int family, const uint8_t *addr) const
    {
        const Filters &f = h_.filters;
        if (family == 4) {
            const uint32_t i = (uint32_t) addr[0] << 8 | addr[1];
            return !(f.v4[i / 64] >> (i % 64) & 1);
        }
        if (f.v6_short != 0) {
            return false;
        }
        const uint32_t i = v6_bit(addr);
        return !(f.v6[i / 64] >> (i % 64) & 1);
    }
    // An IPv6 address's bit in its filter: a hash of its /32.
    static uint32_t v6_bit(const uint8_t *addr);
    uint32_t keys() const { return h_.keys_rule | h_.keys_every; }
    uint32_t ranges() const { return h_.ranges; }

    // The entry of a target in a rule of `identity`; writes; removal.
    OverrideEntry *lookup(const Table &table, const rl_override_target_t &t, uint64_t identity);
    // A new entry for the target (nullptr: full); its tag set, indexed.
    OverrideEntry *add(const Table &table, const rl_override_target_t &t, uint64_t identity);
    void remove(OverrideEntry *e);
    // Every entry removed.
    void clear();
    // Every entry's tag worked out again (after a reload, the rules'
    // identities by name): the index rebuilt.
    void retag(const Table &table, const rl_override_rule_t *rules, size_t n);

    uint32_t held() const { return h_.held; }
    uint32_t capacity() const { return h_.capacity; }
    uint32_t used_entries() const { return h_.fresh; }
    uint64_t change() const { return h_.change; }
    void changed()
    {
        h_.change++;
        h_.next_valid = 0;
    }
    // The soonest expiry after `after` (0: none).
    int64_t next_expiry(int64_t after);
    StoreBooks &books() { return h_; }
    const StoreBooks &books() const { return h_; }
    OverrideEntry *entries()
    {
        return reinterpret_cast<OverrideEntry *>(reinterpret_cast<char *>(this) + h_.entries_at);
    }
    const OverrideEntry *entries() const { return const_cast<Store *>(this)->entries(); }

    static uint64_t tag_of(const Table &table, const rl_override_target_t &t, uint64_t identity);
    // The tag in the key table of the key an entry names (not a range's).
    static uint64_t key_tag(const OverrideEntry &e);
    static uint64_t range_hash(const Table &table, int family, uint32_t prefix, const uint8_t *addr);

private:
    static size_t entries_offset(uint32_t index_size)
    {
        return sizeof(StoreBooks) + (size_t) index_size * sizeof(IndexSlot);
    }
    IndexSlot *index() { return reinterpret_cast<IndexSlot *>(reinterpret_cast<char *>(this) + sizeof(StoreBooks)); }
    const IndexSlot *index() const { return const_cast<Store *>(this)->index(); }
    void index_put(uint64_t tag, uint32_t entry);
    void index_drop(uint64_t tag, uint32_t entry);
    void rebuild();
    void note_length(const OverrideEntry &e, int delta);
    void filter_add(const OverrideEntry &e);
    void filters_rebuild();
    void count_kind(const OverrideEntry &e, int delta);

    StoreBooks h_;
};

// The rule as an override's limits apply to it (rl_override_apply).
void apply_override(const rl_rule_t &rule, const rl_override_t &ov, rl_rule_t &out);

// A key's state under a rule, rewritten from the parameters `from` to
// `to` as at `at`, owing the same units (the algorithm's carry); nothing
// if the table does not hold the key.
void carry_key(Table &table, uint64_t tag, const rl_rule_t &from, const rl_rule_t &to, int64_t at);

// Whether two targets are the same (rule, kind, key or range, keyed).
bool same_target(const rl_override_target_t &a, const rl_override_target_t &b);

// An address as a rule keyed on it gives it: 4 or 16 bytes (the binary
// $binary_remote_addr, or the text of $remote_addr; an IPv4-mapped one as
// its IPv4 address); its family, or 0.
int client_address(const rl_rule_t &rule, const void *key, size_t len, uint8_t out[16]);

}  // namespace rl
