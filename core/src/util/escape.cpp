// Bytes a client chose, made safe to write into a log line or a message:
// printable ASCII stays as it is but for '"' and '\', which are written
// as every other byte is, \xNN; at most max bytes of the input, then
// "..." when there were more.  A line can then never be split, forged or
// made to hold bytes a terminal or a log reader would act on.

#include "ratelimit.h"

extern "C" RL_API size_t rl_escape(char *out, const void *data, size_t len, size_t max)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = static_cast<const unsigned char *>(data);
    const size_t n = len < max ? len : max;
    char *o = out;

    for (size_t i = 0; i < n; i++) {
        const unsigned char c = p[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            *o++ = (char) c;
        } else {
            *o++ = '\\';
            *o++ = 'x';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 0xf];
        }
    }
    if (len > n) {
        *o++ = '.';
        *o++ = '.';
        *o++ = '.';
    }
    return (size_t) (o - out);
}
