// ratelimit-replay: reading a trace or an access log into requests, in the
// order they arrived.
#include <algorithm>
#include <iostream>

#include "replay.h"

namespace replay {

namespace {

const char *const kCombined =
    "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" "
    "\"$http_user_agent\"";

// A log's lines are in the order requests ended; with $request_time, the
// order they started is restored within the longest request time seen (at
// least a second, for the skew between workers' lines; at most this long,
// which bounds the requests held in memory).
constexpr int64_t kReorderMinMs = 1000;
constexpr int64_t kReorderMaxMs = 300000;

// Later in the heap: the one that arrives later, or comes later in the input.
bool later(const Request &a, const Request &b)
{
    return a.now != b.now ? a.now > b.now : a.index > b.index;
}

}  // namespace

Reader::Reader(const Options &o, std::istream &in, const std::string &name)
    : o_(o), in_(in), name_(name), format_(o.format == "combined" ? kCombined : o.format, &format_error_),
      charge_exprs_(o.rules.size())
{
    if (!o.log_mode) {
        return;
    }
    if (!format_error_.empty()) {
        usage_error("--log-format: " + format_error_);
    }
    if (!format_.has("msec") && !format_.has("time_local") && !format_.has("time_iso8601")) {
        usage_error("--log-format needs $msec, $time_local or $time_iso8601 for the request times");
    }
    if (o.has_charge_status && !format_.has("status")) {
        usage_error("--charge-status needs $status in the log format");
    }
    timed_ = format_.has("request_time");
    for (size_t i = 0; i < o.rules.size(); i++) {
        const Rule &r = o.rules[i];
        if (!r.rule.charge || o.has_charge_status) {
            continue;
        }
        // --charge, else the rule's own charge=, which the log must have
        charge_exprs_[i] = o.charge_expr.empty() ? r.charge_expr : o.charge_expr;
        for (const std::string &v : variables_of(charge_exprs_[i])) {
            if (format_.has(v)) {
                continue;
            }
            usage_error(o.charge_expr.empty()
                            ? "--rule '" + r.text + "': charge=" + r.charge_expr + ": the log format has no $" + v +
                                  ": give --charge-status or --charge"
                            : "--charge '" + o.charge_expr + "': the log format has no $" + v);
        }
    }
}

bool Reader::next(Request *rq)
{
    if (!timed_) {  // in the input's order
        if (!read_line(rq)) {
            return false;
        }
        late_ += rq->index > 0 && rq->now < last_;
        last_ = std::max(last_, rq->now);
        return true;
    }
    Request r;
    while (pending_.empty() || pending_.front().now >= ended_ - window_) {
        if (!read_line(&r)) {
            if (pending_.empty()) {
                return false;
            }
            break;  // the end: all that is held, in order
        }
        longest_ = std::max(longest_, r.duration_ms);
        window_ = std::min(std::max(longest_, kReorderMinMs), kReorderMaxMs);
        ended_ = std::max(ended_, r.now + r.duration_ms);
        pending_.push_back(std::move(r));
        std::push_heap(pending_.begin(), pending_.end(), later);
    }
    std::pop_heap(pending_.begin(), pending_.end(), later);
    *rq = std::move(pending_.back());
    pending_.pop_back();
    late_ += released_ && rq->now < last_;
    last_ = std::max(last_, rq->now);
    released_ = true;
    return true;
}

void Reader::notes() const
{
    const bool slots =
        std::any_of(o_.rules.begin(), o_.rules.end(), [](const Rule &r) { return rl_rule_holds_slots(&r.rule); });
    if (o_.log_mode && !timed_ && slots) {
        std::cerr << "ratelimit-replay: the log format has no $request_time: each request ended at once, and "
                     "a concurrency rule saw none of them in flight together\n";
    }
    if (late_ > 0) {
        std::cerr << "ratelimit-replay: " << late_ << " request" << (late_ == 1 ? "" : "s")
                  << " started before requests already replayed, and "
                  << (late_ == 1 ? "was decided at its own time" : "were each decided at their own time")
                  << (timed_ ? " (a log's lines are put in the order their requests started within the longest "
                               "$request_time seen, at least 1s, at most 5m)"
                             : " (the input is replayed in the order of its lines)")
                  << "\n";
    }
}

// The next line that is a request, in the input's order; an unreadable one
// is reported and skipped.
bool Reader::read_line(Request *rq)
{
    std::string line;
    while (std::getline(in_, line)) {
        lineno_++;
        if (line.empty() || line[0] == '#') {
            continue;
        }
        if (o_.log_mode ? read_log(line, rq) : read_trace(line, rq)) {
            rq->index = count_++;
            return true;
        }
        bad++;
        std::cerr << "ratelimit-replay: " << name_ << ":" << lineno_ << ": skipped, not "
                  << (o_.log_mode ? "in the log format" : "\"" REPLAY_TRACE_SYNTAX "\"") << ": " << line.substr(0, 200)
                  << "\n";
    }
    return false;
}

bool Reader::read_trace(const std::string &line, Request *rq)
{
    TraceLine t;
    if (!parse_trace_line(line, &t)) {
        return false;
    }
    rq->now = t.time_ms;
    rq->duration_ms = t.duration_ms;
    rq->cost = t.cost;
    rq->shown = t.key;
    rq->keys.assign(o_.rules.size(), t.key);
    rq->charges.assign(o_.rules.size(), RL_NO_CHARGE);
    rq->abandoned = false;
    for (size_t i = 0; i < o_.rules.size(); i++) {
        if (o_.rules[i].rule.charge) {  // no charge column: the cost, as nginx does for an empty value
            rq->charges[i] = t.has_charge ? t.charge : cost_of(i, t.cost);
        }
    }
    return true;
}

bool Reader::read_log(const std::string &line, Request *rq)
{
    bool missing = false;
    int64_t logged;
    if (!format_.match(line, fields_) || !parse_log_time(fields_, &logged)) {
        return false;
    }
    rq->duration_ms = 0;
    if (timed_ && !parse_seconds(fields_["request_time"], &rq->duration_ms)) {
        return false;
    }
    rq->now = std::max<int64_t>(0, logged - rq->duration_ms);  // logged when it ended
    rq->keys.resize(o_.rules.size());
    for (size_t i = 0; i < o_.rules.size(); i++) {
        const std::string &expr = o_.rules[i].key_expr.empty() ? o_.key_expr : o_.rules[i].key_expr;
        rq->keys[i] = expand(expr, fields_, &missing);
    }
    rq->cost = 1;
    if (!o_.cost_expr.empty() && (!parse_uint64(expand(o_.cost_expr, fields_, &missing), &rq->cost) || rq->cost == 0)) {
        rq->cost = 1;  // as in nginx: not a positive integer counts as 1 (zero_cost=on is nginx's only)
    }
    rq->charges.assign(o_.rules.size(), RL_NO_CHARGE);
    rq->bad_charges = 0;
    rq->charge_error.clear();
    rq->abandoned = format_.has("status") && fields_["status"] == "499";
    for (size_t i = 0; i < o_.rules.size() && !missing; i++) {
        if (o_.rules[i].rule.charge) {
            rq->charges[i] = charge_of(i, cost_of(i, rq->cost), rq, &missing);
        }
    }
    rq->shown = expand(o_.key_expr, fields_, &missing);
    return !missing;
}

// Rule i's charge from the line's fields: --charge-status, --charge or its
// own charge=; a value that is not a count charges the cost, as in nginx
// (rl_rule_charge), and is told if the request is charged.
uint64_t Reader::charge_of(size_t i, uint64_t cost, Request *rq, bool *missing)
{
    if (o_.has_charge_status) {
        return o_.charge_status.matches(fields_["status"]) ? 1 : 0;
    }
    const std::string value = expand(charge_exprs_[i], fields_, missing);
    uint64_t units;
    char err[RL_ERR_MAX];
    if (rl_rule_charge(value.data(), value.size(), cost, &units, err, sizeof(err)) != RL_OK) {
        rq->bad_charges |= 1u << i;  // told if the request is charged
        if (rq->charge_error.empty()) {
            rq->charge_error = name_ + ":" + std::to_string(lineno_) + ": " + err;
        }
    }
    return units;
}

uint64_t Reader::cost_of(size_t i, uint64_t cost) const
{
    return o_.rules[i].own_cost ? o_.rules[i].rule.cost : cost;
}

}  // namespace replay
