// The executor: opens a program's devices, loads its executables, and interprets its host
// functions against the HAL.
#include "runtime/executor.h"

#include <unordered_map>

#include "ir/interp.h"
#include "runtime/drivers.h"

namespace kiln {

struct Executor::DeviceState {
  std::shared_ptr<hal::Device> device;
  std::unique_ptr<hal::Executable> executable; // null when the program has none for it
  std::unique_ptr<hal::CommandBuffer> pending;
  std::unique_ptr<hal::Semaphore> timeline;
  uint64_t signaled = 0;

  // Submits the pending commands and waits until the device has run them.
  Status flush() {
    if (pending && pending->numCommands() > 0) {
      std::unique_ptr<hal::CommandBuffer> cb = std::move(pending);
      pending = device->createCommandBuffer();
      KILN_CHECK(device->submit(*cb, nullptr, 0, *timeline, signaled + 1));
      ++signaled;
    }
    KILN_CHECK(timeline->wait(signaled));
    return ok();
  }
};

Executor::~Executor() = default;

Result<size_t> Executor::deviceIndex(const std::string& spec, const Loc& loc) {
  if (auto it = deviceByName_.find(spec); it != deviceByName_.end()) return it->second;
  KILN_TRY(hal::DeviceId id, hal::parseDeviceId(spec, loc));
  if (opts_.device) id = *opts_.device;
  for (size_t i = 0; i < devices_.size(); ++i)
    if (devices_[i]->device->id() == id) {
      deviceByName_[spec] = i;
      return i;
    }
  KILN_TRY(std::shared_ptr<hal::Device> dev, hal::openDevice(id, loc));
  auto state = std::make_unique<DeviceState>();
  state->device = dev;
  state->pending = dev->createCommandBuffer();
  state->timeline = dev->createSemaphore(0);
  hal::Driver* driver = hal::lookupDriver(id.kind);
  for (const ExecutableImage& img : program_->executables)
    if (driver && img.target == driver->target()) {
      KILN_TRY(state->executable, dev->loadExecutable(img.target, img.payload));
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
    return error(Loc::named("--device"), "the module uses " +
                                             std::to_string(ex->program_->devices.size()) +
                                             " devices; it cannot be moved to one device");
  ex->weightStore_ = std::make_unique<WeightStore>(*ex->program_->host);
  for (const std::string& name : ex->program_->entries) {
    const Func* f = ex->program_->host->lookupFunc(name);
    if (!f) return error(Loc{}, "internal: entry @" + name + " is missing");
    for (const auto& op : f->ops()) {
      if (op->info().level == OpLevel::Tensor && op->kind() != OpKind::Return)
        return error(op->loc(), "host function @" + name + " contains the tensor op '" +
                                    std::string(op->name()) + "'; it was not scheduled");
      if (!op->attrs().has("device")) continue;
      KILN_TRY(size_t d, ex->deviceIndex(op->attrs().getStr("device"), op->loc()));
      if (op->kind() != OpKind::Launch) continue;
      std::string kernel = op->attrs().getStr("kernel");
      if (ex->kernels_.count({kernel, d})) continue;
      const hal::Executable* exe = ex->devices_[d]->executable.get();
      bool found = false;
      for (size_t k = 0; exe && k < exe->numKernels() && !found; ++k)
        if (exe->kernelName(k) == kernel) {
          ex->kernels_[{kernel, d}] = KernelRef{d, k};
          found = true;
        }
      if (!found)
        return error(op->loc(), "launch of @" + kernel + ": the executable for " +
                                    ex->devices_[d]->device->id().str() + " has no such kernel");
      int64_t outs = op->attrs().getInt("outputs");
      if (outs < 0 || static_cast<size_t>(outs) > op->numOperands())
        return error(op->loc(), "launch of @" + kernel + " has " + std::to_string(outs) +
                                    " outputs but " + std::to_string(op->numOperands()) +
                                    " operands");
    }
  }
  return ex;
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

namespace {

struct Slot {
  hal::Buffer* buffer = nullptr;
  std::unique_ptr<hal::Buffer> owned;
  size_t device = 0;
  std::optional<size_t> donor; // the donated argument whose storage this buffer is or returns to
  bool imported = false;       // the buffer is the donor's memory itself
  ElemType elem = ElemType::F32;
  std::vector<int64_t> shape;
  hal::Binding binding() const { return {buffer, elem, shape}; }
};

Result<std::vector<int64_t>> concreteShape(const Type& t, const SymbolBinding& binding,
                                           const Loc& loc) {
  std::vector<int64_t> shape;
  for (const Dim& d : t.shape()) {
    std::optional<int64_t> v = d.isUnknown() ? std::nullopt : d.expr().evaluate(binding);
    if (!v || *v < 0)
      return error(loc, "dim " + d.str() + " of " + t.str() + " cannot be evaluated at run time");
    shape.push_back(*v);
  }
  return shape;
}

// Whether two tensors' bytes overlap.
bool overlaps(const HostTensor& a, const HostTensor& b) {
  const uint8_t *pa = a.data(), *pb = b.data();
  return pa && pb && a.byteSize() && b.byteSize() && pa < pb + b.byteSize() &&
         pb < pa + a.byteSize();
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
                                               const std::vector<HostTensor>& inputs) {
  const Func* f = program_->entry(function);
  if (!f) {
    std::string names;
    for (const std::string& e : program_->entries) names += (names.empty() ? "@" : ", @") + e;
    return error(Loc::named("--function"),
                 "no function @" + function + " in the module (functions: " + names + ")");
  }
  SymbolBinding binding;
  KILN_CHECK(bindArguments(*f, inputs, binding));
  stats_ = CallStats{};
  for (auto& d : devices_) {
    // A failed call leaves its semaphore failed; each call starts on a fresh timeline.
    d->pending = d->device->createCommandBuffer();
    d->timeline = d->device->createSemaphore(0);
    d->signaled = 0;
    d->device->resetPeak();
  }

  std::unordered_map<const Value*, Slot> env;
  auto slotOf = [&](const Value* v, const Op& op) -> Result<Slot*> {
    auto it = env.find(v);
    if (it == env.end() || !it->second.buffer)
      return error(op.loc(), std::string(op.name()) + ": an operand is not a live buffer");
    return &it->second;
  };
  auto newSlot = [&](const Op& op, size_t device) -> Result<Slot> {
    Slot s;
    s.device = device;
    s.elem = op.result(0)->type().elem();
    KILN_TRY(s.shape, concreteShape(op.result(0)->type(), binding, op.loc()));
    KILN_TRY(uint64_t bytes, byteCount(s.elem, s.shape, op.loc()));
    KILN_TRY(s.owned, devices_[device]->device->allocate(bytes));
    s.buffer = s.owned.get();
    return s;
  };
  // The upload of donated argument `a`: the caller's memory itself when the tensor is
  // writable, overlaps no other argument and the device can use it; else a copy, written
  // back into the tensor by `return` when it is writable and overlaps nothing.
  auto donatedSlot = [&](const Op& op, size_t device, size_t a) -> Result<Slot> {
    const HostTensor& t = inputs[a];
    bool alone = t.writable();
    for (size_t j = 0; j < inputs.size() && alone; ++j) alone = j == a || !overlaps(inputs[j], t);
    Slot s;
    s.device = device;
    s.elem = op.result(0)->type().elem();
    KILN_TRY(s.shape, concreteShape(op.result(0)->type(), binding, op.loc()));
    if (alone) {
      s.owned = devices_[device]->device->importHost(const_cast<uint8_t*>(t.data()), t.byteSize());
      s.imported = s.owned != nullptr;
    }
    if (!s.owned) {
      KILN_TRY(uint64_t bytes, byteCount(s.elem, s.shape, op.loc()));
      KILN_TRY(s.owned, devices_[device]->device->allocate(bytes));
      if (t.byteSize() != bytes)
        return error(op.loc(),
                     "transfer_to: input " + std::to_string(a) + " does not fill its buffer");
      KILN_CHECK(s.owned->write(0, t.data(), t.byteSize()));
    }
    s.buffer = s.owned.get();
    if (alone) s.donor = a;
    return s;
  };
  auto finish = [&]() {
    for (auto& d : devices_) stats_.peakBytes += d->device->memoryStats().peakBytes;
  };

  for (const auto& opPtr : f->ops()) {
    const Op& op = *opPtr;
    std::optional<size_t> dev;
    if (op.attrs().has("device")) {
      KILN_TRY(size_t d, deviceIndex(op.attrs().getStr("device"), op.loc()));
      dev = d;
    }
    switch (op.kind()) {
    case OpKind::AllocBuffer: {
      KILN_TRY(Slot s, newSlot(op, *dev));
      env[op.result(0)] = std::move(s);
      break;
    }
    case OpKind::LoadWeight: {
      Slot s;
      s.device = *dev;
      s.elem = op.result(0)->type().elem();
      KILN_TRY(s.shape, concreteShape(op.result(0)->type(), binding, op.loc()));
      KILN_TRY(s.buffer, weightBuffer(op.attrs().getStr("name"), *dev, op.loc()));
      env[op.result(0)] = std::move(s);
      break;
    }
    case OpKind::TransferTo: {
      const Value* src = op.operand(0);
      // Only an argument the signature donates: the caller consented to the write.
      if (op.attrs().getInt("donated") && src->isArg() && src->argOf() == f &&
          f->argDonation(src->index())) {
        KILN_TRY(Slot s, donatedSlot(op, *dev, src->index()));
        env[op.result(0)] = std::move(s);
        break;
      }
      KILN_TRY(Slot s, newSlot(op, *dev));
      if (src->isArg() && src->argOf() == f) {
        const HostTensor& t = inputs[src->index()];
        if (t.byteSize() != s.buffer->byteSize())
          return error(op.loc(), "transfer_to: input " + std::to_string(src->index()) +
                                     " does not fill its buffer");
        KILN_CHECK(s.buffer->write(0, t.data(), t.byteSize()));
      } else {
        KILN_TRY(Slot * from, slotOf(src, op));
        if (from->buffer->byteSize() != s.buffer->byteSize())
          return error(op.loc(), "transfer_to: source and destination sizes differ");
        KILN_CHECK(devices_[from->device]->flush());
        if (from->device == *dev) {
          devices_[*dev]->pending->copy(*from->buffer, 0, *s.buffer, 0, s.buffer->byteSize());
        } else if (const uint8_t* p = from->buffer->map()) {
          KILN_CHECK(s.buffer->write(0, p, s.buffer->byteSize()));
        } else {
          std::vector<uint8_t> staging(s.buffer->byteSize());
          KILN_CHECK(from->buffer->read(0, staging.data(), staging.size()));
          KILN_CHECK(s.buffer->write(0, staging.data(), staging.size()));
        }
      }
      env[op.result(0)] = std::move(s);
      break;
    }
    case OpKind::Launch: {
      size_t outs = static_cast<size_t>(op.attrs().getInt("outputs"));
      std::vector<hal::Binding> in, out;
      for (size_t i = 0; i < op.numOperands(); ++i) {
        KILN_TRY(Slot * s, slotOf(op.operand(i), op));
        (i + outs < op.numOperands() ? in : out).push_back(s->binding());
      }
      const KernelRef& k = kernels_.at({op.attrs().getStr("kernel"), *dev});
      DeviceState& d = *devices_[k.device];
      d.pending->dispatch(*d.executable, k.kernel, std::move(in), std::move(out), binding);
      ++stats_.dispatches;
      break;
    }
    case OpKind::Free: {
      // The pending work may still read the buffer: it runs first. (Drivers with
      // asynchronous queues would rather release at the submission's semaphore value.)
      KILN_TRY(Slot * s, slotOf(op.operand(0), op));
      KILN_CHECK(devices_[s->device]->flush());
      env.erase(op.operand(0));
      break;
    }
    case OpKind::Wait: KILN_CHECK(devices_[*dev]->flush()); break;
    case OpKind::Return: {
      for (auto& d : devices_) KILN_CHECK(d->flush());
      std::vector<HostTensor> results;
      for (size_t i = 0; i < op.numOperands(); ++i) {
        KILN_TRY(Slot * s, slotOf(op.operand(i), op));
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
      finish();
      return results;
    }
    default:
      return error(op.loc(), "host function @" + f->name() + " contains '" +
                                 std::string(op.name()) + "', which the executor does not run");
    }
  }
  return error(f->loc(), "@" + f->name() + " has no return");
}

} // namespace kiln
