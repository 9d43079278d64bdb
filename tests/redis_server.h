// A private redis-server for the core's tests (tests/redis_test.cc,
// tests/redis_trace_test.cc): Debian's, started once, on a unix socket, with
// no persistence, and a blocking client to it.  For tests only.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "helpers.h"

extern char **environ;

namespace rltest {

// ---- a blocking client, for tests only --------------------------------------

inline std::string redis_server()
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

    // The last reply's bytes.
    const std::string &raw() const { return buf_; }

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

// The script's SHA-1, the script cached (EVALSHA) and loaded as a library
// (FCALL), as the glue loads it.
inline std::string script_sha()
{
    Redis &redis = Redis::instance();
    size_t len;
    const char *text = rl_redis_script(&len);
    rl_resp_t r = redis.command({"SCRIPT", "LOAD", std::string(text, len)});
    EXPECT_EQ(r.type, RL_RESP_BULK) << std::string(r.str ? r.str : "", r.str_len);
    const std::string sha(r.str, r.str_len);
    std::string load(rl_redis_load_size(), '\0');
    load.resize(rl_redis_load_command(load.data(), sha.data()));
    rl_resp_t l = redis.call(load);
    rl_redis_answer_t a;
    EXPECT_EQ(rl_redis_load_answer(&l, &a), RL_REDIS_DECIDED) << std::string(l.str ? l.str : "", l.str_len);
    return sha;
}

}  // namespace rltest
