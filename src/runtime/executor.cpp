// The executor: opens a program's devices, loads its executables, and interprets its host
// functions against the HAL.
#include "runtime/executor.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "ir/interp/collective.h"
#include "ir/interp/interp.h"
#include "runtime/dist/ranks.h"
#include "runtime/drivers.h"

namespace kiln {

struct Executor::DeviceState {
  hal::DeviceId id;
  std::shared_ptr<hal::Device> device;                       // null for a device of another rank
  std::vector<std::unique_ptr<hal::Executable>> executables; // those of targets it loads
  std::unique_ptr<hal::CommandBuffer> pending;
  std::unique_ptr<hal::Semaphore> timeline;
  uint64_t signaled = 0;

  // A device with an asynchronous queue may still run work that signals `timeline`.
  ~DeviceState() {
    if (device) (void)device->waitIdle();
  }

  // Submits the pending commands (a device with an asynchronous queue starts them and
  // returns, so devices run side by side).
  Status submit() {
    if (pending && pending->numCommands() > 0) {
      std::unique_ptr<hal::CommandBuffer> cb = std::move(pending);
      pending = device->createCommandBuffer();
      KILN_CHECK(device->submit(*cb, nullptr, 0, *timeline, signaled + 1));
      ++signaled;
    }
    return ok();
  }

  // Submits the pending commands and waits until the device has run them.
  Status flush() {
    KILN_CHECK(submit());
    KILN_CHECK(timeline->wait(signaled));
    release();
    return ok();
  }

