// A non-negative decimal integer of at most `most`, every byte a digit:
// the one reader of the numbers the core parses from text it is given
// (directive values, overrides files), refusing a value past `most` before
// it could overflow, whatever its number of digits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rl {

inline bool decimal(const char *p, size_t len, uint64_t most, uint64_t *out)
{
    if (len == 0) {
        return false;
    }
    uint64_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return false;
        }
        const uint64_t d = (uint64_t) (p[i] - '0');
        if (n > most / 10 || d > most - n * 10) {
            return false;
        }
        n = n * 10 + d;
    }
    *out = n;
    return true;
}

}  // namespace rl
