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
// A rule with priority classes (ratelimit_classes.h) keeps, after the
// queue, the slots each class holds, the class of each slot and of each
// waiter.  A request of class c may take a free slot unless the free
// slots are kept for other classes' shares (a class holding fewer than
// its share keeps the rest of it free), and the waiters go first by class,
// then in arrival order: a freed slot goes to the highest class waiting
// that may take it.  A class borrows any slot no share keeps.
//
// A process that dies holding slots or places never gives them back
// itself: whoever finds the key with no free slot, or waits behind a
// place, asks whether each holder still exists (the caller's alive()) and
// frees what dead ones held, at once.
#include <cstring>

#include "algorithms/algorithm.h"
#include "policy/classes.h"

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

// A rule with classes: the slots each class holds, then each slot's class
// and each waiter's, at the end of the key's block (after what its
// algorithm keeps beyond the queue: slots_classes_size).
struct Classed {
    uint32_t held[RL_CLASSES_MAX];
    uint8_t klass[1];  // [slots], then [queue capacity]
};

bool classed(const rl_rule_t &rule)
{
    return rule.classes != nullptr && rule.classes->n > 0;
}

Classed *classed_of(const rl_rule_t &rule, Block *b)
{
    return reinterpret_cast<Classed *>(reinterpret_cast<char *>(b) + rule.block - slots_classes_size(rule));
}

uint8_t *slot_class(const rl_rule_t &rule, Block *b)
{
    return classed_of(rule, b)->klass;
}

uint8_t *waiter_class(const rl_rule_t &rule, Block *b)
{
    return classed_of(rule, b)->klass + slots_of(rule);
}

// fair=: each slot's tenant and each waiter's, after the classes.
bool fair(const rl_rule_t &rule)
{
    return (rule.classes->given & P_FAIR) != 0;
}

size_t classes_size(const rl_rule_t &rule)
{
    return offsetof(Classed, klass) + slots_of(rule) + queue_capacity(rule);
}

uint32_t *slot_tenant(const rl_rule_t &rule, Block *b)
{
    const size_t at = (classes_size(rule) + 3) & ~size_t{3};
    return reinterpret_cast<uint32_t *>(reinterpret_cast<char *>(classed_of(rule, b)) + at);
}

uint32_t *waiter_tenant(const rl_rule_t &rule, Block *b)
{
    return slot_tenant(rule, b) + slots_of(rule);
}

uint32_t tenant_of(const rl_check_t &c)
{
    return c.tenant != 0 ? c.tenant : 1;
}

// A request's class, the lowest for a value out of range.
uint32_t class_of(const rl_rule_t &rule, const rl_check_t &c)
{
    return c.klass < rule.classes->n ? c.klass : rule.classes->n - 1;
}

// The slots each class holds counted again from the slots' classes.
void recount_classes(const rl_rule_t &rule, Block *b)
{
    Classed *k = classed_of(rule, b);
    std::memset(k->held, 0, sizeof(k->held));
    for (uint32_t i = 0; i < slots_of(rule); i++) {
        if (b->holder[i] != 0) {
            k->held[k->klass[i] < RL_CLASSES_MAX ? k->klass[i] : RL_CLASSES_MAX - 1]++;
        }
    }
}

// The key's block, or nullptr for a fresh key (all free, nothing queued).
Block *block_of(const State &s)
{
    return reinterpret_cast<Block *>(s.blob);
}

// The slots held, counted again if the count cannot be right (a process
// died writing the block).
// The count of a block a process died writing, counted again (apart: the
// count read above is inlined where it is needed).
[[gnu::noinline]] uint32_t recount(const rl_rule_t &rule, Block *b)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < slots_of(rule); i++) {
        n += b->holder[i] != 0;
    }
    if (classed(rule)) {
        recount_classes(rule, b);
    }
    return b->held = n;
}

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
    return recount(rule, b);
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

