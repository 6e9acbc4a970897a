// Unit tests for parser (placeholder until the work lands).
#include <doctest/doctest.h>
