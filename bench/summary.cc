// The eviction summary's cost and its side effect, measured on the core:
//   - how much of a zone it takes, and how many cells that is;
//   - the share of fresh keys refused on their first request after E keys
//     were evicted while owing their whole budget (the summary cannot tell a
//     fresh key from one of them when it shares all its cells), against E;
//   - the same after a flood of 100x capacity keys each admitted once (they
//     owe one request each, which the summary forgets: none).
// README's sizing advice comes from this output (./build.sh bench summary).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ratelimit.h"
#include "table/table.h"

namespace {

const int64_t kNow = 1767225600000;

struct Zone {
    void *mem;
    explicit Zone(size_t size)
    {
        mem = std::aligned_alloc(64, size);
        std::memset(mem, 0, size);  // rl_table_init takes zeroed memory
        char err[RL_ERR_MAX];
        if (rl_table_init(mem, size, nullptr, 0, nullptr, err, sizeof(err)) != RL_OK) {
            std::fprintf(stderr, "%s\n", err);
            std::exit(1);
        }
    }
    ~Zone() { std::free(mem); }
    rl_table_stats_t stats() const
    {
        rl_table_stats_t st;
        rl_table_get_stats(mem, &st);
        return st;
    }
};

bool hit(Zone &z, const rl_rule_t &rule, const std::string &key, int64_t now)
{
    rl_check_t c{};
    c.table = z.mem;
    c.rule = &rule;
    c.identity = 1;
    c.key = key.data();
    c.key_len = key.size();
    c.cost = 1;
    rl_request_t rq{};
    rq.checks = &c;
    rq.n = 1;
    rl_request_hash(&rq);
    return rl_decide(&rq, now) != RL_VERDICT_REJECTED;
}

uint64_t tag_of(Zone &z, const std::string &key)
{
    return rl::Table::at(z.mem)->tag(1, key.data(), key.size());
}

// Fresh keys refused on their first request, of n probed (peeks: a
// refusal changes nothing, and admitted probes are not kept).
double refused_share(Zone &z, const rl_rule_t &rule, int n, int64_t now)
{
    int refused = 0;
    for (int i = 0; i < n; i++) {
        const uint64_t tag = tag_of(z, "fresh" + std::to_string(i));
        const rl::State s = rl::restore(rule, rl::Table::at(z.mem)->owed(tag, now), now);
        rl_decision_t d;
        rl_state_t head = s.head;
        rl_transition(&rule, &head, now, 1, 0, &d);
        refused += !d.allowed;
    }
    return (double) refused / n;
}

}  // namespace

int main()
{
    rl_rule_t rule;
    char err[RL_ERR_MAX], name[RL_NAME_MAX];
    rl_rule_parse(&rule, name, "limit=10 period=1h", err, sizeof(err));

    std::printf("summary: its share of a zone\n");
    std::printf("  %-6s %12s %14s %10s\n", "zone", "key slots", "summary bytes", "cells");
    for (size_t size : {(size_t) 32 << 10, (size_t) 1 << 20, (size_t) 64 << 20}) {
        Zone z(size);
        const rl_table_stats_t st = z.stats();
        std::printf("  %-6s %12llu %14llu %10llu\n",
                    size == 32 << 10  ? "32k"
                    : size == 1 << 20 ? "1m"
                                      : "64m",
                    (unsigned long long) st.capacity, (unsigned long long) st.summary_bytes,
                    (unsigned long long) st.summary_bytes / 8);
    }

    std::printf("summary: fresh keys refused on their first request after E keys owing their whole budget "
                "were evicted (1 MB zone, %s)\n",
                "gcra limit=10 period=1h");
    std::printf("  %-22s %10s %10s %16s\n", "E", "E / cells", "measured", "(1-e^(-3E/m))^3");
    for (double r : {0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0}) {
        Zone z(1 << 20);
        const uint64_t cells = z.stats().summary_bytes / 8;
        const uint64_t e = (uint64_t) (r * (double) cells);
        for (uint64_t i = 0; i < e; i++) {
            const std::string key = "spent" + std::to_string(i);
            while (hit(z, rule, key, kNow)) {
            }
            rl::Table::at(z.mem)->evict(tag_of(z, key), kNow);
        }
        const double theory = std::pow(1 - std::exp(-3 * r), 3);
        std::printf("  %-22llu %10.2f %9.2f%% %15.2f%%\n", (unsigned long long) e, r,
                    100 * refused_share(z, rule, 100000, kNow + 1), 100 * theory);
    }

    {
        Zone z(1 << 20);
        const uint64_t flood = 100 * z.stats().capacity;
        for (uint64_t i = 0; i < flood; i++) {
            hit(z, rule, "flood" + std::to_string(i), kNow + (int64_t) (i / 1000));
        }
        std::printf("summary: after %llu keys (100x capacity) each admitted once: %.2f%% of fresh keys refused, "
                    "%llu live evictions\n",
                    (unsigned long long) flood, 100 * refused_share(z, rule, 100000, kNow + 200000),
                    (unsigned long long) z.stats().live_evictions);
    }
    return 0;
}
