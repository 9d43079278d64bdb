// A request's charge (charge=), when it ends: what the request reserved
// when it was admitted (check.cpp's reserve) is given back, and its charge
// is spent instead,
// whatever the key's budget (algorithms/charge.cpp bounds the debt).  The
// key's state is found as a request finds it: in the table, or, evicted
// meanwhile, restored from what the eviction summary says it owes.
//
// What a request reserves while it runs comes from the rule alone: a third
// of what a key can hold (its burst, or its limit), unless cost= declares
// the worst case.  No charge settled before, by other keys or by the key
// itself, moves it: so a key with L left runs at most ceil(L / share) <= 3
// requests whose charges are unknown at once, whatever it and others did.
//
// A key's reservations in flight are kept beside its state, in an entry of
// the table of their own (Table::flight_tag: the units reserved, until an
// hour after the last admission), so that a refusal they alone caused
// (what the key has left plus what they hold would admit it) is told apart:
// it starts no ban.  An entry lost (evicted, or a worker killed before its
// requests ended) only tells such refusals apart less often, or for longer.
#include "algorithms/algorithms.h"
#include "algorithms/transition.h"
#include "policy/request.h"
#include "table/table.h"

namespace rl {

namespace {

// How long a key's reservations in flight are kept after its last
// admission: longer than any request runs.
constexpr int64_t kFlightHoldMs = 3600000;

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

uint64_t charge_share(const rl_rule_t &rule)
{
    return rule.charge && !(rule.given & P_COST) ? (rule.policy_quota + 2) / 3 : 0;
}

namespace {

// The units the key's requests in flight hold, and where.
uint64_t flight(Table *table, uint64_t tag, int64_t now, Table::Ref *ref)
{
    State f{};
    return table->find(Table::flight_tag(tag), &f, ref) && f.head.t > now ? f.head.n : 0;
}

// The key's reservations in flight become `units` (none: the entry is
// kept as back to full budget, the first a full table evicts).
void set_flight(Table *table, uint64_t tag, const Table::Ref &ref, uint64_t units, int64_t now)
{
    const rl_state_t f{units > 0 ? now + kFlightHoldMs : now, (uint32_t) (units < UINT32_MAX ? units : UINT32_MAX)};
    if (ref.found()) {
        Table::update(ref, f, Debt{0, false});
    } else if (units > 0) {
        table->store(Table::flight_tag(tag), f, Debt{0, false}, now);
    }
}

}  // namespace

void hold_flight(const rl_check_t &c, int64_t now)
{
    Table *table = Table::at(c.table);
    Table::Ref ref{};
    set_flight(table, c.tag, ref, flight(table, c.tag, now, &ref) + c.reserved, now);
}

void end_flight(const rl_check_t &c, int64_t now)
{
    Table *table = Table::at(c.table);
    table->recover();
    Table::Ref ref{};
    const uint64_t units = flight(table, c.tag, now, &ref);
    set_flight(table, c.tag, ref, units > c.reserved ? units - c.reserved : 0, now);
}

void in_flight(rl_check_t &c, int64_t now)
{
    Table::Ref ref{};
    const uint64_t units = flight(Table::at(c.table), c.tag, now, &ref);
    c.in_flight = units > 0 && c.decision.remaining + units >= c.cost;
}

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
    }
}

}  // namespace rl
