// Redis: the RESP reader, the key names, the command, and the conformance
// of the Lua script (core/src/redis/ratelimit.lua) with the C++ core: random
// traces run through rl_check on a local table and through the script in a
// real redis-server (started here, on a unix socket, with no persistence)
// must give identical decisions, remaining, reset, retry-after, the IETF t
// and the policy.
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "helpers.h"
#include "policy/request.h"

extern char **environ;

namespace {

// ---- a blocking client, for tests only --------------------------------------

std::string redis_server()
{
    const char *server = std::getenv("RL_REDIS_SERVER");
    return server ? server : "/usr/bin/redis-server";
}

class Redis {
public:
    static Redis &instance()
    {
        static Redis r;
        return r;
    }

    bool ok() const { return fd_ >= 0; }
    const std::string &why() const { return why_; }

    // Sends raw RESP, reads one reply (kept in buf_ until the next call).
    rl_resp_t call(const std::string &cmd)
    {
        rl_resp_t r{};
        size_t off = 0;
        while (off < cmd.size()) {
            ssize_t n = ::write(fd_, cmd.data() + off, cmd.size() - off);
            if (n <= 0) {
                ADD_FAILURE() << "write to redis failed";
                return r;
            }
            off += (size_t) n;
        }
        buf_.clear();
        for (;;) {
            long used = rl_resp_parse(buf_.data(), buf_.size(), &r);
            if (used > 0) {
                EXPECT_EQ((size_t) used, buf_.size());
                return r;
            }
            if (used < 0) {
                ADD_FAILURE() << "not RESP: " << buf_;
                return r;
            }
            char tmp[65536];
            ssize_t n = ::read(fd_, tmp, sizeof(tmp));
            if (n <= 0) {
                ADD_FAILURE() << "redis closed the connection";
                return r;
            }
            buf_.append(tmp, (size_t) n);
        }
    }

    rl_resp_t command(std::initializer_list<std::string> args)
    {
        std::string cmd = "*" + std::to_string(args.size()) + "\r\n";
        for (const std::string &a : args) {
            cmd += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
        }
        return call(cmd);
    }

private:
    Redis()
    {
        char dir[] = "/tmp/rl-redis-test.XXXXXX";
        if (mkdtemp(dir) == nullptr) {
            why_ = "mkdtemp failed";
            return;
        }
        dir_ = dir;
        const std::string sock = dir_ + "/redis.sock";
        std::string bin = redis_server();
        std::vector<std::string> args = {bin,  "--port",       "0",      "--unixsocket", sock, "--save",
                                         "",   "--appendonly", "no",     "--dir",        dir_, "--daemonize",
                                         "no", "--loglevel",   "warning"};
        std::vector<char *> argv;
        for (std::string &a : args) {
            argv.push_back(a.data());
        }
        argv.push_back(nullptr);
        if (posix_spawn(&pid_, bin.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
            why_ = "cannot run " + bin + " (set RL_REDIS_SERVER)";
            return;
        }
        for (int i = 0; i < 500 && fd_ < 0; i++) {  // up to 5 s
            usleep(10000);
            int fd = socket(AF_UNIX, SOCK_STREAM, 0);
            sockaddr_un a{};
            a.sun_family = AF_UNIX;
            std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock.c_str());
            if (connect(fd, (sockaddr *) &a, sizeof(a)) == 0) {
                fd_ = fd;
            } else {
                ::close(fd);
            }
        }
        if (fd_ < 0) {
            why_ = "redis-server did not start on " + sock;
        }
    }

    ~Redis()
    {
        if (fd_ >= 0) {
            ::close(fd_);
        }
        if (pid_ > 0) {
            kill(pid_, SIGTERM);
            waitpid(pid_, nullptr, 0);
        }
        if (!dir_.empty()) {
            std::string cmd = "rm -rf " + dir_;
            if (std::system(cmd.c_str()) != 0) {
            }
        }
    }

    pid_t pid_ = -1;
    int fd_ = -1;
    std::string dir_, why_, buf_;
};

// Skipped, saying why, where there is no redis-server (./build.sh test
// installs Debian's); failed where it is there but does not start.
#define NEED_REDIS()                                                                                                   \
    if (access(redis_server().c_str(), X_OK) != 0) {                                                                   \
        GTEST_SKIP() << redis_server() << " is not installed: ./build.sh test installs it "                            \
                     << "(or set RL_REDIS_SERVER)";                                                                    \
    }                                                                                                                  \
    Redis &redis = Redis::instance();                                                                                  \
    ASSERT_TRUE(redis.ok()) << redis.why()

std::string script_sha()
{
    Redis &redis = Redis::instance();
    size_t len;
    const char *text = rl_redis_script(&len);
    rl_resp_t r = redis.command({"SCRIPT", "LOAD", std::string(text, len)});
    EXPECT_EQ(r.type, RL_RESP_BULK) << std::string(r.str ? r.str : "", r.str_len);
    return std::string(r.str, r.str_len);
}

// A request of these checks.
rl_request_t request_of(rl_check_t *c, size_t n, int combine)
{
    rl_request_t rq{};
    rq.checks = c;
    rq.n = n;
    rq.combine = combine;
    return rq;
}

// The script's numbers as they are, concluded as the core concludes them:
// for replies that rl_redis_answer may refuse (after the trace's clock
// stepped back further than RL_REDIS_CLOCK_SLACK_MS).
int decode(rl_request_t &rq, const rl_resp_t &r)
{
    if (r.type != RL_RESP_ARRAY || !r.integers || r.nitems != 2 + 10 * rq.n) {
        return -1;
    }
    for (size_t i = 0; i < rq.n; i++) {
        const int64_t *v = r.items + 2 + 10 * i;
        rl_decision_t &d = rq.checks[i].decision;
        d = rl_decision_t{};
        d.allowed = (int32_t) v[0];
        d.never = (int32_t) v[1];
        d.remaining = (uint64_t) v[2];
        d.reset_ms = v[3];
        d.retry_after_ms = v[4];
        d.delay_ms = v[5];
        d.window_ms = v[6];
        d.available_ms = v[7];
        d.banned_ms = v[8];
        rq.checks[i].after.t = v[9];
        rq.checks[i].at = r.items[1];
    }
    return rl::conclude(rq, r.items[0] != 0);
}

// One request through the script: the reply's decisions in c; 1 if
// admitted, 0 if not, -1 for a reply that is not the script's answer.
// steady: the trace's clock never stepped back more than
// RL_REDIS_CLOCK_SLACK_MS, so every reply must be in range.
int check_in_redis(const std::string &sha, const std::string &prefix, std::vector<rl_check_t> &c, int combine,
                   int64_t now, size_t *binding, bool steady)
{
    rl_request_t rq = request_of(c.data(), c.size(), combine);
    std::string cmd(rl_redis_command_size(c.size(), prefix.size(), sha.size()), '\0');
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_DECIDE, prefix.data(), prefix.size(), 0,
                                &rq, now));
    rl_resp_t r = Redis::instance().call(cmd);
    rl_redis_answer_t a;
    int verdict = rl_redis_answer(&rq, RL_REDIS_DECIDE, &r, &a) == RL_REDIS_DECIDED ? a.verdict : -1;
    if (verdict < 0) {
        if (steady) {
            ADD_FAILURE() << "refused: " << a.why;
        }
        EXPECT_FALSE(steady) << "a reply of the script refused on a steady clock: " << a.why;
        verdict = decode(rq, r);
    }
    EXPECT_GE(verdict, 0) << "reply type " << (char) r.type << ": " << std::string(r.str ? r.str : "", r.str_len);
    *binding = rq.binding;
    return verdict < 0 ? -1 : verdict != RL_VERDICT_REJECTED;
}

