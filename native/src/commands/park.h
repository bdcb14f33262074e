// park / unpark (PROTOCOL.md 5.6): release the target's weights and context while the
// process, its snapshots and its tokenizer stay.
#pragma once

#include <string>

#include "daemon/session.h"

namespace lucerna {

// Commands that need the weights answer `err parked` while the target is parked.
bool needs_weights(const std::string & command);

}  // namespace lucerna
