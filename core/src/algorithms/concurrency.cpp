// Concurrency: at most `limit` requests of a key in flight at once.  Not a
// rate: an admitted request holds one of the key's slots until it ends
// (rl_request_end gives it back), whatever its duration; with max_wait, a
// request that finds every slot taken waits in the key's queue, first come
// first served, across every worker, and takes a slot when its turn comes.
//
// State: the head's t is an instant far ahead while anything is held or
// queued (the table never drops such a key as "back to full budget"), now
// when nothing is.  The block: the slots held, the next ticket, the queue's
// length, who holds each slot (a process id, 0 for a free slot), then the
// queue of waiters in arrival order (process id and ticket).
//
// A process that dies holding slots or places never gives them back
// itself: whoever finds the key with no free slot, or waits behind a
// place, asks whether each holder still exists (the caller's alive()) and
// frees what dead ones held, at once.
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
#include <cstring>

#include "algorithms/algorithm.h"
#include "util/error.h"
#include "util/out.h"

namespace rl {

namespace {

struct Waiter {
    uint32_t holder;
    uint32_t ticket;
};

struct Block {
    uint32_t held;
    uint32_t next_ticket;
    uint32_t queued;
    uint32_t holder[1];  // [slots], then Waiter[capacity]
};

// Far enough ahead that the key outlives any request (35 years), near
// enough that the table's weights cannot overflow.
constexpr int64_t kHeld = 1ll << 40;

uint32_t slots_of(const rl_rule_t &rule)
{
    return rule.limit_var ? rule.limit_max : rule.limit;
}

uint32_t queue_capacity(const rl_rule_t &rule)
{
    if (rule.max_wait_ms == 0) {
        return 0;
    }
    const uint32_t q = 4 * slots_of(rule);
    return q < 16 ? 16 : q > RL_QUEUE_MAX ? RL_QUEUE_MAX : q;
}

Waiter *queue_of(const rl_rule_t &rule, Block *b)
{
    return reinterpret_cast<Waiter *>(&b->holder[slots_of(rule)]);
}

// The key's block, or nullptr for a fresh key (all free, nothing queued).
Block *block_of(const State &s)
{
    return reinterpret_cast<Block *>(s.blob);
}

// The slots held, counted again if the count cannot be right (a process
// died writing the block).
uint32_t held_count(const rl_rule_t &rule, State &s)
{
    Block *b = block_of(s);
    const uint32_t slots = slots_of(rule);
    if (b == nullptr) {
        return 0;
    }
    if (b->held <= slots) {
        return b->held;
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < slots; i++) {
        n += b->holder[i] != 0;
    }
    return b->held = n;
}

// A key is kept while anything is held or queued, and always where its
// algorithm learns from its requests (adaptive: its limit and baseline).
int64_t horizon(const rl_rule_t &rule, const Block *b, int64_t now)
{
    const bool learns = algorithm_of(rule).slot_ended != nullptr;
    return learns || (b != nullptr && (b->held > 0 || b->queued > 0)) ? now + kHeld : now;
}

}  // namespace

size_t concurrency_blob_size(const rl_rule_t &rule)
{
    return offsetof(Block, holder) + sizeof(uint32_t) * slots_of(rule) + sizeof(Waiter) * queue_capacity(rule);
}

uint32_t concurrency_open(const rl_rule_t &rule, const State &s)
{
    const Algorithm &a = algorithm_of(rule);
    return a.slots_open != nullptr ? a.slots_open(rule, s) : rule.limit;
}

rl_decision_t concurrency(const rl_rule_t &rule, State &s, int64_t, uint64_t cost, bool)
{
    // a look: the slots left, none if others wait (rl_transition, peeks);
    // a request (cost 1) would take one of them
    const uint32_t held = held_count(rule, s);
    const uint32_t open = concurrency_open(rule, s);
    const Block *b = block_of(s);
    rl_decision_t d{};
    d.remaining = held < open ? open - held : 0;
    d.quota = open;
    d.allowed = cost == 0 || (d.remaining > 0 && (b == nullptr || b->queued == 0));
    if (d.allowed && cost > 0) {
        d.remaining--;
    }
    return d;
}

// Frees what processes that no longer exist held: their slots and their
// places in the queue.  Returns the slots freed.
uint32_t concurrency_reclaim(const rl_rule_t &rule, State &s, int (*alive)(uint32_t))
{
    Block *b = block_of(s);
    if (b == nullptr || alive == nullptr) {
        return 0;
    }
    // each process asked once: the last answers, in a few entries
    uint32_t asked[8] = {};
    bool answer[8] = {};
    uint32_t next = 0;
    auto lives = [&](uint32_t pid) {
        for (uint32_t i = 0; i < 8; i++) {
            if (asked[i] == pid) {
                return answer[i];
            }
        }
        const bool yes = alive(pid) != 0;
        asked[next % 8] = pid;
        answer[next % 8] = yes;
        next++;
        return yes;
    };
    uint32_t freed = 0, held = 0;
    const uint32_t slots = slots_of(rule);
    for (uint32_t i = 0; i < slots; i++) {
        if (b->holder[i] != 0 && !lives(b->holder[i])) {
            b->holder[i] = 0;
            freed++;
        }
        held += b->holder[i] != 0;
    }
    b->held = held;  // counted again: a process may have died writing it
    Waiter *q = queue_of(rule, b);
    uint32_t kept = 0;
    for (uint32_t i = 0; i < b->queued && i < queue_capacity(rule); i++) {
        if (lives(q[i].holder)) {
            q[kept++] = q[i];
        }
    }
    b->queued = kept;
    return freed;
}

rl_decision_t concurrency_decide(const rl_rule_t &rule, State &s, int64_t now, const rl_check_t &c,
                                 int (*alive)(uint32_t), uint32_t *reclaimed)
{
    *reclaimed = 0;
    Block *b = block_of(s);
    uint32_t held = held_count(rule, s);

    // where the request stands: the waiters ahead of it (new ones, and
    // one whose place was lost to a reset, queue behind every waiter)
    auto place = [&]() -> uint32_t {
        const Waiter *q = b != nullptr ? queue_of(rule, b) : nullptr;
        const uint32_t n = b != nullptr ? b->queued : 0;
        for (uint32_t i = 0; c.ticket != 0 && i < n; i++) {
            if (q[i].ticket == c.ticket) {
                return i;
            }
        }
        return n;
    };
    const uint32_t open = concurrency_open(rule, s);
    auto free_slots = [&]() { return held < open ? open - held : 0; };
    uint32_t ahead = place();
    if (ahead >= free_slots() && b != nullptr) {
        *reclaimed = concurrency_reclaim(rule, s, alive);
        held = held_count(rule, s);
        ahead = place();
    }

    rl_decision_t d{};
    const uint32_t free = free_slots();
    const uint32_t queued = b != nullptr ? b->queued : 0;
    if (ahead < free) {
        d.allowed = 1;
        d.remaining = free - 1;
    } else if (rule.max_wait_ms > 0 && (ahead < queued || queued < queue_capacity(rule))) {
        d.queued = 1;  // in the queue, or room to join it
        d.delay_ms = rule.max_wait_ms;
    }
    (void) now;
    return d;
}

void concurrency_take(const rl_rule_t &rule, State &s, int64_t now, rl_check_t &c, uint32_t holder)
{
    Block *b = block_of(s);
    const uint32_t slots = slots_of(rule);
    const uint32_t held = held_count(rule, s);
    for (uint32_t i = 0; i < slots; i++) {
        if (b->holder[i] == 0) {
            b->holder[i] = holder != 0 ? holder : 1;
            c.slot = i + 1;
            b->held = held + 1;
            if (algorithm_of(rule).slot_taken != nullptr) {
                algorithm_of(rule).slot_taken(rule, s, now, b->held);
            }
            break;
        }
    }
    concurrency_leave_queue(rule, s, c);
    s.head.t = horizon(rule, b, now);
}

void concurrency_enqueue(const rl_rule_t &rule, State &s, int64_t now, rl_check_t &c, uint32_t holder)
{
    Block *b = block_of(s);
    Waiter *q = queue_of(rule, b);
    for (uint32_t i = 0; c.ticket != 0 && i < b->queued; i++) {
        if (q[i].ticket == c.ticket) {
            s.head.t = horizon(rule, b, now);
            return;  // waiting already
        }
    }
    if (b->queued < queue_capacity(rule)) {
        c.ticket = ++b->next_ticket != 0 ? b->next_ticket : ++b->next_ticket;
        q[b->queued++] = Waiter{holder != 0 ? holder : 1, c.ticket};
    }
    s.head.t = horizon(rule, b, now);
}

void concurrency_leave_queue(const rl_rule_t &rule, State &s, rl_check_t &c)
{
    Block *b = block_of(s);
    if (c.ticket == 0 || b == nullptr) {
        return;
    }
    Waiter *q = queue_of(rule, b);
    uint32_t kept = 0;
    for (uint32_t i = 0; i < b->queued && i < queue_capacity(rule); i++) {
        if (q[i].ticket != c.ticket) {
            q[kept++] = q[i];
        }
    }
    b->queued = kept;
    c.ticket = 0;
}

bool concurrency_release(const rl_rule_t &rule, State &s, int64_t now, rl_check_t &c, uint32_t holder)
{
    Block *b = block_of(s);
    bool freed = false;
    if (b != nullptr && c.slot > 0 && c.slot <= slots_of(rule) && b->holder[c.slot - 1] == (holder != 0 ? holder : 1)) {
        b->holder[c.slot - 1] = 0;
        const uint32_t held = held_count(rule, s);
        b->held = held > 0 ? held - 1 : 0;
        freed = true;
    }
    c.slot = 0;
    concurrency_leave_queue(rule, s, c);
    s.head.t = horizon(rule, b, now);
    return freed;
}

void concurrency_counts(const rl_rule_t &rule, const State &s, uint32_t *held, uint32_t *queued)
{
    State copy = s;
    *held = held_count(rule, copy);
    *queued = s.blob != nullptr ? block_of(s)->queued : 0;
}

// What the slot algorithms share (adaptive's record names them too).

// The policy: the limit, and no window (slots come back as requests end).
void concurrency_policy(rl_rule_t &rule)
{
    rule.policy_quota = rule.limit;
    rule.policy_window_ms = 0;
}

// A slot is given back when its request ends, whatever ends it.
void concurrency_refund(const rl_rule_t &, State &, uint64_t, rl_state_t, int64_t, int64_t) {}

// Slots are not a debt: kept in the table while held (check.cpp), and a
// key absent from it holds none.
uint32_t concurrency_owed(const rl_rule_t &, const State &, const rl_decision_t &, int64_t)
{
    return 0;
}

State concurrency_restore(const rl_rule_t &, Owed, int64_t)
{
    return State{rl_state_t{0, 0}, nullptr};
}

namespace {

// Not a rate: no period, no cost, no charge; its state keeps who holds
// each slot, so a limit of at most 4,096, known before a request
// (limit_max with a variable).
int concurrency_finish(rl_rule_t &rule, char *err, size_t errlen)
{
    if (rule.limit_var && !(rule.given & P_LIMIT_MAX)) {
        return fail(err, errlen,
                    "missing \"limit_max=\" for algorithm=concurrency with limit=$variable: its state keeps who "
                    "holds each slot, sized by the largest limit, e.g. limit_max=100 (at most %u)",
                    RL_CONCURRENCY_MAX);
    }
    if (rule.given & P_PERIOD) {
        return fail(err, errlen,
                    "\"period=\" does not apply to algorithm=concurrency: it limits the requests of a key in "
                    "flight at once, not a rate (add a rule of another algorithm for a rate)");
    }
    if (!(rule.given & P_LEASE)) {
        rule.lease_ms = RL_LEASE_DEFAULT_MS;
    }
    if ((rule.given & P_COST) || rule.charge) {
        return fail(err, errlen,
                    "\"%s=\" does not apply to algorithm=concurrency: each request holds one slot while it runs",
                    rule.charge ? "charge" : "cost");
    }
    const uint32_t most = rule.limit_var ? rule.limit_max : rule.limit;
    if (most > RL_CONCURRENCY_MAX) {
        return fail(err, errlen,
                    "\"%s=%u\" is too large for algorithm=concurrency: a key holds at most %u requests in flight "
                    "(its state keeps who holds each)",
                    rule.limit_var ? "limit_max" : "limit", most, RL_CONCURRENCY_MAX);
    }
    return RL_OK;
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
    b.longest = (unsigned __int128) (rule.lease_ms > 0 ? rule.lease_ms : RL_LEASE_DEFAULT_MS);
    b.window_min = b.window_max = 0;
}

}  // namespace

extern const Algorithm kConcurrency = {
    "concurrency",
    kSlots,
    P_MAX_WAIT | P_LEASE,
    concurrency_finish,
    concurrency_tail,
    concurrency_blob_size,
    concurrency_policy,
    nullptr,
    nullptr,
    concurrency,
    nullptr,
    nullptr,
    "each request holds one slot while it runs",
    concurrency_refund,
    concurrency_owed,
    concurrency_restore,
    nullptr,
    nullptr,
    nullptr,
    concurrency_bounds,
    "it counts requests in flight, which an exchange of counts every interval cannot hold to a limit across "
    "servers (nor give back a dead server's slots); use redis= for a fleet-wide concurrency limit (leases in "
    "Redis)",
    concurrency_fields,
    P_LIMIT,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace rl
