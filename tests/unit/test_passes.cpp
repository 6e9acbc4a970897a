// Unit tests for passes (placeholder until the work lands).
#include <doctest/doctest.h>
