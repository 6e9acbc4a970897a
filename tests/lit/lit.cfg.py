# lit configuration for kiln's IR tests: each .kir file has RUN: lines and FileCheck checks.
import os
import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".kir"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = config.kiln_lit_build_dir

config.substitutions.append(("%kiln-simcheck", os.path.join(os.path.dirname(config.kiln_fuzz_dir), "sim", "kiln-simcheck")))
config.substitutions.append(("%kiln-graphgen", os.path.join(config.kiln_fuzz_dir, "kiln-graphgen")))
config.substitutions.append(("%kiln", os.path.join(config.kiln_tools_dir, "kiln")))
config.substitutions.append(("%FileCheck", os.path.join(config.llvm_tools_dir, "FileCheck")))
config.substitutions.append(("%not", os.path.join(config.llvm_tools_dir, "not")))
config.environment["PATH"] = os.pathsep.join(
    [config.kiln_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
