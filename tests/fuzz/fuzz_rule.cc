// libFuzzer target: the rule parser.  Any text either fails with a message
// or gives a rule within every documented bound; parsing is deterministic,
// and a parsed rule's state can be created and decided on.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "ratelimit.h"

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            std::fprintf(stderr, "fuzz_rule: %s failed at line %d\n", #cond, __LINE__);                                \
            std::abort();                                                                                              \
        }                                                                                                              \
    } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const std::string text(reinterpret_cast<const char *>(data), size);
    rl_rule_t r;
    char err[RL_ERR_MAX], name[RL_NAME_MAX], again_name[RL_NAME_MAX];
    err[0] = '\0';

    if (rl_rule_parse(&r, name, text.c_str(), err, sizeof(err)) != RL_OK) {
        CHECK(err[0] != '\0');
        CHECK(std::strlen(err) < sizeof(err));
        return 0;
    }

    const bool bucket = r.algorithm == RL_GCRA || r.algorithm == RL_TOKEN_BUCKET;
    CHECK(r.algorithm < RL_ALGORITHM_COUNT);
    CHECK(r.limit >= 1 && r.limit <= RL_LIMIT_MAX);
    CHECK(r.period_ms >= 1 && r.period_ms <= RL_PERIOD_MAX_MS);
    CHECK(r.burst >= 1 && r.burst <= RL_LIMIT_MAX);
    CHECK(r.cost <= (bucket ? r.burst : r.limit));
    const int64_t buckets = rl::own_value(r, "buckets"), max_delay = rl::own_value(r, "max_delay"),
                  offset = rl::own_value(r, "utc_offset");
    CHECK(r.algorithm != RL_SLIDING_WINDOW || (buckets >= 1 && buckets <= RL_BUCKETS_MAX));
    CHECK(max_delay >= 0 && max_delay <= RL_PERIOD_MAX_MS);
    CHECK(offset >= -RL_UTC_OFFSET_MAX_MIN && offset <= RL_UTC_OFFSET_MAX_MIN);
    CHECK(std::memchr(r.name, '\0', RL_NAME_MAX) != nullptr && r.name[0] != '\0');
    if (r.algorithm == RL_SLIDING_LOG) {
        CHECK(r.limit <= RL_LOG_LIMIT_MAX && r.period_ms <= RL_LOG_PERIOD_MAX_MS);
    }

    rl_rule_t again;
    CHECK(rl_rule_parse(&again, again_name, text.c_str(), err, sizeof(err)) == RL_OK);
    CHECK(again.name == again_name && std::strcmp(r.name, again.name) == 0);
    again.name = r.name;  // each in its own room: the rest is the same
    CHECK(std::memcmp(&r, &again, sizeof(r)) == 0);
    (void) rl_rule_identity(&r, text.data(), text.size());

    // a key never seen, then a key spent: decisions never crash
    std::vector<uint8_t> state(rl_state_size(&r), 0);
    rl_decision_t d;
    for (uint64_t cost : {(uint64_t) r.cost, (uint64_t) 1, (uint64_t) r.limit, (uint64_t) r.limit + 1}) {
        rl_transition(&r, state.data(), 1767225600000, cost, 1, &d);
        CHECK(d.allowed ? d.retry_after_ms == 0 : d.retry_after_ms > 0);
    }
    return 0;
}
