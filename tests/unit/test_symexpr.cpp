// Unit tests for symexpr (placeholder until the work lands).
#include <doctest/doctest.h>
