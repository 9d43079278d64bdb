// A zone's state file (ratelimit_state.h) at a million keys: the time to
// write it (a chunk of 1024 buckets at a time, as worker 0 and the master
// do, and the longest chunk: how long the zone's lock is held at once),
// its bytes a key, and the time to read it back into a fresh zone (what a
// start adds).  In memory: the disk's own time is not in these figures.
// ./build.sh bench state.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ratelimit.h"
#include "ratelimit_state.h"

namespace {

const int64_t kNow = 1767225600000;

double ms_since(std::chrono::steady_clock::time_point t)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

struct Zone {
    void *mem;
    explicit Zone(size_t size, const std::vector<uint32_t> &blocks)
    {
        mem = std::aligned_alloc(64, size);
        std::memset(mem, 0, size);
        char err[RL_ERR_MAX];
        if (rl_table_init(mem, size, blocks.data(), blocks.size(), nullptr, err, sizeof(err)) != RL_OK) {
            std::fprintf(stderr, "%s\n", err);
            std::exit(1);
        }
    }
    ~Zone() { std::free(mem); }
};

void run(const char *text, size_t size, uint64_t nkeys)
{
    rl_rule_t rule;
    char err[RL_ERR_MAX], name[RL_NAME_MAX];
    if (rl_rule_parse(&rule, name, text, err, sizeof(err)) != RL_OK) {
        std::fprintf(stderr, "%s\n", err);
        std::exit(1);
    }
    std::vector<uint32_t> blocks;
    if (rl_rule_block_size(&rule) > 0) {
        blocks.push_back(rl_rule_block_size(&rule));
    }
    rl_state_rule_t named{};
    named.identity = rl_rule_identity(&rule, "$k", 2);
    named.algorithm = rule.algorithm;
    named.rule = &rule;
    std::snprintf(named.name, sizeof(named.name), "%s", rule.name);

    Zone z(size, blocks);
    for (uint64_t k = 0; k < nkeys; k++) {
        const std::string key = "client-" + std::to_string(k);
        rl_check_t c{};
        c.table = z.mem;
        c.rule = &rule;
        c.identity = named.identity;
        c.key = key.data();
        c.key_len = key.size();
        c.cost = 1;
        rl_request_t rq{};
        rq.checks = &c;
        rq.n = 1;
        rl_request_hash(&rq);
        (void) rl_decide(&rq, kNow);
    }
    rl_table_stats_t st;
    rl_table_get_stats(z.mem, &st);

    std::vector<uint8_t> chunk(RL_STATE_CHUNK_MIN), file;
    file.reserve(nkeys * 32);
    rl_state_write_t w;
    double longest = 0;
    const auto t0 = std::chrono::steady_clock::now();
    rl_state_write_begin(&w, &named, 1, kNow + 1);
    size_t n;
    int more;
    do {
        const auto c0 = std::chrono::steady_clock::now();
        more = rl_state_write_next(&w, z.mem, chunk.data(), chunk.size(), 1024, &n);
        longest = std::max(longest, ms_since(c0));
        file.insert(file.end(), chunk.begin(), chunk.begin() + (long) n);
    } while (more);
    const double write_ms = ms_since(t0);

    Zone y(size, blocks);
    rl_state_report_t rep;
    const auto t1 = std::chrono::steady_clock::now();
    if (rl_state_restore(y.mem, file.data(), file.size(), &named, 1, kNow + 2, &rep, err, sizeof(err)) != RL_OK) {
        std::fprintf(stderr, "restore: %s\n", err);
        std::exit(1);
    }
    const double read_ms = ms_since(t1);
    std::printf("| %s | %zu MB | %llu | %.0f ms | %.2f ms | %.0f ms | %.1f |\n", text, size >> 20,
                (unsigned long long) w.keys, write_ms, longest, read_ms, (double) file.size() / (double) w.keys);
    if (rep.restored != w.keys) {
        std::fprintf(stderr, "restored %llu of %llu keys\n", (unsigned long long) rep.restored,
                     (unsigned long long) w.keys);
    }
}

}  // namespace

int main()
{
    std::printf("| rule | zone | keys written | write | longest chunk (lock held) | read | bytes a key |\n");
    std::printf("|------|------|--------------|-------|---------------------------|------|-------------|\n");
    run("algorithm=gcra limit=10 period=1m name=g", 32u << 20, 1000000);
    run("algorithm=quota limit=100 reset=daily name=q", 32u << 20, 1000000);
    run("algorithm=sliding_window limit=100 period=1m name=w", 256u << 20, 1000000);
    return 0;
}
