// Fixed window: at most `limit` cost units per window of `period`.  Windows
// start at multiples of period since the Unix epoch (align=epoch) or at a
// key's first request (align=first).  State: t = the window's end, n =
// units spent in it.
//
// A charge (charge=, spent when a request ends) may exceed what the window
// has left: the excess, up to a limit, is counted in the next window, whose
// budget repays it.  The head is then that window's, with kCarried in n:
// the window before it is full.
//
// Known trade-off (documented): up to 2 x limit can pass across one
// boundary.  Jump-safe: a window whose end lies further ahead than the
// current window's (the clock stepped back) is kept, count and all.
#include "algorithms/algorithm.h"
#include "util/out.h"

namespace rl {

namespace {

// Its own parameter: where a key's windows start (align=, enum rl_align).
struct FixedWindowParams {
    uint8_t align;
};

const Word aligns[] = {{"epoch", RL_ALIGN_EPOCH}, {"first", RL_ALIGN_FIRST}};
const OwnParam own[] = {
    word_param("align", offsetof(FixedWindowParams, align), aligns, 2),
};

bool windows_from_first(const rl_rule_t &rule)
{
    return params_of<FixedWindowParams>(rule).align == RL_ALIGN_FIRST;
}

// The units a key has spent in the window ending `end`, from its head: the
// window's count when the head is that window, 0 for an older one.
uint64_t spent_in(const State &s, int64_t end)
{
    return s.head.t == end ? s.head.n & ~kCarried : 0;
}

// The same at now, for a decision: a head whose window has not ended and
// ends before `end` was counted under another period (an override changed
// it): what it counts is owed in the current window.
uint64_t spent_now(const State &s, int64_t end, int64_t now)
{
    return s.head.t == end || (s.head.t > now && s.head.t < end) ? s.head.n & ~kCarried : 0;
}

// A head with kCarried whose window lies ahead: the window before it (the
// current one) is full, and the head's window already holds units.
bool carried(const State &s, int64_t end)
{
    return (s.head.n & kCarried) && s.head.t > end;
}

}  // namespace

rl_decision_t windowed_count(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply, int64_t end,
                             int64_t window)
{
    rl_decision_t d{};  // the one object returned, built in the caller's
    if (carried(s, end)) {
        // a charge's excess is counted in the next window: this one is full
        const uint64_t owed = s.head.n & ~kCarried;
        const int64_t back = s.head.t - now;  // back to full budget
        if (cost > rule.limit) {
            d = never(window, 0, back);
            return d;
        }
        d.window_ms = window;
        d.reset_ms = back;
        d.available_ms = owed < rule.limit ? end - now : back;
        if (cost == 0) {
            d.allowed = 1;  // looking is always allowed
        } else {
            d.retry_after_ms = owed + cost <= rule.limit ? end - now : back;
            d.available_ms = d.retry_after_ms;  // a refusal's, as every rule's
        }
        return d;
    }
    if (s.head.t > end) {
        end = s.head.t;  // the clock stepped back: keep the later window
    }
    const uint64_t spent = spent_now(s, end, now);
    const uint64_t left = spent < rule.limit ? rule.limit - spent : 0;
    const int64_t to_end = end - now;

    if (cost > rule.limit) {
        d = never(window, left, spent ? to_end : 0);
        return d;
    }

    d.window_ms = window;

    // units come back all at once, at the window's end
    if (cost <= left) {
        d.allowed = 1;
        d.remaining = left - cost;
        d.reset_ms = spent + cost ? to_end : 0;
        d.available_ms = d.reset_ms;
        if (apply && cost > 0) {
            s.head = rl_state_t{end, (uint32_t) (spent + cost)};
        }
    } else {
        d.remaining = left;
        d.reset_ms = to_end;
        d.retry_after_ms = to_end;
        d.available_ms = to_end;
    }
    return d;
}

uint64_t windowed_charge(const rl_rule_t &rule, State &s, uint64_t units, const Span &span, bool *capped)
{
    const uint64_t limit = rule.limit;
    if (carried(s, span.end)) {
        const uint64_t owed = s.head.n & ~kCarried;
        const uint64_t add = owed < limit ? (units < limit - owed ? units : limit - owed) : 0;
        *capped = add < units;
        s.head.n = (uint32_t) (owed + add) | kCarried;
        return add;
    }
    int64_t end = span.end, next = span.next_end;
    if (s.head.t > end) {
        next = s.head.t + (next - end);  // the clock stepped back: the later window
        end = s.head.t;
    }
    const uint64_t spent = spent_in(s, end);
    const uint64_t room = spent < limit ? limit - spent : 0;
    if (units <= room) {
        *capped = false;
        s.head = rl_state_t{end, (uint32_t) (spent + units)};
        return units;
    }
    // what the window cannot hold is counted in the next one, at most a
    // limit: the key owes it, and the next window's budget repays it
    const uint64_t excess = units - room;
    const uint64_t carry = excess < limit ? excess : limit;
    *capped = excess > limit;
    s.head = rl_state_t{next, (uint32_t) carry | kCarried};
    return room + carry;
}

Span fixed_window_span(const rl_rule_t &rule, const State &s, int64_t now)
{
    const int64_t period = rule.period_ms;
    int64_t end;

    if (windows_from_first(rule)) {
        end = s.head.t > now ? s.head.t : now + period;
        if ((s.head.n & kCarried) && s.head.t > now && s.head.t - now > period) {
            end = s.head.t - period;  // the full window before a carried one
        }
    } else {
        end = floor_div(now, period) * period + period;
    }
    // (a state of any bytes may put the window's end at either end of the
    // clock: nothing here overflows, and the next window's end stays at the
    // clock's last millisecond)
    return Span{end, period, end > INT64_MAX - period ? INT64_MAX : end + period};
}

rl_decision_t fixed_window(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    const Span span = fixed_window_span(rule, s, now);
    return windowed_count(rule, s, now, cost, apply, span.end, span.window);
}

// The head is {window end, units}: the cost is uncounted if the head is
// still that window's; if its window is full and a charge's excess
// carried into the next, the units freed there are taken off the carried
// ones.
void window_refund(const rl_rule_t &, State &s, uint64_t cost, rl_state_t after, int64_t, int64_t)
{
    if (s.head.t == after.t) {
        s.head.n -= (uint32_t) (cost < s.head.n ? cost : s.head.n);
    } else if ((s.head.n & kCarried) && s.head.t > after.t) {
        const uint32_t carried = s.head.n & ~kCarried;
        s.head.n = (carried - (uint32_t) (cost < carried ? cost : carried)) | kCarried;
    }
}

namespace {

uint64_t fixed_window_charge(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped)
{
    return windowed_charge(rule, s, units, fixed_window_span(rule, s, now), capped);
}

// Restored into the window a unit admitted now is counted in; aligned on
// the epoch, the same window for every key.
State fixed_window_restore(const rl_rule_t &rule, Owed o, int64_t now)
{
    const int64_t P = rule.period_ms;
    const bool epoch = !windows_from_first(rule);
    return restore_window(rule, o, now, epoch ? floor_div(now, P) * P + P : now + P, epoch);
}

void fixed_window_fields(Out &o, const rl_rule_t &rule)
{
    o.field("period_ms", (uint64_t) rule.period_ms);
    o.put(windows_from_first(rule) ? ",\"align\":\"first\"" : ",\"align\":\"epoch\"");
}

void fixed_window_spec(const rl_rule_t &rule, int64_t (&fields)[kSpecOwn])
{
    fields[kSpecAlign] = params_of<FixedWindowParams>(rule).align;
}

}  // namespace

extern const Algorithm kFixedWindow = {
    .name = "fixed_window",
    .traits = kCount,
    .own = own,
    .nown = 1,
    .name_tail = period_tail,
    .block_size = no_block,
    .policy = limit_policy,
    .transition = fixed_window,
    .charge = fixed_window_charge,
    .refund = window_refund,
    .owed = window_owed,
    .restore = fixed_window_restore,
    .bounds = period_bounds,
    .spec = fixed_window_spec,
    .windows_keyed = windows_from_first,
    .api_fields = fixed_window_fields,
    .overridable = P_LIMIT | P_PERIOD,
};

}  // namespace rl
