// The conformance of the Lua script (core/src/redis/ratelimit.lua) with the
// C++ core: random traces run through rl_decide on a local table and
// through the script in a real redis-server (tests/redis_server.h) must
// give identical decisions, remaining, reset, retry-after, the IETF t, the
// policy and bans; with charge=, requests stay in flight and end in any
// order, and each charge's units, debt and cap must be identical too.
// Traces take turns calling the library's function (FCALL, which keeps
// its rules' tables between calls) and the script (EVALSHA).
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "helpers.h"
#include "policy/request.h"
#include "redis_server.h"

namespace {

using rltest::Redis;
using rltest::redis_server;
using rltest::script_sha;

// The script's numbers as they are, concluded as the core concludes them:
// for replies that rl_redis_answer may refuse (after the trace's clock
// stepped back further than RL_REDIS_CLOCK_SLACK_MS).
int decode(rl_request_t &rq, const rl_resp_t &r)
{
    int64_t lean[2 + 12];
    const int64_t *items = r.items;
    if (rl_redis_lean_items(&rq, &r, lean) == 1) {
        items = lean;  // a string's, worked out
    } else if (r.type != RL_RESP_ARRAY || !r.integers || r.nitems != 2 + 12 * rq.n) {
        return -1;
    }
    for (size_t i = 0; i < rq.n; i++) {
        const int64_t *v = items + 2 + 12 * i;
        rl_decision_t &d = rq.checks[i].decision;
        d = rl_decision_t{};
        d.allowed = (int32_t) v[0];
        d.never = (int32_t) v[1];
        d.remaining = (uint64_t) v[2];
        d.reset_ms = v[3];
        d.retry_after_ms = v[4];
        d.delay_ms = v[5];
        d.window_ms = v[6];
        d.available_ms = v[7];
        d.banned_ms = v[8];
        rq.checks[i].after.t = v[9];
        rq.checks[i].reserved = (uint64_t) v[10];
        rq.checks[i].banning = v[11] == 1;
        rq.checks[i].in_flight = v[11] == 2;  // refused by reservations in flight alone
        rq.checks[i].at = items[1];
    }
    return rl::conclude(rq, items[0] != 0);
}

// One request through the script: the reply's decisions in c; 1 if
// admitted, 0 if not, -1 for a reply that is not the script's answer.
// steady: the trace's clock never stepped back more than
// RL_REDIS_CLOCK_SLACK_MS, so every reply must be in range.
// A reply to one request judged: 1 if admitted, 0 if not, -1 for a reply
// that is not the script's answer.
int verdict_of(rl_request_t &rq, const rl_resp_t &r, bool steady)
{
    rl_redis_answer_t a;
    int verdict = rl_redis_answer(&rq, RL_REDIS_DECIDE, &r, &a) == RL_REDIS_DECIDED ? a.verdict : -1;
    if (verdict < 0) {
        if (steady) {
            ADD_FAILURE() << "refused: " << a.why;
        }
        EXPECT_FALSE(steady) << "a reply of the script refused on a steady clock: " << a.why;
        verdict = decode(rq, r);
    }
    EXPECT_GE(verdict, 0) << "reply type " << (char) r.type << ": " << std::string(r.str ? r.str : "", r.str_len);
    return verdict < 0 ? -1 : verdict != RL_VERDICT_REJECTED;
}

int check_in_redis(const std::string &sha, int via, const std::string &prefix, std::vector<rl_check_t> &c, int combine,
                   int64_t now, size_t *binding, bool steady)
{
    rl_request_t rq = request_of(c.data(), c.size(), combine);
    std::string cmd(rl_redis_command_size(c.size(), prefix.size(), sha.size()), '\0');
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), via, RL_REDIS_DECIDE, prefix.data(), prefix.size(),
                                0, &rq, now));
    rl_resp_t r = Redis::instance().call(cmd);
    const int allowed = verdict_of(rq, r, steady);
    *binding = rq.binding;
    return allowed;
}

