// PLACEHOLDER (replaced by the rewrite-engine work): src/ir/rewrite.h and this file.
