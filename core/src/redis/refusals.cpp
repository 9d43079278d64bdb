// Refusals remembered, for a zone with redis=: under a flood, a spent key's
// requests are refused in nginx until Redis's refusal runs out, without a
// round trip each, and never one that Redis would have admitted.
//
// What is sound to remember.  A refusal of cost c by a rule at Redis's
// instant e, with retry_after_ms R, says that the rule's state admits no
// cost >= c before e + R: no algorithm admits a larger cost sooner, and
// nothing but an admission (which only spends more) changes the state in
// the meantime, except
//   - a key reset (the key API): rl_refusals_forget(), on this server;
//   - a charge= rule's settle, which may give back part of what a request
//     reserved: such a rule's refusal is not remembered (its ban is: a ban
//     is its own Redis key, lifted only by a reset);
//   - a ban (banned_ms B): every cost above 0 is refused until e + B.
// Refusing from here must not skip a ban Redis would have set either: a
// request with a ban= rule is remembered only while each such rule of it
// is banned (Redis then sets none), and until the first ban ends.
// A cost a rule never admits is not remembered: its Retry-After points at
// the key's full budget, a second at least, and its remaining grows back.
// A request of several rules: with ratelimit_combine all, the rule that
// binds (the longest wait) refuses it alone, so its bound is the request's
// and only its cost counts; with any, every rule refused, and the request
// is refused while all of them still do: the earliest bound, and no check's
// cost below the largest cost remembered.  A dry run refuses nothing, and a
// cost 0 is never refused from here.
//
// Clocks.  e is Redis's; the caller's clock (monotonic, ms) was read before
// the command left (sent), so e >= sent on any two clocks running at the
// same rate, and the script's ms are whole (its now is e floored): the
// rule admits nothing before sent + R - 1 on the caller's clock.  Headers
// are counted from the reply's arrival (now at store): Retry-After and
// reset then never promise earlier than Redis would have.
//
// Other servers.  A key reset through another server's key API is not seen
// here: a refusal is served for RL_REFUSALS_REFRESH_MS at most after Redis
// gave it, then the next request asks Redis again (and its refusal is
// remembered anew), so such a reset holds here within that time.
//
// The cache is a fixed array of 64-byte entries in pairs (one pair a
// 128-byte line), named by a 64-bit hash of the request's checks: each
// check's tag (the zone's keyed hash of rule identity and key, table.h),
// its rule's parameters as applied (a variable limit, a reload), its
// place, and the combine.  A flood of distinct keys only replaces entries.
// An entry is written under the zone's lock, seqlock style (seq odd while
// written), and read without a lock: a torn read is a miss.  An epoch in
// the EpochLine, stamped on every entry from the time its request was sent,
// forgets everything at once.
#include <algorithm>
#include <atomic>

#include "algorithms/algorithm.h"
#include "policy/request.h"
#include "util/mix.h"

namespace {

// The cache's first line: its epoch.
struct EpochLine {
    std::atomic<uint32_t> epoch;
    uint32_t unused[15];
};

struct Entry {
    std::atomic<uint32_t> seq;       // odd while written
    std::atomic<uint32_t> epoch;     // of its request's sending
    std::atomic<uint64_t> tag;       // 0: empty
    std::atomic<int64_t> until;      // refused before this instant,
    std::atomic<uint32_t> min_cost;  // at this cost and above
    std::atomic<uint32_t> flags;     // binding | every check
    std::atomic<int64_t> retry_at;   // the binding's decision, as instants
    std::atomic<int64_t> reset_at;
    std::atomic<int64_t> banned_at;  // 0: no ban
    std::atomic<int64_t> window_ms;
};

static_assert(sizeof(EpochLine) == 64 && sizeof(Entry) == 64, "one cache line each");

constexpr size_t kWays = 2;
constexpr size_t kEntriesMin = 16;
constexpr size_t kEntriesMax = 8192;
constexpr uint32_t kEveryCheck = 0x100;  // any: every check's cost counts

// What an entry says, read whole.
struct Seen {
    uint32_t epoch;
    uint64_t tag;
    int64_t until;
    uint32_t min_cost, flags;
    int64_t retry_at, reset_at, banned_at, window_ms;
};

EpochLine *epoch_line(const void *cache)
{
    return static_cast<EpochLine *>(const_cast<void *>(cache));
}

size_t entries_of(size_t size)
{
    return size > sizeof(EpochLine) ? (size - sizeof(EpochLine)) / sizeof(Entry) : 0;
}

Entry *bucket(const void *cache, size_t size, uint64_t tag)
{
    const size_t n = entries_of(size);
    Entry *first = reinterpret_cast<Entry *>(epoch_line(cache) + 1);
    return first + (size_t) (tag % (n / kWays)) * kWays;
}

uint64_t add(uint64_t h, uint64_t v)
{
    return rl::fmix64(h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)));
}

