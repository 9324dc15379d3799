#include "runtime/plan/prp_table.h"

#include <string>

#include "host/error.h"

namespace gpunvme::plan {

namespace {
void check_geometry(uint64_t dest_bytes, uint64_t page) {
  if (page < 512 || (page & (page - 1)) != 0)
    throw Error(ErrorKind::kInvalidArgument, "PRP table: page size " + std::to_string(page) +
                                                 " is not a power of two >= 512 (CC.MPS)");
  if (dest_bytes == 0)
    throw Error(ErrorKind::kInvalidArgument, "PRP table: the destination buffer is empty");
}
uint64_t list_pages_for(uint64_t pages, uint64_t page) {
  const uint64_t per = page / 8 - 1;
  return (pages + per - 1) / per;
}
}  // namespace

PrpTable::PrpTable(host::Transport& transport, const host::DmaTranslation& dest, uint64_t dest_bytes, uint64_t page)
    : dest_(dest), dest_bytes_(dest_bytes), page_(page) {
  check_geometry(dest_bytes, page);
  pages_ = (dest_bytes + page - 1) / page;
  list_pages_ = list_pages_for(pages_, page);
  list_ = host::DmaBuffer(transport, list_pages_ * page_, host::DmaOptions{host::HugePages::kAuto});
  entries_ = list_.as<uint64_t>();
  list_translation_ = list_.translation();
  for (uint64_t j = 0; j < list_pages_; ++j)
    if ((list_bus(j) & (page_ - 1)) != 0)
      throw Error(ErrorKind::kResource, "PRP table: list memory is not aligned to the " + std::to_string(page_) +
                                            "-byte controller page");
  build(0);
}

PrpTable PrpTable::in_host_memory(const host::DmaTranslation& dest, uint64_t dest_bytes, uint64_t page,
                                  uint64_t list_bus_base) {
  check_geometry(dest_bytes, page);
  PrpTable t;
  t.dest_ = dest;
  t.dest_bytes_ = dest_bytes;
  t.page_ = page;
  t.pages_ = (dest_bytes + page - 1) / page;
  t.list_pages_ = list_pages_for(t.pages_, page);
  t.host_list_.assign(t.list_pages_ * page / 8, 0);
  t.entries_ = t.host_list_.data();
  t.list_translation_ = host::DmaTranslation::contiguous(list_bus_base);
  t.build(list_bus_base);
  return t;
}

void PrpTable::build(uint64_t) {
  const uint64_t per = per_list_page();
  const uint64_t slots = page_ / 8;
  uint64_t k = 0;
  for (uint64_t j = 0; j < list_pages_; ++j) {
    uint64_t* lp = entries_ + j * slots;
    const uint64_t n = pages_ - k < per ? pages_ - k : per;
    if (dest_.is_contiguous()) {
      uint64_t b = dest_.bus(k * page_);
      for (uint64_t i = 0; i < n; ++i, b += page_) lp[i] = b;
    } else {
      for (uint64_t i = 0; i < n; ++i) lp[i] = dest_.bus((k + i) * page_);
    }
    for (uint64_t i = n; i < per; ++i) lp[i] = 0;
    lp[per] = j + 1 < list_pages_ ? list_bus(j + 1) : 0;
    k += n;
  }
}

bool PrpTable::read_entry(uint64_t bus, uint64_t* value) const {
  if ((bus & 7) != 0) return false;
  for (uint64_t j = 0; j < list_pages_; ++j) {
    const uint64_t base = list_bus(j);
    if (bus >= base && bus < base + page_) {
      *value = entries_[j * (page_ / 8) + (bus - base) / 8];
      return true;
    }
  }
  return false;
}

}  // namespace gpunvme::plan
