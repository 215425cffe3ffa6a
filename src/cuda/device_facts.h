// What the host side asks of a CUDA device on every call (SM count, compute capability), read
// from the runtime once per device: split planning (dispatch.cu) and the choice and grid of the
// Hopper prefill kernel (prefill/launch.cu) share it.
#pragma once

namespace flashback::cuda {

struct DeviceFacts {
  int sms = 0;  // streaming multiprocessors
  int cc_major = 0, cc_minor = 0;
};

/// The facts of device `device`, or of the current device when `device` < 0.
DeviceFacts device_facts(int device = -1);

}  // namespace flashback::cuda