// The rule's parameters as they apply to the request: the same tag only
// under the same arithmetic.
uint64_t add_rule(uint64_t h, const rl_rule_t &r)
{
    int64_t own[rl::kSpecOwn];
    rl::spec_of(r, own);
    const uint64_t v[] = {r.algorithm,
                          r.limit,
                          r.burst,
                          (uint64_t) r.period_ms,
                          (uint64_t) own[rl::kSpecAlign],
                          (uint64_t) own[rl::kSpecBuckets],
                          (uint64_t) own[rl::kSpecMaxDelay],
                          (uint64_t) own[rl::kSpecDelay],
                          (uint64_t) own[rl::kSpecReset],
                          (uint64_t) own[rl::kSpecUtcOffset],
                          (uint64_t) r.ban_ms,
                          r.charge,
                          r.limit_max};
    for (uint64_t x : v) {
        h = add(h, x);
    }
    return h;
}

uint64_t tag_of(const rl_request_t &rq)
{
    uint64_t h = add(0x7265667573616c73ULL, (uint64_t) rq.combine);
    for (size_t i = 0; i < rq.n; i++) {
        const rl_check_t &c = rq.checks[i];
        if (rl::applies(c)) {
            h = add_rule(add(add(h, i + 1), c.tag), *c.rule);
        }
    }
    return h != 0 ? h : 1;
}

bool read(const Entry &e, Seen &s)
{
    const uint32_t seq = e.seq.load(std::memory_order_acquire);
    if (seq & 1) {
        return false;
    }
    s.epoch = e.epoch.load(std::memory_order_relaxed);
    s.tag = e.tag.load(std::memory_order_relaxed);
    s.until = e.until.load(std::memory_order_relaxed);
    s.min_cost = e.min_cost.load(std::memory_order_relaxed);
    s.flags = e.flags.load(std::memory_order_relaxed);
    s.retry_at = e.retry_at.load(std::memory_order_relaxed);
    s.reset_at = e.reset_at.load(std::memory_order_relaxed);
    s.banned_at = e.banned_at.load(std::memory_order_relaxed);
    s.window_ms = e.window_ms.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    return e.seq.load(std::memory_order_relaxed) == seq;
}

