// Command handlers (PROTOCOL.md section 5). Each returns its `ok ...` reply line or
// throws ProtocolError; stream commands write their values to session.stream and the
// dispatcher (daemon/daemon.cpp) writes the single -1 terminator after them. The command
// table (commands/command_table.h) says which handler answers which command.
#pragma once

#include <cstdint>
#include <string>

#include "daemon/session.h"
#include "wire/wire.h"

namespace lucerna {

std::string handle_generate(Session & session, const CommandLine & cmd, uint64_t generate_seq);  // generate.cpp
std::string handle_tokenize(Session & session, const CommandLine & cmd);                         // tokenize.cpp
std::string handle_detokenize(Session & session, const CommandLine & cmd);                       // detokenize.cpp
std::string handle_vocab(Session & session, const CommandLine & cmd);                            // vocab.cpp
std::string handle_stats(Session & session, const CommandLine & cmd);                            // stats.cpp
std::string handle_compress(Session & session, const CommandLine & cmd);                         // compress.cpp
std::string handle_snapshot(Session & session, const CommandLine & cmd);                         // snapshot.cpp
std::string handle_restore(Session & session, const CommandLine & cmd, uint64_t generate_seq);   // snapshot.cpp
std::string handle_free_snapshot(Session & session, const CommandLine & cmd);                    // snapshot.cpp
std::string handle_list_slots(Session & session, const CommandLine & cmd);                       // snapshot.cpp
// save_slot answers once the file is queued; session.snapshot_writer writes it.
std::string handle_save_slot(Session & session, const CommandLine & cmd);                        // save_slot.cpp
std::string handle_load_slot(Session & session, const CommandLine & cmd);                        // save_slot.cpp
std::string handle_park(Session & session, const CommandLine & cmd);                             // park.cpp
std::string handle_unpark(Session & session, const CommandLine & cmd);                           // park.cpp
std::string handle_embed(Session & session, const CommandLine & cmd);                            // embed.cpp
std::string handle_cancel(Session & session, const CommandLine & cmd, bool running);                          // cancel.cpp
// quit and exit; sets `quit`.
std::string handle_quit(const CommandLine & cmd, const char * name, bool & quit);                // quit.cpp

}  // namespace lucerna
