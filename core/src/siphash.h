// SipHash-2-4 (Aumasson & Bernstein, "SipHash: a fast short-input PRF",
// 2012): a keyed 64-bit hash.  Keyed with a per-zone random secret it makes
// table collisions impossible to craft from outside.  Streaming, so a rule
// identity and a key hash as one message without copying.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rl {

class SipHash {
public:
    explicit SipHash(const uint8_t key[16]);
    void update(const void *data, size_t len);
    uint64_t finish();

private:
    void compress(uint64_t m);

    uint64_t v0_, v1_, v2_, v3_;
    uint64_t tail_ = 0;     // pending bytes, little-endian
    size_t ntail_ = 0;
    uint64_t total_ = 0;
};

}  // namespace rl
