// Priority classes of a rule (ratelimit_classes.h): its parameters, read
// for rule.cpp, and the slots a class's share keeps, for slots.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ratelimit.h"

namespace rl {

// priority=, classes= or class_default= (bit: its P_ bit) into the rule's
// classes: RL_OK, RL_DECLINED (priority=$variable, the glue's), or
// RL_ERROR with err naming the parameter (whole: as written).
int class_param(rl_rule_t &rule, uint32_t bit, const char *v, size_t len, const char *whole, size_t wlen, char *err,
                size_t errlen);

// Once every parameter is read: priority= and classes= together, the
// class_default= found.
int classes_finish(rl_rule_t &rule, char *err, size_t errlen);

// The slots of `open` a class's share keeps for it (rounded up: a share
// of a few slots keeps one).
uint32_t class_reserved(const rl_classes_t &k, uint32_t klass, uint32_t open);

}  // namespace rl
