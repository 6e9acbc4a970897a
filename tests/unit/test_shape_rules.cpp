// Unit tests for shape_rules (placeholder until the work lands).
#include <doctest/doctest.h>
