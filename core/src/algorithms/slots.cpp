// Requests in flight, what concurrency and adaptive share: at most a
// number of requests of a key in flight at once (the rule's limit, or what
// the algorithm learned: its record's slots_open).  Not a rate: an admitted
// request holds one of the key's slots until it ends (rl_request_end gives
// it back), whatever its duration; with max_wait, a request that finds
// every slot taken waits in the key's queue, first come first served,
// across every worker, and takes a slot when its turn comes.  The concerns
// reach these through a record's `slots` (kInFlight).
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
#include "algorithms/algorithm.h"

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
    return largest_limit(rule);
}

uint32_t queue_capacity(const rl_rule_t &rule)
{
    if (params_of<SlotParams>(rule).max_wait_ms == 0) {
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

uint32_t open_slots(const rl_rule_t &rule, const State &s)
{
    const Algorithm &a = algorithm_of(rule);
    return a.slots_open != nullptr ? a.slots_open(rule, s) : rule.limit;
}

// Frees what processes that no longer exist held: their slots and their
// places in the queue.  Returns the slots freed.
uint32_t reclaim(const rl_rule_t &rule, State &s, int (*alive)(uint32_t))
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

rl_decision_t decide(const rl_rule_t &rule, State &s, int64_t now, const rl_check_t &c, int (*alive)(uint32_t),
                     uint32_t *reclaimed)
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
    const uint32_t open = open_slots(rule, s);
    auto free_slots = [&]() { return held < open ? open - held : 0; };
    uint32_t ahead = place();
    if (ahead >= free_slots() && b != nullptr) {
        *reclaimed = reclaim(rule, s, alive);
        held = held_count(rule, s);
        ahead = place();
    }

    rl_decision_t d{};
    const uint32_t free = free_slots();
    const uint32_t queued = b != nullptr ? b->queued : 0;
    if (ahead < free) {
        d.allowed = 1;
        d.remaining = free - 1;
    } else if (params_of<SlotParams>(rule).max_wait_ms > 0 && (ahead < queued || queued < queue_capacity(rule))) {
        d.queued = 1;  // in the queue, or room to join it
        d.delay_ms = params_of<SlotParams>(rule).max_wait_ms;
    }
    (void) now;
    return d;
}

void leave_queue(const rl_rule_t &rule, State &s, rl_check_t &c)
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

void take(const rl_rule_t &rule, State &s, int64_t now, rl_check_t &c, uint32_t holder)
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
    leave_queue(rule, s, c);
    s.head.t = horizon(rule, b, now);
}

void join(const rl_rule_t &rule, State &s, int64_t now, rl_check_t &c, uint32_t holder)
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

bool release(const rl_rule_t &rule, State &s, int64_t now, rl_check_t &c, uint32_t holder)
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
    leave_queue(rule, s, c);
    s.head.t = horizon(rule, b, now);
    return freed;
}

}  // namespace

size_t slots_block_size(const rl_rule_t &rule)
{
    return offsetof(Block, holder) + sizeof(uint32_t) * slots_of(rule) + sizeof(Waiter) * queue_capacity(rule);
}

rl_decision_t slots_transition(const rl_rule_t &rule, State &s, int64_t, uint64_t cost, bool)
{
    // a look: the slots left, none if others wait (rl_transition, peeks);
    // a request (cost 1) would take one of them
    const uint32_t held = held_count(rule, s);
    const uint32_t open = open_slots(rule, s);
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

void slots_held(const rl_rule_t &rule, const State &s, uint32_t *held, uint32_t *queued)
{
    State copy = s;
    *held = held_count(rule, copy);
    *queued = s.blob != nullptr ? block_of(s)->queued : 0;
}

// The policy: the limit, and no window (slots come back as requests end).
void slots_policy(rl_rule_t &rule)
{
    rule.policy_quota = rule.limit;
    rule.policy_window_ms = 0;
}

const Slots kInFlight = {
    .decide = decide,
    .take = take,
    .join = join,
    .leave = leave_queue,
    .release = release,
    .held = slots_held,
    .open = open_slots,
};

}  // namespace rl
