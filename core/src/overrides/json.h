// A small strict JSON reader: one object of scalar fields, what the key
// API's override bodies are (text.cpp).  It reads and checks; what a field
// means is its caller's.

#ifndef RL_OVERRIDES_JSON_H
#define RL_OVERRIDES_JSON_H

#include <cstddef>
#include <cstdint>

namespace rl {

inline bool digit(char c)
{
    return c >= '0' && c <= '9';
}

struct Json {
    const char *p, *end;
    void space()
    {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) {
            p++;
        }
    }
    bool eat(char c)
    {
        space();
        if (p < end && *p == c) {
            p++;
            return true;
        }
        return false;
    }
    // a string without escapes other than \" \\ \/ (field names and the
    // values an override takes are plain words)
    bool string(char *out, size_t cap, size_t *len)
    {
        space();
        if (p >= end || *p != '"') {
            return false;
        }
        p++;
        size_t n = 0;
        while (p < end && *p != '"') {
            char c = *p++;
            if (c == '\\') {
                if (p >= end || (*p != '"' && *p != '\\' && *p != '/')) {
                    return false;
                }
                c = *p++;
            } else if ((unsigned char) c < 0x20) {
                return false;
            }
            if (n + 1 >= cap) {
                return false;
            }
            out[n++] = c;
        }
        if (p >= end) {
            return false;
        }
        p++;
        out[n] = '\0';
        *len = n;
        return true;
    }
    // a number as JSON writes it (RFC 8259: -? (0 | [1-9][0-9]*) (.[0-9]+)?
    // ([eE][+-]?[0-9]+)?): nullptr, or what is not JSON about it
    const char *number(bool *integer, uint64_t *value)
    {
        const char *q = p;
        bool plain = true;
        if (*q == '-') {
            q++;
            plain = false;
        }
        if (q >= end || !digit(*q)) {
            return "a '-' with no digits after it";
        }
        if (*q == '0' && q + 1 < end && digit(q[1])) {
            return "a number with a leading zero";
        }
        uint64_t n = 0;
        for (; q < end && digit(*q); q++) {
            const uint64_t d = (uint64_t) (*q - '0');
            n = n > (UINT64_MAX - d) / 10 ? UINT64_MAX : n * 10 + d;
        }
        if (q < end && *q == '.') {
            if (++q >= end || !digit(*q)) {
                return "a '.' with no digits after it";
            }
            while (q < end && digit(*q)) {
                q++;
            }
            plain = false;
        }
        if (q < end && (*q == 'e' || *q == 'E')) {
            q += q + 1 < end && (q[1] == '+' || q[1] == '-') ? 2 : 1;
            if (q >= end || !digit(*q)) {
                return "an exponent with no digits";
            }
            while (q < end && digit(*q)) {
                q++;
            }
            plain = false;
        }
        p = q;
        *integer = plain;
        *value = n;
        return nullptr;
    }
};

// A field's value: a JSON value of any type (a number, a string, null, true
// or false; an object or an array is not read, no field takes one).
struct Value {
    enum { kInteger, kNumber, kString, kNull, kBool, kNested } type;
    uint64_t number;  // kInteger's, at most UINT64_MAX
    char text[64];
    size_t len;
};

// What a value is, for a message saying it is not what a field takes.
const char *type_of(const Value &v);

// A field's value read: nullptr, or what is not JSON about it.
const char *read_value(Json &j, Value &v);

}  // namespace rl

#endif
