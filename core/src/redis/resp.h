// RESP, Redis's protocol: writing a command, reading a reply.  No I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ratelimit.h"

namespace rl {

// Writes a command's parts at p: the caller's buffer is big enough
// (rl_redis_command_size()).
struct Writer {
    char *p;

    void raw(const char *s, size_t len)
    {
        std::memcpy(p, s, len);
        p += len;
    }

    void number(int64_t v)
    {
        char tmp[24];
        size_t len = 0;
        uint64_t u = v < 0 ? 0 - (uint64_t) v : (uint64_t) v;
        do {
            tmp[len++] = (char) ('0' + u % 10);
            u /= 10;
        } while (u);
        if (v < 0) {
            *p++ = '-';
        }
        while (len) {
            *p++ = tmp[--len];
        }
    }

    void header(char type, size_t n)
    {
        *p++ = type;
        number((int64_t) n);
        raw("\r\n", 2);
    }

    void arg(const char *s, size_t len)
    {
        header('$', len);
        raw(s, len);
        raw("\r\n", 2);
    }

    void arg(int64_t v)
    {
        char tmp[24];
        Writer w{tmp};
        w.number(v);
        arg(tmp, (size_t) (w.p - tmp));
    }
};

}  // namespace rl
