// Fault injection, for tests/fault_test.cc only: table.cpp built with
// RL_FAULT_INJECTION calls fault_step() at every step of an operation; the
// test sets how many steps to let pass, and the next one throws Crash, which
// abandons the operation where a killed process would have. In any other
// build RL_STEP() and RL_RETHROW_CRASH are nothing.
#pragma once

#ifdef RL_FAULT_INJECTION

namespace rl {

struct Crash {};

extern long fault_countdown;  // 0: never

inline void fault_step()
{
    if (fault_countdown > 0 && --fault_countdown == 0) {
        throw Crash{};
    }
}

}  // namespace rl

// A catch-all handler lets a Crash through (it is no error: it stands for
// the process dying there).
#define RL_STEP() rl::fault_step()
#define RL_RETHROW_CRASH                                                                                               \
    catch (const rl::Crash &)                                                                                          \
    {                                                                                                                  \
        throw;                                                                                                         \
    }

#else

#define RL_STEP() ((void) 0)
#define RL_RETHROW_CRASH

#endif
