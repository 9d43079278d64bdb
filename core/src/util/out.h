// A text written into a caller's buffer, bounded: what fits is written, and
// every byte of the whole text is counted, so that a caller whose buffer was
// too small learns the size to ask for.  No allocation, nothing thrown.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ratelimit_render.h"

namespace rl {

// The bytes of a key shown, as log lines show them (rl_escape).
constexpr size_t kShownMax = 64;

// One character of data at p escaped into out (at most 6 bytes): returns
// the bytes written, and the bytes of data taken in *used.
size_t json_char(const unsigned char *p, size_t avail, char *out, size_t *used);
size_t label_char(const unsigned char *p, size_t avail, char *out, size_t *used);

// A JSON string's contents: '"' and '\' escaped, control bytes and DEL as
// \u00XX, well-formed UTF-8 as it is, any other byte as \ufffd (the
// replacement character).  Valid JSON whatever the bytes.  Returns the
// bytes written (at most 6 a byte; out may be NULL to count them).
size_t json_escape(char *out, const void *data, size_t len);

// A Prometheus label value's contents (text format 0.0.4): '"' and '\'
// escaped, a line feed as \n, other control bytes and DEL as '?',
// well-formed UTF-8 as it is, any other byte as U+FFFD.  At most 3 bytes a
// byte; out may be NULL.
size_t label_escape(char *out, const void *data, size_t len);

class Out {
public:
    Out(char *buf, size_t cap) : buf_(buf), cap_(buf != nullptr ? cap : 0) {}

    size_t len() const { return len_; }

    void put(const char *s, size_t n)
    {
        if (len_ < cap_) {
            std::memcpy(buf_ + len_, s, n <= cap_ - len_ ? n : cap_ - len_);
        }
        len_ += n;
    }
    void put(const char *s) { put(s, std::strlen(s)); }
    void put(rl_str_t s) { put(s.data, s.len); }

    void num(uint64_t n);
    // a negative figure (a time already past) as 0
    void num0(int64_t n) { num(n > 0 ? (uint64_t) n : 0); }
    // ,"name":N: a field of an object after its first
    void field(const char *name, uint64_t n)
    {
        put(",\"");
        put(name);
        put("\":");
        num(n);
    }
    void boolean(bool b) { put(b ? "true" : "false"); }
    void hex16(uint64_t n);
    // microseconds as seconds: 0.000250
    void seconds(uint64_t us);

    // in double quotes, escaped for JSON, or for a Prometheus label value
    void json(const void *data, size_t len);
    void json(rl_str_t s) { json(s.data, s.len); }
    void label(const void *data, size_t len);
    void label(rl_str_t s) { label(s.data, s.len); }

    // A key (or any bytes a client chose) as log lines show it: at most
    // kShownMax bytes, escaped by rl_escape, then "..." if there were more
    // (or if cut: the bytes are the start of a longer key); in double
    // quotes, for JSON or a label.
    void json_shown(const void *data, size_t len, bool cut = false);
    void label_shown(const void *data, size_t len, bool cut = false);

private:
    template <size_t (*Char)(const unsigned char *, size_t, char *, size_t *)>
    void quoted(const void *data, size_t len);

    char *buf_;
    size_t cap_;
    size_t len_ = 0;
};

// "size":N,"bytes_used":N,...: a zone's figures (stats.cpp), in the stats
// and the key API's zones alike
void zone_figures(Out &o, const rl_zone_snapshot_t &z);

// bytes as log lines show them (rl_escape): what Out's *_shown quote
size_t shown(char *out, const void *data, size_t len, bool cut);
constexpr size_t kShownBytes = RL_ESCAPED_MAX(kShownMax) + 3;

}  // namespace rl
