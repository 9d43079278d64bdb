// The pure algorithm transitions, one file each.
//
// A transition decides spending `cost` at `now` on a key's state and, when
// `apply` is set and the request is admitted, writes the new state in place.
// A denied request never changes the state.  The state is the head kept in
// the table's slot (rl_state_t: t = when the key is back to full budget) and,
// for sliding_window and sliding_log, a block of the zone (blob; nullptr for
// a key never seen, which reads as all zeros).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ratelimit.h"

// Code inlined wherever it is called, whatever the compiler's estimate of
// its size: the hot path of a request (a call there costs its registers'
// saves and restores, as much as the code itself).
#define RL_HOT inline __attribute__((always_inline))

namespace rl {

struct State {
    rl_state_t head;
    uint8_t *blob;
};

using Transition = rl_decision_t (*)(const rl_rule_t &, State &, int64_t now, uint64_t cost, bool apply);
// The same for a decision the headers describe only if its remaining is
// below binds_below (Algorithm::transition_binding).
using BindingTransition = rl_decision_t (*)(const rl_rule_t &, State &, int64_t now, uint64_t cost, bool apply,
                                            uint64_t binds_below);

// Each algorithm's transition is its record's (algorithm.h), in its file;
// gcra's is inline (gcra.h) as most rules are gcra.

// What a key owes, as the eviction summary keeps it (table.h): until when
// (ms; the key is back to full budget from then on), and at most which
// fraction of its rule's capacity, in 1/kFracFull, rounded up.
struct Owed {
    int64_t until;
    uint32_t frac;
};
constexpr uint32_t kFracFull = 255;

// Dispatched through the algorithms' records (algorithm.h; the transition
// inline in transition.h, gcra's without a call).

// Bytes of the rule's block (0: the head holds the whole state), as
// derive() worked it out.
inline size_t blob_size(const rl_rule_t &rule)
{
    return rule.block;
}

// A counter of units spent in a window ending at `end` (fixed_window,
// quota): the head is {window end, units spent}.  With kCarried in n, a
// charge's excess is counted in the window ending t, and the one before it
// is full (fixed_window.cpp).
constexpr uint32_t kCarried = 1u << 31;
rl_decision_t windowed_count(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply, int64_t end,
                             int64_t window);

// The window a unit spent now is counted in: its end and length, and the
// end of the window after it.
struct Span {
    int64_t end;
    int64_t window;
    int64_t next_end;
};

// ---- requests in flight (slots.cpp) ---------------------------------------

// What concurrency and adaptive share (the concerns reach the rest through
// a record's `slots`, algorithm.h): the bytes of a key's block (the slots,
// who holds each, the queue), the transition of a look (rl_transition, a
// peek: the slots left), what a key holds and how many wait, and the
// policy (the limit, no window).
size_t slots_block_size(const rl_rule_t &rule);
// With priority classes, the bytes of their part, last in the key's block
// (its algorithm's block_size adds them; 0 without).
size_t slots_classes_size(const rl_rule_t &rule);
rl_decision_t slots_transition(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply);
void slots_held(const rl_rule_t &rule, const State &s, uint32_t *held, uint32_t *queued);
void slots_policy(rl_rule_t &rule);

// ---- charges ----------------------------------------------------------------

// Spends `units` on a key whatever its budget (charge=, when a request
// ends), the key owing at most a limit beyond an empty budget: returns the
// units spent, and sets *capped when that bound cut the charge.  One limit:
// a request may then spend up to twice what a key can hold, enough for any
// single request a rule means to admit, while a bad or hostile value (an
// upstream's header) keeps the key out for at most two periods.  How each
// algorithm owes: its charge function, in its file (algorithm.h).
uint64_t charge(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped);
// A count in a window (fixed_window, quota): what the window cannot hold is
// counted in the next one, at most a limit (fixed_window.cpp).
uint64_t windowed_charge(const rl_rule_t &rule, State &s, uint64_t units, const Span &span, bool *capped);

// A denial for a cost no state of the rule can ever admit.
rl_decision_t never(int64_t window, uint64_t remaining, int64_t reset_ms);

// What the rule's requests read and no request changes, worked out once
// (rl_rule_finish, rl_rule_apply): its block's size, its policy, its
// horizon.
void derive(rl_rule_t &rule);

// A horizon that bounds nothing: far beyond any clock, and small enough
// that now + it never overflows.
constexpr int64_t kNoHorizon = 1ll << 61;

// A key's state as its rule reads it: never waiting longer than the rule as
// it is can make a key wait (rl_rule_t.horizon_ms).  A state further ahead
// was not written by this rule's requests: a state file from a clock that
// ran ahead or written by hand, a rule relaxed by a reload or restart (same
// name and algorithm), a period an override lengthened and no longer
// gives.  It is read as spent to the rule's longest wait from now, no more.
inline void bound(const rl_rule_t &rule, State &s, int64_t now)
{
    const int64_t most = now + rule.horizon_ms;
    s.head.t = s.head.t > most ? most : s.head.t;
}

// What the concerns test of an algorithm (its record's, algorithm.h),
// copied into each rule (rl_rule_t.traits, by derive()) so that a request
// reads it with the rule.
enum Trait : uint32_t {
    kPaced = 1u << 0,   // one instant a key, in units of 1/limit ms (exact_time.h)
    kBucket = 1u << 1,  // a capacity of burst= (the others': limit)
    kShaper = 1u << 2,  // delays a request over the pace instead of refusing it
    kSlots = 1u << 3,   // requests in flight, not a rate: no period, cost or charge
    kCount = 1u << 4,   // a count in a window: its state merges across servers
    kTicks = 1u << 5,   //   counted by tick of the window, not as one count
};

// Whether the rule's algorithm has one of these traits.
inline bool has(const rl_rule_t &rule, uint32_t traits)
{
    return (rule.traits & traits) != 0;
}

// The decision's policy (quota, window) for the rule, as derive() worked it
// out: rl_transition() and conclude() (for the check the headers describe)
// set it.
inline void policy(const rl_rule_t &rule, rl_decision_t &d)
{
    // requests in flight: the slots open when it was decided, if it says
    // (adaptive's limit moves; decide_slots sets it)
    const bool slots_said = has(rule, kSlots) && d.quota != 0;
    d.quota = slots_said ? d.quota : rule.policy_quota;
    if (rule.policy_window_ms >= 0) {
        d.window_ms = rule.policy_window_ms;
    }
}

// ---- the eviction summary (summary.cpp) ----------------------------------

// What a key in state s owes at now, right after decision d admitted it.
uint32_t owed_frac_of(const rl_rule_t &rule, const State &s, const rl_decision_t &d, int64_t now);

// The same, with what most commits find decided inline: a key that owes no
// more than one request owes nothing to the summary (summary.cpp).  A
// decision's remaining tells it, without a division: a window owes
// limit - remaining units; a bucket (gcra, token_bucket) is need = TAT - now
// units of 1/limit ms ahead, and remaining = floor((burst x T - need) / T),
// so need <= T (one request) exactly when remaining >= burst - 1, for a
// burst of 2 or more (remaining >= 1 then: need is within the burst, not
// beyond it as a charge may leave it, where remaining stays 0).  Both limit
// and burst are the policy's quota.  (A shaper's remaining is counted from
// the request's release: leaky_bucket asks owed_frac_of.)
// A window's fraction is limit - remaining units of limit, rounded up (as
// owed_frac_of's; a limit is at most 2^30, the product fits).
RL_HOT uint32_t owed_frac(const rl_rule_t &rule, const State &s, const rl_decision_t &d, int64_t now)
{
    if (d.remaining + 1 >= rule.policy_quota && rule.policy_quota > 1 && !has(rule, kShaper)) {
        return 0;
    }
    if (!has(rule, kPaced | kSlots)) {
        const uint64_t units = rule.limit - (d.remaining < rule.limit ? d.remaining : rule.limit);
        return units <= 1 ? 0 : (uint32_t) ((units * kFracFull + rule.limit - 1) / rule.limit);
    }
    if (has(rule, kShaper) && s.blob == nullptr) {
        // a shaper's queue, (t - now) x limit - n units, at most T: nothing
        const int64_t ms = s.head.t - now;
        const uint32_t n = s.head.n < rule.limit ? s.head.n : rule.limit - 1;
        if (ms <= 0 || (unsigned __int128) (uint64_t) ms * rule.limit <= (uint64_t) rule.period_ms + n) {
            return 0;
        }
    }
    return owed_frac_of(rule, s, d, now);
}

// The state a key absent from the table starts from, when the summary says
// it may owe o: the least state that owes at least what any key it stands
// for owed.  For sliding_window and sliding_log a head with no block,
// {until, units}: `units` that all leave the window at `until`, which their
// transitions read as such and restore_block() writes into a fresh block.
State restore(const rl_rule_t &rule, Owed o, int64_t now);
void restore_block(const rl_rule_t &rule, State &s, int64_t now);

// The parts of the summary the algorithms share (summary.cpp): a fraction
// of a whole, rounded up, and back; what a count in a window owes (limit -
// remaining units); the state of a count restored into the window ending
// at `end` (aligned: a window the same for every key, so that what a cell
// says was owed in an earlier window is not owed in this one).
uint32_t fraction(uint64_t part, uint64_t whole);
uint64_t part_of(uint32_t frac, uint64_t whole);
uint32_t window_owed(const rl_rule_t &rule, const State &s, const rl_decision_t &d, int64_t now);
State restore_window(const rl_rule_t &rule, Owed o, int64_t now, int64_t end, bool aligned);

// ---- refunds ---------------------------------------------------------------

// Gives back what a request admitted at `at` spent (cost), leaving the head
// `after`, now that it is abandoned before being served, or its charge is
// known: the key's state moves back by the cost, as if it had not come, but
// never to before now, and only units still counted (each algorithm's
// refund, in its file).
void refund(const rl_rule_t &rule, State &s, uint64_t cost, rl_state_t after, int64_t at, int64_t now);
// A count in a window (fixed_window, quota): uncounted if the head is still
// that window's, or taken off what a charge carried past it.
void window_refund(const rl_rule_t &rule, State &s, uint64_t cost, rl_state_t after, int64_t at, int64_t now);

// ceil(a / b) for non-negative a and positive b.
inline int64_t ceil_div(uint64_t a, uint64_t b)
{
    return (int64_t) ((a + b - 1) / b);
}

// floor(a / b) for any a and positive b.
inline int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b < 0);
}

}  // namespace rl