std::string describe(const rl_decision_t &d)
{
    return "allowed=" + std::to_string(d.allowed) + " never=" + std::to_string(d.never) +
           " remaining=" + std::to_string(d.remaining) + " reset=" + std::to_string(d.reset_ms) +
           " retry=" + std::to_string(d.retry_after_ms) + " delay=" + std::to_string(d.delay_ms) +
           " window=" + std::to_string(d.window_ms) + " available=" + std::to_string(d.available_ms) +
           " quota=" + std::to_string(d.quota) + " banned=" + std::to_string(d.banned_ms);
}

bool same(const rl_decision_t &a, const rl_decision_t &b)
{
    return a.allowed == b.allowed && a.never == b.never && a.remaining == b.remaining && a.reset_ms == b.reset_ms &&
           a.retry_after_ms == b.retry_after_ms && a.delay_ms == b.delay_ms && a.window_ms == b.window_ms &&
           a.available_ms == b.available_ms && a.quota == b.quota && a.banned_ms == b.banned_ms;
}

// A request's charges settled through the script (with the trace's
// clock): each settled check's charged, in_debt and capped set.
bool settle_in_redis(const std::string &sha, const std::string &prefix, std::vector<rl_check_t> &c, int64_t now)
{
    rl_request_t rq = request_of(c.data(), c.size(), RL_COMBINE_ALL);
    std::string cmd(rl_redis_command_size(c.size(), prefix.size(), sha.size()), '\0');
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_SETTLE, prefix.data(), prefix.size(), 0,
                                &rq, now));
    rl_resp_t r = Redis::instance().call(cmd);
    rl_redis_answer_t a;
    const int kind = rl_redis_answer(&rq, RL_REDIS_SETTLE, &r, &a);
    EXPECT_EQ(kind, RL_REDIS_DECIDED) << a.why << " (reply type " << (char) r.type << ": "
                                      << std::string(r.str ? r.str : "", r.str_len) << ")";
    return kind == RL_REDIS_DECIDED;
}

// ---- a trace: the same requests through the core and through Redis ----------

// What the traces went through, so that a test can tell it saw charges,
// debts, caps and bans.
struct Seen {
    size_t ends = 0, charged = 0, debts = 0, capped = 0, banned = 0, bans = 0;
};
Seen seen;

struct Trace {
    std::vector<rl_rule_t> rules;
    std::vector<std::string> texts;
    int combine = RL_COMBINE_ALL;
    void *table = nullptr;
    size_t table_size = 1 << 20;
    std::string prefix;

    Trace(const std::vector<std::string> &t, int comb, const std::string &pfx) : texts(t), combine(comb), prefix(pfx)
    {
        std::vector<uint32_t> blobs;
        for (const std::string &s : texts) {
            rules.push_back(rule_of(s));
            char err[RL_ERR_MAX];
            EXPECT_EQ(rl_redis_rule_ok(&rules.back(), err, sizeof(err)), RL_OK) << s << ": " << err;
            blobs.push_back(rl_rule_block_size(&rules.back()));
        }
        table = std::aligned_alloc(64, table_size);
        std::memset(table, 0, table_size);  // rl_table_init takes zeroed memory
        char err[RL_ERR_MAX];
        EXPECT_EQ(rl_table_init(table, table_size, blobs.data(), blobs.size(), nullptr, err, sizeof(err)), RL_OK)
            << err;
    }
    ~Trace() { std::free(table); }

    std::vector<rl_check_t> checks(const std::vector<std::string> &keys, const std::vector<uint64_t> &costs)
    {
        std::vector<rl_check_t> c(rules.size());
        for (size_t i = 0; i < rules.size(); i++) {
            c[i] = rl_check_t{};
            c[i].table = table;
            c[i].rule = &rules[i];
            c[i].identity = rl_rule_identity(&rules[i], "k", 1) + i;  // distinct state per rule
            c[i].key = keys[i].data();
            c[i].key_len = keys[i].size();
            c[i].cost = costs[i];
        }
        return c;
    }

    // A request admitted both ways, in flight until it ends: its checks in
    // the core and in Redis, and its keys.
    struct Flight {
        std::vector<std::string> keys;
        std::vector<rl_check_t> local, remote;
    };
    std::vector<Flight> flights;

