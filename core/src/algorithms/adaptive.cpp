// Adaptive concurrency: at most L requests of a key in flight, as
// concurrency.cpp holds them (its slots, its max_wait queue), where L moves
// with the latency the upstream shows.  A key is usually one upstream
// (key=backend_a): every request to it passes through the key, so the
// requests in flight are the upstream's.
//
// The signal, at each request's end (rl_request_end): how long its upstream
// took (nginx's $upstream_response_time, or the request's time where no
// upstream ran), and the status it ended with.  502, 503 and 504 (nginx's
// answer to an upstream that failed or timed out) are drops, as AIMD counts
// them (Netflix concurrency-limits, AIMDLimit: the limit times a backoff
// ratio on a drop).  A request its client abandoned (499) says only that
// its upstream took at least that long: it counts when that is already
// slower than tolerated, and is ignored otherwise.
//
// The controller decides once an interval (interval=, and at least
// kMinSamples latencies; an interval with fewer waits for more, so that an
// empty one changes nothing).  Of the interval it takes the typical latency
// m, the geometric mean of its latencies (the exponential of the mean of
// their logarithms: a few slow outliers move it little), and the mean of
// the requests in flight n, by Little's law the sum of their latencies over
// the interval's length (L = lambda W).
//
// The baseline B is the upstream's latency without the queueing that our
// own concurrency causes, with n_B, the concurrency it was measured at:
//   * an interval at no more concurrency than n_B measures the upstream as
//     B was measured: B = m, whichever way it moved.  The upstream itself
//     got slower or faster; queueing we cause cannot be the reason, since
//     we send it no more than when B was taken.
//   * an interval at more concurrency with a typical latency as low as B
//     shows that concurrency to be free of queueing too: B = m, n_B = n.
//   * otherwise (more concurrency, slower) B stays.  So B never rises with
//     the load we put on the upstream (the ratchet Envoy's adaptive
//     concurrency filter has under sustained load, envoyproxy/envoy#11579,
//     and Gradient2's long-term average has), and follows the upstream's
//     own slowing down (its service time doubling) once the limit has come
//     down to n_B: a few intervals, with no probe pinned to a floor.
//
// The limit moves by the gradient g = tolerance x B / m (Envoy's and
// Gradient2's gradient, with a tolerance of queueing as Gradient2's):
//   * a drop in the interval: L x 0.9 (AIMD's backoff);
//   * g < 1 (the upstream queues more than tolerated): L x max(g, 1/2),
//     from the concurrency really used when the limit was not reached;
//   * g >= 1 and the limit was reached in the interval: L x min(g, 3/2),
//     at least L + 1.  A limit not reached stays: it is not the constraint
//     (a limit grown while unused would admit a burst far past what the
//     upstream was seen to serve).
// Always between min= and max (limit=).  With a queue of q requests at an
// upstream of W workers and service time S, the typical latency is about
// S + q S / W, so the limit settles where q is about (tolerance - 1) W:
// tolerance=1.25 lets about a quarter of W wait.
//
// State: concurrency's block (slots, holders, queue) and the controller
// after it, copied in and out (the block's offset keeps no alignment).  A
// key is kept in the table while idle (its baseline is what it learned).
#include <cmath>
#include <cstdio>
#include <cstring>

#include "algorithms/algorithm.h"
#include "util/error.h"
#include "util/out.h"