// Requests through the script in one batch (rl_redis_batch_command), each
// answer judged for its request as one call's: allowed[i], binding[i].
void batch_in_redis(const std::string &sha, int via, const std::string &prefix,
                    std::vector<std::vector<rl_check_t> *> &cs, int combine, int64_t now, std::vector<int> &allowed,
                    std::vector<size_t> &binding, bool steady)
{
    std::vector<rl_request_t> rqs;
    std::vector<const rl_request_t *> ptrs;
    for (std::vector<rl_check_t> *c : cs) {
        rqs.push_back(request_of(c->data(), c->size(), combine));
    }
    for (const rl_request_t &rq : rqs) {
        ptrs.push_back(&rq);
    }
    std::string cmd(rl_redis_batch_size(ptrs.data(), ptrs.size(), prefix.size(), sha.size()), '\0');
    cmd.resize(rl_redis_batch_command(cmd.data(), sha.data(), sha.size(), via, prefix.data(), prefix.size(),
                                      ptrs.data(), ptrs.size(), now));
    Redis &redis = Redis::instance();
    (void) redis.call(cmd);
    const std::string &raw = redis.raw();
    long off = rl_resp_batch(raw.data(), raw.size(), rqs.size());
    ASSERT_GT(off, 0) << "not a batch's answer: " << raw.substr(0, 200);
    for (size_t i = 0; i < rqs.size(); i++) {
        rl_resp_t item;
        const long used = rl_resp_parse(raw.data() + off, raw.size() - (size_t) off, &item);
        ASSERT_GT(used, 0) << "answer " << i << " of " << rqs.size();
        off += used;
        allowed.push_back(verdict_of(rqs[i], item, steady));
        binding.push_back(rqs[i].binding);
    }
    EXPECT_EQ((size_t) off, raw.size());
}

std::string describe(const rl_decision_t &d)
{
    return "allowed=" + std::to_string(d.allowed) + " never=" + std::to_string(d.never) +
           " remaining=" + std::to_string(d.remaining) + " reset=" + std::to_string(d.reset_ms) +
           " retry=" + std::to_string(d.retry_after_ms) + " delay=" + std::to_string(d.delay_ms) +
           " window=" + std::to_string(d.window_ms) + " available=" + std::to_string(d.available_ms) +
           " quota=" + std::to_string(d.quota) + " banned=" + std::to_string(d.banned_ms);
}

bool same(const rl_decision_t &a, const rl_decision_t &b)
{
    return a.allowed == b.allowed && a.never == b.never && a.remaining == b.remaining && a.reset_ms == b.reset_ms &&
           a.retry_after_ms == b.retry_after_ms && a.delay_ms == b.delay_ms && a.window_ms == b.window_ms &&
           a.available_ms == b.available_ms && a.quota == b.quota && a.banned_ms == b.banned_ms;
}

// The same for a check's decision in the core and in Redis, the core's of a
// check that does not bind with the script's next unit (untimed_as).
bool same_check(const rl_decision_t &core, const rl_decision_t &redis, bool binding)
{
    rl_decision_t c = core;
    if (!binding) {
        (void) untimed_as(c, redis);
    }
    return same(c, redis);
}

// A request's charges settled through the script (with the trace's
// clock): each settled check's charged, in_debt and capped set.
bool settle_in_redis(const std::string &sha, int via, const std::string &prefix, std::vector<rl_check_t> &c,
                     int64_t now)
{
    rl_request_t rq = request_of(c.data(), c.size(), RL_COMBINE_ALL);
    std::string cmd(rl_redis_command_size(c.size(), prefix.size(), sha.size()), '\0');
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), via, RL_REDIS_SETTLE, prefix.data(), prefix.size(),
                                0, &rq, now));
    rl_resp_t r = Redis::instance().call(cmd);
    rl_redis_answer_t a;
    const int kind = rl_redis_answer(&rq, RL_REDIS_SETTLE, &r, &a);
    EXPECT_EQ(kind, RL_REDIS_DECIDED) << a.why << " (reply type " << (char) r.type << ": "
                                      << std::string(r.str ? r.str : "", r.str_len) << ")";
    return kind == RL_REDIS_DECIDED;
}

// ---- a trace: the same requests through the core and through Redis ----------

