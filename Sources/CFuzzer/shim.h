// libFuzzer's driver, linked in only by `make fuzz` (its runtime, libclang_rt.fuzzer_no_main, comes with the Swift
// toolchain). Declared weak, so that every other build links without it and finds it missing.
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size))
    __attribute__((weak));

/// Whether this build has libFuzzer's driver linked in.
static inline int rewind_fuzzer_linked(void) { return LLVMFuzzerRunDriver != NULL; }