    // Runs one request both ways; false (with a failure) on a difference.
    // An admitted request of a charge= rule stays in flight.
    bool step(const std::string &sha, const std::vector<std::string> &keys, const std::vector<uint64_t> &costs,
              int64_t now, size_t op, bool steady)
    {
        Flight f{keys, {}, {}};
        f.local = checks(f.keys, costs);
        f.remote = checks(f.keys, costs);
        std::vector<rl_check_t> &local = f.local, &remote = f.remote;
        size_t lb, rb;
        const int la = decide(local.data(), local.size(), combine, now, &lb);
        const int ra = check_in_redis(sha, prefix, remote, combine, now, &rb, steady);
        bool ok = la == ra && lb == rb;
        for (size_t i = 0; i < rules.size(); i++) {
            ok = ok && same(local[i].decision, remote[i].decision);
        }
        if (!ok) {
            std::string msg = "op " + std::to_string(op) + " at " + std::to_string(now) + ", combine " +
                              std::to_string(combine) + ":\n";
            for (size_t i = 0; i < rules.size(); i++) {
                msg += "  rule \"" + texts[i] + "\" key " + keys[i] + " cost " + std::to_string(costs[i]) +
                       "\n    core:  " + describe(local[i].decision) + "\n    redis: " + describe(remote[i].decision) +
                       "\n";
            }
            ADD_FAILURE() << msg << "  allowed core " << la << " redis " << ra << ", binding " << lb << " / " << rb;
            return false;
        }
        bool charges = false;
        for (size_t i = 0; i < rules.size(); i++) {
            charges |= rl_check_charges(&local[i]) != 0;
            const int64_t ban = local[i].decision.banned_ms;
            seen.banned += ban > 0 && ban < rules[i].ban_ms;  // refused while banned
            seen.bans += ban > 0 && ban == rules[i].ban_ms;   // a ban started
        }
        if (charges) {
            flights.push_back(std::move(f));
        }
        return true;
    }

    // One request in flight ends, charged: the cost it reserved given back
    // and its charge spent, both ways; false (with a failure) on a
    // difference in what was charged or in the debt.
    bool end(const std::string &sha, std::mt19937_64 &g, int64_t now, size_t op)
    {
        const size_t which = g() % flights.size();
        Flight f = std::move(flights[which]);
        flights.erase(flights.begin() + (long) which);
        for (size_t i = 0; i < rules.size(); i++) {
            const uint64_t top = 2 * (uint64_t) std::max(rules[i].limit, rules[i].burst);
            const unsigned c = (unsigned) (g() % 100);
            const uint64_t units = c < 30   ? 0
                                   : c < 45 ? f.local[i].cost
                                   : c < 90 ? g() % (top + 2)
                                   : c < 97 ? top + 1 + g() % top
                                            : RL_NO_CHARGE - 1 - g() % 3;
            for (std::vector<rl_check_t> *v : {&f.local, &f.remote}) {
                (*v)[i].key = f.keys[i].data();
                (*v)[i].charge = rl_check_charges(&(*v)[i]) ? units : RL_NO_CHARGE;
            }
        }
        rl_request_t rq = request_of(f.local.data(), f.local.size(), combine);
        rl_request_end(&rq, now);
        if (!settle_in_redis(sha, prefix, f.remote, now)) {
            return false;
        }
        bool ok = true;
        std::string msg;
        for (size_t i = 0; i < rules.size(); i++) {
            const rl_check_t &l = f.local[i], &r = f.remote[i];
            if (l.charge == RL_NO_CHARGE) {
                continue;
            }
            const bool same_charge = l.charged == r.charged && l.in_debt == r.in_debt && l.capped == r.capped;
            ok = ok && same_charge;
            seen.ends++;
            seen.charged += l.charged > 0;
            seen.debts += l.in_debt != 0;
            seen.capped += l.capped != 0;
            msg += "  rule \"" + texts[i] + "\" key " + f.keys[i] + " cost " + std::to_string(l.cost) + " charge " +
                   std::to_string(l.charge) + " (admitted at " + std::to_string(l.at) + "): core charged " +
                   std::to_string(l.charged) + " debt " + std::to_string(l.in_debt) + " capped " +
                   std::to_string(l.capped) + ", redis " + std::to_string(r.charged) + " debt " +
                   std::to_string(r.in_debt) + " capped " + std::to_string(r.capped) + "\n";
        }
        if (!ok) {
            ADD_FAILURE() << "end at op " + std::to_string(op) + " at " + std::to_string(now) + ":\n" << msg;
        }
        return ok;
    }
};

const char *const kAlgorithms[] = {"gcra",        "token_bucket", "fixed_window", "sliding_window",
                                   "sliding_log", "leaky_bucket", "quota"};

// A random rule of the algorithm, within what a Redis zone accepts.
std::string random_rule(std::mt19937_64 &g, const std::string &algorithm)
{
    auto pick = [&](std::initializer_list<const char *> v) { return std::string(v.begin()[g() % v.size()]); };
    const int limit = 1 + (int) (g() % 20);
    std::string r = "algorithm=" + algorithm + " limit=" + std::to_string(limit);
    if (algorithm == "quota") {
        r += " reset=" + pick({"daily", "weekly", "monthly"}) + " utc_offset=" + pick({"+00:00", "+05:30", "-08:00"});
        return r;
    }
    r += " period=" + pick({"1s", "700ms", "10s", "1m", "1h", "1d"});
    if (algorithm == "gcra" || algorithm == "token_bucket") {
        r += " burst=" + std::to_string(1 + g() % 30);
    } else if (algorithm == "fixed_window") {
        r += " align=" + pick({"epoch", "first"});
    } else if (algorithm == "sliding_window") {
        r += " buckets=" + pick({"1", "2", "5", "10", "60"});
    } else if (algorithm == "leaky_bucket") {
        r += " max_delay=" + pick({"0", "100ms", "1s", "30s"});
        r += " delay=" + pick({"0", "0", "1", "3", "25"});
    }
    return r;
}

