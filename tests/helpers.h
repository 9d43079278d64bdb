// Shared helpers for the core tests.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <sstream>
#include <string>
#include <vector>

#include "ratelimit.h"
#include "table/table.h"

// Room for a rule's name (rl_rule_init) that lives as long as the tests.
inline char *name_room()
{
    static std::deque<std::array<char, RL_NAME_MAX>> rooms;
    rooms.emplace_back();
    return rooms.back().data();
}

inline rl_rule_t rule_of(const std::string &text)
{
    rl_rule_t r;
    char err[RL_ERR_MAX];
    if (rl_rule_parse(&r, name_room(), text.c_str(), err, sizeof(err)) != RL_OK) {
        ADD_FAILURE() << "rule \"" << text << "\": " << err;
    }
    return r;
}

// A check the headers do not describe (not the binding one) may have its
// reset for its next unit where working that out costs much (a sliding
// window of a stack: Algorithm::transition_binding), never sooner than
// the unit comes back.  d, a decision of such a check, with exact's next
// unit where it had its reset instead (true), as it was when it had
// exact's (false); d is left as it was, and the caller's comparison fails,
// when it had neither.
inline bool untimed_as(rl_decision_t &d, const rl_decision_t &exact)
{
    if (d.available_ms == exact.available_ms || d.available_ms != d.reset_ms || d.available_ms <= exact.available_ms) {
        return false;
    }
    d.available_ms = exact.available_ms;
    return true;
}

// A rule as the directive gives it, $variables included (the glue's).
inline rl_rule_t var_rule_of(const std::string &text)
{
    rl_rule_t r;
    rl_rule_init(&r, name_room());
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

// A rule's check of a request, as the glue fills it: the table, the rule,
// its identity, the key (which must outlive the check), the cost, and the
// rule's counters (rl_table_rule_slot() + 1; 0: not counted).
inline rl_check_t check_of(void *table, const rl_rule_t *rule, uint64_t identity, const std::string &key,
                           uint64_t cost = 1, int counters = 0)
{
    rl_check_t c{};
    c.table = table;
    c.rule = rule;
    c.identity = identity;
    c.key = key.data();
    c.key_len = key.size();
    c.cost = cost;
    c.counters = counters;
    return c;
}

// (a temporary key would leave the check pointing at freed bytes)
rl_check_t check_of(void *table, const rl_rule_t *rule, uint64_t identity, std::string &&key, uint64_t cost = 1,
                    int counters = 0) = delete;

// The identity the tests give a rule: its text as keyed by "$k".
inline uint64_t identity_of(const rl_rule_t &rule)
{
    return rl_rule_identity(&rule, "$k", 2);
}

// A request of these checks.
inline rl_request_t request_of(rl_check_t *c, size_t n, int combine = RL_COMBINE_ALL)
{
    rl_request_t rq{};
    rq.checks = c;
    rq.n = n;
    rq.combine = combine;
    return rq;
}

// A request whose checks' keys are hashed (rl_request_hash), as nginx sends
// it to rl_decide: its checks' tables are tables.
inline rl_request_t hashed(rl_request_t rq)
{
    rl_request_hash(&rq);
    return rq;
}

// One request through rl_decide, as nginx sends it: true if admitted
// (passed, delayed or exempt); *binding the rule its headers describe.
inline bool decide(rl_check_t *c, size_t n, int combine, int64_t now, size_t *binding = nullptr)
{
    rl_request_t rq = hashed(request_of(c, n, combine));
    const int verdict = rl_decide(&rq, now);
    if (binding != nullptr) {
        *binding = rq.binding;
    }
    return verdict != RL_VERDICT_REJECTED;
}

// Gives back what a request held (rl_request_refund).
inline void refund(rl_check_t *c, size_t n, int64_t now)
{
    rl_request_t rq = request_of(c, n);
    rl_request_refund(&rq, now);
}

// The end of a request (rl_request_end): its charges spent, its slots
// given back.
inline int end_request(rl_check_t *c, size_t n, int64_t now)
{
    rl_request_t rq = request_of(c, n);
    return rl_request_end(&rq, now);
}

// A parameterized test's name made of text (a rule): what is not a letter
// or a digit becomes '_'.
inline std::string param_name(std::string text)
{
    for (char &ch : text) {
        if (!isalnum((unsigned char) ch)) {
            ch = '_';
        }
    }
    return text;
}

// Names each case of a test parameterized by rule texts after its rule.
struct RuleName {
    std::string operator()(const ::testing::TestParamInfo<const char *> &info) const { return param_name(info.param); }
};

// A start time far from the epoch and aligned to every window used here.
constexpr int64_t kT0 = 1767225600000;  // 2026-01-01T00:00:00Z

// The block sizes of a zone's rules' states that do not fit a slot.
inline std::vector<uint32_t> block_sizes(const std::vector<rl_rule_t> &rules)
{
    std::vector<uint32_t> blocks;
    for (const rl_rule_t &r : rules) {
        if (rl_rule_block_size(&r) > 0) {
            blocks.push_back(rl_rule_block_size(&r));
        }
    }
    return blocks;
}

// Block sizes given as they are (a table laid out without its rules), and
// the stack its buckets are planned for (rl_table_stack; 0: none).
struct BlockSizes {
    std::vector<uint32_t> sizes;
    uint32_t slots16 = 0;
};

// A zone: one table in memory of its own, with the block sizes its rules
// need (or given), and a secret (nullptr: a random one); a copy is a twin.
struct TestZone {
    void *mem;
    size_t size;
    explicit TestZone(size_t n, BlockSizes blocks = {}, const uint8_t *secret = nullptr) : size(n)
    {
        mem = std::aligned_alloc(64, rounded(n));
        std::memset(mem, 0, n);  // rl_table_init takes zeroed memory
        char err[RL_ERR_MAX];
        EXPECT_EQ(rl_table_init_names(mem, n, blocks.sizes.data(), blocks.sizes.size(), 0, blocks.slots16, secret, err,
                                      sizeof(err)),
                  RL_OK)
            << err;
    }
    TestZone(size_t n, const uint8_t *secret) : TestZone(n, BlockSizes{}, secret) {}
    TestZone(size_t n, const std::vector<rl_rule_t> &rules, const uint8_t *secret)
        : TestZone(n, BlockSizes{block_sizes(rules)}, secret)
    {
    }
    TestZone(const TestZone &o) : size(o.size)
    {
        mem = std::aligned_alloc(64, rounded(size));
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
    // aligned_alloc takes a multiple of the alignment
    static size_t rounded(size_t n) { return (n + 63) & ~size_t{63}; }
};
