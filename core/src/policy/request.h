// Deciding a request (rl_decide): the request-level parts of the core.
#pragma once

#include "ratelimit.h"

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

// Decides every check that applies on its key's state, combines, and
// commits all that consume or none (check.cpp); a request that waits for a
// slot (concurrency) joins the queues it waits in and spends nothing.  The
// caller holds the locks.
enum class Checked { kRefused, kAdmitted, kQueued };
Checked check(rl_request_t &rq, int64_t now_ms);

// The verdict, binding rule, delay and outcomes of a request whose checks
// are decided (request.cpp; rl_decide and rl_redis_answer end with it).
int conclude(rl_request_t &rq, bool allowed, bool queued = false);

// The action and status of a request whose verdict is set (a dry run
// passes whatever the verdict; request.cpp).
void act(rl_request_t &rq);

// Counts the refusals of a concluded request among its rules' top keys
// (keys.cpp).  The caller holds the locks.
void note_refused(const rl_request_t &rq, int64_t now);

// Counts a concluded request: each rule's outcome, and its refusals among
// the top keys (request.cpp).  The caller holds the locks.
void count(const rl_request_t &rq, int64_t now);

// Settles a check of a charge= rule when its request ends: the cost it
// reserved given back, its charge spent (settle.cpp).  The caller holds the
// lock of its table.
void settle(rl_check_t &c, int64_t now);

// Counts what a settled check charged in its rule's counters (settle.cpp):
// its units, and a request that left the key in debt.  The caller holds the
// lock of its table.
void count_charge(const rl_check_t &c);

}  // namespace rl
