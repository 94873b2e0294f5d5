/* fuzz_target.h - the entry point that every fuzz/fuzz_*.c defines and that
 * libFuzzer (./dev fuzz) or replay_main.c (the CTest replays) calls. */
#ifndef MOONTAIL_FUZZ_TARGET_H
#define MOONTAIL_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