namespace rl {

namespace {

constexpr uint32_t kMinSamples = 16;  // latencies an interval needs
constexpr int64_t kStale = 20;        // intervals: one older, still short of them, starts over
constexpr uint32_t kDefaultTolerance = 120;
constexpr int64_t kDefaultIntervalMs = 500;
constexpr double kBackoff = 0.9;  // AIMD's, on a drop
constexpr double kMostDown = 0.5, kMostUp = 1.5;
constexpr double kBelow = 0.9;   // a concurrency clearly below B's
constexpr double kProbe = 0.75;  // a step down while the baseline is probed

struct Controller {
    uint32_t limit;     // L (0: a fresh key, at initial=)
    uint32_t bound;     // an admission took the last slot this interval
    uint32_t samples;   // this interval's latencies,
    uint32_t drops;     //   its drops (502, 503, 504)
    int64_t start;      //   and its start (0: none yet)
    double log_sum;     //   the sum of the logarithms of its latencies (ms),
    double busy_ms;     //   and of the latencies themselves
    double baseline;    // B (ms; 0: not measured yet)
    double baseline_n;  // the mean in flight B was measured at
    double recent;      // the last interval's typical latency (ms)
    double recent_n;    //   and its mean in flight
    uint32_t probing;   // B was taken (or raised) with the limit reached: it may hold queueing we cause
    uint32_t spare;
};

uint32_t initial_of(const rl_rule_t &rule)
{
    return rule.adapt_initial != 0 ? rule.adapt_initial : rule.limit;
}

size_t controller_at(const rl_rule_t &rule)
{
    return concurrency_blob_size(rule);
}

Controller load(const rl_rule_t &rule, const State &s)
{
    Controller c{};
    if (s.blob != nullptr) {
        std::memcpy(&c, s.blob + controller_at(rule), sizeof(c));
    }
    if (c.limit == 0 || c.limit > rule.limit) {
        c.limit = initial_of(rule);  // a fresh key, or one a dead process half wrote
    }
    return c;
}

void store(const rl_rule_t &rule, State &s, const Controller &c)
{
    if (s.blob != nullptr) {
        std::memcpy(s.blob + controller_at(rule), &c, sizeof(c));
    }
}

uint32_t clamp_limit(const rl_rule_t &rule, double l)
{
    const double lo = rule.adapt_min, hi = rule.limit;
    return (uint32_t) (l < lo ? lo : l > hi ? hi : l);
}

void start_interval(Controller &c, int64_t now)
{
    c.start = now;
    c.samples = c.drops = c.bound = 0;
    c.log_sum = c.busy_ms = 0;
}

double tolerance_of(const rl_rule_t &rule)
{
    return rule.tolerance / 100.0;
}

// The baseline, from an interval of typical latency m at mean concurrency n
// (bound: the limit was reached in it).  A baseline taken, or raised, while
// the limit held the requests back may hold queueing we cause: it is
// probed (probing), until a lower concurrency no longer lowers the latency.
void learn_baseline(Controller &c, double m, double n, bool bound, double tolerance)
{
    if (c.baseline <= 0) {
        c.baseline = m;  // the first
        c.baseline_n = n;
        c.probing = bound;
    } else if (n <= kBelow * c.baseline_n) {
        c.probing = bound ? c.probing || m > tolerance * c.baseline : 0;
        c.baseline = m;  // as B was measured, or with less in flight
        c.baseline_n = n;
    } else if (m <= c.baseline) {
        c.baseline = m;  // as fast with more in flight
        c.baseline_n = n;
    }
}

// Whether an interval at less concurrency than the one before showed less
// latency in proportion, as an upstream that queues does (by Little's law,
// its latency is the concurrency over its throughput, which stays): at
// least half of it.  One that did not shows an upstream that does not queue
// what we send it at that concurrency.
bool elastic(double m0, double n0, double m, double n)
{
    return m0 > 0 && n0 > 0 && (m0 - m) / m0 >= 0.5 * (n0 - n) / n0;
}

uint32_t lower(const rl_rule_t &rule, double from, double factor, double L)
{
    const double down = std::floor(from * factor);
    return clamp_limit(rule, down < L - 1 ? down : L - 1);
}

// The interval decided: the limit moved, the baseline learned.
void decide(const rl_rule_t &rule, Controller &c, int64_t now)
{
    const double elapsed = (double) (now - c.start > 0 ? now - c.start : 1);
    const double n = c.busy_ms / elapsed;
    const double L = c.limit;
    const double m0 = c.recent, n0 = c.recent_n;
    if (c.samples >= kMinSamples) {
        const double m = std::exp(c.log_sum / c.samples);
        learn_baseline(c, m, n, c.bound, tolerance_of(rule));
        if (c.probing && n < 0.95 * n0 && !elastic(m0, n0, m, n)) {
            c.probing = 0;  // no queueing of ours left in it
        }
        c.recent = m;
        c.recent_n = n;
    }
    if (c.drops > 0) {
        c.limit = lower(rule, L, kBackoff, L);
        return;
    }
    if (!c.bound) {
        return;  // the limit did not hold anything back: not the constraint
    }
    const double g = tolerance_of(rule) * c.baseline / c.recent;
    if (g < 1) {
        c.limit = lower(rule, L, g > kMostDown ? g : kMostDown, L);
    } else if (c.probing) {
        c.limit = lower(rule, L, kProbe, L);
    } else {
        const double up = std::floor(L * (g < kMostUp ? g : kMostUp));
        c.limit = clamp_limit(rule, up > L + 1 ? up : L + 1);
    }
}

bool overload(uint32_t status)
{
    return status == 502 || status == 503 || status == 504;
}

}  // namespace

uint32_t adaptive_open(const rl_rule_t &rule, const State &s)
{
    return load(rule, s).limit;
}

void adaptive_taken(const rl_rule_t &rule, State &s, uint32_t held)
{
    Controller c = load(rule, s);
    if (held >= c.limit && !c.bound) {
        c.bound = 1;
        store(rule, s, c);
    }
}

bool adaptive_ended(const rl_rule_t &rule, State &s, int64_t now, const Ended &e, Learned *learned)
{
    if (s.blob == nullptr) {
        return false;
    }
    Controller c = load(rule, s);
    if (c.start == 0 || now < c.start || now - c.start > kStale * rule.interval_ms) {
        start_interval(c, now);  // the first, a clock stepped back, or too old to say anything of now
    }
    const int64_t latency = e.latency_ms >= 0 ? e.latency_ms : (now > e.at ? now - e.at : 0);
    const double ms = latency > 0 ? (double) latency : 0.5;  // nginx counts whole ms: under one
    const bool abandoned = e.status == 499;
    if (overload(e.status)) {
        c.drops++;
    } else if (!abandoned || (c.baseline > 0 && ms > tolerance_of(rule) * c.baseline)) {
        c.samples++;
        c.log_sum += std::log(ms);
        c.busy_ms += ms;
    }
    bool decided = false;
    if (now - c.start >= rule.interval_ms && (c.samples >= kMinSamples || c.drops > 0)) {
        decide(rule, c, now);
        start_interval(c, now);
        decided = true;
    }
    store(rule, s, c);
    if (decided && learned != nullptr) {
        learned->limit = c.limit;
        learned->baseline_us = (uint32_t) std::fmin(c.baseline * 1000, 4e9);
        learned->recent_us = (uint32_t) std::fmin(c.recent * 1000, 4e9);
    }
    return decided;
}

namespace {

void adaptive_learned(const rl_rule_t &rule, const State &s, Learned *learned)
{
    const Controller c = load(rule, s);
    learned->limit = c.limit;
    learned->baseline_us = (uint32_t) std::fmin(c.baseline * 1000, 4e9);
    learned->recent_us = (uint32_t) std::fmin(c.recent * 1000, 4e9);
}

size_t adaptive_block(const rl_rule_t &rule)
{
    return concurrency_blob_size(rule) + sizeof(Controller);
}

// limit= is the most; min=, initial= within it; no period, cost or charge.
int adaptive_finish(rl_rule_t &rule, char *err, size_t errlen)
{
    if (rule.limit_var) {
        return fail(err, errlen,
                    "\"limit=\" of algorithm=adaptive is a number, not a $variable: the most requests in flight "
                    "its limit may reach, e.g. limit=100 (at most %u)",
                    RL_CONCURRENCY_MAX);
    }
    if (rule.given & P_PERIOD) {
        return fail(err, errlen,
                    "\"period=\" does not apply to algorithm=adaptive: it limits the requests of a key in flight "
                    "at once, not a rate (interval= says how often its limit moves)");
    }
    if ((rule.given & P_COST) || rule.charge) {
        return fail(err, errlen,
                    "\"%s=\" does not apply to algorithm=adaptive: each request holds one slot while it runs",
                    rule.charge ? "charge" : "cost");
    }
    if (rule.limit > RL_CONCURRENCY_MAX) {
        return fail(err, errlen,
                    "\"limit=%u\" is too large for algorithm=adaptive: a key holds at most %u requests in flight "
                    "(its state keeps who holds each)",
                    rule.limit, RL_CONCURRENCY_MAX);
    }
    if (!(rule.given & P_MIN)) {
        rule.adapt_min = 1;
    }
    if (rule.adapt_min > rule.limit) {
        return fail(err, errlen, "\"min=%u\" exceeds limit=%u: min= is the least limit, limit= the most",
                    rule.adapt_min, rule.limit);
    }
    if ((rule.given & P_INITIAL) && (rule.adapt_initial < rule.adapt_min || rule.adapt_initial > rule.limit)) {
        return fail(err, errlen, "\"initial=%u\" is outside min=%u and limit=%u: a new key's limit lies between",
                    rule.adapt_initial, rule.adapt_min, rule.limit);
    }
    if (!(rule.given & P_TOLERANCE)) {
        rule.tolerance = kDefaultTolerance;
    }
    if (!(rule.given & P_INTERVAL)) {
        rule.interval_ms = kDefaultIntervalMs;
    }
    return RL_OK;
}

void adaptive_tail(const rl_rule_t &, char *out, size_t len)
{
    std::snprintf(out, len, "%s", "adaptive");
}

void adaptive_fields(Out &o, const rl_rule_t &rule)
{
    o.field("min", (uint64_t) rule.adapt_min);
    o.field("initial", (uint64_t) initial_of(rule));
    o.field("tolerance_pct", (uint64_t) rule.tolerance);
    o.field("interval_ms", (uint64_t) rule.interval_ms);
}

}  // namespace

extern const Algorithm kAdaptive = {
    "adaptive",
    kSlots,
    P_MAX_WAIT | P_MIN | P_INITIAL | P_TOLERANCE | P_INTERVAL,
    adaptive_finish,
    adaptive_tail,
    adaptive_block,
    concurrency_policy,
    nullptr,
    nullptr,
    concurrency,
    nullptr,
    nullptr,
    "each request holds one slot while it runs",
    concurrency_refund,
    concurrency_owed,
    concurrency_restore,
    nullptr,
    "its limit follows the latency one upstream shows to this server's requests, and a slot must be given back "
    "when its request ends: a fleet-wide adaptive limit is not defined; use a zone without redis= for this rule",
    nullptr,
    period_bounds,
    "its limit is learned from this server's requests, not merged",
    adaptive_fields,
    P_LIMIT,
    nullptr,
    adaptive_open,
    adaptive_taken,
    adaptive_ended,
    adaptive_learned,
    nullptr,
};

}  // namespace rl
