// The JSON reader's values (json.h).

#include "overrides/json.h"

#include <cstring>

namespace rl {

namespace {

// A word JSON knows (null, true, false), whole.
bool literal(Json &j, const char *word)
{
    const size_t n = std::strlen(word);
    if ((size_t) (j.end - j.p) < n || std::memcmp(j.p, word, n) != 0 ||
        (j.p + n < j.end && ((j.p[n] >= 'a' && j.p[n] <= 'z') || digit(j.p[n])))) {
        return false;
    }
    j.p += n;
    return true;
}

}  // namespace

const char *type_of(const Value &v)
{
    static const char *const kTypes[] = {"an integer",    "a number with a sign, a fraction or an exponent",
                                         "a string",      "null",
                                         "true or false", "an object or an array"};
    return kTypes[v.type];
}

const char *read_value(Json &j, Value &v)
{
    j.space();
    if (j.p >= j.end) {
        return "no value";
    }
    const char c = *j.p;
    if (c == '"') {
        v.type = Value::kString;
        return j.string(v.text, sizeof(v.text), &v.len)
                   ? nullptr
                   : "a string this field cannot take (unterminated, over 63 bytes, a control character, or an "
                     "escape other than \\\" \\\\ \\/)";
    }
    if (c == '{' || c == '[') {
        v.type = Value::kNested;
        return nullptr;
    }
    if (literal(j, "null")) {
        v.type = Value::kNull;
        return nullptr;
    }
    if (literal(j, "true") || literal(j, "false")) {
        v.type = Value::kBool;
        return nullptr;
    }
    if (c == '-' || digit(c)) {
        bool integer = false;
        const char *bad = j.number(&integer, &v.number);
        v.type = integer ? Value::kInteger : Value::kNumber;
        return bad;
    }
    return c == '+'   ? "a '+' before a number (JSON numbers take none)"
           : c == '.' ? "a number with no digit before its '.'"
                      : "not a JSON value";
}

}  // namespace rl
