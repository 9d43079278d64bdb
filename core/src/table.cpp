#include "table.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "siphash.h"

namespace rl {

namespace {

const char kMagic[8] = {'R', 'L', 'T', 'A', 'B', 'L', 'E', '1'};
const uint32_t kVersion = 1;

// Buckets a cuckoo search may visit before giving up and evicting.  Enough
// to fill past 90% (tests/table_test.cc measures it); small enough that an
// insert into a full table stays a few microseconds.
const int kSearchBuckets = 32;

void move_slot(Bucket &to, int ti, Bucket &from, int fi)
{
    to.tag[ti] = from.tag[fi];
    to.t[ti] = from.t[fi];
    to.n[ti] = from.n[fi];
}

}  // namespace

void Table::init(size_t size, const uint8_t secret[16])
{
    std::memset(this, 0, header_bytes());
    std::memcpy(h_.magic, kMagic, sizeof(kMagic));
    h_.version = kVersion;
    h_.header_size = (uint32_t) header_bytes();
    h_.size = size;
    uint64_t nb = buckets_for(size);
    h_.nbuckets = nb > 0xffffffffu ? 0xffffffffu : nb;   // bucket indexes are 32-bit
    std::memcpy(h_.secret, secret, 16);
    std::memset(buckets(), 0, h_.nbuckets * sizeof(Bucket));
}

bool Table::valid(size_t size) const
{
    return std::memcmp(h_.magic, kMagic, sizeof(kMagic)) == 0 && h_.version == kVersion &&
           h_.header_size == header_bytes() && h_.size == size && h_.nbuckets >= 1 &&
           h_.nbuckets <= buckets_for(size);
}

uint64_t Table::tag(uint64_t identity, const void *key, size_t len) const
{
    uint8_t id[8];
    for (int i = 0; i < 8; i++) {
        id[i] = (uint8_t) (identity >> (8 * i));
    }
    SipHash h(h_.secret);
    h.update(id, sizeof(id));
    h.update(key, len);
    uint64_t t = h.finish();
    return t != 0 ? t : 1;   // 0 marks an empty slot
}

void Table::prefetch(uint64_t tag) const
{
    __builtin_prefetch(&buckets()[first(tag)], 1);
    __builtin_prefetch(&buckets()[second(tag)], 1);
}

Table::Slot Table::locate(uint64_t tag)
{
    Bucket *b = buckets();
    for (uint32_t i : {first(tag), second(tag)}) {
        for (int s = 0; s < 3; s++) {
            if (b[i].tag[s] == tag) {
                return Slot{&b[i], s};
            }
        }
    }
    return Slot{nullptr, 0};
}

int64_t Table::bucket_of(uint64_t tag) const
{
    Slot slot = const_cast<Table *>(this)->locate(tag);
    return slot.b == nullptr ? -1 : slot.b - buckets();
}

bool Table::find(uint64_t tag, rl_state_t *s) const
{
    Slot slot = const_cast<Table *>(this)->locate(tag);
    if (slot.b == nullptr) {
        return false;
    }
    s->t = slot.b->t[slot.i];
    s->n = slot.b->n[slot.i];
    return true;
}

void Table::store(uint64_t tag, rl_state_t s, int64_t now)
{
    Slot slot = locate(tag);
    if (slot.b == nullptr) {
        slot = make_room(first(tag), second(tag), now);
        slot.b->tag[slot.i] = tag;
    }
    slot.b->t[slot.i] = s.t;
    slot.b->n[slot.i] = s.n;
}

// An empty slot, else one whose key is back to full budget, else -1.
int Table::free_slot(const Bucket &b, int64_t now) const
{
    int expired = -1;
    for (int s = 0; s < 3; s++) {
        if (b.tag[s] == 0) {
            return s;
        }
        if (expired < 0 && b.t[s] < now) {
            expired = s;
        }
    }
    return expired;
}

// Accounts for the key (if any) about to be overwritten in b's slot i.
void Table::vacate(Bucket &b, int i, int64_t now)
{
    if (b.tag[i] == 0) {
        h_.keys++;
        return;
    }
    h_.evictions++;
    if (b.t[i] >= now) {
        h_.live_evictions++;
    }
}

Table::Slot Table::make_room(uint32_t b1, uint32_t b2, int64_t now)
{
    Bucket *b = buckets();

    // An empty slot in the emptier bucket keeps the two choices balanced.
    int e1 = 0, e2 = 0;
    for (int s = 0; s < 3; s++) {
        e1 += b[b1].tag[s] == 0;
        e2 += b[b2].tag[s] == 0;
    }
    uint32_t pick = e1 >= e2 ? b1 : b2;
    if (e1 + e2 == 0) {
        int f = free_slot(b[b1], now);   // no empty slot: an expired key then
        pick = b1;
        if (f < 0) {
            f = free_slot(b[b2], now);
            pick = b2;
        }
        if (f >= 0) {
            vacate(b[pick], f, now);
            return Slot{&b[pick], f};
        }
        Slot path;
        if (cuckoo_path(b1, b2, now, &path)) {
            return path;
        }
        // Full: evict the candidate that will be back to full budget soonest.
        Slot victim{&b[b1], 0};
        for (uint32_t i : {b1, b2}) {
            for (int s = 0; s < 3; s++) {
                if (b[i].t[s] < victim.b->t[victim.i]) {
                    victim = Slot{&b[i], s};
                }
            }
        }
        vacate(*victim.b, victim.i, now);
        return victim;
    }
    int f = free_slot(b[pick], now);
    vacate(b[pick], f, now);
    return Slot{&b[pick], f};
}

// Breadth-first search for a chain of moves, each key to its other bucket,
// that frees a slot in b1 or b2.  On success the moves are done and out is
// the freed slot.
bool Table::cuckoo_path(uint32_t b1, uint32_t b2, int64_t now, Slot *out)
{
    struct Node {
        uint32_t bucket;
        int parent;     // index in q, -1 for b1 and b2
        int slot;       // slot of the parent whose key would move here
    };
    Node q[kSearchBuckets];
    int qn = 0;
    Bucket *b = buckets();

    q[qn++] = Node{b1, -1, 0};
    if (b2 != b1) {
        q[qn++] = Node{b2, -1, 0};
    }

    for (int h = 0; h < qn; h++) {
        const uint32_t here = q[h].bucket;
        for (int s = 0; s < 3; s++) {
            const uint32_t alt = other(here, b[here].tag[s]);
            if (alt == here) {
                continue;
            }
            int f = free_slot(b[alt], now);
            if (f >= 0) {
                // Shift keys along the path, from its free end back to the start.
                vacate(b[alt], f, now);
                move_slot(b[alt], f, b[here], s);
                int node = h, hole = s;
                while (q[node].parent >= 0) {
                    const Node &nd = q[node];
                    move_slot(b[nd.bucket], hole, b[q[nd.parent].bucket], nd.slot);
                    hole = nd.slot;
                    node = nd.parent;
                }
                *out = Slot{&b[q[node].bucket], hole};
                return true;
            }
            bool seen = false;
            for (int k = 0; k < qn && !seen; k++) {
                seen = q[k].bucket == alt;
            }
            if (!seen && qn < kSearchBuckets) {
                q[qn++] = Node{alt, h, s};
            }
        }
    }
    return false;
}

}  // namespace rl

