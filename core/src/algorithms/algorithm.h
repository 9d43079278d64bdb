// What differs by algorithm, in one record each: its parameters and their
// checks, its state and transition, its charge and refund, what it owes
// the eviction summary, what Redis and redis_sync do with it, what the key
// API shows of it.  Each algorithm's file defines its record; the concerns
// (the rule parser, the decision, settling, the summary, Redis, the key
// API) reach it through algorithm_of(rule) (registry.cpp's table), never by
// naming an algorithm.  Adding one: its constant in enum rl_algorithm,
// its file with its parameters' struct and rows and its record, its row
// in registry.cpp, its function in core/src/redis/ratelimit.lua, its
// tests (docs/architecture.md, "Where to add").
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "algorithms/algorithms.h"
#include "ratelimit.h"
#include "ratelimit_sync.h"

namespace rl {

class Out;

// The parameters every rule may give, as bits of rl_rule_t.given
// (rule.cpp parses them).  An algorithm's own parameters are its record's
// rows (`own`, OwnParam), their bits from kOwnFirst up (own_bit): any
// other algorithm refuses them, naming whose they are.
enum Param : uint32_t {
    P_ALGORITHM = 1u << 0,
    P_LIMIT = 1u << 1,
    P_PERIOD = 1u << 2,
    P_BURST = 1u << 3,
    P_COST = 1u << 4,
    P_NAME = 1u << 5,
    P_ZERO_COST = 1u << 6,
    P_LOG_KEY = 1u << 7,
    P_LIMIT_DEFAULT = 1u << 8,
    P_LIMIT_MAX = 1u << 9,
    P_CHARGE = 1u << 10,
    P_BAN = 1u << 11,
    P_ABANDONED = 1u << 12,
    // the in-flight algorithms' classes (kSlots): their settings are a
    // struct of their own (rl_classes_t), not the block
    P_PRIORITY = 1u << 13,
    P_CLASSES = 1u << 14,
    P_CLASS_DEFAULT = 1u << 15,
    P_FAIR = 1u << 16,
};
constexpr unsigned kOwnFirst = 32;

// An algorithm's own parameters are a struct its file declares, kept in
// the rule's block rl_rule_t.own: read with params_of, written with
// set_params.
template <typename T> T params_of(const rl_rule_t &rule)
{
    static_assert(sizeof(T) <= sizeof(rule.own) && alignof(T) <= alignof(uint64_t), "it fits rl_rule_t.own");
    T p;
    std::memcpy(&p, rule.own, sizeof(p));
    return p;
}

template <typename T> void set_params(rl_rule_t &rule, const T &p)
{
    static_assert(sizeof(T) <= sizeof(rule.own) && alignof(T) <= alignof(uint64_t), "it fits rl_rule_t.own");
    std::memcpy(rule.own, &p, sizeof(p));
}

// A word a parameter may be (reset=daily): its text and its value.
struct Word {
    const char *text;
    uint32_t value;
};

// One of an algorithm's own parameters, as rule.cpp parses it into the
// block: name=VALUE written at `offset` of rl_rule_t.own, as
//   kNumber  an integer from min to max (a uint32_t);
//   kTime    a time from min to max ms (an int64_t), else `expected`;
//   kWord    one of `words` (a uint8_t);
//   kParsed  what `parse` makes of it (an int32_t or uint32_t), else
//            `expected`.
// Two algorithms that share a parameter give the same row at the same
// offset (max_wait=, kMaxWait).
struct OwnParam {
    enum Kind { kNumber, kTime, kWord, kParsed };
    const char *name;
    Kind kind;
    size_t offset;
    int64_t min, max;
    const char *expected = nullptr;
    const Word *words = nullptr;
    size_t nwords = 0;
    bool (*parse)(const char *p, size_t len, void *field) = nullptr;
};

// Its rows, one a line: number_param("buckets", offsetof(...), 1, 100).
constexpr OwnParam number_param(const char *name, size_t offset, int64_t min, int64_t max)
{
    return OwnParam{name, OwnParam::kNumber, offset, min, max};
}
constexpr OwnParam time_param(const char *name, size_t offset, int64_t min, int64_t max, const char *expected)
{
    return OwnParam{name, OwnParam::kTime, offset, min, max, expected};
}
constexpr OwnParam word_param(const char *name, size_t offset, const Word *words, size_t nwords)
{
    return OwnParam{name, OwnParam::kWord, offset, 0, 0, nullptr, words, nwords};
}
constexpr OwnParam parsed_param(const char *name, size_t offset, bool (*parse)(const char *, size_t, void *),
                                const char *expected)
{
    return OwnParam{name, OwnParam::kParsed, offset, 0, 0, expected, nullptr, 0, parse};
}

// The Redis script's SPEC of a rule holds, after what every rule has, the
// parameters of some algorithm's own (spec_of fills them, a record's
// `spec` its own).
enum SpecField {
    kSpecAlign,
    kSpecBuckets,
    kSpecMaxDelay,
    kSpecReset,
    kSpecUtcOffset,
    kSpecDelay,
    kSpecLease,
    kSpecOwn
};

// A shaper's queue beyond its period (kShaper; the record's `queue`): its
// longest delay (max_delay=) and the requests over the pace served at
// once (delay=).
struct Queue {
    int64_t wait_ms;
    uint32_t at_once;
};

// What a request's end tells an algorithm that learns from it (slot_ended):
// how long its upstream took, the status it ended with, and when it was
// admitted.
struct Ended {
    int64_t latency_ms;
    uint32_t status;
    int64_t at;
};

// What such an algorithm concluded of an interval: its key's limit now, the
// baseline and the interval's typical latency (microseconds).
struct Learned {
    uint32_t limit;
    uint32_t baseline_us;
    uint32_t recent_us;
};

// What a rule's decisions can be on Redis's clock running steadily
// (redis_reply.cpp judges every reply of the script against it): the
// longest reset, Retry-After or t without the clock's slack, and the
// window a decision names.
struct Bounds {
    unsigned __int128 longest;
    int64_t window_min, window_max;
};

// Requests in flight (kSlots): a request decided on its key's slots,
// admitted (a slot is free and no waiter is ahead of it; with priority
// classes, a slot its class may take and no waiter served before it:
// c.shed says why not), queued (max_wait:
// it waits, or may join the queue; delay_ms is max_wait) or refused, the
// slots and places of holders that alive() says no longer exist freed
// first when none would be free (*reclaimed: slots freed); an admitted
// request takes a slot (c.slot) and leaves the queue; a queued one joins it
// if it is not in it (c.ticket); one that leaves the queue; one that ends
// or gives up releases its slot and place (true if it held a slot); what a
// key holds and how many wait (with priority classes, by class, and the
// slots each class's share keeps); the slots open now (the rule's limit, or
// what its algorithm learned).  slots.cpp's kInFlight, for concurrency and
// adaptive alike.
struct Slots {
    rl_decision_t (*decide)(const rl_rule_t &rule, State &s, int64_t now, rl_check_t &c, int (*alive)(uint32_t),
                            uint32_t *reclaimed);
    void (*take)(const rl_rule_t &rule, State &s, int64_t now, rl_check_t &c, uint32_t holder);
    void (*join)(const rl_rule_t &rule, State &s, int64_t now, rl_check_t &c, uint32_t holder);
    void (*leave)(const rl_rule_t &rule, State &s, rl_check_t &c);
    bool (*release)(const rl_rule_t &rule, State &s, int64_t now, rl_check_t &c, uint32_t holder);
    void (*held)(const rl_rule_t &rule, const State &s, uint32_t *held, uint32_t *queued);
    void (*by_class)(const rl_rule_t &rule, const State &s, uint32_t *held, uint32_t *queued, uint32_t *kept);
    uint32_t (*open)(const rl_rule_t &rule, const State &s);
};
extern const Slots kInFlight;

// The slots' parameters (concurrency's and adaptive's, at the start of
// their blocks): how long a request may wait for a slot (max_wait=; 0:
// refused at once), and in a Redis zone how long a slot is held without
// its server renewing it (lease=: a server that dies loses its slots so
// long after).
struct SlotParams {
    int64_t max_wait_ms;
    int64_t lease_ms;
};
inline constexpr OwnParam kMaxWait =
    time_param("max_wait", offsetof(SlotParams, max_wait_ms), 0, 3600000, "a time from 0ms to 1h, like 500ms, 10s, 1m");

// A figure of a rule's counters (ratelimit_stats, render/stats.cpp): its
// name in JSON, its metric (after "nginx_ratelimit_"), type and help in
// Prometheus, and where it is (in rl_rule_stats_t for a rule's).
struct Figure {
    const char *name;
    const char *metric;
    const char *type;
    const char *help;
    size_t offset;
};

struct Algorithm {
    const char *name = nullptr;  // algorithm=NAME
    uint32_t traits = 0;         // enum Trait (algorithms.h)
    // the parameters of its own, in its block (nullptr: none)
    const OwnParam *own = nullptr;
    size_t nown = 0;

