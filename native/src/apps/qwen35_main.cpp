// lucerna-qwen35: the target path (Qwen3.5 and plain-attention archs, served autoregressively).
#include "daemon/daemon.h"

int main(int argc, char ** argv) { return lucerna::run_daemon(lucerna::Role::kQwen35, argc, argv); }
