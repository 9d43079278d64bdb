// Quota: a budget of `limit` units per calendar day, week (from
// Monday) or month, resetting on the real boundary: months of 28 to 31 days,
// leap years.  The calendar is a fixed offset from UTC (utc_offset=+HH:MM):
// no daylight saving time, so a boundary is the same on every machine and in
// the Redis script.  State: t = the period's end, n = units spent.
#include "algorithms/algorithms.h"
#include "algorithms/calendar.h"

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

}  // namespace rl
