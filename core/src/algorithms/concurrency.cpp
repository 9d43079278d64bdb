// Concurrency: at most `limit` requests of a key in flight at once, its
// slots and its max_wait queue as slots.cpp holds them (what adaptive
// shares).  Not a rate: an admitted request holds one of the key's slots
// until it ends, whatever its duration.
//
// In a Redis zone (ratelimit.lua's concurrency functions) a slot is a
// lease: a member of the key's sorted set, named by its server, process
// and request, scored by its deadline.  The script drops expired members
// before it counts, takes a slot atomically with the request's other
// rules, and the request's end removes it (RL_REDIS_RELEASE); a request
// that outlives a third of its lease has it renewed by its worker
// (RL_REDIS_RENEW).  No one can ask Redis whether a server still exists:
// a dead server's slots come back when their leases run out, within
// lease= of its death.
#include <cstdio>

#include "algorithms/algorithm.h"
#include "util/error.h"
#include "util/out.h"

namespace rl {

namespace {

// Its own parameters are the slots' (SlotParams): max_wait=, and lease=
// (default 30s).
const OwnParam own[] = {
    kMaxWait,
    time_param("lease", offsetof(SlotParams, lease_ms), 1000, 3600000, "a time from 1s to 1h, like 10s, 30s, 5m"),
};

// Not a rate: no period, no cost, no charge; its state keeps who holds
// each slot, so a limit of at most 4,096, known before a request
// (limit_max with a variable).
int concurrency_finish(rl_rule_t &rule, char *err, size_t errlen)
{
    if (limit_known(rule, "who holds each slot", 100, RL_CONCURRENCY_MAX, err, errlen) != RL_OK) {
        return RL_ERROR;
    }
    if (rule.given & P_PERIOD) {
        return fail(err, errlen,
                    "\"period=\" does not apply to algorithm=concurrency: it limits the requests of a key in "
                    "flight at once, not a rate (add a rule of another algorithm for a rate)");
    }
    if (!given(rule, "lease")) {
        SlotParams p = params_of<SlotParams>(rule);
        p.lease_ms = RL_LEASE_DEFAULT_MS;
        set_params(rule, p);
    }
    if ((rule.given & P_COST) || rule.charge) {
        return fail(err, errlen,
                    "\"%s=\" does not apply to algorithm=concurrency: each request holds one slot while it runs",
                    rule.charge ? "charge" : "cost");
    }
    return limit_at_most(rule, RL_CONCURRENCY_MAX, "a key holds at most ",
                         " requests in flight (its state keeps who holds each)", err, errlen);
}

void concurrency_tail(const rl_rule_t &, char *out, size_t len)
{
    std::snprintf(out, len, "%s", "at_once");
}

void concurrency_fields(Out &o, const rl_rule_t &rule)
{
    o.field("period_ms", (uint64_t) rule.period_ms);
}

// In Redis: a refusal has no time to wait for (a slot comes back when a
// request ends), an admission's lease runs lease= from Redis's clock, and
// no decision has a window.
void concurrency_bounds(const rl_rule_t &rule, bool, Bounds &b)
{
    const int64_t lease = params_of<SlotParams>(rule).lease_ms;
    b.longest = (unsigned __int128) (lease > 0 ? lease : RL_LEASE_DEFAULT_MS);
    b.window_min = b.window_max = 0;
}

// A request waiting for a slot would wait in its server's queue while the
// slot frees on another server.
int concurrency_redis_ok(const rl_rule_t &rule, char *err, size_t errlen)
{
    if (params_of<SlotParams>(rule).max_wait_ms > 0) {
        return fail(err, errlen,
                    "\"max_wait=\" does not apply to algorithm=concurrency in a Redis zone: a request would wait in "
                    "its server's queue while the slot it waits for frees on another server, which only asking "
                    "Redis again and again would tell; refuse at once (max_wait=0, the default), or use a zone "
                    "without redis= to wait");
    }
    return RL_OK;
}

void concurrency_spec(const rl_rule_t &rule, int64_t (&fields)[kSpecOwn])
{
    fields[kSpecLease] = params_of<SlotParams>(rule).lease_ms;
}

// The slots and queue, then the classes' part if any.
size_t concurrency_block(const rl_rule_t &rule)
{
    return slots_block_size(rule) + slots_classes_size(rule);
}

}  // namespace

extern const Algorithm kConcurrency = {
    .name = "concurrency",
    .traits = kSlots,
    .own = own,
    .nown = 2,
    .finish = concurrency_finish,
    .name_tail = concurrency_tail,
    .block_size = concurrency_block,
    .policy = slots_policy,
    .transition = slots_transition,
    .no_charge = "each request holds one slot while it runs",
    .bounds = concurrency_bounds,
    .redis_rule_ok = concurrency_redis_ok,
    .spec = concurrency_spec,
    .no_sync = "it counts requests in flight, which an exchange of counts every interval cannot hold to a limit "
               "across servers (nor give back a dead server's slots); use redis= for a fleet-wide concurrency "
               "limit (leases in Redis)",
    .api_fields = concurrency_fields,
    .overridable = P_LIMIT,
    .slots = &kInFlight,
};

}  // namespace rl
