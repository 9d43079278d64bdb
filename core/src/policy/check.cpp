// Checking one request against all its rules, atomically: decide every rule
// on the current state, combine, then commit all consuming rules or none.
// (request.cpp concludes the request from the rules' decisions.)
#include "algorithms/algorithms.h"
#include "policy/request.h"
#include "table/table.h"

namespace {

struct Item {
    rl::State state;     // as found; a head-only state holds the new head
    size_t blob;         // bytes of the rule's block (0: head only)
    int pool;            // the rule's block pool, -1 for a head-only state
    rl::Table::Ref ref;  // where the head was found, if it was
    bool restored;       // not in the table: from the eviction summary
    bool inherited;      // its debt came from the summary (rl::Debt)
    bool banned;         // refused by its key's ban (ban=)
};

// ban=: until when the key is banned, 0 if it is not.  Bans are entries of
// the table under the key's ban tag; one evicted is forgotten (a key in the
// eviction summary is never taken for banned).
int64_t banned_until(const rl::Table *table, uint64_t tag, int64_t now)
{
    rl::State b{};
    return table->find(rl::Table::ban_tag(tag), &b) && b.head.t > now ? b.head.t : 0;
}

// A refusal while banned, or the refusal that starts a ban: the key may try
// again when the ban ends, and not before.
void refuse_until(rl_decision_t &d, int64_t until, int64_t now)
{
    const int64_t wait = until - now;
    d.allowed = 0;
    d.remaining = 0;
    d.delay_ms = 0;
    d.banned_ms = wait;
    d.retry_after_ms = d.retry_after_ms > wait ? d.retry_after_ms : wait;
    d.available_ms = d.retry_after_ms;
    d.reset_ms = d.reset_ms > wait ? d.reset_ms : wait;
}

// The bans a refused request starts: each rule with ban= that refused it
// (not for a cost the rule can never admit), and is not banning it already.
void ban(rl_check_t *c, Item *items, size_t n, int64_t now)
{
    for (size_t i = 0; i < n; i++) {
        const rl_rule_t &rule = *c[i].rule;
        if (!rl::applies(c[i]) || rule.ban_ms == 0 || items[i].banned || c[i].decision.allowed || c[i].decision.never) {
            continue;
        }
        rl::Table *table = rl::Table::at(c[i].table);
        const int64_t until = now + rule.ban_ms;
        table->store(rl::Table::ban_tag(c[i].tag), rl_state_t{until, 0}, rl::Debt{rl::kFracFull, false}, now);
        refuse_until(c[i].decision, until, now);
    }
}

// The state rule i is decided on.  Two rules with the same identity and key
// in one table share a state: a head-only one is decided on the head the
// earlier rule would leave; one with a block on the block as it is.  A key
// not in the table starts from what the eviction summary says it owes.
rl::State current(const rl_check_t *c, Item *items, size_t i, int64_t now)
{
    rl::State s{rl_state_t{0, 0}, nullptr};
    items[i].ref.t = nullptr;
    items[i].restored = false;
    items[i].inherited = false;
    for (size_t j = i; j-- > 0;) {
        if (rl::applies(c[j]) && c[j].table == c[i].table && c[j].tag == c[i].tag && items[j].pool < 0) {
            s.head = items[j].state.head;
            items[i].inherited = items[j].inherited;
            return s;
        }
    }
    const rl::Table *table = rl::Table::at(c[i].table);
    if (table->find(c[i].tag, &s, &items[i].ref)) {
        // inherited until the key is back to full budget
        items[i].inherited = rl::Table::debt(items[i].ref).inherited && s.head.t > now;
    } else {
        s = rl::restore(*c[i].rule, table->owed(c[i].tag, now), now);
        items[i].restored = items[i].inherited = s.head.t != 0;
    }
    return s;
}

// A request refused because of what the summary says its keys owe counts
// once in each table whose summary refused it.
void count_summary_refusals(const rl_check_t *c, const Item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!rl::applies(c[i]) || !items[i].restored || c[i].decision.allowed || c[i].decision.never) {
            continue;
        }
        bool counted = false;
        for (size_t j = 0; j < i && !counted; j++) {
            counted = rl::applies(c[j]) && c[j].table == c[i].table && items[j].restored && !c[j].decision.allowed &&
                      !c[j].decision.never;
        }
        if (!counted) {
            rl::Table::at(c[i].table)->header().counts.summary_refusals++;
        }
    }
}

