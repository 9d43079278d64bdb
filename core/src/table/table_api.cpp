// The table's C API (core/include/ratelimit.h): sizing, laying out and
// validating a zone, and the per-rule counters and figures of the stats.
#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "table/table.h"

extern "C" {

size_t rl_table_min_size(void)
{
    // and the least summary, and one rule's top keys
    return rl::Table::layout_bytes(RL_RULE_STATS_MAX) + rl::kMinBuckets * sizeof(rl::Bucket) + 64 +
           rl::TopList::bytes(false);
}

uint32_t rl_table_stack(uint64_t slots, uint64_t blocks)
{
    // (past 64 slots a block the buckets' share is two thirds anyway)
    return blocks == 0 ? 0 : slots >= 64 * blocks ? 64 * 16 : (uint32_t) (slots * 16 / blocks);
}

int rl_table_plan(size_t size, const uint32_t *blob_sizes, size_t n, char *err, size_t errlen)
{
    return rl_table_plan_names(size, blob_sizes, n, 0, 0, err, errlen);
}

int rl_table_plan_names(size_t size, const uint32_t *blob_sizes, size_t n, size_t names, uint32_t slots16, char *err,
                        size_t errlen)
{
    rl::Layout layout;
    return rl::Table::plan(size, blob_sizes, n, rl::Table::rules_room(names), slots16, &layout, err, errlen) ? RL_OK
                                                                                                             : RL_ERROR;
}

int rl_table_init(void *mem, size_t size, const uint32_t *blob_sizes, size_t n, const uint8_t *secret, char *err,
                  size_t errlen)
{
    return rl_table_init_names(mem, size, blob_sizes, n, 0, 0, secret, err, errlen);
}

int rl_table_init_names(void *mem, size_t size, const uint32_t *blob_sizes, size_t n, size_t names, uint32_t slots16,
                        const uint8_t *secret, char *err, size_t errlen)
{
    try {
        rl::Layout layout;
        if (((uintptr_t) mem & 63) != 0) {
            std::snprintf(err, errlen, "table memory must be 64-byte aligned");
            return RL_ERROR;
        }
        if (!rl::Table::plan(size, blob_sizes, n, rl::Table::rules_room(names), slots16, &layout, err, errlen)) {
            return RL_ERROR;
        }
        uint8_t key[16];
        if (secret != nullptr) {
            std::memcpy(key, secret, sizeof(key));
        } else if (getrandom(key, sizeof(key), 0) != (ssize_t) sizeof(key)) {
            std::snprintf(err, errlen, "getrandom() failed: %s", std::strerror(errno));
            return RL_ERROR;
        }
        rl::Table::at(mem)->init(size, layout, key);
        return RL_OK;
    } catch (...) {
        std::snprintf(err, errlen, "internal error");
        return RL_ERROR;
    }
}

int rl_table_valid(const void *mem, size_t size, const uint32_t *blob_sizes, size_t n)
{
    rl::Layout layout;
    char err[RL_ERR_MAX];
    // the room for rule names and the stack the table was laid out with (a
    // reload may bring more names, or fewer, or stack rules otherwise: the
    // zone is kept, see rl_table_rule_room)
    const rl::TableLayout &h = rl::Table::at(mem)->layout();
    return h.rules_max <= rl::kRulesRoomMax &&
                   rl::Table::plan(size, blob_sizes, n, h.rules_max, h.slots16, &layout, err, sizeof(err)) &&
                   rl::Table::at(mem)->valid(size, layout)
               ? 1
               : 0;
}

uint64_t rl_table_bytes_used(const void *mem)
{
    const rl::TableLayout &h = rl::Table::at(mem)->layout();
    uint64_t used =
        h.layout_size + (h.counts.keys * sizeof(rl::Bucket) + 2) / 3 + h.ncells * sizeof(uint64_t) + h.top_used;
    for (uint32_t i = 0; i < h.npools; i++) {
        used += (uint64_t) h.pools[i].used * h.pools[i].block_size;
    }
    return used;
}

int rl_table_rule_slot(void *mem, const char *name)
{
    return rl::Table::at(mem)->claim_rule(name);
}

size_t rl_table_rule_room(const void *mem)
{
    return rl::Table::at(mem)->layout().rules_max;
}

size_t rl_table_rules_counted(const void *mem)
{
    const rl::TableLayout &h = rl::Table::at(mem)->layout();
    return std::min(__atomic_load_n(&h.nrules, __ATOMIC_ACQUIRE), h.rules_max);
}

void rl_table_count(void *mem, int slot, int outcome)
{
    rl::Table::at(mem)->count(slot, outcome);
}

size_t rl_table_rule_stats(const void *mem, rl_rule_stats_t *out, size_t max)
{
    const rl::TableLayout &h = rl::Table::at(mem)->layout();
    const rl::RuleCounters *rules = rl::Table::at(mem)->counters();
    size_t n = 0;
    for (uint32_t i = 0; i < h.nrules && i < h.rules_max && n < max; i++, n++) {
        std::memcpy(out[n].name, rules[i].name, RL_NAME_MAX);
        for (int k = 0; k < RL_OUTCOMES; k++) {
            out[n].count[k] = __atomic_load_n(&rules[i].count[k], __ATOMIC_RELAXED);
        }
        out[n].charged = __atomic_load_n(&rules[i].charged, __ATOMIC_RELAXED);
        out[n].debts = __atomic_load_n(&rules[i].debts, __ATOMIC_RELAXED);
        const int64_t flight = __atomic_load_n(&rules[i].flight, __ATOMIC_RELAXED);
        out[n].in_flight = flight > 0 ? (uint64_t) flight : 0;
        out[n].peak = (uint64_t) __atomic_load_n(&rules[i].peak, __ATOMIC_RELAXED);
        out[n].waited = __atomic_load_n(&rules[i].waited, __ATOMIC_RELAXED);
        out[n].bans = __atomic_load_n(&rules[i].bans, __ATOMIC_RELAXED);
        out[n].dry_run_bans = __atomic_load_n(&rules[i].dry_run_bans, __ATOMIC_RELAXED);
        out[n].overridden = __atomic_load_n(&rules[i].overridden, __ATOMIC_RELAXED);
        out[n].limit_now = __atomic_load_n(&rules[i].limit_now, __ATOMIC_RELAXED);
        out[n].baseline_us = __atomic_load_n(&rules[i].baseline_us, __ATOMIC_RELAXED);
        out[n].recent_us = __atomic_load_n(&rules[i].recent_us, __ATOMIC_RELAXED);
        out[n].bytes = __atomic_load_n(&rules[i].bytes, __ATOMIC_RELAXED);
        out[n].second = (uint64_t) __atomic_load_n(&rules[i].second, __ATOMIC_RELAXED);
        out[n].second_bytes = __atomic_load_n(&rules[i].second_bytes, __ATOMIC_RELAXED);
        out[n].previous_bytes = __atomic_load_n(&rules[i].previous_bytes, __ATOMIC_RELAXED);
        const int64_t conns = __atomic_load_n(&rules[i].connections, __ATOMIC_RELAXED);
        out[n].connections = conns > 0 ? (uint64_t) conns : 0;
        const int64_t delayed = __atomic_load_n(&rules[i].delayed, __ATOMIC_RELAXED);
        out[n].delayed_now = delayed > 0 ? (uint64_t) delayed : 0;
        out[n].bytes_per_second = 0;
    }
    return n;
}

void rl_table_get_stats(const void *mem, rl_table_stats_t *st)
{
    const rl::TableLayout &h = rl::Table::at(mem)->layout();
    st->size = h.size;
    st->capacity = h.nbuckets * 3;
    st->keys = h.counts.keys;
    st->evictions = h.counts.evictions;
    st->live_evictions = h.counts.live_evictions;
    st->summary_refusals = h.counts.summary_refusals;
    st->summary_bytes = h.ncells * sizeof(uint64_t);
    st->blocks = 0;
    st->blocks_used = 0;
    for (uint32_t i = 0; i < h.npools; i++) {
        st->blocks += h.pools[i].blocks;
        st->blocks_used += h.pools[i].used;
    }
}

}  // extern "C"
