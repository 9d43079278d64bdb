// The bounded writer of what the stats and the key API answer, and the
// escaping of names and keys in JSON strings and Prometheus label values.
#include "util/out.h"

namespace rl {

namespace {

const char kHex[] = "0123456789abcdef";

// The bytes of the well-formed UTF-8 sequence at p (Unicode, table 3-7: no
// overlong form, no surrogate, nothing above U+10FFFF), or 0.
size_t utf8_len(const unsigned char *p, size_t avail)
{
    const unsigned char c = p[0];
    unsigned char lo = 0x80, hi = 0xbf;
    size_t n;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        lo = c == 0xe0 ? 0xa0 : 0x80;
        hi = c == 0xed ? 0x9f : 0xbf;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        lo = c == 0xf0 ? 0x90 : 0x80;
        hi = c == 0xf4 ? 0x8f : 0xbf;
    } else {
        return 0;
    }
    if (avail < n || p[1] < lo || p[1] > hi) {
        return 0;
    }
    for (size_t i = 2; i < n; i++) {
        if (p[i] < 0x80 || p[i] > 0xbf) {
            return 0;
        }
    }
    return n;
}

// One character for JSON (json) or a Prometheus label value: the same but
// for the bytes each cannot hold as they are.
size_t escape_char(const unsigned char *p, size_t avail, char *out, size_t *used, bool json)
{
    const unsigned char c = p[0];
    *used = 1;
    if (c == '"' || c == '\\' || (c == '\n' && !json)) {
        out[0] = '\\';
        out[1] = c == '\n' ? 'n' : (char) c;
        return 2;
    }
    if (c >= 0x20 && c < 0x7f) {
        out[0] = (char) c;
        return 1;
    }
    if (c < 0x80) {  // a control byte, or DEL
        if (!json) {
            out[0] = '?';
            return 1;
        }
        std::memcpy(out, "\\u00", 4);
        out[4] = kHex[c >> 4];
        out[5] = kHex[c & 0xf];
        return 6;
    }
    if (const size_t n = utf8_len(p, avail)) {
        std::memcpy(out, p, n);
        *used = n;
        return n;
    }
    // not UTF-8: the replacement character, U+FFFD
    const char *const fffd = json ? "\\ufffd" : "\xef\xbf\xbd";
    const size_t n = std::strlen(fffd);
    std::memcpy(out, fffd, n);
    return n;
}

}  // namespace

size_t json_char(const unsigned char *p, size_t avail, char *out, size_t *used)
{
    return escape_char(p, avail, out, used, true);
}

size_t label_char(const unsigned char *p, size_t avail, char *out, size_t *used)
{
    return escape_char(p, avail, out, used, false);
}

namespace {

template <size_t (*Char)(const unsigned char *, size_t, char *, size_t *)>
size_t escape(char *out, const void *data, size_t len)
{
    const unsigned char *p = static_cast<const unsigned char *>(data);
    char one[8];
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t used;
        const size_t w = Char(p + i, len - i, one, &used);
        if (out != nullptr) {
            std::memcpy(out + n, one, w);
        }
        n += w;
        i += used;
    }
    return n;
}

}  // namespace

size_t json_escape(char *out, const void *data, size_t len)
{
    return escape<json_char>(out, data, len);
}

size_t label_escape(char *out, const void *data, size_t len)
{
    return escape<label_char>(out, data, len);
}

size_t shown(char *out, const void *data, size_t len, bool cut)
{
    size_t n = rl_escape(out, data, len, kShownMax);
    if (cut && len <= kShownMax) {
        std::memcpy(out + n, "...", 3);
        n += 3;
    }
    return n;
}

void Out::num(uint64_t n)
{
    char d[20];
    size_t i = sizeof(d);
    do {
        d[--i] = (char) ('0' + n % 10);
        n /= 10;
    } while (n != 0);
    put(d + i, sizeof(d) - i);
}

void Out::hex16(uint64_t n)
{
    char d[16];
    for (int i = 15; i >= 0; i--, n >>= 4) {
        d[i] = kHex[n & 0xf];
    }
    put(d, sizeof(d));
}

void Out::seconds(uint64_t us)
{
    char frac[6];
    num(us / 1000000);
    put(".", 1);
    us %= 1000000;
    for (int i = 5; i >= 0; i--, us /= 10) {
        frac[i] = (char) ('0' + us % 10);
    }
    put(frac, sizeof(frac));
}

template <size_t (*Char)(const unsigned char *, size_t, char *, size_t *)>
void Out::quoted(const void *data, size_t len)
{
    const unsigned char *p = static_cast<const unsigned char *>(data);
    char one[8];
    put("\"", 1);
    for (size_t i = 0; i < len;) {
        size_t used;
        put(one, Char(p + i, len - i, one, &used));
        i += used;
    }
    put("\"", 1);
}

void Out::json(const void *data, size_t len)
{
    quoted<json_char>(data, len);
}

void Out::label(const void *data, size_t len)
{
    quoted<label_char>(data, len);
}

void Out::json_shown(const void *data, size_t len, bool cut)
{
    char s[kShownBytes];
    json(s, shown(s, data, len, cut));
}

void Out::label_shown(const void *data, size_t len, bool cut)
{
    char s[kShownBytes];
    label(s, shown(s, data, len, cut));
}

}  // namespace rl
