// SipHash-c-d (Aumasson & Bernstein, "SipHash: a fast short-input PRF",
// 2012): a keyed 64-bit hash, c rounds a message word and d to finish.
// Keyed with a per-zone random secret it makes table collisions impossible
// to craft from outside.  Streaming (a rule's identity, from its parts), or
// in one call (a key, once a request per zone: inline, on every request).
//
// SipHash-2-4 is the paper's PRF (rule identities).  A table's tags use
// SipHash-1-3, the variant hash tables use against flooding (Rust's
// standard HashMap, CPython's str hash since 3.11): what a tag must resist
// is an attacker who sees no hash and no secret crafting keys that collide,
// and 5 rounds for a short key instead of 8 is about 60 instructions a
// request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "SipHash words are read little-endian");

namespace rl {

template <int C, int D> class SipHashRounds {
public:
    explicit SipHashRounds(const uint8_t key[16])
    {
        const uint64_t k0 = load(key), k1 = load(key + 8);
        v0_ = k0 ^ 0x736f6d6570736575ull;
        v1_ = k1 ^ 0x646f72616e646f6dull;
        v2_ = k0 ^ 0x6c7967656e657261ull;
        v3_ = k1 ^ 0x7465646279746573ull;
    }

    // Hashes a little-endian 64-bit word (aligned with the message so far).
    void word(uint64_t m)
    {
        total_ += 8;
        if (ntail_ == 0) {
            compress(m);
        } else {
            update(&m, sizeof(m));
            total_ -= 8;
        }
    }

    void update(const void *data, size_t len)
    {
        const uint8_t *p = static_cast<const uint8_t *>(data);
        total_ += len;
        while (ntail_ != 0 && len != 0) {  // complete a partial word first
            tail_ |= (uint64_t) *p++ << (8 * ntail_);
            len--;
            if (++ntail_ == 8) {
                compress(tail_);
                tail_ = 0;
                ntail_ = 0;
            }
        }
        for (; len >= 8; p += 8, len -= 8) {
            compress(load(p));
        }
        for (size_t i = 0; i < len; i++) {
            tail_ |= (uint64_t) p[i] << (8 * ntail_++);
        }
    }

    uint64_t finish()
    {
        compress(tail_ | (total_ << 56));
        return finalize();
    }

    // The hash of len bytes in one call: what update() then finish() give,
    // without the streaming's bookkeeping (a table's key hash, on every
    // request).
    static uint64_t bytes(const uint8_t key[16], const void *data, size_t len)
    {
        SipHashRounds h(key);
        const uint8_t *p = static_cast<const uint8_t *>(data);
        size_t n = len;
        for (; n >= 8; p += 8, n -= 8) {
            h.compress(load(p));
        }
        uint64_t last = (uint64_t) len << 56;  // the length, mod 256
        if (n >= 4) {
            // two 4-byte loads that overlap in the middle
            last |= (uint64_t) load32(p) | (uint64_t) load32(p + n - 4) << (8 * (n - 4));
        } else if (n > 0) {
            last |= (uint64_t) p[0] | (uint64_t) p[n / 2] << (8 * (n / 2)) | (uint64_t) p[n - 1] << (8 * (n - 1));
        }
        h.compress(last);
        return h.finalize();
    }

private:
    static uint32_t load32(const uint8_t *p)
    {
        uint32_t v;
        std::memcpy(&v, p, sizeof(v));
        return v;
    }
    static uint64_t load(const uint8_t *p)
    {
        uint64_t v;
        std::memcpy(&v, p, sizeof(v));
        return v;
    }
    static uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

    void round()
    {
        v0_ += v1_;
        v1_ = rotl(v1_, 13);
        v1_ ^= v0_;
        v0_ = rotl(v0_, 32);
        v2_ += v3_;
        v3_ = rotl(v3_, 16);
        v3_ ^= v2_;
        v0_ += v3_;
        v3_ = rotl(v3_, 21);
        v3_ ^= v0_;
        v2_ += v1_;
        v1_ = rotl(v1_, 17);
        v1_ ^= v2_;
        v2_ = rotl(v2_, 32);
    }

    void compress(uint64_t m)
    {
        v3_ ^= m;
#pragma GCC unroll 4
        for (int i = 0; i < C; i++) {
            round();
        }
        v0_ ^= m;
    }

    uint64_t finalize()
    {
        v2_ ^= 0xff;
#pragma GCC unroll 4
        for (int i = 0; i < D; i++) {
            round();
        }
        return v0_ ^ v1_ ^ v2_ ^ v3_;
    }

    uint64_t v0_, v1_, v2_, v3_;
    uint64_t tail_ = 0;  // pending bytes, little-endian
    size_t ntail_ = 0;
    uint64_t total_ = 0;
};

using SipHash = SipHashRounds<2, 4>;    // rule identities; the paper's vectors
using SipHash13 = SipHashRounds<1, 3>;  // a table's tags

}  // namespace rl
