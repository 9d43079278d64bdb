// The overrides a request meets (override.cpp), for rl_decide and for a
// Redis zone's request before it is sent.
#pragma once

#include "ratelimit.h"

namespace rl {

// Whether any table of the request holds overrides, or a check met one
// when it was decided before (a request decided again).
bool any_overrides(const rl_request_t &rq);

// Each check's override found and applied (rl_check_t's override fields):
// a limit override's rule in rq.room's memory, an allow override's check
// exempt, a deny override's noted.  True if a check is denied.  The caller
// holds the locks.
bool resolve_overrides(rl_request_t &rq, int64_t now);

// A decision refused by a deny override that ends at until (0: never):
// Retry-After its end, or none.
void deny_decision(rl_decision_t &d, int64_t until, int64_t now);

}  // namespace rl