void write(Entry &e, const Seen &s)
{
    const uint32_t seq = e.seq.load(std::memory_order_relaxed);
    e.seq.store(seq + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    e.epoch.store(s.epoch, std::memory_order_relaxed);
    e.tag.store(s.tag, std::memory_order_relaxed);
    e.until.store(s.until, std::memory_order_relaxed);
    e.min_cost.store(s.min_cost, std::memory_order_relaxed);
    e.flags.store(s.flags, std::memory_order_relaxed);
    e.retry_at.store(s.retry_at, std::memory_order_relaxed);
    e.reset_at.store(s.reset_at, std::memory_order_relaxed);
    e.banned_at.store(s.banned_at, std::memory_order_relaxed);
    e.window_ms.store(s.window_ms, std::memory_order_relaxed);
    e.seq.store(seq + 2, std::memory_order_release);
}

// Until when, and from which cost, a check's refusal stands (false: it
// says nothing sound).
bool bound(const rl_check_t &c, int64_t sent, int64_t *until, uint64_t *min_cost)
{
    const rl_decision_t &d = c.decision;
    if (d.allowed || d.never || c.cost == 0 || c.cost > RL_LIMIT_MAX) {
        return false;  // a cost never admitted: its headers count back up
    }
    if (d.banned_ms > 0) {
        *until = sent + d.banned_ms - 1;
        *min_cost = 1;
        return true;
    }
    if (c.rule->charge || d.retry_after_ms <= 0) {
        return false;  // a settle may give back before the wait is over
    }
    *until = sent + d.retry_after_ms - 1;
    *min_cost = c.cost;
    return true;
}

// The request refused as the entry says, at now: its binding check's
// decision as Redis gave it, its times counted down.
void refuse(rl_request_t &rq, const Seen &s, int64_t now)
{
    const size_t b = s.flags & 0xff;
    const bool every = (s.flags & kEveryCheck) != 0;
    for (size_t i = 0; i < rq.n; i++) {
        rl_check_t &c = rq.checks[i];
        c.decision = rl_decision_t{};
        c.outcome = !rl::applies(c) ? RL_OUTCOME_EXEMPT : every || i == b ? RL_OUTCOME_REJECTED : -1;
    }
    rl_decision_t &d = rq.checks[b].decision;
    d.retry_after_ms = s.retry_at - now;
    d.reset_ms = std::max<int64_t>(s.reset_at - now, 0);
    d.banned_ms = s.banned_at > now ? s.banned_at - now : 0;
    d.available_ms = d.retry_after_ms;
    d.window_ms = s.window_ms;
    rl::policy(*rq.checks[b].rule, d);
    rq.binding = b;
    rq.delay_ms = 0;
    rq.verdict = RL_VERDICT_REJECTED;
    rl::act(rq);
}

bool costs_reach(const rl_request_t &rq, const Seen &s)
{
    const size_t b = s.flags & 0xff;
    if (!(s.flags & kEveryCheck)) {
        return b < rq.n && rl::applies(rq.checks[b]) && rq.checks[b].cost >= s.min_cost;
    }
    for (size_t i = 0; i < rq.n; i++) {
        if (rl::applies(rq.checks[i]) && rq.checks[i].cost < s.min_cost) {
            return false;
        }
    }
    return true;
}

// An admission of the same checks spent more than the entry knows: its
// headers would say too little.
void forget(void *cache, size_t size, uint64_t tag)
{
    Entry *e = bucket(cache, size, tag);
    for (size_t w = 0; w < kWays; w++) {
        if (e[w].tag.load(std::memory_order_relaxed) == tag) {
            Seen none{};
            write(e[w], none);
        }
    }
}

int find(const void *cache, size_t size, rl_request_t &rq, int64_t now)
{
    if (rq.dry_run || rq.n == 0 || rq.n > RL_RULES_MAX || entries_of(size) < kWays) {
        return 0;
    }
    const uint64_t tag = tag_of(rq);
    const uint32_t epoch = epoch_line(cache)->epoch.load(std::memory_order_acquire);
    const Entry *e = bucket(cache, size, tag);
    for (size_t w = 0; w < kWays; w++) {
        Seen s;
        if (read(e[w], s) && s.tag == tag && s.epoch == epoch && now < s.until && costs_reach(rq, s)) {
            refuse(rq, s, now);
            return 1;
        }
    }
    return 0;
}

int store(void *cache, size_t size, const rl_request_t &rq, uint32_t epoch, int64_t sent, int64_t now)
{
    if (rq.dry_run || rq.n > RL_RULES_MAX || entries_of(size) < kWays) {
        return 0;
    }
    if (rq.verdict != RL_VERDICT_REJECTED) {
        forget(cache, size, tag_of(rq));
        return 0;
    }
    if (rq.binding >= rq.n || epoch_line(cache)->epoch.load(std::memory_order_acquire) != epoch) {
        return 0;
    }
    const bool every = rq.combine == RL_COMBINE_ANY && rq.n > 1;
    int64_t until = INT64_MAX;
    uint64_t min_cost = 0;
    for (size_t i = 0; i < rq.n; i++) {
        const rl_check_t &c = rq.checks[i];
        if (!rl::applies(c)) {
            continue;
        }
        // a ban= rule not banned now could refuse (and ban) a request the
        // cache refused: Redis would have banned the key then
        if (c.rule->ban_ms > 0) {
            if (c.decision.banned_ms <= 0) {
                return 0;
            }
            until = std::min(until, sent + c.decision.banned_ms - 1);
        }
        int64_t u;
        uint64_t m;
        if (!every && i != rq.binding) {
            continue;
        }
        if (!bound(c, sent, &u, &m)) {
            return 0;
        }
        until = std::min(until, u);
        min_cost = std::max(min_cost, m);
    }
    // heard again within a second: a reset on another server of the fleet
    // (which this one cannot see) holds here from then on
    until = std::min(until, now + RL_REFUSALS_REFRESH_MS);
    if (until <= now) {
        return 0;  // over by the time the reply came
    }
    const rl_decision_t &d = rq.checks[rq.binding].decision;
    Seen s;
    s.epoch = epoch;
    s.tag = tag_of(rq);
    s.until = until;
    s.min_cost = (uint32_t) min_cost;
    s.flags = (uint32_t) rq.binding | (every ? kEveryCheck : 0);
    s.retry_at = now + d.retry_after_ms;
    s.reset_at = now + d.reset_ms;
    s.banned_at = d.banned_ms > 0 ? now + d.banned_ms : 0;
    s.window_ms = d.window_ms;

    // the same request's entry, else an empty or spent one, else the one
    // that runs out first
    Entry *e = bucket(cache, size, s.tag);
    Entry *to = nullptr;
    for (size_t w = 0; w < kWays && to == nullptr; w++) {
        to = e[w].tag.load(std::memory_order_relaxed) == s.tag ? &e[w] : nullptr;
    }
    for (size_t w = 0; w < kWays && to == nullptr; w++) {
        to = e[w].tag.load(std::memory_order_relaxed) == 0 || e[w].until.load(std::memory_order_relaxed) <= now ||
                     e[w].epoch.load(std::memory_order_relaxed) != epoch
                 ? &e[w]
                 : nullptr;
    }
    if (to == nullptr) {
        to = e[0].until.load(std::memory_order_relaxed) <= e[1].until.load(std::memory_order_relaxed) ? &e[0] : &e[1];
    }
    write(*to, s);
    return 1;
}

}  // namespace

