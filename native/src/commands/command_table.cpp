#include "commands/command_table.h"

#include <algorithm>

#include "commands/handlers.h"

namespace lucerna {
namespace {

constexpr bool kStream = true;
constexpr bool kReplyOnly = false;
constexpr bool kNeedsWeights = true;
constexpr bool kAnyState = false;
constexpr bool kListed = true;
constexpr bool kUnlisted = false;
using W = WhileRunning;

}  // namespace

const std::vector<CommandInfo> & command_table() {
    // clang-format off
    static const std::vector<CommandInfo> kCommands = {
        // name            stream       weights        on read                   served by                  capabilities  while running
        {"generate",       kStream,    kNeedsWeights, OnRead::kNumberGeneration, Served::kGeneratingRoles, kListed, W::kSeqForm,
         [](CommandCall & c) { return handle_generate(c.session, c.cmd, c.queued.generate_seq); }},
        {"tokenize",       kStream,    kAnyState,     OnRead::kNothing,          Served::kGeneratingRoles, kListed, W::kWaits,
         [](CommandCall & c) { return handle_tokenize(c.session, c.cmd); }},
        {"detokenize",     kReplyOnly, kAnyState,     OnRead::kNothing,          Served::kGeneratingRoles, kListed, W::kAlongside,
         [](CommandCall & c) { return handle_detokenize(c.session, c.cmd); }},
        {"vocab",          kReplyOnly, kAnyState,     OnRead::kNothing,          Served::kGeneratingRoles, kListed, W::kAlongside,
         [](CommandCall & c) { return handle_vocab(c.session, c.cmd); }},
        {"stats",          kReplyOnly, kAnyState,     OnRead::kNothing,          Served::kEveryRole,       kListed, W::kAlongside,
         [](CommandCall & c) { return handle_stats(c.session, c.cmd); }},
        {"cancel",         kReplyOnly, kAnyState,     OnRead::kCancel,           Served::kGeneratingRoles, kListed, W::kAlongside,
         [](CommandCall & c) { return handle_cancel(c.session, c.cmd, c.queued.cancel_running); }},
        {"snapshot",       kReplyOnly, kNeedsWeights, OnRead::kNothing,          Served::kGeneratingRoles, kListed, W::kSeqForm,
         [](CommandCall & c) { return handle_snapshot(c.session, c.cmd); }},
        {"restore",        kStream,    kNeedsWeights, OnRead::kNumberGeneration, Served::kGeneratingRoles, kListed, W::kSeqForm,
         [](CommandCall & c) { return handle_restore(c.session, c.cmd, c.queued.generate_seq); }},
        {"free_snapshot",  kReplyOnly, kAnyState,     OnRead::kNothing,          Served::kGeneratingRoles, kListed, W::kAlongside,
         [](CommandCall & c) { return handle_free_snapshot(c.session, c.cmd); }},
        {"list_slots",     kReplyOnly, kAnyState,     OnRead::kNothing,          Served::kGeneratingRoles, kListed, W::kAlongside,
         [](CommandCall & c) { return handle_list_slots(c.session, c.cmd); }},
        {"save_slot",      kReplyOnly, kAnyState,     OnRead::kNothing,          Served::kGeneratingRoles, kListed, W::kAlongside,
         [](CommandCall & c) { return handle_save_slot(c.session, c.cmd); }},
        {"load_slot",      kReplyOnly, kAnyState,     OnRead::kNothing,          Served::kGeneratingRoles, kListed, W::kAlongside,
         [](CommandCall & c) { return handle_load_slot(c.session, c.cmd); }},
        {"park",           kReplyOnly, kAnyState,     OnRead::kNothing,          Served::kGeneratingRoles, kListed, W::kWaits,
         [](CommandCall & c) { return handle_park(c.session, c.cmd); }},
        {"unpark",         kReplyOnly, kAnyState,     OnRead::kNothing,          Served::kGeneratingRoles, kListed, W::kWaits,
         [](CommandCall & c) { return handle_unpark(c.session, c.cmd); }},
        {"embed",          kReplyOnly, kNeedsWeights, OnRead::kNothing,          Served::kGeneratingRoles, kListed, W::kWaits,
         [](CommandCall & c) { return handle_embed(c.session, c.cmd); }},
        {"quit",           kReplyOnly, kAnyState,     OnRead::kNothing,          Served::kEveryRole,       kListed, W::kWaits,
         [](CommandCall & c) { return handle_quit(c.cmd, "quit", c.quit); }},
        {"compress",       kStream,    kNeedsWeights, OnRead::kNothing,          Served::kPflash,          kListed, W::kWaits,
         [](CommandCall & c) { return handle_compress(c.session, c.cmd); }},
        {"exit",           kReplyOnly, kAnyState,     OnRead::kNothing,          Served::kEveryRole,       kUnlisted, W::kWaits,
         [](CommandCall & c) { return handle_quit(c.cmd, "exit", c.quit); }},
    };
    // clang-format on
    return kCommands;
}

bool runs_alongside(const QueuedCommand & queued) {
    if (queued.eof || queued.too_long) {
        return false;
    }
    const CommandInfo * command = find_command(first_word(queued.line));
    if (command == nullptr) {
        return false;
    }
    switch (command->while_running) {
        case WhileRunning::kWaits: return false;
        case WhileRunning::kAlongside: return true;
        case WhileRunning::kSeqForm: return queued.names_seq;
    }
    return false;
}

const CommandInfo * find_command(std::string_view name) {
    const auto & table = command_table();
    const auto it = std::find_if(table.begin(), table.end(), [name](const CommandInfo & c) { return c.name == name; });
    return it == table.end() ? nullptr : &*it;
}

bool serves(const CommandInfo & command, const RoleInfo & role) {
    switch (command.served) {
        case Served::kEveryRole: return true;
        case Served::kGeneratingRoles: return role.generates;
        case Served::kPflash: return std::string_view(role.name) == "pflash";
    }
    return false;
}

std::vector<std::string> capabilities(const RoleInfo & role) {
    std::vector<std::string> names;
    for (const CommandInfo & command : command_table()) {
        if (command.in_capabilities && serves(command, role)) {
            names.emplace_back(command.name);
        }
    }
    return names;
}

std::string unsupported_detail(const CommandInfo & command, const RoleInfo & role) {
    if (command.served == Served::kPflash) {
        return std::string(command.name) + " is served by the pflash role";
    }
    return std::string(command.name) + " is not served by " + role.binary + "; see capabilities in the ready line";
}

}  // namespace lucerna
