// lucerna-ds4-shard: serves this host's device to a deepseek4 target over the engine's ggml RPC
// (PROTOCOL.md 5.8); on stdin it answers stats (what its clients hold here) and quit.
#include "daemon/daemon.h"

int main(int argc, char ** argv) { return lucerna::run_daemon(lucerna::Role::kDs4Shard, argc, argv); }
