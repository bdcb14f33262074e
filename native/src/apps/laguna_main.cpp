// lucerna-laguna: Laguna MoE.
#include "core/daemon.h"

int main(int argc, char ** argv) { return lucerna::run_daemon(lucerna::Role::kLaguna, argc, argv); }