// A random rule with, some of the time, charge= (not leaky_bucket's) and
// ban=.
std::string random_charged_rule(std::mt19937_64 &g, const std::string &algorithm)
{
    auto pick = [&](std::initializer_list<const char *> v) { return std::string(v.begin()[g() % v.size()]); };
    std::string r = random_rule(g, algorithm);
    if (algorithm != "leaky_bucket" && g() % 4 != 0) {
        r += " charge=$c";
    }
    if (g() % 3 == 0) {
        r += " ban=" + pick({"300ms", "2s", "1m", "1h"});
    }
    return r;
}

// The next request's time: mostly small steps, some long gaps, some
// backward jumps (a stepped clock).
int64_t next_time(std::mt19937_64 &g, int64_t now, int64_t period)
{
    const unsigned r = (unsigned) (g() % 100);
    if (r < 60) {
        return now + (int64_t) (g() % (uint64_t) (period / 20 + 2));
    }
    if (r < 85) {
        return now + (int64_t) (g() % (uint64_t) (period + 1));
    }
    if (r < 95) {
        return now + (int64_t) (g() % (uint64_t) (3 * period + 1));
    }
    return now - (int64_t) (g() % (uint64_t) (period / 2 + 1));
}

int64_t period_of(const rl_rule_t &r)
{
    return r.period_ms;
}

void run_trace(const std::string &sha, std::mt19937_64 &g, Trace &t, size_t ops, size_t *done)
{
    int64_t now = kT0 + (int64_t) (g() % 86400000);
    int64_t latest = now;  // the clock's furthest point so far
    int64_t period = 0;
    for (const rl_rule_t &r : t.rules) {
        period = std::max(period, period_of(r));
    }
    for (size_t op = 0; op < ops; op++) {
        latest = std::max(latest, now);
        // requests in flight end now and then (a few at a time at most)
        while (!t.flights.empty() && (t.flights.size() > 4 || g() % 3 == 0)) {
            if (!t.end(sha, g, now, op)) {
                return;
            }
        }
        std::vector<std::string> keys;
        std::vector<uint64_t> costs;
        const std::string key = "k" + std::to_string(g() % 3);
        for (const rl_rule_t &r : t.rules) {
            keys.push_back(key);
            const uint64_t top = std::max(r.limit, r.burst);
            const unsigned c = (unsigned) (g() % 100);
            costs.push_back(c < 70 ? 1 : c < 80 ? 0 : c < 97 ? g() % (top + 1) : top + 1 + g() % 3);
        }
        if (!t.step(sha, keys, costs, now, op, latest - now <= RL_REDIS_CLOCK_SLACK_MS)) {
            return;
        }
        ++*done;
        now = next_time(g, now, period);
    }
}

// ---- RESP, keys, command ---------------------------------------------------

TEST(Resp, ParsesEveryTypeAndWaitsForMore)
{
    rl_resp_t r;
    EXPECT_EQ(rl_resp_parse("+OK\r\n", 5, &r), 5);
    EXPECT_EQ(r.type, RL_RESP_STATUS);
    EXPECT_EQ(std::string(r.str, r.str_len), "OK");
    EXPECT_EQ(rl_resp_parse("-NOSCRIPT No matching script\r\n", 30, &r), 30);
    EXPECT_EQ(r.type, RL_RESP_ERROR);
    EXPECT_EQ(std::string(r.str, 8), "NOSCRIPT");
    EXPECT_EQ(rl_resp_parse(":-42\r\n", 6, &r), 6);
    EXPECT_EQ(r.integer, -42);
    EXPECT_EQ(rl_resp_parse("$3\r\nabc\r\n", 9, &r), 9);
    EXPECT_EQ(std::string(r.str, r.str_len), "abc");
    EXPECT_EQ(rl_resp_parse("$-1\r\n", 5, &r), 5);
    EXPECT_EQ(r.integer, -1);
    const std::string arr = "*3\r\n:1\r\n:-2\r\n:9007199254740993\r\n";
    EXPECT_EQ(rl_resp_parse(arr.data(), arr.size(), &r), (long) arr.size());
    ASSERT_EQ(r.nitems, 3u);
    EXPECT_EQ(r.integers, 1);
    EXPECT_EQ(r.items[2], 9007199254740993LL);
    // every strict prefix is incomplete, never an error
    for (size_t n = 0; n < arr.size(); n++) {
        EXPECT_EQ(rl_resp_parse(arr.data(), n, &r), 0) << n;
    }
    const std::string mixed = "*2\r\n$1\r\nx\r\n*1\r\n:5\r\n";
    EXPECT_EQ(rl_resp_parse(mixed.data(), mixed.size(), &r), (long) mixed.size());
    EXPECT_EQ(r.integers, 0);
}

TEST(Resp, RejectsWhatIsNotResp)
{
    rl_resp_t r;
    EXPECT_EQ(rl_resp_parse("HTTP/1.1 200\r\n", 14, &r), -1);
    EXPECT_EQ(rl_resp_parse(":12a\r\n", 6, &r), -1);
    EXPECT_EQ(rl_resp_parse("$3\r\nabcd\r\n", 10, &r), -1);
    EXPECT_EQ(rl_resp_parse("*-5\r\n", 5, &r), -1);
    EXPECT_EQ(rl_resp_parse(":99999999999999999999\r\n", 23, &r), -1);
    std::string deep;
    for (int i = 0; i < 20; i++) {
        deep += "*1\r\n";
    }
    deep += ":1\r\n";
    EXPECT_EQ(rl_resp_parse(deep.data(), deep.size(), &r), -1);
}

TEST(Redis, KeyIsPrefixAndSha256OfIdentityAndKey)
{
    char a[64], b[64], c[64];
    EXPECT_EQ(rl_redis_key(a, "rl:", 3, 0, 1, "alice", 5), 35u);
    rl_redis_key(b, "rl:", 3, 0, 1, "alice", 5);
    rl_redis_key(c, "rl:", 3, 0, 2, "alice", 5);
    EXPECT_EQ(std::string(a, 35), std::string(b, 35));
    EXPECT_NE(std::string(a, 35), std::string(c, 35));
    EXPECT_EQ(std::string(a, 3), "rl:");
    // SHA-256 of the 8 bytes of identity 1 (little endian) then "alice"
    // (computed with sha256sum: printf '\x01\0\0\0\0\0\0\0alice' | sha256sum)
    EXPECT_EQ(std::string(a + 3, 32), std::string("7722d5739177bb0bf55354c4ef9cd6b0"));
}

