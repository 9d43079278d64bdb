// The shared-memory key table: fixed-size slots keyed by a 64-bit SipHash of
// (rule identity, key bytes) under a per-table random secret, state inline.
//
// Layout: a header, then buckets of one cache line each holding three slots
// (tag, t, n: 20 bytes a key).  Bucketized cuckoo hashing with two choices:
// a key lives in one of two buckets derived from its tag, so a lookup reads
// at most two cache lines, and the table fills past 90% before it must
// evict.  When a key finds no room (both buckets full and no cuckoo path of
// moves to a free slot), one of its six candidate slots is evicted: a key
// already back to full budget if any (nothing lost), otherwise the one
// that will be back soonest (the least state lost).
//
// Not thread-safe: the caller holds the table's lock.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ratelimit.h"

namespace rl {

struct alignas(64) Bucket {
    uint64_t tag[3];    // 0 = empty slot
    int64_t t[3];       // rl_state_t.t
    uint32_t n[3];      // rl_state_t.n
    uint32_t spare;
};
static_assert(sizeof(Bucket) == 64, "a bucket is one cache line");

struct alignas(64) TableHeader {
    char magic[8];
    uint32_t version;
    uint32_t header_size;
    uint64_t size;          // bytes of the whole block
    uint64_t nbuckets;
    uint8_t secret[16];
    uint64_t keys;          // slots in use
    uint64_t evictions;
    uint64_t live_evictions;
};

class Table {
public:
    static Table *at(void *mem) { return static_cast<Table *>(mem); }
    static const Table *at(const void *mem) { return static_cast<const Table *>(mem); }

    static size_t header_bytes() { return (sizeof(TableHeader) + 63) & ~size_t{63}; }
    static uint64_t buckets_for(size_t size) { return size < header_bytes() ? 0 : (size - header_bytes()) / 64; }

    void init(size_t size, const uint8_t secret[16]);
    bool valid(size_t size) const;

    uint64_t tag(uint64_t identity, const void *key, size_t len) const;
    void prefetch(uint64_t tag) const;

    // The stored state of tag, or false.
    bool find(uint64_t tag, rl_state_t *s) const;
    // Stores tag's state, inserting (and evicting if need be) when absent.
    void store(uint64_t tag, rl_state_t s, int64_t now);

    const TableHeader &header() const { return h_; }

    // The bucket holding tag, or -1 (tests).
    int64_t bucket_of(uint64_t tag) const;

    // The two buckets a tag may live in.
    uint32_t first(uint64_t tag) const { return (uint32_t) (((tag & 0xffffffffu) * h_.nbuckets) >> 32); }
    uint32_t second(uint64_t tag) const { return (uint32_t) (((tag >> 32) * h_.nbuckets) >> 32); }

private:
    struct Slot {
        Bucket *b;
        int i;
    };

    Bucket *buckets() { return reinterpret_cast<Bucket *>(reinterpret_cast<char *>(this) + header_bytes()); }
    const Bucket *buckets() const
    {
        return reinterpret_cast<const Bucket *>(reinterpret_cast<const char *>(this) + header_bytes());
    }
    uint32_t other(uint32_t b, uint64_t tag) const { return b == first(tag) ? second(tag) : first(tag); }

    Slot locate(uint64_t tag);
    Slot make_room(uint32_t b1, uint32_t b2, int64_t now);
    bool cuckoo_path(uint32_t b1, uint32_t b2, int64_t now, Slot *out);
    int free_slot(const Bucket &b, int64_t now) const;
    void vacate(Bucket &b, int i, int64_t now);

    TableHeader h_;
};

}  // namespace rl