// What the traces went through, so that a test can tell it saw charges,
// debts, caps and bans.
struct Seen {
    size_t ends = 0, charged = 0, debts = 0, capped = 0, banned = 0, bans = 0, reserved = 0, estimated = 0, told = 0;
};
Seen seen;

struct Trace {
    std::vector<rl_rule_t> rules;
    std::vector<std::string> texts;
    int combine = RL_COMBINE_ALL;
    void *table = nullptr;
    size_t table_size = 1 << 20;
    std::string prefix;
    int via = RL_REDIS_FCALL;  // the library's function, or the script
    // each rule's counters in the table
    std::vector<int> counters;
    // charges within half a limit: keys keep something left
    bool modest = false;
    // requests sent in batches of 1 to batch at one instant (0: one call
    // each)
    size_t batch = 0;

    Trace(const std::vector<std::string> &t, int comb, const std::string &pfx) : texts(t), combine(comb), prefix(pfx)
    {
        std::vector<uint32_t> blobs;
        for (const std::string &s : texts) {
            rules.push_back(rule_of(s));
            char err[RL_ERR_MAX];
            EXPECT_EQ(rl_redis_rule_ok(&rules.back(), err, sizeof(err)), RL_OK) << s << ": " << err;
            blobs.push_back(rl_rule_block_size(&rules.back()));
        }
        table = std::aligned_alloc(64, table_size);
        std::memset(table, 0, table_size);  // rl_table_init takes zeroed memory
        char err[RL_ERR_MAX];
        EXPECT_EQ(rl_table_init(table, table_size, blobs.data(), blobs.size(), nullptr, err, sizeof(err)), RL_OK)
            << err;
        for (const rl_rule_t &r : rules) {
            counters.push_back(rl_table_rule_slot(table, r.name) + 1);
        }
    }
    ~Trace() { std::free(table); }

    std::vector<rl_check_t> checks(const std::vector<std::string> &keys, const std::vector<uint64_t> &costs)
    {
        std::vector<rl_check_t> c(rules.size());
        for (size_t i = 0; i < rules.size(); i++) {
            c[i] = rl_check_t{};
            c[i].table = table;
            c[i].rule = &rules[i];
            c[i].identity = rl_rule_identity(&rules[i], "k", 1) + i;  // distinct state per rule
            c[i].key = keys[i].data();
            c[i].key_len = keys[i].size();
            c[i].cost = costs[i];
            c[i].counters = counters[i];
        }
        return c;
    }

    // A request admitted both ways, in flight until it ends: its checks in
    // the core and in Redis, and its keys.
    struct Flight {
        std::vector<std::string> keys;
        std::vector<rl_check_t> local, remote;
    };
    std::vector<Flight> flights;

    // Runs one request both ways; false (with a failure) on a difference.
    // An admitted request of a charge= rule stays in flight.
    bool step(const std::string &sha, const std::vector<std::string> &keys, const std::vector<uint64_t> &costs,
              int64_t now, size_t op, bool steady)
    {
        Flight f{keys, {}, {}};
        f.local = checks(f.keys, costs);
        f.remote = checks(f.keys, costs);
        size_t lb, rb;
        const int la = decide(f.local.data(), f.local.size(), combine, now, &lb);
        const int ra = check_in_redis(sha, via, prefix, f.remote, combine, now, &rb, steady);
        return same_outcome(f, costs, la, lb, ra, rb, now, op);
    }

