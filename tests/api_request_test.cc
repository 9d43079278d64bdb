// A key API request read by the core: its path after the location's prefix,
// its method, its parameters (each once, %-decoded, at most 4096 bytes),
// and every error as JSON with its status; hostile input (bad escapes, NUL
// bytes, overlong and repeated parameters, random bytes) always gets a
// clear error in valid JSON, never more than the buffers hold.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "json_check.h"
#include "ratelimit_render.h"

namespace {

rl_str_t str(const std::string &s)
{
    return rl_str_t{s.data(), s.size()};
}

struct Req {
    std::string uri, args;  // q.zone points into uri
    rl_api_request_t q;
    int rc;
    std::string error;  // the message, decoded

    explicit Req(const std::string &u, const std::string &a = "", const std::string &method = "GET", bool write = true,
                 const std::string &prefix = "/rl/")
        : uri(u), args(a)
    {
        rc = rl_api_request(&q, str(prefix), str(uri), str(method), write, str(args));
        check();
    }
    Req(const Req &) = delete;

    void check()
    {
        if (rc == 0) {
            EXPECT_EQ(q.status, 0);
            EXPECT_EQ(q.error_len, 0u);
            return;
        }
        EXPECT_EQ(q.status, rc);
        ASSERT_LT(q.error_len, sizeof(q.error)) << "an error's answer fits, with room to spare";
        const std::string body(q.error, q.error_len);
        ASSERT_TRUE(json_check::json_valid(body)) << body;
        ASSERT_EQ(body.substr(0, 10), "{\"error\":\"");
        ASSERT_EQ(body.substr(body.size() - 2), "}\n");
        error.clear();
        ASSERT_TRUE(json_check::json_string(body.substr(9, body.size() - 11), &error)) << body;
    }

    std::string key() const { return std::string((const char *) q.key, q.key_len); }
    std::string rule() const { return std::string(q.rule, q.rule_len); }
    std::string zone() const { return std::string(q.zone.data, q.zone.len); }
};

TEST(ApiPath, Resources)
{
    Req zones("/rl/zones");
    EXPECT_EQ(zones.rc, 0);
    EXPECT_EQ(zones.q.resource, RL_API_ZONES);

    Req zone("/rl/zones/api");
    EXPECT_EQ(zone.q.resource, RL_API_ZONE);
    EXPECT_EQ(zone.zone(), "api");

    Req keys("/rl/zones/odd-zone.v2_/keys", "key=a");
    EXPECT_EQ(keys.rc, 0);
    EXPECT_EQ(keys.q.resource, RL_API_KEYS);
    EXPECT_EQ(keys.zone(), "odd-zone.v2_");

    Req top("/rl/zones/api/top");
    EXPECT_EQ(top.q.resource, RL_API_TOP);

    // a prefix without "/" is followed by one
    EXPECT_EQ(Req("/rl/zones", "", "GET", true, "/rl").rc, 0);
    EXPECT_EQ(Req("/rlzones", "", "GET", true, "/rl").rc, 404);
    EXPECT_EQ(Req("/zones", "", "GET", true, "").rc, 0);
}

TEST(ApiPath, NoSuchResource)
{
    for (const char *uri :
         {"/rl/", "/rl/zone", "/rl/zonesx", "/rl/zones/", "/rl/zones//keys", "/rl/zones/api/", "/rl/zones/api/x",
          "/rl/zones/api/keys/", "/rl/zones/api/keys/x", "/rl/zones/api/topx", "/other/zones", "/r", ""}) {
        Req r(uri);
        EXPECT_EQ(r.rc, 404) << uri;
        EXPECT_EQ(
            r.error,
            "no such resource: expected zones, zones/NAME, zones/NAME/keys, zones/NAME/top or zones/NAME/overrides")
            << uri;
    }
    // a NUL byte in a path is a byte of the zone's name, shown escaped later
    const std::string nul("/rl/zones/a\0b", 13);
    Req r(nul);
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.zone(), std::string("a\0b", 3));
    EXPECT_EQ(rl_api_error(&r.q, RL_API_NO_ZONE), 404);
    r.rc = 404;
    r.check();
    EXPECT_EQ(r.error, "no zone \"a\\x00b\"");
}

