// gpunvme_extent_t <-> model::Extent.
#include "runtime/capi/capi_internal.h"

namespace gpunvme::capi {

model::Extent to_extent(const gpunvme_extent_t& e) {
  model::Extent x;
  x.first_lba = e.first_lba;
  x.lba_count = e.lba_count;
  x.byte_in_first = e.byte_in_first;
  x.byte_length = e.byte_length;
  return x;
}

gpunvme_extent_t from_extent(const model::Extent& x) {
  gpunvme_extent_t e{};
  e.first_lba = x.first_lba;
  e.lba_count = x.lba_count;
  e.byte_in_first = x.byte_in_first;
  e.byte_length = x.byte_length;
  return e;
}

}  // namespace gpunvme::capi
