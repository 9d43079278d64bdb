// A client's address as the rules keyed on it keep it: an IPv4-mapped IPv6
// address (::ffff:a.b.c.d: an IPv4 client of a dual-stack listener, or
// what realip makes of a proxy that sends such addresses) is its IPv4
// address, as nginx's allow, deny and geo match it.  A request's key
// ($binary_remote_addr: 16 bytes; $remote_addr: "::ffff:a.b.c.d", as nginx
// writes it) loses its mapped prefix, so that one client has one key,
// whichever way it came.
#pragma once

#include <arpa/inet.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ratelimit_rule.h"

namespace rl {

// The shortest key a mapped address makes: "::ffff:1.2.3.4" (16 bytes of
// $binary_remote_addr are more).
constexpr size_t kMappedShortest = 14;

// The bytes at the start of a key of a rule keyed on the client's address
// (key_addr) that make an IPv4 address a mapped IPv6 one: 12 of 16 bytes,
// or "::ffff:" before a dotted quad; 0 when it is not one.
inline size_t mapped_prefix(uint8_t key_addr, const void *key, size_t len)
{
    static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const char *k = static_cast<const char *>(key);
    if (key_addr == RL_KEY_ADDR_BINARY) {
        return len == 16 && std::memcmp(k, kMapped, sizeof(kMapped)) == 0 ? sizeof(kMapped) : 0;
    }
    char quad[16];
    uint8_t a[4];
    if (len <= 7 || len - 7 >= sizeof(quad) || std::memcmp(k, "::ffff:", 7) != 0) {
        return 0;
    }
    std::memcpy(quad, k + 7, len - 7);
    quad[len - 7] = '\0';
    return inet_pton(AF_INET, quad, a) == 1 ? 7 : 0;
}

}  // namespace rl