// The waiters `keep` keeps, in their order (their classes with them).
template <class Keep> void keep_waiters(const rl_rule_t &rule, Block *b, Keep keep)
{
    Waiter *q = queue_of(rule, b);
    uint8_t *k = classed(rule) ? waiter_class(rule, b) : nullptr;
    uint32_t *t = k != nullptr && fair(rule) ? waiter_tenant(rule, b) : nullptr;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < b->queued && i < queue_capacity(rule); i++) {
        if (keep(q[i])) {
            if (k != nullptr) {
                k[kept] = k[i];
            }
            if (t != nullptr) {
                t[kept] = t[i];
            }
            q[kept++] = q[i];
        }
    }
    b->queued = kept;
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
    if (classed(rule)) {
        recount_classes(rule, b);
    }
    keep_waiters(rule, b, [&](const Waiter &w) { return lives(w.holder); });
    return freed;
}

// What a class's request finds: the classes' slots held as they will be
// once the waiters served before it took theirs.  free: the slots open and
// not held; unmet(c): the slots c's share keeps (its share less what it
// holds); room(c): those c may take, every free one while c holds fewer
// than its own share (so that shares rounded up never lock each other
// out), else those the other classes' shares do not keep.
struct Shares {
    uint32_t n;
    uint32_t reserved[RL_CLASSES_MAX] = {};
    uint32_t held[RL_CLASSES_MAX] = {};
    int64_t free;
    int64_t kept;  // the sum of unmet()

    Shares(const rl_classes_t &k, uint32_t open, const uint32_t *holding, int64_t free_now) : n(k.n), free(free_now)
    {
        kept = 0;
        for (uint32_t j = 0; j < n; j++) {
            reserved[j] = class_reserved(k, j, open);
            held[j] = holding != nullptr ? holding[j] : 0;
            kept += unmet(j);
        }
    }
    int64_t unmet(uint32_t c) const { return held[c] < reserved[c] ? reserved[c] - held[c] : 0; }
    int64_t room(uint32_t c) const { return unmet(c) > 0 ? free : free - (kept - unmet(c)); }
    // `waiting` requests of class c served, as many as it has room for:
    // first within its own share, then beyond it
    void serve(uint32_t c, uint32_t waiting)
    {
        for (int phase = 0; phase < 2 && waiting > 0; phase++) {
            int64_t r = room(c);
            if (phase == 0) {
                r = r < unmet(c) ? r : unmet(c);
            }
            const uint32_t m = r <= 0 ? 0 : r < waiting ? (uint32_t) r : waiting;
            kept -= unmet(c);
            held[c] += m;
            kept += unmet(c);
            free -= m;
            waiting -= m;
        }
    }
};

// The tenants of one class of a key (fair=): the slots each holds, the
// requests each has waiting.  Up to kMost tenants apart; any more count as
// one more.
struct Tenants {
    static constexpr uint32_t kRoom = 128, kMost = 96, kOthers = kRoom;
    uint32_t id[kRoom + 1] = {};
    uint32_t held[kRoom + 1] = {};
    uint32_t waiting[kRoom + 1] = {};
    uint32_t n = 0;

    uint32_t at(uint32_t t)
    {
        t = t != 0 ? t : 1;  // 0 marks a free entry
        for (uint32_t i = (t * 2654435761u) >> 25;; i = (i + 1) & (kRoom - 1)) {
            if (id[i] == t) {
                return i;
            }
            if (id[i] == 0) {
                if (n == kMost) {
                    n += id[kOthers] == 0;
                    id[kOthers] = 1;
                    return kOthers;
                }
                id[i] = t;
                n++;
                return i;
            }
        }
    }
};

// Where a request stands among its class's waiters when its tenant's share
// counts (fair=): a tenant holding fewer than an equal share of the slots
// its class may have (`have`) is served before one holding its share or
// more; then the tenant holding fewer slots first; then the one with fewer
// requests waiting; then in arrival order (each tenant served in turn, as
// a slot it takes counts).  ahead: the class's waiters served before
// it; over: its tenant holds its share; keep: the slots an admission must
// leave free (below); crowding:
// a tenant with two waiters more than its own, whose latest a full queue
// gives up for it.
struct FairPlace {
    uint32_t ahead = 0;
    uint32_t keep = 0;
    bool over = false;
    bool crowding = false;
};

