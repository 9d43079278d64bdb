// Adaptive concurrency: at most L requests of a key in flight, as
// slots.cpp holds them (concurrency's slots, its max_wait queue), where L moves
// with the latency the upstream shows.  A key is usually one upstream
// (key=backend_a): every request to it passes through the key, so the
// requests in flight are the upstream's.
//
// The signal, at each request's end (rl_request_end): how long its upstream
// took (nginx's $upstream_response_time, or the request's time where no
// upstream ran), and the status it ended with, one of:
//   * an answer (a status below 400, or none known): a latency sample;
//   * a drop, 502, 503 or 504 (nginx's answer to an upstream that failed,
//     refused or timed out; AIMD's loss, as Netflix concurrency-limits'
//     AIMDLimit counts it).  Its latency is no sample: a dead upstream
//     fails at once, which is not a fast upstream;
//   * a request its client abandoned (499): it says only that its upstream
//     took at least that long, a sample when that is already slower than
//     tolerated;
//   * any other error (4xx, 500): no sample.  A missing page or a bad
//     request is answered at once whatever the upstream's load: a flood of
//     them is no evidence of a faster upstream.
// Every end counts in the interval's requests.
//
// The controller decides once an interval (interval=) with at least
// kMinSamples samples (an interval short of them waits for more, so that
// an empty or thin one changes nothing), or on drops (below).  Of the
// interval it takes:
//   * the typical latency m, the geometric mean of its samples' middle
//     half (between the first and the third quartile), from a histogram of
//     kBuckets counters on a log scale (exact below 8 ms, four a doubling
//     above).  Slow requests up to a quarter of the samples (a slower
//     endpoint beside a fast one, a few stragglers) move it little however
//     slow they are, where they would dominate a mean; and it is less
//     noisy than the median;
//   * the mean of the requests in flight n: the slots held, integrated
//     over the interval as they are taken and given back (where Little's
//     law, the sum of the latencies that ended in the interval over its
//     length, moves by the count of slow requests that happen to end in
//     it).
// A fresh key's first interval is its warm-up, not measured: what ends in
// it was admitted while the slots filled, the queueing we cause (if any)
// still building up, so that its latency would be a baseline too low.
//
// The baseline B is the upstream's latency without the queueing that our
// own concurrency causes, with n_B, the concurrency it was measured at:
//   * an interval at no more concurrency than n_B measures the upstream as
//     B was measured: B = m, whichever way it moved.  The upstream itself
//     got slower or faster; queueing we cause cannot be the reason, since
//     we send it no more than when B was taken.
//   * an interval at more concurrency with a typical latency as low as B
//     shows that concurrency to be free of queueing too: n_B = n, and B
//     halfway to m (a low taken whole would let the noise of intervals
//     drag B below what the upstream shows, and the limit below its W).
//   * otherwise (more concurrency, slower) B stays.  So B never rises with
//     the load we put on the upstream (the ratchet Envoy's adaptive
//     concurrency filter has under sustained load, envoyproxy/envoy#11579,
//     and Gradient2's long-term average has), and follows the upstream's
//     own slowing down (its service time doubling) once the limit has come
//     down to n_B, or a step down has shown it (below): a few intervals,
//     with no probe pinned to a floor.
// A baseline taken (or raised past the tolerance) while the limit pinned
// the requests in flight (their mean at least kPinned of it) may hold
// queueing we cause: it is probed, L x kProbe an interval, for as long as
// each step lowers the concurrency (by 5%) and the latency at least half as
// much, as an upstream that queues our requests shows; the step that does
// not is taken back.  (One that the limit only reaches now and then does
// not queue them much.)
//
// The limit moves by the gradient g = tolerance x B / m (Envoy's and
// Gradient2's gradient, with a tolerance of queueing as Gradient2's):
//   * drops in more than one of kDropShare of the interval's requests
//     (at least kMinDrops of them, of kMinSamples ended or more): L x 0.9,
//     AIMD's backoff.  Fewer are an endpoint that fails on its own, not a
//     load that a lower limit relieves;
//   * otherwise only in an interval where the limit was reached (a limit
//     not reached is not the constraint, and one grown while unused would
//     admit a burst far past what the upstream was seen to serve): g < 1
//     (the upstream queues more than tolerated), L x max(g, 1/2); probing,
//     L x kProbe; else L x min(g, 3/2), at least L + 1.
// A step down is judged on the first interval after its transition (the
// one right after it, whose requests were admitted before the step, is
// neither learned nor judged; judge_step): one after which the requests
// are faster in proportion relieved a queue of ours; one that lowered the
// concurrency by a fifth or more and did not shows the upstream's own
// latency, the baseline measured again there; a smaller one after which
// the typical request is slower, or more of them fail, with fewer in
// flight, is taken back: a queue drains when fewer are let in, so what it
// changed is which requests hold the slots.  Clients of a slow endpoint
// that wait for a slot take more of them when the limit is lower, the
// typical request being slower the lower it is: without this, each step
// down would call for the next one, down to min=.
// Always between min= and max (limit=).  With a queue of q requests at an
// upstream of W workers and service time S, the typical latency is about
// S + q S / W, so the limit settles where q is about (tolerance - 1) W:
// tolerance=1.25 lets about a quarter of W wait.
//
// State: the slots' block (slots, holders, queue), then the controller
// with the interval's histogram, at a multiple of 8 bytes (the block is
// 8-aligned), read and written in place under the zone's lock, then the
// priority classes' part if any (slots_classes_size).  A key is kept in
// the table while idle (its baseline is what it learned).
#include <cmath>
#include <cstdio>
#include <cstring>

