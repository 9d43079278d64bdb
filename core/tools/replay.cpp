// ratelimit-replay: try a policy against recorded traffic before deploying it.
//
//   ratelimit-replay [--combine all|any] --rule 'limit=10 period=1s burst=5' [--rule ...]
//                    [--log-format combined|'FORMAT' [--key '$remote_addr'] [--cost '$field']]
//                    [--zone-size 64m] [--summary] [--json] [FILE]
//
// Each request goes through rl_decide(), exactly as in nginx: the same rule
// parser (so the same error messages), the same transitions, the same
// all/any combination, binding rule and verdict, over a key table in memory.
// Reading (Reader), deciding (Decider) and reporting (Report) are apart.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ratelimit.h"

namespace {

const char *const kCombined =
    "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" "
    "\"$http_user_agent\"";

[[noreturn]] void usage_error(const std::string &msg)
{
    std::cerr << "ratelimit-replay: " << msg << "\n"
              << "usage: ratelimit-replay [--combine all|any] --rule 'RULE' [--rule 'RULE' ...]\n"
                 "                        [--log-format combined|'FORMAT'] [--key EXPR] [--cost EXPR]\n"
                 "                        [--zone-size SIZE] [--summary] [--json] [FILE]\n";
    std::exit(2);
}

// An nginx log_format: literal text and $variables, matched against a line
// by taking each variable up to the literal that follows it.
class LogFormat {
public:
    explicit LogFormat(const std::string &format)
    {
        std::string lit;
        for (size_t i = 0; i < format.size();) {
            if (format[i] == '$') {
                size_t j = i + 1;
                bool braces = j < format.size() && format[j] == '{';
                j += braces;
                size_t start = j;
                while (j < format.size() && (isalnum((unsigned char) format[j]) || format[j] == '_')) {
                    j++;
                }
                if (j == start) {
                    usage_error("--log-format: \"$\" without a variable name at offset " + std::to_string(i));
                }
                parts_.push_back({lit, format.substr(start, j - start)});
                lit.clear();
                i = j + (braces && j < format.size() && format[j] == '}');
            } else {
                lit += format[i++];
            }
        }
        tail_ = lit;
    }

    bool match(const std::string &line, std::map<std::string, std::string> &fields) const
    {
        size_t pos = 0;
        fields.clear();
        for (size_t k = 0; k < parts_.size(); k++) {
            const Part &p = parts_[k];
            if (line.compare(pos, p.literal.size(), p.literal) != 0) {
                return false;
            }
            pos += p.literal.size();
            const std::string &next = k + 1 < parts_.size() ? parts_[k + 1].literal : tail_;
            size_t end = next.empty() ? (k + 1 < parts_.size() ? pos : line.size()) : line.find(next, pos);
            if (end == std::string::npos) {
                return false;
            }
            fields[p.var] = line.substr(pos, end - pos);
            pos = end;
        }
        return line.compare(pos, std::string::npos, tail_) == 0;
    }

    bool has(const std::string &var) const
    {
        return std::any_of(parts_.begin(), parts_.end(), [&](const Part &p) { return p.var == var; });
    }

private:
    struct Part {
        std::string literal;  // text before the variable
        std::string var;
    };
    std::vector<Part> parts_;
    std::string tail_;
};

// "$remote_addr:$http_x_user": variables replaced by the line's fields.
std::string expand(const std::string &expr, const std::map<std::string, std::string> &fields, bool *missing)
{
    std::string out;
    for (size_t i = 0; i < expr.size();) {
        if (expr[i] != '$') {
            out += expr[i++];
            continue;
        }
        size_t j = i + 1;
        bool braces = j < expr.size() && expr[j] == '{';
        j += braces;
        size_t start = j;
        while (j < expr.size() && (isalnum((unsigned char) expr[j]) || expr[j] == '_')) {
            j++;
        }
        auto f = fields.find(expr.substr(start, j - start));
        if (f == fields.end()) {
            *missing = true;
        } else if (f->second != "-") {  // nginx logs an empty value as "-"
            out += f->second;
        }
        i = j + (braces && j < expr.size() && expr[j] == '}');
    }
    return out;
}

bool parse_uint64(const std::string &s, uint64_t *v)
{
    if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) {
        return false;
    }
    *v = std::stoull(s);
    return true;
}

