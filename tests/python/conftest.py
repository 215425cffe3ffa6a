"""pytest setup for the Python package's tests (CTest label / pytest marker `python`).

Every array the package allocates for its outputs is poisoned (NaN for floats, all-ones bytes
otherwise) so that an element the kernels fail to write fails the comparison."""

import pytest

import flashback._framework as fwmod


def _poison(fw, x):
    name = fw.dtype_name(x)
    if name.startswith("float") or name.startswith("bfloat"):
        x[...] = float("nan")
    elif name == "uint8":
        x[...] = 0xFF
    else:
        x[...] = -1
    return x


@pytest.fixture(autouse=True)
def poison_outputs(monkeypatch):
    for cls in (fwmod.Framework, fwmod.Torch, fwmod.CuPy):
        original = cls.__dict__.get("empty", fwmod.Framework.empty)

        def empty(self, shape, dtype, like, _original=original):
            return _poison(self, _original(self, shape, dtype, like))

        monkeypatch.setattr(cls, "empty", empty)
    yield


@pytest.fixture(params=["fast", "oracle"])
def reference(request):
    """Runs a test against both CPU implementations: the fast kernels and the fp64 oracle
    (`reference=True`), each compared with the tests' own float64 reference."""
    return request.param == "oracle"


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.python)
