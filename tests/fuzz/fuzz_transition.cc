// libFuzzer target: every algorithm's transition, on random sequences of
// requests (times that jump forward and back, costs up to past capacity).
// After each decision:
//   - a denial never changes the state, and has a Retry-After > 0;
//   - an admission has none; only leaky_bucket delays, never past max_delay;
//   - remaining never exceeds the policy's quota, which is the capacity; a
//     cost past it is "never";
//   - the IETF t (available_ms) of a denial is its Retry-After (a "never":
//     the full budget's time), of an admission never after its reset;
//   - the admitted units never exceed what the algorithm allows in a window
//     (checked against the request times, see the bounds below);
//   - a state of any bytes (a process died writing it) is read safely and in
//     bounded time, and the bounds hold again from there.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "algorithms/algorithm.h"
#include "ratelimit.h"

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            std::fprintf(stderr, "fuzz_transition: %s failed at line %d (%s)\n", #cond, __LINE__, text);               \
            std::abort();                                                                                              \
        }                                                                                                              \
    } while (0)

namespace {

struct Input {
    const uint8_t *p;
    size_t n;
    uint32_t byte() { return n ? (n--, *p++) : 0; }
    uint32_t u16() { return byte() | byte() << 8; }
};

struct Admitted {
    int64_t now;     // the request's time
    int64_t logged;  // the running maximum of admitted times (sliding_log)
    uint64_t units;
};

const char *const kAlgorithms[] = {"gcra",        "token_bucket", "fixed_window", "sliding_window",
                                   "sliding_log", "leaky_bucket", "quota"};
const char *const kResets[] = {"daily", "weekly", "monthly"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Input in{data, size};
    const uint32_t a = in.byte() % 7;
    const uint32_t limit = 1 + in.byte() % 200;
    const uint32_t period = 1 + in.u16() % 20000;
    const uint32_t burst = 1 + in.byte() % 250;
    const uint32_t buckets = 1 + in.byte() % 20;
    const uint32_t max_delay = in.u16() % 30000;
    const uint32_t reset = in.byte() % 3;
    const int offset = (int) (in.u16() % 1681) - 840;
    const bool first = in.byte() & 1;

    char text[256];
    int len = std::snprintf(text, sizeof(text), "algorithm=%s limit=%u", kAlgorithms[a], limit);
    if (a == RL_QUOTA) {
        len += std::snprintf(text + len, sizeof(text) - len, " reset=%s utc_offset=%c%02d:%02d", kResets[reset],
                             offset < 0 ? '-' : '+', std::abs(offset) / 60, std::abs(offset) % 60);
    } else {
        len += std::snprintf(text + len, sizeof(text) - len, " period=%ums", period);
    }
    if (a == RL_GCRA || a == RL_TOKEN_BUCKET) {
        len += std::snprintf(text + len, sizeof(text) - len, " burst=%u", burst);
    }
    if (a == RL_SLIDING_WINDOW) {
        len += std::snprintf(text + len, sizeof(text) - len, " buckets=%u", buckets);
    }
    if (a == RL_LEAKY_BUCKET) {
        // the burst byte, unused here, gives delay= (requests served at once)
        len += std::snprintf(text + len, sizeof(text) - len, " max_delay=%ums delay=%u", max_delay, (burst - 1) % 5);
    }
    if (a == RL_FIXED_WINDOW && first) {
        std::snprintf(text + len, sizeof(text) - len, " align=first");
    }

    rl_rule_t r;
    char err[RL_ERR_MAX], name[RL_NAME_MAX];
    CHECK(rl_rule_parse(&r, name, text, err, sizeof(err)) == RL_OK);

    const bool bucket = a == RL_GCRA || a == RL_TOKEN_BUCKET;
    const uint64_t capacity = bucket ? r.burst : r.limit;
    // the shortest window: a quota's calendar period is at least a day
    const int64_t rule_reset = rl::own_value(r, "reset"), rule_max_delay = rl::own_value(r, "max_delay");
    const uint64_t delay = (uint64_t) rl::own_value(r, "delay");
    const int64_t window = a == RL_QUOTA ? (int64_t) 86400000 * (rule_reset == RL_RESET_MONTHLY  ? 28
                                                                 : rule_reset == RL_RESET_WEEKLY ? 7
                                                                                                 : 1)
                                         : r.period_ms;
    const uint64_t max_remaining =
        a == RL_LEAKY_BUCKET ? delay + (uint64_t) rule_max_delay * r.limit / r.period_ms + 1 : capacity;

    std::vector<uint8_t> state(rl_state_size(&r), 0), before;
    std::vector<Admitted> log;
    int64_t now = 1767225600000 + (int64_t) in.u16() * 1000;
    int64_t logged = INT64_MIN;

    while (in.n >= 3) {
        const uint32_t step = in.byte();
        if (step == 239) {
            // the state a process left half written (the table does not save
            // a key's own state): anything, and the bounds start over
            for (uint8_t &b : state) {
                b = (uint8_t) in.byte();
            }
            log.clear();
            logged = INT64_MIN;
            continue;
        }
        int64_t dt = (int64_t) (step % 64) * (1 + r.period_ms / 64);
        if (step >= 250) {
            dt = -(int64_t) (step - 249) * r.period_ms;  // the clock steps back
        } else if (step >= 240) {
            dt = (int64_t) (step - 239) * window;  // or far forward
        }
        // the clock never reads before the epoch (nginx's and Redis's are
        // milliseconds since 1970): a step back stops there
        now = now + dt < 0 ? 0 : now + dt;
        const uint64_t cost = in.u16() % (capacity + 3);

        before = state;
        rl_decision_t d;
        const int changed = rl_transition(&r, state.data(), now, cost, 1, &d);

        CHECK(d.reset_ms >= 0);
        CHECK(d.quota == max_remaining && d.remaining <= d.quota);
        CHECK((bool) d.never == (cost > capacity));
        if (!d.allowed) {
            CHECK(changed == 0 && before == state);
            CHECK(d.retry_after_ms > 0 && d.delay_ms == 0);
            CHECK(d.available_ms == (d.never ? d.reset_ms : d.retry_after_ms));
            continue;
        }
        CHECK(d.retry_after_ms == 0);
        CHECK(d.available_ms >= 0 && d.available_ms <= d.reset_ms);
        CHECK(changed == (cost > 0));
        CHECK(d.delay_ms >= 0 && (a == RL_LEAKY_BUCKET || d.delay_ms == 0));
        CHECK(d.delay_ms <= rule_max_delay || a != RL_LEAKY_BUCKET);
        if (cost == 0) {
            continue;
        }
        logged = now > logged ? now : logged;
        log.push_back(Admitted{now, logged, cost});

        // Bounds, for every run of admissions j..i (i the newest).  M is the
        // latest time seen so far; now_j the time of the first of the run.
        const Admitted &last = log.back();
        uint64_t units = 0;
        int64_t M = INT64_MIN;
        for (const Admitted &e : log) {
            M = e.now > M ? e.now : M;
        }
        for (size_t j = log.size(); j-- > 0;) {
            units += log[j].units;
            const int64_t span = M - log[j].now;
            switch (a) {
            case RL_GCRA:
            case RL_TOKEN_BUCKET:
                // TAT only grows, from at least now_j, by T a unit, to at most now + tau
                if (span >= 0) {
                    CHECK(units * (uint64_t) r.period_ms <=
                          (uint64_t) span * r.limit + (uint64_t) r.burst * r.period_ms);
                }
                break;
            case RL_LEAKY_BUCKET:
                // the drain instant likewise, to at most now + max_delay +
                // (delay + cost) T
                if (span >= 0) {
                    CHECK(units * (uint64_t) r.period_ms <=
                          ((uint64_t) span + (uint64_t) max_delay) * r.limit + (last.units + delay) * r.period_ms);
                }
                break;
            case RL_SLIDING_LOG:
                // exact: units logged in (x - W, x] never exceed the limit
                if (log[j].logged > last.logged - r.period_ms) {
                    CHECK(units <= r.limit);
                }
                break;
            default:
                // windows (fixed, sliding, quota): less than a window of
                // time sees at most two windows' worth
                if (span < window) {
                    CHECK(units <= 2 * (uint64_t) r.limit);
                }
                break;
            }
        }
        if (log.size() > 400) {
            log.erase(log.begin(), log.begin() + 200);
        }
    }
    return 0;
}
