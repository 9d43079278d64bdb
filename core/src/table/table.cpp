#include "table/table.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "util/siphash.h"

// Fault injection (tests/fault_test.cc): a build with RL_FAULT_INJECTION
// can abandon an operation at any step, as a process killed there would.
#include "util/fault.h"

namespace rl {

namespace {

const char kMagic[8] = {'R', 'L', 'T', 'A', 'B', 'L', 'E', '6'};
const uint32_t kVersion = 13;  // a zone of another layout version is laid out afresh
const uint32_t kMinBlocks = 4;

// Buckets a cuckoo search may visit before giving up and evicting.  Enough
// to fill past 90% (tests/table_test.cc measures it); small enough that an
// insert into a full table stays a few microseconds.
const int kSearchBuckets = 32;

// Blocks a full pool looks at to choose the one to evict.
const uint32_t kSweep = 8;

// The eviction summary takes this share of the zone: a 1/50 (2%) fewer
// keys held (keys per MB within 3% of a zone without it), for a memory of what evicted keys owe (README, bench/README.md).
const uint64_t kSketchShare = 50;

// The room for rules' top keys takes this share of the zone (0.8%: 8 KB a
// megabyte), at least one rule's summary without keys in clear and at
// most every counted rule's with them: lists of 1 KB, or 3 KB with keys
// (TopList::bytes), claimed by the rules that refuse first.
const uint64_t kTopShare = 128;

// Cells a key has in the summary: a fresh key is restored only if all of
// them hold a debt, so more cells mean fewer innocent keys restored while
// few are taken; three is most of the gain (bench/summary.cc).
const int kCells = 3;

void move_slot(Bucket &to, int ti, const Bucket &from, int fi)
{
    to.tag[ti] = from.tag[fi];
    RL_STEP();
    to.t[ti] = from.t[fi];
    to.n[ti] = from.n[fi];
    RL_STEP();
    to.meta = (to.meta & ~slot_bits(ti)) | (uint32_t) has_block(from.meta, fi) << ti;
    to.meta = with_debt(to.meta, ti, debt_of(from.meta, fi));
}

// A cell packs Owed: until (ms) above, frac in the low 8 bits.
uint64_t pack(Owed o)
{
    return (uint64_t) o.until << 8 | o.frac;
}
Owed unpack(uint64_t c)
{
    return Owed{(int64_t) (c >> 8), (uint32_t) (c & kFracFull)};
}

// A slot's bytes at the fill a table reaches before it evicts: a bucket's
// 64 bytes hold three, about 90% of them used.
const uint64_t kSlotBytes = 24;

// The buckets' share of the bytes buckets and pools divide.  Without
// blocks, all of them.  With blocks, so that slots and blocks run out
// together for the keys the configuration stacks (slots16 / 16 slots, one
// a rule, for each block of the pools' mean size: a location's rules on one
// zone, one of them with a block, take a slot each and that block), within a
// third (what a rule with a block alone takes, its slot under 2/3 full)
// and two thirds.
uint64_t bucket_bytes_of(uint64_t avail, const uint32_t *sizes, uint32_t npools, uint32_t slots16)
{
    if (npools == 0) {
        return avail;
    }
    uint64_t blocks = 0;
    for (uint32_t i = 0; i < npools; i++) {
        blocks += sizes[i];
    }
    // a block's slots against the pools' mean block, both times 16 npools
    const uint64_t slots = (uint64_t) slots16 * kSlotBytes * npools;
    const uint64_t want = slots == 0 ? 0 : (uint64_t) ((unsigned __int128) avail * slots / (slots + 16 * blocks));
    return std::min(std::max(want, avail / 3), avail / 3 * 2) / 64 * 64;
}

}  // namespace

bool Table::plan(size_t size, const uint32_t *blobs, size_t n, uint32_t rules_max, uint32_t slots16, Layout *out,
                 char *err, size_t errlen)
{
    rules_max = std::max<uint32_t>(rules_max, RL_RULE_STATS_MAX);
    const uint64_t before_buckets = layout_bytes(rules_max);
    uint32_t sizes[kPoolsMax];
    uint32_t npools = 0, largest = 0;

    for (size_t i = 0; i < n; i++) {
        const uint32_t bs = block_size_for(blobs[i]);
        uint32_t at = 0;  // kept sorted: the layout must not depend on rule order
        while (at < npools && sizes[at] < bs) {
            at++;
        }
        if (at < npools && sizes[at] == bs) {
            continue;
        }
        if (npools == kPoolsMax) {
            std::snprintf(err, errlen, "its rules need more than %u different state sizes", kPoolsMax);
            return false;
        }
        for (uint32_t k = npools++; k > at; k--) {
            sizes[k] = sizes[k - 1];
        }
        sizes[at] = bs;
        largest = std::max(largest, bs);
    }

    const uint64_t all = size > before_buckets ? size - before_buckets : 0;
    const uint64_t sketch_bytes = std::max<uint64_t>(64, all / kSketchShare / 64 * 64);
    const uint64_t top_bytes = std::min<uint64_t>(std::max<uint64_t>(TopList::bytes(false), all / kTopShare / 64 * 64),
                                                  rules_max * TopList::bytes(true));
    const uint64_t avail = all > sketch_bytes ? all - sketch_bytes : 0;
    // a stack that would leave a pool too few blocks is planned without it
    uint64_t buckets = bucket_bytes_of(avail, sizes, npools, slots16);
    for (uint32_t i = 0; i < npools; i++) {
        if ((avail - buckets) / npools / 64 * 64 / sizes[i] < kMinBlocks) {
            buckets = bucket_bytes_of(avail, sizes, npools, 0);
        }
    }
    const uint64_t share = npools == 0 ? 0 : (avail - buckets) / npools / 64 * 64;
    // the top keys' room comes out of the buckets' share: the pools, and
    // so the least size of a zone, are as without it
    const uint64_t bucket_bytes = buckets > top_bytes ? buckets - top_bytes : 0;

    *out = Layout{};
    out->nbuckets = std::min<uint64_t>(bucket_bytes / 64, 0xffffffffu);
    out->npools = npools;
    out->rules_max = rules_max;
    out->slots16 = slots16;
    out->sketch_offset = before_buckets + out->nbuckets * 64;
    out->ncells = sketch_bytes / sizeof(uint64_t);
    out->top_offset = out->sketch_offset + sketch_bytes;
    out->top_bytes = top_bytes;

    uint64_t offset = out->top_offset + top_bytes;
    for (uint32_t i = 0; i < npools; i++) {
        Pool &p = out->pools[i];
        p.offset = offset;
        p.block_size = sizes[i];
        p.blocks = (uint32_t) std::min<uint64_t>(share / sizes[i], kBlocksMax);
        offset += share;
        if (p.blocks < kMinBlocks) {
            // with a page to spare for what the embedding puts before the table,
            // and the summary's share
            const uint64_t pools = 3 * (uint64_t) npools * kMinBlocks * largest / 2 + 64 * npools;
            const uint64_t need = 4096 + before_buckets + 64 + pools * kSketchShare / (kSketchShare - 1);
            std::snprintf(err, errlen,
                          "too small for its rules' states of up to %u bytes a key: it needs at least %lluk", largest,
                          (unsigned long long) (need + 1023) / 1024);
            return false;
        }
    }
    if (out->nbuckets < kMinBuckets) {
        // a zone's size, with a page for what the embedding puts before the
        // table, in nginx's size syntax as the message above
        const uint64_t least = before_buckets + kMinBuckets * sizeof(Bucket) + 64 + TopList::bytes(false);
        if (rules_max > RL_RULE_STATS_MAX) {
            std::snprintf(err, errlen, "too small for the counters of its rules' names: it needs at least %lluk",
                          (unsigned long long) (4096 + least + 1023) / 1024);
        } else {
            std::snprintf(err, errlen, "too small: it needs at least %lluk",
                          (unsigned long long) (4096 + least + 1023) / 1024);
        }
        return false;
    }
    return true;
}

// Writes the layout only: the memory after it is zero already (the caller's
// promise, rl_table_init), and zero is an empty table: buckets of free slots
// (tag 0), a summary owing nothing, pools whose blocks are all fresh (a block
// is cleared when first used, alloc_block) and no top list claimed (cleared
// when claimed, top_list).  A zone of any size costs memory as keys arrive.
void Table::init(size_t size, const Layout &layout, const uint8_t secret[16])
{
    std::memset(this, 0, fixed_layout_bytes());  // the counters' room is zero already
    std::memcpy(h_.magic, kMagic, sizeof(kMagic));
    h_.version = kVersion;
    h_.layout_size = (uint32_t) layout_bytes(layout.rules_max);
    h_.rules_max = layout.rules_max;
    h_.names_mask = index_entries(layout.rules_max) - 1;
    h_.slots16 = layout.slots16;
    h_.size = size;
    h_.nbuckets = layout.nbuckets;
    h_.npools = layout.npools;
    std::memcpy(h_.pools, layout.pools, sizeof(h_.pools));
    std::memcpy(h_.secret, secret, 16);
    h_.sketch_offset = layout.sketch_offset;
    h_.ncells = layout.ncells;
    h_.top_offset = layout.top_offset;
    h_.top_bytes = layout.top_bytes;
}

bool Table::valid(size_t size, const Layout &layout) const
{
    if (std::memcmp(h_.magic, kMagic, sizeof(kMagic)) != 0 || h_.version != kVersion ||
        h_.rules_max != layout.rules_max || h_.names_mask != index_entries(layout.rules_max) - 1 ||
        h_.layout_size != layout_bytes(layout.rules_max) || h_.size != size || h_.nbuckets != layout.nbuckets ||
        h_.npools != layout.npools || h_.sketch_offset != layout.sketch_offset || h_.ncells != layout.ncells ||
        h_.top_offset != layout.top_offset || h_.top_bytes != layout.top_bytes) {
        return false;
    }
    for (uint32_t i = 0; i < h_.npools; i++) {
        const Pool &a = h_.pools[i], &b = layout.pools[i];
        if (a.offset != b.offset || a.block_size != b.block_size || a.blocks != b.blocks) {
            return false;
        }
    }
    return true;
}

int Table::pool_for(size_t blob) const
{
    const uint32_t bs = block_size_for(blob);
    for (uint32_t i = 0; i < h_.npools; i++) {
        if (h_.pools[i].block_size == bs) {
            return (int) i;
        }
    }
    return -1;
}

int64_t Table::bucket_of(uint64_t tag) const
{
    Slot slot = locate(tag);
    return slot.b == nullptr ? -1 : slot.b - buckets();
}

uint64_t Table::cell_of(uint64_t tag, int k) const
{
    // the tag is a keyed hash already: the mix only makes the cell indices
    // independent of the bucket indices
    return ((splitmix64_mix(tag + (uint64_t) k * 0x9e3779b97f4a7c15ull) >> 32) * h_.ncells) >> 32;
}

// An evicted key's debt goes into its cells: a cell whose own debt has
// expired takes the key's; a cell still owing takes the larger of each.
//
// Not the debt of a key that came back from the summary and has owed
// something ever since: its cells hold what it owed when it left, and what
// it spent since may sit on another key's debt (the summary cannot tell
// whose).  Adding it would let a flood of new keys raise each other's debts
// generation after generation until every new key is refused.
void Table::remember(const Bucket &b, int i, int64_t now)
{
    const int64_t until = b.t[i];
    const Debt d = debt_of(b.meta, i);
    if (until <= now || d.frac == 0 || d.inherited) {
        return;
    }
    const uint32_t frac = d.frac;
    uint64_t *c = cells();
    for (int k = 0; k < kCells; k++) {
        uint64_t &cell = c[cell_of(b.tag[i], k)];
        save(&cell);
        const Owed was = unpack(cell);
        cell = was.until <= now ? pack(Owed{until, frac})
                                : pack(Owed{std::max(was.until, until), std::max(was.frac, frac)});
    }
    save(&h_.counts);
    h_.counts.sketch_until = std::max(h_.counts.sketch_until, until);
}

Owed Table::owed(uint64_t tag, int64_t now) const
{
    if (h_.counts.sketch_until <= now) {
        return Owed{0, 0};  // every cell's debt has expired
    }
    const uint64_t *c = cells();
    Owed o{INT64_MAX, kFracFull};
    for (int k = 0; k < kCells; k++) {
        const Owed cell = unpack(c[cell_of(tag, k)]);
        if (cell.until <= now) {
            return Owed{0, 0};
        }
        o.until = std::min(o.until, cell.until);
        o.frac = std::min(o.frac, cell.frac);
    }
    return o;
}

Table::Slot Table::insert(uint64_t tag, int64_t now)
{
    Slot slot = make_room(first(tag), second(tag), now);
    save(slot.b);
    slot.b->tag[slot.i] = tag;
    RL_STEP();
    slot.b->t[slot.i] = 0;
    slot.b->n[slot.i] = 0;
    slot.b->meta &= ~slot_bits(slot.i);
    return slot;
}

bool Table::store(uint64_t tag, rl_state_t head, Debt debt, int64_t now)
{
    begin();
    Slot slot = locate(tag);
    const bool inserted = slot.b == nullptr;
    if (inserted) {
        slot = insert(tag, now);
    } else if (has_block(slot.b->meta, slot.i)) {
        save(slot.b);
        free_block(slot.b->n[slot.i]);  // the key's state no longer has a block
        slot.b->meta &= ~(1u << slot.i);
    }
    save(slot.b);
    update(Ref{slot.b, slot.i}, head, debt);
    commit();
    return inserted;
}

State Table::acquire(uint64_t tag, int pool, int64_t now, bool *fresh)
{
    Slot slot = locate(tag);
    if (fresh != nullptr) {
        *fresh = slot.b == nullptr;
    }
    const bool has = slot.b != nullptr && has_block(slot.b->meta, slot.i);
    const bool needs = !has || (slot.b->n[slot.i] >> 24) != (uint32_t) pool;

    // A full pool first gives up a block, in an operation of its own: the
    // block's contents are then nobody's when this one overwrites them.
    // (The key has no block in this pool, so the block is never its own.)
    if (needs && pool_full((uint32_t) pool)) {
        begin();
        evict_block((uint32_t) pool, now);
        commit();
    }

    begin();
    slot = locate(tag);
    if (slot.b == nullptr) {
        slot = insert(tag, now);
    }
    if (needs) {
        save(slot.b);
        if (has_block(slot.b->meta, slot.i)) {
            free_block(slot.b->n[slot.i]);
            slot.b->meta &= ~(1u << slot.i);
        }
        const uint32_t handle = alloc_block((uint32_t) pool);
        std::memcpy(block(handle), &tag, sizeof(tag));
        RL_STEP();
        slot.b->n[slot.i] = handle;
        slot.b->meta |= 1u << slot.i;
    }
    commit();
    return State{rl_state_t{slot.b->t[slot.i], slot.b->n[slot.i]}, block(slot.b->n[slot.i]) + 8};
}

void Table::set_t(uint64_t tag, int64_t t, Debt debt)
{
    Slot slot = locate(tag);
    if (slot.b != nullptr) {
        slot.b->t[slot.i] = t;
        slot.b->meta = with_debt(slot.b->meta, slot.i, debt);
    }
}

bool Table::pool_full(uint32_t pool) const
{
    const Pool &p = h_.pools[pool];
    return p.free_head == 0 && p.fresh >= p.blocks;
}

// Of a few blocks from the hand on, the one whose key is back to full
// budget, else the one owing least, goes back to the free list, and its key
// with it.
void Table::evict_block(uint32_t pool, int64_t now)
{
    Pool &p = h_.pools[pool];
    uint32_t idx = p.hand;
    uint64_t least = UINT64_MAX;
    Slot victim{nullptr, 0};
    for (uint32_t k = 0; k < kSweep && k < p.blocks; k++) {
        const uint32_t i = (p.hand + k) % p.blocks;
        uint64_t owner;
        std::memcpy(&owner, block(pool << 24 | i), sizeof(owner));
        Slot s = locate(owner);
        const bool owns = s.b != nullptr && has_block(s.b->meta, s.i) && s.b->n[s.i] == (pool << 24 | i);
        const uint64_t w = owns ? weight(*s.b, s.i, now) : 0;
        if (w < least) {
            least = w;
            idx = i;
            victim = owns ? s : Slot{nullptr, 0};
        }
        if (w == 0) {
            break;
        }
    }
    save(&p);
    p.hand = (idx + 1) % p.blocks;
    if (victim.b != nullptr) {
        drop(victim, now);
    }
    free_block(pool << 24 | idx);
}

// A block from the free list, or one never used, zeroed: its bytes are
// nobody's, so they need not be saved.
uint32_t Table::alloc_block(uint32_t pool)
{
    Pool &p = h_.pools[pool];
    uint32_t idx;

    save(&p);
    if (p.free_head != 0) {
        idx = p.free_head - 1;
        const uint8_t *blk = block(pool << 24 | idx);
        save(blk);
        std::memcpy(&p.free_head, blk + 8, sizeof(p.free_head));
    } else {
        idx = p.fresh++;
        save(block(pool << 24 | idx));
    }
    p.used++;
    RL_STEP();
    std::memset(block(pool << 24 | idx), 0, p.block_size);
    return pool << 24 | idx;
}

void Table::free_block(uint32_t handle)
{
    Pool &p = h_.pools[handle >> 24];
    uint8_t *blk = block(handle);
    save(blk);
    save(&p);
    std::memset(blk, 0, 8);  // no owner
    std::memcpy(blk + 8, &p.free_head, sizeof(p.free_head));
    RL_STEP();
    p.free_head = (handle & (kBlocksMax - 1)) + 1;
    p.used--;
}

void Table::evict(uint64_t tag, int64_t now)
{
    begin();
    Slot s = locate(tag);
    if (s.b != nullptr) {
        const bool owns = has_block(s.b->meta, s.i);
        const uint32_t handle = s.b->n[s.i];
        drop(s, now);
        if (owns) {
            free_block(handle);
        }
    }
    commit();
}

// A reset: the key leaves the table without a trace in the summary (no
// eviction), and, if the summary says it owes (its own debt from an earlier
// eviction, or other keys' in all three of its cells), the one of its cells
// whose debt ends first is cleared: a key absent from the table starts from
// the least of its cells, so it is fresh then.  The other evicted keys
// counted in that cell are forgiven too (a reset is an operator's act, and
// clearing the cell that ends first forgives the least); no key is made to
// owe more.
int Table::forget(uint64_t tag, int64_t now)
{
    int done = 0;
    begin();
    Slot s = locate(tag);
    if (s.b != nullptr) {
        const bool owns = has_block(s.b->meta, s.i);
        const uint32_t handle = s.b->n[s.i];
        save(s.b);
        save(&h_.counts);
        h_.counts.keys--;
        RL_STEP();
        s.b->tag[s.i] = 0;
        s.b->meta &= ~slot_bits(s.i);
        if (owns) {
            free_block(handle);
        }
        done |= RL_RESET_HELD;
    }
    if (owed(tag, now).until != 0) {
        uint64_t *c = cells();
        uint64_t first = cell_of(tag, 0);
        for (int k = 1; k < kCells; k++) {
            if (unpack(c[cell_of(tag, k)]).until < unpack(c[first]).until) {
                first = cell_of(tag, k);
            }
        }
        save(&c[first]);
        c[first] = 0;
        done |= RL_RESET_FORGIVEN;
    }
    commit();
    for (uint32_t i = 0; i < h_.nrules && i < h_.rules_max; i++) {
        if (TopList *l = top_list((int) i, false, false)) {
            l->forget(tag);
        }
    }
    return done;
}

namespace {

// FNV-1a of a rule name (configuration, not a client's value).
uint32_t name_hash(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < RL_NAME_MAX && name[i] != '\0'; i++) {
        h = (h ^ (uint8_t) name[i]) * 0x100000001b3ull;
    }
    return (uint32_t) (h ^ (h >> 32));
}

}  // namespace

