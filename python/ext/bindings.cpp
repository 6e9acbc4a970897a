// The extension module kiln._kiln: compile, load, devices, and the Module, Function and
// Signature types. The Python package (python/kiln/__init__.py) adds the model kinds
// (paths, .kir text, ONNX protos and bytes, PyTorch modules) and kiln.bench on top.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "errors.h"
#include "module.h"
#include "passes/placement_report.h"
#include "runtime/drivers.h"

namespace py = pybind11;
using namespace kiln;
using namespace kiln::python;

namespace {

// The compile options of kiln.compile, already normalized by the Python package.
struct CompileArgs {
  std::vector<std::string> devices; // empty: the default device; "auto": --devices=auto
  std::vector<std::string> targets;
  std::vector<std::string> donate;
  std::vector<std::string> place;
  std::optional<std::string> partition;
};

CompileOptions compileOptions(const CompileArgs& a, std::string& report) {
  CompileOptions o;
  for (const std::string& d : a.devices) {
    if (d == "auto")
      o.placement.devices.autoDeclare = true;
    else
      o.placement.devices.devices.push_back(d);
  }
  // One device must exist here; several are checked when the module is placed.
  if (o.placement.devices.devices.size() == 1) {
    Loc loc = Loc::named("devices");
    hal::DeviceId id = unwrap(hal::parseDeviceId(o.placement.devices.devices[0], loc));
    unwrap(hal::openDevice(id, loc));
  }
  o.placement.place = a.place;
  if (a.partition) {
    PartitionSpec spec = unwrap(parsePartitionSpec(*a.partition));
    o.placement.stages = spec.stages;
    o.placement.tensor = spec.tensor;
  }
  // Placing the module even on one device costs little and makes the report.
  o.placement.affinity = true;
  o.afterPlacement = [&report](const Module& m) -> Status {
    if (auto r = placementReport(m); r.ok()) report = *r;
    return ok();
  };
  o.targets = a.targets;
  o.donate = a.donate;
  return o;
}

ExecutorOptions executorOptions() {
  ExecutorOptions e;
  e.readInputsInPlace = true; // the caller's arrays stay alive and unchanged during a call
  return e;
}

// Compiles with the GIL released, then loads the program.
template <typename F> PyModule compileWith(const CompileArgs& a, F compile) {
  std::string report;
  CompileOptions opts = compileOptions(a, report);
  std::optional<Result<Program>> program;
  {
    py::gil_scoped_release nogil;
    program.emplace(compile(opts));
  }
  Program p = unwrap(std::move(*program));
  return PyModule(unwrap(RuntimeModule::fromProgram(std::move(p), executorOptions())),
                  std::move(report));
}

CompileArgs args(std::vector<std::string> devices, std::vector<std::string> targets,
                 std::vector<std::string> donate, std::vector<std::string> place,
                 std::optional<std::string> partition) {
  return CompileArgs{std::move(devices), std::move(targets), std::move(donate), std::move(place),
                     std::move(partition)};
}

struct DeviceRow {
  std::string name, target, description;
  uint64_t maxBufferBytes = 0;
};

std::vector<DeviceRow> listDevices() {
  std::vector<DeviceRow> rows;
  for (hal::Driver* d : hal::drivers())
    for (const hal::DeviceInfo& info : d->enumerate()) {
      DeviceRow r{info.id.str(), d->target(), info.description, 0};
      if (auto dev = hal::openDevice(info.id, Loc::named(info.id.str())); dev.ok())
        r.maxBufferBytes = (*dev)->limits().maxBufferBytes;
      rows.push_back(std::move(r));
    }
  return rows;
}

#define KILN_COMPILE_KWARGS                                                                        \
  py::kw_only(), py::arg("devices") = std::vector<std::string>(),                                  \
                 py::arg("targets") = std::vector<std::string>(),                                  \
                 py::arg("donate") = std::vector<std::string>(),                                   \
                 py::arg("place") = std::vector<std::string>(), py::arg("partition") = py::none()

} // namespace

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "kiln's extension module; use the kiln package (import kiln).";
  py::register_exception<KilnError>(m, "Error", PyExc_RuntimeError);

  py::class_<TensorSpec>(m, "TensorSpec",
                         "An argument or result of a function: name, dtype, shape, donation.")
      .def_readonly("name", &TensorSpec::name, "The IR name ('' for results).")
      .def_readonly("dtype", &TensorSpec::dtype, "kiln's element type name: 'f32', 'i64', ...")
      .def_readonly("shape", &TensorSpec::shape,
                    "Per dim: an int (static) or a str (symbolic: 'seq', '2*seq').")
      .def_readonly("donated_to", &TensorSpec::donatedTo,
                    "For a donated argument, the index of the result written into it.")
      .def_readonly("type", &TensorSpec::type, "The IR type, such as 'tensor<{seq}x64xf32>'.")
      .def("__repr__", [](const TensorSpec& t) {
        return "TensorSpec(" + (t.name.empty() ? "" : "'" + t.name + "', ") + t.type +
               (t.donatedTo ? ", donated_to=" + std::to_string(*t.donatedTo) : "") + ")";
      });

  py::class_<Signature>(m, "Signature", "A function's arguments and results.")
      .def_readonly("name", &Signature::name)
      .def_readonly("args", &Signature::args)
      .def_readonly("results", &Signature::results)
      .def("__str__", &Signature::str)
      .def("__repr__", [](const Signature& s) { return "<kiln.Signature " + s.str() + ">"; });

  py::class_<Function>(m, "Function", "One entry function of a module; call it with its arguments.")
      .def_property_readonly("name", &Function::name)
      .def_property_readonly("signature", &Function::signature)
      .def(
          "__call__",
          [](const Function& f, const py::args& args, py::kwargs kwargs) {
            bool asTorch = false;
            if (kwargs.contains("as_torch")) {
              asTorch = kwargs["as_torch"].cast<bool>();
              PyDict_DelItemString(kwargs.ptr(), "as_torch");
            }
            return f.call(args, kwargs, asTorch);
          },
          "Runs the function. Arguments: numpy arrays, buffers, numbers or torch tensors, by "
          "position or by name; as_torch=True returns torch tensors. Returns one array or a "
          "tuple.")
      .def(
          "_bench",
          [](const Function& f, const py::args& args, int repetitions, int warmup,
             const py::kwargs& kwargs) { return f.bench(args, kwargs, repetitions, warmup); },
          py::arg("repetitions"), py::arg("warmup"))
      .def("__repr__", [](const Function& f) { return "<kiln.Function @" + f.name() + ">"; });

  py::class_<PyModule>(m, "Module", "A compiled module: call it to run @main.")
      .def(
          "__call__",
          [](const PyModule& self, const py::args& args, py::kwargs kwargs) {
            bool asTorch = false;
            if (kwargs.contains("as_torch")) {
              asTorch = kwargs["as_torch"].cast<bool>();
              PyDict_DelItemString(kwargs.ptr(), "as_torch");
            }
            return self.entry().call(args, kwargs, asTorch);
          },
          "Runs @main (or the only function): module(*args, as_torch=False, **named_args).")
      .def_property_readonly(
          "functions",
          [](const PyModule& self) {
            py::dict d;
            for (const std::string& n : self.functionNames()) d[py::str(n)] = self.function(n);
            return d;
          },
          "The entry functions by name, in module order.")
      .def_property_readonly(
          "signature", [](const PyModule& self) { return self.entry().signature(); },
          "The signature of @main (or the only function).")
      .def_property_readonly("symbols", &PyModule::symbols,
                             "The symbolic dims with their ranges: {'seq': (1, 4096)}.")
      .def_property_readonly("devices", &PyModule::devices, "The devices the module runs on.")
      .def_property_readonly("last_stats", &PyModule::lastStats,
                             "Of the last call: {'dispatches': n, 'peak_bytes': n} (device "
                             "memory kiln allocated; arrays read in place are not counted).")
      .def("save", &PyModule::save, py::arg("path"), "Writes the module as a .kmod file.")
      .def("report", &PyModule::report, py::arg("kind") = "placement",
           "'placement' (devices, transfers, parameters; compiled modules only), "
           "'schedule' (the host schedule as IR) or 'memory' (peak memory per function).")
      .def("peak_memory", &PyModule::peakMemory,
           py::arg("symbols") = std::map<std::string, int64_t>(), py::arg("function") = "main",
           "Peak bytes of the function's schedule with the given symbols at those values and "
           "the others at their upper bounds.")
      .def("_function", &PyModule::function, py::arg("name"))
      .def("__repr__", [](const PyModule& self) {
        std::string s = "<kiln.Module";
        for (const std::string& n : self.functionNames()) s += " @" + n;
        return s + ">";
      });

  py::class_<DeviceRow>(m, "Device", "A device a driver of this build sees.")
      .def_readonly("name", &DeviceRow::name)
      .def_readonly("target", &DeviceRow::target)
      .def_readonly("description", &DeviceRow::description)
      .def_readonly("max_buffer_bytes", &DeviceRow::maxBufferBytes)
      .def("__repr__",
           [](const DeviceRow& d) { return "<kiln.Device " + d.name + " (" + d.target + ")>"; });

  m.def("devices", &listDevices, "Every device the drivers of this build see.");
  m.def("default_device", &defaultDeviceName, "The device a model runs on when none is named.");

  m.def(
      "_compile_file",
      [](const std::string& path, std::vector<std::string> devices,
         std::vector<std::string> targets, std::vector<std::string> donate,
         std::vector<std::string> place, std::optional<std::string> partition) {
        return compileWith(args(devices, targets, donate, place, partition),
                           [&](const CompileOptions& o) { return compileFile(path, o); });
      },
      py::arg("path"), KILN_COMPILE_KWARGS);
  m.def(
      "_compile_text",
      [](const std::string& text, const std::string& name, std::vector<std::string> devices,
         std::vector<std::string> targets, std::vector<std::string> donate,
         std::vector<std::string> place, std::optional<std::string> partition) {
        return compileWith(args(devices, targets, donate, place, partition),
                           [&](const CompileOptions& o) { return compileText(text, name, o); });
      },
      py::arg("text"), py::arg("name"), KILN_COMPILE_KWARGS);
  m.def(
      "_compile_onnx",
      [](const py::bytes& bytes, const std::string& name, const std::string& baseDir,
         std::map<std::string, std::pair<int64_t, int64_t>> symbols,
         std::vector<std::string> devices, std::vector<std::string> targets,
         std::vector<std::string> donate, std::vector<std::string> place,
         std::optional<std::string> partition) {
        std::string data = bytes; // copied while the GIL is held
        OnnxOptions onnx{baseDir, std::move(symbols)};
        return compileWith(
            args(devices, targets, donate, place, partition),
            [&](const CompileOptions& o) { return compileOnnx(data, name, o, onnx); });
      },
      py::arg("data"), py::arg("name"), py::arg("base_dir"), py::arg("symbols"),
      KILN_COMPILE_KWARGS);
  m.def(
      "_load",
      [](const std::string& path, std::optional<std::string> device) {
        ExecutorOptions e = executorOptions();
        if (device) e.device = unwrap(hal::parseDeviceId(*device, Loc::named("device")));
        std::optional<Result<std::unique_ptr<RuntimeModule>>> r;
        {
          py::gil_scoped_release nogil;
          r.emplace(RuntimeModule::open(path, e));
        }
        return PyModule(unwrap(std::move(*r)), "");
      },
      py::arg("path"), py::arg("device") = py::none());
}
