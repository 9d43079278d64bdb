// What makes the table safe to die in: every operation saves each cache
// line before its first change (the journal), and the next lock holder puts
// back what a process killed mid-operation left half done (recover).  And
// check(), every invariant of the table, which the tests run after every
// operation and after every injected crash.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "table/table.h"

// Fault injection (tests/fault_test.cc): a build with RL_FAULT_INJECTION
// can abandon an operation at any step, as a process killed there would.
#include "util/fault.h"

namespace rl {

void Table::begin()
{
    recover();
    h_.journal.lines = 0;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    h_.journal.active = 1;
    std::atomic_signal_fence(std::memory_order_seq_cst);
}

void Table::commit()
{
    std::atomic_signal_fence(std::memory_order_seq_cst);
    h_.journal.active = 0;
}

// Saves p's cache line, once an operation, before its first change.  The
// line goes in first, then the count: a process dying in between has not
// changed the line yet.
void Table::save(const void *p)
{
    Journal &j = h_.journal;
    const uint64_t off = (uint64_t) (reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(this)) & ~63ull;
    for (uint32_t i = 0; i < j.lines; i++) {
        if (j.offset[i] == off) {
            return;
        }
    }
    RL_STEP();
    if (j.lines == (uint32_t) kJournalLines) {
        std::abort();  // unreachable: an operation changes at most 45 lines (see kJournalLines)
    }
    j.offset[j.lines] = off;
    std::memcpy(j.saved[j.lines], reinterpret_cast<const char *>(this) + off, 64);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    j.lines++;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    RL_STEP();
}

// Puts back every line the interrupted operation saved, newest first (a
// line is saved once, so the order does not matter), and clears the journal
// last: a process dying while recovering leaves it to the next one, which
// does it again.
void Table::undo()
{
    Journal &j = h_.journal;
    const uint32_t lines = j.lines < (uint32_t) kJournalLines ? j.lines : (uint32_t) kJournalLines;
    for (uint32_t i = lines; i-- > 0;) {
        if (j.offset[i] + 64 <= h_.size && j.offset[i] >= offsetof(TableLayout, counts)) {
            std::memcpy(reinterpret_cast<char *>(this) + j.offset[i], j.saved[i], 64);
        }
    }
    std::atomic_signal_fence(std::memory_order_seq_cst);
    j.lines = 0;
    j.active = 0;
}

bool Table::check(std::string *why) const
{
    auto fail = [why](const std::string &what) {
        if (why != nullptr) {
            *why = what;
        }
        return false;
    };
    if (h_.journal.active) {
        return fail("an operation is under way");
    }
    const Bucket *b = buckets();
    std::unordered_set<uint64_t> tags;
    std::unordered_map<uint32_t, uint64_t> owner_of;  // block handle -> tag
    uint64_t keys = 0;
    for (uint64_t i = 0; i < h_.nbuckets; i++) {
        for (int s = 0; s < 3; s++) {
            const uint64_t tag = b[i].tag[s];
            const std::string where = "bucket " + std::to_string(i) + " slot " + std::to_string(s);
            if (tag == 0) {
                if (b[i].meta & slot_bits(s)) {
                    return fail(where + ": empty, with a block or a debt");
                }
                continue;
            }
            keys++;
            if (!tags.insert(tag).second) {
                return fail(where + ": a key held twice");
            }
            if (first(tag) != i && second(tag) != i) {
                return fail(where + ": a key in neither of its buckets");
            }
            if (!has_block(b[i].meta, s)) {
                continue;
            }
            const uint32_t handle = b[i].n[s], pool = handle >> 24, idx = handle & (kBlocksMax - 1);
            if (pool >= h_.npools || idx >= h_.pools[pool].fresh) {
                return fail(where + ": a block out of its pool");
            }
            if (!owner_of.emplace(handle, tag).second) {
                return fail(where + ": a block owned twice");
            }
            uint64_t owner;
            std::memcpy(&owner, block(handle), sizeof(owner));
            if (owner != tag) {
                return fail(where + ": a block that names another owner");
            }
        }
    }
    if (keys != h_.counts.keys) {
        return fail("keys counted " + std::to_string(h_.counts.keys) + ", held " + std::to_string(keys));
    }
    for (uint32_t pool = 0; pool < h_.npools; pool++) {
        const Pool &p = h_.pools[pool];
        uint64_t owned = 0, free = 0;
        for (const auto &o : owner_of) {
            owned += o.first >> 24 == pool;
        }
        std::unordered_set<uint32_t> seen;
        for (uint32_t next = p.free_head; next != 0; free++) {
            const uint32_t idx = next - 1;
            if (idx >= p.fresh || !seen.insert(idx).second || owner_of.count(pool << 24 | idx)) {
                return fail("pool " + std::to_string(pool) +
                            ": a free list through a block out of range, "
                            "twice, or owned");
            }
            uint64_t owner;
            std::memcpy(&owner, block(pool << 24 | idx), sizeof(owner));
            std::memcpy(&next, block(pool << 24 | idx) + 8, sizeof(next));
            if (owner != 0) {
                return fail("pool " + std::to_string(pool) + ": a free block with an owner");
            }
        }
        if (p.used != owned || owned + free != p.fresh) {
            return fail("pool " + std::to_string(pool) + ": " + std::to_string(owned) + " blocks owned, " +
                        std::to_string(free) + " free, " + std::to_string(p.used) + " counted used, " +
                        std::to_string(p.fresh) + " ever used");
        }
    }
    if (h_.top_used > h_.top_bytes) {
        return fail("top keys: more room claimed than there is");
    }
    if (h_.nrules > h_.rules_max) {
        return fail("rule counters: more claimed than there is room for");
    }
    for (uint32_t i = 0; i < h_.nrules; i++) {
        const uint64_t top = counters()[i].top;
        if (top != 0 && top != kTopNoRoom && top_list((int) i) == nullptr) {
            return fail("rule " + std::to_string(i) + ": top keys out of their room");
        }
    }
    return true;
}

}  // namespace rl
