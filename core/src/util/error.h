// The core's error messages: every one names what is wrong and what is
// allowed, written into the caller's buffer (RL_ERR_MAX is enough).
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdio>

#include "ratelimit.h"

namespace rl {

// Writes the message (when there is a buffer) and returns RL_ERROR.
inline int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

inline int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err != nullptr && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        std::vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return RL_ERROR;
}

}  // namespace rl
