// ratelimit-replay: reading its inputs' pieces, pure functions (tested by
// tests/replay_test.cc).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <sstream>

#include "replay.h"

namespace replay {

namespace {

// The variable at expr[i] == '$': its name, and where it ends ("${name}"
// included).  An empty name when none follows.
std::string variable_at(const std::string &expr, size_t i, size_t *end)
{
    size_t j = i + 1;
    const bool braces = j < expr.size() && expr[j] == '{';
    j += braces;
    const size_t start = j;
    while (j < expr.size() && (isalnum((unsigned char) expr[j]) || expr[j] == '_')) {
        j++;
    }
    *end = j + (braces && j < expr.size() && expr[j] == '}');
    return expr.substr(start, j - start);
}

}  // namespace

LogFormat::LogFormat(const std::string &format, std::string *err)
{
    std::string lit;
    for (size_t i = 0; i < format.size();) {
        if (format[i] != '$') {
            lit += format[i++];
            continue;
        }
        size_t end;
        const std::string var = variable_at(format, i, &end);
        if (var.empty()) {
            *err = "\"$\" without a variable name at offset " + std::to_string(i);
            parts_.clear();
            tail_ = "\n";  // no line matches
            return;
        }
        parts_.push_back({lit, var});
        lit.clear();
        i = end;
    }
    tail_ = lit;
}

bool LogFormat::match(const std::string &line, std::map<std::string, std::string> &fields) const
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

bool LogFormat::has(const std::string &var) const
{
    return std::any_of(parts_.begin(), parts_.end(), [&](const Part &p) { return p.var == var; });
}

std::vector<std::string> variables_of(const std::string &expr)
{
    std::vector<std::string> vars;
    for (size_t i = 0; i < expr.size();) {
        if (expr[i] != '$') {
            i++;
            continue;
        }
        size_t end;
        vars.push_back(variable_at(expr, i, &end));
        i = end;
    }
    return vars;
}

std::string expand(const std::string &expr, const std::map<std::string, std::string> &fields, bool *missing)
{
    std::string out;
    for (size_t i = 0; i < expr.size();) {
        if (expr[i] != '$') {
            out += expr[i++];
            continue;
        }
        size_t end;
        auto f = fields.find(variable_at(expr, i, &end));
        if (f == fields.end()) {
            *missing = true;
        } else if (f->second != "-") {  // nginx logs an empty value as "-"
            out += f->second;
        }
        i = end;
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

bool parse_log_time(const std::map<std::string, std::string> &f, int64_t *ms)
{
    auto it = f.find("msec");
    if (it != f.end()) {
        return parse_seconds(it->second, ms);
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

bool parse_seconds(const std::string &s, int64_t *ms)
{
    // nginx writes both as "%T.%03M": seconds, a dot, three digits
    const size_t dot = s.find('.');
    uint64_t sec, frac;
    if (dot == std::string::npos || s.size() - dot != 4 || !parse_uint64(s.substr(0, dot), &sec) ||
        !parse_uint64(s.substr(dot + 1), &frac) || sec > (uint64_t) INT64_MAX / 1000 - 1) {
        return false;
    }
    *ms = (int64_t) sec * 1000 + (int64_t) frac;
    return true;
}

bool parse_trace_line(const std::string &line, TraceLine *out)
{
    std::istringstream in(line);
    std::vector<std::string> col;
    for (std::string w; in >> w;) {
        col.push_back(w);
    }
    if (col.size() < 2 || col.size() > 5) {
        return false;
    }
    uint64_t v;
    if (!parse_uint64(col[0], &v) || v > (uint64_t) INT64_MAX / 2) {
        return false;
    }
    *out = TraceLine{};
    out->time_ms = (int64_t) v;
    out->key = col[1];
    if (col.size() > 2 && col[2] != "-" && !parse_uint64(col[2], &out->cost)) {
        return false;
    }
    if (col.size() > 3 && col[3] != "-") {
        if (!parse_uint64(col[3], &out->charge)) {
            return false;
        }
        out->has_charge = true;
    }
    if (col.size() > 4 && col[4] != "-") {
        if (!parse_uint64(col[4], &v) || v > (uint64_t) RL_PERIOD_MAX_MS) {
            return false;
        }
        out->duration_ms = (int64_t) v;
    }
    return true;
}

bool StatusList::parse(const std::string &list)
{
    patterns_.clear();
    std::string item;
    std::istringstream in(list);
    while (std::getline(in, item, ',')) {
        const bool ok = item.size() == 3 && item[0] >= '1' && item[0] <= '5' &&
                        ((isdigit((unsigned char) item[1]) && isdigit((unsigned char) item[2])) ||
                         (item[1] == 'x' && item[2] == 'x'));
        if (!ok) {
            return false;
        }
        patterns_.push_back(item);
    }
    return !patterns_.empty() && list.back() != ',';
}

bool StatusList::matches(const std::string &status) const
{
    return status.size() == 3 && std::any_of(patterns_.begin(), patterns_.end(), [&](const std::string &p) {
               return p[0] == status[0] && (p[1] == 'x' || (p[1] == status[1] && p[2] == status[2]));
           });
}

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

}  // namespace replay
