// ratelimit-replay: what its parts share.  Reading (replay_read.cpp, with
// the pure parsing of replay_parse.cpp), deciding in simulated time
// (replay_sim.cpp) and reporting (replay.cpp) are apart.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <istream>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "ratelimit.h"

namespace replay {

// ---- pure parsing (replay_parse.cpp) ---------------------------------------

// An nginx log_format: literal text and $variables, matched against a line
// by taking each variable up to the literal that follows it.
class LogFormat {
public:
    // An error (a "$" without a name) is reported in *err, and the format
    // then matches nothing.
    LogFormat(const std::string &format, std::string *err);

    bool match(const std::string &line, std::map<std::string, std::string> &fields) const;
    bool has(const std::string &var) const;

private:
    struct Part {
        std::string literal;  // text before the variable
        std::string var;
    };
    std::vector<Part> parts_;
    std::string tail_;
};

// The variables an expression like "$remote_addr:${http_x_user}" names.
std::vector<std::string> variables_of(const std::string &expr);

// The expression with its variables replaced by the line's fields (nginx's
// "-" for an empty value is empty); *missing is set for one not logged.
std::string expand(const std::string &expr, const std::map<std::string, std::string> &fields, bool *missing);

bool parse_uint64(const std::string &s, uint64_t *v);

// "64m" and the like.
bool parse_size(const std::string &s, size_t *out);

// $msec ("1700000000.123"), $time_local ("22/Nov/2026:10:43:06 +0000") or
// $time_iso8601 ("2026-11-22T10:43:06+00:00"), to Unix ms.
bool parse_log_time(const std::map<std::string, std::string> &f, int64_t *ms);

// $request_time ("0.250": seconds with milliseconds) to ms.
bool parse_seconds(const std::string &s, int64_t *ms);

// One line of a trace: "<unix_time_ms> <key> [cost [charge [duration_ms]]]",
// "-" for a column left out.
#define REPLAY_TRACE_SYNTAX "<unix_time_ms> <key> [cost [charge [duration_ms]]]"

struct TraceLine {
    int64_t time_ms = 0;
    std::string key;
    uint64_t cost = 1;
    bool has_charge = false;
    uint64_t charge = 0;
    int64_t duration_ms = 0;
};

bool parse_trace_line(const std::string &line, TraceLine *out);

// --charge-status: "401,403", "4xx", "401,5xx".  matches() is what a
// status charges: 1 if it is listed, else 0.
class StatusList {
public:
    bool parse(const std::string &list);
    bool matches(const std::string &status) const;

private:
    std::vector<std::string> patterns_;  // three characters, 'x' any digit
};

// The value of NAME= among whitespace-separated parameters, if present.
bool param_of(const std::string &text, const char *name, std::string *value);

// ---- the command line (replay.cpp) -----------------------------------------

[[noreturn]] void usage_error(const std::string &msg);

struct Rule {
    std::string text;
    std::string key_expr;     // key= of the rule, if any
    std::string charge_expr;  // charge= of the rule, if any
    bool own_cost = false;    // cost=N: the trace's cost does not apply
    rl_rule_t rule;
    uint64_t identity = 0;
    // rule.name's room, on the heap: it stays where it is as rules move
    std::unique_ptr<char[]> name{new char[RL_NAME_MAX]};
};

struct Options {
    std::vector<Rule> rules;
    std::string file, format, key_expr, cost_expr, charge_expr;
    StatusList charge_status;
    bool has_charge_status = false;
    int combine = RL_COMBINE_ALL;
    bool summary_only = false, json = false, log_mode = false;
    size_t zone_size = 64u << 20;
};

// ---- reading (replay_read.cpp) ---------------------------------------------

// One request as read: when it arrives, its keys, what it costs, what each
// rule with charge= charges when it ends, and how long it runs.
struct Request {
    uint64_t index = 0;  // its place among the input's requests
    int64_t now = 0;
    int64_t duration_ms = 0;
    std::string shown;              // the key printed
    std::vector<std::string> keys;  // each rule's key (empty: exempt)
    uint64_t cost = 1;
    std::vector<uint64_t> charges;  // each rule's (RL_NO_CHARGE: none)
    bool abandoned = false;         // its client left first ($status 499)
    uint32_t bad_charges = 0;       // bit i: rule i's value was not a count
    std::string charge_error;       //   and why (the first), with the line
};

// The input's requests in the order they arrived: a trace's and a log's in
// the order of their lines, but a log with $request_time's in the order
// its requests started (they are logged when they end).
class Reader {
public:
    Reader(const Options &o, std::istream &in, const std::string &name);

