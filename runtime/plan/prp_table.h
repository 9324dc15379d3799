// A PRP table: one PRP list, built once at start-up in DMA memory, that describes a whole
// destination buffer (a streaming slot or an expert scratchpad). Any command whose data lands in
// the buffer then gets its PRP1/PRP2 from two loads and no list writes.
//
// Layout (E = page / 8 entries per list page; here "page" is CC.MPS):
//   data page k of the buffer (bytes [k*page, (k+1)*page)) has its entry in list page k / (E-1),
//   slot k % (E-1); slot E-1 of every list page is a chain pointer to the next list page.
//   So the list is one long chained PRP list, and a command whose data covers buffer pages p..q
//   (q >= p + 2) uses PRP1 = bus(offset), PRP2 = address of the entry of page p+1: the controller
//   reads entries p+1, p+2, ... and follows a chain pointer whenever it reaches slot E-1 with more
//   than one page left (NVMe Base 2.0 section 4.1.1, driver/prp.h walk_prps).
//
// The one window this layout cannot describe: a command whose LAST page q has its entry in slot 0
// of a list page (q % (E-1) == 0) and that reaches it through a chain slot. The controller is
// then at slot E-1 with exactly one page left, and the spec says that slot is data, not a chain
// pointer. command_fits() says when that happens; the plan builder (command_plan.h) shortens such
// a command by a few blocks, so every command it emits has a valid window. Cost: at most one extra
// command per (E-1) pages (2 MiB - 4 KiB at 4 KiB pages), and no per-command list memory.
//
// Why not per-command lists: a list per command per slot costs the same 8 bytes per page, but
// would be per (layer, slot) instead of per slot, i.e. n_layers times more PRP memory.
#pragma once
#include <cstdint>
#include <vector>

#include "driver/prp.h"
#include "host/dma_memory.h"
#include "host/transport.h"

namespace gpunvme::plan {

class PrpTable {
 public:
  PrpTable() = default;
  // Builds the table for `dest_bytes` bytes of a destination whose bus addresses `dest` gives,
  // in list memory allocated from `transport` (DMA mapped, so the controller can read it).
  PrpTable(host::Transport& transport, const host::DmaTranslation& dest, uint64_t dest_bytes, uint64_t page);
  // Same, for a DmaBuffer destination.
  PrpTable(host::Transport& transport, const host::DmaBuffer& dest, uint64_t page)
      : PrpTable(transport, dest.translation(), dest.size(), page) {}
  // Host-memory list with a made-up bus base (benchmarks and unit tests that walk it themselves).
  static PrpTable in_host_memory(const host::DmaTranslation& dest, uint64_t dest_bytes, uint64_t page,
                                 uint64_t list_bus_base);

  uint64_t page() const { return page_; }
  uint64_t dest_bytes() const { return dest_bytes_; }
  uint64_t list_bytes() const { return list_pages_ * page_; }  // PRP memory this table holds
  uint64_t per_list_page() const { return page_ / 8 - 1; }     // data entries per list page

  // Bus address of the list entry for data page k.
  uint64_t entry_bus(uint64_t k) const {
    const uint64_t per = per_list_page();
    return list_bus(k / per) + (k % per) * 8;
  }
  // Whether a command for [offset, offset + length) has a window this table can describe.
  bool command_fits(uint64_t offset, uint64_t length) const {
    if (length == 0 || (offset & 3) != 0 || offset + length > dest_bytes_) return false;
    const uint64_t p = offset / page_, q = (offset + length - 1) / page_;
    return q < p + 2 || q % per_list_page() != 0;
  }
  // PRP1/PRP2 for [offset, offset + length); the caller has checked command_fits().
  nvme::PrpPair prps(uint64_t offset, uint64_t length) const {
    const uint64_t p = offset / page_, q = (offset + length - 1) / page_;
    nvme::PrpPair r;
    r.prp1 = dest_.bus(offset);
    if (q == p + 1) r.prp2 = dest_.bus((p + 1) * page_);
    else if (q > p + 1) r.prp2 = entry_bus(p + 1);
    return r;
  }

  // Reads a list entry by bus address, as the controller would (tests walk commands with it).
  bool read_entry(uint64_t bus, uint64_t* value) const;

 private:
  void build(uint64_t list_bus_base_or_0);
  uint64_t list_bus(uint64_t list_page) const { return list_translation_.bus(list_page * page_); }

  host::DmaTranslation dest_;
  uint64_t dest_bytes_ = 0;
  uint64_t page_ = 4096;
  uint64_t pages_ = 0;
  uint64_t list_pages_ = 0;
  host::DmaBuffer list_;              // DMA list memory (empty for in_host_memory tables)
  std::vector<uint64_t> host_list_;   // host list memory for in_host_memory tables
  uint64_t* entries_ = nullptr;
  host::DmaTranslation list_translation_;
};

}  // namespace gpunvme::plan