    // Requests at one instant both ways: one after the other in the core,
    // in one batch in Redis; false (with a failure) on a difference.
    bool step_batch(const std::string &sha, const std::vector<std::vector<std::string>> &keys,
                    const std::vector<std::vector<uint64_t>> &costs, int64_t now, size_t op, bool steady)
    {
        std::vector<Flight> fs(keys.size());  // sized first: the checks point into their keys
        std::vector<std::vector<rl_check_t> *> remote;
        std::vector<int> la;
        std::vector<size_t> lb;
        for (size_t i = 0; i < fs.size(); i++) {
            fs[i].keys = keys[i];
            fs[i].local = checks(fs[i].keys, costs[i]);
            fs[i].remote = checks(fs[i].keys, costs[i]);
            size_t b;
            la.push_back(decide(fs[i].local.data(), fs[i].local.size(), combine, now, &b));
            lb.push_back(b);
            remote.push_back(&fs[i].remote);
        }
        std::vector<int> ra;
        std::vector<size_t> rb;
        batch_in_redis(sha, via, prefix, remote, combine, now, ra, rb, steady);
        if (ra.size() != fs.size()) {
            return false;
        }
        for (size_t i = 0; i < fs.size(); i++) {
            if (!same_outcome(fs[i], costs[i], la[i], lb[i], ra[i], rb[i], now, op)) {
                ADD_FAILURE() << "request " << i << " of a batch of " << fs.size();
                return false;
            }
        }
        return true;
    }

    // One request's outcome in the core (la, lb) and in Redis (ra, rb)
    // compared; false (with a failure) on a difference.  An admitted
    // request of a charge= rule stays in flight.
    bool same_outcome(Flight &f, const std::vector<uint64_t> &costs, int la, size_t lb, int ra, size_t rb, int64_t now,
                      size_t op)
    {
        const std::vector<std::string> &keys = f.keys;
        std::vector<rl_check_t> &local = f.local, &remote = f.remote;
        bool ok = la == ra && lb == rb;
        for (size_t i = 0; i < rules.size(); i++) {
            ok = ok && same_check(local[i].decision, remote[i].decision, i == lb) &&
                 local[i].reserved == remote[i].reserved && local[i].banning == remote[i].banning &&
                 local[i].in_flight == remote[i].in_flight;
            // a charge= rule's share reserved; and with room to spare
            seen.reserved += local[i].reserved > local[i].cost;
            seen.estimated += local[i].reserved > local[i].cost && local[i].decision.remaining > 0;
            seen.told += local[i].in_flight != 0;
        }
        if (!ok) {
            std::string msg = "op " + std::to_string(op) + " at " + std::to_string(now) + ", combine " +
                              std::to_string(combine) + ":\n";
            for (size_t i = 0; i < rules.size(); i++) {
                msg +=
                    "  rule \"" + texts[i] + "\" key " + keys[i] + " cost " + std::to_string(costs[i]) +
                    "\n    core:  " + describe(local[i].decision) + " reserved=" + std::to_string(local[i].reserved) +
                    " banning=" + std::to_string(local[i].banning) +
                    " in_flight=" + std::to_string(local[i].in_flight) +
                    "\n    redis: " + describe(remote[i].decision) + " reserved=" + std::to_string(remote[i].reserved) +
                    " banning=" + std::to_string(remote[i].banning) +
                    " in_flight=" + std::to_string(remote[i].in_flight) + "\n";
            }
            ADD_FAILURE() << msg << "  allowed core " << la << " redis " << ra << ", binding " << lb << " / " << rb;
            return false;
        }
        bool charges = false;
        for (size_t i = 0; i < rules.size(); i++) {
            charges |= rl_check_charges(&local[i]) != 0;
            const int64_t ban = local[i].decision.banned_ms;
            seen.banned += ban > 0 && ban < rules[i].ban_ms;  // refused while banned
            seen.bans += ban > 0 && ban == rules[i].ban_ms;   // a ban started
        }
        if (charges) {
            flights.push_back(std::move(f));
        }
        return true;
    }