// $msec ("1700000000.123"), $time_local ("22/Nov/2026:10:43:06 +0000") or
// $time_iso8601 ("2026-11-22T10:43:06+00:00"), to Unix ms.
bool parse_log_time(const std::map<std::string, std::string> &f, int64_t *ms)
{
    auto it = f.find("msec");
    if (it != f.end()) {
        unsigned long long s, frac;
        char dot;
        if (std::sscanf(it->second.c_str(), "%llu%c%3llu", &s, &dot, &frac) == 3 && dot == '.') {
            *ms = (int64_t) s * 1000 + (int64_t) frac;
            return true;
        }
        return false;
    }
    std::tm tm{};
    char sign;
    int oh, om;
    const char *end;
    if ((it = f.find("time_local")) != f.end()) {
        end = strptime(it->second.c_str(), "%d/%b/%Y:%H:%M:%S", &tm);
        if (end == nullptr || std::sscanf(end, " %c%2d%2d", &sign, &oh, &om) != 3) {
            return false;
        }
    } else if ((it = f.find("time_iso8601")) != f.end()) {
        end = strptime(it->second.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
        if (end == nullptr || std::sscanf(end, "%c%2d:%2d", &sign, &oh, &om) != 3) {
            return false;
        }
    } else {
        return false;
    }
    const int64_t offset = (sign == '-' ? -1 : 1) * (oh * 3600 + om * 60);
    *ms = ((int64_t) timegm(&tm) - offset) * 1000;
    return true;
}

bool parse_size(const std::string &s, size_t *out)
{
    uint64_t v;
    std::string digits = s, unit;
    if (!s.empty() && std::strchr("kKmMgG", s.back())) {
        digits = s.substr(0, s.size() - 1);
        unit = s.substr(s.size() - 1);
    }
    if (!parse_uint64(digits, &v)) {
        return false;
    }
    const uint64_t scale = unit.empty()                   ? 1
                           : (unit == "k" || unit == "K") ? 1024
                           : (unit == "m" || unit == "M") ? 1 << 20
                                                          : 1 << 30;
    *out = (size_t) (v * scale);
    return true;
}

std::string printable(const std::string &key)
{
    std::string out;
    char buf[8];
    for (unsigned char c : key) {
        if (c > 0x20 && c < 0x7f && c != '\\') {
            out += (char) c;
        } else {
            std::snprintf(buf, sizeof(buf), "\\x%02x", c);
            out += buf;
        }
    }
    return out.empty() ? "-" : out;
}

std::string json_string(const std::string &s)
{
    std::string out = "\"";
    char buf[8];
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += (char) c;
        } else if (c < 0x20 || c >= 0x7f) {
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
        } else {
            out += (char) c;
        }
    }
    return out + "\"";
}

struct Rule {
    std::string text;
    std::string key_expr;   // key= of the rule, if any
    bool own_cost = false;  // cost=N: the trace's cost does not apply
    rl_rule_t rule;
    uint64_t identity = 0;
};

// The value of NAME= among whitespace-separated parameters, if present.
bool param_of(const std::string &text, const char *name, std::string *value)
{
    const std::string spaced = " " + text, needle = std::string(" ") + name + "=";
    const size_t at = spaced.find(needle);
    if (at == std::string::npos) {
        return false;
    }
    const size_t from = at + needle.size() - 1;  // in text
    *value = text.substr(from, text.find_first_of(" \t", from) - from);
    return true;
}

// ---- the command line ----------------------------------------------------