TEST(Redis, ClusterKeysOfOneKeyValueShareASlot)
{
    // Redis's own examples: CRC16 of "123456789" is 0x31c3; a hash tag
    // names the slot
    EXPECT_EQ(rl_redis_slot("123456789", 9), 0x31c3u);
    EXPECT_EQ(rl_redis_slot("{user1000}.following", 20), rl_redis_slot("user1000", 8));
    EXPECT_EQ(rl_redis_slot("foo{}{bar}", 10), rl_redis_slot("foo{}{bar}", 10));
    EXPECT_EQ(rl_redis_slot("foo{}{bar}", 10), rl_redis_slot("foo{}{bar}x", 10));
    char a[80], b[80];
    const size_t la = rl_redis_key(a, "rl:", 3, 1, 1, "alice", 5);
    const size_t lb = rl_redis_key(b, "rl:", 3, 1, 2, "alice", 5);
    ASSERT_EQ(la, 3u + RL_REDIS_TAG_LEN + RL_REDIS_HASH_LEN);
    EXPECT_EQ(a[3], '{');
    EXPECT_EQ(a[3 + RL_REDIS_TAG_LEN - 1], '}');
    EXPECT_NE(std::string(a, la), std::string(b, lb));
    EXPECT_EQ(rl_redis_slot(a, la), rl_redis_slot(b, lb));
    EXPECT_EQ(rl_redis_slot(a, la), rl_redis_key_slot("alice", 5));
    EXPECT_LT(rl_redis_key_slot("bob", 3), 16384u);
}

TEST(Redis, RulesTooFineForLuaNumbersAreRefused)
{
    rl_rule_t ok = rule_of("algorithm=gcra limit=1000000 period=1d");
    rl_rule_t fine = rule_of("algorithm=gcra limit=1000000000 period=1h");
    rl_rule_t quota = rule_of("algorithm=quota limit=1000000000 reset=monthly");
    char err[RL_ERR_MAX];
    EXPECT_EQ(rl_redis_rule_ok(&ok, err, sizeof(err)), RL_OK);
    EXPECT_EQ(rl_redis_rule_ok(&fine, err, sizeof(err)), RL_ERROR);
    EXPECT_NE(std::string(err).find("2^50"), std::string::npos) << err;
    EXPECT_EQ(rl_redis_rule_ok(&quota, err, sizeof(err)), RL_OK);
}

TEST(Redis, CommandIsOneEvalshaWithKeysThenArguments)
{
    rl_rule_t r = rule_of("algorithm=gcra limit=10 period=1m");
    rl_check_t c{};
    c.rule = &r;
    c.identity = 7;
    c.key = "bob";
    c.key_len = 3;
    c.cost = 2;
    const std::string sha(40, 'f');
    std::string cmd(rl_redis_command_size(1, 3, sha.size()), '\0');
    rl_request_t rq = request_of(&c, 1, RL_COMBINE_ANY);
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_DECIDE, "rl:", 3, 0, &rq, -1));
    rl_resp_t parsed;
    EXPECT_EQ(rl_resp_parse(cmd.data(), cmd.size(), &parsed), (long) cmd.size());
    EXPECT_EQ(parsed.integer, 3 + 1 + 2 + 13);
    EXPECT_EQ(cmd.substr(0, 18), "*19\r\n$7\r\nEVALSHA\r\n");
    EXPECT_NE(cmd.find("\r\n$0\r\n\r\n$1\r\n1\r\n$1\r\n0\r\n$2\r\n10\r\n$2\r\n10\r\n$5\r\n60000\r\n"),
              std::string::npos)
        << cmd;
    // cost 2, delay 0, no ban, no charge
    EXPECT_EQ(cmd.substr(cmd.size() - 28), "$1\r\n2\r\n$1\r\n0\r\n$1\r\n0\r\n$1\r\n0\r\n");
}

// The arguments of a command, as strings (a command is an array of bulk
// strings).
std::vector<std::string> args_of(const std::string &cmd)
{
    std::vector<std::string> out;
    size_t p = cmd.find("\r\n") + 2;
    while (p < cmd.size()) {
        const size_t eol = cmd.find("\r\n", p);
        const size_t len = std::stoul(cmd.substr(p + 1, eol - p - 1));
        out.push_back(cmd.substr(eol + 2, len));
        p = eol + 2 + len + 2;
    }
    return out;
}

TEST(Redis, ABanHasAKeyOfItsOwnAfterTheStatesInTheSameSlot)
{
    rl_rule_t banning = rule_of("algorithm=sliding_log limit=5 period=1s ban=1h");
    rl_rule_t plain = rule_of("limit=10");
    rl_check_t c[2] = {};
    const rl_rule_t *rules[2] = {&banning, &plain};
    for (int i = 0; i < 2; i++) {
        c[i].rule = rules[i];
        c[i].identity = 7 + (uint64_t) i;
        c[i].key = "bob";
        c[i].key_len = 3;
        c[i].cost = 1;
    }
    rl_request_t rq = request_of(c, 2, RL_COMBINE_ALL);
    const std::string sha(40, 'f');
    for (int cluster = 0; cluster < 2; cluster++) {
        std::string cmd(rl_redis_command_size(2, 3, sha.size()), '\0');
        cmd.resize(
            rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_DECIDE, "rl:", 3, cluster, &rq, -1));
        const std::vector<std::string> a = args_of(cmd);
        ASSERT_EQ(a.size(), 3u + 3 + 2 + 2 * 13);
        EXPECT_EQ(a[2], "3");  // two states, one ban
        char key[80];
        EXPECT_EQ(a[3], std::string(key, rl_redis_key(key, "rl:", 3, cluster, 7, "bob", 3)));
        EXPECT_EQ(a[4], std::string(key, rl_redis_key(key, "rl:", 3, cluster, 8, "bob", 3)));
        // the ban's: named as a state is, under another identity
        EXPECT_EQ(a[5].size(), a[3].size());
        EXPECT_NE(a[5], a[3]);
        EXPECT_NE(a[5], a[4]);
        if (cluster) {
            EXPECT_EQ(rl_redis_slot(a[5].data(), a[5].size()), rl_redis_slot(a[3].data(), a[3].size()));
        }
        EXPECT_EQ(a[8 + 11], "3600000");  // the first rule's ban=, then charge=
        EXPECT_EQ(a[8 + 12], "0");
    }
}

