// lucerna-pflash: the prompt-scoring drafter.
#include "daemon/daemon.h"

int main(int argc, char ** argv) { return lucerna::run_daemon(lucerna::Role::kPflash, argc, argv); }
