// A 64-bit id unique across servers and restarts, never 0: getrandom()'s,
// or without it the clock's nanoseconds and the process, mixed
// (splitmix64's finalizer).
#pragma once

#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>

#include "util/mix.h"

namespace rl {

inline uint64_t random_id()
{
    uint64_t id = 0;
    if (getrandom(&id, sizeof(id), 0) != (ssize_t) sizeof(id)) {
        timespec ts{};
        clock_gettime(CLOCK_REALTIME, &ts);
        id = splitmix64_mix((uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec + ((uint64_t) getpid() << 40) +
                            0x9e3779b97f4a7c15ull);
    }
    return id != 0 ? id : 1;
}

}  // namespace rl