extern "C" {

size_t rl_table_min_size(void)
{
    return rl::Table::header_bytes() + 16 * sizeof(rl::Bucket);
}

uint64_t rl_table_capacity_for(size_t size)
{
    uint64_t nb = rl::Table::buckets_for(size);
    return (nb > 0xffffffffu ? 0xffffffffu : nb) * 3;
}

int rl_table_init(void *mem, size_t size, const uint8_t *secret, char *err, size_t errlen)
{
    try {
        if (((uintptr_t) mem & 63) != 0 || size < rl_table_min_size()) {
            std::snprintf(err, errlen, "table memory must be 64-byte aligned and at least %zu bytes",
                          rl_table_min_size());
            return RL_ERROR;
        }
        uint8_t key[16];
        if (secret != nullptr) {
            std::memcpy(key, secret, sizeof(key));
        } else if (getrandom(key, sizeof(key), 0) != (ssize_t) sizeof(key)) {
            std::snprintf(err, errlen, "getrandom() failed: %s", std::strerror(errno));
            return RL_ERROR;
        }
        rl::Table::at(mem)->init(size, key);
        return RL_OK;
    } catch (...) {
        std::snprintf(err, errlen, "internal error");
        return RL_ERROR;
    }
}

int rl_table_valid(const void *mem, size_t size)
{
    return rl::Table::at(mem)->valid(size) ? 1 : 0;
}

void rl_table_get_stats(const void *mem, rl_table_stats_t *st)
{
    const rl::TableHeader &h = rl::Table::at(mem)->header();
    st->size = h.size;
    st->capacity = h.nbuckets * 3;
    st->keys = h.keys;
    st->evictions = h.evictions;
    st->live_evictions = h.live_evictions;
}

}  // extern "C"
