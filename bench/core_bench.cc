// Core micro-benchmarks (Google Benchmark): each algorithm's decision, the
// key table's lookup+update at 1K, 1M and 10M keys, the key hash, and the
// whole request path of one rule.  Every benchmark also counts heap
// allocations in its timed loop (allocs_per_op): the request path has none.
//
//   build/cmake/core_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/transition.h"
#include "ratelimit.h"
#include "table/table.h"

// ---- allocation counting -----------------------------------------------------

static std::atomic<uint64_t> g_allocs{0};

extern "C" void *__libc_malloc(size_t);
extern "C" void *__libc_calloc(size_t, size_t);
extern "C" void *__libc_realloc(void *, size_t);
extern "C" void __libc_free(void *);

extern "C" void *malloc(size_t n)
{
    g_allocs.fetch_add(1, std::memory_order_relaxed);
    return __libc_malloc(n);
}
extern "C" void *calloc(size_t a, size_t b)
{
    g_allocs.fetch_add(1, std::memory_order_relaxed);
    return __libc_calloc(a, b);
}
extern "C" void *realloc(void *p, size_t n)
{
    g_allocs.fetch_add(1, std::memory_order_relaxed);
    return __libc_realloc(p, n);
}
extern "C" void free(void *p)
{
    __libc_free(p);
}

void *operator new(size_t n)
{
    void *p = malloc(n);
    if (p == nullptr)
        throw std::bad_alloc();
    return p;
}
void *operator new[](size_t n)
{
    return operator new(n);
}
void operator delete(void *p) noexcept
{
    free(p);
}
void operator delete[](void *p) noexcept
{
    free(p);
}
void operator delete(void *p, size_t) noexcept
{
    free(p);
}
void operator delete[](void *p, size_t) noexcept
{
    free(p);
}

namespace {

// Allocations made by the code between construction and report().
struct AllocCounter {
    uint64_t start = g_allocs.load();
    void report(benchmark::State &state)
    {
        state.counters["allocs_per_op"] =
            benchmark::Counter((double) (g_allocs.load() - start) / (double) std::max<int64_t>(state.iterations(), 1));
    }
};

// A rule, its name in rooms that live as long as the benchmarks.
rl_rule_t rule_of(const char *text)
{
    static std::deque<std::array<char, RL_NAME_MAX>> names;
    names.emplace_back();
    rl_rule_t r;
    char err[RL_ERR_MAX];
    if (rl_rule_parse(&r, names.back().data(), text, err, sizeof(err)) != RL_OK) {
        std::fprintf(stderr, "%s: %s\n", text, err);
        std::abort();
    }
    return r;
}

void *zone(size_t size)
{
    void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        std::abort();
    return p;
}

const int64_t kT0 = 1767225600000;

// ---- one decision -----------------------------------------------------------------

// Limits high enough that nearly every decision admits and changes the
// state (a denial is cheaper: nothing is written).  Time advances 1 ms each.
const char *const kRules[] = {
    "algorithm=gcra limit=1000000 period=1s",         "algorithm=token_bucket limit=1000000 period=1s",
    "algorithm=fixed_window limit=1000000 period=1s", "algorithm=sliding_window limit=1000000 period=1s",
    "algorithm=sliding_log limit=100 period=10ms",    "algorithm=leaky_bucket limit=1000000 period=1s",
    "algorithm=quota limit=1000000000 reset=daily",
};

void BM_Decision(benchmark::State &state)
{
    const rl_rule_t rule = rule_of(kRules[state.range(0)]);
    std::vector<uint8_t> buf(rl_state_size(&rule), 0);
    rl::State s{};
    s.blob = rl::blob_size(rule) ? buf.data() + sizeof(rl_state_t) : nullptr;
    int64_t now = kT0;
    uint64_t allowed = 0;
    AllocCounter allocs;
    for (auto _ : state) {
        // as rl_check does: a head-only state is decided on a copy
        rl::State copy = s;
        rl_decision_t d = rl::transition(rule, copy, now++, 1, true);
        s.head = copy.head;
        allowed += d.allowed;
        benchmark::DoNotOptimize(d);
    }
    allocs.report(state);
    state.counters["allowed"] = benchmark::Counter((double) allowed / (double) state.iterations());
    state.SetLabel(kRules[state.range(0)]);
}
BENCHMARK(BM_Decision)->DenseRange(0, 6);

// ---- the key table ----------------------------------------------------------------

// A table holding `keys` keys at about 70% of its slots.
struct Filled {
    size_t size;
    void *mem;
    rl::Table *table;
    std::vector<uint64_t> tags;

