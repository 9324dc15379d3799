// The header of a model a reader is about to use (the engine), checked: with a deploy record, every
// chunk the GGUF parser reads from (the header, the metadata and the tensor table: chunk 0, and the
// next ones for a header longer than a chunk) is read whole first and its CRC-32C compared with the
// record's; the parser only ever sees bytes that matched. So a block_count, a tensor offset or a
// type changed on the device after the deploy is refused with the fix before it can describe another
// model (a 1-layer model, tensors at other bytes), and a damaged header is reported as damage, not as
// whatever parse error its bytes happen to give. A chunk is 64 MiB at least, read once (the engine
// reads the rest of it anyway); the bytes past the first 64 MiB of a larger chunk are read again from
// the device when the parser asks for them.
//
// A model written by dd without a record has no CRCs: read_model_header() as ever, nothing checked.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/block_io.h"
#include "runtime/model/detect.h"

namespace gpunvme::model {

struct CheckedHeader {
  gguf::GgufFile file;
  std::vector<uint64_t> verified_chunks;  // read whole and equal to the record (none without a record)
  uint64_t bytes_checked = 0;
  double seconds = 0;                     // wall time of the chunk reads and their CRCs
};

// Throws ModelError naming the chunk, its bytes and LBAs, what it holds and the fix (`gpunvme verify
// --device ...`, re-deploy); `device_args` is how the fix names the device(s) ("--device emu:/a.img").
CheckedHeader read_checked_header(const BlockIo& io, const DetectedModel& m, const std::string& device_args);

}  // namespace gpunvme::model
