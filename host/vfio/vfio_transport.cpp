#include "host/vfio/vfio_transport.h"

#include <fcntl.h>
#include <linux/pci_regs.h>
#include <linux/vfio.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "driver/memory_order.h"
#include "driver/registers.h"
#include "host/error.h"
#include "host/format.h"
#include "host/gpu_bar_access.h"
#include "host/vfio/pagemap.h"
#include "host/vfio/sysfs_pci.h"


namespace gpunvme::vfio {
namespace {

using host::hex;

std::string errno_text(int e) { return std::string(std::strerror(e)); }

bool path_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

[[noreturn]] void fail_open(const std::string& what, const std::string& path, int e, const std::string& fix) {
  const ErrorKind kind = (e == EACCES || e == EPERM) ? ErrorKind::kPermission
                         : (e == ENOENT)             ? ErrorKind::kNotFound
                                                     : ErrorKind::kIo;
  std::string msg = what + ": cannot open " + path + ": " + errno_text(e);
  if (e == EACCES || e == EPERM)
    msg += ". Run as root, or give your user the node: sudo chown $USER " + path;
  else if (e == EBUSY)
    msg += ". Another process (or another container) holds this VFIO group; only one may open it";
  if (!fix.empty()) msg += ". " + fix;
  throw Error(kind, msg);
}

const char* kNoVfioFix =
    "Load the driver (sudo modprobe vfio-pci) and check that the IOMMU is on: enable VT-d / AMD-Vi in the "
    "firmware and boot with intel_iommu=on (Intel) or amd_iommu=on; `dmesg | grep -e DMAR -e IOMMU` "
    "should show it";

}  // namespace

VfioTransport::VfioTransport(std::string_view device, const VfioOptions& options)
    : dev_vfio_(options.dev_vfio), reset_requested_(options.reset) {
  try {
    open_all(device, options);
  } catch (...) {
    release_all();
    throw;
  }
}

void VfioTransport::open_all(std::string_view device, const VfioOptions& options) {
  // 1. which device; 2. its sysfs state (vfio-pci, IOMMU group); 3. container and group;
  // 4. IOMMU geometry; 5. the device itself.
  info_.bdf = parse_device(device);
  const SysfsPci sysfs(options.sysfs_root);
  check_sysfs(sysfs);
  open_container_and_group(options);
  attach_group(sysfs);
  if (!info_.noiommu) read_iommu_geometry();
  open_device();
  map_bar0();
  enable_bus_master();
}

// "vfio:DOMAIN:BUS:DEV.FN" (or the bare BDF) -> the normalized BDF.
std::string VfioTransport::parse_device(std::string_view device) {
  std::string_view bdf_text = device;
  if (is_vfio_device_string(bdf_text)) bdf_text.remove_prefix(5);
  const auto bdf = normalize_bdf(bdf_text);
  if (!bdf)
    throw Error(ErrorKind::kInvalidArgument,
                "bad VFIO device string '" + std::string(device) +
                    "': expected vfio:DOMAIN:BUS:DEV.FN, e.g. vfio:0000:0b:00.0 (list drives with "
                    "scripts/setup_vfio.sh status)");
  return *bdf;
}

// The device exists, is bound to vfio-pci and has an IOMMU group (sets info_.group).
void VfioTransport::check_sysfs(const SysfsPci& sysfs) {
  if (!sysfs.exists(info_.bdf))
    throw Error(ErrorKind::kNotFound, "no PCI device " + info_.bdf + " (" + sysfs.device_dir(info_.bdf) +
                                          " is missing); list NVMe drives with scripts/setup_vfio.sh status");
  if (const std::string not_nvme = describe_not_nvme(sysfs, info_.bdf); !not_nvme.empty())
    throw Error(ErrorKind::kInvalidArgument, not_nvme);
  const std::string drv = sysfs.driver(info_.bdf);
  if (drv != "vfio-pci")
    throw Error(ErrorKind::kInvalidArgument,
                info_.bdf + " is bound to " + (drv.empty() ? std::string("no driver") : "driver '" + drv + "'") +
                    ", not vfio-pci. Hand it to VFIO with: sudo scripts/setup_vfio.sh bind " + info_.bdf +
                    " (and back with: sudo scripts/setup_vfio.sh unbind " + info_.bdf + ")");
  info_.group = sysfs.iommu_group(info_.bdf);
  if (info_.group < 0)
    throw Error(ErrorKind::kUnsupported,
                info_.bdf + " has no IOMMU group (no " + sysfs.device_dir(info_.bdf) +
                    "/iommu_group link): the IOMMU is off. " + kNoVfioFix +
                    ". Without an IOMMU, vfio can run unsafely: modprobe vfio enable_unsafe_noiommu_mode=1 "
                    "(kernel needs CONFIG_VFIO_NOIOMMU)");
}

// The group must be viable (no other member on a host driver); then it joins the container,
// which gets its IOMMU type.
void VfioTransport::attach_group(const SysfsPci& sysfs) {
  // Now the group is ours: a non-viable group (other members on host drivers) cannot be used.
  vfio_group_status status{};
  status.argsz = sizeof(status);
  if (::ioctl(group_fd_, VFIO_GROUP_GET_STATUS, &status) != 0)
    throw Error(ErrorKind::kIo, "VFIO_GROUP_GET_STATUS on group " + std::to_string(info_.group) + ": " +
                                    errno_text(errno));
  if (!(status.flags & VFIO_GROUP_FLAGS_VIABLE))
    throw Error(ErrorKind::kUnsupported, describe_unviable_group(sysfs, info_.group, info_.bdf));

  if (::ioctl(group_fd_, VFIO_GROUP_SET_CONTAINER, &container_) != 0)
    throw Error(ErrorKind::kIo, "VFIO_GROUP_SET_CONTAINER for group " + std::to_string(info_.group) + ": " +
                                    errno_text(errno));
  const int type = info_.noiommu ? VFIO_NOIOMMU_IOMMU : VFIO_TYPE1v2_IOMMU;
  if (::ioctl(container_, VFIO_SET_IOMMU, type) != 0)
    throw Error(ErrorKind::kIo, std::string("VFIO_SET_IOMMU(") + (info_.noiommu ? "NOIOMMU" : "TYPE1v2") +
                                    "): " + errno_text(errno));
}

// Page sizes and the valid IOVA ranges (capability chain, Linux >= 5.4); sets up the IOVA allocator.
void VfioTransport::read_iommu_geometry() {
  std::vector<uint8_t> buf(sizeof(vfio_iommu_type1_info));
  auto* ii = reinterpret_cast<vfio_iommu_type1_info*>(buf.data());
  ii->argsz = uint32_t(buf.size());
  if (::ioctl(container_, VFIO_IOMMU_GET_INFO, ii) == 0) {
    if (ii->argsz > buf.size()) {
      const uint32_t need = ii->argsz;
      buf.assign(need, 0);
      ii = reinterpret_cast<vfio_iommu_type1_info*>(buf.data());
      ii->argsz = need;
      if (::ioctl(container_, VFIO_IOMMU_GET_INFO, ii) != 0) ii->flags = 0;
    }
    if (ii->flags & VFIO_IOMMU_INFO_PGSIZES) info_.iova_pgsizes = ii->iova_pgsizes;
#if defined(VFIO_IOMMU_INFO_CAPS)
    if ((ii->flags & VFIO_IOMMU_INFO_CAPS) && ii->cap_offset != 0) {
      uint32_t off = ii->cap_offset;
      while (off != 0 && off + sizeof(vfio_info_cap_header) <= buf.size()) {
        const auto* hdr = reinterpret_cast<const vfio_info_cap_header*>(buf.data() + off);
        if (hdr->id == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE &&
            off + sizeof(vfio_iommu_type1_info_cap_iova_range) <= buf.size()) {
          const auto* cap = reinterpret_cast<const vfio_iommu_type1_info_cap_iova_range*>(hdr);
          for (uint32_t i = 0; i < cap->nr_iovas; ++i) {
            const size_t at = off + sizeof(*cap) + i * sizeof(vfio_iova_range);
            if (at + sizeof(vfio_iova_range) > buf.size()) break;
            const auto* r = reinterpret_cast<const vfio_iova_range*>(buf.data() + at);
            info_.iova_ranges.push_back({r->start, r->end});
          }
        }
        if (hdr->next <= off) break;  // chains only move forward
        off = hdr->next;
      }
    }
#endif
  }
  iova_ = IovaAllocator(info_.iova_ranges);
}

void VfioTransport::open_container_and_group(const VfioOptions& options) {
  const std::string container_path = dev_vfio_ + "/vfio";
  container_ = ::open(container_path.c_str(), O_RDWR | O_CLOEXEC);
  if (container_ < 0) fail_open("VFIO container", container_path, errno, errno == ENOENT ? kNoVfioFix : "");
  const int api = ::ioctl(container_, VFIO_GET_API_VERSION);
  if (api != VFIO_API_VERSION)
    throw Error(ErrorKind::kUnsupported, "VFIO API version " + std::to_string(api) + ", expected " +
                                             std::to_string(VFIO_API_VERSION) + ": kernel and headers disagree");

  const std::string group_path = dev_vfio_ + "/" + std::to_string(info_.group);
  const std::string noiommu_path = dev_vfio_ + "/noiommu-" + std::to_string(info_.group);
  if (!path_exists(group_path) && path_exists(noiommu_path)) {
    if (!options.allow_noiommu)
      throw Error(ErrorKind::kUnsupported, info_.bdf + " is only reachable through no-IOMMU VFIO (" + noiommu_path +
                                               ") and no-IOMMU mode was not allowed");
    info_.noiommu = true;
  }
  const int ext = info_.noiommu ? VFIO_NOIOMMU_IOMMU : VFIO_TYPE1v2_IOMMU;
  if (::ioctl(container_, VFIO_CHECK_EXTENSION, ext) <= 0)
    throw Error(ErrorKind::kUnsupported,
                info_.noiommu ? std::string("the VFIO container does not offer no-IOMMU mode: load vfio with "
                                            "enable_unsafe_noiommu_mode=1 (kernel needs CONFIG_VFIO_NOIOMMU)")
                              : std::string("the VFIO container does not offer the TYPE1v2 IOMMU (needs Linux >= "
                                            "3.17 with vfio_iommu_type1 loaded: sudo modprobe vfio_iommu_type1)"));
  const std::string& path = info_.noiommu ? noiommu_path : group_path;
  group_fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (group_fd_ < 0)
    fail_open("IOMMU group " + std::to_string(info_.group) + " of " + info_.bdf, path, errno,
              errno == ENOENT ? "The device is bound to vfio-pci but its group node is missing; rebind it: sudo "
                                "scripts/setup_vfio.sh unbind " + info_.bdf + " && sudo scripts/setup_vfio.sh bind " +
                                info_.bdf
                              : "");
}

void VfioTransport::open_device() {
  device_ = ::ioctl(group_fd_, VFIO_GROUP_GET_DEVICE_FD, info_.bdf.c_str());
  if (device_ < 0)
    throw Error(errno == EPERM ? ErrorKind::kPermission : ErrorKind::kIo,
                "VFIO_GROUP_GET_DEVICE_FD(" + info_.bdf + "): " + errno_text(errno) +
                    (errno == EPERM ? " (no-IOMMU mode needs CAP_SYS_RAWIO: run as root)" : ""));
  vfio_device_info dev{};
  dev.argsz = sizeof(dev);
  if (::ioctl(device_, VFIO_DEVICE_GET_INFO, &dev) != 0)
    throw Error(ErrorKind::kIo, "VFIO_DEVICE_GET_INFO(" + info_.bdf + "): " + errno_text(errno));
  if (!(dev.flags & VFIO_DEVICE_FLAGS_PCI))
    throw Error(ErrorKind::kUnsupported, info_.bdf + " is not a PCI device as VFIO sees it");
  info_.num_regions = dev.num_regions;
  info_.reset_offered = (dev.flags & VFIO_DEVICE_FLAGS_RESET) != 0;

  vfio_region_info cfg{};
  cfg.argsz = sizeof(cfg);
  cfg.index = VFIO_PCI_CONFIG_REGION_INDEX;
  if (::ioctl(device_, VFIO_DEVICE_GET_REGION_INFO, &cfg) != 0)
    throw Error(ErrorKind::kIo, "VFIO_DEVICE_GET_REGION_INFO(config) of " + info_.bdf + ": " + errno_text(errno));
  config_offset_ = cfg.offset;
}

void VfioTransport::map_bar0() {
  vfio_region_info bar{};
  bar.argsz = sizeof(bar);
  bar.index = VFIO_PCI_BAR0_REGION_INDEX;
  if (::ioctl(device_, VFIO_DEVICE_GET_REGION_INFO, &bar) != 0)
    throw Error(ErrorKind::kIo, "VFIO_DEVICE_GET_REGION_INFO(BAR0) of " + info_.bdf + ": " + errno_text(errno));
  info_.bar0_size = bar.size;
  // Registers plus the admin queue's two doorbells at stride 4: anything smaller is not an NVMe BAR0.
  const uint64_t need = nvme::bar0_bytes_for(0, 0);
  if (bar.size < need)
    throw Error(ErrorKind::kUnsupported, "BAR0 of " + info_.bdf + " is " + std::to_string(bar.size) +
                                             " bytes; an NVMe controller's BAR0 holds at least " +
                                             std::to_string(need) + " (registers and doorbells). Is this an NVMe "
                                             "function (PCI class 0x010802)? Check with scripts/setup_vfio.sh status");
  if (!(bar.flags & VFIO_REGION_INFO_FLAG_MMAP))
    throw Error(ErrorKind::kUnsupported, "VFIO does not allow mmap of BAR0 of " + info_.bdf +
                                             " (the BAR may share a page with MSI-X; needs Linux >= 4.16)");
  void* p = ::mmap(nullptr, bar.size, PROT_READ | PROT_WRITE, MAP_SHARED, device_, off_t(bar.offset));
  if (p == MAP_FAILED)
    throw Error(ErrorKind::kIo, "mmap of BAR0 of " + info_.bdf + " (" + std::to_string(bar.size) +
                                    " bytes): " + errno_text(errno));
  bar0_ = static_cast<volatile uint32_t*>(p);
}

uint16_t VfioTransport::config_read16(uint32_t offset) const {
  uint16_t v = 0;
  if (::pread(device_, &v, sizeof(v), off_t(config_offset_ + offset)) != sizeof(v))
    throw Error(ErrorKind::kIo, "reading PCI config offset " + hex(offset) + " of " + info_.bdf + ": " +
                                    errno_text(errno));
  return v;
}

void VfioTransport::config_write16(uint32_t offset, uint16_t value) {
  if (::pwrite(device_, &value, sizeof(value), off_t(config_offset_ + offset)) != sizeof(value))
    throw Error(ErrorKind::kIo, "writing PCI config offset " + hex(offset) + " of " + info_.bdf + ": " +
                                    errno_text(errno));
}

void VfioTransport::enable_bus_master() {
  // Reset first: FLR clears the command register, which is set up right after.
  if (info_.reset_offered && reset_requested_) {
    if (::ioctl(device_, VFIO_DEVICE_RESET) == 0) info_.reset_done = true;
  }
  const uint16_t cmd = config_read16(PCI_COMMAND);
  const uint16_t want = uint16_t(cmd | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER);
  if (want != cmd) config_write16(PCI_COMMAND, want);
  if ((config_read16(PCI_COMMAND) & (PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER)) !=
      (PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER))
    throw Error(ErrorKind::kIo, "could not enable memory space and bus mastering in the PCI command register of " +
                                    info_.bdf);
  // A controller that reads all ones is gone (surprise removal, or stuck after reset).
  if (nvme::mmio_read32(bar0_ + nvme::reg::kCsts / 4) == 0xFFFFFFFFu)
    throw Error(ErrorKind::kControllerFatal, "BAR0 of " + info_.bdf +
                                                 " reads all ones: the device is gone or hung; try "
                                                 "scripts/setup_vfio.sh unbind and bind again, or a power cycle");
}

VfioTransport::~VfioTransport() { release_all(); }

void VfioTransport::release_all() noexcept {
  if (bar0_gpu_registered_) host::unregister_io_memory_for_gpu(const_cast<uint32_t*>(bar0_));
  bar0_gpu_registered_ = false;
  if (container_ >= 0 && !info_.noiommu) {
    for (const auto& [vaddr, m] : maps_) {
      vfio_iommu_type1_dma_unmap un{};
      un.argsz = sizeof(un);
      un.iova = m.first;
      un.size = m.second;
      ::ioctl(container_, VFIO_IOMMU_UNMAP_DMA, &un);
    }
  }
  maps_.clear();
  if (bar0_) ::munmap(const_cast<uint32_t*>(bar0_), info_.bar0_size);
  bar0_ = nullptr;
  if (device_ >= 0) ::close(device_);
  device_ = -1;
  if (group_fd_ >= 0) {
    ::ioctl(group_fd_, VFIO_GROUP_UNSET_CONTAINER);
    ::close(group_fd_);
  }
  group_fd_ = -1;
  if (container_ >= 0) ::close(container_);
  container_ = -1;
}

host::DmaTranslation VfioTransport::dma_map(void* vaddr, uint64_t len) {
  const auto addr = reinterpret_cast<uintptr_t>(vaddr);
  if ((addr & 4095) != 0 || len == 0 || (len & 4095) != 0)
    throw Error(ErrorKind::kInvalidArgument, "dma_map(" + hex(addr) + ", " + std::to_string(len) +
                                                 "): address and length must be multiples of 4 KiB");
  if (info_.noiommu) {
    unsigned shift = 0;
    auto chunks = physical_chunks_of(vaddr, len, &shift);
    std::lock_guard<std::mutex> lock(mu_);
    maps_[addr] = {chunks.front(), len};
    return host::DmaTranslation::chunked(std::move(chunks), shift);
  }
  std::lock_guard<std::mutex> lock(mu_);
  const auto iova = iova_.allocate(len);
  if (!iova)
    throw Error(ErrorKind::kResource, "out of IOVA space mapping " + std::to_string(len) + " bytes for " +
                                          info_.bdf + " (" + std::to_string(iova_.bytes_in_use()) +
                                          " bytes mapped)");
  vfio_iommu_type1_dma_map m{};
  m.argsz = sizeof(m);
  m.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
  m.vaddr = addr;
  m.iova = *iova;
  m.size = len;
  if (::ioctl(container_, VFIO_IOMMU_MAP_DMA, &m) != 0) {
    const int e = errno;
    iova_.release(*iova, len);
    std::string msg = "VFIO_IOMMU_MAP_DMA(" + std::to_string(len) + " bytes at IOVA " + hex(*iova) + ") for " +
                      info_.bdf + ": " + errno_text(e);
    if (e == ENOMEM)
      msg += ". Pinning exceeds RLIMIT_MEMLOCK (ulimit -l) or the container's DMA mapping limit "
             "(vfio_iommu_type1 dma_entry_limit): raise `ulimit -l` or run as root";
    else if (e == EEXIST)
      msg += ". The IOVA range is already mapped (a bug in the IOVA allocator)";
    else if (e == EFAULT)
      msg += ". The buffer is not mapped in this process";
    throw Error(e == ENOMEM ? ErrorKind::kResource : ErrorKind::kIo, msg);
  }
  maps_[addr] = {*iova, len};
  last_guard_iova_ = *iova + len;
  return host::DmaTranslation::contiguous(*iova);
}

void VfioTransport::dma_unmap(void* vaddr, uint64_t len) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = maps_.find(reinterpret_cast<uintptr_t>(vaddr));
  if (it == maps_.end()) return;
  if (!info_.noiommu) {
    vfio_iommu_type1_dma_unmap un{};
    un.argsz = sizeof(un);
    un.iova = it->second.first;
    un.size = it->second.second;
    ::ioctl(container_, VFIO_IOMMU_UNMAP_DMA, &un);
    iova_.release(it->second.first, it->second.second);
  }
  (void)len;
  maps_.erase(it);
}

uint64_t VfioTransport::unmapped_iova() const {
  if (last_guard_iova_ != 0) return last_guard_iova_;
  return IovaAllocator::kDefaultBase - IovaAllocator::kGuardBytes;
}

volatile uint32_t* VfioTransport::bar0_for_gpu(std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bar0_gpu_) return bar0_gpu_;
  bar0_gpu_ = host::register_io_memory_for_gpu(const_cast<uint32_t*>(bar0_), info_.bar0_size,
                                               "BAR0 of " + info_.bdf, why);
  bar0_gpu_registered_ = bar0_gpu_ != nullptr;
  return bar0_gpu_;
}

std::unique_ptr<host::Transport> open_vfio_transport(std::string_view device) {
  return std::make_unique<VfioTransport>(device);
}

}  // namespace gpunvme::vfio
