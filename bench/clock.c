/*
 * A virtual clock for bench/instructions, preloaded into nginx: time moves
 * by RL_CLOCK_STEP_US microseconds at each gettimeofday() (nginx reads the
 * wall clock once each time it wakes up, in ngx_time_update) and by nothing
 * else, from RL_CLOCK_START (seconds since the epoch).  A request then
 * arrives at the same virtual instant in every run, however fast valgrind
 * runs nginx on this machine, so that the algorithms' states, and with them
 * the instructions they take, are the same from run to run.
 *
 * clock_gettime() of the real-time and monotonic clocks reads the same
 * virtual time without moving it (nginx's ngx_current_msec).  Other clocks
 * (CPU time) are the real ones; nginx does not call time() here.
 *
 * getrandom() gives the same bytes in every run, so that a zone's secret,
 * and with it where its keys and overrides sit in its tables and how far a
 * look-up probes, is the same from run to run too (with a fresh secret a
 * run, a look-up among 10,000 overrides moves by 10 instructions or more).
 */

#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>


static int64_t  now_us = -1;
static int64_t  step_us;


static int64_t
virtual_now(int64_t step)
{
    const char  *start, *s;

    if (now_us < 0) {
        start = getenv("RL_CLOCK_START");
        s = getenv("RL_CLOCK_STEP_US");
        now_us = (start ? strtoll(start, NULL, 10) : 0) * 1000000;
        step_us = s ? strtoll(s, NULL, 10) : 1000;
    }

    now_us += step ? step_us : 0;

    return now_us;
}


int
gettimeofday(struct timeval *tv, void *tz)
{
    int64_t  t;

    (void) tz;

    t = virtual_now(1);
    tv->tv_sec = t / 1000000;
    tv->tv_usec = t % 1000000;

    return 0;
}


int
clock_gettime(clockid_t id, struct timespec *ts)
{
    int64_t  t;

    switch (id) {
    case CLOCK_REALTIME:
    case CLOCK_REALTIME_COARSE:
    case CLOCK_MONOTONIC:
    case CLOCK_MONOTONIC_COARSE:
    case CLOCK_MONOTONIC_RAW:
    case CLOCK_BOOTTIME:
        t = virtual_now(0);
        ts->tv_sec = t / 1000000;
        ts->tv_nsec = (t % 1000000) * 1000;
        return 0;

    default:
        return syscall(SYS_clock_gettime, id, ts);
    }
}


ssize_t
getrandom(void *buf, size_t len, unsigned int flags)
{
    size_t           i;
    unsigned char   *p = buf;
    static uint64_t  x = 0x9e3779b97f4a7c15;

    (void) flags;

    for (i = 0; i < len; i++) {
        /* xorshift64, from the same seed in every process */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char) x;
    }

    return (ssize_t) len;
}
