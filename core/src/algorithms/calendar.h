// Proleptic Gregorian calendar arithmetic on day numbers (days since
// 1970-01-01), after Howard Hinnant's days_from_civil / civil_from_days
// ("chrono-Compatible Low-Level Date Algorithms"): exact for any year, with
// no time zone database, so a quota boundary is the same on every machine.
#pragma once

#include <cstdint>

namespace rl {

struct Civil {
    int64_t y;
    unsigned m;  // 1..12
    unsigned d;  // 1..31
};

int64_t days_from_civil(int64_t y, unsigned m, unsigned d);
Civil civil_from_days(int64_t z);

// 0 = Monday ... 6 = Sunday; day 0 (1970-01-01) was a Thursday.
inline unsigned weekday_from_monday(int64_t z)
{
    return (unsigned) (((z + 3) % 7 + 7) % 7);
}

}  // namespace rl