  // Buffers freed while an asynchronous queue may still read them, with the timeline value
  // after which it does not; released once the device has got there.
  std::vector<std::pair<uint64_t, std::unique_ptr<hal::Buffer>>> retired;
  void release() {
    uint64_t done = timeline ? timeline->value() : 0;
    std::erase_if(retired, [&](const auto& r) { return r.first <= done; });
  }
};

// Waits for device `d`'s work after submitting every device's: devices with asynchronous
// queues (several cpu devices) then compute side by side up to each point one must wait.
Status Executor::flushDevice(size_t d) {
  for (auto& s : devices_)
    if (s->device) KILN_CHECK(s->submit());
  return devices_[d]->flush();
}

// One host op, resolved: what the per-call loop needs and nothing to look up.
struct Executor::Step {
  static constexpr size_t kNoSlot = SIZE_MAX;
  const Op* op = nullptr;
  size_t device = 0;             // for ops with a `device`
  size_t result = kNoSlot;       // the slot of its buffer result
  std::vector<size_t> operands;  // slots; kNoSlot for a value that is not a buffer
  std::optional<size_t> arg;     // transfer_to: the argument it uploads
  bool donated = false;          // transfer_to: writes a donated argument in place
  ElemType elem = ElemType::F32; // the result's element type
  std::vector<SymExpr> shape;    // the result's dims (null: a `?` dim)
  std::vector<bool> knownDims;
  const hal::Executable* exe = nullptr; // launch
  size_t kernel = 0;
  std::array<SymExpr, 3> grid;         // launch: `workgroups`, or 1x1x1
  std::vector<SymExpr> push;           // launch: `push`
  std::string weight;                  // load_weight
  hal::Buffer* weightBuffer = nullptr; // load_weight, load_constant: once uploaded (kept)
  HostTensor constant;                 // load_constant: its value
  std::vector<size_t> views;           // free: the slots of the views of its buffer
};

struct Executor::Plan {
  size_t slots = 0;
  std::vector<Step> steps;
  std::vector<size_t> slotDevice; // the device each slot's buffer lies on
};

Executor::Executor() = default;
Executor::~Executor() = default;

Result<size_t> Executor::deviceIndex(const std::string& spec, const Loc& loc) {
  if (auto it = deviceByName_.find(spec); it != deviceByName_.end()) return it->second;
  KILN_TRY(hal::DeviceId id, hal::parseDeviceId(spec, loc));
  if (opts_.device) id = *opts_.device;
  for (size_t i = 0; i < devices_.size(); ++i)
    if (devices_[i]->id == id) {
      deviceByName_[spec] = i;
      return i;
    }
  auto state = std::make_unique<DeviceState>();
  state->id = id;
  if (ranks_ && !ranks_->isLocal(id)) { // another rank opens it
    devices_.push_back(std::move(state));
    deviceByName_[spec] = devices_.size() - 1;
    return devices_.size() - 1;
  }
  KILN_TRY(std::shared_ptr<hal::Device> dev, hal::openDevice(id, loc));
  state->device = dev;
  state->pending = dev->createCommandBuffer();
  state->timeline = dev->createSemaphore(0);
  hal::Driver* driver = hal::lookupDriver(id.kind);
  for (const ExecutableImage& img : program_->executables)
    if (driver && driver->loads(img.target)) {
      KILN_TRY(std::unique_ptr<hal::Executable> exe, dev->loadExecutable(img.target, img.payload));
      state->executables.push_back(std::move(exe));
    }
  devices_.push_back(std::move(state));
  deviceByName_[spec] = devices_.size() - 1;
  return devices_.size() - 1;
}

Result<std::unique_ptr<Executor>> Executor::create(std::shared_ptr<const Program> program,
                                                   const ExecutorOptions& opts) {
  std::unique_ptr<Executor> ex(new Executor());
  ex->program_ = std::move(program);
  ex->opts_ = opts;
  if (!ex->program_->host) return error(Loc{}, "internal: program without a host module");
  if (ex->program_->devices.size() > 1 && opts.device)
    return error(Loc::named("device"), "the module uses " +
                                           std::to_string(ex->program_->devices.size()) +
                                           " devices; it cannot be moved to one device");
  if (opts.transport) {
    if (opts.device && opts.transport->size() > 1)
      return error(Loc::named("device"), "a module that runs over several ranks cannot be moved "
                                         "to one device");
    KILN_TRY(ex->ranks_, dist::Ranks::create(opts.transport, *ex->program_));
    KILN_CHECK(ex->ranks_->checkModule(*ex->program_));
  }
  ex->weightStore_ = std::make_unique<WeightStore>(*ex->program_->host);
  for (const std::string& name : ex->program_->entries) {
    const Func* f = ex->program_->host->lookupFunc(name);
    if (!f) return error(Loc{}, "internal: entry @" + name + " is missing");
    KILN_TRY(ex->plans_[name], ex->prepare(*f));
  }
  return ex;
}

Result<std::unique_ptr<Executor::Plan>> Executor::prepare(const Func& f) {
  auto plan = std::make_unique<Plan>();
  std::unordered_map<const Value*, size_t> slots;
  std::unordered_map<size_t, std::vector<size_t>> viewsOf; // slot -> its views, transitively
  auto exprs = [&](const Op& op, const char* attr) -> Result<std::vector<SymExpr>> {
    std::vector<SymExpr> out;
    for (const std::string& text : op.attrs().getStrs(attr)) {
      KILN_TRY(SymExpr e, parseSymExpr(text, op.loc()));
      out.push_back(std::move(e));
    }
    return out;
  };
  for (const auto& opPtr : f.ops()) {
    const Op& op = *opPtr;
    if (op.info().level == OpLevel::Tensor && op.kind() != OpKind::Return)
      return error(op.loc(), "host function @" + f.name() + " contains the tensor op '" +
                                 std::string(op.name()) + "'; it was not scheduled");
    Step st;
    st.op = &op;
    if (op.attrs().has("device")) {
      KILN_TRY(st.device, deviceIndex(op.attrs().getStr("device"), op.loc()));
    }
    for (const Value* v : op.operands()) {
      auto it = slots.find(v);
      st.operands.push_back(it == slots.end() ? Step::kNoSlot : it->second);
    }
    if (op.numResults() == 1) {
      st.result = slots[op.result(0)] = plan->slots++;
      bool view = op.kind() == OpKind::View && st.operands[0] != Step::kNoSlot;
      plan->slotDevice.push_back(view ? plan->slotDevice[st.operands[0]] : st.device);
      const Type& t = op.result(0)->type();
      st.elem = t.elem();
      for (const Dim& d : t.shape()) {
        st.knownDims.push_back(!d.isUnknown());
        st.shape.push_back(d.isUnknown() ? SymExpr() : d.expr());
      }
    }
    switch (op.kind()) {
    case OpKind::TransferTo: {
      const Value* src = op.operand(0);
      if (src->isArg() && src->argOf() == &f) {
        st.arg = src->index();
        // Only an argument the signature donates: the caller consented to the write.
        // Over ranks, rank 0's caller is not the one whose memory a rank would write.
        st.donated = op.attrs().getInt("donated") && f.argDonation(src->index()) && !ranks_;
      }
      break;
    }
    case OpKind::LoadWeight: st.weight = op.attrs().getStr("name"); break;
    case OpKind::LoadConstant: st.constant = *op.attrs().getDense("value"); break;
    case OpKind::View:
      // Its buffer's views, and the buffers it views (all of which end its life).
      if (st.operands[0] != Step::kNoSlot)
        for (auto& [root, views] : viewsOf)
          if (root == st.operands[0] ||
              std::find(views.begin(), views.end(), st.operands[0]) != views.end())
            views.push_back(st.result);
      viewsOf[st.result];
      break;
    case OpKind::Free:
      if (st.operands[0] != Step::kNoSlot) st.views = viewsOf[st.operands[0]];
      break;
    case OpKind::Launch: {
      if (!devices_[st.device]->device) break; // another rank's
      std::string kernel = op.attrs().getStr("kernel");
      int64_t outs = op.attrs().getInt("outputs");
      if (outs < 0 || static_cast<size_t>(outs) > op.numOperands())
        return error(op.loc(), "launch of @" + kernel + " has " + std::to_string(outs) +
                                   " outputs but " + std::to_string(op.numOperands()) +
                                   " operands");
      for (const auto& exe : devices_[st.device]->executables)
        for (size_t k = 0; k < exe->numKernels() && !st.exe; ++k)
          if (exe->kernelName(k) == kernel) {
            st.exe = exe.get();
            st.kernel = k;
          }
      if (!st.exe) {
        const hal::DeviceId& id = devices_[st.device]->device->id();
        std::string dev = id.str(), targets, unloaded;
        hal::Driver* driver = hal::lookupDriver(id.kind);
        for (const ExecutableImage& img : program_->executables) {
          targets += (targets.empty() ? "" : ", ") + img.target;
          if (!driver || !driver->loads(img.target))
            unloaded += (unloaded.empty() ? "" : ", ") + img.target;
        }
        // A module compiled for another kind of device: say so, not only what is missing.
        std::string hint;
        if (devices_[st.device]->executables.empty())
          hint = " (the module's executables are for " +
                 (targets.empty() ? std::string("no target") : targets) + ", which " + dev +
                 " does not load; compile the module for " + dev + ")";
        else if (!unloaded.empty())
          hint = " (the module also has executables for " + unloaded + ", which " + dev +
                 " does not load; compile the module for " + dev + ")";
        return error(op.loc(), "launch of @" + kernel + ": no executable loaded on " + dev +
                                   " has such a kernel" + hint);
      }
      KILN_TRY(std::vector<SymExpr> grid, exprs(op, "workgroups"));
      if (grid.empty()) grid.assign(3, SymExpr::constant(1)); // a kernel that is not lowered
      if (grid.size() != 3)
        return error(op.loc(), "launch of @" + kernel + " needs 3 workgroups expressions");
      std::copy(grid.begin(), grid.end(), st.grid.begin());
      KILN_TRY(st.push, exprs(op, "push"));
      // The profile's description of the kernel: its strategy and first output.
      std::string shape;
      if (static_cast<size_t>(outs) > 0) {
        const Type& t = op.operand(op.numOperands() - static_cast<size_t>(outs))->type();
        for (const Dim& d : t.shape()) shape += d.str() + "x";
        shape += elemTypeName(t.elem());
      }
      profile_.describe(*st.exe, st.kernel, op.attrs().getStr("strategy"), std::move(shape));
      break;
    }
    default: break;
    }
    plan->steps.push_back(std::move(st));
  }
  return plan;
}

int Executor::rank() const { return ranks_ ? ranks_->rank() : 0; }

Status Executor::enableProfile(bool on) {
  for (auto& d : devices_)
    if (d->device && !d->device->setProfiler(on ? &profile_ : nullptr)) {
      for (auto& e : devices_)
        if (e->device) e->device->setProfiler(nullptr);
      profiling_ = false;
      return error(Loc::named(d->device->id().str()),
                   "this device cannot time its dispatches one by one (its queue has no "
                   "timestamps)");
    }
  if (on && !profiling_) {
    profile_.clear();
    profiledCalls_ = 0;
  }
  profiling_ = on;
  return ok();
}

Result<hal::Buffer*> Executor::weightBuffer(const std::string& name, size_t device,
                                            const Loc& loc) {
  auto key = std::make_pair(name, device);
  if (auto it = weightBuffers_.find(key); it != weightBuffers_.end()) return it->second.get();
  HostTensor t;
  if (auto it = program_->embeddedWeights.find(name); it != program_->embeddedWeights.end()) {
    t = it->second;
  } else {
    if (!program_->host->lookupWeight(name))
      return error(loc, "load_weight of @" + name + ", which the module does not declare");
    KILN_TRY(t, weightStore_->get(name));
  }
  KILN_TRY(std::unique_ptr<hal::Buffer> buf, devices_[device]->device->allocate(t.byteSize()));
  KILN_CHECK(buf->write(0, t.data(), t.byteSize()));
  hal::Buffer* raw = buf.get();
  weightBuffers_[key] = std::move(buf);
  return raw;
}

// Whether step `st` runs on this rank: a step on another rank's device does not; a
// transfer_to between two ranks runs on both (a send and a receive); `return` runs on every
// rank. A host op over buffers of several devices (a collective) decides here too.
bool Executor::runsHere(const Plan& plan, const Step& st) const {
  auto local = [&](size_t d) { return devices_[d]->device != nullptr; };
  bool operandLocal = st.operands.empty() || st.operands[0] == Step::kNoSlot ||
                      local(plan.slotDevice[st.operands[0]]);
  switch (st.op->kind()) {
  case OpKind::Return: return true;
  case OpKind::View:
  case OpKind::Free: return operandLocal;
  case OpKind::TransferTo: return local(st.device) || (!st.arg && operandLocal);
  case OpKind::Collective: // on every rank that holds one of its inputs
    for (size_t i = 0; i < st.operands.size() / 2; ++i)
      if (st.operands[i] != Step::kNoSlot && local(plan.slotDevice[st.operands[i]])) return true;
    return false;
  default: return !st.op->attrs().has("device") || local(st.device);
  }
}

namespace {

struct Slot {
  hal::Buffer* buffer = nullptr;
  std::unique_ptr<hal::Buffer> owned;
  size_t device = 0;
  std::optional<size_t> donor; // the donated argument whose storage this buffer is or returns to
  bool imported = false;       // the buffer is the donor's memory itself
  // Allocated for the upper bound of a data-dependent symbol not bound yet: `shape` is set
  // once it is (bind_symbol), and the buffer may then be larger than the shape.
  const std::vector<SymExpr>* pendingDims = nullptr;
  bool oversized = false;
  ElemType elem = ElemType::F32;
  std::vector<int64_t> shape;
  hal::Binding binding() const { return {buffer, elem, shape}; }
};

Result<int64_t> evaluate(const SymExpr& e, const SymbolBinding& binding, const Op& op,
                         const char* what) {
  std::optional<int64_t> v = e.evaluate(binding);
  if (!v)
    return error(op.loc(), std::string(op.name()) + ": " + what + " " + e.str() +
                               " cannot be evaluated at run time");
  return *v;
}

// Whether two tensors' bytes overlap.
bool overlaps(const HostTensor& a, const HostTensor& b) {
  const uint8_t *pa = a.data(), *pb = b.data();
  return pa && pb && a.byteSize() && b.byteSize() && pa < pb + b.byteSize() &&
         pb < pa + a.byteSize();
}

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Result<uint64_t> byteCount(ElemType elem, const std::vector<int64_t>& shape, const Loc& loc) {
  uint64_t n = static_cast<uint64_t>(elemTypeBytes(elem));
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
      return error(loc, "buffer size overflows 64 bits");
  return n;
}

} // namespace

Result<std::vector<HostTensor>> Executor::call(const std::string& function,
                                               const std::vector<HostTensor>& callerInputs) {
  auto planIt = plans_.find(function);
  if (planIt == plans_.end()) {
    std::string names;
    for (const std::string& e : program_->entries) names += (names.empty() ? "@" : ", @") + e;
    return error(Loc::named("function"),
                 "no function @" + function + " in the module (functions: " + names + ")");
  }
  const Func& f = *program_->entry(function);
  Plan& plan = *planIt->second;
  std::vector<HostTensor> shared; // over ranks: rank 0's inputs
  if (ranks_) {
    shared = callerInputs;
    KILN_CHECK(ranks_->shareInputs(shared, f.loc()));
  }
  const std::vector<HostTensor>& inputs = ranks_ ? shared : callerInputs;
  stats_ = CallStats{};
  if (profiling_) ++profiledCalls_;
  for (auto& d : devices_) {
    if (!d->device) continue;
    // A failed call leaves its semaphore failed; each call starts on a fresh timeline.
    d->pending = d->device->createCommandBuffer();
    d->timeline = d->device->createSemaphore(0);
    d->signaled = 0;
    d->device->resetPeak();
  }
  KILN_TRY(std::vector<HostTensor> results, run(f, plan, inputs, 0));
  for (auto& d : devices_)
    if (d->device) stats_.peakBytes += d->device->memoryStats().peakBytes;
  return results;
}

// One function's steps over inputs: the entry function of a call, or (depth > 0) the body of
// a host-side loop, called once per iteration on the same devices.
Result<std::vector<HostTensor>> Executor::run(const Func& f, Plan& plan,
                                              const std::vector<HostTensor>& inputs, int depth) {
  SymbolBinding binding;
  KILN_CHECK(bindArguments(f, inputs, binding));
  // Sizes for allocating: the binding, and each data-dependent symbol not bound yet at the top
  // of its range (docs/ir.md, "Data-dependent dims").
  SymbolBinding upper = binding;
  for (const auto& [name, info] : program_->host->symbols().all())
    if (info.dataDependent) upper.emplace(name, info.hi);

  std::vector<Slot> slots(plan.slots);
  // A device with an asynchronous queue may still run work on this call's buffers when the
  // call fails: it finishes before they go (declared after `slots`, so it runs first).
  struct IdleGuard {
    std::vector<std::unique_ptr<DeviceState>>& devices;
    ~IdleGuard() {
      for (auto& d : devices)
        if (d->device) {
          (void)d->device->waitIdle();
          d->retired.clear();
        }
    }
  } idle{devices_};
  auto slotOf = [&](const Step& st, size_t i) -> Result<Slot*> {
    size_t s = st.operands[i];
    if (s == Step::kNoSlot || !slots[s].buffer)
      return error(st.op->loc(), std::string(st.op->name()) + ": an operand is not a live buffer");
    return &slots[s];
  };
  auto shapeOf = [&](const Step& st, const SymbolBinding& b) -> Result<std::vector<int64_t>> {
    std::vector<int64_t> shape(st.shape.size());
    for (size_t i = 0; i < shape.size(); ++i) {
      std::optional<int64_t> v =
          st.knownDims[i] ? st.shape[i].evaluate(b) : std::optional<int64_t>();
      if (!v || *v < 0)
        return error(st.op->loc(), "dim " + st.op->result(0)->type().shape()[i].str() + " of " +
                                       st.op->result(0)->type().str() +
                                       " cannot be evaluated at run time");
      shape[i] = *v;
    }
    return shape;
  };
  auto newSlot = [&](const Step& st) -> Result<Slot> {
    Slot s;
    s.device = st.device;
    s.elem = st.elem;
    Result<std::vector<int64_t>> exact = shapeOf(st, binding);
    if (exact.ok()) {
      s.shape = std::move(*exact);
    } else {
      KILN_TRY(s.shape, shapeOf(st, upper));
      s.pendingDims = &st.shape;
    }
    KILN_TRY(uint64_t bytes, byteCount(s.elem, s.shape, st.op->loc()));
    KILN_TRY(s.owned, devices_[st.device]->device->allocate(bytes));
    s.buffer = s.owned.get();
    return s;
  };
  // Binds data-dependent symbol `name` to `v` (what a bind_symbol read, or a run_loop's
  // iteration count); the buffers allocated for its bound take their real shapes.
  auto bindData = [&](const std::string& name, int64_t v, const Loc& loc) -> Status {
    const SymbolInfo* info = program_->host->symbols().lookup(name);
    if (!info || !info->dataDependent)
      return error(loc, "'" + name + "' is not a data-dependent symbol");
    if (v < info->lo || v > info->hi || (info->divisor > 1 && v % info->divisor != 0))
      return error(loc, "the data-dependent dim '" + name + "' is " + std::to_string(v) +
                            " at run time, outside its range [" + std::to_string(info->lo) + ", " +
                            std::to_string(info->hi) + "]");
    binding[name] = v;
    upper[name] = v;
    for (Slot& s : slots) {
      if (!s.buffer || !s.pendingDims) continue;
      std::vector<int64_t> shape;
      bool known = true;
      for (const SymExpr& e : *s.pendingDims) {
        std::optional<int64_t> d = e.evaluate(binding);
        known = known && d && *d >= 0;
        shape.push_back(known ? *d : 0);
      }
      if (!known) continue;
      s.oversized = s.oversized || shape != s.shape;
      s.shape = std::move(shape);
      s.pendingDims = nullptr;
    }
    return ok();
  };
  // The upload of donated argument `a`: the caller's memory itself when the tensor is
  // writable, overlaps no other argument and the device can use it; else a copy, written
  // back into the tensor by `return` when it is writable and overlaps nothing.
  auto donatedSlot = [&](const Step& st, size_t a) -> Result<Slot> {
    const HostTensor& t = inputs[a];
    bool alone = t.writable();
    for (size_t j = 0; j < inputs.size() && alone; ++j) alone = j == a || !overlaps(inputs[j], t);
    Slot s;
    s.device = st.device;
    s.elem = st.elem;
    KILN_TRY(s.shape, shapeOf(st, binding));
    hal::Device& dev = *devices_[st.device]->device;
    if (alone) {
      s.owned = dev.importHost(const_cast<uint8_t*>(t.data()), t.byteSize());
      s.imported = s.owned != nullptr;
    }
    if (!s.owned) {
      KILN_TRY(uint64_t bytes, byteCount(s.elem, s.shape, st.op->loc()));
      KILN_TRY(s.owned, dev.allocate(bytes));
      if (t.byteSize() != bytes)
        return error(st.op->loc(),
                     "transfer_to: input " + std::to_string(a) + " does not fill its buffer");
      KILN_CHECK(s.owned->write(0, t.data(), t.byteSize()));
    }
    s.buffer = s.owned.get();
    if (alone) s.donor = a;
    return s;
  };
  // The upload of read-only argument `a` as the caller's memory itself
  // (ExecutorOptions::readInputsInPlace), or nothing when the device cannot use it.
  auto inPlaceSlot = [&](const Step& st, size_t a) -> std::optional<Slot> {
    const HostTensor& t = inputs[a];
    Slot s;
    s.device = st.device;
    s.elem = st.elem;
    auto shape = shapeOf(st, binding);
    if (!shape.ok()) return std::nullopt;
    s.shape = *shape;
    auto bytes = byteCount(s.elem, s.shape, st.op->loc());
    if (!bytes.ok() || *bytes != t.byteSize()) return std::nullopt;
    s.owned = devices_[st.device]->device->importHost(const_cast<uint8_t*>(t.data()), *bytes);
    if (!s.owned) return std::nullopt;
    s.buffer = s.owned.get();
    return s;
  };
  // Over ranks: a transfer's wait, for its timeout error.
  auto transferWait = [&](const Step& st, size_t from, size_t index) {
    return dist::Wait{st.op->loc(), "transfer_to " + devices_[from]->id.str() + " -> " +
                                        devices_[st.device]->id.str() + " (step " +
                                        std::to_string(index) + ")"};
  };

  for (size_t index = 0; index < plan.steps.size(); ++index) {
    Step& st = plan.steps[index];
    const Op& op = *st.op;
    if (ranks_) {
      ranks_->maybeKillAt(index);
      if (!runsHere(plan, st)) continue;
    }
    switch (op.kind()) {
    case OpKind::AllocBuffer: {
      if (op.attrs().has("deferred") && op.attrs().getInt("deferred")) {
        // A scan output: the run_loop that writes it allocates it.
        Slot s;
        s.device = st.device;
        s.elem = st.elem;
        slots[st.result] = std::move(s);
        break;
      }
      KILN_TRY(slots[st.result], newSlot(st));
      break;
    }
    case OpKind::LoadWeight: {
      Slot s;
      s.device = st.device;
      s.elem = st.elem;
      KILN_TRY(s.shape, shapeOf(st, binding));
      if (!st.weightBuffer) {
        KILN_TRY(st.weightBuffer, weightBuffer(st.weight, st.device, op.loc()));
      }
      s.buffer = st.weightBuffer;
      slots[st.result] = std::move(s);
      break;
    }
    case OpKind::LoadConstant: {
      Slot s;
      s.device = st.device;
      s.elem = st.elem;
      s.shape = st.constant.shape();
      if (!st.weightBuffer) {
        KILN_TRY(std::unique_ptr<hal::Buffer> buf,
                 devices_[st.device]->device->allocate(st.constant.byteSize()));
        KILN_CHECK(buf->write(0, st.constant.data(), st.constant.byteSize()));
        st.weightBuffer = buf.get();
        constantBuffers_.push_back(std::move(buf));
      }
      s.buffer = st.weightBuffer;
      slots[st.result] = std::move(s);
      break;
    }
    case OpKind::TransferTo: {
      if (!devices_[st.device]->device) { // to another rank's device: send the source there
        KILN_TRY(Slot * from, slotOf(st, 0));
        KILN_CHECK(flushDevice(from->device));
        KILN_CHECK(ranks_->sendBuffer(*from->buffer, ranks_->owner(devices_[st.device]->id),
                                      dist::Ranks::tagOf(index),
                                      transferWait(st, from->device, index)));
        break;
      }
      if (st.donated) {
        KILN_TRY(slots[st.result], donatedSlot(st, *st.arg));
        break;
      }
      if (st.arg && opts_.readInputsInPlace) {
        if (std::optional<Slot> s = inPlaceSlot(st, *st.arg)) {
          slots[st.result] = std::move(*s);
          break;
        }
      }
      KILN_TRY(Slot s, newSlot(st));
      if (st.arg) {
        const HostTensor& t = inputs[*st.arg];
        if (t.byteSize() != s.buffer->byteSize())
          return error(op.loc(), "transfer_to: input " + std::to_string(*st.arg) +
                                     " does not fill its buffer");
        KILN_CHECK(s.buffer->write(0, t.data(), t.byteSize()));
      } else if (size_t src = plan.slotDevice[st.operands[0]]; !devices_[src]->device) {
        // From another rank's device.
        KILN_CHECK(ranks_->recvBuffer(*s.buffer, ranks_->owner(devices_[src]->id),
                                      dist::Ranks::tagOf(index), transferWait(st, src, index)));
      } else {
        KILN_TRY(Slot * from, slotOf(st, 0));
        if (from->buffer->byteSize() != s.buffer->byteSize() &&
            !(from->oversized && from->buffer->byteSize() > s.buffer->byteSize()))
          return error(op.loc(), "transfer_to: source and destination sizes differ");
        KILN_CHECK(flushDevice(from->device));
        if (from->device == st.device) {
          devices_[st.device]->pending->copy(*from->buffer, 0, *s.buffer, 0, s.buffer->byteSize());
        } else if (const uint8_t* p = from->buffer->map()) {
          KILN_CHECK(s.buffer->write(0, p, s.buffer->byteSize()));
        } else {
          std::vector<uint8_t> staging(s.buffer->byteSize());
          KILN_CHECK(from->buffer->read(0, staging.data(), staging.size()));
          KILN_CHECK(s.buffer->write(0, staging.data(), staging.size()));
        }
      }
      slots[st.result] = std::move(s);
      break;
    }
    case OpKind::Launch: {
      std::vector<hal::Binding> bindings;
      bindings.reserve(st.operands.size());
      for (size_t i = 0; i < st.operands.size(); ++i) {
        KILN_TRY(Slot * s, slotOf(st, i));
        bindings.push_back(s->binding());
      }
      hal::Workgroups grid;
      for (size_t i = 0; i < 3; ++i) {
        KILN_TRY(grid[i], evaluate(st.grid[i], binding, op, "grid"));
      }
      std::vector<int64_t> push(st.push.size());
      for (size_t i = 0; i < push.size(); ++i) {
        KILN_TRY(push[i], evaluate(st.push[i], binding, op, "push constant"));
      }
      devices_[st.device]->pending->dispatch(*st.exe, st.kernel, grid, std::move(push),
                                             std::move(bindings));
      ++stats_.dispatches;
      break;
    }
    case OpKind::View: {
      // The operand's buffer under another shape; it owns nothing.
      KILN_TRY(Slot * from, slotOf(st, 0));
      Slot s;
      s.buffer = from->buffer;
      s.device = from->device;
      s.elem = st.elem;
      s.oversized = from->oversized;
      if (from->pendingDims) {
        KILN_TRY(s.shape, shapeOf(st, upper));
        s.pendingDims = &st.shape;
      } else {
        KILN_TRY(s.shape, shapeOf(st, binding));
      }
      KILN_TRY(uint64_t bytes, byteCount(s.elem, s.shape, op.loc()));
      if (bytes != from->buffer->byteSize() && !(s.oversized && bytes < from->buffer->byteSize()))
        return error(op.loc(), "view: " + std::to_string(bytes) + " bytes of " +
                                   op.result()->type().str() + " over a buffer of " +
                                   std::to_string(from->buffer->byteSize()));
      slots[st.result] = std::move(s);
      break;
    }
    case OpKind::Free: {
      // The pending work may still read the buffer: it runs first, or, on a device with an
      // asynchronous queue, is submitted and the buffer goes once the device has run it (so
      // devices keep computing side by side).
      KILN_TRY(Slot * s, slotOf(st, 0));
      DeviceState& d = *devices_[s->device];
      if (d.device->asynchronous()) {
        KILN_CHECK(d.submit());
        if (s->owned) d.retired.emplace_back(d.signaled, std::move(s->owned));
        d.release();
      } else {
        KILN_CHECK(flushDevice(s->device));
      }
      *s = Slot{};
      for (size_t v : st.views) slots[v] = Slot{}; // no longer live buffers
      break;
    }
    case OpKind::Wait: KILN_CHECK(flushDevice(st.device)); break;
    case OpKind::RunLoop: {
      // The loop's values come back to the host; each iteration runs the body's own steps.
      if (ranks_) return error(op.loc(), "run_loop: a host-side loop does not run over ranks");
      if (depth >= kMaxLoopDepth)
        return error(op.loc(),
                     "run_loop: loops nest more than " + std::to_string(kMaxLoopDepth) + " deep");
      const std::string& name = op.attrs().getStr("body");
      auto carried = static_cast<size_t>(op.attrs().getInt("carried"));
      size_t scans = op.attrs().has("scans") ? static_cast<size_t>(op.attrs().getInt("scans")) : 0;
      auto bodyPlan = plans_.find(name);
      const Func* body = program_->entry(name);
      if (!body || bodyPlan == plans_.end() || st.operands.size() < 2 * carried + scans + 2)
        return error(op.loc(), "run_loop: no entry function @" + name + " for its " +
                                   std::to_string(carried) + " carried values and " +
                                   std::to_string(scans) + " scan outputs");
      size_t numIn = st.operands.size() - carried - scans;
      std::vector<HostTensor> in;
      for (size_t i = 0; i < numIn; ++i) {
        KILN_TRY(Slot * s, slotOf(st, i));
        KILN_CHECK(flushDevice(s->device));
        HostTensor t = HostTensor::uninitialized(s->elem, s->shape);
        KILN_CHECK(s->buffer->read(0, t.mutableData(), t.byteSize()));
        in.push_back(std::move(t));
      }
      std::vector<Type> scanTypes;
      for (size_t j = 0; j < scans; ++j)
        scanTypes.push_back(op.operand(numIn + carried + j)->type());
      KILN_TRY(std::vector<HostTensor> out, runLoopIterations(
                                                std::move(in), carried, scanTypes, binding,
                                                [&](const std::vector<HostTensor>& args) {
                                                  return run(*body, *bodyPlan->second, args,
                                                             depth + 1);
                                                },
                                                op.loc()));
      // The scan outputs: their length, a data-dependent symbol, is the iteration count.
      for (size_t j = 0; j < scans; ++j) {
        size_t at = numIn + carried + j;
        const Type& t = scanTypes[j];
        const HostTensor& v = out[carried + j];
        std::optional<std::string> sym =
            t.rank() < 1 || t.dim(0).isUnknown() ? std::nullopt : t.dim(0).expr().symbolName();
        if (!sym || st.operands[at] == Step::kNoSlot)
          return error(op.loc(), "run_loop: scan output " + std::to_string(j) + " " + t.str() +
                                     " is not a deferred buffer whose first dim is a symbol");
        KILN_CHECK(bindData(*sym, v.shape()[0], op.loc()));
        Slot& o = slots[st.operands[at]];
        if (o.buffer)
          return error(op.loc(), "run_loop: scan output " + std::to_string(j) +
                                     " is not a deferred buffer (alloc_buffer {deferred = 1})");
        o.shape = v.shape();
        KILN_TRY(o.owned, devices_[o.device]->device->allocate(v.byteSize()));
        o.buffer = o.owned.get();
        KILN_CHECK(o.buffer->write(0, v.data(), v.byteSize()));
      }
      for (size_t k = 0; k < carried; ++k) {
        KILN_TRY(Slot * o, slotOf(st, numIn + k));
        const HostTensor& v = out[k];
        if (v.shape() != o->shape || v.elem() != o->elem)
          return error(op.loc(), "run_loop: carried value " + std::to_string(k) + " ends as " +
                                     shapeText(v.shape()) + ", not the loop's result shape " +
                                     shapeText(o->shape));
        KILN_CHECK(o->buffer->write(0, v.data(), v.byteSize()));
      }
      break;
    }
    case OpKind::BindSymbol: {
      // The value the launch before wrote: the device finishes first.
      KILN_TRY(Slot * from, slotOf(st, 0));
      if (from->elem != ElemType::I64 || from->buffer->byteSize() < sizeof(int64_t))
        return error(op.loc(), "bind_symbol: the operand must be a buffer holding one i64");
      KILN_CHECK(flushDevice(from->device));
      int64_t v = 0;
      KILN_CHECK(from->buffer->read(0, &v, sizeof v));
      KILN_CHECK(bindData(st.op->attrs().getStr("name"), v, op.loc()));
      break;
    }
    case OpKind::Collective: {
      // Through the host: the inputs' devices finish the work that writes them, the host
      // combines them (ir/interp/collective.h, the interpreter's semantics, so every rank and
      // every driver agrees bit for bit) and writes each output buffer on its device. Over
      // ranks, each participant sends its devices' inputs to the others and receives theirs.
      const size_t n = st.operands.size() / 2;
      std::vector<HostTensor> in;
      std::vector<std::vector<uint8_t>> local(n);
      std::vector<hal::DeviceId> devs;
      for (size_t i = 0; i < n; ++i) {
        const Value* v = op.operand(i);
        std::vector<int64_t> shape;
        for (const Dim& d : v->type().shape()) {
          std::optional<int64_t> x = d.isUnknown() ? std::nullopt : d.expr().evaluate(binding);
          if (!x || *x < 0)
            return error(op.loc(), "collective: a dim of input " + std::to_string(i) +
                                       " cannot be evaluated at run time");
          shape.push_back(*x);
        }
        in.push_back(HostTensor::uninitialized(v->type().elem(), shape));
        if (st.operands[i] == Step::kNoSlot || st.operands[n + i] == Step::kNoSlot)
          return error(op.loc(), "collective: operand " + std::to_string(i) + " or " +
                                     std::to_string(n + i) + " is not a buffer");
        size_t dev = plan.slotDevice[st.operands[i]];
        devs.push_back(devices_[dev]->id);
        if (!devices_[dev]->device) continue; // another rank's
        KILN_TRY(Slot * s, slotOf(st, i));
        KILN_CHECK(flushDevice(s->device));
        if (s->buffer->byteSize() != in[i].byteSize())
          return error(op.loc(), "collective: input " + std::to_string(i) + " holds " +
                                     std::to_string(s->buffer->byteSize()) + " bytes, not " +
                                     std::to_string(in[i].byteSize()));
        KILN_CHECK(s->buffer->read(0, in[i].mutableData(), in[i].byteSize()));
        if (ranks_) local[i].assign(in[i].data(), in[i].data() + in[i].byteSize());
      }
      if (ranks_) {
        dist::Wait wait{op.loc(), std::string(op.attrs().getStr("kind")) + " (step " +
                                      std::to_string(index) + ")"};
        KILN_TRY(std::vector<std::vector<uint8_t>> blocks,
                 ranks_->gatherBlocks(devs, std::move(local), dist::Ranks::tagOf(index), wait));
        for (size_t i = 0; i < n; ++i) {
          if (blocks[i].size() != in[i].byteSize())
            return error(op.loc(), "collective: input " + std::to_string(i) + " came with " +
                                       std::to_string(blocks[i].size()) + " bytes, not " +
                                       std::to_string(in[i].byteSize()));
          if (!blocks[i].empty())
            std::memcpy(in[i].mutableData(), blocks[i].data(), blocks[i].size());
        }
      }
      const Attrs& a = op.attrs();
      std::optional<OpKind> kind = lookupOp(a.getStr("kind"));
      if (!kind || !opInfo(*kind).has(kCollective))
        return error(op.loc(), "collective: kind \"" + a.getStr("kind") +
                                   "\" is not all_reduce, all_gather or reduce_scatter");
      KILN_TRY(std::vector<HostTensor> out,
               computeCollective(*kind, a.has("reduce") ? a.getStr("reduce") : "",
                                 a.has("axis") ? a.getInt("axis") : 0, in, op.loc()));
      for (size_t i = 0; i < n; ++i) {
        stats_.collectiveBytes += in[i].byteSize();
        if (!devices_[plan.slotDevice[st.operands[n + i]]]->device) continue; // another rank's
        KILN_TRY(Slot * s, slotOf(st, n + i));
        if (s->buffer->byteSize() != out[i].byteSize())
          return error(op.loc(), "collective: output " + std::to_string(i) + " holds " +
                                     std::to_string(s->buffer->byteSize()) + " bytes, not " +
                                     std::to_string(out[i].byteSize()));
        KILN_CHECK(s->buffer->write(0, out[i].data(), out[i].byteSize()));
      }
      break;
    }
    case OpKind::Return: {
      for (auto& d : devices_)
        if (d->device) KILN_CHECK(d->submit());
      for (auto& d : devices_)
        if (d->device) KILN_CHECK(d->flush());
      std::vector<HostTensor> results;
      for (size_t i = 0; i < st.operands.size(); ++i) {
        if (ranks_ && st.operands[i] != Step::kNoSlot) { // other ranks' results go to rank 0
          size_t dev = plan.slotDevice[st.operands[i]];
          int owner = ranks_->owner(devices_[dev]->id), tag = dist::Ranks::tagOf(index + 1 + i);
          dist::Wait wait{op.loc(), "returning result " + std::to_string(i) + " from " +
                                        devices_[dev]->id.str() + " to rank 0"};
          if (ranks_->rank() != 0) {
            if (owner != ranks_->rank()) continue;
            KILN_TRY(Slot * s, slotOf(st, i));
            KILN_CHECK(ranks_->sendBuffer(*s->buffer, 0, tag, wait));
            continue;
          }
          if (owner != 0) {
            std::vector<int64_t> shape;
            for (const Dim& d : op.operand(i)->type().shape()) {
              std::optional<int64_t> v = d.isUnknown() ? std::nullopt : d.expr().evaluate(binding);
              if (!v || *v < 0)
                return error(op.loc(), "return: a dim of result " + std::to_string(i) +
                                           " cannot be evaluated at run time");
              shape.push_back(*v);
            }
            HostTensor t = HostTensor::uninitialized(op.operand(i)->type().elem(), shape);
            KILN_CHECK(ranks_->transport().recv(owner, tag, t.mutableData(), t.byteSize(), wait));
            results.push_back(std::move(t));
            continue;
          }
        }
        KILN_TRY(Slot * s, slotOf(st, i));
        if (s->donor) { // the caller's tensor holds the result (written in place or copied)
          HostTensor t = inputs[*s->donor];
          if (!s->imported) KILN_CHECK(s->buffer->read(0, t.mutableData(), t.byteSize()));
          results.push_back(std::move(t));
          continue;
        }
        HostTensor t = HostTensor::uninitialized(s->elem, s->shape);
        KILN_CHECK(s->buffer->read(0, t.mutableData(), t.byteSize()));
        results.push_back(std::move(t));
      }
      return results;
    }
    default:
      return error(op.loc(), "host function @" + f.name() + " contains '" + std::string(op.name()) +
                                 "', which the executor does not run");
    }
  }
  return error(f.loc(), "@" + f.name() + " has no return");
}

} // namespace kiln