FairPlace fair_place(const rl_rule_t &rule, Block *b, uint32_t mine, const rl_check_t &c, int64_t have)
{
    Tenants ts;
    FairPlace f;
    const uint8_t *sk = b != nullptr ? slot_class(rule, b) : nullptr;
    const uint8_t *wk = b != nullptr ? waiter_class(rule, b) : nullptr;
    const uint32_t *st = b != nullptr ? slot_tenant(rule, b) : nullptr;
    const uint32_t *wt = b != nullptr ? waiter_tenant(rule, b) : nullptr;
    const uint32_t queued = b != nullptr ? b->queued : 0;
    for (uint32_t i = 0; b != nullptr && i < slots_of(rule); i++) {
        if (b->holder[i] != 0 && sk[i] == mine) {
            ts.held[ts.at(st[i])]++;
        }
    }
    for (uint32_t i = 0; i < queued; i++) {
        if (wk[i] == mine) {
            ts.waiting[ts.at(wt[i])]++;
        }
    }
    const uint32_t me = ts.at(tenant_of(c));
    const uint64_t cap = have > 0 ? (uint64_t) have : 0;
    const uint64_t share = cap / ts.n + (cap % ts.n != 0);
    auto over = [&](uint32_t t) { return ts.held[t] >= (share > 0 ? share : 1); };
    f.over = over(me);
    bool seen = false;
    const Waiter *q = b != nullptr ? queue_of(rule, b) : nullptr;
    for (uint32_t i = 0; i < queued; i++) {
        if (wk[i] != mine) {
            continue;
        }
        if (c.ticket != 0 && q[i].ticket == c.ticket) {
            seen = true;
            continue;
        }
        const uint32_t t = ts.at(wt[i]);
        const bool o = over(t);
        f.ahead += o != f.over                       ? !o
                   : ts.held[t] != ts.held[me]       ? ts.held[t] < ts.held[me]
                   : ts.waiting[t] != ts.waiting[me] ? ts.waiting[t] < ts.waiting[me]
                                                     : !seen;
        f.crowding = f.crowding || ts.waiting[t] > ts.waiting[me] + 1;
    }
    // without a queue, what an admission leaves free: a tenth of the
    // slots for tenants yet to come once a tenant holds half its share
    // with one more tenant, and, for one over its share, a slot for each
    // other tenant under its own
    const uint64_t half = (cap / (ts.n + 1) + 1) / 2;
    if (params_of<SlotParams>(rule).max_wait_ms == 0 && half > 0 && ts.held[me] >= half) {
        f.keep = cap / 10 > 0 ? (uint32_t) (cap / 10) : 1;
        for (uint32_t t = 0; f.over && t <= Tenants::kRoom; t++) {
            f.keep += ts.id[t] != 0 && t != me && !over(t);
        }
    }
    return f;
}

