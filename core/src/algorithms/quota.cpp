// Quota: a budget of `limit` units per calendar day, week (from
// Monday) or month, resetting on the real boundary: months of 28 to 31 days,
// leap years.  The calendar is a fixed offset from UTC (utc_offset=+HH:MM):
// no daylight saving time, so a boundary is the same on every machine and in
// the Redis script.  State: t = the period's end, n = units spent.
#include <cstdio>

#include "algorithms/algorithm.h"
#include "algorithms/calendar.h"
#include "util/error.h"
#include "util/out.h"

namespace rl {

namespace {

const int64_t kDay = 86400000;

// The calendar period holding `now`: its start and end, in Unix ms.
void period_of(const rl_rule_t &rule, int64_t now, int64_t *start, int64_t *end)
{
    const int64_t offset = (int64_t) rule.utc_offset_min * 60000;
    const int64_t day = floor_div(now + offset, kDay);
    int64_t first, next;

    switch (rule.reset) {
    case RL_RESET_WEEKLY:
        first = day - weekday_from_monday(day);
        next = first + 7;
        break;
    case RL_RESET_MONTHLY: {
        const Civil c = civil_from_days(day);
        first = days_from_civil(c.y, c.m, 1);
        next = c.m == 12 ? days_from_civil(c.y + 1, 1, 1) : days_from_civil(c.y, c.m + 1, 1);
        break;
    }
    default:
        first = day;
        next = day + 1;
        break;
    }
    *start = first * kDay - offset;
    *end = next * kDay - offset;
}

}  // namespace

int64_t quota_end(const rl_rule_t &rule, int64_t now)
{
    int64_t start, end;
    period_of(rule, now, &start, &end);
    return end;
}

Span quota_span(const rl_rule_t &rule, int64_t now)
{
    int64_t start, end;
    period_of(rule, now, &start, &end);
    return Span{end, end - start, quota_end(rule, end)};
}

rl_decision_t quota(const rl_rule_t &rule, State &s, int64_t now, uint64_t cost, bool apply)
{
    int64_t start, end;  // a request needs no window after this one (quota_span's next_end)
    period_of(rule, now, &start, &end);
    return windowed_count(rule, s, now, cost, apply, end, end - start);
}

namespace {

// Its period is the calendar's, named by reset=; rl_rule_finish's period
// the nominal one (names, docs), decisions the calendar's.
int quota_finish(rl_rule_t &rule, char *err, size_t errlen)
{
    if (rule.given & P_PERIOD) {
        return fail(err, errlen,
                    "\"period=\" does not apply to algorithm=quota: its period is the calendar's, set by "
                    "reset=daily, weekly or monthly");
    }
    if (!(rule.given & P_RESET)) {
        return fail(err, errlen, "missing \"reset=\" for algorithm=quota: expected reset=daily, weekly or monthly");
    }
    static const int64_t lengths[] = {kDay, 7 * kDay, 30 * kDay};
    rule.period_ms = lengths[rule.reset < 3 ? rule.reset : 0];
    return RL_OK;
}

void quota_tail(const rl_rule_t &rule, char *out, size_t len)
{
    std::snprintf(out, len, "%s", rl_reset_name(rule.reset));
}

int64_t quota_window(const rl_rule_t &rule, int64_t now)
{
    return quota_span(rule, now).window;
}

// A month is 28 to 31 days: its policy's window is the request's.
int quota_fixed(const rl_rule_t &rule)
{
    return rule.reset != RL_RESET_MONTHLY;
}

uint64_t quota_charge(const rl_rule_t &rule, State &s, int64_t now, uint64_t units, bool *capped)
{
    return windowed_charge(rule, s, units, quota_span(rule, now), capped);
}

// Restored into the calendar period holding now, the same for every key.
State quota_restore(const rl_rule_t &rule, Owed o, int64_t now)
{
    return restore_window(rule, o, now, quota_end(rule, now), true);
}

// A fixed offset from UTC: calendar days of 24 hours; a window's wait, or
// two with a debt.
void quota_bounds(const rl_rule_t &rule, bool debt, Bounds &b)
{
    static const int64_t days[3][2] = {{1, 1}, {7, 7}, {28, 31}};
    const uint32_t r = rule.reset < 3 ? rule.reset : 0;
    b.window_min = days[r][0] * kDay;
    b.window_max = days[r][1] * kDay;
    b.longest = (uint64_t) b.window_max * (debt ? 2 : 1);
}

void quota_fields(Out &o, const rl_rule_t &rule)
{
    o.put(",\"reset\":\"");
    o.put(rl_reset_name(rule.reset));
    o.put("\"");
}

}  // namespace

extern const Algorithm kQuota = {
    "quota",       kCount,        P_RESET | P_UTC_OFFSET,
    quota_finish,  quota_tail,    no_block,
    limit_policy,  quota_window,  quota_fixed,
    quota,         nullptr,       quota_charge,
    nullptr,       window_refund, window_owed,
    quota_restore, nullptr,       nullptr,
    nullptr,       quota_bounds,  nullptr,
    quota_fields,  P_LIMIT,       nullptr,
    nullptr,       nullptr,       nullptr,
    nullptr,       nullptr,
};

}  // namespace rl
