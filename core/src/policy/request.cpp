// A request, decided as a whole: what rl_decide (and, from Redis's reply,
// rl_redis_answer) conclude from the decisions of its rules, in one place
// for nginx and ratelimit-replay alike.
#include "policy/request.h"

#include <cstring>

#include "algorithms/algorithm.h"
#include "table/table.h"
#include "util/address.h"
#include "util/fault.h"

namespace rl {

// The check the response's headers describe is found in the same pass as
// the verdict, among those that apply and agree with it: when passed, the
// fewest remaining; when delayed (an applying check allowed with a delay),
// the longest delay; when rejected, the longest wait; the first of equals.
int conclude(rl_request_t &rq, bool allowed, bool queued)
{
    const size_t n = rq.n;
    const rl_check_t *c = rq.checks;
    if (queued) {
        // waits for a slot: the headers describe the first rule it waits
        // for, and it waits at most the shortest max_wait; nothing counts
        rq.binding = n;
        for (size_t i = 0; i < n; i++) {
            rq.checks[i].outcome = -1;
            if (applies(c[i]) && c[i].decision.queued) {
                if (rq.binding == n || c[i].decision.delay_ms < rq.delay_ms) {
                    rq.delay_ms = c[i].decision.delay_ms;
                }
                rq.binding = rq.binding == n ? i : rq.binding;
            }
        }
        rq.verdict = RL_VERDICT_QUEUED;
        act(rq);
        return rq.verdict;
    }
    if (n == 1) {
        return conclude_one(rq, allowed);
    }
    // Each rule's outcome, what its counters add, in the same pass: a
    // rejected request counts against the rules that denied it, a passed
    // one for the rules that allowed (and spent), as delayed where it is
    // held (marked once the verdict is known); a dry run counts what would
    // have been.
    const bool dry = rq.dry_run != 0;
    size_t applying = 0, fewest = n, longest = n;  // longest delay, or wait
    for (size_t i = 0; i < n; i++) {
        rl_check_t &ci = rq.checks[i];
        const rl_decision_t &d = ci.decision;
        if (!applies(ci)) {
            ci.outcome = RL_OUTCOME_EXEMPT;
            continue;
        }
        applying++;
        if ((bool) d.allowed != allowed) {
            ci.outcome = -1;
            continue;
        }
        if (!allowed) {
            ci.outcome = dry ? RL_OUTCOME_DRY_RUN_REJECTED : RL_OUTCOME_REJECTED;
            longest = longest == n || d.retry_after_ms > c[longest].decision.retry_after_ms ? i : longest;
            continue;
        }
        ci.outcome = RL_OUTCOME_ALLOWED;
        fewest = fewest == n || d.remaining < c[fewest].decision.remaining ? i : fewest;
        if (d.delay_ms > 0 && (longest == n || d.delay_ms > c[longest].decision.delay_ms)) {
            longest = i;
        }
    }
    const size_t b = allowed && longest == n ? fewest : longest;
    rq.binding = b == n ? 0 : b;
    rq.delay_ms = allowed && longest < n ? c[longest].decision.delay_ms : 0;
    if (applying) {
        // the policy the headers advertise: one rule's, once a request
        policy(*c[rq.binding].rule, rq.checks[rq.binding].decision);
    }
    rq.verdict = applying == 0     ? RL_VERDICT_EXEMPT
                 : !allowed        ? RL_VERDICT_REJECTED
                 : rq.delay_ms > 0 ? RL_VERDICT_DELAYED
                                   : RL_VERDICT_PASSED;
    for (size_t i = 0; rq.verdict == RL_VERDICT_DELAYED && !dry && i < n; i++) {
        rl_check_t &ci = rq.checks[i];
        ci.outcome = ci.outcome == RL_OUTCOME_ALLOWED && ci.decision.delay_ms > 0 ? RL_OUTCOME_DELAYED : ci.outcome;
    }
    if (!applying) {
        rq.binding = n;  // exempt: no rule to describe
    }
    act(rq);
    return rq.verdict;
}

namespace {

// Two checks hash their keys alike: the same table, the same key bytes.
bool same_key(const rl_check_t &a, const rl_check_t &b)
{
    return applies(a) && a.table == b.table && a.key_len == b.key_len &&
           (a.key == b.key || std::memcmp(a.key, b.key, a.key_len) == 0);
}

// The stack most locations with several rules have: every check on the
// first's key (the same bytes, one variable's value) in its table.
bool one_key(const rl_request_t &rq, size_t n)
{
    const rl_check_t *c = rq.checks;
    bool same = applies(c[0]);
    for (size_t i = 1; i < n; i++) {
        same &= c[i].table == c[0].table && c[i].key == c[0].key && c[i].key_len == c[0].key_len;
    }
    return same;
}

// A check's key of a rule keyed on the client's address as the rule keeps
// it: an IPv4-mapped address's its IPv4 address's (util/address.h; a
// mapped one is 16 bytes, or at least 14 of text: most keys stop at the
// length).  Returns the bytes skipped.
inline size_t unmap(rl_check_t &c)
{
    if (c.key_len < kMappedShortest || c.rule->key_addr == 0) {
        return 0;
    }
    const size_t skip = mapped_prefix(c.rule->key_addr, c.key, c.key_len);
    c.key = static_cast<const char *>(c.key) + skip;
    c.key_len -= skip;
    return skip;
}

// rl_request_hash, compiled for the common numbers of rules (kN) and for
// any (kN 0).  A stack on one key is hashed once and has one table to
// lock, with no search for either.
template <size_t kN> void hash_as(rl_request_t &rq)
{
    constexpr bool kOne = kN == 1;
    uint64_t hashes[kN != 0 ? kN : RL_RULES_MAX];
    const size_t n = kN != 0 ? kN : rq.n < RL_RULES_MAX ? rq.n : RL_RULES_MAX;
    if (!kOne && n > 1 && one_key(rq, n)) {
        // one key, of one expression: made as its rules keep it once
        if (const size_t skip = unmap(rq.checks[0])) {
            for (size_t i = 1; i < n; i++) {
                rq.checks[i].key = rq.checks[0].key;
                rq.checks[i].key_len -= skip;
            }
        }
        const Table *t = Table::at(rq.checks[0].table);
        const uint64_t h = t->hash(rq.checks[0].key, rq.checks[0].key_len);
        for (size_t i = 0; i < n; i++) {
            rq.checks[i].hash = h;
            rq.checks[i].tag = Table::of_hash(h, rq.checks[i].identity);
            t->prefetch(rq.checks[i].tag);
        }
        rq.order[0] = 0;
        rq.locks = 1;
        return;
    }
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        rl_check_t &c = rq.checks[i];
        if (!applies(c)) {
            continue;
        }
        unmap(c);
        const Table *t = Table::at(c.table);
        // a key is hashed once per table: the rules after the first on the
        // same key bytes take its hash (table.cpp, Table::hash)
        size_t j = 0;
        while (!kOne && j < i && !same_key(rq.checks[j], c)) {
            j++;
        }
        hashes[i] = j < i ? hashes[j] : t->hash(c.key, c.key_len);
        c.hash = hashes[i];
        c.tag = Table::of_hash(hashes[i], c.identity);
        t->prefetch(c.tag);
        if (j < i) {
            continue;  // its table is in the order already
        }
        // the tables, each once, sorted by address: the order to lock them
        uint32_t at = 0;
        while (!kOne && at < m && (uintptr_t) rq.checks[rq.order[at]].table < (uintptr_t) c.table) {
            at++;
        }
        if (!kOne && at < m && rq.checks[rq.order[at]].table == c.table) {
            continue;
        }
        for (uint32_t k = m++; !kOne && k > at; k--) {
            rq.order[k] = rq.order[k - 1];
        }
        rq.order[at] = (uint8_t) i;
    }
    rq.locks = m;
}

}  // namespace

}  // namespace rl

