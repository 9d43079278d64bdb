// Two processes on one zone, as two nginx workers: each hashes its key
// outside the lock, then locks the zone, decides and commits one GCRA rule,
// and unlocks.  The lock is an atomic compare-and-swap word in the shared
// mapping that spins and then yields, as nginx's ngx_shmtx does without
// semaphores.  Both processes do nothing but decide: the worst case; in
// nginx a decision is about 1% of a request's time.  Workloads: every process on the same key, and each
// on random keys among 1M.  Prints ns per decision per process and the
// total rate of 2 processes against 1.
//
//   build/cmake/contention_bench [iterations per process, default 2000000]
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "ratelimit.h"

namespace {

const int64_t kT0 = 1767225600000;

struct Shared {
    std::atomic<uint64_t> lock;
    std::atomic<int> ready;
    double ns[2];
};

// As ngx_shmtx_lock without semaphores: try, then spin in doubling rounds
// of pauses (up to 2048) trying again after each, then yield.
bool try_lock(std::atomic<uint64_t> &l, uint64_t me)
{
    uint64_t free = 0;
    return l.load(std::memory_order_relaxed) == 0 && l.compare_exchange_strong(free, me, std::memory_order_acquire);
}

void lock(std::atomic<uint64_t> &l, uint64_t me)
{
    for (;;) {
        if (try_lock(l, me)) {
            return;
        }
        for (int n = 1; n < 2048; n <<= 1) {
            for (int i = 0; i < n; i++) {
                __builtin_ia32_pause();
            }
            if (try_lock(l, me)) {
                return;
            }
        }
        sched_yield();
    }
}

void unlock(std::atomic<uint64_t> &l)
{
    l.store(0, std::memory_order_release);
}

// Runs `procs` processes (pinned to CPUs 0 and 1) for `iters` decisions
// each; returns the mean ns per decision per process.
double run(void *table, Shared *sh, int procs, bool same_key, uint64_t iters)
{
    static rl_rule_t rule;
    static char name[RL_NAME_MAX];
    char err[RL_ERR_MAX];
    rl_rule_parse(&rule, name, "limit=1000000000 period=1s burst=1000000000", err, sizeof(err));
    sh->ready = 0;

    for (int p = 0; p < procs; p++) {
        if (fork() == 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(p, &set);
            sched_setaffinity(0, sizeof(set), &set);
            std::mt19937_64 rng(p + 1);
            std::vector<uint64_t> keys(1 << 16);
            for (uint64_t &k : keys)
                k = same_key ? 42 : rng() % 1000000;
            rl_check_t c{};
            c.table = table;
            c.rule = &rule;
            c.identity = 1;
            c.key_len = sizeof(uint64_t);
            c.cost = 1;
            const uint64_t me = (uint64_t) getpid();
            sh->ready++;
            while (sh->ready.load() < procs) {
            }
            const auto start = std::chrono::steady_clock::now();
            for (uint64_t i = 0; i < iters; i++) {
                c.key = &keys[i & (keys.size() - 1)];
                rl_request_t rq{};
                rq.checks = &c;
                rq.n = 1;
                rl_request_hash(&rq);
                lock(sh->lock, me);
                rl_decide(&rq, kT0 + (int64_t) (i / 1000));
                unlock(sh->lock);
            }
            const auto took = std::chrono::steady_clock::now() - start;
            sh->ns[p] = (double) std::chrono::duration_cast<std::chrono::nanoseconds>(took).count() / (double) iters;
            _exit(0);
        }
    }
    for (int p = 0; p < procs; p++) {
        wait(nullptr);
    }
    return procs == 1 ? sh->ns[0] : (sh->ns[0] + sh->ns[1]) / 2;
}

}  // namespace

int main(int argc, char **argv)
{
    const uint64_t iters = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 2000000;
    const size_t size = 64u << 20;
    void *table = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    Shared *sh =
        static_cast<Shared *>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    char err[RL_ERR_MAX];
    if (table == MAP_FAILED || sh == MAP_FAILED ||
        rl_table_init(table, size, nullptr, 0, nullptr, err, sizeof(err)) != RL_OK) {
        std::fprintf(stderr, "contention_bench: no zone: %s\n", err);
        return 1;
    }

    // the 1M keys exist before the distinct-key runs are timed
    run(table, sh, 1, false, 4000000);

    std::printf("contention: %llu decisions a process, one GCRA rule, a 64 MB zone, CPUs 0 and 1\n",
                (unsigned long long) iters);
    std::printf("  %-22s %14s %14s %16s %10s\n", "workload", "1 proc ns/op", "2 procs ns/op", "2 procs total/s",
                "2 vs 1");
    for (bool same : {true, false}) {
        const double one = run(table, sh, 1, same, iters);
        const double two = run(table, sh, 2, same, iters);
        std::printf("  %-22s %14.1f %14.1f %16.0f %9.2fx\n", same ? "same key" : "1M random keys", one, two, 2e9 / two,
                    (2e9 / two) / (1e9 / one));
    }
    return 0;
}