struct Options {
    std::vector<Rule> rules;
    std::string file, format, key_expr, cost_expr;
    int combine = RL_COMBINE_ALL;
    bool summary_only = false, json = false, log_mode = false;
    size_t zone_size = 64u << 20;
};

Options parse_options(int argc, char **argv)
{
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                usage_error(a + " needs a value");
            }
            return argv[++i];
        };
        if (a == "--rule") {
            Rule r;
            r.text = value();
            char err[RL_ERR_MAX];
            if (rl_rule_parse(&r.rule, r.text.c_str(), err, sizeof(err)) != RL_OK) {
                std::cerr << "ratelimit-replay: --rule '" << r.text << "': " << err << "\n";
                std::exit(2);
            }
            std::string ignored;
            param_of(r.text, "key", &r.key_expr);
            r.own_cost = param_of(r.text, "cost", &ignored);
            o.rules.push_back(r);
        } else if (a == "--combine") {
            std::string v = value();
            if (v != "all" && v != "any") {
                usage_error("invalid value \"" + v + "\" for --combine: expected \"all\" or \"any\"");
            }
            o.combine = v == "any" ? RL_COMBINE_ANY : RL_COMBINE_ALL;
        } else if (a == "--log-format") {
            o.format = value();
            o.log_mode = true;
        } else if (a == "--key") {
            o.key_expr = value();
        } else if (a == "--cost") {
            o.cost_expr = value();
        } else if (a == "--zone-size") {
            std::string v = value();
            if (!parse_size(v, &o.zone_size)) {
                usage_error("invalid value \"" + v + "\" for --zone-size: expected a size like 64m");
            }
        } else if (a == "--summary") {
            o.summary_only = true;
        } else if (a == "--json") {
            o.json = true;
        } else if (a == "-h" || a == "--help") {
            usage_error("replays a trace against rate-limit rules");
        } else if (a.size() > 1 && a[0] == '-') {
            usage_error("unknown option \"" + a + "\"");
        } else if (o.file.empty()) {
            o.file = a;
        } else {
            usage_error("one input file at most");
        }
    }
    if (o.rules.empty()) {
        usage_error("at least one --rule is needed");
    }
    if (o.rules.size() > RL_RULES_MAX) {
        usage_error("at most " + std::to_string(RL_RULES_MAX) + " rules");
    }
    if (!o.log_mode && (!o.key_expr.empty() || !o.cost_expr.empty())) {
        usage_error("--key and --cost apply to --log-format input");
    }
    if (o.log_mode && o.key_expr.empty()) {
        o.key_expr = "$remote_addr";
    }
    return o;
}

// ---- reading: one request of the trace or the log at a time --------------

struct Request {
    int64_t now = 0;
    std::string shown;              // the key printed
    std::vector<std::string> keys;  // each rule's key (empty: exempt)
    uint64_t cost = 1;
};

class Reader {
public:
    Reader(const Options &o, std::istream &in, const std::string &name)
        : o_(o), in_(in), name_(name), format_(o.format == "combined" ? kCombined : o.format)
    {
        if (o.log_mode && !format_.has("msec") && !format_.has("time_local") && !format_.has("time_iso8601")) {
            usage_error("--log-format needs $msec, $time_local or $time_iso8601 for the request times");
        }
    }

    // The next request; an unreadable line is reported and skipped.
    bool next(Request *rq)
    {
        std::string line;
        while (std::getline(in_, line)) {
            lineno_++;
            if (line.empty() || line[0] == '#') {
                continue;
            }
            if (read(line, rq)) {
                return true;
            }
            bad++;
            std::cerr << "ratelimit-replay: " << name_ << ":" << lineno_ << ": skipped, not "
                      << (o_.log_mode ? "in the log format" : "\"<unix_time_ms> <key> [cost]\"") << ": "
                      << line.substr(0, 200) << "\n";
        }
        return false;
    }

