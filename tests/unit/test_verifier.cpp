// Unit tests for verifier (placeholder until the work lands).
#include <doctest/doctest.h>
