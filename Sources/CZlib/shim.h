#ifndef REWIND_CZLIB_SHIM_H
#define REWIND_CZLIB_SHIM_H
#include <zlib.h>
#endif
