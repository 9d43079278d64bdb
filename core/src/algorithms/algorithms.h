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

rl_decision_t fixed_window(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply);
rl_decision_t sliding_window(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply);
rl_decision_t sliding_log(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply);
rl_decision_t leaky_bucket(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply);
rl_decision_t quota(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply);
// concurrency, as a look: the slots left (concurrency.cpp has the rest)
rl_decision_t concurrency(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply);

// What a key owes, as the eviction summary keeps it (table.h): until when
// (ms; the key is back to full budget from then on), and at most which
// fraction of its rule's capacity, in 1/kFracFull, rounded up.
struct Owed {
    int64_t until;
    uint32_t frac;
};
constexpr uint32_t kFracFull = 255;

// Dispatches on rule.algorithm (transition.h, inline; gcra is gcra.h's).

// Bytes of the rule's block (0: the head holds the whole state), as
// derive() worked it out.
inline size_t blob_size(const rl_rule_t &rule)
{
    return rule.block;
}
size_t sliding_window_blob_size(const rl_rule_t &rule);
size_t sliding_log_blob_size(const rl_rule_t &rule);

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
Span fixed_window_span(const rl_rule_t &rule, const State &s, int64_t now);
Span quota_span(const rl_rule_t &rule, int64_t now);

// ---- requests in flight (concurrency.cpp) ----------------------------------

// A request of a concurrency rule decided on the key's state: admitted (a
// slot is free and no waiter is ahead of it), queued (max_wait: it waits,
// or may join the queue; delay_ms is max_wait), or refused.  Slots and
// places of holders that alive() says no longer exist are freed first when
// none would be free (*reclaimed: slots freed).
rl_decision_t concurrency_decide(const rl_rule_t &rule, State &s, int64_t now, const rl_check_t &c,
                                 int (*alive)(uint32_t), uint32_t *reclaimed);
// An admitted request takes a slot (c.slot) and leaves the queue; a queued
// one joins the queue if it is not in it (c.ticket); a request that ends or
// gives up releases its slot and place (true if it held a slot).
void concurrency_take(const rl_rule_t &rule, State &s, int64_t now, rl_check_t &c, uint32_t holder);
void concurrency_enqueue(const rl_rule_t &rule, State &s, int64_t now, rl_check_t &c, uint32_t holder);
void concurrency_leave_queue(const rl_rule_t &rule, State &s, rl_check_t &c);
bool concurrency_release(const rl_rule_t &rule, State &s, int64_t now, rl_check_t &c, uint32_t holder);
uint32_t concurrency_reclaim(const rl_rule_t &rule, State &s, int (*alive)(uint32_t));
size_t concurrency_blob_size(const rl_rule_t &rule);
// What a key holds and how many wait (the key API).
void concurrency_counts(const rl_rule_t &rule, const State &s, uint32_t *held, uint32_t *queued);

// ---- charges (charge.cpp) --------------------------------------------------

// Spends `units` on a key whatever its budget (charge=, when a request
// ends), the key owing at most a limit beyond an empty budget: returns the
// units spent, and sets *capped when that bound cut the charge.
uint64_t charge(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped);
uint64_t windowed_charge(const rl_rule_t &rule, State &s, uint64_t units, const Span &span, bool *capped);
uint64_t sliding_window_charge(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped);
uint64_t sliding_log_charge(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped);

// A denial for a cost no state of the rule can ever admit.
rl_decision_t never(int64_t window, uint64_t remaining, int64_t reset_ms);

// The decision's policy (quota, window) for the rule, as derive() worked it
// out: rl_transition() and conclude() (for the check the headers describe)
// set it.
inline void policy(const rl_rule_t &rule, rl_decision_t &d)
{
    d.quota = rule.policy_quota;
    if (rule.policy_window_ms >= 0) {
        d.window_ms = rule.policy_window_ms;
    }
}

// What the rule's requests read and no request changes, worked out once
// (rl_rule_finish, rl_rule_apply): its block's size, its policy.
void derive(rl_rule_t &rule);

// The algorithms that keep one instant per key (exact_time.h).
inline bool paced(uint32_t algorithm)
{
    return algorithm == RL_GCRA || algorithm == RL_TOKEN_BUCKET || algorithm == RL_LEAKY_BUCKET;
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
    if (d.remaining + 1 >= rule.policy_quota && rule.policy_quota > 1 && rule.algorithm != RL_LEAKY_BUCKET) {
        return 0;
    }
    if (!paced(rule.algorithm) && rule.algorithm != RL_CONCURRENCY) {
        const uint64_t units = rule.limit - (d.remaining < rule.limit ? d.remaining : rule.limit);
        return units <= 1 ? 0 : (uint32_t) ((units * kFracFull + rule.limit - 1) / rule.limit);
    }
    if (rule.algorithm == RL_LEAKY_BUCKET && s.blob == nullptr) {
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

// Helpers of restore, in the algorithms' files.
int64_t quota_end(const rl_rule_t &rule, int64_t now);
int64_t sliding_window_full_at(const rl_rule_t &rule, int64_t now);
void sliding_window_restore(const rl_rule_t &rule, State &s, int64_t now);
void sliding_window_merge(const rl_rule_t &rule, State &s, int64_t k, const uint64_t *at);
void sliding_log_restore(const rl_rule_t &rule, State &s, int64_t now);

// ---- refunds (refund.cpp) -------------------------------------------------

// Gives back what a request admitted at `at` spent (cost), leaving the head
// `after`, now that it is abandoned before being served.
void refund(const rl_rule_t &rule, State &s, uint64_t cost, rl_state_t after, int64_t at, int64_t now);
void sliding_window_refund(const rl_rule_t &rule, State &s, uint64_t cost, int64_t at);
void sliding_log_refund(const rl_rule_t &rule, State &s, uint64_t cost, int64_t at);

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