// An index entry names a slot + 1; one naming a slot not claimed yet (a
// claim interrupted between writing it and counting the slot) or of another
// name is passed over, so that an interrupted claim leaves a stale entry
// at worst, never a wrong one.
int Table::find_rule(const char *name, uint32_t *at) const
{
    const uint32_t *index = const_cast<Table *>(this)->names_index();
    const uint32_t nrules = std::min(h_.nrules, h_.rules_max);
    uint32_t free = UINT32_MAX;
    uint32_t i = name_hash(name) & h_.names_mask;
    for (uint32_t probes = 0; probes <= h_.names_mask; probes++, i = (i + 1) & h_.names_mask) {
        const uint32_t e = index[i];
        if (e == 0) {
            break;
        }
        if (e - 1 >= nrules) {
            free = free == UINT32_MAX ? i : free;
        } else if (std::strncmp(counters()[e - 1].name, name, RL_NAME_MAX) == 0) {
            *at = i;
            return (int) (e - 1);
        }
    }
    *at = free != UINT32_MAX ? free : i;
    return -1;
}

int Table::claim_rule(const char *name)
{
    uint32_t at;
    const int found = find_rule(name, &at);
    if (found >= 0) {
        return found;
    }
    if (h_.nrules >= h_.rules_max) {
        return -1;
    }
    const uint32_t slot = h_.nrules;
    RuleCounters &c = counters()[slot];
    std::memset(&c, 0, sizeof(c));
    std::snprintf(c.name, sizeof(c.name), "%s", name);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    names_index()[at] = slot + 1;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    __atomic_store_n(&h_.nrules, slot + 1, __ATOMIC_RELEASE);
    return (int) slot;
}

