// Shared helpers for the core tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "ratelimit.h"

inline rl_rule_t rule_of(const std::string &text)
{
    rl_rule_t r;
    char err[RL_ERR_MAX];
    if (rl_rule_parse(&r, text.c_str(), err, sizeof(err)) != RL_OK) {
        ADD_FAILURE() << "rule \"" << text << "\": " << err;
    }
    return r;
}

// One key under one rule: the pure transition, with the state kept here.
struct Key {
    rl_rule_t rule;
    rl_state_t state{0, 0};

    explicit Key(const std::string &text) : rule(rule_of(text)) {}

    rl_decision_t hit(int64_t now, uint64_t cost = 1)
    {
        rl_state_t next;
        rl_decision_t d;
        rl_state_t before = state;
        if (rl_transition(&rule, &state, now, cost, &next, &d)) {
            state = next;
        }
        if (!d.allowed) {
            EXPECT_EQ(before.t, state.t);   // a denial never consumes
            EXPECT_EQ(before.n, state.n);
            EXPECT_GT(d.retry_after_ms, 0);
        } else {
            EXPECT_EQ(d.retry_after_ms, 0);
        }
        return d;
    }
};

// A start time far from the epoch and aligned to every window used here.
constexpr int64_t kT0 = 1767225600000;   // 2026-01-01T00:00:00Z