// The key's new t, and its debt for the table: one holding slots or places
// is not a debt for the eviction summary (it is never summed there, and is
// the last a full table evicts).
void set_slots(rl::Table *table, const rl_check_t &c, const rl::State &s, int64_t now)
{
    const bool busy = s.head.t > now;
    table->set_t(c.tag, s.head.t, rl::Debt{busy ? rl::kFracFull : 0, busy});
}

// A concurrency rule's decision: its slots as the key holds them, with the
// slots of holders that no longer exist given back first when none is free.
void decide_slots(rl_request_t &rq, size_t i, rl::State &s, int64_t now)
{
    rl_check_t &c = rq.checks[i];
    uint32_t reclaimed = 0;
    c.before = c.after = s.head;
    c.at = now;
    c.decision = rl::concurrency_decide(*c.rule, s, now, c, rq.alive, &reclaimed);
    rl::policy(*c.rule, c.decision);
    if (reclaimed > 0 || (s.blob != nullptr && s.head.t != c.before.t)) {
        rl::Table *table = rl::Table::at(c.table);
        set_slots(table, c, s, now);
        table->count_flight(c.counters - 1, -(int64_t) reclaimed, false);
    }
}

// A request that waits joins the queues of the concurrency rules it waits
// for; one refused leaves every queue it was in.
void queue(rl_request_t &rq, Item *items, bool queued, int64_t now)
{
    for (size_t i = 0; i < rq.n; i++) {
        rl_check_t &c = rq.checks[i];
        if (!rl::applies(c) || c.rule->algorithm != RL_CONCURRENCY || items[i].pool < 0) {
            continue;
        }
        rl::Table *table = rl::Table::at(c.table);
        if (queued && c.decision.queued) {
            const bool first = c.ticket == 0;
            rl::State s = table->acquire(c.tag, items[i].pool, now);
            rl::concurrency_enqueue(*c.rule, s, now, c, rq.holder);
            set_slots(table, c, s, now);
            if (first && c.ticket != 0) {
                table->count_flight(c.counters - 1, 0, true);
            }
        } else if (!queued && c.ticket != 0) {
            rl::State s{};
            if (table->find(c.tag, &s) && s.blob != nullptr) {
                rl::concurrency_leave_queue(*c.rule, s, c);
                set_slots(table, c, s, now);
            }
            c.ticket = 0;
        }
    }
}

}  // namespace