TEST(ApiMethod, AllowedOnEachResource)
{
    EXPECT_EQ(Req("/rl/zones", "", "HEAD").rc, 0);
    Req del("/rl/zones/api/keys", "key=a", "DELETE");
    EXPECT_EQ(del.rc, 0);
    EXPECT_EQ(del.q.reset, 1);
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=a", "GET").q.reset, 0);

    Req put("/rl/zones/api/keys", "key=a", "PUT");
    EXPECT_EQ(put.rc, 405);
    EXPECT_STREQ(put.q.allow, "GET, HEAD, DELETE");
    EXPECT_EQ(put.error, "method PUT not allowed on keys: GET, HEAD, DELETE");

    for (const char *uri : {"/rl/zones", "/rl/zones/api", "/rl/zones/api/top"}) {
        Req r(uri, "", "DELETE");
        EXPECT_EQ(r.rc, 405) << uri;
        EXPECT_STREQ(r.q.allow, "GET, HEAD");
    }
    EXPECT_EQ(Req("/rl/zones", "", "POST").error, "method POST not allowed on zones: GET, HEAD");
    EXPECT_EQ(Req("/rl/zones/api", "", "get").error, "method get not allowed on zone: GET, HEAD");
    // a method is never taken by its prefix, and is shown escaped
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=a", "DELETEX").rc, 405);
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=a", "GE\"T\n").error,
              "method GE\\x22T\\x0a not allowed on keys: GET, HEAD, DELETE");
}

TEST(ApiMethod, WritesWhereEnabledOnly)
{
    Req r("/rl/zones/api/keys", "key=a", "DELETE", false);
    EXPECT_EQ(r.rc, 403);
    EXPECT_EQ(r.error, "writes are not enabled here (ratelimit_api write=on enables them)");
    // the path and method come first: a bad path is a 404 even so
    EXPECT_EQ(Req("/rl/zones/api/x", "", "DELETE", false).rc, 404);
}

TEST(ApiArgs, KeyDecoded)
{
    Req r("/rl/zones/api/keys", "key=x%20y%26z%3D1%2F2%22");
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.key(), "x y&z=1/2\"");
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=caf%C3%A9").key(), "caf\xc3\xa9");
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=a%00b").key(), std::string("a\0b", 3));
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=a+b").key(), "a+b") << "a + is a +";
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=%25%41").key(), "%A") << "decoded once";
    // a raw NUL in the query string is a byte like any other
    EXPECT_EQ(Req("/rl/zones/api/keys", std::string("key=a\0b", 7)).key(), std::string("a\0b", 3));
    Req both("/rl/zones/api/keys", "key=a&&rule=per_ip&");
    EXPECT_EQ(both.rc, 0);
    EXPECT_EQ(both.key(), "a");
    EXPECT_EQ(both.rule(), "per_ip");
}

TEST(ApiArgs, BadEscapes)
{
    for (const char *v : {"%zz", "a%2", "%", "a%", "%4%41", "%g0", "%0g", "%%41"}) {
        Req r("/rl/zones/api/keys", std::string("key=") + v);
        EXPECT_EQ(r.rc, 400) << v;
        EXPECT_EQ(r.error, "parameter \"key\": a % not followed by two hex digits") << v;
    }
    EXPECT_EQ(Req("/rl/zones/api/top", "rule=%").error, "parameter \"rule\": a % not followed by two hex digits");
}

TEST(ApiArgs, LengthBounds)
{
    const std::string at(RL_API_KEY_MAX, 'k');
    Req ok("/rl/zones/api/keys", "key=" + at);
    EXPECT_EQ(ok.rc, 0);
    EXPECT_EQ(ok.key(), at);

    Req over("/rl/zones/api/keys", "key=" + at + "k");
    EXPECT_EQ(over.rc, 400);
    EXPECT_EQ(over.error, "parameter \"key\" longer than 4096 bytes");

    // escaped: 4096 bytes decoded from 3 x 4096 is the most; one more escape
    // is too long whichever way it is counted
    std::string escaped;
    for (int i = 0; i < RL_API_KEY_MAX; i++) {
        escaped += "%41";
    }
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=" + escaped).key(), std::string(RL_API_KEY_MAX, 'A'));
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=" + escaped + "%41").rc, 400);
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=" + escaped + "a").rc, 400);
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=" + std::string(1 << 20, 'x')).rc, 400);

    // a rule's name: 1 to 63 bytes
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=a&rule=" + std::string(63, 'r')).rule(), std::string(63, 'r'));
    for (const std::string &rule : {std::string(64, 'r'), std::string(), std::string(5000, 'r')}) {
        Req r("/rl/zones/api/keys", "key=a&rule=" + rule);
        EXPECT_EQ(r.rc, 400);
        EXPECT_EQ(r.error, rule.size() > RL_API_KEY_MAX ? "parameter \"rule\" longer than 4096 bytes"
                                                        : "rule=: expected a rule's name, 1 to 63 bytes");
    }
}