    // rl_rule_finish, after the checks every rule has: its own checks and
    // defaults (nullptr: none); RL_OK, or RL_ERROR with err naming the
    // parameter.  Then the default name's last word ("1m", "daily").
    int (*finish)(rl_rule_t &rule, char *err, size_t errlen) = nullptr;
    // Its own parameters not given that follow the rest (max_delay= the
    // period): set when the rule is finished, and again when an override
    // changed the rest (nullptr: none).
    void (*follow)(rl_rule_t &rule) = nullptr;
    void (*name_tail)(const rl_rule_t &rule, char *out, size_t len) = nullptr;

    // derive(): the bytes of a key's block beyond the slot, and the policy
    // the headers advertise (quota, window; -1: the decision's own window).
    // policy_window: the window of RateLimit-Policy at now.
    // policy_fixed: 0 if the policy changes from one request to the next
    // whatever the limit (nullptr: it does not).
    size_t (*block_size)(const rl_rule_t &rule) = nullptr;
    void (*policy)(rl_rule_t &rule) = nullptr;
    int64_t (*policy_window)(const rl_rule_t &rule, int64_t now) = nullptr;
    int (*policy_fixed)(const rl_rule_t &rule) = nullptr;

    // check(state, now, cost) -> decision (algorithms.h, Transition)
    Transition transition = nullptr;
    // A shaper's queue (kShaper; nullptr: none).
    Queue (*queue)(const rl_rule_t &rule) = nullptr;
    // The same for a rule of a stack, whose decision reaches the headers
    // only if it leaves fewer units than binds_below (the stack's other
    // rules leave fewer, or refuse): an admission leaving as many or more
    // has its reset_ms for available_ms, its own not worked out (nullptr:
    // transition, for an algorithm whose times cost little to work out).
    BindingTransition transition_binding = nullptr;

