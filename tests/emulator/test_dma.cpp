// The emulator's IOMMU: IOVAs that are not pointers, guard gaps, exact bounds, unmap semantics.
#include "tests/emulator/harness.h"

using namespace emutest;

TEST_CASE("DMA map hands out IOVAs that are not virtual addresses", "[emulator][dma]") {
  Harness h("emu:null");
  auto& c = h.ctrl();
  const size_t base = c.dma_mappings();
  auto a = h.alloc(3 * 4096);
  auto b = h.alloc(4096);
  CHECK(c.dma_mappings() == base + 2);
  CHECK(a->iova() >= gpunvme::emu::DmaTable::kIovaBase);
  CHECK(a->iova() != reinterpret_cast<uintptr_t>(a->as()));
  CHECK(b->iova() > a->iova() + a->size());  // a gap lies between mappings
  CHECK(c.dma_translate(a->iova(), a->size()) == a->as());
  CHECK(c.dma_translate(a->iova(100), 8) == a->as() + 100);
  CHECK(c.dma_translate(a->iova(), a->size() + 1) == nullptr);   // one byte too many
  CHECK(c.dma_translate(a->iova() + a->size(), 1) == nullptr);   // the guard gap
  CHECK(c.dma_translate(a->iova() - 1, 2) == nullptr);
  CHECK(c.dma_translate(reinterpret_cast<uintptr_t>(a->as()), 8) == nullptr);
  const uint64_t iova = b->iova();
  b->unmap();
  CHECK(c.dma_translate(iova, 1) == nullptr);
  CHECK(c.dma_mappings() == base + 1);
  // Page offsets within 2 MiB are kept, so the bus view of a buffer has the same alignment.
  CHECK((a->iova() & 0x1FFFFF) == (reinterpret_cast<uintptr_t>(a->as()) & 0x1FFFFF));
  CHECK_THROWS_AS(c.dma_map(a->as() + 1, 4096), gpunvme::Error);
  CHECK_THROWS_AS(c.dma_map(a->as(), 100), gpunvme::Error);
  c.dma_unmap(a->as() + 4096, 4096);  // not a mapping: ignored
  CHECK(c.dma_mappings() == base + 1);
}

TEST_CASE("unmapping live queue memory is a fatal controller error", "[emulator][dma]") {
  Harness h("emu:null,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 8);
  CHECK(status_of(h.run(q, nvme::make_read(1, 0, 1, 0, 0))).ok());
  q.sq->unmap();
  CHECK(wait_until([&] { return h.csts().cfs(); }));
  CHECK(h.ctrl().fatal_reason().find("SQ 1") != std::string::npos);
  REQUIRE(h.disable());
  CHECK_FALSE(h.csts().cfs());
}
