// lucerna-ds4-shard: DeepSeek-V4 expert shard (weights only for now; a ggml-rpc server later).
#include "core/daemon.h"

int main(int argc, char ** argv) { return lucerna::run_daemon(lucerna::Role::kDs4Shard, argc, argv); }
