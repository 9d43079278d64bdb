// Checking one request against all its rules, atomically: decide every rule
// on the current state, combine, then commit all consuming rules or none.
// (request.cpp concludes the request from the rules' decisions.)
//
// One code for every request, compiled twice: for any number of rules, and
// for the one-rule request most locations send (Shape), where the loops
// run once and what only several rules need (a state two rules share, the
// order of the decisions) folds away.  A request of several rules whose
// keys are all found, with all, takes a shorter path of its own
// (decide_found), equal in every effect, compiled for two rules, for three
// (the stacks most locations have: its loops unrolled) and for any number.
#include "algorithms/algorithms.h"
#include "algorithms/transition.h"
#include "policy/override.h"
#include "policy/request.h"
#include "table/table.h"

namespace {

struct Item {
    rl::State state;     // as found; a head-only state holds the new head
    int pool;            // the rule's block pool, -1 for a head-only state
    rl::Table::Ref ref;  // where the head was found, if it was
    bool restored;       // not in the table: from the eviction summary
    bool inherited;      // its debt came from the summary (rl::Debt)
    bool banned;         // refused by its key's ban (ban=)
    bool committed;      // written as it was decided
};

// ban=: until when the key is banned, 0 if it is not.  Bans are entries of
// the table under the key's ban tag; one evicted is forgotten (a key in the
// eviction summary is never taken for banned).
int64_t banned_until(const rl::Table *table, const rl_rule_t &rule, uint64_t tag, int64_t now)
{
    return table->banned_until(rule, tag, now);
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
// (not for a cost the rule can never admit, nor only for what the key's
// requests in flight hold), and is not banning it already.
// A dry run stores none: its refusal says what the ban would be, and is
// counted as one a dry run would start.
void ban(rl_check_t *c, Item *items, size_t n, bool dry, int64_t now)
{
    for (size_t i = 0; i < n; i++) {
        const rl_rule_t &rule = *c[i].rule;
        if (!rl::applies(c[i]) || rule.ban_ms == 0 || items[i].banned || c[i].decision.allowed || c[i].decision.never ||
            c[i].in_flight) {
            continue;
        }
        const int64_t until = now + rule.ban_ms;
        if (!dry) {
            rl::Table *table = rl::Table::at(c[i].table);
            table->store(rl::Table::ban_tag(c[i].tag), rl_state_t{until, 0}, rl::Debt{rl::kFracFull, false}, now);
        }
        refuse_until(c[i].decision, until, now);
        c[i].banning = 1;
    }
}

// A key an override denies (deny): refused until the override ends, or with
// no time to wait for when it never does; its state as a look finds it.
void refuse_denied(rl_check_t &c, rl::State s, int64_t now)
{
    c.decision = rl::transition(*c.rule, s, now, 0, false);
    rl::deny_decision(c.decision, c.until, now);
}

// What an admission of check c spends when it is decided on state s: its
// cost; for a rule with charge= and no cost=, the larger of its cost and
// the rule's share (charge_share: a third of what a key can hold), at most
// what the key has left.  A key's requests in flight together then never
// reserve more than it had, and at most three run at once: where reserving
// only the cost would let any number through while their charges are
// unknown, and reserving what past charges were would let whoever moves
// them choose how many.  Admission itself is unchanged (the cost fits in
// what is left exactly when the reservation does); the request's end gives
// the reservation back and spends the charge (settle.cpp).
uint64_t reserve(const rl_check_t &c, const rl::State &s, int64_t now)
{
    const rl_rule_t &rule = *c.rule;
    const uint64_t share = rl::charge_share(rule);
    if (share <= c.cost) {
        return c.cost;
    }
    rl::State look = s;  // a look writes nothing
    const uint64_t left = rl::transition(rule, look, now, 0, false).remaining;
    return share < left ? share : left > c.cost ? left : c.cost;
}

// Another check of the request on the same key's state: rules with the
// same identity and key in one table share it.
bool shares(const rl_check_t *c, size_t n, size_t i)
{
    for (size_t j = 0; j < n; j++) {
        if (j != i && rl::applies(c[j]) && c[j].table == c[i].table && c[j].tag == c[i].tag) {
            return true;
        }
    }
    return false;
}

// The state rule i is decided on.  Two rules with the same identity and key
// in one table share a state: a head-only one is decided on the head the
// earlier rule would leave; one with a block on the block as it is.  A key
// not in the table starts from what the eviction summary says it owes.
template <bool kOne> rl::State current(const rl_check_t *c, Item *items, size_t i, int64_t now)
{
    rl::State s{rl_state_t{0, 0}, nullptr};
    items[i].ref.b = nullptr;
    items[i].restored = false;
    items[i].inherited = false;
    for (size_t j = i; !kOne && j-- > 0;) {
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
    table->bound(*c[i].rule, s, &items[i].ref, now);
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
            rl::Table::at(c[i].table)->layout().counts.summary_refusals++;
        }
    }
}

// A concurrency rule's decision: its slots as the key holds them, with the
// slots of holders that no longer exist given back first when none is free.
void decide_slots(rl_request_t &rq, size_t i, rl::State &s, int64_t now)
{
    rl_check_t &c = rq.checks[i];
    uint32_t reclaimed = 0;
    c.before = c.after = s.head;
    c.at = now;
    const rl::Slots &slots = *rl::algorithm_of(*c.rule).slots;
    c.decision = slots.decide(*c.rule, s, now, c, rq.alive, &reclaimed);
    c.decision.quota = slots.open(*c.rule, s);  // the limit now (adaptive: as it moved)
    rl::policy(*c.rule, c.decision);
    if (reclaimed > 0 || (s.blob != nullptr && s.head.t != c.before.t)) {
        rl::Table *table = rl::Table::at(c.table);
        table->set_held(c.tag, s.head.t, now);
        table->count_flight(c.counters - 1, -(int64_t) reclaimed, false);
    }
}

// A request that waits joins the queues of the concurrency rules it waits
// for; one refused leaves every queue it was in.
void queue(rl_request_t &rq, Item *items, bool queued, int64_t now)
{
    for (size_t i = 0; i < rq.n; i++) {
        rl_check_t &c = rq.checks[i];
        if (!rl::applies(c) || !rl::has(*c.rule, rl::kSlots) || items[i].pool < 0) {
            continue;
        }
        rl::Table *table = rl::Table::at(c.table);
        if (queued && c.decision.queued) {
            const bool first = c.ticket == 0;
            rl::State s = table->acquire(c.tag, items[i].pool, now);
            rl::algorithm_of(*c.rule).slots->join(*c.rule, s, now, c, rq.holder);
            table->set_held(c.tag, s.head.t, now);
            if (first && c.ticket != 0) {
                table->count_flight(c.counters - 1, 0, true);
            }
        } else if (!queued && c.ticket != 0) {
            rl::State s{};
            if (table->find(c.tag, &s) && s.blob != nullptr) {
                rl::algorithm_of(*c.rule).slots->leave(*c.rule, s, c);
                table->set_held(c.tag, s.head.t, now);
            }
            c.ticket = 0;
        }
    }
}

// A charge= rule's reservations in flight, once the request is decided
// (and every admission written): an admission adds what it reserved; a
// refusal is told apart when they alone refused it.
void charged_flight(rl_check_t &c, const Item &it, bool allowed, int64_t now)
{
    if (allowed && c.decision.allowed && c.reserved > 0) {
        rl::hold_flight(c, now);
    } else if (!c.decision.allowed && !c.decision.never && !it.banned) {
        rl::in_flight(c, now);
    }
}

// What a request's checks add up to while they are decided.
struct Tally {
    size_t allowing = 0, applying = 0, queuing = 0;
};

// Decides check i.  A key found in the table is decided and written in one
// step when `final` says its rule's admission is the request's (nothing can
// undo it then) and no other check shares its state: otherwise a head is
// written at the commit, and a block decided again there.  A banned key is
// decided on and refused, nothing spent.
template <bool kOne> void decide(rl_request_t &rq, Item *items, size_t i, bool final, Tally &tally, int64_t now)
{
    rl_check_t &c = rq.checks[i];
    const rl_rule_t &rule = *c.rule;
    const size_t blob = rl::blob_size(rule);
    rl::Table *table = rl::Table::at(c.table);
    table->recover();  // what a dead process left half done, before the table is read

    Item &it = items[i];
    it.state = current<kOne>(rq.checks, items, i, now);
    it.pool = blob ? table->pool_for(blob, it.state) : -1;
    if (blob && it.pool < 0) {
        it.state.blob = nullptr;  // no pool for it: decide as cold, never commit
    }
    c.before = it.state.head;
    c.at = now;
    c.reserved = rule.charge ? reserve(c, it.state, now) : c.cost;
    c.banning = 0;
    c.in_flight = 0;
    it.banned = false;
    it.committed = false;
    if ((c.override & 0xf) == RL_OVERRIDE_DENY) {
        refuse_denied(c, it.state, now);
        it.banned = true;  // nothing spent, no ban started
        tally.applying++;
        return;
    }
    if (rl::has(rule, rl::kSlots)) {
        decide_slots(rq, i, it.state, now);
        const int64_t until = rule.ban_ms > 0 && c.cost > 0 ? banned_until(table, rule, c.tag, now) : 0;
        if (until != 0) {
            it.banned = true;
            c.decision.queued = 0;  // nor waited for
            refuse_until(c.decision, until, now);
        }
        tally.allowing += c.decision.allowed;
        tally.queuing += c.decision.queued;
        tally.applying++;
        return;
    }
    const int64_t until = rule.ban_ms > 0 && c.reserved > 0 ? banned_until(table, rule, c.tag, now) : 0;
    const bool in_place = final && until == 0 && it.ref.found() &&
                          (!blob || (it.state.blob != nullptr && (it.state.head.n >> 24) == (uint32_t) it.pool)) &&
                          (kOne || !shares(rq.checks, rq.n, i));
    // a head-only state is updated on the copy: that is the new head
    rl::transition_into(c.decision, rule, it.state, now, c.reserved, !blob || in_place);
    c.after = it.state.head;
    if (until != 0) {
        it.banned = true;
        it.state.head = c.after = c.before;  // nothing spent
        refuse_until(c.decision, until, now);
    } else if (in_place && c.decision.allowed && c.reserved > 0) {
        const rl::Debt debt{rl::owed_frac(rule, it.state, c.decision, now), it.inherited};
        if (blob) {
            rl::Table::update_t(it.ref, it.state.head.t, debt);
        } else {
            rl::Table::update(it.ref, it.state.head, debt);
        }
        it.committed = true;
    }
    tally.allowing += c.decision.allowed;
    tally.applying++;
}

// Commits check i's admission: a head found in place is written there,
// until an insertion may have moved keys (moved); a block is taken (or
// made) and decided on again, unless it was written as it was decided.
void commit_block(rl_request_t &rq, Item *items, size_t i, bool &moved, int64_t now)
{
    rl_check_t &c = rq.checks[i];
    const rl_rule_t &rule = *c.rule;
    rl::Table *table = rl::Table::at(c.table);
    Item &it = items[i];
    if (rl::has(rule, rl::kSlots)) {
        if (it.pool >= 0) {
            rl::State s = table->acquire(c.tag, it.pool, now);
            rl::algorithm_of(rule).slots->take(rule, s, now, c, rq.holder);
            table->set_held(c.tag, s.head.t, now);
            table->count_flight(c.counters - 1, +1, c.ticket != 0);
        }
        moved = true;
    } else if (it.pool >= 0) {
        bool fresh = false;
        rl::State s = table->acquire(c.tag, it.pool, now, &fresh);
        if (fresh) {
            // what the summary says the key owes, as decided on; or, if an
            // earlier rule's insertion evicted it meanwhile, now
            s.head = it.restored ? c.before : rl::restore(rule, table->owed(c.tag, now), now).head;
            rl::restore_block(rule, s, now);
        }
        const rl_decision_t d = rl::transition(rule, s, now, c.reserved, true);
        table->set_t(c.tag, s.head.t, rl::Debt{rl::owed_frac(rule, s, d, now), it.inherited});
        if (it.restored && d.allowed) {
            c.decision = d;  // the restored units, as the block holds them now
        }
        c.after = s.head;
        moved = true;
    }
}

RL_HOT void commit(rl_request_t &rq, Item *items, size_t i, bool &moved, int64_t now)
{
    rl_check_t &c = rq.checks[i];
    const rl_rule_t &rule = *c.rule;
    Item &it = items[i];
    if (rl::blob_size(rule) != 0) {
        commit_block(rq, items, i, moved, now);
        return;
    }
    const rl::Debt debt{rl::owed_frac(rule, rl::State{c.after, nullptr}, c.decision, now), it.inherited};
    if (it.ref.found() && !moved) {
        rl::Table::update(it.ref, c.after, debt);
    } else {
        moved |= rl::Table::at(c.table)->store(c.tag, c.after, debt, now);
    }
}

template <bool kOne> int decide_as(rl_request_t &rq, int64_t now)
{
    Item items[kOne ? 1 : RL_RULES_MAX];
    rl_check_t *c = rq.checks;
    const size_t n = kOne ? 1 : rq.n;
    Tally tally;

    // With any, whichever rule allows, the request is admitted: each rule's
    // block is written as it is decided.  With all, the rules with a block
    // are decided after the others, and the last of them is written as it
    // is decided if every other rule allowed.
    uint8_t later[kOne ? 1 : RL_RULES_MAX];
    size_t nlater = 0;
    const bool any = rq.combine == RL_COMBINE_ANY;
    for (size_t k = 0; k < n + nlater; k++) {
        size_t i = k;
        bool final = kOne || any;
        if (k >= n) {
            i = later[k - n];
            final = k + 1 == n + nlater && tally.allowing == tally.applying;
        } else if (!rl::applies(c[i])) {
            items[i].committed = items[i].banned = false;  // read by the passes below
            items[i].pool = -1;
            continue;
        } else if (!kOne && !any && rl::blob_size(*c[i].rule) > 0 && !rl::has(*c[i].rule, rl::kSlots)) {
            later[nlater++] = (uint8_t) i;
            items[i].pool = 0;  // decided below: not a head to share
            continue;
        }
        decide<kOne>(rq, items, i, final, tally, now);
    }

    // Waiting for a slot (concurrency, max_wait) is neither: with all, the
    // request waits when every other rule allows; with any, when no rule
    // allows.  It spends nothing meanwhile, and is decided again.
    bool allowed, queued;
    if (rq.combine == RL_COMBINE_ANY) {
        allowed = tally.allowing > 0 || tally.applying == 0;
        queued = !allowed && tally.queuing > 0;
    } else {
        allowed = tally.allowing == tally.applying;
        queued = !allowed && tally.allowing + tally.queuing == tally.applying;
    }
    if (queued && (rq.dry_run || rq.last)) {
        queued = false;  // a dry run waits for nothing: a would-be refusal
        for (size_t i = 0; rq.last && i < n; i++) {
            if (rl::applies(c[i]) && c[i].decision.queued && c[i].shed != RL_SHED_NONE) {
                c[i].shed = RL_SHED_WAITED;  // its max_wait is over
            }
        }
    }

    // With any, only the allowing rules consume; with all, every rule
    // allows whenever the request is allowed.
    bool moved = false;
    for (size_t i = 0; allowed && i < n; i++) {
        if (!items[i].committed && rl::applies(c[i]) && c[i].decision.allowed && c[i].reserved > 0) {
            commit(rq, items, i, moved, now);
        }
    }

    if (!allowed) {
        queue(rq, items, queued, now);
    }
    for (size_t i = 0; i < n; i++) {
        if (rl::applies(c[i]) && c[i].rule->charge) {
            charged_flight(c[i], items[i], allowed, now);
        }
    }
    if (!allowed && !queued) {
        count_summary_refusals(c, items, n);
        ban(c, items, n, rq.dry_run != 0, now);
    }
    const int verdict = kOne && !queued ? rl::conclude_one(rq, allowed) : rl::conclude(rq, allowed, queued);
    rl::count(rq, now);
    return verdict;
}

// A key of decide_found(), as found.
struct Found {
    rl::State s;
    rl::Table::Ref ref;
    bool inherited;
};

// A decision binds (the headers describe it: conclude(), the fewest
// remaining, the first of equals) only if it leaves fewer units than this:
// no more than the fewest (least) any decision before it left, none of
// which refused.  A sliding window works out when its next unit comes back
// only then (Algorithm::transition_binding).
uint64_t binds_below(uint64_t least, bool refused)
{
    return refused ? 0 : least < ~uint64_t{0} ? least + 1 : least;
}

// The request most locations with several rules send, in two passes: with
// all, every rule that applies finds its key in the table (a block in its
// rule's pool), and none shares its state with another check, holds slots
// (concurrency), bans or charges (its reservations in flight kept beside
// it).  Each rule is decided on its key as found (a head
// on a copy, a block read; the last block written as decided when every
// other rule allowed); then, in the checks' order, each admission is
// written where its key was found (nothing was inserted meanwhile: every
// Ref holds), and each outcome set and counted, the binding check found
// as conclude() finds it.  False, nothing written, for any other request.
template <size_t kN> bool decide_found(rl_request_t &rq, int64_t now, int *verdict)
{
    Found f[RL_RULES_MAX];
    uint8_t blocks[RL_RULES_MAX];
    rl_check_t *c = rq.checks;
    const size_t n = kN != 0 ? kN : rq.n;
    size_t applying = 0, allowing = 0, nblocks = 0;
    bool delays = false;
    uint64_t least = ~uint64_t{0};  // the fewest units a decision so far leaves
    for (size_t i = 0; i < n; i++) {
        rl_check_t &ci = c[i];
        if (!rl::applies(ci)) {
            continue;
        }
        const rl_rule_t &rule = *ci.rule;
        if (rl::has(rule, rl::kSlots) || rule.ban_ms > 0 || rule.charge) {
            return false;
        }
        for (size_t j = 0; j < i; j++) {
            if (c[j].tag == ci.tag && rl::applies(c[j])) {
                return false;  // the same state, or (in another table) the odds of a collision
            }
        }
        rl::Table *table = rl::Table::at(ci.table);
        table->recover();
        Found &fi = f[i];
        if (!table->find(ci.tag, &fi.s, &fi.ref)) {
            return false;
        }
        table->bound(rule, fi.s, &fi.ref, now);
        fi.inherited = rl::Table::debt(fi.ref).inherited && fi.s.head.t > now;
        ci.before = fi.s.head;
        ci.at = now;
        ci.reserved = rule.charge ? reserve(ci, fi.s, now) : ci.cost;
        applying++;
        const size_t blob = rl::blob_size(rule);
        if (blob != 0) {
            if (fi.s.blob == nullptr || table->pool_for(blob, fi.s) != (int) (fi.s.head.n >> 24)) {
                return false;
            }
            blocks[nblocks++] = (uint8_t) i;  // decided below, once every head is
            continue;
        }
        rl::State s = fi.s;  // a head is decided on a copy: that is the new head
        rl::transition_into(ci.decision, rule, s, now, ci.reserved, true);
        ci.after = s.head;
        allowing += ci.decision.allowed;
        delays |= ci.decision.delay_ms > 0;  // (the request is delayed only if admitted by all)
        least = ci.decision.remaining < least ? ci.decision.remaining : least;
    }
    if (applying == 0) {
        return false;
    }
    bool committed = false;  // the last block, written as decided
    for (size_t k = 0; k < nblocks; k++) {
        rl_check_t &ci = c[blocks[k]];
        Found &fi = f[blocks[k]];
        const bool in_place = k + 1 == nblocks && allowing + 1 == applying;
        rl::State s = fi.s;
        rl::transition_binding_into(ci.decision, *ci.rule, s, now, ci.reserved, in_place,
                                    binds_below(least, allowing < applying - nblocks + k));
        ci.after = s.head;
        allowing += ci.decision.allowed;
        delays |= ci.decision.delay_ms > 0;
        least = ci.decision.remaining < least ? ci.decision.remaining : least;
        if (in_place && ci.decision.allowed && ci.reserved > 0) {
            const rl::Debt debt{rl::owed_frac(*ci.rule, s, ci.decision, now), fi.inherited};
            rl::Table::update_t(fi.ref, s.head.t, debt);
            committed = true;
        }
    }

    const bool allowed = allowing == applying;
    const bool dry = rq.dry_run != 0;
    const bool delayed = allowed && delays;
    size_t b = n;  // fewest remaining, longest delay or longest wait
    for (size_t i = 0; i < n; i++) {
        rl_check_t &ci = c[i];
        const rl_decision_t &d = ci.decision;
        if (!rl::applies(ci)) {
            ci.outcome = RL_OUTCOME_EXEMPT;
        } else if (!allowed) {
            ci.outcome = d.allowed ? -1 : dry ? RL_OUTCOME_DRY_RUN_REJECTED : RL_OUTCOME_REJECTED;
            b = !d.allowed && (b == n || d.retry_after_ms > c[b].decision.retry_after_ms) ? i : b;
        } else {
            const rl_rule_t &rule = *ci.rule;
            if (ci.reserved > 0 && rl::blob_size(rule) == 0) {
                const rl::Debt debt{rl::owed_frac(rule, rl::State{ci.after, nullptr}, d, now), f[i].inherited};
                rl::Table::update(f[i].ref, ci.after, debt);
            } else if (ci.reserved > 0 && !(committed && i == blocks[nblocks - 1])) {
                // decided on the block as read: decided again, written
                rl::State s = f[i].s;
                const rl_decision_t again = rl::transition(rule, s, now, ci.reserved, true);
                rl::Table::update_t(f[i].ref, s.head.t, rl::Debt{rl::owed_frac(rule, s, again, now), f[i].inherited});
                ci.after = s.head;
            }
            ci.outcome = delayed && !dry && d.delay_ms > 0 ? RL_OUTCOME_DELAYED : RL_OUTCOME_ALLOWED;
            if (delayed) {
                b = d.delay_ms > 0 && (b == n || d.delay_ms > c[b].decision.delay_ms) ? i : b;
            } else {
                b = b == n || d.remaining < c[b].decision.remaining ? i : b;
            }
        }
        if (ci.counters > 0) {
            rl::Table::at(ci.table)->count(ci.counters - 1, ci.outcome);
        }
    }
    rq.binding = b;
    rq.delay_ms = delayed ? c[b].decision.delay_ms : 0;
    rl::policy(*c[b].rule, c[b].decision);
    rq.verdict = !allowed ? RL_VERDICT_REJECTED : delayed ? RL_VERDICT_DELAYED : RL_VERDICT_PASSED;
    rl::act(rq);
    if (!allowed) {
        rl::note_refused(rq, now);
    }
    *verdict = rq.verdict;
    return true;
}

}  // namespace

namespace rl {

int decide(rl_request_t &rq, int64_t now_ms)
{
    int verdict;
    if (rq.n == 1) {
        rq.overridden = 0;
        (void) resolve_check(rq, rq.checks[0], now_ms);
        return decide_as<true>(rq, now_ms);
    }
    const bool denied = __builtin_expect(any_overrides(rq), 0) && resolve_overrides(rq, now_ms);
    if (!denied && rq.combine != RL_COMBINE_ANY) {
        const bool found = rq.n == 2   ? decide_found<2>(rq, now_ms, &verdict)
                           : rq.n == 3 ? decide_found<3>(rq, now_ms, &verdict)
                                       : decide_found<0>(rq, now_ms, &verdict);
        if (found) {
            return verdict;
        }
    }
    return decide_as<false>(rq, now_ms);
}

int decide_each(rl_request_t &rq, int64_t now_ms)
{
    if (any_overrides(rq)) {
        (void) resolve_overrides(rq, now_ms);
    }
    return decide_as<false>(rq, now_ms);
}

}  // namespace rl