TEST(Redis, ASettleSendsTheChecksThatSettleWithWhatTheirAdmissionLeft)
{
    rl_rule_t tokens = rule_of("algorithm=gcra limit=1000 period=1000s charge=$c ban=1m name=tokens");
    rl_rule_t plain = rule_of("limit=10 name=plain");
    rl_check_t c[3] = {};
    const rl_rule_t *rules[3] = {&plain, &tokens, &tokens};
    for (int i = 0; i < 3; i++) {
        c[i].rule = rules[i];
        c[i].identity = 10 + (uint64_t) i;
        c[i].key = "k";
        c[i].key_len = 1;
        c[i].cost = 2;
        c[i].outcome = RL_OUTCOME_ALLOWED;
        c[i].charge = 400;
        c[i].at = kT0;
        c[i].after.t = kT0 + 2000;
    }
    c[2].outcome = RL_OUTCOME_REJECTED;  // never charged
    rl_request_t rq = request_of(c, 3, RL_COMBINE_ALL);
    const std::string sha(40, 'f');
    std::string cmd(rl_redis_command_size(3, 3, sha.size()), '\0');
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_SETTLE, "rl:", 3, 0, &rq, -1));
    const std::vector<std::string> a = args_of(cmd);
    ASSERT_EQ(a.size(), 3u + 1 + 2 + 16);
    EXPECT_EQ(a[2], "1");  // one key: the state (a settle touches no ban)
    char key[80];
    EXPECT_EQ(a[3], std::string(key, rl_redis_key(key, "rl:", 3, 0, 11, "k", 1)));
    EXPECT_EQ(a[4], "");  // Redis's clock
    EXPECT_EQ(a[5], "settle");
    // cost 2, delay 0, ban 60000, charge=; the charge, the head after, when
    const std::vector<std::string> tail(a.end() - 7, a.end());
    EXPECT_EQ(tail, (std::vector<std::string>{"2", "0", "60000", "1", "400", std::to_string(kT0 + 2000),
                                              std::to_string(kT0)}));
    // a charge too large for Lua's numbers: sent capped, the debt's bound
    // caps it anyway
    c[1].charge = RL_NO_CHARGE - 1;
    cmd.assign(rl_redis_command_size(3, 3, sha.size()), '\0');
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_SETTLE, "rl:", 3, 0, &rq, -1));
    EXPECT_EQ(args_of(cmd)[a.size() - 3], std::to_string(RL_REDIS_UNITS_MAX));
    // nothing settles: no check sent
    c[1].charge = RL_NO_CHARGE;
    cmd.assign(rl_redis_command_size(3, 3, sha.size()), '\0');
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_SETTLE, "rl:", 3, 0, &rq, -1));
    EXPECT_EQ(args_of(cmd).size(), 3u + 2);
}

TEST(Redis, RulesWithChargesAndBansAreDecidedInRedis)
{
    char err[RL_ERR_MAX];
    for (const char *ok :
         {"algorithm=sliding_log limit=5 period=15m charge=$c ban=1h",
          "algorithm=gcra limit=100000 period=1h charge=$c", "algorithm=quota limit=5 reset=daily charge=$c"}) {
        rl_rule_t r = rule_of(ok);
        EXPECT_EQ(rl_redis_rule_ok(&r, err, sizeof(err)), RL_OK) << ok << ": " << err;
    }
    // a bucket owes a limit beyond its burst: (burst + limit) x period
    rl_rule_t fits = rule_of("algorithm=gcra limit=1000000 period=6d charge=$c");
    rl_rule_t debt = rule_of("algorithm=gcra limit=1000000 period=10d charge=$c");
    rl_rule_t plain = rule_of("algorithm=gcra limit=1000000 period=10d");
    EXPECT_EQ(rl_redis_rule_ok(&fits, err, sizeof(err)), RL_OK) << err;
    EXPECT_EQ(rl_redis_rule_ok(&plain, err, sizeof(err)), RL_OK) << err;
    EXPECT_EQ(rl_redis_rule_ok(&debt, err, sizeof(err)), RL_ERROR);
    EXPECT_NE(std::string(err).find("(burst + limit) x period of 2000000 per 864000000 ms"), std::string::npos) << err;
}

// ---- the script against a real redis-server ---------------------------------

TEST(RedisScript, EveryAlgorithmMatchesTheCoreOnRandomTraces)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    std::mt19937_64 g(20261122);
    int trace = 0;
    for (const char *a : kAlgorithms) {
        size_t done = 0;
        // many short traces, each with its own random rule: >= 10,000 ops
        while (done < 10000 && !HasFailure()) {
            Trace t({random_rule(g, a)}, RL_COMBINE_ALL, "conf:" + std::to_string(trace++) + ":");
            run_trace(sha, g, t, 400, &done);
        }
        EXPECT_GE(done, 10000u) << a;
        std::printf("%-15s %zu operations identical in Redis and the core\n", a, done);
    }
}

TEST(RedisScript, StackedRulesMatchTheCoreWithAllAndAny)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    std::mt19937_64 g(7);
    size_t done = 0;
    int trace = 0;
    while (done < 10000 && !HasFailure()) {
        std::vector<std::string> rules;
        const size_t n = 2 + g() % 2;
        for (size_t i = 0; i < n; i++) {
            rules.push_back(random_rule(g, kAlgorithms[g() % 7]));
        }
        Trace t(rules, g() % 2 ? RL_COMBINE_ANY : RL_COMBINE_ALL, "stack:" + std::to_string(trace++) + ":");
        run_trace(sha, g, t, 200, &done);
    }
    EXPECT_GE(done, 10000u);
}

