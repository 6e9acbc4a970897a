// Unit tests for interp (placeholder until the work lands).
#include <doctest/doctest.h>
