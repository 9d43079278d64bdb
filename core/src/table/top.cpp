// The keys a rule refuses most: a Space-Saving summary (Metwally, Agrawal
// and El Abbadi, 2005) of RL_TOP_ENTRIES entries an epoch, in the zone.
//
// A refusal of a key already listed adds one to its count; a key not listed
// takes a free entry with count 1, or, when all are taken, the entry of
// least count c, with count c + 1 and error c (the refusals it may have
// inherited).  So the counts of an epoch add up to its refusals N, the
// least of them is at most N / RL_TOP_ENTRIES, and a key refused more often
// than that in the epoch is always listed; a listed key's count is at most
// its error above its refusals.
//
// "Recent" is two epochs of RL_TOP_EPOCH_MS: the current one and the one
// before, each counted in its own half, chosen by parity; a half is emptied
// when its epoch comes round again.  Read, the halves are added up by key:
// a key refused more than (the window's refusals / RL_TOP_ENTRIES) times in
// the window is more than that in one of its epochs, hence listed.  Fixed
// memory, no allocation, a few cache lines a refusal.
//
// A bandwidth rule's list counts the KiB its slices grant each key (a
// weight a grant, rounded up) instead of refusals: the same summary by
// weight, whose bounds hold in KiB.
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "table/table.h"

namespace rl {

namespace {

int64_t epoch_of(int64_t now)
{
    return floor_div(now, RL_TOP_EPOCH_MS);
}

uint32_t add_saturated(uint32_t count, uint32_t weight)
{
    return count > UINT32_MAX - weight ? UINT32_MAX : count + weight;
}

uint32_t in_use(uint32_t used)
{
    return used < RL_TOP_ENTRIES ? used : RL_TOP_ENTRIES;  // a process may have died writing it
}

}  // namespace

void TopList::note(uint64_t tag, const void *bytes, size_t len, int64_t now, uint32_t weight)
{
    const int64_t e = epoch_of(now);
    const uint32_t h = (uint32_t) (e & 1);
    if (epoch[h] != e) {
        used[h] = 0;
        epoch[h] = e;
    }
    TopEntry *entry = half[h];
    const uint32_t n = in_use(used[h]);
    for (uint32_t i = 0; i < n; i++) {
        if (entry[i].tag == tag) {
            entry[i].count = add_saturated(entry[i].count, weight);
            return;
        }
    }
    uint32_t i = n;
    if (n < RL_TOP_ENTRIES) {
        entry[i] = TopEntry{tag, weight, 0};
        used[h] = n + 1;
    } else {
        i = 0;
        for (uint32_t k = 1; k < n; k++) {
            if (entry[k].count < entry[i].count) {
                i = k;
            }
        }
        const uint32_t least = entry[i].count;
        entry[i] = TopEntry{tag, add_saturated(least, weight), least};
    }
    if (keys) {
        uint8_t *k = key(h, i);
        const size_t kept = bytes == nullptr ? 0 : std::min<size_t>(len, RL_TOP_KEY_MAX);
        k[0] = (uint8_t) (kept | (bytes != nullptr && len > kept ? 0x80 : 0));
        if (kept) {
            std::memcpy(k + 1, bytes, kept);
        }
    }
}

void TopList::read(int64_t now, rl_top_t *out) const
{
    const int64_t e = epoch_of(now);
    out->keys = keys != 0;
    out->kib = kib != 0;
    out->refusals = 0;
    out->since_ms = (e - 1) * RL_TOP_EPOCH_MS;
    out->n = 0;
    for (uint32_t h = 0; h < 2; h++) {
        if (epoch[h] != e && epoch[h] != e - 1) {
            continue;  // an epoch gone by
        }
        for (uint32_t i = 0; i < in_use(used[h]); i++) {
            const TopEntry &x = half[h][i];
            out->refusals += x.count;
            if (x.tag == 0) {
                continue;  // a reset key's
            }
            size_t j = 0;
            while (j < out->n && out->top[j].tag != x.tag) {
                j++;
            }
            rl_top_key_t &k = out->top[j];
            if (j == out->n) {
                out->n++;
                k = rl_top_key_t{};
                k.tag = x.tag;
            }
            k.refused += x.count;
            k.error += x.error;
            if (keys && k.key_len == 0) {
                const uint8_t *kept = key(h, i);
                k.key_len = std::min<uint32_t>(kept[0] & 0x7f, RL_TOP_KEY_MAX);
                k.key_cut = k.key_len > 0 && (kept[0] & 0x80) != 0;
                std::memcpy(k.key, kept + 1, k.key_len);
            }
        }
    }
    std::sort(out->top, out->top + out->n, [](const rl_top_key_t &a, const rl_top_key_t &b) {
        return a.refused != b.refused ? a.refused > b.refused : a.error != b.error ? a.error < b.error : a.tag < b.tag;
    });
}

void TopList::forget(uint64_t tag)
{
    for (uint32_t h = 0; h < 2; h++) {
        for (uint32_t i = 0; i < in_use(used[h]); i++) {
            if (half[h][i].tag == tag) {
                half[h][i].tag = 0;
                if (keys) {
                    key(h, i)[0] = 0;
                }
            }
        }
    }
}

}  // namespace rl