// charge= and ban=: requests in flight end in any order, charged from 0 to
// far past the debt's bound, and every decision, every charge, debt and cap
// is the same through the script as through the core.
TEST(RedisScript, ChargesAndBansMatchTheCoreOnRandomTraces)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    std::mt19937_64 g(26);
    int trace = 0;
    for (const char *a : kAlgorithms) {
        size_t done = 0;
        while (done < 10000 && !HasFailure()) {
            Trace t({random_charged_rule(g, a)}, RL_COMBINE_ALL, "charge:" + std::to_string(trace++) + ":");
            run_trace(sha, g, t, 400, &done);
        }
        EXPECT_GE(done, 10000u) << a;
        std::printf("%-15s %zu operations with charges and bans identical in Redis and the core\n", a, done);
    }
    std::printf("%zu requests ended: %zu charged, %zu in debt, %zu capped; %zu bans, %zu refusals while banned\n",
                seen.ends, seen.charged, seen.debts, seen.capped, seen.bans, seen.banned);
    // the traces went where the arithmetic differs most
    EXPECT_GT(seen.debts, 1000u);
    EXPECT_GT(seen.capped, 500u);
    EXPECT_GT(seen.bans, 500u);
    EXPECT_GT(seen.banned, 500u);
}

TEST(RedisScript, StackedRulesWithChargesAndBansMatchTheCore)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    std::mt19937_64 g(2626);
    size_t done = 0;
    int trace = 0;
    while (done < 10000 && !HasFailure()) {
        std::vector<std::string> rules;
        const size_t n = 2 + g() % 2;
        for (size_t i = 0; i < n; i++) {
            rules.push_back(random_charged_rule(g, kAlgorithms[g() % 7]));
        }
        Trace t(rules, g() % 2 ? RL_COMBINE_ANY : RL_COMBINE_ALL, "stackc:" + std::to_string(trace++) + ":");
        run_trace(sha, g, t, 200, &done);
    }
    EXPECT_GE(done, 10000u);
}

// One request through the script on the trace's clock: its verdict.
int call_script(const std::string &sha, const std::string &prefix, rl_request_t &rq, int call, int64_t now,
                rl_redis_answer_t *a)
{
    std::string cmd(rl_redis_command_size(rq.n, prefix.size(), sha.size()), '\0');
    cmd.resize(
        rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, call, prefix.data(), prefix.size(), 0, &rq, now));
    rl_resp_t reply = Redis::instance().call(cmd);
    EXPECT_EQ(rl_redis_answer(&rq, call, &reply, a), RL_REDIS_DECIDED) << a->why;
    return a->verdict;
}

// The tokens an upstream reports, through the script: 400 a request
// against 1,000 per 1,000 s; three served, the key 200 in debt, the fourth
// refused until the debt and its own unit are repaid (201 s).
TEST(RedisScript, ChargesGoIntoDebtAndTheRefusalSaysWhenItIsRepaid)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    rl_rule_t r = rule_of("limit=1000 period=1000s charge=$c name=tokens");
    rl_redis_answer_t a;
    int64_t now = kT0 + 5;
    for (int i = 0; i < 3; i++, now += 10) {
        rl_check_t c{};
        c.rule = &r;
        c.identity = 5;
        c.key = "key";
        c.key_len = 3;
        c.cost = 1;
        rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
        ASSERT_EQ(call_script(sha, "tk:", rq, RL_REDIS_DECIDE, now, &a), RL_VERDICT_PASSED) << i;
        EXPECT_EQ(c.at, now);
        c.charge = 400;
        call_script(sha, "tk:", rq, RL_REDIS_SETTLE, now + 5, &a);
        EXPECT_EQ(c.charged, 400u);
        EXPECT_EQ(c.in_debt, i == 2) << i;
        EXPECT_EQ(c.capped, 0);
    }
    rl_check_t c{};
    c.rule = &r;
    c.identity = 5;
    c.key = "key";
    c.key_len = 3;
    c.cost = 1;
    rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
    ASSERT_EQ(call_script(sha, "tk:", rq, RL_REDIS_DECIDE, now, &a), RL_VERDICT_REJECTED);
    // 1,200 spent as of the first charge (kT0 + 10), at a unit a second:
    // 200 units of debt and this request's one come back 201 s later, 25 ms
    // of which have gone (now is kT0 + 35)
    EXPECT_EQ(c.decision.retry_after_ms, 201000 - 25);
    EXPECT_EQ(c.decision.remaining, 0u);
}

