// Deciding a request (rl_decide): the request-level parts of the core.
#pragma once

#include "algorithms/algorithms.h"
#include "ratelimit.h"
#include "table/table.h"

namespace rl {

// A check applies when its key is not empty; an empty key exempts the
// request from the check's rule.
inline bool applies(const rl_check_t &c)
{
    return c.key_len > 0;
}

// A check of a charge= rule that reserved its cost at the rule (admitted
// there, or delayed): what its request's end settles.  A refusal never is.
inline bool charges(const rl_check_t &c)
{
    const bool reserved = c.outcome == RL_OUTCOME_ALLOWED || c.outcome == RL_OUTCOME_DELAYED;
    return applies(c) && c.rule->charge && reserved;
}

// And one whose charge is known (RL_NO_CHARGE: the reservation stands).
inline bool settles(const rl_check_t &c)
{
    return charges(c) && c.charge != RL_NO_CHARGE;
}

// charge=: what a request of the rule reserves at least while it runs
// (settle.cpp), its charge unknown till it ends; 0: its cost.
uint64_t charge_share(const rl_rule_t &rule);
// A key's reservations in flight (charge=), kept beside its state under
// Table::flight_tag (settle.cpp): what an admitted check reserved is added
// (hold_flight) and taken off when its request ends (end_flight);
// in_flight() marks a refused check that only they refused.
void hold_flight(const rl_check_t &c, int64_t now);
void end_flight(const rl_check_t &c, int64_t now);
void in_flight(rl_check_t &c, int64_t now);

// Decides every check that applies on its key's state, combines, and
// commits all that consume or none; a request that waits for a slot
// (concurrency) joins the queues it waits in and spends nothing.  Then
// concludes and counts it (rl_decide): check.cpp.  The caller holds the
// locks.
int decide(rl_request_t &rq, int64_t now_ms);
// The same through the path that decides any request, whatever its rules
// and keys (check.cpp): decide() takes a shorter one for most requests of
// several rules, and the tests compare the two.
int decide_each(rl_request_t &rq, int64_t now_ms);

// The verdict, binding rule, delay and outcomes of a request whose checks
// are decided (request.cpp; rl_decide and rl_redis_answer end with it).
int conclude(rl_request_t &rq, bool allowed, bool queued = false);

// The action and status of a request whose verdict is set (a dry run
// passes whatever the verdict).
inline void act(rl_request_t &rq)
{
    // by verdict: the action and status, then a dry run's (which passes)
    static const struct {
        int action, status, dry_status;
    } by_verdict[] = {
        {RL_ACTION_PASS, RL_STATUS_PASSED, RL_STATUS_PASSED},                // passed
        {RL_ACTION_DELAY, RL_STATUS_DELAYED, RL_STATUS_DELAYED_DRY_RUN},     // delayed
        {RL_ACTION_REFUSE, RL_STATUS_REJECTED, RL_STATUS_REJECTED_DRY_RUN},  // rejected
        {RL_ACTION_PASS, RL_STATUS_EXEMPT, RL_STATUS_EXEMPT},                // exempt
        {RL_ACTION_WAIT, RL_STATUS_NONE, RL_STATUS_NONE},  // queued: a dry run never waits (check.cpp)
    };
    const unsigned v = (unsigned) rq.verdict < sizeof(by_verdict) / sizeof(by_verdict[0]) ? (unsigned) rq.verdict : 0;
    const bool dry = rq.dry_run != 0 && rq.verdict != RL_VERDICT_QUEUED;
    rq.action = dry ? RL_ACTION_PASS : by_verdict[v].action;
    rq.status = dry ? by_verdict[v].dry_status : by_verdict[v].status;
    if (rq.status == RL_STATUS_REJECTED) {
        // refused by reservations in flight alone: told apart
        size_t refusing = 0, flight = 0;
        for (size_t i = 0; i < rq.n; i++) {
            const rl_check_t &c = rq.checks[i];
            refusing += applies(c) && !c.decision.allowed;
            flight += applies(c) && !c.decision.allowed && c.in_flight;
        }
        rq.status = flight > 0 && flight == refusing ? RL_STATUS_REJECTED_IN_FLIGHT : rq.status;
    }
}

// conclude() of a request of one rule, not queued: the rule binds,
// whatever it decided.  (Inline: most requests.)
RL_HOT int conclude_one(rl_request_t &rq, bool allowed)
{
    rl_check_t &only = rq.checks[0];
    if (allowed && applies(only) && only.decision.delay_ms == 0 && only.decision.allowed) {
        // most requests: admitted at once, dry run or not
        policy(*only.rule, only.decision);
        rq.binding = 0;
        rq.delay_ms = 0;
        rq.verdict = RL_VERDICT_PASSED;
        rq.action = RL_ACTION_PASS;
        rq.status = RL_STATUS_PASSED;
        only.outcome = RL_OUTCOME_ALLOWED;
        return RL_VERDICT_PASSED;
    }
    if (!applies(only)) {
        rq.binding = 1;  // exempt: no rule to describe
        rq.delay_ms = 0;
        rq.verdict = RL_VERDICT_EXEMPT;
        only.outcome = RL_OUTCOME_EXEMPT;
    } else {
        const bool dry = rq.dry_run != 0;
        policy(*only.rule, only.decision);
        rq.binding = 0;
        rq.delay_ms = allowed ? only.decision.delay_ms : 0;
        rq.verdict = !allowed ? RL_VERDICT_REJECTED : rq.delay_ms > 0 ? RL_VERDICT_DELAYED : RL_VERDICT_PASSED;
        only.outcome = (bool) only.decision.allowed != allowed ? -1
                       : !allowed                ? (dry ? RL_OUTCOME_DRY_RUN_REJECTED : RL_OUTCOME_REJECTED)
                       : rq.delay_ms > 0 && !dry ? RL_OUTCOME_DELAYED
                                                 : RL_OUTCOME_ALLOWED;
    }
    act(rq);
    return rq.verdict;
}

// Counts the refusals of a concluded request among its rules' top keys
// (keys.cpp).  The caller holds the locks.
void note_refused(const rl_request_t &rq, int64_t now);

// Counts a concluded request: each rule's outcome, the bans it starts (or
// would, in a dry run), and its refusals among the top keys.  The caller
// holds the locks.
inline void count(const rl_request_t &rq, int64_t now)
{
    for (size_t i = 0; i < rq.n; i++) {
        const rl_check_t &c = rq.checks[i];
        if (c.counters > 0) {
            Table::at(c.table)->count(c.counters - 1, c.outcome);
            if (c.banning) {
                Table::at(c.table)->count_ban(c.counters - 1, rq.dry_run != 0);
            }
            if (c.override) {
                Table::at(c.table)->count_override(c.counters - 1);
            }
        }
    }
    if (rq.verdict == RL_VERDICT_REJECTED) {
        note_refused(rq, now);
    }
}

// Settles a check of a charge= rule when its request ends: the cost it
// reserved given back, its charge spent (settle.cpp).  The caller holds the
// lock of its table.
void settle(rl_check_t &c, int64_t now);

// Counts what a settled check charged in its rule's counters (settle.cpp):
// its units, and a request that left the key in debt.  The caller holds the
// lock of its table.
void count_charge(const rl_check_t &c);

}  // namespace rl