    // One request in flight ends, charged: the cost it reserved given back
    // and its charge spent, both ways; false (with a failure) on a
    // difference in what was charged or in the debt.
    bool end(const std::string &sha, std::mt19937_64 &g, int64_t now, size_t op)
    {
        const size_t which = g() % flights.size();
        Flight f = std::move(flights[which]);
        flights.erase(flights.begin() + (long) which);
        for (size_t i = 0; i < rules.size(); i++) {
            const uint64_t top = 2 * (uint64_t) std::max(rules[i].limit, rules[i].burst);
            const unsigned c = (unsigned) (g() % 100);
            const uint64_t units = modest   ? g() % (rules[i].limit / 2 + 1)
                                   : c < 30 ? 0
                                   : c < 45 ? f.local[i].cost
                                   : c < 90 ? g() % (top + 2)
                                   : c < 97 ? top + 1 + g() % top
                                            : RL_NO_CHARGE - 1 - g() % 3;
            for (std::vector<rl_check_t> *v : {&f.local, &f.remote}) {
                (*v)[i].key = f.keys[i].data();
                (*v)[i].charge = rl_check_charges(&(*v)[i]) ? units : RL_NO_CHARGE;
            }
        }
        rl_request_t rq = request_of(f.local.data(), f.local.size(), combine);
        rl_request_end(&rq, now);
        if (!settle_in_redis(sha, via, prefix, f.remote, now)) {
            return false;
        }
        bool ok = true;
        std::string msg;
        for (size_t i = 0; i < rules.size(); i++) {
            const rl_check_t &l = f.local[i], &r = f.remote[i];
            if (l.charge == RL_NO_CHARGE) {
                continue;
            }
            const bool same_charge = l.charged == r.charged && l.in_debt == r.in_debt && l.capped == r.capped;
            ok = ok && same_charge;
            seen.ends++;
            seen.charged += l.charged > 0;
            seen.debts += l.in_debt != 0;
            seen.capped += l.capped != 0;
            msg += "  rule \"" + texts[i] + "\" key " + f.keys[i] + " cost " + std::to_string(l.cost) + " charge " +
                   std::to_string(l.charge) + " (admitted at " + std::to_string(l.at) + "): core charged " +
                   std::to_string(l.charged) + " debt " + std::to_string(l.in_debt) + " capped " +
                   std::to_string(l.capped) + ", redis " + std::to_string(r.charged) + " debt " +
                   std::to_string(r.in_debt) + " capped " + std::to_string(r.capped) + "\n";
        }
        if (!ok) {
            ADD_FAILURE() << "end at op " + std::to_string(op) + " at " + std::to_string(now) + ":\n" << msg;
        }
        return ok;
    }
};

const char *const kAlgorithms[] = {"gcra",        "token_bucket", "fixed_window", "sliding_window",
                                   "sliding_log", "leaky_bucket", "quota"};

// A random rule of the algorithm, within what a Redis zone accepts.
std::string random_rule(std::mt19937_64 &g, const std::string &algorithm)
{
    auto pick = [&](std::initializer_list<const char *> v) { return std::string(v.begin()[g() % v.size()]); };
    const int limit = 1 + (int) (g() % 20);
    std::string r = "algorithm=" + algorithm + " limit=" + std::to_string(limit);
    if (algorithm == "quota") {
        r += " reset=" + pick({"daily", "weekly", "monthly"}) + " utc_offset=" + pick({"+00:00", "+05:30", "-08:00"});
        return r;
    }
    r += " period=" + pick({"1s", "700ms", "10s", "1m", "1h", "1d"});
    if (algorithm == "gcra" || algorithm == "token_bucket") {
        r += " burst=" + std::to_string(1 + g() % 30);
    } else if (algorithm == "fixed_window") {
        r += " align=" + pick({"epoch", "first"});
    } else if (algorithm == "sliding_window") {
        r += " buckets=" + pick({"1", "2", "5", "10", "60"});
    } else if (algorithm == "leaky_bucket") {
        r += " max_delay=" + pick({"0", "100ms", "1s", "30s"});
        r += " delay=" + pick({"0", "0", "1", "3", "25"});
    }
    return r;
}

// A random rule with, some of the time, charge= (not leaky_bucket's) and
// ban=.
std::string random_charged_rule(std::mt19937_64 &g, const std::string &algorithm)
{
    auto pick = [&](std::initializer_list<const char *> v) { return std::string(v.begin()[g() % v.size()]); };
    std::string r = random_rule(g, algorithm);
    if (algorithm != "leaky_bucket" && g() % 4 != 0) {
        r += " charge=$c";
    }
    if (g() % 3 == 0) {
        r += " ban=" + pick({"300ms", "2s", "1m", "1h"});
    }
    return r;
}