// A refusal bans the key (ban=) for its time, in a Redis key of its own
// that expires with it; refusals during the ban do not extend it; a peek
// shows it, a reset lifts it.
TEST(RedisScript, ARefusalBansTheKeyAndAResetLiftsIt)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    rl_rule_t r = rule_of("algorithm=fixed_window limit=2 period=1s ban=1h name=login");
    auto check = [&](uint64_t cost) {
        rl_check_t c{};
        c.rule = &r;
        c.identity = 77;
        c.key = "mallory";
        c.key_len = 7;
        c.cost = cost;
        return c;
    };
    rl_redis_answer_t a;
    const int64_t t0 = kT0 + 86400000;
    for (int i = 0; i < 2; i++) {
        rl_check_t c = check(1);
        rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
        EXPECT_EQ(call_script(sha, "bn:", rq, RL_REDIS_DECIDE, t0 + i, &a), RL_VERDICT_PASSED);
    }
    rl_check_t c = check(1);
    rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
    EXPECT_EQ(call_script(sha, "bn:", rq, RL_REDIS_DECIDE, t0 + 10, &a), RL_VERDICT_REJECTED);
    EXPECT_EQ(c.decision.banned_ms, 3600000);
    EXPECT_EQ(c.decision.retry_after_ms, 3600000);
    // the window would admit again: banned, and not for longer
    EXPECT_EQ(call_script(sha, "bn:", rq, RL_REDIS_DECIDE, t0 + 5000, &a), RL_VERDICT_REJECTED);
    EXPECT_EQ(c.decision.banned_ms, 3600000 - 4990);
    EXPECT_EQ(c.decision.retry_after_ms, 3600000 - 4990);
    // a cost it can never admit is refused, and bans nothing more
    rl_check_t big = check(3);
    rl_request_t brq = request_of(&big, 1, RL_COMBINE_ALL);
    EXPECT_EQ(call_script(sha, "bn:", brq, RL_REDIS_DECIDE, t0 + 6000, &a), RL_VERDICT_REJECTED);
    // the ban's own key, expiring with it (a test's clock: a day longer)
    char key[80];
    const size_t len = rl_redis_key(key, "bn:", 3, 0, 77, "mallory", 7);
    rl_resp_t keys = Redis::instance().command({"KEYS", "bn:*"});
    EXPECT_EQ(keys.integer, 2);
    rl_resp_t ttl = Redis::instance().command({"PTTL", std::string(key, len)});
    EXPECT_GT(ttl.integer, 0);
    // a peek: the look shows the ban, the next request is refused by it
    rl_check_t look[2] = {check(0), check(1)};
    rl_request_t prq = request_of(look, 2, RL_COMBINE_ALL);
    call_script(sha, "bn:", prq, RL_REDIS_PEEK, t0 + 7000, &a);
    EXPECT_EQ(look[0].decision.allowed, 1);
    EXPECT_EQ(look[0].decision.banned_ms, 3600000 - 6990);
    EXPECT_EQ(look[1].decision.allowed, 0);
    EXPECT_EQ(look[1].decision.banned_ms, 3600000 - 6990);
    // a reset lifts it: the key is admitted afresh
    rl_check_t gone = check(1);
    rl_request_t rrq = request_of(&gone, 1, RL_COMBINE_ALL);
    call_script(sha, "bn:", rrq, RL_REDIS_RESET, t0 + 8000, &a);
    EXPECT_EQ(a.found, 1u);
    EXPECT_EQ(a.unbanned, 1u);
    EXPECT_EQ(Redis::instance().command({"KEYS", "bn:*"}).integer, 0);
    EXPECT_EQ(call_script(sha, "bn:", rq, RL_REDIS_DECIDE, t0 + 9000, &a), RL_VERDICT_PASSED);
}

TEST(RedisScript, StateExpiresWhenBackToFullBudgetAndHoldsNoKeyBytes)
{
    NEED_REDIS();
    const std::string sha = script_sha();
    rl_rule_t r = rule_of("algorithm=gcra limit=10 period=1m");
    rl_check_t c{};
    c.rule = &r;
    c.identity = 99;
    c.key = "secret-api-key";
    c.key_len = 14;
    c.cost = 3;
    // Redis's own clock (now < 0): 3 of 10 per minute spent = 18 s to full
    const std::string prefix = "ttl:";
    rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
    std::string cmd(rl_redis_command_size(1, prefix.size(), sha.size()), '\0');
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_DECIDE, prefix.data(), prefix.size(), 0,
                                &rq, -1));
    rl_resp_t reply = redis.call(cmd);
    rl_redis_answer_t a;
    ASSERT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &reply, &a), RL_REDIS_DECIDED) << a.why;
    ASSERT_EQ(a.verdict, RL_VERDICT_PASSED);
    EXPECT_EQ(c.decision.remaining, 7u);
    EXPECT_EQ(c.decision.reset_ms, 18000);
    char key[64];
    rl_redis_key(key, prefix.data(), prefix.size(), 0, 99, "secret-api-key", 14);
    rl_resp_t ttl = redis.command({"PTTL", std::string(key, prefix.size() + RL_REDIS_HASH_LEN)});
    EXPECT_GT(ttl.integer, 17900);
    EXPECT_LE(ttl.integer, 18001);
    rl_resp_t keys = redis.command({"KEYS", "*secret*"});
    EXPECT_EQ(keys.integer, 0);
}

TEST(RedisScript, NoscriptIsAnErrorReplyAndEvalLoadsTheScript)
{
    NEED_REDIS();
    redis.command({"SCRIPT", "FLUSH"});
    rl_rule_t r = rule_of("algorithm=fixed_window limit=2 period=1m");
    rl_check_t c{};
    c.rule = &r;
    c.key = "x";
    c.key_len = 1;
    c.cost = 1;
    size_t len;
    const char *text = rl_redis_script(&len);
    const std::string sha = "0000000000000000000000000000000000000000";
    rl_request_t rq = request_of(&c, 1, RL_COMBINE_ALL);
    std::string cmd(rl_redis_command_size(1, 2, len), '\0');
    cmd.resize(rl_redis_command(cmd.data(), sha.data(), sha.size(), 0, RL_REDIS_DECIDE, "n:", 2, 0, &rq, kT0));
    rl_resp_t reply = redis.call(cmd);
    EXPECT_EQ(reply.type, RL_RESP_ERROR);
    EXPECT_EQ(std::string(reply.str, 8), "NOSCRIPT");
    rl_redis_answer_t a;
    EXPECT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &reply, &a), RL_REDIS_NOSCRIPT);
    cmd.assign(rl_redis_command_size(1, 2, len), '\0');
    cmd.resize(rl_redis_command(cmd.data(), text, len, 1, RL_REDIS_DECIDE, "n:", 2, 0, &rq, kT0));
    reply = redis.call(cmd);
    ASSERT_EQ(rl_redis_answer(&rq, RL_REDIS_DECIDE, &reply, &a), RL_REDIS_DECIDED) << a.why;
    EXPECT_EQ(a.verdict, RL_VERDICT_PASSED);
    EXPECT_EQ(c.decision.remaining, 1u);
    // EVAL cached it: the real SHA-1 works now
    EXPECT_EQ(script_sha().size(), 40u);
}

}  // namespace
