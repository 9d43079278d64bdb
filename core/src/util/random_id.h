// A 64-bit id unique across servers and restarts, never 0: getrandom()'s,
// or without it the clock's nanoseconds and the process, mixed
// (splitmix64's finalizer).
#pragma once

#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>

namespace rl {

inline uint64_t random_id()
{
    uint64_t id = 0;
    if (getrandom(&id, sizeof(id), 0) != (ssize_t) sizeof(id)) {
        timespec ts{};
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t z = (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec + ((uint64_t) getpid() << 40) +
                     0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        id = z ^ (z >> 31);
    }
    return id != 0 ? id : 1;
}

}  // namespace rl
