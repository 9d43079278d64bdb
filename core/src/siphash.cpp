#include "siphash.h"

#include <cstring>

namespace rl {

namespace {

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

inline uint64_t load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

}  // namespace

SipHash::SipHash(const uint8_t key[16])
{
    const uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
    v0_ = k0 ^ 0x736f6d6570736575ull;
    v1_ = k1 ^ 0x646f72616e646f6dull;
    v2_ = k0 ^ 0x6c7967656e657261ull;
    v3_ = k1 ^ 0x7465646279746573ull;
}

#define SIPROUND                                                                                                      \
    do {                                                                                                              \
        v0_ += v1_; v1_ = rotl(v1_, 13); v1_ ^= v0_; v0_ = rotl(v0_, 32);                                             \
        v2_ += v3_; v3_ = rotl(v3_, 16); v3_ ^= v2_;                                                                  \
        v0_ += v3_; v3_ = rotl(v3_, 21); v3_ ^= v0_;                                                                  \
        v2_ += v1_; v1_ = rotl(v1_, 17); v1_ ^= v2_; v2_ = rotl(v2_, 32);                                             \
    } while (0)

void SipHash::compress(uint64_t m)
{
    v3_ ^= m;
    SIPROUND;
    SIPROUND;
    v0_ ^= m;
}

void SipHash::update(const void *data, size_t len)
{
    const uint8_t *p = static_cast<const uint8_t *>(data);
    total_ += len;

    while (ntail_ != 0 && len != 0) {   // finish a partial word first
        tail_ |= (uint64_t) *p++ << (8 * ntail_);
        len--;
        if (++ntail_ == 8) {
            compress(tail_);
            tail_ = 0;
            ntail_ = 0;
        }
    }
    for (; len >= 8; p += 8, len -= 8) {
        compress(load_le64(p));
    }
    for (; len != 0; len--) {
        tail_ |= (uint64_t) *p++ << (8 * ntail_++);
    }
}

uint64_t SipHash::finish()
{
    compress(tail_ | (total_ << 56));
    v2_ ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0_ ^ v1_ ^ v2_ ^ v3_;
}

}  // namespace rl