    explicit Filled(size_t keys)
    {
        size = (size_t) ((double) keys / 0.7 / 3 * 64) + rl_table_min_size();
        size = (size + 4095) & ~size_t{4095};
        mem = zone(size);
        char err[RL_ERR_MAX];
        if (rl_table_init(mem, size, nullptr, 0, nullptr, err, sizeof(err)) != RL_OK)
            std::abort();
        table = rl::Table::at(mem);
        tags.resize(keys);
        for (uint64_t i = 0; i < keys; i++) {
            tags[i] = table->tag(1, &i, sizeof(i));
            table->store(tags[i], {kT0 + 1000, 1}, rl::Debt{1, false}, kT0);
        }
    }
    ~Filled() { munmap(mem, size); }
};

void BM_TableLookupUpdate(benchmark::State &state)
{
    Filled f((size_t) state.range(0));
    std::mt19937_64 rng(1);
    std::vector<uint32_t> order(1 << 20);
    for (uint32_t &o : order)
        o = (uint32_t) (rng() % f.tags.size());
    size_t i = 0;
    AllocCounter allocs;
    for (auto _ : state) {
        const uint64_t tag = f.tags[order[i++ & (order.size() - 1)]];
        rl::State s;
        f.table->find(tag, &s);
        s.head.t++;
        f.table->store(tag, s.head, rl::Debt{1, false}, kT0);
    }
    allocs.report(state);
    state.counters["live_evictions"] = (double) f.table->layout().counts.live_evictions;
}
BENCHMARK(BM_TableLookupUpdate)->Arg(1000)->Arg(1000000)->Arg(10000000);

void BM_SipHashKey(benchmark::State &state)
{
    Filled f(16);
    std::string key((size_t) state.range(0), 'k');
    AllocCounter allocs;
    for (auto _ : state) {
        key[0]++;
        benchmark::DoNotOptimize(f.table->tag(0x1234, key.data(), key.size()));
    }
    allocs.report(state);
}
BENCHMARK(BM_SipHashKey)->Arg(4)->Arg(40);

// The core's part of a request: hash the key, decide, commit (no lock).
void BM_CheckOneRule(benchmark::State &state)
{
    const size_t keys = (size_t) state.range(0);
    Filled f(keys);
    const rl_rule_t rule = rule_of("limit=1000000 period=1s");
    std::mt19937_64 rng(2);
    std::vector<uint64_t> order(1 << 20);
    for (uint64_t &o : order)
        o = rng() % keys;
    rl_check_t c{};
    c.table = f.mem;
    c.rule = &rule;
    c.identity = 1;
    c.key_len = sizeof(uint64_t);
    c.cost = 1;
    int64_t now = kT0;
    size_t i = 0;
    AllocCounter allocs;
    for (auto _ : state) {
        c.key = &order[i++ & (order.size() - 1)];
        rl_request_t rq{};
        rq.checks = &c;
        rq.n = 1;
        rl_request_hash(&rq);
        benchmark::DoNotOptimize(rl_decide(&rq, now++));
    }
    allocs.report(state);
}
BENCHMARK(BM_CheckOneRule)->Arg(1000)->Arg(1000000);

}  // namespace

BENCHMARK_MAIN();