// The decision of a request of a rule with classes: the waiters of higher
// classes served first, then those of its own ahead of it; admitted if a
// slot is left that its class may take, else queued (max_wait: it is in
// the queue, or there is room, or a waiter of a lower class to give its
// place up), else refused, c.shed saying why.
rl_decision_t decide_classed(const rl_rule_t &rule, Block *b, uint32_t held, uint32_t open, rl_check_t &c)
{
    const rl_classes_t &k = *rule.classes;
    const uint32_t mine = class_of(rule, c);
    uint32_t waiting[RL_CLASSES_MAX] = {};
    uint32_t ahead = 0, lowest = 0;
    bool in_queue = false;
    Shares sh(k, open, b != nullptr ? classed_of(rule, b)->held : nullptr, held < open ? (int64_t) (open - held) : 0);
    if (b != nullptr && b->queued > 0) {
        const Waiter *q = queue_of(rule, b);
        const uint8_t *wk = waiter_class(rule, b);
        for (uint32_t i = 0; i < b->queued; i++) {
            const uint32_t wc = wk[i] < k.n ? wk[i] : k.n - 1;
            in_queue = in_queue || (c.ticket != 0 && q[i].ticket == c.ticket);
            ahead += wc == mine && !in_queue;
            waiting[wc]++;
            lowest = wc > lowest ? wc : lowest;
        }
    }
    const int64_t alone = sh.room(mine);  // with nobody waiting
    for (uint32_t j = 0; j < mine && b != nullptr && b->queued > 0; j++) {
        sh.serve(j, waiting[j]);
    }
    const int64_t room = b != nullptr && b->queued > 0 ? sh.room(mine) : alone;
    FairPlace f;
    if (fair(rule)) {
        f = fair_place(rule, b, mine, c, sh.held[mine] + (room > 0 ? room : 0));
        ahead = f.ahead;
    }
    rl_decision_t d{};
    c.shed = RL_SHED_NONE;
    if ((int64_t) (ahead + f.keep) < room) {
        d.allowed = 1;
        d.remaining = (uint64_t) (room - ahead - 1);
        return d;
    }
    const uint32_t queued = b != nullptr ? b->queued : 0;
    if (params_of<SlotParams>(rule).max_wait_ms > 0 &&
        (in_queue || queued < queue_capacity(rule) || lowest > mine || (f.crowding && !f.over))) {
        d.queued = 1;
        d.delay_ms = params_of<SlotParams>(rule).max_wait_ms;
    }
    c.shed = held >= open                       ? RL_SHED_FULL
             : alone <= 0                       ? RL_SHED_SHARE
             : f.over || (int64_t) ahead < room ? RL_SHED_FAIR
                                                : RL_SHED_QUEUE;
    return d;
}

// A rule with classes: decided again once the slots and places of
// holders that no longer exist are freed, if it is not admitted.
rl_decision_t decide_with_classes(const rl_rule_t &rule, State &s, rl_check_t &c, int (*alive)(uint32_t),
                                  uint32_t *reclaimed)
{
    Block *b = block_of(s);
    const uint32_t open = open_slots(rule, s);
    rl_decision_t d = decide_classed(rule, b, held_count(rule, s), open, c);
    if (!d.allowed && b != nullptr) {
        *reclaimed = reclaim(rule, s, alive);
        d = decide_classed(rule, b, held_count(rule, s), open, c);
    }
    return d;
}

rl_decision_t decide_in_order(const rl_rule_t &rule, State &s, int64_t now, const rl_check_t &c, int (*alive)(uint32_t),
                              uint32_t *reclaimed)
{
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

rl_decision_t decide(const rl_rule_t &rule, State &s, int64_t now, rl_check_t &c, int (*alive)(uint32_t),
                     uint32_t *reclaimed)
{
    *reclaimed = 0;
    return classed(rule) ? decide_with_classes(rule, s, c, alive, reclaimed)
                         : decide_in_order(rule, s, now, c, alive, reclaimed);
}

void leave_queue(const rl_rule_t &rule, State &s, rl_check_t &c)
{
    Block *b = block_of(s);
    if (c.ticket == 0 || b == nullptr) {
        return;
    }
    const uint32_t ticket = c.ticket;
    keep_waiters(rule, b, [ticket](const Waiter &w) { return w.ticket != ticket; });
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
            if (classed(rule)) {
                const uint32_t k = class_of(rule, c);
                slot_class(rule, b)[i] = (uint8_t) k;
                classed_of(rule, b)->held[k]++;
                if (fair(rule)) {
                    slot_tenant(rule, b)[i] = tenant_of(c);
                }
            }
            if (algorithm_of(rule).slot_taken != nullptr) {
                algorithm_of(rule).slot_taken(rule, s, now, b->held);
            }
            break;
        }
    }
    leave_queue(rule, s, c);
    s.head.t = horizon(rule, b, now);
}

