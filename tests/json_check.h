// A strict JSON reader for the tests of what the stats and the key API
// write: the whole text one value (RFC 8259), strings of well-formed UTF-8
// with only JSON's escapes.  json_valid() says whether it is; json_string()
// decodes one string's contents (UTF-8, \uXXXX as UTF-8).
#pragma once

#include <cstdint>
#include <string>

namespace json_check {

class Reader {
public:
    explicit Reader(const std::string &s) : s_(s) {}

    bool document()
    {
        space();
        if (!value(0)) {
            return false;
        }
        space();
        return i_ == s_.size();
    }

    // a string at the start, decoded into out
    bool string(std::string *out)
    {
        if (!eat('"')) {
            return false;
        }
        while (i_ < s_.size()) {
            const unsigned char c = (unsigned char) s_[i_++];
            if (c == '"') {
                return true;
            }
            if (c < 0x20) {
                return false;
            }
            if (c == '\\') {
                if (i_ >= s_.size()) {
                    return false;
                }
                const char e = s_[i_++];
                static const std::string simple = "\"\\/bfnrt", meant = "\"\\/\b\f\n\r\t";
                if (simple.find(e) != std::string::npos) {
                    out->push_back(meant[simple.find(e)]);
                    continue;
                }
                unsigned cp;
                if (e != 'u' || !hex4(&cp)) {
                    return false;
                }
                if (cp >= 0xd800 && cp <= 0xdfff) {
                    return false;  // the writer never needs surrogate pairs
                }
                utf8(cp, out);
                continue;
            }
            // UTF-8: the sequence must be well-formed
            size_t n = c < 0x80                 ? 1
                       : c >= 0xc2 && c <= 0xdf ? 2
                       : c >= 0xe0 && c <= 0xef ? 3
                       : c >= 0xf0 && c <= 0xf4 ? 4
                                                : 0;
            if (n == 0 || i_ - 1 + n > s_.size()) {
                return false;
            }
            unsigned cp = n == 1 ? c : c & (0xff >> (n + 1));
            for (size_t k = 1; k < n; k++) {
                const unsigned char d = (unsigned char) s_[i_ - 1 + k];
                if ((d & 0xc0) != 0x80) {
                    return false;
                }
                cp = cp << 6 | (d & 0x3f);
            }
            static const unsigned least[] = {0, 0, 0x80, 0x800, 0x10000};
            if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
                return false;
            }
            out->append(s_, i_ - 1, n);
            i_ += n - 1;
        }
        return false;
    }

    bool done() const { return i_ == s_.size(); }

private:
    static void utf8(unsigned cp, std::string *out)
    {
        if (cp < 0x80) {
            out->push_back((char) cp);
        } else if (cp < 0x800) {
            out->push_back((char) (0xc0 | cp >> 6));
            out->push_back((char) (0x80 | (cp & 0x3f)));
        } else {
            out->push_back((char) (0xe0 | cp >> 12));
            out->push_back((char) (0x80 | (cp >> 6 & 0x3f)));
            out->push_back((char) (0x80 | (cp & 0x3f)));
        }
    }

    bool hex4(unsigned *cp)
    {
        *cp = 0;
        for (int k = 0; k < 4; k++) {
            if (i_ >= s_.size()) {
                return false;
            }
            const char c = s_[i_++];
            const int d = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : -1;
            if (d < 0) {
                return false;
            }
            *cp = *cp << 4 | (unsigned) d;
        }
        return true;
    }

    bool eat(char c)
    {
        if (i_ < s_.size() && s_[i_] == c) {
            i_++;
            return true;
        }
        return false;
    }

    void space()
    {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) {
            i_++;
        }
    }

    bool word(const char *w)
    {
        const std::string x(w);
        if (s_.compare(i_, x.size(), x) != 0) {
            return false;
        }
        i_ += x.size();
        return true;
    }

    bool number()
    {
        const size_t start = i_;
        eat('-');
        if (eat('0')) {
        } else if (i_ < s_.size() && s_[i_] >= '1' && s_[i_] <= '9') {
            while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
                i_++;
            }
        } else {
            return false;
        }
        return i_ > start;
    }

    bool value(int depth)
    {
        if (depth > 64 || i_ >= s_.size()) {
            return false;
        }
        std::string ignored;
        switch (s_[i_]) {
        case '{':
            i_++;
            space();
            if (eat('}')) {
                return true;
            }
            do {
                space();
                if (!string(&ignored)) {
                    return false;
                }
                space();
                if (!eat(':')) {
                    return false;
                }
                space();
                if (!value(depth + 1)) {
                    return false;
                }
                space();
            } while (eat(','));
            return eat('}');
        case '[':
            i_++;
            space();
            if (eat(']')) {
                return true;
            }
            do {
                space();
                if (!value(depth + 1)) {
                    return false;
                }
                space();
            } while (eat(','));
            return eat(']');
        case '"':
            return string(&ignored);
        case 't':
            return word("true");
        case 'f':
            return word("false");
        case 'n':
            return word("null");
        default:
            return number();
        }
    }

    const std::string &s_;
    size_t i_ = 0;
};

inline bool json_valid(const std::string &s)
{
    return Reader(s).document();
}

// the contents of the JSON string s ("..."), decoded; false if s is not one
inline bool json_string(const std::string &s, std::string *out)
{
    Reader r(s);
    return r.string(out) && r.done();
}

}  // namespace json_check
