"""The ground floor of the library: helpers that import only torch (and, lazily, numba)."""
