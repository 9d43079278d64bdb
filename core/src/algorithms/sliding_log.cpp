// Sliding log: exact.  A key keeps the time of every
// admitted unit of the last period; a request of cost q is admitted iff the
// units in the window (now - period, now] plus q are at most limit.  Its
// Retry-After is exact: when enough of the oldest units have left.
//
// Block: a ring of at most `limit` times (ms after `base`, ascending), so
// limit is at most 10000 and period at most 2^31 ms (24.8 days): the state
// grows with limit.  Jump-safe: times never go backwards (a unit is logged
// at the newest time seen if the clock stepped back), so the log stays
// sorted and a step back never frees a unit early.
#include <algorithm>

#include "algorithms/algorithm.h"
#include "util/error.h"
#include "util/out.h"

namespace rl {

namespace {

struct Block {
    int64_t base;    // times are ms after base
    uint32_t head;   // ring index of the oldest time
    uint32_t count;  // times in the ring
    uint32_t at[1];  // [ring_size]
};

// How far ahead of the clock a logged time may be: more than a clock ever
// steps back, and half the distance at which a log reads as empty (2^39
// ms, 17 years), so that no log an admission writes ever reads as empty.
constexpr int64_t kAhead = 1ll << 39;

// The ring's size: the largest limit the rule may apply (limit_max, when
// the limit is a variable).
uint32_t ring_size(const rl_rule_t &rule)
{
    return largest_limit(rule);
}

}  // namespace

size_t sliding_log_blob_size(const rl_rule_t &rule)
{
    return offsetof(Block, at) + sizeof(uint32_t) * ring_size(rule);
}

// A block from a state file: its times moved back with the clock that
// wrote it, and none after now (no admission before now logged one later;
// a later one would hold its unit past the period).  Times stay ascending.
void sliding_log_bound(const rl_rule_t &rule, State &s, int64_t now, int64_t back)
{
    Block *b = reinterpret_cast<Block *>(s.blob);
    const uint32_t size = ring_size(rule);
    b->base = (int64_t) ((uint64_t) b->base - (uint64_t) back);  // any base is read safely
    if (b->count > size || b->head >= size) {
        return;  // read as empty (sliding_log())
    }
    if (b->base > now) {
        b->base = now;
        for (uint32_t i = 0; i < size; i++) {
            b->at[i] = 0;  // every time at now
        }
        return;
    }
    const uint64_t most = (uint64_t) (now - b->base);
    for (uint32_t i = 0; i < b->count; i++) {
        uint32_t &at = b->at[(b->head + i) % size];
        at = at > most ? (uint32_t) most : at;
    }
}

// A restored key's units (summary.cpp) all logged at one instant: the
// latest from which they leave the window at head.t.
void sliding_log_restore(const rl_rule_t &rule, State &s, int64_t now)
{
    if (s.head.n == 0 || s.head.t <= now) {
        return;
    }
    Block *b = reinterpret_cast<Block *>(s.blob);
    const int64_t at = s.head.t - rule.period_ms;
    b->base = at < now ? at : now;
    b->head = 0;
    b->count = s.head.n < rule.limit ? s.head.n : rule.limit;  // <= ring_size
    for (uint32_t i = 0; i < b->count; i++) {
        b->at[i] = 0;
    }
    s.head.t = b->base + rule.period_ms;
}

rl_decision_t sliding_log(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    rl_decision_t d{};  // the one object returned, built in the caller's
    if (s.blob == nullptr && s.head.n > 0 && s.head.t > now) {
        // restored from the eviction summary: units that all leave at head.t
        d = windowed_count(rule, s, now, cost, false, s.head.t, rule.period_ms);
        return d;
    }
    Block *b = reinterpret_cast<Block *>(s.blob);
    const uint32_t size = ring_size(rule);
    const int64_t W = rule.period_ms;
    // A block a process died writing may hold anything (the table does not
    // save blocks, table.h): more times than it has room for, or a base more
    // than 2^40 ms (35 years) from now, reads as an empty log, and an
    // admitted request starts it afresh; times out of order, below.
    // (base within (now - sane, now + sane): one unsigned comparison)
    const uint64_t sane = 1ull << 40;
    uint32_t count = b != nullptr && b->count <= size && (uint64_t) b->base - (uint64_t) now + (sane - 1) < 2 * sane - 1
                         ? b->count
                         : 0;
    auto time_of = [&](uint32_t i) { return b->base + (int64_t) b->at[(b->head + i) % size]; };

    int64_t newest = count ? time_of(count - 1) : INT64_MIN;
    int64_t t = now > newest ? now : newest;  // the time a unit is logged at
    int64_t first = INT64_MIN;                // the oldest live time, if any
    uint32_t expired = 0;                     // the oldest times out of (t - W, t]
    while (expired < count && (first = time_of(expired)) <= t - W) {
        expired++;
    }
    // The times read must be in order (the oldest live one, and the one a
    // refusal waits for, between it and the newest).  A ring out of order is
    // one a process died writing: its units are all taken as logged at its
    // latest time (flat), which frees none of them early, and an admitted
    // request writes them so.
    bool flat = expired < count && first > newest;
    if ((uint64_t) (count - expired) + cost > rule.limit && !flat && expired < count && cost <= rule.limit) {
        const int64_t leaves = time_of(expired + (uint32_t) (count - expired + cost - rule.limit) - 1);
        flat = leaves < first || leaves > newest;
    }
    if (flat) {
        for (uint32_t i = 0; i < count; i++) {
            newest = time_of(i) > newest ? time_of(i) : newest;
        }
        t = now > newest ? now : newest;
        first = newest;
        expired = newest <= t - W ? count : 0;
    }
    // A time further ahead of the clock than it ever steps back is one a
    // process died writing: the log's units are taken as logged at now +
    // kAhead (none was admitted later than that), and an admission writes
    // them so, keeping every time the log holds within kAhead of the clock.
    if (count > 0 && newest - now > kAhead) {
        flat = true;
        newest = first = t = now + kAhead;
        expired = 0;
    }
    const uint64_t live = count - expired;
    const int64_t reset = live ? newest + W - now : 0;

    if (cost > rule.limit) {
        d = never(W, live < rule.limit ? rule.limit - live : 0, reset);
        return d;
    }

    d.window_ms = W;

    if (live + cost <= rule.limit) {
        d.allowed = 1;
        d.remaining = rule.limit - live - cost;
        d.reset_ms = cost > 0 ? t + W - now : reset;
        // one more unit when the oldest (this request's, if none) leaves;
        // never after the reset (nothing to come back to an empty log)
        const int64_t oldest = (live > 0 ? first : t) + W - now;
        d.available_ms = oldest < d.reset_ms ? oldest : d.reset_ms;
        if (apply && cost > 0) {
            b->head = (b->head + expired) % size;  // (an empty log: any index)
            b->count = (uint32_t) live;
            if (flat && live > 0) {
                b->head = 0;
                b->base = newest;
                for (uint32_t i = 0; i < live; i++) {
                    b->at[i] = 0;
                }
            }
            if (b->count == 0 || t - b->base > INT32_MAX) {
                // rebase on the oldest live time: every live time is within
                // W <= 2^31 ms of t, so offsets stay in 32 bits
                const int64_t base = b->count ? time_of(0) : t;
                for (uint32_t i = 0; i < b->count; i++) {
                    uint32_t &a = b->at[(b->head + i) % size];
                    a = (uint32_t) (b->base + a - base);
                }
                b->base = base;
            }
            const uint64_t next = (uint64_t) b->head + b->count;  // the ring's index of the next time
            const uint32_t at = (uint32_t) (t - b->base);
            for (uint64_t i = 0; i < cost; i++) {
                b->at[(next + i) % size] = at;
            }
            b->count += (uint32_t) cost;
            s.head.t = t + W;
        }
    } else {
        // the (live + cost - limit)-th oldest live unit must leave first
        d.remaining = live < rule.limit ? rule.limit - live : 0;  // a lowered limit
        d.reset_ms = reset;
        d.retry_after_ms = (flat ? newest : time_of(expired + (uint32_t) (live + cost - rule.limit) - 1)) + W - now;
        d.available_ms = d.retry_after_ms;
    }
    return d;
}

// A charge beyond what the log has room for: the log holds a limit of
// units, and the units beyond it move it later by the time they take to
// come back at the rule's rate (limit per period), at most a period: the
// whole log is then logged at one later instant, and the key is refused
// until a period after it.
uint64_t sliding_log_charge(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped)
{
    Block *b = reinterpret_cast<Block *>(s.blob);
    const uint32_t size = ring_size(rule);
    const int64_t W = rule.period_ms;
    const uint64_t L = rule.limit;
    const int64_t sane = 1ll << 40;  // as in sliding_log()
    const uint32_t count = b->count <= size && b->base > now - sane && b->base < now + sane ? b->count : 0;
    auto time_of = [&](uint32_t i) { return b->base + (int64_t) b->at[(b->head + i) % size]; };
    const int64_t newest = count ? std::min(time_of(count - 1), now + kAhead) : INT64_MIN;  // as sliding_log()
    const int64_t t = now > newest ? now : newest;
    uint32_t expired = 0;
    while (expired < count && time_of(expired) <= t - W) {
        expired++;
    }
    const uint64_t live = count - expired;

    // a log later than now already owes: the units its shift stands for
    const uint64_t shift = newest > now ? (uint64_t) (newest - now) : 0;
    const uint64_t owed = shift ? std::min<uint64_t>(L, ceil_div(shift * L, (uint64_t) W)) : 0;
    const uint64_t room = (live < L ? L - live : 0) + (L - owed);
    const uint64_t add = units < room ? units : room;
    *capped = add < units;
    if (live + add <= L) {
        if (add > 0) {
            (void) sliding_log(rule, s, now, add, true);  // it fits: logged as a request's
        }
        return add;
    }
    const uint64_t debt = std::min<uint64_t>(L, owed + (live + add - L) - (live > L ? live - L : 0));
    int64_t at = now + ceil_div(debt * (uint64_t) W, L);
    at = at > t ? at : t;  // times never go backwards
    b->base = at;
    b->head = 0;
    b->count = (uint32_t) (L < size ? L : size);
    for (uint32_t i = 0; i < b->count; i++) {
        b->at[i] = 0;
    }
    s.head.t = at + W;
    return add;
}

// Removes a refunded request's units: `cost` of the times logged at `at`
// (the time it was logged at), the later ones closing the gap.
void sliding_log_refund(const rl_rule_t &rule, State &s, uint64_t cost, rl_state_t after, int64_t, int64_t)
{
    const int64_t at = after.t - rule.period_ms;  // the time it was logged at
    Block *b = reinterpret_cast<Block *>(s.blob);
    const uint32_t size = ring_size(rule);
    if (b == nullptr || b->count > size) {
        return;
    }
    auto slot = [&](uint32_t i) -> uint32_t & { return b->at[(b->head + i) % size]; };
    uint32_t end = b->count;  // times [first, end) are the ones logged at `at`
    while (end > 0 && b->base + (int64_t) slot(end - 1) > at) {
        end--;
    }
    uint32_t first = end;
    while (first > 0 && end - first < cost && b->base + (int64_t) slot(first - 1) == at) {
        first--;
    }
    const uint32_t gone = end - first;
    for (uint32_t i = end; i < b->count; i++) {
        slot(i - gone) = slot(i);
    }
    b->count -= gone;
    s.head.t = b->count ? b->base + (int64_t) slot(b->count - 1) + rule.period_ms : s.head.t;
}

namespace {

// Its state keeps one time a unit: a limit of at most 10,000, known before
// a request (limit_max with a variable), over at most 2^31 ms.
int sliding_log_finish(rl_rule_t &rule, char *err, size_t errlen)
{
    if (limit_known(rule, "one time a unit", 1000, RL_LOG_LIMIT_MAX, err, errlen) != RL_OK ||
        limit_at_most(rule, RL_LOG_LIMIT_MAX, "it keeps one time a unit, at most ",
                      "; use sliding_window for larger limits", err, errlen) != RL_OK) {
        return RL_ERROR;
    }
    if (rule.period_ms > RL_LOG_PERIOD_MAX_MS) {
        return fail(err, errlen,
                    "\"period=\" is too long for algorithm=sliding_log: at most 24d (2^31 ms); use sliding_window "
                    "or quota for longer periods");
    }
    return RL_OK;
}

// Restored into the period from now.
State sliding_log_owed_state(const rl_rule_t &rule, Owed o, int64_t now)
{
    return restore_window(rule, o, now, now + rule.period_ms, false);
}

void sliding_log_fields(Out &o, const rl_rule_t &rule)
{
    o.field("period_ms", (uint64_t) rule.period_ms);
}

}  // namespace

extern const Algorithm kSlidingLog = {
    .name = "sliding_log",
    .finish = sliding_log_finish,
    .name_tail = period_tail,
    .block_size = sliding_log_blob_size,
    .policy = limit_policy,
    .transition = sliding_log,
    .charge = sliding_log_charge,
    .refund = sliding_log_refund,
    .owed = window_owed,
    .restore = sliding_log_owed_state,
    .restore_block = sliding_log_restore,
    .bounds = period_bounds,
    .no_sync = "keeps the time of every unit, not a count",
    .api_fields = sliding_log_fields,
    .overridable = P_LIMIT | P_PERIOD,
    .bound_block = sliding_log_bound,
};

}  // namespace rl