// The next request's time: mostly small steps, some long gaps, some
// backward jumps (a stepped clock).
int64_t next_time(std::mt19937_64 &g, int64_t now, int64_t period)
{
    const unsigned r = (unsigned) (g() % 100);
    if (r < 60) {
        return now + (int64_t) (g() % (uint64_t) (period / 20 + 2));
    }
    if (r < 85) {
        return now + (int64_t) (g() % (uint64_t) (period + 1));
    }
    if (r < 95) {
        return now + (int64_t) (g() % (uint64_t) (3 * period + 1));
    }
    return now - (int64_t) (g() % (uint64_t) (period / 2 + 1));
}

int64_t period_of(const rl_rule_t &r)
{
    return r.period_ms;
}

void run_trace(const std::string &sha, std::mt19937_64 &g, Trace &t, size_t ops, size_t *done)
{
    int64_t now = kT0 + (int64_t) (g() % 86400000);
    int64_t latest = now;  // the clock's furthest point so far
    int64_t period = 0;
    for (const rl_rule_t &r : t.rules) {
        period = std::max(period, period_of(r));
    }
    for (size_t op = 0; op < ops; op++) {
        latest = std::max(latest, now);
        // requests in flight end now and then (a few at a time at most)
        while (!t.flights.empty() && (t.flights.size() > 4 || g() % 3 == 0)) {
            if (!t.end(sha, g, now, op)) {
                return;
            }
        }
        // one request, or (t.batch) 1 to t.batch of them at this instant
        const size_t m = t.batch ? 1 + g() % t.batch : 1;
        std::vector<std::vector<std::string>> keys(m);
        std::vector<std::vector<uint64_t>> costs(m);
        for (size_t j = 0; j < m; j++) {
            const std::string key = "k" + std::to_string(g() % 3);
            for (const rl_rule_t &r : t.rules) {
                keys[j].push_back(key);
                const uint64_t top = std::max(r.limit, r.burst);
                const unsigned c = (unsigned) (g() % 100);
                costs[j].push_back(c < 70 ? 1 : c < 80 ? 0 : c < 97 ? g() % (top + 1) : top + 1 + g() % 3);
            }
        }
        const bool steady = latest - now <= RL_REDIS_CLOCK_SLACK_MS;
        if (t.batch ? !t.step_batch(sha, keys, costs, now, op, steady)
                    : !t.step(sha, keys[0], costs[0], now, op, steady)) {
            return;
        }
        *done += m;
        now = next_time(g, now, period);
    }
}

// ---- the script against a real redis-server ---------------------------------

TEST(RedisScript, EveryAlgorithmMatchesTheCoreOnRandomTraces)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    std::mt19937_64 g(20261122);
    int trace = 0;
    for (const char *a : kAlgorithms) {
        size_t done = 0;
        // many short traces, each with its own random rule: >= 10,000 ops
        while (done < 10000 && !HasFailure()) {
            Trace t({random_rule(g, a)}, RL_COMBINE_ALL, "conf:" + std::to_string(trace++) + ":");
            t.via = trace % 2 ? RL_REDIS_EVALSHA : RL_REDIS_FCALL;
            run_trace(sha, g, t, 400, &done);
        }
        EXPECT_GE(done, 10000u) << a;
        std::printf("%-15s %zu operations identical in Redis and the core\n", a, done);
    }
}

// 10,000 operations of stacked rules (2 or 3, of random algorithms, made
// by one of the random rules above), combined with all or any.
void run_stacks(std::mt19937_64 &g, std::string (*rule)(std::mt19937_64 &, const std::string &),
                const std::string &prefix)
{
    const std::string sha = script_sha();
    size_t done = 0;
    int trace = 0;
    while (done < 10000 && !::testing::Test::HasFailure()) {
        std::vector<std::string> rules;
        const size_t n = 2 + g() % 2;
        for (size_t i = 0; i < n; i++) {
            rules.push_back(rule(g, kAlgorithms[g() % 7]));
        }
        Trace t(rules, g() % 2 ? RL_COMBINE_ANY : RL_COMBINE_ALL, prefix + std::to_string(trace++) + ":");
        t.via = trace % 2 ? RL_REDIS_EVALSHA : RL_REDIS_FCALL;
        run_trace(sha, g, t, 200, &done);
    }
    EXPECT_GE(done, 10000u);
}

