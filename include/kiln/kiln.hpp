// kiln's embeddable C++ API: the IR (build, parse, print, verify), the reference
// interpreter, the pass manager and device placement (resolveDevices, applyPlacement,
// partitionPipeline, runAffinity, placementReport). Link with `pkg-config --libs kiln`.
//
//   auto m = kiln::parseModuleFile("model.kir");          // Result<unique_ptr<Module>>
//   if (!m.ok()) { std::cerr << m.diags().str(); return 1; }
//   kiln::PassManager pm;
//   (void)pm.addPipeline("default");
//   kiln::WeightStore weights(**m);
//   auto outs = kiln::interpret(*(*m)->lookupFunc("main"), inputs, weights);
#pragma once

#include "ir/core/builder.h"
#include "ir/core/diag.h"
#include "ir/core/ir.h"
#include "ir/interp/interp.h"
#include "ir/io/npy.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "passes/affinity.h"
#include "passes/pass_manager.h"
#include "passes/placement.h"
#include "passes/placement_report.h"
