// What the host side asks of a CUDA device on every call (SM count, compute capability), read
// from the runtime once per device: split planning (dispatch.cu) and the choice and grid of the
// Hopper kernels (prefill/launch.cu, the MLA decode choice in dispatch.cu) share it.
#pragma once

namespace flashback::cuda {

struct DeviceFacts {
  int sms = 0;  // streaming multiprocessors
  int cc_major = 0, cc_minor = 0;
  // This library holds sm_90a code (the Hopper wgmma kernels) and the device runs it: sm_90a
  // code runs on compute capability 9.0 only.
  bool sm90a = false;
  // Shared memory per block (the opt-in maximum a kernel may ask for) and per SM, bytes.
  int smem_block = 0, smem_sm = 0;
};

/// The facts of device `device`, or of the current device when `device` < 0.
DeviceFacts device_facts(int device = -1);

}  // namespace flashback::cuda
