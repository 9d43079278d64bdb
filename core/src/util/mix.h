// 64-bit finalizers: bijections of a word that spread every input bit over
// every output bit.  Not keyed: they mix what is a keyed hash already (a
// tag, SipHash's output) or what no attacker chooses.
#pragma once

#include <cstdint>

namespace rl {

// splitmix64's finalizer (Steele, Lea and Flood, "Fast splittable
// pseudorandom number generators", 2014).
inline uint64_t splitmix64_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// MurmurHash3's fmix64 (Appleby).
inline uint64_t fmix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

}  // namespace rl