    // charge=: spends units when a request ends, into debt (nullptr: the
    // algorithm takes no charge=, no_charge says why); refund: gives back
    // what an admission reserved (a delayed request abandoned, a charge
    // settled; nullptr: nothing, as a slot is given back when its request
    // ends).
    uint64_t (*charge)(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped) = nullptr;
    const char *no_charge = nullptr;
    void (*refund)(const rl_rule_t &rule, State &s, uint64_t cost, rl_state_t after, int64_t at, int64_t now) = nullptr;

    // The eviction summary (summary.cpp): the fraction a key owes right
    // after decision d, the state a key absent from the table starts from,
    // and that state written into a fresh block (nullptr: it owes nothing,
    // as slots are no debt, and starts empty).
    uint32_t (*owed)(const rl_rule_t &rule, const State &s, const rl_decision_t &d, int64_t now) = nullptr;
    State (*restore)(const rl_rule_t &rule, Owed o, int64_t now) = nullptr;
    void (*restore_block)(const rl_rule_t &rule, State &s, int64_t now) = nullptr;

    // Redis: why the algorithm is not decided there (nullptr: it is); the
    // largest quantity its script computes for a count of units (0: none
    // beyond the counts themselves), exact in Lua's doubles below 2^50;
    // what its decisions can be (debt: with charge=).
    const char *no_redis = nullptr;
    unsigned __int128 (*redis_units)(const rl_rule_t &rule, uint64_t count) = nullptr;
    void (*bounds)(const rl_rule_t &rule, bool debt, Bounds &b) = nullptr;
    // A rule of an algorithm decided there that a Redis zone cannot
    // decide as given (nullptr: any): RL_ERROR with err saying why.  Its
    // own fields of the spec (kSpecOwn; nullptr: none).
    int (*redis_rule_ok)(const rl_rule_t &rule, char *err, size_t errlen) = nullptr;
    void (*spec)(const rl_rule_t &rule, int64_t (&fields)[kSpecOwn]) = nullptr;

    // redis_sync: why the state does not merge as a count (nullptr: it
    // does, by the traits kCount and kTicks).  A count by ticks (kTicks):
    // the tick a request decided at `at` counts in, the end of the last
    // window holding it, the rule's ticks a window and its period (the
    // item's tick, end, ticks, period_ms); and the fleet's counts of the
    // item's window's ticks (oldest first) folded into a key's block.
    const char *no_sync = nullptr;
    // whether a key's windows start at its first request (align=first;
    // nullptr: at multiples of the period since the epoch)
    bool (*windows_keyed)(const rl_rule_t &rule) = nullptr;
    void (*sync_tick)(const rl_rule_t &rule, int64_t at, rl_sync_item_t &item) = nullptr;
    void (*merge)(const rl_sync_item_t &item, State &s, const uint64_t *counts) = nullptr;

    // The key API's fields of the rule's own parameters.
    void (*api_fields)(Out &o, const rl_rule_t &rule) = nullptr;

