// ratelimit-replay: try a policy against recorded traffic before deploying it.
//
//   ratelimit-replay [--combine all|any] --rule 'limit=10 period=1s burst=5' [--rule ...]
//                    [--log-format combined|'FORMAT' [--key '$remote_addr'] [--cost '$field']]
//                    [--zone-size 64m] [--summary] [--json] [FILE]
//
// Each request goes through rl_check(), exactly as in nginx: the same rule
// parser (so the same error messages), the same transitions, the same
// all/any combination and binding rule, over a key table in memory.
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
        std::string literal;   // text before the variable
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
        } else if (f->second != "-") {   // nginx logs an empty value as "-"
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
    const uint64_t scale = unit.empty() ? 1 : (unit == "k" || unit == "K") ? 1024 : (unit == "m" || unit == "M") ? 1 << 20 : 1 << 30;
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
    const size_t from = at + needle.size() - 1;   // in text
    *value = text.substr(from, text.find_first_of(" \t", from) - from);
    return true;
}

}  // namespace

int main(int argc, char **argv)
{
    std::vector<Rule> rules;
    std::string file, format, key_expr, cost_expr;
    int combine = RL_COMBINE_ALL;
    bool summary_only = false, json = false, log_mode = false;
    size_t zone_size = 64u << 20;

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
                return 2;
            }
            std::string ignored;
            param_of(r.text, "key", &r.key_expr);
            r.own_cost = param_of(r.text, "cost", &ignored);
            rules.push_back(r);
        } else if (a == "--combine") {
            std::string v = value();
            if (v != "all" && v != "any") {
                usage_error("invalid value \"" + v + "\" for --combine: expected \"all\" or \"any\"");
            }
            combine = v == "any" ? RL_COMBINE_ANY : RL_COMBINE_ALL;
        } else if (a == "--log-format") {
            format = value();
            log_mode = true;
        } else if (a == "--key") {
            key_expr = value();
        } else if (a == "--cost") {
            cost_expr = value();
        } else if (a == "--zone-size") {
            std::string v = value();
            if (!parse_size(v, &zone_size)) {
                usage_error("invalid value \"" + v + "\" for --zone-size: expected a size like 64m");
            }
        } else if (a == "--summary") {
            summary_only = true;
        } else if (a == "--json") {
            json = true;
        } else if (a == "-h" || a == "--help") {
            usage_error("replays a trace against rate-limit rules");
        } else if (a.size() > 1 && a[0] == '-') {
            usage_error("unknown option \"" + a + "\"");
        } else if (file.empty()) {
            file = a;
        } else {
            usage_error("one input file at most");
        }
    }
    if (rules.empty()) {
        usage_error("at least one --rule is needed");
    }
    if (rules.size() > RL_RULES_MAX) {
        usage_error("at most " + std::to_string(RL_RULES_MAX) + " rules");
    }
    if (!log_mode && (!key_expr.empty() || !cost_expr.empty())) {
        usage_error("--key and --cost apply to --log-format input");
    }

    LogFormat log_format(format == "combined" ? kCombined : format);
    if (log_mode) {
        if (key_expr.empty()) {
            key_expr = "$remote_addr";
        }
        if (!log_format.has("msec") && !log_format.has("time_local") && !log_format.has("time_iso8601")) {
            usage_error("--log-format needs $msec, $time_local or $time_iso8601 for the request times");
        }
    }

    // One table for every rule, laid out as nginx would lay out their zone.
    std::vector<uint32_t> blobs;
    for (Rule &r : rules) {
        blobs.push_back((uint32_t) (rl_state_size(&r.rule) - sizeof(rl_state_t)));
        const std::string &expr = r.key_expr.empty() ? key_expr : r.key_expr;
        r.identity = rl_rule_identity(&r.rule, expr.data(), expr.size());
    }
    void *table = mmap(nullptr, zone_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char err[RL_ERR_MAX];
    if (table == MAP_FAILED || rl_table_init(table, zone_size, blobs.data(), blobs.size(), nullptr, err,
                                             sizeof(err)) != RL_OK) {
        std::cerr << "ratelimit-replay: --zone-size " << zone_size << ": "
                  << (table == MAP_FAILED ? std::strerror(errno) : err) << "\n";
        return 2;
    }

    std::ifstream in;
    if (!file.empty()) {
        in.open(file);
        if (!in) {
            std::cerr << "ratelimit-replay: " << file << ": " << std::strerror(errno) << "\n";
            return 1;
        }
    }
    std::istream &input = file.empty() ? std::cin : in;

    uint64_t requests = 0, allowed = 0, denied = 0, delayed = 0, bad = 0, lineno = 0;
    std::unordered_set<std::string> distinct;
    std::unordered_map<std::string, uint64_t> denied_by_key;
    std::map<std::string, std::string> fields;
    std::string line;
    std::vector<std::string> keys(rules.size());
    std::vector<rl_check_t> checks(rules.size());

    while (std::getline(input, line)) {
        lineno++;
        if (line.empty() || line[0] == '#') {
            continue;
        }
        int64_t now = 0;
        uint64_t cost = 1;
        std::string shown;
        bool ok = true;

        if (log_mode) {
            bool missing = false;
            ok = log_format.match(line, fields) && parse_log_time(fields, &now);
            for (size_t i = 0; ok && i < rules.size(); i++) {
                keys[i] = expand(rules[i].key_expr.empty() ? key_expr : rules[i].key_expr, fields, &missing);
            }
            if (ok && !cost_expr.empty() && (!parse_uint64(expand(cost_expr, fields, &missing), &cost) || cost == 0)) {
                cost = 1;   // as in nginx: not a positive integer counts as 1 (zero_cost=on is nginx's only)
            }
            ok = ok && !missing;
            shown = ok ? expand(key_expr, fields, &missing) : "";
        } else {
            char t[32], k[4096], c[32];
            int n = std::sscanf(line.c_str(), "%31s %4095s %31s", t, k, c);
            uint64_t ms = 0;
            ok = n >= 2 && parse_uint64(t, &ms) && (n < 3 || parse_uint64(c, &cost));
            now = (int64_t) ms;
            shown = k;
            std::fill(keys.begin(), keys.end(), shown);
        }
        if (!ok) {
            bad++;
            std::cerr << "ratelimit-replay: " << (file.empty() ? "stdin" : file) << ":" << lineno
                      << ": skipped, not " << (log_mode ? "in the log format" : "\"<unix_time_ms> <key> [cost]\"")
                      << ": " << line.substr(0, 200) << "\n";
            continue;
        }

        // rules whose key is empty do not apply, as in nginx
        size_t n = 0;
        std::vector<size_t> which;
        for (size_t i = 0; i < rules.size(); i++) {
            if (keys[i].empty()) {
                continue;
            }
            checks[n] = rl_check_t{};
            checks[n].table = table;
            checks[n].rule = &rules[i].rule;
            checks[n].identity = rules[i].identity;
            checks[n].key = keys[i].data();
            checks[n].key_len = keys[i].size();
            checks[n].cost = rules[i].own_cost ? rules[i].rule.cost : cost;
            which.push_back(i);
            n++;
        }
        requests++;
        distinct.insert(shown);

        rl_decision_t d{};
        size_t binding = 0;
        d.allowed = 1;
        if (n > 0) {
            rl_check_hash(checks.data(), n);
            rl_check(checks.data(), n, combine, now, &binding);
            for (size_t i = 0; checks[binding].decision.allowed && i < n; i++) {
                if (checks[i].decision.allowed && checks[i].decision.delay_ms > checks[binding].decision.delay_ms) {
                    binding = i;   // the longest delay binds, as in nginx
                }
            }
            d = checks[binding].decision;
        }
        const char *verdict = !d.allowed ? "DENY" : d.delay_ms > 0 ? "DELAY" : "ALLOW";
        if (!d.allowed) {
            denied++;
            denied_by_key[shown]++;
        } else if (d.delay_ms > 0) {
            delayed++;
        } else {
            allowed++;
        }

        if (summary_only) {
            continue;
        }
        const int64_t wait = d.allowed ? d.delay_ms : d.retry_after_ms;
        const std::string rule = n > 0 ? rules[which[binding]].rule.name : "";
        if (json) {
            std::cout << "{\"time_ms\":" << now << ",\"key\":" << json_string(shown) << ",\"decision\":\"" << verdict
                      << "\",\"remaining\":" << d.remaining << ",\"" << (d.allowed ? "delay_ms" : "retry_after_ms")
                      << "\":" << wait << ",\"reset_ms\":" << d.reset_ms << ",\"rule\":" << json_string(rule)
                      << "}\n";
        } else {
            std::cout << verdict << " " << d.remaining << " " << wait << " " << printable(shown) << "\n";
        }
    }

    std::vector<std::pair<std::string, uint64_t>> top(denied_by_key.begin(), denied_by_key.end());
    std::sort(top.begin(), top.end(), [](const auto &a, const auto &b) {
        return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    top.resize(std::min<size_t>(top.size(), 10));

    if (json) {
        std::cout << "{\"summary\":{\"requests\":" << requests << ",\"allowed\":" << allowed << ",\"denied\":" << denied
                  << ",\"delayed\":" << delayed << ",\"distinct_keys\":" << distinct.size()
                  << ",\"bad_lines\":" << bad << ",\"top_denied\":[";
        for (size_t i = 0; i < top.size(); i++) {
            std::cout << (i ? "," : "") << "{\"key\":" << json_string(top[i].first) << ",\"denied\":" << top[i].second
                      << "}";
        }
        std::cout << "]}}\n";
    } else {
        std::cout << (summary_only ? "" : "\n") << "requests " << requests << "\nallowed " << allowed << "\ndenied "
                  << denied << "\ndelayed " << delayed << "\ndistinct keys " << distinct.size() << "\nbad lines "
                  << bad << "\n";
        if (!top.empty()) {
            std::cout << "top denied keys:\n";
            for (auto &e : top) {
                std::cout << "  " << e.second << " " << printable(e.first) << "\n";
            }
        }
    }
    return 0;
}
