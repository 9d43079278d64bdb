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

    void length_line(char type, size_t n)
    {
        *p++ = type;
        number((int64_t) n);
        raw("\r\n", 2);
    }

    void arg(const char *s, size_t len)
    {
        length_line('$', len);
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

// An error reply of a replica to a write (READONLY ...): the server the
// connection reaches is no longer the primary (a failover).
inline bool is_readonly(const rl_resp_t &r)
{
    return r.type == RL_RESP_ERROR && r.str_len >= 8 && std::memcmp(r.str, "READONLY", 8) == 0 &&
           (r.str_len == 8 || r.str[8] == ' ');
}

}  // namespace rl
