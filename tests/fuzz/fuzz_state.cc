// libFuzzer target: a zone's state file (ratelimit_state.h), hostile.  The
// input's first byte chooses whether its last word is made the right
// checksum (so that the fuzzer reaches the records, not only the checksum),
// the rest is the file.  A file is restored or refused, never read past;
// a table restored is valid, decides requests of every rule, and writes a
// file that reads back.  Each rule is given, so that what a restored key may
// owe is bounded by them (every block a rule's way reads, made up).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ratelimit.h"
#include "ratelimit_state.h"
#include "table/table.h"

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            std::fprintf(stderr, "fuzz_state: %s failed at line %d\n", #cond, __LINE__);                               \
            std::abort();                                                                                              \
        }                                                                                                              \
    } while (0)

namespace {

const char *const kRules[] = {
    "algorithm=gcra limit=3 period=1h name=g ban=1h",
    "algorithm=sliding_log limit=3 period=1h name=l",
    "algorithm=sliding_window limit=3 period=1h name=w",
    "algorithm=quota limit=3 reset=daily name=q",
    "algorithm=concurrency limit=2 name=c",
};
constexpr size_t kNRules = sizeof(kRules) / sizeof(kRules[0]);
constexpr size_t kSize = 64 * 1024;
constexpr int64_t kNow = 1767225600000;

struct Zone {
    rl_rule_t rules[kNRules];
    char names[kNRules][RL_NAME_MAX];
    uint64_t identity[kNRules];
    rl_state_rule_t named[kNRules];
    std::vector<uint32_t> blocks;
    void *mem;

    Zone()
    {
        char err[RL_ERR_MAX];
        for (size_t i = 0; i < kNRules; i++) {
            CHECK(rl_rule_parse(&rules[i], names[i], kRules[i], err, sizeof(err)) == RL_OK);
            identity[i] = rl_rule_identity(&rules[i], "$k", 2);
            named[i] = rl_state_rule_t{};
            named[i].identity = identity[i];
            named[i].algorithm = rules[i].algorithm;
            named[i].rule = &rules[i];
            std::snprintf(named[i].name, sizeof(named[i].name), "%s", rules[i].name);
            if (rl_rule_block_size(&rules[i]) > 0) {
                blocks.push_back(rl_rule_block_size(&rules[i]));
            }
        }
        mem = std::aligned_alloc(64, kSize);
        std::memset(mem, 0, kSize);
        CHECK(rl_table_init(mem, kSize, blocks.data(), blocks.size(), nullptr, err, sizeof(err)) == RL_OK);
    }
    ~Zone() { std::free(mem); }
};

std::vector<uint8_t> write_file(Zone &z)
{
    rl_state_write_t w;
    rl_state_write_begin(&w, z.named, kNRules, kNow);
    std::vector<uint8_t> chunk(RL_STATE_CHUNK_MIN), file;
    size_t n;
    int more;
    do {
        more = rl_state_write_next(&w, z.mem, chunk.data(), chunk.size(), 7, &n);
        file.insert(file.end(), chunk.begin(), chunk.begin() + (long) n);
    } while (more);
    return file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) {
        return 0;
    }
    // a copy of exactly the file's bytes, so that a read past it is seen
    std::vector<uint8_t> file(data + 1, data + size);
    if ((data[0] & 1) && file.size() >= 8) {
        const uint64_t sum = rl_state_checksum(file.data(), file.size());
        std::memcpy(file.data() + file.size() / 8 * 8 - 8, &sum, 8);
    }
    Zone z;
    rl_state_report_t rep;
    char err[RL_ERR_MAX];
    const int rc = rl_state_restore(z.mem, file.data(), file.size(), z.named, kNRules, kNow, &rep, err, sizeof(err));
    CHECK(rc == RL_OK || rc == RL_ERROR);
    std::string why;
    CHECK(rl::Table::at(z.mem)->check(&why));
    if (rc != RL_OK) {
        CHECK(rl::Table::at(z.mem)->layout().counts.keys == 0);
        return 0;
    }
    CHECK(rep.restored + rep.expired + rep.no_block <= rep.keys);
    CHECK(std::memchr(rep.gone, 0, sizeof(rep.gone)) != nullptr);
    for (size_t i = 0; i < kNRules; i++) {
        for (const char *key : {"a", "b", "c"}) {
            rl_check_t c{};
            c.table = z.mem;
            c.rule = &z.rules[i];
            c.identity = z.identity[i];
            c.key = key;
            c.key_len = 1;
            c.cost = 1;
            rl_request_t rq{};
            rq.checks = &c;
            rq.n = 1;
            rl_request_hash(&rq);
            (void) rl_decide(&rq, kNow + 1);
        }
    }
    CHECK(rl::Table::at(z.mem)->check(&why));
    const std::vector<uint8_t> again = write_file(z);
    Zone y;
    CHECK(rl_state_restore(y.mem, again.data(), again.size(), y.named, kNRules, kNow, &rep, err, sizeof(err)) == RL_OK);
    return 0;
}