    uint64_t bad = 0;

private:
    bool read(const std::string &line, Request *rq)
    {
        rq->cost = 1;
        rq->keys.resize(o_.rules.size());
        if (!o_.log_mode) {
            char t[32], k[4096], c[32];
            const int n = std::sscanf(line.c_str(), "%31s %4095s %31s", t, k, c);
            uint64_t ms = 0;
            if (n < 2 || !parse_uint64(t, &ms) || (n == 3 && !parse_uint64(c, &rq->cost))) {
                return false;
            }
            rq->now = (int64_t) ms;
            rq->shown = k;
            std::fill(rq->keys.begin(), rq->keys.end(), rq->shown);
            return true;
        }
        bool missing = false;
        if (!format_.match(line, fields_) || !parse_log_time(fields_, &rq->now)) {
            return false;
        }
        for (size_t i = 0; i < o_.rules.size(); i++) {
            const std::string &expr = o_.rules[i].key_expr.empty() ? o_.key_expr : o_.rules[i].key_expr;
            rq->keys[i] = expand(expr, fields_, &missing);
        }
        if (!o_.cost_expr.empty() &&
            (!parse_uint64(expand(o_.cost_expr, fields_, &missing), &rq->cost) || rq->cost == 0)) {
            rq->cost = 1;  // as in nginx: not a positive integer counts as 1 (zero_cost=on is nginx's only)
        }
        rq->shown = expand(o_.key_expr, fields_, &missing);
        return !missing;
    }

    const Options &o_;
    std::istream &in_;
    std::string name_;
    LogFormat format_;
    std::map<std::string, std::string> fields_;
    uint64_t lineno_ = 0;
};

// ---- deciding: the rules' zone, and the core's rl_decide, as in nginx ----

class Decider {
public:
    explicit Decider(Options &o) : o_(o), checks_(o.rules.size())
    {
        // one table for every rule, laid out as nginx would lay out their zone
        std::vector<uint32_t> blobs;
        for (Rule &r : o.rules) {
            blobs.push_back(rl_rule_block_size(&r.rule));
            const std::string &expr = r.key_expr.empty() ? o.key_expr : r.key_expr;
            r.identity = rl_rule_identity(&r.rule, expr.data(), expr.size());
        }
        table_ = mmap(nullptr, o.zone_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        char err[RL_ERR_MAX];
        if (table_ == MAP_FAILED ||
            rl_table_init(table_, o.zone_size, blobs.data(), blobs.size(), nullptr, err, sizeof(err)) != RL_OK) {
            std::cerr << "ratelimit-replay: --zone-size " << o.zone_size << ": "
                      << (table_ == MAP_FAILED ? std::strerror(errno) : err) << "\n";
            std::exit(2);
        }
    }

    // The request decided: its verdict, and the rule whose decision binds.
    rl_request_t decide(const Request &r)
    {
        rl_request_t rq{};
        rq.checks = checks_.data();
        rq.n = checks_.size();
        rq.combine = o_.combine;
        for (size_t i = 0; i < checks_.size(); i++) {
            rl_check_t &c = checks_[i] = rl_check_t{};
            c.table = table_;
            c.rule = &o_.rules[i].rule;
            c.identity = o_.rules[i].identity;
            c.key = r.keys[i].data();
            c.key_len = r.keys[i].size();  // empty: the rule does not apply, as in nginx
            c.cost = o_.rules[i].own_cost ? o_.rules[i].rule.cost : r.cost;
        }
        rl_request_hash(&rq);
        rl_decide(&rq, r.now);
        return rq;
    }

private:
    Options &o_;
    std::vector<rl_check_t> checks_;
    void *table_;
};

// ---- reporting -------------------------------------------------------------

class Report {
public:
    explicit Report(const Options &o) : o_(o) {}

