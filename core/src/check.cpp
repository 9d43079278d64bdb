// Checking one request against all its rules, atomically: decide every rule
// on the current state, combine, then commit all consuming rules or none.
#include "algorithms.h"
#include "table.h"

namespace {

// Two rules with the same identity and key in one table share a state: the
// later one is decided on the state the earlier one would leave.
rl_state_t current_state(const rl_check_t *c, const rl::Step *steps, size_t i)
{
    for (size_t j = i; j-- > 0;) {
        if (c[j].table == c[i].table && c[j].tag == c[i].tag) {
            return steps[j].next;
        }
    }
    rl_state_t s{0, 0};
    rl::Table::at(c[i].table)->find(c[i].tag, &s);
    return s;
}

bool binds_more(const rl_decision_t &a, const rl_decision_t &b, bool allowed)
{
    return allowed ? a.remaining < b.remaining : a.retry_after_ms > b.retry_after_ms;
}

}  // namespace

extern "C" {

void rl_check_hash(rl_check_t *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const rl::Table *t = rl::Table::at(c[i].table);
        c[i].tag = t->tag(c[i].identity, c[i].key, c[i].key_len);
        t->prefetch(c[i].tag);
    }
}

int rl_check(rl_check_t *c, size_t n, int combine, int64_t now_ms, size_t *binding)
{
    try {
        rl::Step steps[RL_RULES_MAX];
        size_t allowing = 0;

        if (n > RL_RULES_MAX) {
            n = RL_RULES_MAX;
        }
        for (size_t i = 0; i < n; i++) {
            steps[i] = rl::transition(*c[i].rule, current_state(c, steps, i), now_ms, c[i].cost);
            c[i].decision = steps[i].decision;
            allowing += steps[i].decision.allowed;
        }

        const bool allowed = combine == RL_COMBINE_ANY ? allowing > 0 || n == 0 : allowing == n;

        // With any, only the allowing rules consume; with all, every rule
        // allows whenever the request is allowed.
        if (allowed) {
            for (size_t i = 0; i < n; i++) {
                if (steps[i].commit) {
                    rl::Table::at(c[i].table)->store(c[i].tag, steps[i].next, now_ms);
                }
            }
        }

        size_t b = n;
        for (size_t i = 0; i < n; i++) {
            if ((bool) c[i].decision.allowed == allowed &&
                (b == n || binds_more(c[i].decision, c[b].decision, allowed))) {
                b = i;
            }
        }
        *binding = b == n ? 0 : b;
        return allowed ? 1 : 0;
    } catch (...) {
        *binding = 0;
        return 1;   // unreachable: nothing here throws; fail open if it ever did
    }
}

}  // extern "C"
