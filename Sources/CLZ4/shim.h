#ifndef REWIND_CLZ4_SHIM_H
#define REWIND_CLZ4_SHIM_H
#include <lz4.h>
#include <lz4hc.h>
#endif