    void request(const Request &r, const rl_request_t &rq)
    {
        requests_++;
        distinct_.insert(r.shown);
        const bool exempt = rq.verdict == RL_VERDICT_EXEMPT;
        const rl_decision_t d = exempt ? allowed_decision() : rq.checks[rq.binding].decision;
        const char *verdict = rq.verdict == RL_VERDICT_REJECTED  ? "DENY"
                              : rq.verdict == RL_VERDICT_DELAYED ? "DELAY"
                                                                 : "ALLOW";
        if (rq.verdict == RL_VERDICT_REJECTED) {
            denied_++;
            denied_by_key_[r.shown]++;
        } else if (rq.verdict == RL_VERDICT_DELAYED) {
            delayed_++;
        } else {
            allowed_++;
        }
        if (o_.summary_only) {
            return;
        }
        const int64_t wait = d.allowed ? d.delay_ms : d.retry_after_ms;
        const std::string rule = exempt ? "" : o_.rules[rq.binding].rule.name;
        if (o_.json) {
            std::cout << "{\"time_ms\":" << r.now << ",\"key\":" << json_string(r.shown) << ",\"decision\":\""
                      << verdict << "\",\"remaining\":" << d.remaining << ",\""
                      << (d.allowed ? "delay_ms" : "retry_after_ms") << "\":" << wait << ",\"reset_ms\":" << d.reset_ms
                      << ",\"rule\":" << json_string(rule) << "}\n";
        } else {
            std::cout << verdict << " " << d.remaining << " " << wait << " " << printable(r.shown) << "\n";
        }
    }

    void summary(uint64_t bad)
    {
        std::vector<std::pair<std::string, uint64_t>> top(denied_by_key_.begin(), denied_by_key_.end());
        std::sort(top.begin(), top.end(), [](const auto &a, const auto &b) {
            return a.second != b.second ? a.second > b.second : a.first < b.first;
        });
        top.resize(std::min<size_t>(top.size(), 10));

        if (o_.json) {
            std::cout << "{\"summary\":{\"requests\":" << requests_ << ",\"allowed\":" << allowed_
                      << ",\"denied\":" << denied_ << ",\"delayed\":" << delayed_
                      << ",\"distinct_keys\":" << distinct_.size() << ",\"bad_lines\":" << bad << ",\"top_denied\":[";
            for (size_t i = 0; i < top.size(); i++) {
                std::cout << (i ? "," : "") << "{\"key\":" << json_string(top[i].first)
                          << ",\"denied\":" << top[i].second << "}";
            }
            std::cout << "]}}\n";
            return;
        }
        std::cout << (o_.summary_only ? "" : "\n") << "requests " << requests_ << "\nallowed " << allowed_
                  << "\ndenied " << denied_ << "\ndelayed " << delayed_ << "\ndistinct keys " << distinct_.size()
                  << "\nbad lines " << bad << "\n";
        if (!top.empty()) {
            std::cout << "top denied keys:\n";
            for (auto &e : top) {
                std::cout << "  " << e.second << " " << printable(e.first) << "\n";
            }
        }
    }

private:
    // what an exempt request (every rule's key empty) is described as
    static rl_decision_t allowed_decision()
    {
        rl_decision_t d{};
        d.allowed = 1;
        return d;
    }

    const Options &o_;
    uint64_t requests_ = 0, allowed_ = 0, denied_ = 0, delayed_ = 0;
    std::unordered_set<std::string> distinct_;
    std::unordered_map<std::string, uint64_t> denied_by_key_;
};

}  // namespace

int main(int argc, char **argv)
{
    Options o = parse_options(argc, argv);

    std::ifstream file;
    if (!o.file.empty()) {
        file.open(o.file);
        if (!file) {
            std::cerr << "ratelimit-replay: " << o.file << ": " << std::strerror(errno) << "\n";
            return 1;
        }
    }
    Reader reader(o, o.file.empty() ? std::cin : file, o.file.empty() ? "stdin" : o.file);
    Decider decider(o);
    Report report(o);

    Request r;
    while (reader.next(&r)) {
        report.request(r, decider.decide(r));
    }
    report.summary(reader.bad);
    return 0;
}