namespace rl {

Checked check(rl_request_t &rq, int64_t now_ms)
{
    Item items[RL_RULES_MAX];
    rl_check_t *c = rq.checks;
    const size_t n = rq.n;
    size_t allowing = 0, applying = 0, queuing = 0;

    for (size_t i = 0; i < n; i++) {
        if (!applies(c[i])) {
            continue;
        }
        const rl_rule_t &rule = *c[i].rule;
        const size_t blob = items[i].blob = blob_size(rule);
        Table *table = Table::at(c[i].table);
        table->recover();  // what a dead process left half done, before the table is read

        items[i].pool = blob ? table->pool_for(blob) : -1;
        items[i].state = current(c, items, i, now_ms);
        if (blob && items[i].pool < 0) {
            items[i].state.blob = nullptr;  // no pool for it: decide as cold, never commit
        }
        c[i].before = items[i].state.head;
        c[i].at = now_ms;
        items[i].banned = false;
        if (rule.algorithm == RL_CONCURRENCY) {
            decide_slots(rq, i, items[i].state, now_ms);
        } else {
            // a head-only state is updated on the copy: that is the new head
            c[i].decision = transition(rule, items[i].state, now_ms, c[i].cost, !blob);
            c[i].after = items[i].state.head;
        }
        if (rule.ban_ms > 0 && c[i].cost > 0) {
            const int64_t until = banned_until(table, c[i].tag, now_ms);
            if (until != 0) {
                items[i].banned = true;
                items[i].state.head = c[i].after = c[i].before;  // nothing spent
                c[i].decision.queued = 0;                        // nor waited for
                refuse_until(c[i].decision, until, now_ms);
            }
        }
        allowing += c[i].decision.allowed;
        queuing += c[i].decision.queued;
        applying++;
    }

    // Waiting for a slot (concurrency, max_wait) is neither: with all, the
    // request waits when every other rule allows; with any, when no rule
    // allows.  It spends nothing meanwhile, and is decided again.
    bool allowed, queued;
    if (rq.combine == RL_COMBINE_ANY) {
        allowed = allowing > 0 || applying == 0;
        queued = !allowed && queuing > 0;
    } else {
        allowed = allowing == applying;
        queued = !allowed && allowing + queuing == applying;
    }
    if (queued && (rq.dry_run || rq.last)) {
        queued = false;  // a dry run waits for nothing: a would-be refusal
    }

    // With any, only the allowing rules consume; with all, every rule
    // allows whenever the request is allowed.  A head found in place is
    // written there, until an insertion may have moved keys.
    bool moved = false;
    for (size_t i = 0; allowed && i < n; i++) {
        if (!applies(c[i]) || !c[i].decision.allowed || c[i].cost == 0) {
            continue;
        }
        const rl_rule_t &rule = *c[i].rule;
        Table *table = Table::at(c[i].table);
        if (rule.algorithm == RL_CONCURRENCY) {
            if (items[i].pool >= 0) {
                State s = table->acquire(c[i].tag, items[i].pool, now_ms);
                concurrency_take(rule, s, now_ms, c[i], rq.holder);
                set_slots(table, c[i], s, now_ms);
                table->count_flight(c[i].counters - 1, +1, c[i].ticket != 0);
            }
            moved = true;
        } else if (items[i].blob == 0) {
            const Debt debt{owed_frac(rule, State{c[i].after, nullptr}, c[i].decision, now_ms), items[i].inherited};
            if (items[i].ref.t != nullptr && !moved) {
                Table::update(items[i].ref, c[i].after, debt);
            } else {
                moved |= table->store(c[i].tag, c[i].after, debt, now_ms);
            }
        } else if (items[i].pool >= 0) {
            bool fresh = false;
            State s = table->acquire(c[i].tag, items[i].pool, now_ms, &fresh);
            if (fresh) {
                // what the summary says the key owes, as decided on; or,
                // if an earlier rule's insertion evicted it meanwhile, now
                s.head = items[i].restored ? c[i].before : restore(rule, table->owed(c[i].tag, now_ms), now_ms).head;
                restore_block(rule, s, now_ms);
            }
            const rl_decision_t d = transition(rule, s, now_ms, c[i].cost, true);
            table->set_t(c[i].tag, s.head.t, Debt{owed_frac(rule, s, d, now_ms), items[i].inherited});
            if (items[i].restored && d.allowed) {
                c[i].decision = d;  // the restored units, as the block holds them now
            }
            c[i].after = s.head;
            moved = true;
        }
    }

    if (!allowed) {
        queue(rq, items, queued, now_ms);
    }
    if (!allowed && !queued) {
        count_summary_refusals(c, items, n);
        ban(c, items, n, now_ms);
    }
    return allowed ? Checked::kAdmitted : queued ? Checked::kQueued : Checked::kRefused;
}

}  // namespace rl