#include "algorithms/algorithm.h"
#include "util/error.h"
#include "util/out.h"

namespace rl {

namespace {

constexpr uint32_t kMinSamples = 16;  // latencies an interval needs
constexpr uint32_t kDropShare = 10;   // drops in more than 1 of 10 of an interval's requests,
constexpr uint32_t kMinDrops = 3;     //   and at least 3: an overload
constexpr int64_t kStale = 20;        // intervals: one older, still short of them, starts over
constexpr uint32_t kDefaultTolerance = 120;
constexpr int64_t kDefaultIntervalMs = 500;
constexpr double kBackoff = 0.9;  // AIMD's, on a drop
constexpr double kMostDown = 0.5, kMostUp = 1.5;
constexpr double kBelow = 0.9;              // a concurrency clearly below B's
constexpr double kProbe = 0.75;             // a step down while the baseline is probed
constexpr double kPinned = 0.9;             // a mean in flight that the limit held at it
constexpr double kJudged = 0.8;             // a step down that lowered the concurrency by a fifth
constexpr double kFrom = 0.25, kTo = 0.75;  // the samples the typical latency is of
constexpr double kLongest = 1e9;            // ms: what the controller keeps is below (else a torn write)

// Its own parameters, after the slots' (max_wait=): the least limit
// (min=), a new key's limit (initial=; 0: limit=), the typical latency's
// growth over the baseline tolerated in hundredths (tolerance=1.5: 150),
// and how often the limit moves (interval=).
struct AdaptiveParams {
    SlotParams slots;
    uint32_t adapt_min;
    uint32_t adapt_initial;
    uint32_t tolerance;
    int64_t interval_ms;
};

// "1.5", "2", "1.25" as hundredths (150, 200, 125): at most two decimals,
// from 1.05 to 10.
bool parse_tolerance(const char *p, size_t len, void *field)
{
    uint64_t n = 0;
    size_t decimals = 0;
    bool dot = false, digits = false;
    for (size_t i = 0; i < len; i++) {
        if (p[i] == '.' && !dot) {
            dot = true;
            continue;
        }
        if (p[i] < '0' || p[i] > '9' || (dot && ++decimals > 2) || n > 100000) {
            return false;
        }
        n = n * 10 + (uint64_t) (p[i] - '0');
        digits = true;
    }
    for (; decimals < 2; decimals++) {
        n *= 10;
    }
    const uint32_t hundredths = (uint32_t) n;
    std::memcpy(field, &hundredths, sizeof(hundredths));
    return digits && hundredths >= 105 && hundredths <= 1000;
}

const OwnParam own[] = {
    kMaxWait,
    number_param("min", offsetof(AdaptiveParams, adapt_min), 1, RL_CONCURRENCY_MAX),
    number_param("initial", offsetof(AdaptiveParams, adapt_initial), 1, RL_CONCURRENCY_MAX),
    parsed_param("tolerance", offsetof(AdaptiveParams, tolerance), parse_tolerance,
                 "a number from 1.05 to 10 with at most two decimals, like 1.5: how many times its baseline the "
                 "upstream's typical latency may grow to"),
    time_param("interval", offsetof(AdaptiveParams, interval_ms), 50, 60000, "a time from 50ms to 1m, like 500ms, 2s"),
};

AdaptiveParams params(const rl_rule_t &rule)
{
    return params_of<AdaptiveParams>(rule);
}

// The histogram: bucket b < kExact holds the latencies of b ms (0: under
// one); above, each doubling [2^e, 2^(e+1)) in kSub buckets of 2^e / kSub
// ms, up to 2^17 ms (2 min 11 s; longer ones in the last).
constexpr int kSubBits = 2;
constexpr uint32_t kSub = 1u << kSubBits;
constexpr uint32_t kExact = 2 * kSub;
constexpr uint32_t kBuckets = 64;
using Count = uint16_t;

struct Controller {
    uint32_t limit;             // L (0: a fresh key, at initial=)
    uint32_t probing;           // B was taken (or raised) with the limit pinning: it may hold queueing we cause
    double baseline;            // B (ms; 0: not measured yet)
    double baseline_n;          // the mean in flight B was measured at
    double recent;              // the last interval's typical latency (ms)
    double recent_n;            //   its mean in flight,
    double recent_dropped;      //   and its share of drops
    int64_t start;              // this interval's start (0: none yet),
    int64_t held_at;            //   the last instant a slot was taken or given back in it,
    double held_ms;             //   the slots held until then, integrated (slot x ms),
    uint32_t held;              //   the slots held since,
    uint32_t bound;             //   an admission in it took the last slot,
    uint32_t samples;           //   its latencies,
    uint32_t drops;             //   its drops (502, 503, 504),
    uint32_t ends;              //   its requests ended,
    uint32_t warm;              // an interval has ended since the key was fresh
    uint32_t lowered_from;      // the limit the last one lowered (0: it did not),
    uint32_t lowered_on_drops;  //   whether on drops,
    uint32_t lowered_pinned;    //   whether from a limit that pinned the requests in flight,
    int64_t lowered_at;         //   and when
    Count histogram[kBuckets];  // this interval's latencies by bucket (all halved rather than one passes 65,535)
};

uint32_t initial_of(const rl_rule_t &rule)
{
    return params(rule).adapt_initial != 0 ? params(rule).adapt_initial : rule.limit;
}

// The block: the slots, the controller (8-aligned), then the classes'
// part if any.  A decision finds the controller from the block's size
// (rule.block, adaptive_block's), without working the slots out again.
size_t controller_after_slots(const rl_rule_t &rule)
{
    return (slots_block_size(rule) + 7) & ~size_t{7};
}

Controller *controller_of(const rl_rule_t &rule, const State &s)
{
    return s.blob != nullptr
               ? reinterpret_cast<Controller *>(s.blob + rule.block - sizeof(Controller) - slots_classes_size(rule))
               : nullptr;
}

// L, as a fresh key (0) or one a dead process half wrote has it.
uint32_t limit_of(const rl_rule_t &rule, const Controller &c)
{
    return c.limit == 0 || c.limit > rule.limit ? initial_of(rule) : c.limit;
}

uint32_t bucket_of(int64_t ms)
{
    if (ms < (int64_t) kExact) {
        return ms > 0 ? (uint32_t) ms : 0;
    }
    const int e = 63 - __builtin_clzll((uint64_t) ms);
    const uint32_t b =
        kExact + (uint32_t) (e - kSubBits - 1) * kSub + (uint32_t) ((uint64_t) ms >> (e - kSubBits)) % kSub;
    return b < kBuckets ? b : kBuckets - 1;
}

// A bucket's latencies: [*lo, *lo + *width) ms.
void bucket_span(uint32_t b, double *lo, double *width)
{
    if (b < kExact) {
        *lo = b;
        *width = 1;
        return;
    }
    *width = std::ldexp(1.0, (int) ((b - kExact) / kSub) + 1);
    *lo = (kSub + (b - kExact) % kSub) * *width;
}

void count_latency(Controller &c, int64_t ms)
{
    Count &n = c.histogram[bucket_of(ms)];
    if (n == (Count) ~(Count) 0) {
        for (Count &k : c.histogram) {
            k = (Count) (k / 2);  // 65,535 alike in an interval: the shape the same
        }
    }
    n++;
    c.samples++;
}

// The interval's typical latency (ms; 0: none): the geometric mean of its
// middle half, the samples between its first and its third quartile (a
// bucket's at its middle; one a quartile cuts, in part).
double typical(const Controller &c)
{
    double total = 0;
    for (Count n : c.histogram) {
        total += n;
    }
    const double from = total * kFrom, to = total * kTo;
    double below = 0, logs = 0, weight = 0;
    for (uint32_t b = 0; b < kBuckets && below < to; b++) {
        const double n = c.histogram[b];
        const double a = std::fmax(below, from), z = std::fmin(below + n, to);
        if (z > a) {
            double lo, width;
            bucket_span(b, &lo, &width);
            logs += (z - a) * std::log(lo + width / 2);
            weight += z - a;
        }
        below += n;
    }
    return weight > 0 ? std::exp(logs / weight) : 0;
}

uint32_t clamp_limit(const rl_rule_t &rule, double l)
{
    const double lo = params(rule).adapt_min, hi = rule.limit;
    return (uint32_t) (l < lo ? lo : l > hi ? hi : l);
}

// The slots held from now: those held until now integrated.
void held_now(Controller &c, int64_t now, uint32_t held)
{
    const int64_t from = c.held_at > c.start && c.held_at <= now ? c.held_at : c.start;
    if (now > from && c.start != 0) {
        c.held_ms += (double) c.held * (double) (now - from);
    }
    c.held_at = now;
    c.held = held;
}

void start_interval(Controller &c, int64_t now)
{
    c.start = now;
    c.held_ms = 0;
    c.samples = c.drops = c.ends = c.bound = 0;
    std::memset(c.histogram, 0, sizeof(c.histogram));
}

double tolerance_of(const rl_rule_t &rule)
{
    return params(rule).tolerance / 100.0;
}

// Whether a figure the controller keeps is one it could have written: a
// block a dead process half wrote starts its learning over.
bool sane(double ms)
{
    return ms >= 0 && ms < kLongest;
}

void forget_torn(Controller &c)
{
    if (!sane(c.baseline) || !sane(c.baseline_n) || !sane(c.recent) || !sane(c.recent_n) || !sane(c.held_ms) ||
        !(c.recent_dropped >= 0 && c.recent_dropped <= 1)) {
        c.baseline = c.baseline_n = c.recent = c.recent_n = c.held_ms = c.recent_dropped = 0;
        c.probing = 0;
    }
}

// The baseline, from an interval of typical latency m at mean concurrency n
// (pinned: the limit held the requests in flight at it), and whether it is
// to be probed.
void learn_baseline(Controller &c, double m, double n, bool pinned, double tolerance)
{
    if (c.baseline <= 0) {
        c.baseline = m;  // the first
        c.baseline_n = n;
        c.probing = pinned;
    } else if (n <= kBelow * c.baseline_n) {
        c.probing = pinned ? c.probing || m > tolerance * c.baseline : 0;
        c.baseline = m;  // as B was measured, or with less in flight
        c.baseline_n = n;
    } else if (m <= c.baseline) {
        c.baseline = (c.baseline + m) / 2;  // as fast with more in flight
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

// Whether the interval's drops are an overload: more than one of kDropShare
// of its requests, and enough of them to tell (an upstream failing one
// request in twenty on its own shows 2 or more of 16 in one interval of
// five, 3 or more in one of twenty-three).
bool dropping(const Controller &c)
{
    return c.ends >= kMinSamples && c.drops >= kMinDrops && c.drops * kDropShare > c.ends;
}

// The limit after an interval of typical latency m (0: too few samples).
uint32_t next_limit(const rl_rule_t &rule, const Controller &c, double m)
{
    const double L = c.limit;
    if (dropping(c)) {
        return lower(rule, L, kBackoff, L);
    }
    if (m <= 0 || !c.bound) {
        return c.limit;  // too few latencies, or the limit held nothing back: it is not the constraint
    }
    const double g = tolerance_of(rule) * c.baseline / m;
    if (g < 1) {
        return lower(rule, L, g > kMostDown ? g : kMostDown, L);
    }
    if (c.probing) {
        return lower(rule, L, kProbe, L);
    }
    const double up = std::floor(L * (g < kMostUp ? g : kMostUp));
    return clamp_limit(rule, up > L + 1 ? up : L + 1);
}

// The last step down judged, on the first interval after its transition,
// of typical latency m at concurrency n, a share dropped of its requests
// failing: whether it is to be taken back.  Only a step from a limit that
// pinned the requests in flight is judged: below, what is in flight moves
// with the load, not with the limit.  A step on drops after which
// more of the requests fail, with fewer in flight, is: what it changed is
// which requests got the slots (clients of a failing endpoint taking more
// of them), not a load.  A step on latency that made the requests faster in
// proportion (elastic) relieved a queue of ours.  One that did not:
//   * a probe's step, or one that lowered the concurrency by kJudged or
//     more, shows the upstream's own latency: the baseline is measured
//     again there (an upstream that got slower by itself, its service time
//     doubling).  A probe's step is taken back;
//   * a smaller one after which the typical request is slower, with fewer
//     in flight, is taken back: what it changed is which requests got the
//     slots (clients of a slow endpoint taking more of them), not a queue.
bool judge_step(Controller &c, double m, double n, double dropped)
{
    const double m0 = c.recent, n0 = c.recent_n;
    const bool measured = m > 0 && m0 > 0;
    if (!c.lowered_pinned) {
        return false;  // what was in flight moved by itself: it says nothing of the step
    }
    if (c.lowered_on_drops) {
        return n < n0 && dropped > c.recent_dropped;
    }
    if (measured && n <= 0.95 * n0 && elastic(m0, n0, m, n)) {
        return false;
    }
    if (measured && (c.probing || n <= kJudged * n0)) {
        c.baseline = m;
        c.baseline_n = n;
        return c.probing;
    }
    return measured && n < n0 && m > m0;
}

// The interval decided: the last step down judged, the baseline learned,
// the limit moved.
void decide(const rl_rule_t &rule, Controller &c, int64_t now)
{
    forget_torn(c);
    c.limit = limit_of(rule, c);
    if (c.lowered_from > rule.limit || c.lowered_at > now) {
        c.lowered_from = 0;  // a step no process took (a block half written)
    }
    held_now(c, now, c.held);
    const double m0 = c.recent;
    const double m = c.samples >= kMinSamples && c.warm ? typical(c) : 0;
    const double n = c.held_ms / (double) (now - c.start > 0 ? now - c.start : 1);
    c.warm = 1;
    const double dropped = c.ends > 0 ? (double) c.drops / c.ends : 0;
    if (c.lowered_from != 0 && c.start < c.lowered_at + (int64_t) m0) {
        // the step down's transition: what ends in it was admitted before,
        // in the queue the step is to shorten (latencies of the limit that
        // was); neither learned nor judged
        return;
    }
    if (c.lowered_from != 0 && judge_step(c, m, n, dropped)) {
        c.probing = 0;  // taken back, the interval not learned
        c.limit = c.lowered_from;
        c.lowered_from = 0;
        return;
    }
    if (m > 0) {
        learn_baseline(c, m, n, c.bound && n >= kPinned * c.limit, tolerance_of(rule));
        c.recent = m;
        c.recent_n = n;
    }
    c.recent_dropped = dropped;
    const uint32_t next = next_limit(rule, c, m);
    c.lowered_from = next < c.limit ? c.limit : 0;
    c.lowered_on_drops = dropping(c);
    c.lowered_pinned = n >= kPinned * c.limit;
    c.lowered_at = now;
    c.limit = next;
}

bool drop(uint32_t status)
{
    return status == 502 || status == 503 || status == 504;
}

void learned_from(const rl_rule_t &rule, Controller c, Learned *learned)
{
    forget_torn(c);
    learned->limit = limit_of(rule, c);
    learned->baseline_us = (uint32_t) std::fmin(c.baseline * 1000, 4e9);
    learned->recent_us = (uint32_t) std::fmin(c.recent * 1000, 4e9);
}

}  // namespace

uint32_t adaptive_open(const rl_rule_t &rule, const State &s)
{
    const Controller *c = controller_of(rule, s);
    return c != nullptr ? limit_of(rule, *c) : initial_of(rule);
}

void adaptive_taken(const rl_rule_t &rule, State &s, int64_t now, uint32_t held)
{
    Controller *c = controller_of(rule, s);
    if (c == nullptr) {
        return;
    }
    held_now(*c, now, held);
    if (held >= limit_of(rule, *c)) {
        c->bound = 1;
    }
}

bool adaptive_ended(const rl_rule_t &rule, State &s, int64_t now, const Ended &e, Learned *learned)
{
    Controller *p = controller_of(rule, s);
    if (p == nullptr) {
        return false;
    }
    Controller &c = *p;
    if (c.start == 0 || now < c.start || now - c.start > kStale * params(rule).interval_ms) {
        start_interval(c, now);  // the first, a clock stepped back, or too old to say anything of now
    }
    uint32_t held, queued;
    slots_held(rule, s, &held, &queued);
    held_now(c, now, held);
    const int64_t latency = e.latency_ms >= 0 ? e.latency_ms : (now > e.at ? now - e.at : 0);
    c.ends++;
    if (drop(e.status)) {
        c.drops++;
    } else if (e.status == 499 ? c.baseline > 0 && (double) latency > tolerance_of(rule) * c.baseline
                               : e.status < 400) {
        count_latency(c, latency);
    }
    if (now - c.start < params(rule).interval_ms || (c.samples < kMinSamples && !dropping(c))) {
        return false;
    }
    decide(rule, c, now);
    start_interval(c, now);
    if (learned != nullptr) {
        learned_from(rule, c, learned);
    }
    return true;
}

namespace {

void adaptive_learned(const rl_rule_t &rule, const State &s, Learned *learned)
{
    const Controller *c = controller_of(rule, s);
    if (c != nullptr) {
        learned_from(rule, *c, learned);
    } else {
        *learned = Learned{initial_of(rule), 0, 0};
    }
}

size_t adaptive_block(const rl_rule_t &rule)
{
    return controller_after_slots(rule) + sizeof(Controller) + slots_classes_size(rule);
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
    if (limit_at_most(rule, RL_CONCURRENCY_MAX, "a key holds at most ",
                      " requests in flight (its state keeps who holds each)", err, errlen) != RL_OK) {
        return RL_ERROR;
    }
    AdaptiveParams p = params(rule);
    if (!given(rule, "min")) {
        p.adapt_min = 1;
    }
    if (p.adapt_min > rule.limit) {
        return fail(err, errlen, "\"min=%u\" exceeds limit=%u: min= is the least limit, limit= the most", p.adapt_min,
                    rule.limit);
    }
    if (given(rule, "initial") && (p.adapt_initial < p.adapt_min || p.adapt_initial > rule.limit)) {
        return fail(err, errlen, "\"initial=%u\" is outside min=%u and limit=%u: a new key's limit lies between",
                    p.adapt_initial, p.adapt_min, rule.limit);
    }
    if (!given(rule, "tolerance")) {
        p.tolerance = kDefaultTolerance;
    }
    if (!given(rule, "interval")) {
        p.interval_ms = kDefaultIntervalMs;
    }
    set_params(rule, p);
    return RL_OK;
}

void adaptive_tail(const rl_rule_t &, char *out, size_t len)
{
    std::snprintf(out, len, "%s", "adaptive");
}

void adaptive_fields(Out &o, const rl_rule_t &rule)
{
    o.field("min", (uint64_t) params(rule).adapt_min);
    o.field("initial", (uint64_t) initial_of(rule));
    o.field("tolerance_pct", (uint64_t) params(rule).tolerance);
    o.field("interval_ms", (uint64_t) params(rule).interval_ms);
}

}  // namespace

// ratelimit_stats: what the rule's keys learned last
const Figure kLearnedFigures[] = {
    {"limit_now", "adaptive_limit", "gauge",
     "The limit of requests in flight now (adaptive; of the key that moved its limit last).",
     offsetof(rl_rule_stats_t, limit_now)},
    {"baseline_us", "adaptive_baseline_microseconds", "gauge",
     "The upstream's latency without queueing, as the adaptive rule learned it.",
     offsetof(rl_rule_stats_t, baseline_us)},
    {"recent_us", "adaptive_recent_microseconds", "gauge",
     "The upstream's typical latency over the adaptive rule's last interval (the geometric mean of its middle half).",
     offsetof(rl_rule_stats_t, recent_us)},
};

extern const Algorithm kAdaptive = {
    .name = "adaptive",
    .traits = kSlots,
    .own = own,
    .nown = sizeof(own) / sizeof(own[0]),
    .finish = adaptive_finish,
    .name_tail = adaptive_tail,
    .block_size = adaptive_block,
    .policy = slots_policy,
    .transition = slots_transition,
    .no_charge = "each request holds one slot while it runs",
    .no_redis = "its limit follows the latency one upstream shows to this server's requests, and a slot must be "
                "given back when its request ends: a fleet-wide adaptive limit is not defined; use a zone without "
                "redis= for this rule",
    .bounds = period_bounds,
    .no_sync = "its limit is learned from this server's requests, not merged",
    .api_fields = adaptive_fields,
    .overridable = P_LIMIT,
    .slots = &kInFlight,
    .slots_open = adaptive_open,
    .slot_taken = adaptive_taken,
    .slot_ended = adaptive_ended,
    .learned_of = adaptive_learned,
    .figures = kLearnedFigures,
    .nfigures = sizeof(kLearnedFigures) / sizeof(kLearnedFigures[0]),
};

}  // namespace rl