extern "C" {

// About a sixteenth of a zone, in a power of two of entries (a pair a
// line), from 16 to 8192 (512 KB, a 8m zone's).
size_t rl_refusals_size(size_t zone_size)
{
    size_t n = kEntriesMin;
    while (n < kEntriesMax && (n * 2) * sizeof(Entry) * 16 <= zone_size) {
        n *= 2;
    }
    return sizeof(EpochLine) + n * sizeof(Entry);
}

uint32_t rl_refusals_epoch(const void *cache)
{
    return cache != nullptr ? epoch_line(cache)->epoch.load(std::memory_order_acquire) : 0;
}

int rl_refusals_find(const void *cache, size_t size, rl_request_t *rq, int64_t now_ms)
{
    return cache != nullptr ? find(cache, size, *rq, now_ms) : 0;
}

int rl_refusals_store(void *cache, size_t size, const rl_request_t *rq, uint32_t epoch, int64_t sent_ms, int64_t now_ms)
{
    return cache != nullptr ? store(cache, size, *rq, epoch, sent_ms, now_ms) : 0;
}

void rl_refusals_forget(void *cache)
{
    if (cache != nullptr) {
        epoch_line(cache)->epoch.fetch_add(1, std::memory_order_acq_rel);
    }
}

}  // extern "C"
