// Fault injection, for tests/fault_test.cc only: table.cpp built with
// RL_FAULT_INJECTION calls fault_step() at every step of an operation; the
// test sets how many steps to let pass, and the next one throws Crash, which
// abandons the operation where a killed process would have.
#pragma once

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
