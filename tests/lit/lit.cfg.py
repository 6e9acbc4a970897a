# lit configuration for kiln's IR tests: each .kir file has RUN: lines and FileCheck checks.
import os
import re
import shutil
import subprocess
import sys
import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".kir"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = config.kiln_lit_build_dir

config.substitutions.append(("%kiln-simcheck", os.path.join(os.path.dirname(config.kiln_fuzz_dir), "sim", "kiln-simcheck")))
config.substitutions.append(("%kiln-graphgen", os.path.join(config.kiln_fuzz_dir, "kiln-graphgen")))
# The fake libamdhip64.so and libcuda.so.1 (tests/fake_gpu) that the hip and cuda drivers open.
config.substitutions.append(("%fake-gpu", os.path.join(os.path.dirname(config.kiln_fuzz_dir), "fake_gpu")))
config.substitutions.append(("%kiln", os.path.join(config.kiln_tools_dir, "kiln")))
config.substitutions.append(("%FileCheck", os.path.join(config.llvm_tools_dir, "FileCheck")))
config.substitutions.append(("%not", os.path.join(config.llvm_tools_dir, "not")))
config.environment["PATH"] = os.pathsep.join(
    [config.kiln_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
# `REQUIRES: mpi`: kiln was built with MPI (feature kiln-mpi) and mpirun is installed. %mpirun is
# scripts/mpirun.sh (root, oversubscription, shared memory, a time limit: one place for the
# flags a container needs); %kiln-mpi-* are the programs of tests/mpi.
if getattr(config, "kiln_have_mpi", False):
    config.available_features.add("kiln-mpi")
    if shutil.which("mpirun"):
        config.available_features.add("mpi")
config.substitutions.append(("%mpirun", os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "scripts", "mpirun.sh")))
for prog in ("kiln-mpi-transport", "kiln-mpi-capi"):
    # Before %kiln, which would match their start.
    config.substitutions.insert(0, ("%" + prog, os.path.join(os.path.dirname(config.kiln_fuzz_dir), "mpi", prog)))
config.substitutions.append(("%npy", sys.executable + " " + os.path.join(os.path.dirname(__file__), "Inputs", "npy.py")))

# `REQUIRES: vulkan`: kiln sees vulkan[0] (lavapipe unless VK_DRIVER_FILES or VK_ICD_FILENAMES
# names another driver), with the validation layer on when it is installed (kiln then exits 1
# on any validation message).
# kiln compile's kernel cache: never the user's. meson test sets KILN_CACHE_DIR (the test setup
# in tests/meson.build); a lit run without it uses a folder of its own under the build tree.
config.environment["KILN_CACHE_DIR"] = os.environ.get(
    "KILN_CACHE_DIR", os.path.join(config.kiln_lit_build_dir, "kernel-cache"))
for var in ("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "KILN_VULKAN_VALIDATION", "HOME"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
lavapipe = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"
if not ({"VK_DRIVER_FILES", "VK_ICD_FILENAMES"} & set(config.environment)) and os.path.exists(lavapipe):
    config.environment["VK_DRIVER_FILES"] = lavapipe
if "KILN_VULKAN_VALIDATION" not in config.environment and os.path.exists(
        "/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json"):
    config.environment["KILN_VULKAN_VALIDATION"] = "1"
try:
    devices = subprocess.run([os.path.join(config.kiln_tools_dir, "kiln"), "devices"],
                             env=config.environment, capture_output=True, text=True,
                             timeout=120).stdout
    if re.search(r"^vulkan\[0\]", devices, re.M):
        config.available_features.add("vulkan")
except (OSError, subprocess.SubprocessError):
    pass
