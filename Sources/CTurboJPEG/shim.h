#ifndef REWIND_CTURBOJPEG_SHIM_H
#define REWIND_CTURBOJPEG_SHIM_H
#include <turbojpeg.h>
#endif
