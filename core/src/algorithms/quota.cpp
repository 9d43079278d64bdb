// Quota: a budget of `limit` units per calendar day, week (from
// Monday) or month, resetting on the real boundary: months of 28 to 31 days,
// leap years.  The calendar is a fixed offset from UTC (utc_offset=+HH:MM):
// no daylight saving time, so a boundary is the same on every machine and in
// the Redis script.  State: t = the period's end, n = units spent.
#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "algorithms/algorithm.h"
#include "algorithms/calendar.h"
#include "util/error.h"
#include "util/out.h"

namespace rl {

namespace {

const int64_t kDay = 86400000;

// Its own parameters: the calendar's period (reset=, enum rl_reset) and
// its offset from UTC (utc_offset=, in minutes).
struct QuotaParams {
    int32_t utc_offset_min;
    uint8_t reset;
};

const Word resets[] = {{"daily", RL_RESET_DAILY}, {"weekly", RL_RESET_WEEKLY}, {"monthly", RL_RESET_MONTHLY}};

// "+HH:MM" or "-HH:MM", at most 14:00 either way: minutes.
bool parse_offset(const char *p, size_t len, void *field)
{
    if (len != 6 || (p[0] != '+' && p[0] != '-') || p[3] != ':') {
        return false;
    }
    for (size_t i : {1, 2, 4, 5}) {
        if (p[i] < '0' || p[i] > '9') {
            return false;
        }
    }
    const int h = (p[1] - '0') * 10 + (p[2] - '0'), m = (p[4] - '0') * 10 + (p[5] - '0');
    if (m > 59 || h * 60 + m > RL_UTC_OFFSET_MAX_MIN) {
        return false;
    }
    const int32_t minutes = (p[0] == '-' ? -1 : 1) * (h * 60 + m);
    std::memcpy(field, &minutes, sizeof(minutes));
    return true;
}

const OwnParam own[] = {
    word_param("reset", offsetof(QuotaParams, reset), resets, 3),
    parsed_param("utc_offset", offsetof(QuotaParams, utc_offset_min), parse_offset,
                 "+HH:MM or -HH:MM, at most 14:00, like +05:30"),
};

uint32_t reset_of(const rl_rule_t &rule)
{
    return params_of<QuotaParams>(rule).reset;
}

// The calendar period holding `now`: its start and end, in Unix ms.
void period_of(const rl_rule_t &rule, int64_t now, int64_t *start, int64_t *end)
{
    const int64_t offset = (int64_t) params_of<QuotaParams>(rule).utc_offset_min * 60000;
    const int64_t day = floor_div(now + offset, kDay);
    int64_t first, next;

    switch (reset_of(rule)) {
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
    if (!given(rule, "reset")) {
        return fail(err, errlen, "missing \"reset=\" for algorithm=quota: expected reset=daily, weekly or monthly");
    }
    static const int64_t lengths[] = {kDay, 7 * kDay, 30 * kDay};
    rule.period_ms = lengths[reset_of(rule) < 3 ? reset_of(rule) : 0];
    return RL_OK;
}

void quota_tail(const rl_rule_t &rule, char *out, size_t len)
{
    std::snprintf(out, len, "%s", rl_reset_name(reset_of(rule)));
}

int64_t quota_window(const rl_rule_t &rule, int64_t now)
{
    return quota_span(rule, now).window;
}

// A month is 28 to 31 days: its policy's window is the request's.
int quota_fixed(const rl_rule_t &rule)
{
    return reset_of(rule) != RL_RESET_MONTHLY;
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
    const uint32_t r = reset_of(rule) < 3 ? reset_of(rule) : 0;
    b.window_min = days[r][0] * kDay;
    b.window_max = days[r][1] * kDay;
    b.longest = (uint64_t) b.window_max * (debt ? 2 : 1);
}

void quota_fields(Out &o, const rl_rule_t &rule)
{
    o.put(",\"reset\":\"");
    o.put(rl_reset_name(reset_of(rule)));
    o.put("\"");
}

void quota_spec(const rl_rule_t &rule, int64_t (&fields)[kSpecOwn])
{
    const QuotaParams p = params_of<QuotaParams>(rule);
    fields[kSpecReset] = p.reset;
    fields[kSpecUtcOffset] = p.utc_offset_min;
}

}  // namespace

extern const Algorithm kQuota = {
    .name = "quota",
    .traits = kCount,
    .own = own,
    .nown = 2,
    .finish = quota_finish,
    .name_tail = quota_tail,
    .block_size = no_block,
    .policy = limit_policy,
    .policy_window = quota_window,
    .policy_fixed = quota_fixed,
    .transition = quota,
    .charge = quota_charge,
    .refund = window_refund,
    .owed = window_owed,
    .restore = quota_restore,
    .bounds = quota_bounds,
    .spec = quota_spec,
    .api_fields = quota_fields,
    .overridable = P_LIMIT,
};

}  // namespace rl

// resets[] is in the order of enum rl_reset
extern "C" const char *rl_reset_name(uint32_t reset)
{
    return reset < sizeof(rl::resets) / sizeof(rl::resets[0]) ? rl::resets[reset].text : "?";
}
