// The gRPC answer of a refusal: which requests are gRPC calls (at the edges
// of each content type), the message and pushback for every kind of
// refusal (a wait, one beyond A6's 32 bits, a cost never admitted, a slot,
// no decision), percent-encoding as gRPC's PROTOCOL-HTTP2 wants it, and the
// gRPC-Web trailers frame, decoded back from base64 for grpc-web-text.
#include <string>

#include "helpers.h"

namespace {

struct Kind {
    int kind;
    std::string type;
};

Kind kind_of(const std::string &ct, int post = 1)
{
    size_t type_len = 99;
    const int k = rl_grpc_kind(post, ct.data(), ct.size(), &type_len);
    return Kind{k, ct.substr(0, type_len)};
}

rl_decision_t refused(int64_t retry_after_ms)
{
    rl_decision_t d{};
    d.allowed = 0;
    d.retry_after_ms = retry_after_ms;
    return d;
}

std::string message(const rl_grpc_answer_t &a)
{
    return std::string(a.message, a.message_len);
}

std::string pushback(const rl_grpc_answer_t &a)
{
    return std::string(a.pushback, a.pushback_len);
}

std::string unbase64(const std::string &s)
{
    static const std::string digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    uint32_t v = 0;
    int bits = 0;
    for (char c : s) {
        if (c == '=') {
            break;
        }
        v = v << 6 | (uint32_t) digits.find(c);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += (char) ((v >> bits) & 0xff);
        }
    }
    return out;
}

}  // namespace

TEST(Grpc, KindOfContentType)
{
    EXPECT_EQ(kind_of("application/grpc").kind, RL_GRPC_NATIVE);
    EXPECT_EQ(kind_of("application/grpc+proto").kind, RL_GRPC_NATIVE);
    EXPECT_EQ(kind_of("application/grpc+json").type, "application/grpc+json");
    EXPECT_EQ(kind_of("Application/GRPC+Proto").kind, RL_GRPC_NATIVE);
    EXPECT_EQ(kind_of("application/grpc-web").kind, RL_GRPC_WEB);
    EXPECT_EQ(kind_of("application/grpc-web+proto").kind, RL_GRPC_WEB);
    EXPECT_EQ(kind_of("application/grpc-web-text").kind, RL_GRPC_WEB_TEXT);
    EXPECT_EQ(kind_of("application/grpc-web-text+proto").kind, RL_GRPC_WEB_TEXT);
    // parameters are not the response's type
    Kind k = kind_of("application/grpc-web+proto; charset=utf-8");
    EXPECT_EQ(k.kind, RL_GRPC_WEB);
    EXPECT_EQ(k.type, "application/grpc-web+proto");
    EXPECT_EQ(kind_of("application/grpc;x=1").type, "application/grpc");
    EXPECT_EQ(kind_of("application/grpc  ").type, "application/grpc");
}

TEST(Grpc, NotGrpc)
{
    for (const char *ct : {"", "application/json", "application/grp", "application/grpcx", "application/grpc-webx",
                           "application/grpc-web-textx", "application/grpc+", "application/grpc+pro to",
                           "application/grpc+proto+json", "application/grpc+pr\"oto", "text/grpc", " application/grpc",
                           "application/grpc\r\nx: y", "application/grpc-"}) {
        EXPECT_EQ(kind_of(ct).kind, RL_GRPC_NONE) << ct;
        EXPECT_EQ(kind_of(ct).type, "") << ct;
    }
    // a gRPC call is a POST: a GET's 200 could be cached in front of nginx
    EXPECT_EQ(kind_of("application/grpc", 0).kind, RL_GRPC_NONE);
    size_t len = 7;
    EXPECT_EQ(rl_grpc_kind(1, nullptr, 0, &len), RL_GRPC_NONE);
    EXPECT_EQ(len, 0u);
    // the bytes after the length are not read
    EXPECT_EQ(rl_grpc_kind(1, "application/grpcXYZ", 16, &len), RL_GRPC_NATIVE);
    EXPECT_EQ(len, 16u);
}

TEST(Grpc, PercentEncoding)
{
    char out[64];
    const std::string in = "a b,c%d\xe2\x82\xac\x7f\x1f~";
    const size_t n = rl_grpc_percent_encode(out, in.data(), in.size());
    EXPECT_EQ(std::string(out, n), "a b,c%25d%E2%82%AC%7F%1F~");
    EXPECT_EQ(rl_grpc_percent_encode(out, "", 0), 0u);
    const std::string zero("\0", 1);
    EXPECT_EQ(std::string(out, rl_grpc_percent_encode(out, zero.data(), 1)), "%00");
}

