// A request's charge (charge=), when it ends: what the request reserved
// when it was admitted (check.cpp's reserve) is given back, and its charge
// is spent instead,
// whatever the key's budget (algorithms/charge.cpp bounds the debt).  The
// key's state is found as a request finds it: in the table, or, evicted
// meanwhile, restored from what the eviction summary says it owes.
#include "algorithms/algorithms.h"
#include "algorithms/transition.h"
#include "policy/request.h"
#include "table/table.h"

namespace rl {

namespace {

// What the key may still spend at now, before the charge: a look.
uint64_t left(const rl_rule_t &rule, const State &s, int64_t now)
{
    State look = s;
    return transition(rule, look, now, 0, false).remaining;
}

// The key's debt after the charge, for the eviction summary (as a commit).
Debt debt_after(const rl_rule_t &rule, const State &s, int64_t now, bool inherited)
{
    State look = s;
    const rl_decision_t d = transition(rule, look, now, 0, false);
    return Debt{owed_frac(rule, s, d, now), inherited};
}

}  // namespace

void settle(rl_check_t &c, int64_t now)
{
    const rl_rule_t &rule = *c.rule;
    Table *table = Table::at(c.table);
    table->recover();
    bool capped = false;
    const size_t blob = blob_size(rule);

    if (blob == 0) {
        State s{};
        Table::Ref ref{};
        const bool found = table->find(c.tag, &s, &ref);
        const bool inherited = found && Table::debt(ref).inherited;
        if (!found) {
            s = restore(rule, table->owed(c.tag, now), now);
        } else if (c.reserved > 0) {
            refund(rule, s, c.reserved, c.after, c.at, now);
        }
        const uint64_t before = left(rule, s, now);
        c.charged = charge(rule, s, now, c.charge, &capped);
        c.in_debt = c.charged > before;
        const Debt debt = debt_after(rule, s, now, inherited);
        if (found) {
            Table::update(ref, s.head, debt);
        } else {
            table->store(c.tag, s.head, debt, now);
        }
    } else {
        const int pool = table->pool_for(blob);
        if (pool < 0) {
            return;  // no pool for the rule's blocks: its keys are decided as cold
        }
        bool fresh = false;
        State s = table->acquire(c.tag, pool, now, &fresh);
        if (fresh) {
            s.head = restore(rule, table->owed(c.tag, now), now).head;
            restore_block(rule, s, now);
        } else if (c.reserved > 0) {
            refund(rule, s, c.reserved, c.after, c.at, now);
        }
        const uint64_t before = left(rule, s, now);
        c.charged = charge(rule, s, now, c.charge, &capped);
        c.in_debt = c.charged > before;
        table->set_t(c.tag, s.head.t, debt_after(rule, s, now, false));
    }
    c.capped = capped;
    count_charge(c);
}

void count_charge(const rl_check_t &c)
{
    if (c.counters > 0) {
        Table *table = Table::at(c.table);
        table->count_charge(c.counters - 1, c.charged, c.in_debt != 0);
        table->note_charge(c.counters - 1, c.charge, c.rule->policy_quota);
    }
}

}  // namespace rl
