// CPU emulation stand-in for <cuda_runtime.h> (see emu_rt.h).
#pragma once
#include "emu_rt.h"