    // Overrides (ratelimit_override.h): the parameters a limit override
    // may set (P_LIMIT, P_BURST, P_PERIOD); and a key's state under the
    // parameters `from` rewritten under `to` as at `at`, owing the same
    // units (nullptr: the state is a count of units, read the same under
    // any parameters).
    uint32_t overridable = 0;
    void (*carry)(const rl_rule_t &from, const rl_rule_t &to, State &s, int64_t at) = nullptr;
    // Requests in flight (kSlots): its key's slots (kInFlight).
    const Slots *slots = nullptr;
    // Requests in flight whose limit moves (kSlots; nullptr: the rule's
    // limit, and nothing learned): the slots open now; an admission that
    // took a slot at now (held: the slots held now); a request's end that
    // gave its slot back, true when the key's limit was decided again
    // (learned).
    uint32_t (*slots_open)(const rl_rule_t &rule, const State &s) = nullptr;
    void (*slot_taken)(const rl_rule_t &rule, State &s, int64_t now, uint32_t held) = nullptr;
    bool (*slot_ended)(const rl_rule_t &rule, State &s, int64_t now, const Ended &e, Learned *learned) = nullptr;
    // what the key API shows of a key's learning (its limit, latencies)
    void (*learned_of)(const rl_rule_t &rule, const State &s, Learned *learned) = nullptr;
    // the figures of its own every rule's counters show after the common
    // ones (ratelimit_stats; what slot_ended learned, in rl_rule_stats_t)
    const Figure *figures = nullptr;
    size_t nfigures = 0;

    // A key's block read from a state file (state.cpp), its head bounded
    // already: the times in it moved `back` ms (the file was written by a
    // clock that far ahead), then none further ahead than the rule lets a
    // key owe (nullptr: the block holds no time a wait is read from).
    void (*bound_block)(const rl_rule_t &rule, State &s, int64_t now, int64_t back) = nullptr;
};

// Every algorithm's record, by enum rl_algorithm (registry.cpp).
extern const Algorithm *const kAlgorithms[RL_ALGORITHM_COUNT];

inline const Algorithm &algorithm_of(uint32_t algorithm)
{
    return *kAlgorithms[algorithm < RL_ALGORITHM_COUNT ? algorithm : 0];
}

inline const Algorithm &algorithm_of(const rl_rule_t &rule)
{
    return algorithm_of(rule.algorithm);
}

// The bit of rl_rule_t.given of an algorithm's own parameter, by its
// name (0: no algorithm has it); whether the rule gave it.
uint64_t own_bit(const char *name);
inline bool given(const rl_rule_t &rule, const char *name)
{
    return (rule.given & own_bit(name)) != 0;
}

// The value of the rule's own parameter of this name, as its row reads
// it (0: its algorithm has none): for tests and tools.
int64_t own_value(const rl_rule_t &rule, const char *name);

// The spec's own fields of the rule (kSpecOwn), what a rule of another
// algorithm always sent in their place where its own record has none.
void spec_of(const rl_rule_t &rule, int64_t (&fields)[kSpecOwn]);

// A shaper's queue ({0, 0} for any other rule).
inline Queue queue_of(const rl_rule_t &rule)
{
    const Algorithm &a = algorithm_of(rule);
    return a.queue != nullptr ? a.queue(rule) : Queue{0, 0};
}

// The default name's last word of an algorithm with a period: the period
// in its shortest exact spelling ("1m", "1500ms").
void period_tail(const rl_rule_t &rule, char *out, size_t len);

// The records' shared parts: a policy of limit units over the decision's
// own window, a period's Bounds, no block.
void limit_policy(rl_rule_t &rule);
// Whether a rule's exact arithmetic would overflow its 2^61 units (a
// bucket's burst x period, a shaper's queue): rule.cpp refuses it.
bool too_large(const rl_rule_t &rule);
void period_bounds(const rl_rule_t &rule, bool debt, Bounds &b);
size_t no_block(const rl_rule_t &rule);

// A state sized by the rule's largest limit (a slot, a time a unit): the
// limit, or limit_max with limit=$variable; limit_known: limit=$variable
// needs limit_max= (keeps: what the state keeps, example: a limit_max to
// show); limit_at_most: that limit at most `most` (the reason around it:
// before, after).  RL_OK, or RL_ERROR with err saying so.
inline uint32_t largest_limit(const rl_rule_t &rule)
{
    return rule.limit_var ? rule.limit_max : rule.limit;
}
int limit_known(const rl_rule_t &rule, const char *keeps, uint32_t example, uint32_t most, char *err, size_t errlen);
int limit_at_most(const rl_rule_t &rule, uint32_t most, const char *before, const char *after, char *err,
                  size_t errlen);

}  // namespace rl
