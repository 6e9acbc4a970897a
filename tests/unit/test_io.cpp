// Unit tests for io (placeholder until the work lands).
#include <doctest/doctest.h>