// A full queue that a request of class `mine` joins: the latest waiter of
// the lowest class below it leaves (decided again, it finds itself out of
// the queue, and joins it again only if there is room); with fair=, else
// the latest waiter of its class whose tenant has the most waiting, two
// more than its own.
void give_place_up(const rl_rule_t &rule, Block *b, uint32_t mine, uint32_t tenant)
{
    const uint8_t *wk = waiter_class(rule, b);
    uint32_t out = b->queued, lowest = mine;
    for (uint32_t i = 0; i < b->queued; i++) {
        if (wk[i] >= lowest && wk[i] > mine) {
            lowest = wk[i];
            out = i;
        }
    }
    if (out == b->queued && fair(rule)) {
        Tenants ts;
        const uint32_t *wt = waiter_tenant(rule, b);
        uint32_t most = 0;
        for (uint32_t i = 0; i < b->queued; i++) {
            if (wk[i] == mine) {
                ts.waiting[ts.at(wt[i])]++;
            }
        }
        const uint32_t own = ts.waiting[ts.at(tenant)];
        for (uint32_t i = 0; i < b->queued; i++) {
            const uint32_t w = ts.waiting[ts.at(wt[i])];
            if (wk[i] == mine && w > own + 1 && w >= most) {
                most = w;
                out = i;
            }
        }
    }
    if (out < b->queued) {
        const uint32_t ticket = queue_of(rule, b)[out].ticket;
        keep_waiters(rule, b, [ticket](const Waiter &w) { return w.ticket != ticket; });
    }
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
    if (b->queued == queue_capacity(rule) && classed(rule)) {
        give_place_up(rule, b, class_of(rule, c), tenant_of(c));
    }
    if (b->queued < queue_capacity(rule)) {
        c.ticket = ++b->next_ticket != 0 ? b->next_ticket : ++b->next_ticket;
        if (classed(rule)) {
            waiter_class(rule, b)[b->queued] = (uint8_t) class_of(rule, c);
        }
        if (classed(rule) && fair(rule)) {
            waiter_tenant(rule, b)[b->queued] = tenant_of(c);
        }
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
        if (classed(rule)) {
            uint32_t &n = classed_of(rule, b)->held[slot_class(rule, b)[c.slot - 1] % RL_CLASSES_MAX];
            n = n > 0 ? n - 1 : 0;
        }
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

size_t slots_classes_size(const rl_rule_t &rule)
{
    if (!classed(rule)) {
        return 0;
    }
    const size_t tenants = fair(rule) ? 3 + sizeof(uint32_t) * (slots_of(rule) + queue_capacity(rule)) : 0;
    return (classes_size(rule) + tenants + 3) & ~size_t{3};
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

static_assert(sizeof(rl_peek_t::class_in_flight) / sizeof(uint32_t) == RL_CLASSES_MAX, "rl_peek_t's classes");

// A key's slots held and requests waiting by class, and the slots each
// class's share keeps now (a rule with classes).
void slots_by_class(const rl_rule_t &rule, const State &s, uint32_t *held, uint32_t *queued, uint32_t *kept)
{
    const rl_classes_t &k = *rule.classes;
    const uint32_t open = open_slots(rule, s);
    Block *b = block_of(s);
    for (uint32_t i = 0; i < k.n; i++) {
        held[i] = b != nullptr ? classed_of(rule, b)->held[i] : 0;
        queued[i] = 0;
        kept[i] = class_reserved(k, i, open);
    }
    for (uint32_t i = 0; b != nullptr && i < b->queued && i < queue_capacity(rule); i++) {
        queued[waiter_class(rule, b)[i] < k.n ? waiter_class(rule, b)[i] : k.n - 1]++;
    }
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
    .by_class = slots_by_class,
    .open = open_slots,
};

}  // namespace rl