TEST(RedisScript, StackedRulesMatchTheCoreWithAllAndAny)
{
    NEED_REDIS();
    std::mt19937_64 g(7);
    run_stacks(g, random_rule, "stack:");
}

// charge= and ban=: requests in flight end in any order, charged from 0 to
// far past the debt's bound, and every decision, every charge, debt and cap
// is the same through the script as through the core.
TEST(RedisScript, ChargesAndBansMatchTheCoreOnRandomTraces)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    std::mt19937_64 g(26);
    int trace = 0;
    for (const char *a : kAlgorithms) {
        size_t done = 0;
        while (done < 10000 && !HasFailure()) {
            Trace t({random_charged_rule(g, a)}, RL_COMBINE_ALL, "charge:" + std::to_string(trace++) + ":");
            t.via = trace % 2 ? RL_REDIS_EVALSHA : RL_REDIS_FCALL;
            t.modest = g() % 3 == 0;
            run_trace(sha, g, t, 400, &done);
        }
        EXPECT_GE(done, 10000u) << a;
        std::printf("%-15s %zu operations with charges and bans identical in Redis and the core\n", a, done);
    }
    std::printf("%zu requests ended: %zu charged, %zu in debt, %zu capped; %zu bans, %zu refusals while banned; "
                "%zu decisions reserved more than their cost, %zu of them less than the key had left; %zu refused "
                "by reservations in flight alone\n",
                seen.ends, seen.charged, seen.debts, seen.capped, seen.bans, seen.banned, seen.reserved, seen.estimated,
                seen.told);
    // the traces went where the arithmetic differs most
    EXPECT_GT(seen.reserved, 1000u);
    EXPECT_GT(seen.estimated, 1000u);
    EXPECT_GT(seen.told, 100u);
    EXPECT_GT(seen.debts, 1000u);
    EXPECT_GT(seen.capped, 500u);
    EXPECT_GT(seen.bans, 500u);
    EXPECT_GT(seen.banned, 500u);
}

TEST(RedisScript, StackedRulesWithChargesAndBansMatchTheCore)
{
    NEED_REDIS();
    std::mt19937_64 g(2626);
    run_stacks(g, random_charged_rule, "stackc:");
}

// Batches (several requests in one call, at one instant of Redis's clock):
// every request's answer is the one the core gives deciding them one after
// the other, for every algorithm, stacks, charges and bans, whether the
// requests of a batch share their keys or not.
TEST(RedisScript, BatchesMatchTheCoreOneRequestAfterTheOther)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    std::mt19937_64 g(20261207);
    int trace = 0;
    for (const char *a : kAlgorithms) {
        size_t done = 0;
        while (done < 4000 && !HasFailure()) {
            Trace t({g() % 2 ? random_rule(g, a) : random_charged_rule(g, a)}, RL_COMBINE_ALL,
                    "batch:" + std::to_string(trace++) + ":");
            t.via = trace % 2 ? RL_REDIS_EVALSHA : RL_REDIS_FCALL;
            t.batch = 8;
            run_trace(sha, g, t, 200, &done);
        }
        EXPECT_GE(done, 4000u) << a;
    }
    size_t done = 0;
    while (done < 4000 && !HasFailure()) {
        std::vector<std::string> rules;
        const size_t n = 2 + g() % 2;
        for (size_t i = 0; i < n; i++) {
            rules.push_back(random_charged_rule(g, kAlgorithms[g() % 7]));
        }
        Trace t(rules, g() % 2 ? RL_COMBINE_ANY : RL_COMBINE_ALL, "batchs:" + std::to_string(trace++) + ":");
        t.via = trace % 2 ? RL_REDIS_EVALSHA : RL_REDIS_FCALL;
        t.batch = 8;
        run_trace(sha, g, t, 100, &done);
    }
    EXPECT_GE(done, 4000u);
}

}  // namespace
