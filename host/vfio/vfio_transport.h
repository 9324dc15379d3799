// A real controller through Linux VFIO: BAR0 mapped into this process, DMA through the IOMMU
// (type1v2) or, in no-IOMMU mode, by physical address from hugepage-backed locked memory.
// Device string: "vfio:0000:0b:00.0" (the domain may be left out). Setup: scripts/setup_vfio.sh.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "host/transport.h"
#include "host/vfio/iova_allocator.h"

namespace gpunvme::vfio {

class SysfsPci;

struct VfioOptions {
  std::string sysfs_root = "/sys";      // for tests
  std::string dev_vfio = "/dev/vfio";   // for tests
  bool reset = true;                    // function-level reset when the device offers it
  bool allow_noiommu = true;            // use /dev/vfio/noiommu-N when that is the only way in
};

// What the transport learned while opening the device, for logs and tests.
struct VfioInfo {
  std::string bdf;
  int group = -1;
  bool noiommu = false;
  bool reset_offered = false;
  bool reset_done = false;
  uint64_t bar0_size = 0;
  uint32_t num_regions = 0;
  uint64_t iova_pgsizes = 0;  // bitmap from VFIO_IOMMU_GET_INFO (0 in no-IOMMU mode)
  std::vector<IovaRange> iova_ranges;  // as the kernel reported them (empty: not reported)
};

class VfioTransport final : public host::Transport {
 public:
  // `device` is "vfio:BDF" or a bare BDF. Throws gpunvme::Error naming the fix on every failure.
  explicit VfioTransport(std::string_view device, const VfioOptions& options = {});
  ~VfioTransport() override;

  std::string name() const override { return "vfio:" + info_.bdf; }
  volatile uint32_t* bar0() override { return bar0_; }
  uint64_t bar0_size() const override { return info_.bar0_size; }
  host::DmaTranslation dma_map(void* vaddr, uint64_t len) override;
  void dma_unmap(void* vaddr, uint64_t len) noexcept override;
  bool physical_addressing() const override { return info_.noiommu; }
  volatile uint32_t* bar0_for_gpu(std::string* why) override;

  const VfioInfo& info() const { return info_; }
  // Read / write the PCI configuration space through VFIO's config region.
  uint16_t config_read16(uint32_t offset) const;
  void config_write16(uint32_t offset, uint16_t value);
  // An IOVA in a valid range that no dma_map of this transport covers (the guard page just past the
  // most recent mapping, or below the allocator's base): for tests that a stray DMA faults.
  uint64_t unmapped_iova() const;

 private:
  void open_all(std::string_view device, const VfioOptions& options);  // the phases below, in order
  static std::string parse_device(std::string_view device);
  void check_sysfs(const SysfsPci& sysfs);
  void attach_group(const SysfsPci& sysfs);
  void read_iommu_geometry();
  void release_all() noexcept;
  void open_container_and_group(const VfioOptions& options);
  void open_device();
  void map_bar0();
  void enable_bus_master();

  VfioInfo info_;
  std::string dev_vfio_;
  bool reset_requested_ = true;
  int container_ = -1;
  int group_fd_ = -1;
  int device_ = -1;
  uint64_t config_offset_ = 0;
  volatile uint32_t* bar0_ = nullptr;
  volatile uint32_t* bar0_gpu_ = nullptr;
  bool bar0_gpu_registered_ = false;
  std::mutex mu_;
  IovaAllocator iova_;
  std::map<uintptr_t, std::pair<uint64_t, uint64_t>> maps_;  // vaddr -> (iova, len)
  uint64_t last_guard_iova_ = 0;
};

// Factory for device-string dispatch (host/open_device.*): "vfio:..." -> a VfioTransport.
std::unique_ptr<host::Transport> open_vfio_transport(std::string_view device);

// True when `device` names this transport ("vfio:" prefix).
inline bool is_vfio_device_string(std::string_view device) { return device.rfind("vfio:", 0) == 0; }

}  // namespace gpunvme::vfio