    bool next(Request *rq);
    void notes() const;  // what the end of the run tells on stderr

    uint64_t bad = 0;  // lines skipped

private:
    bool read_line(Request *rq);
    bool read_trace(const std::string &line, Request *rq);
    bool read_log(const std::string &line, Request *rq);
    uint64_t charge_of(size_t i, uint64_t cost, Request *rq, bool *missing);
    uint64_t cost_of(size_t i, uint64_t cost) const;

    const Options &o_;
    std::istream &in_;
    std::string name_;
    std::string format_error_;
    LogFormat format_;
    std::vector<std::string> charge_exprs_;  // each rule's, in a log
    bool timed_ = false;                     // a log with $request_time
    std::map<std::string, std::string> fields_;
    uint64_t lineno_ = 0, count_ = 0;
    std::vector<Request> pending_;  // a heap: read, not yet replayed
    int64_t longest_ = 0, window_ = 0, ended_ = 0, last_ = 0;
    bool released_ = false;
    uint64_t late_ = 0;
};

// ---- deciding (replay_sim.cpp) ---------------------------------------------

enum class Verdict { kAllow, kDelay, kWait, kDeny };

// A request's final decision, as the report prints it.
struct Outcome {
    uint64_t index = 0;
    int64_t time_ms = 0;
    std::string shown;
    Verdict verdict = Verdict::kAllow;
    rl_decision_t decision{};  // the binding rule's
    std::string rule;          // its name ("" when exempt)
    bool waited = false;       // it waited for a slot (max_wait),
    int64_t waited_ms = 0;     //   so long
};

// What the report says of a rule with charge=, ban= or concurrency.
struct RuleFigures {
    std::string name;
    bool charges = false, bans = false, slots = false;
    uint64_t charged = 0, debts = 0, bans_started = 0;
    uint64_t peak = 0, key_peak = 0, waited = 0, refused = 0;
};

// The requests decided in simulated time, through the core as nginx calls
// it: each decided when it arrives (rl_decide), and ended (rl_request_end:
// its charges spent, its slots given back) when its duration is over; one
// waiting for a slot is decided again when a slot is given back, and a
// last time when its max_wait is over.
class Simulator {
public:
    using Sink = std::function<void(const Outcome &)>;

    Simulator(Options &o, Sink sink);
    ~Simulator();

    void arrive(Request r);
    void finish();  // every request still running or waiting ends
    std::vector<RuleFigures> figures() const;
    void notes() const;  // what the end of the run tells on stderr

private:
    struct Flight;
    struct Event {
        int64_t at;
        int kind;  // kEnd, kDeadline: at the same time, ends first
        uint64_t seq;
        uint64_t id;  // the request's index
        bool operator>(const Event &e) const
        {
            return at != e.at ? at > e.at : kind != e.kind ? kind > e.kind : seq > e.seq;
        }
    };

    void run_until(int64_t t);
    void decide(Flight &f, int64_t now, bool last);
    void end(Flight &f, int64_t at);
    void wake(uint64_t tag, int64_t at);
    void schedule(int64_t at, int kind, uint64_t id);
    Outcome outcome(const Flight &f, int64_t now) const;

    Options &o_;
    Sink sink_;
    void *table_;
    std::vector<int> counters_;  // each rule's in the table, plus 1
    std::unordered_map<uint64_t, std::unique_ptr<Flight>> flights_;
    // the requests waiting for a key's slot (by its tag), in the order they
    // began to wait; one that waits no more is dropped when met
    std::unordered_map<uint64_t, std::deque<uint64_t>> queues_;
    std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
    uint64_t seq_ = 0;
    std::vector<uint64_t> bans_, key_peak_;
    std::vector<std::unordered_map<uint64_t, uint64_t>> in_flight_;  // each rule's, by key tag
    uint64_t bad_charges_ = 0;
    std::string first_bad_charge_;
};

}  // namespace replay
