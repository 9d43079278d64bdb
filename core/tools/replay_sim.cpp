// ratelimit-replay: the requests decided in simulated time, through the
// core's rl_decide and rl_request_end, as nginx calls them.
//
// Each request is decided when it arrives.  One admitted at t runs for its
// duration (after its delay, if a shaper delays it) and ends then: its
// charges are spent and its slots given back, in time order with the other
// arrivals (an event queue); without a duration it ends at once, before the
// next arrival.  One waiting for a slot (concurrency with max_wait) is
// decided again whenever a request's end gives a slot back, and a last
// time when its max_wait is over.  At the same instant, requests end, then
// waits are over, then requests arrive.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>

#include "replay.h"

namespace replay {

namespace {

enum { kEnd = 0, kDeadline = 1 };

bool slots(const rl_check_t &c)
{
    return c.key_len > 0 && rl_rule_holds_slots(c.rule) && c.slot != 0;
}

}  // namespace

struct Simulator::Flight {
    Request r;
    std::vector<rl_check_t> checks;
    rl_request_t rq{};
    bool waited = false;           // it waited for a slot,
    bool waiting = false;          //   and still does,
    std::vector<uint64_t> queues;  //   in the queues of these keys
    std::vector<char> banned;
};

Simulator::Simulator(Options &o, Sink sink)
    : o_(o), sink_(std::move(sink)), counters_(o.rules.size()), bans_(o.rules.size()), key_peak_(o.rules.size()),
      in_flight_(o.rules.size())
{
    // one table for every rule, laid out as nginx would lay out their zone
    std::vector<uint32_t> blobs;
    uint64_t blocks = 0;
    for (Rule &r : o.rules) {
        blobs.push_back(rl_rule_block_size(&r.rule));
        blocks += blobs.back() != 0;
        const std::string &expr = r.key_expr.empty() ? o.key_expr : r.key_expr;
        r.identity = rl_rule_identity(&r.rule, expr.data(), expr.size());
    }
    table_ = mmap(nullptr, o.zone_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char err[RL_ERR_MAX];
    if (table_ == MAP_FAILED ||
        rl_table_init_names(table_, o.zone_size, blobs.data(), blobs.size(), 0, rl_table_stack(o.rules.size(), blocks),
                            nullptr, err, sizeof(err)) != RL_OK) {
        std::cerr << "ratelimit-replay: --zone-size " << o.zone_size << ": "
                  << (table_ == MAP_FAILED ? std::strerror(errno) : err) << "\n";
        std::exit(2);
    }
    // each rule's counters, as nginx's stats count them
    for (size_t i = 0; i < o.rules.size(); i++) {
        counters_[i] = 1 + rl_table_rule_slot(table_, o.rules[i].rule.name);
    }
}

Simulator::~Simulator() = default;

void Simulator::arrive(Request r)
{
    run_until(r.now);
    const uint64_t id = r.index;
    std::unique_ptr<Flight> &slot = flights_[id];
    slot.reset(new Flight());
    Flight &f = *slot;
    f.r = std::move(r);
    f.checks.resize(o_.rules.size());
    f.banned.resize(o_.rules.size());
    for (size_t i = 0; i < f.checks.size(); i++) {
        rl_check_t &c = f.checks[i] = rl_check_t{};
        c.table = table_;
        c.rule = &o_.rules[i].rule;
        c.identity = o_.rules[i].identity;
        c.key = f.r.keys[i].data();
        c.key_len = f.r.keys[i].size();  // empty: the rule does not apply, as in nginx
        c.cost = o_.rules[i].own_cost ? o_.rules[i].rule.cost : f.r.cost;
        c.counters = counters_[i];
    }
    f.rq.checks = f.checks.data();
    f.rq.n = f.checks.size();
    f.rq.combine = o_.combine;
    f.rq.holder = 1;  // one process: every holder lives
    rl_request_hash(&f.rq);
    decide(f, f.r.now, false);
}

void Simulator::finish()
{
    run_until(INT64_MAX);
}

void Simulator::run_until(int64_t t)
{
    while (!events_.empty() && events_.top().at <= t) {
        const Event e = events_.top();
        events_.pop();
        auto it = flights_.find(e.id);
        if (it == flights_.end()) {
            continue;
        }
        if (e.kind == kEnd) {
            end(*it->second, e.at);
        } else if (it->second->waiting) {
            decide(*it->second, e.at, true);
        }
    }
}

void Simulator::schedule(int64_t at, int kind, uint64_t id)
{
    events_.push(Event{at, kind, seq_++, id});
}

void Simulator::decide(Flight &f, int64_t now, bool last)
{
    const uint64_t id = f.r.index;
    // a refusal starts a ban for the rules not banning the key already
    for (size_t i = 0; i < f.checks.size(); i++) {
        const rl_check_t &c = f.checks[i];
        f.banned[i] = 0;
        if (c.rule->ban_ms > 0 && c.key_len > 0) {
            rl_peek_t p;
            rl_table_peek(table_, c.rule, c.tag, c.cost, now, &p);
            f.banned[i] = p.banned_ms > 0;
        }
    }
    f.rq.last = last;
    const int verdict = rl_decide(&f.rq, now);
    if (verdict == RL_VERDICT_QUEUED) {
        if (!f.waiting) {
            f.waited = f.waiting = true;
            schedule(now + f.rq.delay_ms, kDeadline, id);
        }
        for (const rl_check_t &c : f.checks) {  // each key whose queue it is in
            if (c.ticket != 0 && std::find(f.queues.begin(), f.queues.end(), c.tag) == f.queues.end()) {
                f.queues.push_back(c.tag);
                queues_[c.tag].push_back(id);
            }
        }
        return;
    }
    f.waiting = false;
    for (size_t i = 0; i < f.checks.size() && verdict == RL_VERDICT_REJECTED; i++) {
        bans_[i] += f.checks[i].decision.banned_ms > 0 && !f.banned[i];
    }
    sink_(outcome(f, now));
    if (verdict != RL_VERDICT_PASSED && verdict != RL_VERDICT_DELAYED) {
        flights_.erase(id);  // it holds nothing
        return;
    }
    for (size_t i = 0; i < f.checks.size(); i++) {
        if (slots(f.checks[i])) {
            key_peak_[i] = std::max(key_peak_[i], ++in_flight_[i][f.checks[i].tag]);
        }
    }
    schedule(now + f.rq.delay_ms + f.r.duration_ms, kEnd, id);
}

void Simulator::end(Flight &f, int64_t at)
{
    std::vector<uint64_t> freed;  // the keys whose slots it held
    for (size_t i = 0; i < f.checks.size(); i++) {
        rl_check_t &c = f.checks[i];
        c.charge = rl_check_charge_wanted(&c, f.r.abandoned) ? f.r.charges[i] : RL_NO_CHARGE;
        if (c.charge != RL_NO_CHARGE && (f.r.bad_charges >> i & 1) && bad_charges_++ == 0) {
            first_bad_charge_ = f.r.charge_error;
        }
        if (slots(c)) {
            freed.push_back(c.tag);
            if (--in_flight_[i][c.tag] == 0) {
                in_flight_[i].erase(c.tag);
            }
        }
    }
    const bool woke = rl_request_end(&f.rq, at) > 0;
    flights_.erase(f.r.index);
    for (size_t i = 0; woke && i < freed.size(); i++) {
        wake(freed[i], at);
    }
}

// A slot of a key was given back: the requests waiting for one decided
// again, oldest first, up to the first that still waits for this key
// (those behind it wait too: the key's queue is first come first served).
void Simulator::wake(uint64_t tag, int64_t at)
{
    auto q = queues_.find(tag);
    if (q == queues_.end()) {
        return;
    }
    std::deque<uint64_t> &ids = q->second;
    for (size_t k = 0; k < ids.size();) {
        const uint64_t id = ids[k];
        auto it = flights_.find(id);
        if (it != flights_.end() && it->second->waiting) {
            decide(*it->second, at, false);
            it = flights_.find(id);  // gone if refused
        }
        if (it != flights_.end() && it->second->waiting) {
            const std::vector<rl_check_t> &checks = it->second->checks;
            if (std::any_of(checks.begin(), checks.end(),
                            [&](const rl_check_t &c) { return c.tag == tag && c.decision.queued; })) {
                break;
            }
            k++;  // waits for another key's slot
        } else if (k == 0) {
            ids.pop_front();  // waits no more
        } else {
            k++;
        }
    }
    if (ids.empty()) {
        queues_.erase(tag);  // by its key: deciding may have rehashed the map
    }
}

void Simulator::notes() const
{
    if (bad_charges_ > 0) {
        std::cerr << "ratelimit-replay: " << bad_charges_ << " charge" << (bad_charges_ == 1 ? " was" : "s were")
                  << " not a non-negative integer, and charged the request's cost, as in nginx; the first, "
                  << first_bad_charge_ << "\n";
    }
}

Outcome Simulator::outcome(const Flight &f, int64_t now) const
{
    Outcome out;
    const rl_request_t &rq = f.rq;
    out.index = f.r.index;
    out.time_ms = f.r.now;
    out.shown = f.r.shown;
    out.waited = f.waited;
    out.waited_ms = f.waited ? now - f.r.now : 0;
    if (rq.verdict == RL_VERDICT_EXEMPT) {
        out.decision.allowed = 1;  // what an exempt request (every rule's key empty) is described as
    } else {
        out.decision = rq.checks[rq.binding].decision;
        out.rule = o_.rules[rq.binding].rule.name;
    }
    out.verdict = rq.verdict == RL_VERDICT_REJECTED  ? Verdict::kDeny
                  : rq.verdict == RL_VERDICT_DELAYED ? Verdict::kDelay
                  : f.waited                         ? Verdict::kWait
                                                     : Verdict::kAllow;
    return out;
}

std::vector<RuleFigures> Simulator::figures() const
{
    rl_rule_stats_t st[RL_RULE_STATS_MAX];
    const size_t n = rl_table_rule_stats(table_, st, RL_RULE_STATS_MAX);
    std::vector<RuleFigures> out;
    for (size_t i = 0; i < o_.rules.size(); i++) {
        const rl_rule_t &rule = o_.rules[i].rule;
        RuleFigures g;
        g.name = rule.name;
        g.charges = rule.charge != 0;
        g.bans = rule.ban_ms > 0;
        g.slots = rl_rule_holds_slots(&rule);
        if (!g.charges && !g.bans && !g.slots) {
            continue;
        }
        for (size_t k = 0; k < n; k++) {
            if (g.name == st[k].name) {
                g.charged = st[k].charged;
                g.debts = st[k].debts;
                g.peak = st[k].peak;
                g.waited = st[k].waited;
                g.refused = st[k].count[RL_OUTCOME_REJECTED];
            }
        }
        g.bans_started = bans_[i];
        g.key_peak = key_peak_[i];
        out.push_back(g);
    }
    return out;
}

}  // namespace replay