// The room for top keys is claimed a list at a time, never given back (as
// rule counters are); the list is laid out before the rule points at it, so
// that a process dying in between leaves only unused room.
TopList *Table::top_list(int slot, bool claim, bool keys)
{
    if (slot < 0 || (uint32_t) slot >= h_.rules_max) {
        return nullptr;
    }
    RuleCounters &rc = counters()[slot];
    if (rc.top >= h_.top_offset && rc.top + sizeof(TopList) <= h_.top_offset + h_.top_bytes) {
        TopList *l = reinterpret_cast<TopList *>(reinterpret_cast<char *>(this) + rc.top);
        if (rc.top + TopList::bytes(l->keys != 0) <= h_.top_offset + h_.top_bytes) {
            return l;
        }
    }
    if (!claim || rc.top == kTopNoRoom) {
        return nullptr;
    }
    uint64_t need = TopList::bytes(keys);
    if (h_.top_used + need > h_.top_bytes) {
        need = TopList::bytes(false);  // fingerprints only, then
    }
    if (h_.top_used + need > h_.top_bytes) {
        rc.top = kTopNoRoom;
        return nullptr;
    }
    const uint64_t at = h_.top_offset + h_.top_used;
    TopList *l = reinterpret_cast<TopList *>(reinterpret_cast<char *>(this) + at);
    std::memset(static_cast<void *>(l), 0, need);
    l->keys = need > TopList::bytes(false);
    h_.top_used += need;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    rc.top = at;
    return l;
}

