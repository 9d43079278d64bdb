// SHA-256 for the glue (rl_sha256): the same digest as Redis keys' names.
#include "util/sha256.h"

#include "ratelimit.h"

extern "C" {

void rl_sha256(const void *data, size_t len, uint8_t out[32])
{
    rl::Sha256 h;
    h.update(data, len);
    h.finish(out);
}

}  // extern "C"
