// Bindings of the AttentionBackend (flashback/backend.h) for engines written in Python.
#pragma once

#include <nanobind/nanobind.h>

namespace flashback::python {

void bind_backend(nanobind::module_& m);

}  // namespace flashback::python
