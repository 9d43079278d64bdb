// ratelimit-replay: try a policy against recorded traffic before deploying it.
//
//   ratelimit-replay [--combine all|any] --rule 'limit=10 period=1s burst=5' [--rule ...]
//                    [--log-format combined|'FORMAT' [--key '$remote_addr'] [--cost '$field']
//                     [--charge-status 401,403 | --charge '$field']]
//                    [--zone-size 64m] [--summary] [--json] [FILE]
//
// Each request goes through rl_decide(), exactly as in nginx: the same rule
// parser (so the same error messages), the same transitions, the same
// all/any combination, binding rule and verdict, over a key table in memory;
// and ends through rl_request_end(), its charges spent and its slots given
// back, in simulated time.  Reading (replay_read.cpp), deciding
// (replay_sim.cpp) and reporting (here) are apart.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "replay.h"

namespace replay {

[[noreturn]] void usage_error(const std::string &msg)
{
    std::cerr << "ratelimit-replay: " << msg << "\n"
              << "usage: ratelimit-replay [--combine all|any] --rule 'RULE' [--rule 'RULE' ...]\n"
                 "                        [--log-format combined|'FORMAT'] [--key EXPR] [--cost EXPR]\n"
                 "                        [--charge-status LIST | --charge EXPR]\n"
                 "                        [--zone-size SIZE] [--summary] [--json] [FILE]\n";
    std::exit(2);
}

namespace {

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

// ---- the command line ----------------------------------------------------

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
            if (rl_rule_parse(&r.rule, r.name.get(), r.text.c_str(), err, sizeof(err)) != RL_OK) {
                std::cerr << "ratelimit-replay: --rule '" << r.text << "': " << err << "\n";
                std::exit(2);
            }
            std::string ignored;
            param_of(r.text, "key", &r.key_expr);
            param_of(r.text, "charge", &r.charge_expr);
            r.own_cost = param_of(r.text, "cost", &ignored);
            o.rules.push_back(std::move(r));
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
        } else if (a == "--charge") {
            o.charge_expr = value();
            if (o.charge_expr.empty()) {
                usage_error("--charge needs a value, like '$upstream_http_x_tokens_used'");
            }
        } else if (a == "--charge-status") {
            std::string v = value();
            if (!o.charge_status.parse(v)) {
                usage_error("invalid value \"" + v + "\" for --charge-status: expected statuses like 401,403 or 5xx");
            }
            o.has_charge_status = true;
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
    if (!o.log_mode && (!o.key_expr.empty() || !o.cost_expr.empty() || !o.charge_expr.empty() || o.has_charge_status)) {
        usage_error("--key, --cost, --charge and --charge-status apply to --log-format input (a trace has columns)");
    }
    if (o.has_charge_status && !o.charge_expr.empty()) {
        usage_error("--charge-status and --charge: one or the other");
    }
    if (o.log_mode && o.key_expr.empty()) {
        o.key_expr = "$remote_addr";
    }
    return o;
}

// ---- reporting -------------------------------------------------------------

// A line a request, in the input's order (a request waiting for a slot
// holds back the lines after it until it is decided), then the summary.
class Report {
public:
    explicit Report(const Options &o) : o_(o) {}

    void request(const Outcome &r)
    {
        requests_++;
        distinct_.insert(r.shown);
        if (r.verdict == Verdict::kDeny) {
            denied_++;
            denied_by_key_[r.shown]++;
        } else if (r.verdict == Verdict::kDelay) {
            delayed_++;
        } else {
            allowed_++;
        }
        if (o_.summary_only) {
            return;
        }
        held_.emplace(r.index, r);
        for (auto it = held_.begin(); it != held_.end() && it->first == next_; it = held_.erase(it), next_++) {
            print(it->second);
        }
    }

    void summary(uint64_t bad, const std::vector<RuleFigures> &rules)
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
            std::cout << "]";
            json_rules(rules);
            std::cout << "}}\n";
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
        for (const RuleFigures &g : rules) {
            std::cout << "rule " << g.name << ":\n";
            if (g.charges) {
                std::cout << "  units charged " << g.charged << "\n  ended in debt " << g.debts << "\n";
            }
            if (g.bans) {
                std::cout << "  bans started " << g.bans_started << "\n";
            }
            if (g.slots) {
                std::cout << "  peak in flight " << g.peak << "\n  peak in flight of a key " << g.key_peak
                          << "\n  waited " << g.waited << "\n  refused " << g.refused << "\n";
            }
        }
    }

private:
    void print(const Outcome &r)
    {
        static const char *const kWords[] = {"ALLOW", "DELAY", "WAIT", "DENY"};
        const char *verdict = kWords[(int) r.verdict];
        const rl_decision_t &d = r.decision;
        // the third column: the Retry-After of a refusal, the delay of a
        // shaped request, how long a request waited for its slot
        const int64_t wait = !d.allowed ? d.retry_after_ms : r.verdict == Verdict::kWait ? r.waited_ms : d.delay_ms;
        if (!o_.json) {
            std::cout << verdict << " " << d.remaining << " " << wait << " " << printable(r.shown) << "\n";
            return;
        }
        std::cout << "{\"time_ms\":" << r.time_ms << ",\"key\":" << json_string(r.shown) << ",\"decision\":\""
                  << verdict << "\",\"remaining\":" << d.remaining << ",\""
                  << (d.allowed ? "delay_ms" : "retry_after_ms") << "\":" << (d.allowed ? d.delay_ms : wait)
                  << ",\"reset_ms\":" << d.reset_ms << ",\"rule\":" << json_string(r.rule);
        if (r.waited) {
            std::cout << ",\"waited_ms\":" << r.waited_ms;
        }
        std::cout << "}\n";
    }

    static void json_rules(const std::vector<RuleFigures> &rules)
    {
        if (rules.empty()) {
            return;
        }
        std::cout << ",\"rules\":[";
        for (size_t i = 0; i < rules.size(); i++) {
            const RuleFigures &g = rules[i];
            std::cout << (i ? "," : "") << "{\"rule\":" << json_string(g.name);
            if (g.charges) {
                std::cout << ",\"charged\":" << g.charged << ",\"debts\":" << g.debts;
            }
            if (g.bans) {
                std::cout << ",\"bans\":" << g.bans_started;
            }
            if (g.slots) {
                std::cout << ",\"peak\":" << g.peak << ",\"key_peak\":" << g.key_peak << ",\"waited\":" << g.waited
                          << ",\"refused\":" << g.refused;
            }
            std::cout << "}";
        }
        std::cout << "]";
    }

    const Options &o_;
    uint64_t requests_ = 0, allowed_ = 0, denied_ = 0, delayed_ = 0;
    std::unordered_set<std::string> distinct_;
    std::unordered_map<std::string, uint64_t> denied_by_key_;
    std::map<uint64_t, Outcome> held_;  // decided, printed once those before are
    uint64_t next_ = 0;
};

}  // namespace

}  // namespace replay

int main(int argc, char **argv)
{
    using namespace replay;
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
    Report report(o);
    Simulator sim(o, [&](const Outcome &r) { report.request(r); });

    Request r;
    while (reader.next(&r)) {
        sim.arrive(std::move(r));
    }
    sim.finish();
    report.summary(reader.bad, sim.figures());
    reader.notes();
    sim.notes();
    return 0;
}
