// lucerna-laguna: Laguna MoE.
#include "daemon/daemon.h"

int main(int argc, char ** argv) { return lucerna::run_daemon(lucerna::Role::kLaguna, argc, argv); }