extern "C" {

void rl_request_hash(rl_request_t *rq)
{
    switch (rq->n) {
    case 1:
        rl::hash_as<1>(*rq);
        break;
    case 2:
        rl::hash_as<2>(*rq);
        break;
    case 3:
        rl::hash_as<3>(*rq);
        break;
    default:
        rl::hash_as<0>(*rq);
    }
}

void rl_request_fail(rl_request_t *rq, int refuse)
{
    rq->verdict = refuse ? RL_VERDICT_REJECTED : RL_VERDICT_PASSED;
    rq->binding = rq->n;
    rq->delay_ms = 0;
    rl::act(*rq);
    for (size_t i = 0; i < rq->n; i++) {
        rq->checks[i].outcome = -1;
    }
}

uint64_t rl_seconds(int64_t ms)
{
    return ms <= 0 ? 0 : ((uint64_t) ms + 999) / 1000;
}

uint64_t rl_retry_after_seconds(const rl_decision_t *d)
{
    if (d->allowed || d->retry_after_ms <= 0) {
        return 0;
    }
    const uint64_t s = rl_seconds(d->retry_after_ms);
    return s > 1 ? s : 1;
}

int rl_decide(rl_request_t *rq, int64_t now_ms)
{
    try {
        if (rq->n > RL_RULES_MAX) {
            rq->n = RL_RULES_MAX;
        }
        const int verdict = rl::decide(*rq, now_ms);
        return verdict;
    }
    RL_RETHROW_CRASH
    catch (...)
    {
        rq->verdict = RL_VERDICT_PASSED;  // unreachable: nothing here throws; fail open if it ever did
        rq->binding = 0;
        rq->delay_ms = 0;
        return rq->verdict;
    }
}

void rl_request_refund(rl_request_t *rq, int64_t now_ms)
{
    try {
        for (size_t i = 0; i < rq->n; i++) {
            rl_check_t &c = rq->checks[i];
            if (!rl::applies(c) || !c.decision.allowed || c.reserved == 0) {
                continue;
            }
            rl::Table *table = rl::Table::at(c.table);
            table->recover();
            rl::State s{};
            rl::Table::Ref ref{};
            if (!table->find(c.tag, &s, &ref)) {
                continue;  // evicted since: the summary holds what it owed
            }
            rl::refund(*c.rule, s, c.reserved, c.after, c.at, now_ms);
            if (s.blob == nullptr) {
                rl::Table::update(ref, s.head, rl::Table::debt(ref));
            } else {
                table->set_t(c.tag, s.head.t, rl::Table::debt(ref));
            }
        }
    } catch (...) {
    }
}

namespace {

// A concurrency rule's slot and place given back as its request ends:
// true if a slot was.  An algorithm that learns from its requests' ends
// (adaptive) learns from this one's, and its rule's figures say what it
// concluded.
bool release(rl_check_t &c, const rl_request_t &rq, int64_t now)
{
    const uint32_t holder = rq.holder;
    if (c.slot == 0 && c.ticket == 0) {
        return false;
    }
    rl::Table *table = rl::Table::at(c.table);
    table->recover();
    rl::State s{};
    if (!table->find(c.tag, &s) || s.blob == nullptr) {
        c.slot = c.ticket = 0;
        return false;  // reset through the key API, or evicted: nothing held
    }
    const rl::Algorithm &a = rl::algorithm_of(*c.rule);
    const bool freed = a.slots->release(*c.rule, s, now, c, holder);
    rl::Learned learned{};
    if (freed && a.slot_ended != nullptr &&
        a.slot_ended(*c.rule, s, now, rl::Ended{rq.latency_ms, rq.end_status, c.at}, &learned) && c.counters > 0) {
        table->note_learned(c.counters - 1, learned.limit, learned.baseline_us, learned.recent_us);
    }
    table->set_held(c.tag, s.head.t, now);
    if (freed && c.counters > 0) {
        table->count_flight(c.counters - 1, -1, false);
    }
    return freed;
}

// A Redis zone's concurrency check takes a slot in its server's zone, as a
// local decision would (the slots of processes that no longer exist given
// back first when none is free), or is marked full there.  Its rule's
// figures are not moved: they count the leases (rl_request_count).
void hold_here(rl_check_t &c, const rl_request_t &rq, int64_t now)
{
    rl::Table *table = rl::Table::at(c.table);
    table->recover();
    rl::State s{rl_state_t{0, 0}, nullptr};
    (void) table->find(c.tag, &s);  // a key absent holds none
    const int pool = table->pool_for(rl::blob_size(*c.rule), s);
    if (pool < 0) {
        return;  // no room for its block: Redis decides alone
    }
    uint32_t reclaimed = 0;
    const rl::Slots &slots = *rl::algorithm_of(*c.rule).slots;
    const rl_decision_t d = slots.decide(*c.rule, s, now, c, rq.alive, &reclaimed);
    if (!d.allowed) {
        if (reclaimed > 0) {
            table->set_held(c.tag, s.head.t, now);
        }
        c.full_here = 1;
        return;
    }
    s = table->acquire(c.tag, pool, now);
    slots.take(*c.rule, s, now, c, rq.holder);
    table->set_held(c.tag, s.head.t, now);
}

void free_here(rl_check_t &c, const rl_request_t &rq, int64_t now)
{
    rl::Table *table = rl::Table::at(c.table);
    table->recover();
    rl::State s{};
    if (table->find(c.tag, &s) && s.blob != nullptr) {
        (void) rl::algorithm_of(*c.rule).slots->release(*c.rule, s, now, c, rq.holder);
        table->set_held(c.tag, s.head.t, now);
    }
    c.slot = 0;  // reset through the key API, or evicted: nothing held
}

// The slots a Redis zone's request holds in its server's zone: taken
// (kTake), or given back, every one (kFreeAll) or those of the checks that
// hold no lease (kFreeUnleased).  Returns how many it holds then.
enum { kTake, kFreeAll, kFreeUnleased };

int slots_here(rl_request_t &rq, int64_t now, int what)
{
    int held = 0;
    for (size_t i = 0; i < rq.n; i++) {
        rl_check_t &c = rq.checks[i];
        if (!rl::applies(c) || !rl::has(*c.rule, rl::kSlots)) {
            continue;
        }
        if (what == kTake) {
            c.full_here = 0;
            if (c.slot == 0) {
                hold_here(c, rq, now);
            }
        } else if (c.slot != 0 && (what == kFreeAll || c.lease == 0)) {
            free_here(c, rq, now);
        }
        held += c.slot != 0;
    }
    return held;
}

}  // namespace

int rl_request_hold_here(rl_request_t *rq, int64_t now_ms)
{
    try {
        return slots_here(*rq, now_ms, kTake);
    } catch (...) {
        return 0;
    }
}

int rl_request_free_here(rl_request_t *rq, int64_t now_ms, int all)
{
    try {
        return slots_here(*rq, now_ms, all ? kFreeAll : kFreeUnleased);
    } catch (...) {
        return 0;
    }
}

int rl_check_charges(const rl_check_t *c)
{
    return rl::charges(*c);
}

int rl_check_charge_wanted(const rl_check_t *c, int abandoned)
{
    return rl::charges(*c) && !(abandoned && c->rule->abandoned == RL_ABANDONED_KEEP);
}

int rl_request_end(rl_request_t *rq, int64_t now_ms)
{
    int freed = 0;
    try {
        for (size_t i = 0; i < rq->n; i++) {
            rl_check_t &c = rq->checks[i];
            c.charged = 0;
            c.capped = 0;
            c.in_debt = 0;
            if (rl::settles(c)) {
                rl::settle(c, now_ms);
            }
            if (rl::charges(c)) {
                rl::end_flight(c, now_ms);
            }
            if (rl::applies(c) && rl::has(*c.rule, rl::kSlots)) {
                freed += release(c, *rq, now_ms);
            }
        }
    } catch (...) {
    }
    return freed;
}

void rl_request_count(rl_request_t *rq, int64_t now_ms)
{
    try {
        rl::count(*rq, now_ms);
        for (size_t i = 0; i < rq->n; i++) {
            const rl_check_t &c = rq->checks[i];
            if (c.counters > 0 && rl_redis_holds_lease(&c)) {
                rl::Table::at(c.table)->count_flight(c.counters - 1, +1, false);
            }
        }
    } catch (...) {
    }
}

void rl_request_count_leases_end(const rl_request_t *rq)
{
    for (size_t i = 0; i < rq->n; i++) {
        const rl_check_t &c = rq->checks[i];
        if (c.counters > 0 && rl_redis_holds_lease(&c)) {
            rl::Table::at(c.table)->count_flight(c.counters - 1, -1, false);
        }
    }
}

void rl_request_count_charges(const rl_request_t *rq)
{
    for (size_t i = 0; i < rq->n; i++) {
        if (rl::settles(rq->checks[i])) {
            rl::count_charge(rq->checks[i]);
        }
    }
}

void rl_request_refusal(const rl_request_t *rq, uint32_t *status, uint32_t *grpc_status)
{
    const bool overload = rq->binding < rq->n && rl::algorithm_of(*rq->checks[rq->binding].rule).slot_ended != nullptr;
    *status = overload ? 503 : 429;
    *grpc_status = overload ? RL_GRPC_UNAVAILABLE : RL_GRPC_RESOURCE_EXHAUSTED;
}

int rl_rule_holds_slots(const rl_rule_t *rule)
{
    return (rl::algorithm_of(*rule).traits & rl::kSlots) != 0;
}

int rl_rule_per_upstream(const rl_rule_t *rule)
{
    return rl::algorithm_of(*rule).slot_ended != nullptr;
}

uint32_t rl_rule_block_size(const rl_rule_t *rule)
{
    return (uint32_t) rl::blob_size(*rule);
}

}  // extern "C"
