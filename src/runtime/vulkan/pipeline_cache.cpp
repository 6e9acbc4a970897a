// PipelineCache (pipeline_cache.h): a checksummed file around the driver's cache data.
#include "runtime/vulkan/pipeline_cache.h"

#include <unistd.h>
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln::hal::vulkan {

namespace {

constexpr char kMagic[] = "KILNVKPC";
constexpr size_t kHeaderBytes = 24;

std::string hex(const uint8_t* bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s.push_back(digits[bytes[i] >> 4]);
    s.push_back(digits[bytes[i] & 15]);
  }
  return s;
}

std::string hex64(uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
  return hex(b, 8);
}

uint64_t getU64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

uint32_t getU32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

void putU64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// The driver's data, when the file is intact and made by this device and driver.
std::string readValid(const std::string& path, const VkPhysicalDeviceProperties& props) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string file = ss.str();
  if (file.size() < kHeaderBytes || std::memcmp(file.data(), kMagic, 8) != 0) return "";
  uint64_t hash = getU64(file, 8), size = getU64(file, 16);
  if (size != file.size() - kHeaderBytes) return "";
  std::string data = file.substr(kHeaderBytes);
  if (XXH3_64bits(data.data(), data.size()) != hash) return "";
  // VkPipelineCacheHeaderVersionOne: size, version, vendor, device, UUID.
  if (data.size() < 32 || getU32(data, 0) < 32 || getU32(data, 0) > data.size() ||
      getU32(data, 4) != VK_PIPELINE_CACHE_HEADER_VERSION_ONE ||
      getU32(data, 8) != props.vendorID || getU32(data, 12) != props.deviceID ||
      std::memcmp(data.data() + 16, props.pipelineCacheUUID, VK_UUID_SIZE) != 0)
    return "";
  return data;
}

} // namespace

std::string PipelineCache::directory() {
  const char* off = std::getenv("KILN_VULKAN_PIPELINE_CACHE");
  if (off && std::strcmp(off, "0") == 0) return "";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/')
    return std::string(xdg) + "/kiln";
  if (const char* home = std::getenv("HOME"); home && *home == '/')
    return std::string(home) + "/.cache/kiln";
  return "";
}

PipelineCache::PipelineCache(VulkanDevice& device, uint64_t moduleHash) : device_(device) {
  const VkPhysicalDeviceProperties& props = device.props().props;
  std::string dir = directory();
  if (!dir.empty())
    path_ = dir + "/vulkan-" + hex(props.pipelineCacheUUID, VK_UUID_SIZE) + "-" +
            hex64(props.driverVersion) + "-" + hex64(moduleHash) + ".cache";
  if (!path_.empty()) loaded_ = readValid(path_, props);
  VkPipelineCacheCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO;
  ci.initialDataSize = loaded_.size();
  ci.pInitialData = loaded_.empty() ? nullptr : loaded_.data();
  if (device.api().vkCreatePipelineCache(device.handle(), &ci, nullptr, &cache_) != VK_SUCCESS)
    cache_ = VK_NULL_HANDLE;
}

PipelineCache::~PipelineCache() {
  if (cache_ && !processExiting())
    device_.api().vkDestroyPipelineCache(device_.handle(), cache_, nullptr);
}

void PipelineCache::save() {
  if (!cache_ || path_.empty()) return;
  size_t size = 0;
  if (device_.api().vkGetPipelineCacheData(device_.handle(), cache_, &size, nullptr) != VK_SUCCESS)
    return;
  std::string data(size, '\0');
  if (device_.api().vkGetPipelineCacheData(device_.handle(), cache_, &size, data.data()) !=
      VK_SUCCESS)
    return;
  data.resize(size);
  if (!loaded_.empty() && data == loaded_) return;
  std::string file(kMagic, 8);
  putU64(file, XXH3_64bits(data.data(), data.size()));
  putU64(file, data.size());
  file += data;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  std::string tmp = path_ + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return;
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
    if (!out) {
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) std::remove(tmp.c_str());
  loaded_ = data;
}

} // namespace kiln::hal::vulkan
