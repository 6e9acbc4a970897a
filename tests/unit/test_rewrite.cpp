// Unit tests for rewrite (placeholder until the work lands).
#include <doctest/doctest.h>
