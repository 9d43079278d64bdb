// Shared helpers for the core tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "ratelimit.h"
#include "table/table.h"

inline rl_rule_t rule_of(const std::string &text)
{
    rl_rule_t r;
    char err[RL_ERR_MAX];
    if (rl_rule_parse(&r, text.c_str(), err, sizeof(err)) != RL_OK) {
        ADD_FAILURE() << "rule \"" << text << "\": " << err;
    }
    return r;
}

// A rule as the directive gives it, $variables included (the glue's).
inline rl_rule_t var_rule_of(const std::string &text)
{
    rl_rule_t r;
    rl_rule_init(&r);
    char err[RL_ERR_MAX];
    std::istringstream in(text);
    std::string p;
    while (in >> p) {
        EXPECT_NE(rl_rule_param(&r, p.data(), p.size(), err, sizeof(err)), RL_ERROR) << p << ": " << err;
    }
    EXPECT_EQ(rl_rule_finish(&r, err, sizeof(err)), RL_OK) << text << ": " << err;
    return r;
}

// One key under one rule: the pure transition, with the state kept here.
struct Key {
    rl_rule_t rule;
    std::vector<uint8_t> state;

    explicit Key(const std::string &text) : rule(rule_of(text)), state(rl_state_size(&rule), 0) {}

    rl_decision_t hit(int64_t now, uint64_t cost = 1)
    {
        rl_decision_t d;
        const std::vector<uint8_t> before = state;
        const int changed = rl_transition(&rule, state.data(), now, cost, 1, &d);
        if (!d.allowed) {
            EXPECT_EQ(before, state);  // a denial never consumes
            EXPECT_GT(d.retry_after_ms, 0);
            EXPECT_EQ(changed, 0);
        } else {
            EXPECT_EQ(d.retry_after_ms, 0);
            EXPECT_EQ(changed, cost > 0 ? 1 : 0);
        }
        return d;
    }

    rl_state_t head() const
    {
        rl_state_t h;
        std::memcpy(&h, state.data(), sizeof(h));
        return h;
    }
};

// Every invariant of a table (rl::Table::check) after an operation.
#define EXPECT_TABLE_VALID(table)                                                                                      \
    do {                                                                                                               \
        std::string why_;                                                                                              \
        EXPECT_TRUE((table)->check(&why_)) << why_;                                                                    \
    } while (0)

// One request through rl_decide, as nginx sends it: true if admitted
// (passed, delayed or exempt); *binding the rule its headers describe.
inline bool decide(rl_check_t *c, size_t n, int combine, int64_t now, size_t *binding = nullptr)
{
    rl_request_t rq{};
    rq.checks = c;
    rq.n = n;
    rq.combine = combine;
    rl_request_hash(&rq);
    const int verdict = rl_decide(&rq, now);
    if (binding != nullptr) {
        *binding = rq.binding;
    }
    return verdict != RL_VERDICT_REJECTED;
}

// Gives back what a request held (rl_request_refund).
inline void refund(rl_check_t *c, size_t n, int64_t now)
{
    rl_request_t rq{};
    rq.checks = c;
    rq.n = n;
    rl_request_refund(&rq, now);
}

// A start time far from the epoch and aligned to every window used here.
constexpr int64_t kT0 = 1767225600000;  // 2026-01-01T00:00:00Z

// A zone: one table in memory of its own, with the block sizes its rules
// need and a fixed secret; a copy is a twin.
struct TestZone {
    void *mem;
    size_t size;
    TestZone(size_t n, const std::vector<rl_rule_t> &rules, const uint8_t secret[16]) : size(n)
    {
        mem = std::aligned_alloc(64, n);
        std::memset(mem, 0, n);  // rl_table_init takes zeroed memory
        std::vector<uint32_t> blobs;
        for (const rl_rule_t &r : rules) {
            if (rl_rule_block_size(&r) > 0) {
                blobs.push_back(rl_rule_block_size(&r));
            }
        }
        char err[RL_ERR_MAX];
        EXPECT_EQ(rl_table_init(mem, n, blobs.data(), blobs.size(), secret, err, sizeof(err)), RL_OK) << err;
    }
    TestZone(const TestZone &o) : size(o.size)
    {
        mem = std::aligned_alloc(64, size);
        std::memcpy(mem, o.mem, size);
    }
    TestZone &operator=(const TestZone &) = delete;
    ~TestZone() { std::free(mem); }
    rl::Table *table() { return rl::Table::at(mem); }
    rl_table_stats_t stats()
    {
        rl_table_stats_t st;
        rl_table_get_stats(mem, &st);
        return st;
    }
};