TEST(ApiArgs, Fingerprints)
{
    Req r("/rl/zones/api/keys", "fingerprint=0123456789ABCdef&rule=per_ip");
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.q.has_fingerprint, 1);
    EXPECT_EQ(r.q.fingerprint, 0x0123456789abcdefULL);
    EXPECT_EQ(Req("/rl/zones/api/keys", "fingerprint=%46%46ffffffffffffff&rule=r").q.fingerprint, ~0ULL);
    for (const char *fp : {"xyz", "0123456789abcdeg", "0123456789abcdef0", "0123456789abcde", "", "-123456789abcdef",
                           "0x23456789abcdef", "%00123456789abcde"}) {
        Req bad("/rl/zones/api/keys", std::string("fingerprint=") + fp + "&rule=per_ip");
        EXPECT_EQ(bad.rc, 400) << fp;
        EXPECT_EQ(bad.error, "fingerprint=: expected 16 hex digits, as log lines and $ratelimit_fingerprint show it");
    }
}

TEST(ApiArgs, WhichKey)
{
    EXPECT_EQ(Req("/rl/zones/api/keys").error,
              "which key? expected key=K (the key's value, %-encoded) or fingerprint=F&rule=R");
    EXPECT_EQ(Req("/rl/zones/api/keys", "rule=per_ip").rc, 400);
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=").error,
              "an empty key: a request whose key is empty is exempt from the rule, it has no state");
    EXPECT_EQ(Req("/rl/zones/api/keys", "key").rc, 400);
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=a&fingerprint=0123456789abcdef&rule=per_ip").error,
              "key= and fingerprint= name the same thing: give one");
    EXPECT_EQ(Req("/rl/zones/api/keys", "fingerprint=0123456789abcdef").error,
              "a fingerprint is of one rule's key: give rule= too");
}

TEST(ApiArgs, EachOnceAndOnlyWhereTaken)
{
    EXPECT_EQ(Req("/rl/zones/api/keys", "key=a&key=b").error, "parameter \"key\" given twice");
    EXPECT_EQ(Req("/rl/zones/api/keys", "rule=a&key=b&rule=a").error, "parameter \"rule\" given twice");
    EXPECT_EQ(Req("/rl/zones/api/keys", "kye=a").error,
              "unknown parameter \"kye\" for keys: expected key=, fingerprint= or rule=");
    EXPECT_EQ(Req("/rl/zones/api/keys", "Key=a").rc, 400) << "names are case-sensitive";
    EXPECT_EQ(Req("/rl/zones/api/top", "key=a").error, "unknown parameter \"key\" for top: expected rule=");
    EXPECT_EQ(Req("/rl/zones", "x=1").error, "unknown parameter \"x\" for zones: expected none");
    EXPECT_EQ(Req("/rl/zones/api", "rule=x").error, "unknown parameter \"rule\" for zone: expected none");
    EXPECT_EQ(Req("/rl/zones/api/keys", "=x").error,
              "unknown parameter \"\" for keys: expected key=, fingerprint= or rule=");
    // a name is shown as log lines show keys: escaped, at most 64 bytes
    EXPECT_EQ(Req("/rl/zones/api/keys", std::string("k\0\"\\\xff=a", 6)).error,
              "unknown parameter \"k\\x00\\x22\\x5c\\xff\" for keys: expected key=, fingerprint= or rule=");
    EXPECT_EQ(Req("/rl/zones/api/keys", "k%00y=a").error,
              "unknown parameter \"k%00y\" for keys: expected key=, fingerprint= or rule=")
        << "a name is not decoded";
    Req big("/rl/zones/api/keys", std::string(5000, '\x01') + "=a");
    EXPECT_EQ(big.rc, 400);
    EXPECT_NE(big.error.find("\\x01\\x01"), std::string::npos);
    EXPECT_NE(big.error.find("...\" for keys"), std::string::npos);
    EXPECT_TRUE(Req("/rl/zones/api/top", "&&&").rc == 0);
}