TEST(Grpc, AnswerOfAWait)
{
    rl_grpc_answer_t a;
    rl_decision_t d = refused(1200000);
    rl_grpc_answer(&d, &a);
    EXPECT_EQ(message(a), "rate limit exceeded, retry in 1200 s");
    EXPECT_EQ(pushback(a), "1200000");

    // the message says Retry-After's whole seconds, the pushback the ms
    d = refused(11001);
    rl_grpc_answer(&d, &a);
    EXPECT_EQ(message(a), "rate limit exceeded, retry in 12 s");
    EXPECT_EQ(pushback(a), "11001");

    d = refused(1);
    rl_grpc_answer(&d, &a);
    EXPECT_EQ(message(a), "rate limit exceeded, retry in 1 s");
    EXPECT_EQ(pushback(a), "1");

    // A6's pushback is a signed 32-bit integer: at its bound, and past it
    d = refused(INT32_MAX);
    rl_grpc_answer(&d, &a);
    EXPECT_EQ(pushback(a), "2147483647");
    d = refused((int64_t) INT32_MAX + 1);
    rl_grpc_answer(&d, &a);
    EXPECT_EQ(message(a), "rate limit exceeded, retry in 2147484 s");
    EXPECT_EQ(pushback(a), "-1");
    d = refused(RL_PERIOD_MAX_MS);
    rl_grpc_answer(&d, &a);
    EXPECT_EQ(message(a), "rate limit exceeded, retry in 31622400 s");
    EXPECT_EQ(pushback(a), "-1");
}

TEST(Grpc, AnswerWithoutAWait)
{
    rl_grpc_answer_t a;

    // a cost the rule never admits: retrying cannot help
    rl_decision_t d = refused(5000);
    d.never = 1;
    rl_grpc_answer(&d, &a);
    EXPECT_EQ(message(a), "rate limit exceeded, the call costs more than the limit admits");
    EXPECT_EQ(pushback(a), "-1");

    // a concurrency slot: no time to tell, the client's own backoff
    d = refused(0);
    rl_grpc_answer(&d, &a);
    EXPECT_EQ(message(a), "rate limit exceeded, too many calls in flight");
    EXPECT_EQ(a.pushback_len, 0u);

    // no decision (on_redis_error=deny)
    rl_grpc_answer(nullptr, &a);
    EXPECT_EQ(message(a), "rate limit exceeded");
    EXPECT_EQ(a.pushback_len, 0u);
}

TEST(Grpc, WebTrailersFrame)
{
    rl_grpc_answer_t a;
    rl_decision_t d = refused(2000);
    rl_grpc_answer(&d, &a);

    char out[RL_GRPC_WEB_BODY_MAX];
    const std::string block = "grpc-status: 8\r\n"
                              "grpc-message: rate limit exceeded, retry in 2 s\r\n"
                              "grpc-retry-pushback-ms: 2000\r\n";
    std::string frame = std::string("\x80\0\0\0", 4) + (char) block.size() + block;

    std::string body(out, rl_grpc_web_body(out, RL_GRPC_WEB, 8, &a));
    EXPECT_EQ(body, frame);

    body.assign(out, rl_grpc_web_body(out, RL_GRPC_WEB_TEXT, 8, &a));
    EXPECT_EQ(body.size() % 4, 0u);
    EXPECT_EQ(body.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="),
              std::string::npos);
    EXPECT_EQ(unbase64(body), frame);

    // no pushback: no line for it; another status
    rl_grpc_answer(nullptr, &a);
    body.assign(out, rl_grpc_web_body(out, RL_GRPC_WEB, 14, &a));
    const std::string short_block = "grpc-status: 14\r\ngrpc-message: rate limit exceeded\r\n";
    EXPECT_EQ(body, std::string("\x80\0\0\0", 4) + (char) short_block.size() + short_block);
}

TEST(Grpc, WebBodyAtItsLargest)
{
    // the longest message and pushback, base64: within RL_GRPC_WEB_BODY_MAX
    rl_grpc_answer_t a;
    a.message_len = RL_GRPC_MESSAGE_MAX;
    std::memset(a.message, '%', sizeof(a.message));
    a.pushback_len = RL_GRPC_PUSHBACK_MAX;
    std::memset(a.pushback, '9', sizeof(a.pushback));
    char out[RL_GRPC_WEB_BODY_MAX + 16];
    std::memset(out, 0x55, sizeof(out));
    const size_t n = rl_grpc_web_body(out, RL_GRPC_WEB_TEXT, RL_GRPC_STATUS_MAX, &a);
    EXPECT_LE(n, (size_t) RL_GRPC_WEB_BODY_MAX);
    EXPECT_EQ(out[RL_GRPC_WEB_BODY_MAX], 0x55);
    const std::string frame = unbase64(std::string(out, n));
    EXPECT_EQ((unsigned char) frame[0], 0x80);
    const size_t len = (size_t) (unsigned char) frame[3] << 8 | (unsigned char) frame[4];
    EXPECT_EQ(len + 5, frame.size());
    EXPECT_EQ(frame.substr(5, 17), "grpc-status: 16\r\n");
}
