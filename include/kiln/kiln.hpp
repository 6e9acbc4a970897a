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

#include "ir/builder.h"
#include "ir/diag.h"
#include "ir/interp.h"
#include "ir/ir.h"
#include "ir/npy.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/affinity.h"
#include "passes/pass_manager.h"
#include "passes/placement.h"
#include "passes/placement_report.h"