const TopList *Table::top_list(int slot) const
{
    return const_cast<Table *>(this)->top_list(slot, false, false);
}

// Removes a key (its block, if any, is the caller's to free).
void Table::drop(Slot s, int64_t now)
{
    save(s.b);
    save(&h_.counts);
    h_.counts.keys--;
    h_.counts.evictions++;
    if (s.b->t[s.i] >= now) {
        h_.counts.live_evictions++;
        remember(*s.b, s.i, now);
    }
    RL_STEP();
    s.b->tag[s.i] = 0;
    s.b->meta &= ~slot_bits(s.i);
}

// What evicting slot i loses: the fraction its key owes, for as long as it
// owes it.  A key refused for an hour goes after one that spent a unit of
// its budget and owes it for a minute longer.
uint64_t Table::weight(const Bucket &b, int i, int64_t now)
{
    const int64_t left = b.t[i] - now;
    return left < 0 ? 0 : (uint64_t) (debt_of(b.meta, i).frac + 1) * (uint64_t) (left + 1);
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
    save(&b);
    save(&h_.counts);
    if (b.tag[i] == 0) {
        h_.counts.keys++;
        return;
    }
    h_.counts.evictions++;
    if (b.t[i] >= now) {
        h_.counts.live_evictions++;
        remember(b, i, now);
    }
    if (has_block(b.meta, i)) {
        free_block(b.n[i]);
        b.meta &= ~(1u << i);
    }
}

Table::Slot Table::make_room(uint32_t b1, uint32_t b2, int64_t now)
{
    Bucket *b = buckets();

    // The first bucket when it has an empty slot: most keys are then found
    // in the first bucket a lookup reads, which halves the misses of a large
    // zone; the second bucket and cuckoo moves take the rest.
    int e1 = 0, e2 = 0;
    for (int s = 0; s < 3; s++) {
        e1 += b[b1].tag[s] == 0;
        e2 += b[b2].tag[s] == 0;
    }
    uint32_t pick = e1 > 0 ? b1 : b2;
    if (e1 + e2 == 0) {
        int f = free_slot(b[b1], now);  // no empty slot: an expired key then
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
        // Full: evict the candidate that owes the least (its debt goes into
        // the summary).
        Slot victim{&b[b1], 0};
        uint64_t least = UINT64_MAX;
        for (uint32_t i : {b1, b2}) {
            for (int s = 0; s < 3; s++) {
                const uint64_t w = weight(b[i], s, now);
                if (w < least) {
                    least = w;
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
        int parent;  // index in q, -1 for b1 and b2
        int slot;    // slot of the parent whose key would move here
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
                    save(&b[nd.bucket]);
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
