#ifndef REWIND_CSQLITE_SHIM_H
#define REWIND_CSQLITE_SHIM_H
#include <sqlite3.h>
#endif