TEST(ApiErrors, FoundWrongByTheGlue)
{
    Req r("/rl/zones/api/keys", "key=a&rule=no%22pe%00");
    ASSERT_EQ(r.rc, 0);
    r.rc = rl_api_error(&r.q, RL_API_NO_RULE);
    EXPECT_EQ(r.rc, 404);
    r.check();
    EXPECT_EQ(r.error, "zone \"api\" has no rule \"no\\x22pe\\x00\"");

    Req z("/rl/zones/%FF%22%5C/keys", "key=a");  // nginx decodes a path: the bytes as they come
    z.q.zone = rl_str_t{"\xff\"\\", 3};
    z.rc = rl_api_error(&z.q, RL_API_NO_ZONE);
    z.check();
    EXPECT_EQ(z.error, "no zone \"\\xff\\x22\\x5c\"");

    Req f("/rl/zones/r/keys", "fingerprint=0123456789abcdef&rule=remote");
    f.rc = rl_api_error(&f.q, RL_API_REDIS_FINGERPRINT);
    EXPECT_EQ(f.rc, 400);
    f.check();
    EXPECT_EQ(f.error, "zone \"r\" is decided in Redis, where a key's state is named by a SHA-256 of the key, not by "
                       "this server's fingerprint: give key=");

    for (const char *method : {"GET", "DELETE"}) {
        Req d("/rl/zones/r/keys", "key=a", method);
        d.rc = rl_api_error(&d.q, RL_API_REDIS_FAILED);
        EXPECT_EQ(d.rc, 409);
        d.check();
        EXPECT_EQ(d.error, std::string("zone \"r\" is decided in Redis, which did not answer (not reachable, too slow, "
                                       "or an answer refused: see the error log): its keys cannot be ") +
                               (method[0] == 'G' ? "read" : "reset") + " now, try again");
    }
}

// The longest messages there are, with the most escaping: they fit.
TEST(ApiErrors, LongestFit)
{
    const std::string hostile(300, '\\');
    Req a("/rl/zones/api/keys", hostile + "=a");
    EXPECT_EQ(a.rc, 400);
    Req b("/rl/zones/" + hostile + "/keys", "key=a&rule=" + std::string(63, '"'));
    ASSERT_EQ(b.rc, 0);
    b.rc = rl_api_error(&b.q, RL_API_NO_RULE);
    b.check();
    EXPECT_NE(b.error.find("..."), std::string::npos);
    b.rc = rl_api_error(&b.q, RL_API_REDIS_FAILED);
    b.check();
}

// Random paths, methods and query strings: an answer or a clear error,
// never more than the buffers hold (ASan checks), always valid JSON.
TEST(ApiFuzz, RandomRequests)
{
    std::mt19937 rng(42);
    const std::string alphabet =
        std::string("zones/keystop=&%0123456789abcdefABCDEF\"\\ \x00\xff\xc3\xa9", 44) + "key" + "fingerprint" + "rule";
    for (int n = 0; n < 20000; n++) {
        std::string uri = "/rl/", args;
        const int shape = (int) (rng() % 4);
        uri += shape == 0 ? "zones/api/keys" : shape == 1 ? "zones/api/top" : shape == 2 ? "zones" : "";
        const size_t len = rng() % 40;
        for (size_t i = 0; i < len; i++) {
            (shape == 3 ? uri : args).push_back(alphabet[rng() % alphabet.size()]);
        }
        Req r(uri, args, rng() % 8 ? "GET" : "DELETE");
        EXPECT_TRUE(r.rc == 0 || r.rc == 400 || r.rc == 404 || r.rc == 405) << r.rc;
        if (r.rc == 0) {
            EXPECT_LE(r.q.key_len, (size_t) RL_API_KEY_MAX);
            EXPECT_LT(r.q.rule_len, (size_t) RL_NAME_MAX);
            for (int e = RL_API_NO_ZONE; e <= RL_API_REDIS_FAILED; e++) {
                r.rc = rl_api_error(&r.q, e);
                r.check();
            }
        }
    }
}

}  // namespace
